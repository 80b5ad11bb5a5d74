"""CPU milliseconds per Smart Turn call, for 1 and for a batch of 4 turns.

Process CPU time (not wall time), so other load on the machine does not count;
one intra-op thread, as the listen stage runs it.  Each turn is 8 s of flite
speech (the model always sees 8 s, so shorter turns cost the same).

    .venv/bin/python -m benchmarks.smart_turn_bench [--runs 20] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from runtime.models.listen.log_mel import log_mel
from runtime.models.listen.smart_turn import WINDOW_SAMPLES, SmartTurn, features, last_window
from voice_server.testing.audio import flite_pcm


def cpu_ms(fn, runs: int) -> float:
    fn()                                    # warm-up: first run allocates
    samples = []
    for _ in range(runs):
        t0 = time.process_time()
        fn()
        samples.append((time.process_time() - t0) * 1000)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    speech = flite_pcm("i would like to order a pizza and a large coke please", 16000)
    turn = np.resize(speech.astype(np.float32) / 32768, WINDOW_SAMPLES)
    model = SmartTurn(threads=args.threads)
    batch = [turn] * 4
    windows = np.stack([last_window(t) for t in batch])
    print(f"threads={args.threads}, median of {args.runs} runs, process CPU ms")
    print(f"features only, 1 turn:  {cpu_ms(lambda: log_mel(turn), args.runs):7.1f}")
    print(f"features only, 4 turns: {cpu_ms(lambda: features(windows), args.runs):7.1f}")
    print(f"probability, 1 turn:    {cpu_ms(lambda: model.probability(turn), args.runs):7.1f}")
    four = cpu_ms(lambda: model.probabilities(batch), args.runs)
    print(f"probabilities, 4 turns: {four:7.1f}  ({four / 4:.1f} per turn)")


if __name__ == "__main__":
    main()
