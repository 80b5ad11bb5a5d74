"""Session churn: what N short calls leave in the server process's memory.

A real server (``voice-agent serve`` in its own process on 127.0.0.1, the real
configs/voice-cpu.yaml pipeline; voice_server.testing.server_process) and one
caller that opens N Realtime WebSocket sessions one after another: each
connects, waits for ``session.created``, with ``--turn`` (the default) asks one
short text turn (``conversation.item.create`` + ``response.create``, text out,
``--max-output-tokens`` tokens) and waits for its ``response.done``, then
closes.  ``--bare``: connect and close only.  ``--actions``: the soak's ways
of leaving instead (benchmarks/soak.py; voice_server.testing.callers.mid_reply):
each session speaks (flite, real time) and, in turn, hears one spoken reply
out (``turn``), talks over a long spoken reply (``barge``), sends
``response.cancel`` in it (``cancel``), or hangs up in it with a close frame
(``close``) or a TCP reset (``reset``); ``--callers`` of them at once.

Reports the server process's RSS after a warm-up, after 100 sessions and after
N, and the difference N - 100 (the target: within 2 MB for N = 1000), with the
coordinator's live and finished requests and the live sessions each time, all
read from outside through the admin endpoint ``GET /v1/runtime``.  The server
trims its heap at most every 30 s after a session closes (runtime/heap.py), so
each reading waits that long after the last session first.

    python benchmarks/session_churn.py                  # 1000 sessions, one turn each
    python benchmarks/session_churn.py -n 200 --bare    # writes benchmarks/results/session_churn.json
    python benchmarks/session_churn.py -n 400 --actions --callers 2   # the soak's actions
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
from pathlib import Path

from voice_server.testing.callers.mid_reply import ACTIONS
from voice_server.testing.realtime_client import RTClient
from voice_server.testing.report import write_json

ROOT = Path(__file__).resolve().parent.parent

KEY = "churn-key"
FIRST_MARK = 100          # the reading the growth is measured from
TRIM_WAIT_S = 31.0        # runtime/heap.py trims at most every 30 s
RSS_TARGET_MB = 2.0       # growth from FIRST_MARK to N sessions (N = 1000)


def rss_mb(pid: int) -> float:
    import psutil
    return round(psutil.Process(pid).memory_info().rss / 2**20, 2)


async def one_session(url: str, turn: bool, max_tokens: int) -> None:
    c = await RTClient.connect(url, key=KEY)
    try:
        await c.wait("session.created", timeout=30)
        if turn:
            await c.send({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "Say hello."}]}})
            await c.send({"type": "response.create", "response": {
                "output_modalities": ["text"], "max_output_tokens": max_tokens}})
            await c.wait("response.done", timeout=60)
    finally:
        await c.close()


def action_session(url: str, actions: list[str], speech: dict):
    """A session maker for ``--actions``: each call opens one session doing the
    next action of the cycle."""
    from voice_server.testing.callers.mid_reply import mid_reply_call
    cycle = itertools.cycle(actions)

    async def one() -> None:
        await mid_reply_call(url, KEY, speech, next(cycle))
    return one


async def run_sessions(one, count: int, callers: int) -> int:
    """``count`` sessions, ``callers`` at a time; returns how many raised."""
    left = [count]
    failed = [0]

    async def caller() -> None:
        while left[0] > 0:
            left[0] -= 1
            try:
                await one()
            except Exception:  # noqa: BLE001 - a caller's wait ran out on a busy machine
                failed[0] += 1
    await asyncio.gather(*(caller() for _ in range(callers)))
    return failed[0]


async def reading(srv, sessions: int, wait_s: float) -> dict:
    """The server's RSS and tables once its sessions closed and the heap trim ran."""
    deadline = time.monotonic() + 30
    rt = await srv.runtime()
    while (rt["sessions"] or rt["live_requests"]) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        rt = await srv.runtime()
    await asyncio.sleep(wait_s)
    rt = await srv.runtime()
    return {"sessions_done": sessions, "rss_mb": rss_mb(rt["pid"]),
            "live_sessions": rt["sessions"], "live_requests": rt["live_requests"],
            "finished_requests": rt.get("finished_requests")}


