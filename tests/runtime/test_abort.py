"""Distributed abort: the three races, the gate, the acks, and no leaks after many aborts."""

import asyncio
import random

import numpy as np

from tests.runtime.conftest import fresh_snapshot, linear, settle

COUNTER = "voice_server.testing.stages:Counter"


def three_stage(step_ms=2.0, **extra):
    return linear({"name": "a", "executor": "voice_server.testing.stages:Echo"},
                  {"name": "gen", "executor": COUNTER, "scheduler": "ar", "max_batch": 64,
                   "args": {"step_ms": step_ms}},
                  {"name": "c", "executor": "voice_server.testing.stages:Doubler", "scheduler": "chunk"}, **extra)


async def drain(h):
    """Every event the caller gets; the stream must end with exactly one terminal event."""
    out = []
    async for ev in h:
        out.append(ev)
    assert out and out[-1].terminal and not any(e.terminal for e in out[:-1])
    return out


async def assert_no_leaks(p, tasks_before):
    await fresh_snapshot(p)
    snap = await settle(p)
    assert snap["live_requests"] == 0
    assert snap["coordinator_pool"]["lent"] == 0, snap["coordinator_pool"]
    for name, pr in snap["processes"].items():
        assert pr["held"] == [], (name, pr["held"])
        assert pr["pool"]["lent"] == 0, (name, pr["pool"])
    gen = snap["processes"].get("gen/0", {}).get("stages", {}).get("gen")
    assert gen is None or (gen["running"] == 0 and gen["waiting"] == 0 and gen["executor"]["active"] == 0)
    assert len(asyncio.all_tasks()) <= tasks_before
    return snap


async def test_abort_overtakes_the_request(start):
    p = await start(three_stage())
    tasks_before = len(asyncio.all_tasks())
    for _ in range(100):
        h = await p.submit({"start": 0, "n": 50})
        ticket = p.abort(h.request_id, "test")  # same loop turn: the abort may reach a stage first
        evs = await drain(h)
        assert [e.kind for e in evs] == ["cancelled"]  # the gate: nothing before, nothing after
        await asyncio.wait_for(ticket.acked, 5)
    await assert_no_leaks(p, tasks_before)


async def test_abort_mid_step_discards_the_step(start):
    step_ms = 100
    p = await start(three_stage(step_ms=step_ms))
    tasks_before = len(asyncio.all_tasks())
    h = await p.submit({"start": 0, "n": 1000})
    first = await h.next_event(timeout=10)
    assert first.kind == "chunk"
    await asyncio.sleep(step_ms / 2000)  # about half-way through the next step
    ticket = p.abort(h.request_id, "barge_in")
    got = await asyncio.wait_for(ticket.acked, 5)
    assert "gen" in got.held_by  # the generating stage had it and dropped it
    # How soon the ack comes (within what is left of the running step) is a
    # timing: benchmarks/runtime_bench.py's abort_ack_ms.mid_step measures it.
    ev = await h.next_event(timeout=1)
    assert ev.kind == "cancelled" and ev.reason == "barge_in"
    await asyncio.sleep(0.2)  # late chunks from the discarded step would show here
    assert p.status(h.request_id)["state"] == "cancelled"
    await assert_no_leaks(p, tasks_before)


async def test_abort_while_payload_in_flight_frees_buffers(start):
    p = await start(linear({"name": "a", "executor": "voice_server.testing.stages:Echo", "args": {"copy": True}},
                           {"name": "b", "executor": "voice_server.testing.stages:Echo", "args": {"copy": True, "sleep_ms": 3}},
                           {"name": "c", "executor": "voice_server.testing.stages:Echo"}))
    tasks_before = len(asyncio.all_tasks())
    x = np.ones(1 << 18, np.float32)  # 1 MB: travels through shared memory
    rng = random.Random(1)
    for i in range(60):
        h = await p.submit(x)
        await asyncio.sleep(rng.uniform(0, 0.004))
        p.abort(h.request_id)
        evs = await drain(h)
        assert evs[-1].kind in ("cancelled", "done")
    await assert_no_leaks(p, tasks_before)


async def test_one_thousand_random_aborts_leave_nothing_behind(start):
    p = await start(three_stage(step_ms=1.0))
    tasks_before = len(asyncio.all_tasks())
    rng = random.Random(7)
    outcomes = {"cancelled": 0, "done": 0}

    async def one(i):
        payload = {"start": i, "n": rng.randint(1, 30)}
        h = await p.submit(payload)
        await asyncio.sleep(rng.choice([0, 0, 0.001, 0.003, 0.01, 0.03]))
        p.abort(h.request_id, "random")
        evs = await drain(h)
        outcomes[evs[-1].kind] += 1
        if evs[-1].kind == "cancelled":
            assert len(evs) == 1  # nothing queued before the cancel is delivered

    for batch in range(0, 1000, 50):
        await asyncio.gather(*(one(i) for i in range(batch, batch + 50)))
    assert outcomes["cancelled"] > 500 and sum(outcomes.values()) == 1000
    snap = await assert_no_leaks(p, tasks_before)
    assert all(pr["tombstones"] <= 16384 for pr in snap["processes"].values())
    segs_running = p.segments()
    await p.close()
    assert p.segments() == [] and all(s.startswith(p.shm_prefix) for s in segs_running)


async def test_abort_of_unknown_or_finished_request_is_harmless(start):
    p = await start(three_stage())
    h = await p.submit({"start": 0, "n": 2})
    await drain(h)
    t = p.abort(h.request_id)
    await asyncio.wait_for(t.acked, 1)
    t = p.abort(123)
    await asyncio.wait_for(t.acked, 1)
    h2 = await p.submit({"start": 0, "n": 2})
    evs = await drain(h2)
    assert [e.payload for e in evs[:-1]] == [0, 2]
