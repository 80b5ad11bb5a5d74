"""Sessions that come and go leave nothing behind in the server process (the
shared server of conftest.py, real sockets): callers open and close many
Realtime sessions, some bare, some with one text turn, in two equal rounds;
after each round every per-session table of the server (the session registry,
the WebSocket endpoint's runners, the coordinator's live requests, abort
tickets, finished requests and affinity keys, the loop's tasks) is back where
it started, no object type of the server grows with the number of sessions,
and every finished session's runner and core are garbage collected.

The same for calls that leave as the soak's callers do (benchmarks/soak.py,
voice_server.testing.callers.mid_reply): a spoken reply heard out, a barge-in,
``response.cancel`` mid-reply, a close frame or a TCP reset mid-reply - each
with requests in flight in every stage when it goes.  A caller whose hang-up
never reached the server once left its session open there (and everything
the session holds) until the idle timeout, 10 minutes later.

The coordinator keeps finished requests for ``recent_ttl_s`` (a stage's
tombstone age, 120 s): shrunk here so that the window is empty between rounds
and anything else kept per request would show.  benchmarks/session_churn.py
measures the same churn as the server's RSS.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref
from collections import Counter

import pytest

from voice_server.session_registry import registry_for
from voice_server.testing import TEST_API_KEY
from voice_server.testing.callers import load_speech
from voice_server.testing.callers.mid_reply import ACTIONS, mid_reply_call
from voice_server.testing.realtime_client import RTClient
from voice_server.testing.waiting import until

pytestmark = pytest.mark.timeout(180)

CALLERS = 4              # sessions open at once
PER_ROUND = 60           # sessions per round
TURN_EVERY = 4           # every 4th session asks one text turn, the rest connect and close
FINISHED_TTL_S = 0.3     # the coordinator's finished-request window, for this test
# modules whose objects belong to the server (the callers' own are in voice_server.testing)
SERVER_MODULES = ("voice_server.", "runtime.", "uvicorn.", "starlette.")


@contextlib.contextmanager
def finished_window(server, ttl_s: float):
    coord = server.pipeline.coordinator
    old = coord.recent_ttl_s
    server.call(setattr, coord, "recent_ttl_s", ttl_s)
    try:
        yield
    finally:
        server.call(setattr, coord, "recent_ttl_s", old)


async def one_session(server, turn: bool, refs: list) -> None:
    c = await RTClient.connect(server.url)
    sid = None
    try:
        sid = (await c.wait("session.created"))["session"]["id"]
        runner = server.runner(sid)
        assert runner is not None
        refs += [weakref.ref(runner), weakref.ref(runner.session)]
        del runner
        if turn:
            await c.send({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "Say hello."}]}})
            await c.send({"type": "response.create", "response": {
                "output_modalities": ["text"], "max_output_tokens": 4}})
            done = await c.wait("response.done", timeout=60)
            assert done["response"]["status"] in ("completed", "incomplete"), done
    finally:
        await c.close()
    for _ in range(200):   # the server closes it on its own time: its place comes back then
        if sid is None or server.runner(sid) is None:
            break
        await asyncio.sleep(0.02)
    assert sid is None or server.runner(sid) is None, f"session {sid} still open after its close"


async def churn(server, n: int, refs: list) -> None:
    queue = list(range(n))

    async def caller():
        while queue:
            i = queue.pop()
            await one_session(server, i % TURN_EVERY == 0, refs)
    await asyncio.gather(*(caller() for _ in range(CALLERS)))


def tables(server) -> dict:
    """Every per-session or per-request table of the server, by size (on its loop)."""
    def read():
        reg = registry_for(server.pipeline)
        coord = server.pipeline.coordinator
        coord.snapshot()   # lets the finished requests past their window go
        return {"registry": len(reg), "pending": reg.pending,
                "endpoint runners": len(server.app.state.realtime.runners),
                "live requests": len(coord.live), "finished requests": len(coord.recent),
                "abort tickets": len(coord.tickets), "affinity keys": len(coord._ids._residues),
                "routes": len(coord._routes), "lent buffers": coord.pool.stats().lent,
                "connections": len(server.server.server_state.connections),
                "tasks": len(asyncio.all_tasks())}
    return server.call(read)


def census(server) -> Counter:
    """Live objects of the server's own types, after a full collection."""
    def count():
        gc.collect()
        return Counter(f"{m}.{t.__qualname__}" for t, m in
                       ((t, t.__dict__.get("__module__")) for t in map(type, gc.get_objects()))
                       if isinstance(m, str) and m.startswith(SERVER_MODULES)
                       and not m.startswith("voice_server.testing"))
    return server.call(count)


