"""GPU check: CUDA IPC between two stage processes on one GPU, and its cost.

Run on a machine with a CUDA device (``benchmarks/gpu_check.sh``).  Two
stages placed on cuda:0 in separate processes: the edge between them must
use the ``cuda_ipc`` transport (a handle crosses, not the bytes), the
receiver must see a CUDA tensor with the right contents, and nothing may stay
lent afterwards.  Prints a table, writes benchmarks/results/gpu_check.json.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from voice_server.testing.report import write_json  # noqa: E402
from runtime.pipeline import Pipeline  # noqa: E402
from runtime.placement import edge_transport  # noqa: E402

CFG = {"name": "gpu-check",
       "stages": [{"name": "make", "executor": "benchmarks.bench_stages:CudaMaker"},
                  {"name": "sum", "executor": "benchmarks.bench_stages:CudaSum"}],
       "edges": [{"from": "make", "to": "sum", "kind": "stream"}],
       "placement": {"groups": [{"name": "make", "stages": ["make"], "device": "cuda:0"},
                                {"name": "sum", "stages": ["sum"], "device": "cuda:0"}]}}


async def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 2
    p = await Pipeline.start(CFG)
    res: dict = {"transport": edge_transport(p.cfg, "make", "sum"), "device": torch.cuda.get_device_name(0)}
    try:
        for n in (1 << 10, 1 << 22):  # 4 KB and 16 MB of float32
            ts = []
            for i in range(23):
                t0 = time.perf_counter()
                h = await p.submit(n)
                term, chunks = await h.result()
                ts.append(time.perf_counter() - t0)
                out = chunks[0].payload
                assert term.kind == "done", term
                assert out["is_cuda"] and out["n"] == n and out["sum"] == float(n * (n - 1) / 2), out
            ts = sorted(ts[3:])
            res[f"e2e_ms_{n * 4 >> 10}KB"] = {"p50": round(ts[len(ts) // 2] * 1000, 3)}
        await asyncio.sleep(0.4)
        snap = p.snapshot()
        res["cuda_held_after"] = {k: v.get("pool", {}) for k, v in snap["processes"].items()}
    finally:
        await p.close()
    print(json.dumps(res, indent=2))
    write_json(ROOT / "benchmarks/results/gpu_check.json", res)
    ok = res["transport"] == "cuda_ipc"
    print("CUDA IPC check:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
