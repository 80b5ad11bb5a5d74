"""Real stage processes on real sockets: topology, streaming, placement, transports."""

import asyncio
import os

import numpy as np
import pytest
import torch

from runtime.config import ConfigError
from runtime.pipeline import Pipeline
from runtime.request_lifecycle import RequestView
from runtime.shm import list_segments
from runtime.supervisor import StageStartError
from tests.runtime.conftest import fresh_snapshot, linear, pid_alive, settle

ECHO = "voice_server.testing.stages:Echo"


def stage(name, executor=ECHO, **kw):
    return {"name": name, "executor": executor, **kw}


async def test_three_stage_stream_edge_streams_while_upstream_produces(start):
    cfg = linear(stage("a"),
                 stage("count", "voice_server.testing.stages:Counter", scheduler="ar", args={"step_ms": 15}),
                 stage("double", "voice_server.testing.stages:Doubler", scheduler="chunk"))
    p = await start(cfg)
    h = await p.submit({"start": 1, "n": 8})
    first = await h.next_event(timeout=10)
    assert first.kind == "chunk" and first.stage == "double" and first.payload == 2
    # The first chunk arrived while the upstream stage was still generating.
    st = p.status(h.request_id)
    assert st["state"] == "running" and not st["stages"]["count"]["done"]
    term, rest = await h.result()
    assert term.kind == "done"
    assert [first.payload] + [c.payload for c in rest] == [2 * i for i in range(1, 9)]
    st = p.status(h.request_id)
    assert st["state"] == "completed" and st["total_ms"] > 0


async def test_finished_requests_keep_no_payloads(start):
    """The coordinator remembers the last finished requests for /v1/requests/{id};
    an unread reply's chunks and the request's params must not live on with them."""
    p = await start(linear(stage("count", "voice_server.testing.stages:Counter", scheduler="ar",
                                 args={"step_ms": 5})))
    h = await p.submit({"start": 1, "n": 6, "blob": "x" * 100_000})
    await h.next_event(timeout=10)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while p.status(h.request_id)["state"] == "running":  # the rest arrives; nobody reads it
        assert loop.time() < deadline, p.status(h.request_id)
        await asyncio.sleep(0.02)
    await h.abort("cancelled")  # too late: harmless
    kept = p.coordinator.recent[h.request_id]
    assert isinstance(kept, RequestView)   # slotted: no events, params, waiter or timer
    assert not any(hasattr(kept, a) for a in ("events", "params", "waiter", "timer", "__dict__"))
    st = p.status(h.request_id)
    assert st["state"] == "completed" and "count" in st["stages"]
    # the caller's handle still drains its own copy
    term, chunks = await h.result()
    assert term.kind == "done" and [c.payload for c in chunks] == [2, 3, 4, 5, 6]


async def test_fan_out_and_fan_in(start):
    cfg = {"stages": [stage("src", "voice_server.testing.stages:Tag", args={"tag": "s"}),
                      stage("left", "voice_server.testing.stages:Tag", args={"tag": "l"}),
                      stage("right", "voice_server.testing.stages:Tag", args={"tag": "r"}),
                      stage("join", "voice_server.testing.stages:Tag", args={"tag": "j"})],
           "edges": [{"from": "src", "to": "left", "kind": "final"}, {"from": "src", "to": "right", "kind": "final"},
                     {"from": "left", "to": "join", "kind": "final"}, {"from": "right", "to": "join", "kind": "final"}]}
    p = await start(cfg)
    results = []
    for _ in range(5):
        h = await p.submit([])
        term, chunks = await h.result()
        assert term.kind == "done"
        results.append(chunks[-1].payload)
    assert all(r == ["s", "l", "s", "r", "j"] for r in results)


async def _run_mixed(p):
    out = []
    for payload in [np.arange(50_000, dtype=np.float32), "hello", {"k": [1, 2]}, b"z" * 200_000,
                    torch.arange(30_000, dtype=torch.int32)]:
        h = await p.submit(payload)
        term, chunks = await h.result()
        assert term.kind == "done", term
        out.append(chunks[-1].payload)
    return out


