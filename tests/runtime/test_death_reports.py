"""A stage process that dies holds nothing, at once, in every view; readiness and
liveness through its restart (local supervisor; the Ray side is in test_ray_node_loss.py)."""

from __future__ import annotations

import asyncio

from runtime.health import assess
from runtime.supervisor import Proc
from tests.runtime.conftest import fresh_snapshot, linear, pid_alive


def stage(name: str, executor: str = "voice_server.testing.stages:Echo", **kw) -> dict:
    return {"name": name, "executor": executor, **kw}


COUNT = linear(stage("a"), stage("mid", "voice_server.testing.stages:Counter", scheduler="ar",
                                 args={"step_ms": 20}))


def dead_views(p, rid: int) -> list[str]:
    """What any view says a dead process holds (must stay empty)."""
    wrong = []
    for key, pr in p.snapshot()["processes"].items():
        if not pr["alive"] and (pr["held"] or pr["pool"]):
            wrong.append(f"{key} (dead) reports held={pr['held']} pool={pr['pool']}")
    st = p.status(rid)
    dead = {k for k, pr in p.snapshot()["processes"].items() if not pr["alive"]}
    if st is not None and dead & set(st["held_by"]):
        wrong.append(f"request {rid} held_by {st['held_by']} with {dead} dead")
    return wrong


async def test_killed_stage_holds_nothing_at_once_and_stays_ready_while_it_restarts(start):
    p = await start(COUNT)
    h = await p.submit({"start": 0, "n": 100_000})
    assert (await h.next_event(timeout=10)).kind == "chunk"
    snap = await fresh_snapshot(p)
    assert h.request_id in snap["processes"]["mid/0"]["held"]  # the report we must not keep
    assert "mid/0" in p.status(h.request_id)["held_by"]
    old_pid = snap["processes"]["mid/0"]["pid"]

    p.kill_stage("mid", 0)
    while not (ev := await h.next_event(timeout=5)).terminal:
        pass
    assert ev.kind == "error" and ev.error.code.value == "stage_unavailable"
    # the moment the request failed, the dead process reports nothing
    mid = p.snapshot()["processes"]["mid/0"]
    assert mid["held"] == [] and mid["down_s"] is not None and mid["recreating"]
    assert "mid/0" not in p.status(h.request_id)["held_by"]
    health = p.health(grace_s=10)
    assert health.live and health.ready and not health.all_ready, health
    assert not p.health(grace_s=0.0001).ready  # down longer than the bound: not ready

    wrong: list[str] = []
    for _ in range(400):  # until it is back: no view ever lists a held request for a dead process
        wrong += dead_views(p, h.request_id)
        pr = p.snapshot()["processes"]["mid/0"]
        if pr["ready"] and pr["pid"] != old_pid:
            break
        await asyncio.sleep(0.01)
    assert not wrong, wrong[:5]
    assert pr["alive"] and pr["down_s"] is None and not pr["recreating"]
    health = p.health(grace_s=10)
    assert health.live and health.ready and health.all_ready


async def test_a_stage_that_is_not_restarted_is_not_live_and_fails_its_requests_at_once(start):
    p = await start({**COUNT, "control": {"restart": False}})
    h = await p.submit({"start": 0, "n": 100_000})
    assert (await h.next_event(timeout=10)).kind == "chunk"
    p.kill_stage("mid", 0)
    term, _ = await h.result()
    assert term.kind == "error"
    health = p.health(grace_s=10)
    assert not health.live and not health.ready
    assert any("not being re-created" in r for r in health.reasons), health.reasons
    # a request that needs it fails at once, saying why, instead of waiting for its deadline
    term, _ = await (await p.submit({"start": 0, "n": 2})).result()
    assert term.kind == "error" and term.error.code.value == "stage_unavailable"
    assert "mid" in term.error.message and "not being re-created" in term.error.message


async def test_a_replacement_that_never_gets_ready_is_given_up_and_fails_requests_at_once(start):
    """The stage is killed, and its replacement hangs before it is ready (as one
    killed or starved while loading): the replica is given up, the hung process is
    stopped, and requests fail at once instead of waiting for their deadline."""
    import os
    import signal

    p = await start({**COUNT, "control": {"ready_timeout_s": 2}})
    old_pid = p.kill_stage("mid", 0)
    while (new_pid := p.snapshot()["processes"]["mid/0"]["pid"]) == old_pid:
        await asyncio.sleep(0.001)
    os.kill(new_pid, signal.SIGSTOP)  # within ms of its start: long before it is ready
    for _ in range(100):
        if not p.snapshot()["processes"]["mid/0"]["recreating"]:
            break
        await asyncio.sleep(0.1)
    t0 = asyncio.get_running_loop().time()
    term, _ = await (await p.submit({"start": 0, "n": 2})).result()
    assert asyncio.get_running_loop().time() - t0 < 1.0
    assert term.kind == "error" and term.error.code.value == "stage_unavailable"
    assert "its restart failed" in term.error.message, term.error.message
    for _ in range(50):
        if not pid_alive(new_pid):
            break
        await asyncio.sleep(0.1)
    assert not pid_alive(new_pid)
    assert not p.health(grace_s=10).live


def _proc(group: str, replica: int, *, ready: bool = False, down_s: float | None = None,
          recreating: bool = False) -> Proc:
    p = Proc(group, replica, ready=ready, recreating=recreating, alive=ready)
    p.down_since = None if down_s is None else 100.0 - down_s
    return p


def test_assess_readiness_and_liveness_by_group():
    up = [_proc("listen", 0, ready=True), _proc("think", 0, ready=True)]
    h = assess(up, now=100.0, grace_s=5)
    assert (h.live, h.ready, h.all_ready) == (True, True, True)
    # one of two replicas down: the group still has a ready one
    h = assess(up + [_proc("think", 1, down_s=60, recreating=True)], now=100.0, grace_s=5)
    assert (h.live, h.ready, h.all_ready) == (True, True, False)
    # the only replica being re-created: ready within the bound, not after it
    back_soon = [up[0], _proc("think", 0, down_s=2, recreating=True)]
    assert assess(back_soon, now=100.0, grace_s=5).ready
    late = assess([up[0], _proc("think", 0, down_s=6, recreating=True)], now=100.0, grace_s=5)
    assert late.live and not late.ready and "bound is 5 s" in late.reasons[0]
    # nothing re-creates it: restart the server
    gone = assess([up[0], _proc("think", 0, down_s=1)], now=100.0, grace_s=5)
    assert not gone.live and not gone.ready
    # first start, not up yet: live, not ready
    h = assess([up[0], _proc("think", 0)], now=100.0, grace_s=5)
    assert h.live and not h.ready
    assert not assess([], now=100.0, grace_s=5).ready
