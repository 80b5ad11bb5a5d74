"""The think stage's memory as prompts grow, with and without ``warm_batch``.

llama.cpp sizes its compute buffers for a full batch when the context is
made, but a page of them is only resident once a batch that large has run:
the stage's RSS steps up at the first long prompt of its life, which on a
served line can come minutes in, and a soak then reads it as growth.  With
``warm_batch`` the thinker decodes one full batch at load and forgets it.

Each variant is the think stage's own executor (``LlamaCppThinker``, as the
default profile loads it) in a process of its own, so that one's pages do
not count for the other; the variants alternate over ``--rounds``.  Per
variant: the load time, the RSS after load, and after prompts of 64, 256
and 500 tokens, each on a sequence of its own.

    .venv/bin/python -m benchmarks.think_memory_bench                 # the 1.5B, 2 rounds
    .venv/bin/python -m benchmarks.think_memory_bench --model qwen2.5-coder-0.5b

Writes benchmarks/results/think_memory.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

PROMPTS = (64, 256, 500)


def measure(model: str, warm: bool) -> dict:
    """One variant, in this process: load, then the prompts (RSS in MB after each)."""
    import psutil

    from runtime.models.think.llama_cpp_thinker import LlamaCppThinker

    def rss() -> float:
        return round(psutil.Process().memory_info().rss / 2**20, 1)

    t = LlamaCppThinker(model=model, n_threads=2, n_threads_batch=2, max_sequences=8,
                        warm_batch=warm)
    t0 = time.perf_counter()
    t.load()
    out = {"load_s": round(time.perf_counter() - t0, 2), "rss_mb": {"load": rss()}}
    ids = t.tokenize(" the quick brown fox" * 200)
    for seq, n in enumerate(PROMPTS):
        assert t._step.decode_alone(ids[:n], seq), f"decoding {n} tokens failed"
        out["rss_mb"][str(n)] = rss()
    t.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/results/think_memory.json")
    ap.add_argument("--one", choices=("off", "on"), help=argparse.SUPPRESS)  # a child's variant
    a = ap.parse_args()
    if a.one:
        print(json.dumps(measure(a.model, a.one == "on")))
        return 0
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    for _ in range(a.rounds):
        for v in runs:
            res = subprocess.run([sys.executable, "-m", "benchmarks.think_memory_bench",
                                  "--model", a.model, "--one", v],
                                 capture_output=True, text=True, check=True)
            runs[v].append(json.loads(res.stdout.strip().splitlines()[-1]))
    summary = {v: {"load_s": round(statistics.median(r["load_s"] for r in rs), 2),
                   "rss_mb": {k: round(statistics.median(r["rss_mb"][k] for r in rs), 1)
                              for k in rs[0]["rss_mb"]}} for v, rs in runs.items()}
    cols = list(summary["off"]["rss_mb"])
    print(f"\n{'warm_batch':<11} {'load s':>7} " + " ".join(f"{'RSS ' + c:>10}" for c in cols))
    for v, s in summary.items():
        print(f"{v:<11} {s['load_s']:>7} " + " ".join(f"{s['rss_mb'][c]:>10}" for c in cols))
    from voice_server.testing.report import write_json
    write_json(a.out, {"model": a.model, "rounds": a.rounds, "summary": summary, "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