async def test_fused_and_separate_placement_give_identical_results(start):
    base = linear(stage("a"), stage("b", "voice_server.testing.stages:Doubler", scheduler="chunk"), stage("c"))
    separate = await start(base)
    fused_cfg = dict(base, placement={"groups": [{"name": "all", "stages": ["a", "b", "c"]}]})
    fused = await start(fused_cfg)
    r1 = await _run_mixed(separate)
    r2 = await _run_mixed(fused)
    for x, y in zip(r1, r2):
        if isinstance(x, np.ndarray):
            assert np.array_equal(x, y)
        elif isinstance(x, torch.Tensor):
            assert torch.equal(x, y)
        else:
            assert x == y
    assert np.array_equal(r1[0], np.arange(50_000, dtype=np.float32) * 2)
    assert r1[1] == "HELLO"
    assert len(fused.snapshot()["processes"]) == 1 and len(separate.snapshot()["processes"]) == 3


async def test_tcp_control_plane_and_frame_transport(start):
    cfg = linear(stage("a"), stage("b"), control={"transport": "tcp"},
                 placement={"groups": [{"name": "a", "stages": ["a"]}, {"name": "b", "stages": ["b"], "host": "other"}]})
    p = await start(cfg)
    x = np.random.default_rng(0).standard_normal(300_000).astype(np.float32)
    h = await p.submit(x)
    term, chunks = await h.result()
    assert term.kind == "done" and np.array_equal(chunks[0].payload, x)
    assert p.endpoints.coordinator.startswith("tcp://127.0.0.1:")


async def test_memory_error_fails_only_that_request_of_a_batch(start):
    p = await start(linear(stage("a", max_batch=4, max_wait_ms=200)))
    handles = [await p.submit(np.full(10, i), params={"raise": "memory"} if i == 2 else {}) for i in range(4)]
    results = [await h.result() for h in handles]
    kinds = [r[0].kind for r in results]
    assert kinds == ["done", "done", "error", "done"]
    err = results[2][0].error
    assert err.code.value == "resource_exhausted" and err.retryable and err.stage == "a"
    stats = (await fresh_snapshot(p))["processes"]["a/0"]["stages"]["a"]
    assert max(int(k) for k in stats["batch_sizes"]) >= 2  # they really were one batch


async def test_whole_batch_exception_is_isolated_to_the_culprit(start):
    p = await start(linear(stage("a", max_batch=4, max_wait_ms=200)))
    handles = [await p.submit(i, params={"raise": "bad"} if i == 1 else {}) for i in range(3)]
    kinds = [(await h.result())[0] for h in handles]
    assert [k.kind for k in kinds] == ["done", "error", "done"]
    assert kinds[1].error.code.value == "bad_input"


async def test_ar_oom_mid_generation_spares_batch_mates(start):
    p = await start(linear(stage("count", "voice_server.testing.stages:Counter", scheduler="ar", max_batch=8)))
    good = [await p.submit({"start": 0, "n": 6}) for _ in range(3)]
    bad = await p.submit({"start": 0, "n": 6, "fail_at": 3})
    oom_prefill = await p.submit({"fail_prefill": True})
    for h in good:
        term, chunks = await h.result()
        assert term.kind == "done" and [c.payload for c in chunks] == list(range(6))
    term, chunks = await bad.result()
    assert term.kind == "error" and term.error.code.value == "resource_exhausted"
    assert [c.payload for c in chunks] == [0, 1, 2]  # what was emitted before the failure arrived in-band
    term, _ = await oom_prefill.result()
    assert term.kind == "error" and term.error.code.value == "resource_exhausted"
    await fresh_snapshot(p)
    snap = await settle(p)
    assert snap["processes"]["count/0"]["stages"]["count"]["executor"]["active"] == 0


async def test_deadlines_end_hung_requests_with_timeout(start):
    p = await start(linear(stage("a")))
    h = await p.submit(1, params={"hang_s": 1.5}, deadline_s=0.3)
    term, _ = await h.result()
    assert term.kind == "error" and term.error.code.value == "timeout"
    # The stage comes out of its hang and serves again.
    h2 = await p.submit(2)
    term, chunks = await h2.result()
    assert term.kind == "done" and chunks[0].payload == 2