async def quiet(server) -> dict:
    """Wait until no session is open and no request is live, then past the window."""
    snap = await server.settled()
    for _ in range(100):
        if not len(registry_for(server.pipeline)) and not snap["live_requests"]:
            break
        await asyncio.sleep(0.05)
        snap = await server.settled()
    await asyncio.sleep(FINISHED_TTL_S + 0.2)
    return tables(server)


async def back_to(server, base: dict, timeout: float = 10.0) -> dict:
    """The tables once they are ``base`` again, or as they are after ``timeout``:
    on a loaded machine a closing connection's task can still be running at
    the first reading; a leak never goes back."""
    after = await quiet(server)
    deadline = asyncio.get_running_loop().time() + timeout
    while after != base and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.1)
        after = tables(server)
    return after


async def test_many_sessions_leave_no_tables_or_objects_behind(server):
    refs: list[weakref.ref] = []
    with finished_window(server, FINISHED_TTL_S):
        await churn(server, 8, refs)                 # warm-up: first-use caches fill
        base = await quiet(server)
        assert base["registry"] == base["pending"] == base["endpoint runners"] == 0, base
        assert base["live requests"] == base["abort tickets"] == base["finished requests"] == 0, base
        objects = [census(server)]
        for _ in range(2):
            await churn(server, PER_ROUND, refs)
            after = await back_to(server, base)
            assert after == base, (base, after)
            objects.append(census(server))
    # a type with one object or more per session kept: a leak (a few come and go)
    grown = {t: n for t, n in (objects[2] - objects[1]).items() if n >= PER_ROUND // 2}
    assert not grown, grown
    grown_once = {t: n for t, n in (objects[1] - objects[0]).items() if n >= PER_ROUND // 2}
    assert not grown_once, grown_once
    server.call(gc.collect)
    alive = [r() for r in refs if r() is not None]
    assert not alive, f"{len(alive)} of {len(refs)} finished sessions' objects still alive: " \
                      f"{sorted({type(o).__name__ for o in alive})}"
    assert len(refs) == 2 * (8 + 2 * PER_ROUND)


MID_REPLY_ROUNDS = 2     # every action this many times, all of one round at once


async def test_calls_that_leave_mid_reply_leave_no_tables_or_objects_behind(server):
    speech = load_speech()
    seen: dict[str, weakref.ref] = {}   # every session's runner, while it was open

    async def watch() -> None:
        reg = registry_for(server.pipeline)
        while True:
            items = await server.acall(lambda: list(reg.runners.items()))
            for sid, runner in items:
                seen.setdefault(sid, weakref.ref(runner))
            items = runner = None   # no strong reference kept here
            await asyncio.sleep(0.05)

    async def call(action: str) -> None:
        sid = await mid_reply_call(server.url, TEST_API_KEY, speech, action)
        await until(lambda: server.runner(sid) is None, 30,
                    f"the server to close session {sid} after its {action} call")

    with finished_window(server, FINISHED_TTL_S):
        watcher = asyncio.ensure_future(watch())
        try:
            base = None    # after the first round (first-use caches such as routes filled)
            for _ in range(MID_REPLY_ROUNDS):
                await asyncio.gather(*(call(a) for a in ACTIONS))
                after = await quiet(server)
                assert after["registry"] == after["endpoint runners"] == after["pending"] == 0, after
                assert after["live requests"] == after["abort tickets"] == 0, after
                assert after["finished requests"] == after["lent buffers"] == 0, after
                assert after == (base or after), (base, after)
                base = after
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
    assert len(seen) == MID_REPLY_ROUNDS * len(ACTIONS), sorted(seen)
    server.call(gc.collect)
    alive = [sid for sid, r in seen.items() if r() is not None]
    assert not alive, f"finished sessions' runners still alive: {alive}"
