"""Runtime benchmark: 3 stages, each in its own process, identity executors.

Every figure is measured in one run on this machine, beside its baseline
(numpy memcpy of the same size, a raw pyzmq ipc round trip), because these
VMs are noisy: compare ratios, not absolute numbers across runs.

    python benchmarks/runtime_bench.py [--quick] [--json PATH] [--placement local|ray]

``--placement ray`` adds, in the same run, the same three identity stages as
Ray actors on three Ray nodes (a head and two workers started here on
127.0.0.1, one stage per node), with CURVE off (loopback, as the runtime
decides) and on (as between real machines), beside the local figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zmq

ROOT = Path(__file__).resolve().parents[1]
from voice_server.testing.report import pct, write_json
from runtime.pipeline import Pipeline

SIZES = {"4KB": 4 << 10, "1MB": 1 << 20, "4MB": 4 << 20, "16MB": 16 << 20}
TARGETS = {"latency_4KB_p50_ms": 0.5, "latency_16MB_p50_ms": 12.0, "throughput_c32_rps": 1000.0,
           "abort_idle_p99_ms": 5.0, "abort_mid_step_p99_extra_ms": 5.0}


def log(text: str) -> None:
    print(f"  .. {text}", file=sys.stderr, flush=True)


def ms(xs: list[float], *qs: int) -> dict:
    return {f"p{q}": round(pct(xs, q, None) * 1000, 4) for q in qs}


RAY_SIZES = ("4KB", "1MB", "16MB")
RAY_TARGETS = {"latency_4KB_p50_x_local": 2.0, "throughput_1MB_c32_of_local": 0.5, "abort_idle_p99_ms": 5.0}


def identity_pipeline(step_ms: float = 0.0) -> dict:
    mid = ({"name": "b", "executor": "voice_server.testing.stages:Stamper", "scheduler": "ar",
            "args": {"step_ms": step_ms}} if step_ms else
           {"name": "b", "executor": "voice_server.testing.stages:Identity", "max_batch": 64})
    return {"name": "runtime-bench",
            "stages": [{"name": "a", "executor": "voice_server.testing.stages:Identity", "max_batch": 64},
                       mid,
                       {"name": "c", "executor": "voice_server.testing.stages:Identity", "max_batch": 64}],
            "edges": [{"from": "a", "to": "b", "kind": "stream"}, {"from": "b", "to": "c", "kind": "stream"}]}


def stream_pipeline() -> dict:
    return {"name": "stream-bench",
            "stages": [{"name": "a", "executor": "voice_server.testing.stages:Identity"},
                       {"name": "gen", "executor": "voice_server.testing.stages:Stamper", "scheduler": "ar",
                        "max_batch": 64}],
            "edges": [{"from": "a", "to": "gen", "kind": "stream"}]}


# ---- baselines -------------------------------------------------------------------------
def memcpy_ms(nbytes: int, reps: int) -> float:
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        ts.append(time.perf_counter() - t0)
    return round(pct(ts, 50, None) * 1000, 4)


def zmq_rtt_ms(nbytes: int, reps: int) -> float:
    """Raw pyzmq REQ/REP round trip over ipc, echoed by a thread: the floor of one hop pair.

    (An echo in a separate process hung intermittently here on its first 1 MB
    reply; the thread keeps the baseline reliable and is, if anything, optimistic.)
    """
    import threading

    d = tempfile.mkdtemp(prefix="va-zmq-")
    ep = f"ipc://{d}/rtt.sock"
    ctx = zmq.Context()
    rep = ctx.socket(zmq.REP)
    rep.setsockopt(zmq.LINGER, 0)
    rep.bind(ep)
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, 10_000)
    s.connect(ep)

    def echo() -> None:
        for _ in range(reps + 5):
            rep.send(rep.recv())

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    payload = b"x" * nbytes
    ts = []
    try:
        for i in range(reps + 5):
            t0 = time.perf_counter()
            s.send(payload)
            s.recv()
            if i >= 5:
                ts.append(time.perf_counter() - t0)
    finally:
        t.join(timeout=10)
        s.close(0)
        rep.close(0)
        ctx.term()
        shutil.rmtree(d, ignore_errors=True)
    return round(pct(ts, 50, None) * 1000, 4)


# ---- runtime measurements ----------------------------------------------------------------
async def latency(p: Pipeline, nbytes: int, reps: int) -> list[float]:
    x = np.ones(nbytes // 4, np.float32)
    ts = []
    for i in range(reps + 3):
        t0 = time.perf_counter()
        h = await p.submit(x)
        term, chunks = await h.result()
        dt = time.perf_counter() - t0
        assert term.kind == "done" and chunks[0].payload.nbytes == nbytes
        del chunks
        if i >= 3:
            ts.append(dt)
    return ts


async def throughput(p: Pipeline, conc: int, total: int) -> float:
    x = np.ones((1 << 20) // 4, np.float32)
    left = total

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            h = await p.submit(x)
            term, chunks = await h.result()
            assert term.kind == "done"
            del chunks

    await asyncio.gather(*(worker() for _ in range(min(conc, 8))))  # warm-up
    left = total
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(conc)))
    return total / (time.perf_counter() - t0)


async def stream_chunks(p: Pipeline, requests: int, n: int) -> list[float]:
    ts = []
    for _ in range(requests):
        h = await p.submit({"n": n})
        async for ev in h:
            if ev.kind == "chunk":
                ts.append(time.monotonic() - ev.payload)
    return ts


async def aborts(p: Pipeline, reps: int, mid_step: bool) -> list[float]:
    ts = []
    for _ in range(reps):
        h = await p.submit({"n": 10_000} if mid_step else np.ones(16, np.float32))
        if mid_step:
            # Let the request reach the generating stage, then land at a random point of a step.
            await asyncio.sleep(0.1 + np.random.random() * 0.05)
        else:
            await h.result()  # stages idle; the abort still goes to all of them
        t0 = time.perf_counter()
        ticket = p.abort(h.request_id, "bench")
        if mid_step or not ticket.acked.done():
            await asyncio.wait_for(ticket.acked, 5)
        ts.append(time.perf_counter() - t0)
    return ts


async def abort_idle(p: Pipeline, reps: int) -> list[float]:
    """All stages idle and holding nothing: abort a live streaming-input request."""
    ts = []
    for _ in range(reps):
        h = await p.submit(None, stream_input=True)
        await asyncio.sleep(0.002)
        t0 = time.perf_counter()
        ticket = p.abort(h.request_id, "bench")
        await asyncio.wait_for(ticket.acked, 5)
        ts.append(time.perf_counter() - t0)
    return ts


async def run(quick: bool) -> dict:
    reps = {"4KB": 300, "1MB": 200, "4MB": 80, "16MB": 40} if not quick else \
        {"4KB": 150, "1MB": 80, "4MB": 30, "16MB": 15}
    res: dict = {"latency_ms": {}, "baseline": {}, "quick": quick}
    res["baseline"]["memcpy_16MB_ms"] = memcpy_ms(16 << 20, 20)
    res["baseline"]["memcpy_ms"] = {k: memcpy_ms(v, 20) for k, v in SIZES.items()}
    res["baseline"]["zmq_rtt_4KB_ms"] = zmq_rtt_ms(4 << 10, 400 if not quick else 200)
    res["baseline"]["zmq_rtt_1MB_ms"] = zmq_rtt_ms(1 << 20, 200 if not quick else 100)

    p = await Pipeline.start(identity_pipeline())
    log("baselines done; identity pipeline up")
    try:
        for name, nbytes in SIZES.items():
            res["latency_ms"][name] = ms(await latency(p, nbytes, reps[name]), 50, 90)
            log(f"latency {name}: {res['latency_ms'][name]}")
        total = 600 if quick else 2000
        res["throughput_rps"] = {f"c{c}": round(await throughput(p, c, total if c > 1 else total // 3), 1)
                                 for c in (1, 8, 32)}
        res["abort_ack_ms"] = {"idle": ms(await abort_idle(p, 100 if quick else 300), 50, 99)}
    finally:
        await p.close()

    p = await Pipeline.start(stream_pipeline())
    try:
        res["stream_chunk_ms"] = ms(await stream_chunks(p, 20 if quick else 60, 50), 50, 90)
    finally:
        await p.close()

    step_ms = 50.0
    p = await Pipeline.start(identity_pipeline(step_ms=step_ms))
    try:
        mid = ms(await aborts(p, 30 if quick else 100, mid_step=True), 50, 99)
        mid["step_ms"] = step_ms
        res["abort_ack_ms"]["mid_step"] = mid
    finally:
        await p.close()
    return res


# ---- the same stages on three Ray nodes ------------------------------------------------------
def ray_pipeline(curve: bool) -> dict:
    cfg = identity_pipeline()
    cfg["placement"] = {"backend": "ray", "groups": [
        {"name": n, "stages": [n], "resources": {f"bench_node_{n}": 1}} for n in ("a", "b", "c")]}
    cfg["control"] = {"curve": curve}
    return cfg


def start_ray_cluster():
    """Head (stage a, the coordinator) + two workers (b, c), all on 127.0.0.1; dashboard off."""
    from runtime.ray.local_cluster import LocalCluster

    c = LocalCluster(num_cpus=2, resources={"bench_node_a": 1})
    c.add_node(num_cpus=2, resources={"bench_node_b": 1})
    c.add_node(num_cpus=2, resources={"bench_node_c": 1})
    return c.join()


async def run_ray(quick: bool, curve: bool) -> dict:
    reps = {"4KB": 300, "1MB": 200, "16MB": 40} if not quick else {"4KB": 150, "1MB": 80, "16MB": 15}
    out: dict = {"latency_ms": {}, "curve": curve}
    p = await Pipeline.start(ray_pipeline(curve))
    try:
        out["nodes"] = {k: v["node"][:8] for k, v in p.snapshot()["processes"].items()}
        out["entry_transports"] = p.coordinator._entry_transport
        for name in RAY_SIZES:
            out["latency_ms"][name] = ms(await latency(p, SIZES[name], reps[name]), 50, 90)
            log(f"ray{'+curve' if curve else ''} latency {name}: {out['latency_ms'][name]}")
        out["throughput_rps"] = {"c32": round(await throughput(p, 32, 600 if quick else 2000), 1)}
        out["abort_ack_ms"] = {"idle": ms(await abort_idle(p, 100 if quick else 300), 50, 99)}
    finally:
        await p.close()
    return out


def ray_rows(res: dict) -> list[tuple[str, str, str, str]]:
    rows = []
    for key in ("ray", "ray_curve"):
        r = res.get(key)
        if r is None:
            continue
        tag = "3 Ray nodes" + (", CURVE" if r["curve"] else "")
        for name in RAY_SIZES:
            lat, loc = r["latency_ms"][name], res["latency_ms"][name]
            rows.append((f"{tag}: {name} p50 / p90 ms", f"{lat['p50']} / {lat['p90']}",
                         f"local {loc['p50']} / {loc['p90']}",
                         "<= 2x local p50" if name == "4KB" else ""))
        tp, loc = r["throughput_rps"]["c32"], res["throughput_rps"]["c32"]
        rows.append((f"{tag}: throughput 1MB c32 req/s", f"{tp} ({tp / loc:.0%} of local)", f"local {loc}",
                     ">= 50% of local"))
        a = r["abort_ack_ms"]["idle"]
        rows.append((f"{tag}: abort all-stage ack, idle p50 / p99 ms", f"{a['p50']} / {a['p99']}",
                     f"local p99 {res['abort_ack_ms']['idle']['p99']}", "p99 <= 5"))
    return rows


def report(res: dict) -> list[tuple[str, str, str, str]]:
    rows = []
    for name in SIZES:
        lat = res["latency_ms"][name]
        rows.append((f"end-to-end {name} p50 / p90 ms", f"{lat['p50']} / {lat['p90']}",
                     f"memcpy {res['baseline']['memcpy_ms'][name]}",
                     {"4KB": "<= 0.5", "16MB": "<= 12"}.get(name, "")))
    for c, v in res["throughput_rps"].items():
        rows.append((f"throughput 1MB {c} req/s", str(v), "", ">= 1000" if c == "c32" else ""))
    s = res["stream_chunk_ms"]
    rows.append(("stream chunk emit->coordinator p50 / p90 ms", f"{s['p50']} / {s['p90']}",
                 f"zmq rtt 4KB {res['baseline']['zmq_rtt_4KB_ms']}", ""))
    a = res["abort_ack_ms"]["idle"]
    rows.append(("abort all-stage ack, idle p50 / p99 ms", f"{a['p50']} / {a['p99']}", "", "p99 <= 5"))
    a = res["abort_ack_ms"]["mid_step"]
    rows.append((f"abort ack, mid {a['step_ms']:g} ms step p50 / p99 ms", f"{a['p50']} / {a['p99']}", "",
                 f"p99 <= {a['step_ms'] + 5:g}"))
    rows.append(("zmq ipc round trip 4KB / 1MB ms",
                 f"{res['baseline']['zmq_rtt_4KB_ms']} / {res['baseline']['zmq_rtt_1MB_ms']}", "baseline", ""))
    return rows + ray_rows(res)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (< 60 s)")
    ap.add_argument("--json", default=None, help="default benchmarks/results/runtime[-ray].json")
    ap.add_argument("--placement", choices=("local", "ray"), default="local",
                    help="ray: also run the stages on three Ray nodes, beside the local figures")
    args = ap.parse_args()
    json_path = args.json or str(ROOT / "benchmarks/results" /
                                 ("runtime-ray.json" if args.placement == "ray" else "runtime.json"))
    t0 = time.time()
    res = asyncio.run(run(args.quick))
    if args.placement == "ray":
        cluster = start_ray_cluster()
        try:
            for key, curve in (("ray", False), ("ray_curve", True)):
                res[key] = asyncio.run(run_ray(args.quick, curve))
        finally:
            cluster.close()
    res["wall_s"] = round(time.time() - t0, 1)
    res["machine"] = {"cpus": os.cpu_count()}
    rows = report(res)
    w = [max(len(r[i]) for r in rows) for i in range(4)]
    head = ("measure", "value", "baseline (same run)", "target")
    w = [max(w[i], len(head[i])) for i in range(4)]
    print(" | ".join(h.ljust(w[i]) for i, h in enumerate(head)))
    print("-+-".join("-" * x for x in w))
    for r in rows:
        print(" | ".join(c.ljust(w[i]) for i, c in enumerate(r)))
    write_json(json_path, res, f" in {res['wall_s']} s")


if __name__ == "__main__":
    main()