async def test_stage_deadline_fails_a_stuck_stream(start):
    p = await start(linear(stage("d", "voice_server.testing.stages:Doubler", scheduler="chunk", deadline_s=0.3)))
    h = await p.submit(1, stream_input=True)
    term, chunks = await h.result()  # input never ends: the stage's own deadline ends it
    assert term.kind == "error" and term.error.code.value == "timeout" and term.error.stage == "d"


async def test_streaming_input(start):
    p = await start(linear(stage("d", "voice_server.testing.stages:Doubler", scheduler="chunk")))
    h = await p.submit(None, stream_input=True)
    for i in range(5):
        await h.send(i)
    await h.end_input()
    term, chunks = await h.result()
    assert term.kind == "done" and [c.payload for c in chunks] == [0, 2, 4, 6, 8]


async def test_chunk_scheduler_small_first_slice_then_larger(start):
    p = await start(linear(stage("d", "voice_server.testing.stages:Doubler", scheduler="chunk", first_chunk=10, chunk_size=40)))
    h = await p.submit(None, stream_input=True)
    for _ in range(5):
        await h.send(np.ones(25, np.int16))
    await h.end_input()
    term, chunks = await h.result()
    assert term.kind == "done"
    assert [len(c.payload) for c in chunks] == [10, 40, 40, 35]


async def test_killed_stage_fails_only_its_requests_and_comes_back(start):
    cfg = linear(stage("a"),
                 stage("mid", "voice_server.testing.stages:Counter", scheduler="ar", args={"step_ms": 20}),
                 stage("c", "voice_server.testing.stages:Doubler", scheduler="chunk"),
                 placement={"groups": [{"name": "mid", "stages": ["mid"], "replicas": 2}]})
    p = await start(cfg)
    handles = {}
    while len(handles) < 2:  # one request on each replica
        h = await p.submit({"start": 0, "n": 60})
        handles.setdefault(h.request_id % 2, h)
    for h in handles.values():
        assert (await h.next_event(timeout=10)).kind == "chunk"
    victim = handles[0]
    old_pid = p.snapshot()["processes"]["mid/0"]["pid"]
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    p.kill_stage("mid", 0)
    while True:
        ev = await victim.next_event(timeout=5)
        if ev.terminal:
            break
    failed_after = loop.time() - t0
    assert ev.kind == "error" and ev.error.code.value == "stage_unavailable" and ev.error.retryable
    assert failed_after < 1.0, f"affected request failed only after {failed_after:.2f}s"
    term, chunks = await handles[1].result()
    assert term.kind == "done"
    # The stage comes back and serves the next request on that replica.
    for _ in range(200):
        pr = p.snapshot()["processes"]["mid/0"]
        if pr["ready"] and pr["pid"] != old_pid:
            break
        await asyncio.sleep(0.05)
    assert pr["restarts"] == 1 and not pid_alive(old_pid)
    while True:
        h = await p.submit({"start": 5, "n": 2})
        if h.request_id % 2 == 0:
            break
        await h.result()
    term, chunks = await h.result()
    assert term.kind == "done" and [c.payload for c in chunks] == [10, 12]


async def test_requests_of_one_affinity_reach_the_same_replicas(start):
    """A conversation's requests meet its cached cells: one replica of each group."""
    cfg = linear(stage("a"),
                 stage("mid", "voice_server.testing.stages:Counter", scheduler="ar"),
                 stage("c", "voice_server.testing.stages:Doubler", scheduler="chunk"),
                 placement={"groups": [{"name": "mid", "stages": ["mid"], "replicas": 2},
                                       {"name": "c", "stages": ["c"], "replicas": 3}]})
    p = await start(cfg)
    rids = {"call-1": [], "call-2": []}
    for key in ["call-1", "call-2", "call-1", "call-1", "call-2", "call-1"]:
        h = await p.submit({"start": 1, "n": 2}, affinity=key)
        term, chunks = await h.result()
        assert term.kind == "done" and [c.payload for c in chunks] == [2, 4]
        if key:
            rids[key].append(h.request_id)
    for replicas in (2, 3):
        for ids in rids.values():
            assert len({rid % replicas for rid in ids}) == 1
    assert rids["call-1"][0] % 2 != rids["call-2"][0] % 2       # new conversations spread
    snap = await fresh_snapshot(p)
    served = {r: snap["processes"][f"mid/{r}"]["stages"]["mid"]["executor"]["released"] for r in (0, 1)}
    assert served == {rids["call-1"][0] % 2: 4, rids["call-2"][0] % 2: 2}


