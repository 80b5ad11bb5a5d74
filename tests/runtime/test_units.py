"""Unit tests of the runtime's small parts, no processes."""

import numpy as np
import pytest
import torch

from runtime import wire
from runtime.cuda_ipc import LEND_BASE, KeepAlive
from runtime.dataplane import DataPlane
from runtime.errors import ErrorCode, StageError, classify
from runtime.shm import ShmPool, list_segments, remove_segments
from runtime.tombstones import Tombstones


def test_wire_round_trips_nested_arrays_and_tensors():
    msg = {"a": np.arange(6, dtype=np.int16).reshape(2, 3), "t": torch.ones(3), "s": "x", "n": [1, 2.5, None],
           "b": b"\x00\x01"}
    out = wire.loads(wire.dumps(msg))
    assert np.array_equal(out["a"], msg["a"]) and out["a"].dtype == np.int16
    assert torch.equal(out["t"], msg["t"])
    assert out["s"] == "x" and out["n"] == [1, 2.5, None] and out["b"] == b"\x00\x01"


def test_wire_refuses_objects():
    with pytest.raises(TypeError):
        wire.dumps({"f": object()})
    with pytest.raises(TypeError):
        wire.dumps(np.array([object()]))


def test_tombstones_bounded_in_count_and_age():
    t = Tombstones(max_entries=100, ttl_s=10)
    for i in range(1000):
        t.add(i, now=0.0)
    assert len(t) == 100 and 999 in t and 0 not in t
    t.expire(now=11.0)
    assert len(t) == 0


def test_pool_lend_release_reclaim_and_stale_release():
    pool = ShmPool("va-unit-test-pool", max_lent_bytes=3 << 20)
    try:
        a = pool.lend(1 << 20, request_id=1)
        b = pool.lend(1 << 20, request_id=2)
        assert a and b and pool.lent_bytes == 2 << 20
        assert pool.lend(2 << 20, request_id=3) is None  # credit spent
        assert pool.release(a.lend_id) == 1 << 20
        assert pool.release(a.lend_id) == 0 and pool.stale_releases == 1  # freed exactly once
        n, freed = pool.reclaim(2)
        assert (n, freed) == (1, 1 << 20)
        assert pool.release(b.lend_id) == 0  # the late release after an abort is ignored
        c = pool.lend(1 << 20, request_id=4)
        assert c.segment.name in (a.segment.name, b.segment.name)  # reused, not re-created
        assert pool.stats().lent == 1
    finally:
        pool.close()
    assert list_segments("va-unit-test-pool") == []


def test_dataplane_shm_view_releases_when_dropped():
    owner = DataPlane("ipc://owner", ShmPool("va-unit-test-dp"), inline_max=1024)
    reader = DataPlane("ipc://reader", None, inline_max=1024)
    try:
        x = np.arange(100_000, dtype=np.float32)
        desc, frames = owner.pack(x, 7, "shm")
        assert desc["tr"] == "shm" and not frames
        y = reader.unpack(desc, [])
        assert np.array_equal(x, y)
        assert owner.pool.stats().lent == 1
        # Forwarding the very same array hands the lease on: no copy, no release yet.
        desc2, _ = reader.pack(y, 7, "shm")
        assert desc2["lid"] == desc["lid"] and desc2["own"] == "ipc://owner"
        del y
        assert not reader.take_releases()
        z = reader.unpack(desc2, [])
        del z
        rel = reader.take_releases()
        assert rel == {"ipc://owner": [desc["lid"]]}
        owner.release_lends(rel["ipc://owner"])
        assert owner.pool.stats().lent == 0
    finally:
        owner.close()
        reader.close()
        remove_segments("va-unit-test-dp")


@pytest.mark.parametrize("payload", [
    "text", {"k": [1, 2]}, b"x" * 10, b"y" * 5000, np.ones(10, np.int16),
    np.ones((300, 40), np.float64), torch.arange(5000, dtype=torch.float32), None, 3.5,
])
@pytest.mark.parametrize("transport", ["shm", "frame"])
def test_dataplane_round_trip_every_kind(payload, transport):
    owner = DataPlane("ipc://o", ShmPool("va-unit-test-rt"), inline_max=1024)
    reader = DataPlane("ipc://r", None, inline_max=1024)
    try:
        desc, frames = owner.pack(payload, 1, transport)
        out = reader.unpack(desc, list(frames))
        if isinstance(payload, np.ndarray):
            assert np.array_equal(out, payload) and out.dtype == payload.dtype
        elif isinstance(payload, torch.Tensor):
            assert isinstance(out, torch.Tensor) and torch.equal(out, payload)
        else:
            assert out == payload
    finally:
        owner.close()
        reader.close()
        remove_segments("va-unit-test-rt")