async def churn(srv, n: int, turn: bool, max_tokens: int, warmup: int, wait_s: float,
                actions: list[str] | None = None, callers: int = 1, every: int = 0) -> dict:
    marks = sorted({min(FIRST_MARK, n), n} | (set(range(every, n, every)) if every else set()))
    if actions:
        from voice_server.testing.callers import load_speech
        one = action_session(srv.url, actions, load_speech())
    else:
        async def one() -> None:
            await one_session(srv.url, turn, max_tokens)
    failed = await run_sessions(one, warmup, callers)
    readings = [await reading(srv, 0, wait_s)]
    t0 = time.monotonic()
    done = 0
    for mark in marks:
        failed += await run_sessions(one, mark - done, callers)
        done = mark
        readings.append(await reading(srv, done, wait_s))
    start = min(FIRST_MARK, n)
    first = next(r for r in readings if r["sessions_done"] == start)
    growth = round(readings[-1]["rss_mb"] - first["rss_mb"], 2)
    return {"sessions": n, "turn": turn, "actions": actions, "callers": callers,
            "failed_sessions": failed, "max_output_tokens": max_tokens, "warmup": warmup,
            "wall_s": round(time.monotonic() - t0, 1), "readings": readings,
            "rss_growth_mb": growth, "rss_growth_per_session_kb":
                round(growth * 1024 / (n - start), 2) if n > start else None,
            "rss_target_mb": RSS_TARGET_MB}


def run_churn(n: int, turn: bool = True, max_tokens: int = 8, warmup: int = 20,
              wait_s: float = TRIM_WAIT_S, config: str | None = None,
              actions: list[str] | None = None, callers: int = 1, every: int = 0) -> dict:
    from voice_server.testing.server_process import run_on_own_server
    cfg = config or str(ROOT / "configs" / "voice-cpu.yaml")
    env = {"VOICE_AGENT_API_KEYS": KEY, "VOICE_AGENT_MAX_SESSIONS": str(max(4, callers + 2)),
           "VOICE_AGENT_DRAIN_GRACE_S": "1", "VOICE_AGENT_ADMIN_KEYS": None}
    return run_on_own_server(cfg, env, lambda srv: churn(srv, n, turn, max_tokens, warmup, wait_s,
                                                         actions, callers, every))


def print_report(r: dict) -> None:
    kind = "one text turn each" if r["turn"] else "bare (connect, close)"
    if r.get("actions"):
        kind = f"actions {','.join(r['actions'])} in turn, {r['callers']} at a time"
    print(f"session churn: {r['sessions']} sessions, {kind}, {r['wall_s']} s"
          + (f", {r['failed_sessions']} failed" if r.get("failed_sessions") else ""))
    print(f"  {'after sessions':>14} {'server RSS MB':>13} {'live sessions':>13} "
          f"{'live requests':>13} {'finished requests':>17}")
    for x in r["readings"]:
        label = f"{x['sessions_done']}" if x["sessions_done"] else "warm-up"
        print(f"  {label:>14} {x['rss_mb']:>13} {x['live_sessions']:>13} "
              f"{x['live_requests']:>13} {x['finished_requests']!s:>17}")
    per = r["rss_growth_per_session_kb"]
    print(f"  RSS growth after {FIRST_MARK} -> {r['sessions']}: {r['rss_growth_mb']:+.2f} MB"
          + (f" ({per:+.2f} KB per session)" if per is not None else "")
          + f"; target within {r['rss_target_mb']} MB for 1000")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", "--sessions", type=int, default=1000)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--turn", dest="turn", action="store_true", default=True,
                      help="one short text turn per session (default)")
    mode.add_argument("--bare", dest="turn", action="store_false", help="connect and close only")
    mode.add_argument("--actions", nargs="?", const=",".join(ACTIONS), default=None,
                      help="spoken sessions that leave as the soak's callers do, in turn "
                           f"(comma-separated; default all of {','.join(ACTIONS)})")
    ap.add_argument("--callers", type=int, default=1, help="sessions open at once")
    ap.add_argument("--every", type=int, default=0,
                    help="a reading every this many sessions too (growth or plateau?)")
    ap.add_argument("--config", default=None, help="pipeline (default configs/voice-cpu.yaml)")
    ap.add_argument("--max-output-tokens", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=20, help="sessions before the first reading")
    ap.add_argument("--wait-s", type=float, default=TRIM_WAIT_S,
                    help="seconds to wait before each reading (the heap trim)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "session_churn.json"))
    a = ap.parse_args(argv)
    actions = a.actions.split(",") if a.actions else None
    if actions and set(actions) - set(ACTIONS):
        ap.error(f"--actions: unknown {sorted(set(actions) - set(ACTIONS))}; one of {ACTIONS}")
    r = run_churn(a.sessions, a.turn, a.max_output_tokens, a.warmup, a.wait_s, a.config,
                  actions, a.callers, a.every)
    print_report(r)
    write_json(a.out, r)
    return 0 if r["server_exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