async def test_stages_with_requests_hold_the_cpu_wakeup_request(start):
    """Where /dev/cpu_dma_latency may be written (root), a busy stage holds it;
    elsewhere the stats say why not and requests run as before."""
    cfg = linear(stage("a"), stage("b"), cpu_wakeup_latency_us=0)
    p = await start(cfg)
    h = await p.submit([1, 2])
    term, chunks = await h.result()
    assert term.kind == "done"
    snap = await fresh_snapshot(p)
    states = {k: pr["cpu_wakeup"] for k, pr in snap["processes"].items()}
    if os.access("/dev/cpu_dma_latency", os.W_OK):
        assert set(states.values()) == {"held"}     # within 5 s of their last request
    else:
        assert all(s.startswith("unavailable: ") for s in states.values())
    plain = await start(linear(stage("a")))
    assert {pr["cpu_wakeup"] for pr in (await fresh_snapshot(plain))["processes"].values()} == {"off"}


async def test_input_buffer_of_a_killed_stage_comes_back(start):
    """A stage killed while it reads a shared-memory input never releases it; the
    coordinator takes it back with the stage's death."""
    p = await start(linear(stage("slow", args={})))
    h = await p.submit(np.ones(1 << 20, np.uint8), params={"hang_s": 30})  # > inline: shm
    await asyncio.sleep(0.5)
    assert p.snapshot()["coordinator_pool"]["lent"] == 1
    p.kill_stage("slow", 0)
    term, _ = await h.result()
    assert term.kind == "error" and term.error.code.value == "stage_unavailable"
    assert p.snapshot()["coordinator_pool"]["lent"] == 0, p.snapshot()["coordinator_pool"]


async def test_failed_start_names_the_stage_and_leaves_nothing(start):
    cfg = linear(stage("ok"), stage("broken", "voice_server.testing.stages:Crash"))
    made: list[Pipeline] = []

    class Seen(Pipeline):   # the pipeline that fails, so that its own segments are known
        def __init__(self, cfg) -> None:
            super().__init__(cfg)
            made.append(self)

    with pytest.raises(StageStartError, match="broken.*cannot load"):
        await Seen.start(cfg)
    # its segments only: another pytest worker may hold segments of its own meanwhile
    assert made and list_segments(made[0].shm_prefix) == []


async def test_missing_executor_is_a_config_error(start):
    with pytest.raises(ConfigError, match="stages\\[0\\].executor"):
        await start(linear(stage("x", "tests.nothing_here:Nope")))


async def test_clean_shutdown_leaves_no_process_socket_or_segment(start):
    p = await start(linear(stage("a"), stage("b"), stage("c")))
    for _ in range(5):
        h = await p.submit(np.ones(1 << 18, np.float32))
        await h.result()
    assert p.segments()  # pools hold reusable segments while running
    pids = [pr["pid"] for pr in p.snapshot()["processes"].values()]
    run_dir = p.endpoints.run_dir
    await p.close()
    assert not any(pid_alive(pid) for pid in pids)
    assert p.segments() == []
    assert not os.path.exists(run_dir)