def test_cuda_keepalive_bookkeeping_on_cpu():
    ka = KeepAlive()
    t = torch.zeros(4)
    lid = ka.hold(5, t)
    assert lid >= LEND_BASE and len(ka) == 1
    assert ka.reclaim(5) == (1, 16)
    assert ka.release(lid) == 0


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="hardware, not a dependency: needs a CUDA device and this machine has none")
def test_cuda_ipc_export_open_same_process():
    from runtime import cuda_ipc
    ka = KeepAlive()
    t = torch.arange(10, device="cuda", dtype=torch.float32)
    desc = cuda_ipc.export(t, 1, ka, "owner")
    assert wire.loads(wire.dumps(desc))["h"] == desc["h"]


def test_error_classification_closed_set():
    assert classify(MemoryError()).code == ErrorCode.RESOURCE_EXHAUSTED
    assert classify(StageError("timeout", "x")).code == ErrorCode.TIMEOUT
    assert classify(ValueError("x")).code == ErrorCode.BAD_INPUT
    assert classify(RuntimeError("x")).code == ErrorCode.INTERNAL

    class OutOfMemoryError(RuntimeError):
        pass
    info = classify(OutOfMemoryError("CUDA"))
    assert info.code == ErrorCode.RESOURCE_EXHAUSTED and info.retryable


def test_heap_trimmer_runs_at_most_once_per_interval():
    import platform
    import time

    from runtime.heap import HeapTrimmer, trim_heap
    glibc = platform.libc_ver()[0] == "glibc"
    assert trim_heap() is glibc  # malloc_trim is glibc's; elsewhere there is nothing to trim
    t = HeapTrimmer(min_interval_s=60)
    assert t.request() is True
    assert t.request() is False  # too soon: dropped, the next close asks again
    deadline = time.monotonic() + 5  # the trim runs on a thread of its own
    while t.trims == 0 and glibc and time.monotonic() < deadline:
        time.sleep(0.01)
    assert t.trims == (1 if glibc else 0)


def test_request_ids_of_one_affinity_share_every_groups_replica():
    from runtime.request_ids import RequestIds

    ids = RequestIds([2, 3, 1], start=1000, max_keys=2)
    assert ids.period == 6
    got = [ids.next(k) for k in ["a", None, "b", "a", None, "a", "b"]]
    assert got == sorted(set(got))                         # unique and increasing
    a, b = [got[0], got[3], got[5]], [got[2], got[6]]
    assert len({x % 6 for x in a}) == 1 and len({x % 6 for x in b}) == 1
    assert a[0] % 6 != b[0] % 6                            # a new key takes the next residue
    ids.next("c")                                          # the least recently used ("a") is forgotten
    assert set(ids._residues) == {"b", "c"}
    assert RequestIds([1, 1], start=7).next("a") == 7      # one replica everywhere: plain counting


def test_cpu_wakeup_request_is_held_while_busy_and_let_go_after_the_linger(tmp_path):
    import struct

    from runtime.cpu_wakeup import CpuWakeupLatency

    dev = tmp_path / "cpu_dma_latency"
    dev.write_bytes(b"")
    q = CpuWakeupLatency(0, linger_s=5.0, device=str(dev))
    assert q.state == "released"
    q.update(False, now=1.0)
    assert q.state == "released" and q.holds == 0
    q.update(True, now=2.0)
    assert q.state == "held" and struct.unpack("=i", dev.read_bytes()) == (0,)
    q.update(False, now=6.9)                      # idle, but not for the whole linger yet
    assert q.state == "held"
    q.update(False, now=7.0)
    assert q.state == "released"
    q.update(True, now=8.0)
    assert q.state == "held" and q.holds == 2
    q.release()
    assert CpuWakeupLatency(None, device=str(dev)).state == "off"
    missing = CpuWakeupLatency(0, device=str(tmp_path / "no" / "such"))
    missing.update(True)
    missing.update(True)                           # told once: no retry at every message
    assert missing.state.startswith("unavailable: ") and "No such file" in missing.state


def test_while_pack_waits_for_credit_only_releases_and_data_are_handled_the_rest_waits():
    """A message that may send (and so enter pack again) is kept, in order, for
    the loop; a release, which gives the credit back, is handled at once."""
    from collections import deque

    from runtime import messages
    from runtime.stage_process import ProcessLoop

    loop = object.__new__(ProcessLoop)      # the message handling alone: no sockets
    loop.deferred = deque()
    seen: list[str] = []
    loop._dispatch = lambda msg, parts: seen.append(type(msg).__name__)
    for msg in (messages.Shutdown(), messages.Release([1]), messages.Hello()):
        loop.handle([messages.encode(msg)], blocked=True)
    assert seen == ["Release"] and [type(m).__name__ for m, _ in loop.deferred] == ["Shutdown", "Hello"]
    loop.handle_deferred()
    assert seen == ["Release", "Shutdown", "Hello"] and not loop.deferred
