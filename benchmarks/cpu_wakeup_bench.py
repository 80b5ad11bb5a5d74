"""The turn's critical path with idle CPUs free to halt and with them kept
polling (the stage processes' PM QoS request, runtime/cpu_wakeup.py), in one run.

Why: on a 2-vCPU VM the reply's prompt and every hop between stage processes
wake an idle CPU, and a halted vCPU waits for its host to schedule it again.
Two numbers, each alternated between the two conditions round by round to
even out the host's noise:

* the reply's prompt (the last words of a turn, ~10 tokens, after the
  conversation was prefilled) and its decode steps, on the think stage's
  thinker set up as configs/voice-cpu.yaml's (one thread a step, two a prompt:
  the prompt's second thread is woken at every decode);
* a ZMQ round trip over ipc to another process after 30 ms of idleness, as
  between stage processes.

    .venv/bin/python -m benchmarks.cpu_wakeup_bench [--rounds 6]

Needs root (the request is written to /dev/cpu_dma_latency); without it, it
says so and measures nothing.  Prints a table; writes
benchmarks/results/cpu_wakeup.json with keys
``{halting,polling}.{prompt_ms,step_ms,hop_us}.{p50,p95}`` and
``ratio.{prompt,step,hop}`` (halting over polling).
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from pathlib import Path

import zmq

from benchmarks.stale_cells_bench import Timed, caller_turns
from runtime.cpu_wakeup import CpuWakeupLatency
from runtime.models.think.llama_cpp_thinker import LlamaCppThinker
from voice_server.testing.report import pct, write_json

CONDITIONS = ("halting", "polling")


def _echo(endpoint: str) -> None:
    sock = zmq.Context.instance().socket(zmq.PAIR)
    sock.connect(endpoint)
    while True:
        msg = sock.recv()
        if msg == b"stop":
            return
        sock.send(msg)


def hops(sock: zmq.Socket, n: int, idle_s: float = 0.03) -> list[float]:
    out = []
    for _ in range(n):
        time.sleep(idle_s)          # both CPUs go idle, as between a caller's frames
        t0 = time.perf_counter()
        sock.send(b"ping")
        sock.recv()
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--turns", type=int, default=3, help="timed turns per condition and round")
    ap.add_argument("--steps", type=int, default=4, help="decode steps timed per turn")
    ap.add_argument("--hops", type=int, default=40, help="round trips per condition and round")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"
                                          / "cpu_wakeup.json"))
    a = ap.parse_args(argv)
    qos = CpuWakeupLatency(0, linger_s=0.0)
    qos.update(True)
    qos.release()
    if qos.state.startswith("unavailable"):
        print(f"cannot hold the request ({qos.state}); run as root")
        return 2
    t = LlamaCppThinker(n_threads=1, n_threads_batch=2, max_sequences=8, max_tokens=64)
    t.load()
    timed = Timed(t)
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.PAIR)
    endpoint = f"ipc://{tempfile.mkdtemp(prefix='va-wake-')}/echo"
    sock.bind(endpoint)
    child = multiprocessing.get_context("spawn").Process(target=_echo, args=(endpoint,), daemon=True)
    child.start()
    hops(sock, 3, 0.0)                                  # connected and warm
    res = {c: {"prompt": [], "step": [], "hop": []} for c in CONDITIONS}
    try:
        for r in range(a.rounds):
            for c in (CONDITIONS if r % 2 == 0 else CONDITIONS[::-1]):
                if c == "polling":
                    qos.update(True)
                time.sleep(0.2)
                p, s = caller_turns(timed, a.turns, a.steps, r)
                res[c]["prompt"] += p
                res[c]["step"] += s
                res[c]["hop"] += hops(sock, a.hops)
                qos.release()
    finally:
        qos.release()
        sock.send(b"stop")
        child.join(5)
        sock.close(0)
        t.close()
    out = {c: {f"{k}_{unit}": {"p50": pct(v[k], 50), "p95": pct(v[k], 95), "n": len(v[k])}
               for k, unit in (("prompt", "ms"), ("step", "ms"), ("hop", "us"))}
           for c, v in res.items()}
    out["ratio"] = {k: round(out["halting"][f"{k}_{u}"]["p50"] / out["polling"][f"{k}_{u}"]["p50"], 2)
                    for k, u in (("prompt", "ms"), ("step", "ms"), ("hop", "us"))}
    print(f"{'idle CPUs':<12}{'prompt p50/p95 ms':>20}{'step p50/p95 ms':>18}{'hop p50/p95 us':>18}")
    for c in CONDITIONS:
        o = out[c]
        print(f"{c:<12}" + "".join(f"{str(o[k]['p50']) + ' / ' + str(o[k]['p95']):>{w}}"
                                   for k, w in (("prompt_ms", 20), ("step_ms", 18), ("hop_us", 18))))
    print("halting / polling: " + ", ".join(f"{k} x{v}" for k, v in out["ratio"].items()))
    write_json(a.out, {**out, "args": vars(a)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