async def test_a_malformed_message_fails_its_request_not_the_stage(start):
    import zmq

    from runtime import messages, wire
    from runtime.messages import ENTRY_SRC, Data

    p = await start(linear(stage("d", "voice_server.testing.stages:Doubler", scheduler="chunk")))
    h = await p.submit(None, stream_input=True)
    pid = p.snapshot()["processes"]["d/0"]["pid"]
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.connect(p.endpoints.of("d", 0))
    sock.send(messages.encode(Data("d", h.request_id, ENTRY_SRC, payload={"tr": "bogus"})))
    term, _ = await asyncio.wait_for(h.result(), 10)
    sock.close(0)
    assert term.kind == "error" and term.error.code.value == "bad_input"
    # A data message that is not even readable (no destination) fails its request too.
    h3 = await p.submit(None, stream_input=True)
    sock = ctx.socket(zmq.PUSH)
    sock.connect(p.endpoints.of("d", 0))
    sock.send(wire.dumps({"t": Data.TAG, "rid": h3.request_id, "src": ENTRY_SRC}))
    term, _ = await asyncio.wait_for(h3.result(), 10)
    sock.close(0)
    assert term.kind == "error" and term.error.code.value == "bad_input", term
    h2 = await p.submit(21)
    term, chunks = await h2.result()
    assert term.kind == "done" and chunks[0].payload == 42
    assert p.snapshot()["processes"]["d/0"]["pid"] == pid  # the same process: it did not crash
    ctx.term()


async def test_tcp_with_curve_admits_only_the_pipelines_own_keys(start):
    import zmq

    from runtime import messages
    from runtime.errors import ErrorCode, ErrorInfo
    from runtime.messages import Failure

    cfg = linear(stage("d", "voice_server.testing.stages:Doubler", scheduler="chunk"),
                 control={"transport": "tcp", "curve": True})
    p = await start(cfg)
    assert p.curve is not None
    h = await p.submit(None, stream_input=True)
    await h.send(1)
    assert (await h.next_event(timeout=10)).payload == 2  # the pipeline itself talks CURVE
    # A stranger (no keys, or keys of its own) cannot inject a failure into the request.
    ctx = zmq.Context()
    plain = ctx.socket(zmq.PUSH)
    plain.setsockopt(zmq.LINGER, 0)
    plain.connect(p.endpoints.coordinator)
    forged = ctx.socket(zmq.PUSH)
    forged.setsockopt(zmq.LINGER, 0)
    forged.curve_serverkey = p.curve.server_public
    forged.curve_publickey, forged.curve_secretkey = zmq.curve_keypair()
    forged.connect(p.endpoints.coordinator)
    bogus = messages.encode(Failure(h.request_id, ErrorInfo.make(ErrorCode.INTERNAL, "forged")))
    for s in (plain, forged):
        s.send(bogus, zmq.NOBLOCK)
    await asyncio.sleep(0.5)
    await h.send(2)
    await h.end_input()
    term, chunks = await h.result()
    assert term.kind == "done" and [c.payload for c in chunks] == [4]
    for s in (plain, forged):
        s.close(0)
    ctx.term()


def test_tcp_on_a_routable_address_without_curve_is_refused():
    from runtime.config import parse_config

    cfg = linear(stage("a"), control={"transport": "tcp", "tcp_host": "0.0.0.0", "curve": False})
    with pytest.raises(ConfigError, match="control.curve"):
        parse_config(cfg)
    ok = parse_config(linear(stage("a"), control={"transport": "tcp", "tcp_host": "0.0.0.0"}))
    assert ok.uses_curve()


async def test_a_prefill_only_request_ends_at_once_on_an_engine_that_keeps_nothing(start):
    """PREFILL_ONLY asks an AR stage to decode a prompt for later; one whose
    executor cannot keep it (prefills_only False) ends it with no output.  So
    does FORGET (a conversation is over) on an engine that keeps nothing."""
    from runtime.executor import CONVERSATION, FORGET, PREFILL_ONLY

    p = await start(linear(stage("count", "voice_server.testing.stages:Counter", scheduler="ar",
                                 args={"step_ms": 5})))
    for params in ({PREFILL_ONLY: True}, {FORGET: True, CONVERSATION: "sess_1"}):
        h = await p.submit({"start": 1, "n": 6}, params=params)
        term, chunks = await h.result()
        assert term.kind == "done" and chunks == [], params
    h = await p.submit({"start": 1, "n": 3})     # the stage goes on as before
    term, chunks = await h.result()
    assert term.kind == "done" and [c.payload for c in chunks] == [1, 2, 3]
