"""A caller's turn on a think stage that sessions now closed left cells in,
with those cells kept and after they were forgotten (FORGET), in one run.

Why: the thinker keeps a finished reply's KV cells for the conversation's next
turn.  Until a session says it is over, nothing tells those cells from a live
caller's, and llama.cpp's unified cache makes every decode attend over the
whole used span of cells (masked, but computed).  So the cells of calls that
ended slow every later prompt and step until their sequences are taken for
other requests.  The voice server now sends FORGET when a session closes.

Each round: ``--past`` sessions (default 7, with the caller's own that fills
the thinker's 8 sequences) each leave a conversation of ``--past-tokens``
tokens, then a caller's turns are timed (``--turns``, each: the conversation
decoded while the caller speaks, then the reply's prompt of the last words,
about 10 tokens, and ``--steps`` decode steps); then the past sessions are
forgotten and the same turns are timed again.  Rounds alternate to even out
this machine's noise.  The thinker is set up as configs/voice-cpu.yaml's.

    .venv/bin/python -m benchmarks.stale_cells_bench [--rounds 2]

Prints a table; writes benchmarks/results/stale_cells.json with keys
``{kept,forgotten}.{cells_kept, prompt_ms.p50, step_ms.p50}`` and
``ratio.{prompt,step}`` (kept over forgotten).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from runtime.executor import CONVERSATION, PREFILL_ONLY, PREFILL_WORDS, WorkItem
from runtime.models.think.llama_cpp_thinker import LlamaCppThinker
from voice_server.testing.report import pct, write_json

TOPICS = ["the sea", "a mountain town", "old trains", "a garden in spring", "the night sky",
          "a bakery", "a long river", "a winter market"]
QUESTIONS = ["how far away is the moon", "what should i cook tonight",
             "can you recommend a good book", "what is the capital of spain"]


class Timed:
    """The thinker's steps, timed by how many tokens each decoded."""

    def __init__(self, thinker: LlamaCppThinker) -> None:
        self.t = thinker
        self.rid = 0

    def request(self, messages: list, params: dict, steps: int) -> list[tuple[int, float]]:
        self.rid += 1
        self.t.prefill(WorkItem(self.rid, {"messages": messages}, params=params))
        seq = self.t._seqs[self.rid]
        times = []
        for _ in range(steps):
            todo = len(seq.prompt) or 1
            t0 = time.perf_counter()
            r = self.t.step([self.rid]).get(self.rid)
            times.append((todo, (time.perf_counter() - t0) * 1000))
            if r is not None and r.finished:
                break
        self.t.release(self.rid)
        return times


def past_sessions(timed: Timed, n: int, tokens: int) -> None:
    for i in range(n):
        story = f"Tell me about {TOPICS[i % len(TOPICS)]}. " + " ".join(
            f"I remember {TOPICS[(i + k) % len(TOPICS)]} from when I was {k + 5}."
            for k in range(tokens // 14))
        timed.request([{"role": "user", "content": story}],
                      {"max_tokens": 8, "temperature": 0.0, CONVERSATION: f"past_{i}"}, 400)


def caller_turns(timed: Timed, turns: int, steps: int, round_: int) -> tuple[list, list]:
    prompts, decodes = [], []
    history = [{"role": "user", "content": "hello there"},
               {"role": "assistant", "content": "Hello! How can I help you today?"}]
    for k in range(turns):
        words = QUESTIONS[k % len(QUESTIONS)] + f" number {round_ * turns + k}"
        said = words.rsplit(" ", 3)[0]
        conv = {CONVERSATION: "caller", "temperature": 0.0, "max_tokens": steps + 1}
        timed.request(history + [{"role": "user", "content": said}],
                      {**conv, PREFILL_ONLY: True, PREFILL_WORDS: True}, 400)
        times = timed.request(history + [{"role": "user", "content": words}], conv, steps + 1)
        prompts.append(times[0][1])
        decodes += [ms for todo, ms in times[1:] if todo == 1]
    timed.t.forget("caller")
    return prompts, decodes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--past", type=int, default=7, help="closed sessions that left cells")
    ap.add_argument("--past-tokens", type=int, default=600, help="tokens of each one's conversation")
    ap.add_argument("--turns", type=int, default=8, help="timed turns of the caller per condition")
    ap.add_argument("--steps", type=int, default=8, help="decode steps timed per turn")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"
                                          / "stale_cells.json"))
    a = ap.parse_args(argv)
    t = LlamaCppThinker(n_threads=1, n_threads_batch=2, max_sequences=8, max_tokens=64)
    t.load()
    timed = Timed(t)
    res = {c: {"prompt": [], "step": [], "cells_kept": []} for c in ("kept", "forgotten")}
    try:
        for r in range(a.rounds):
            past_sessions(timed, a.past, a.past_tokens)
            res["kept"]["cells_kept"].append(t.stats()["kv_cells_kept"])
            p, s = caller_turns(timed, a.turns, a.steps, r)
            res["kept"]["prompt"] += p
            res["kept"]["step"] += s
            for i in range(a.past):
                t.forget(f"past_{i}")
            res["forgotten"]["cells_kept"].append(t.stats()["kv_cells_kept"])
            p, s = caller_turns(timed, a.turns, a.steps, r)
            res["forgotten"]["prompt"] += p
            res["forgotten"]["step"] += s
    finally:
        t.close()
    out = {c: {"cells_kept": v["cells_kept"],
               "prompt_ms": {"p50": pct(v["prompt"], 50), "p95": pct(v["prompt"], 95),
                             "n": len(v["prompt"])},
               "step_ms": {"p50": pct(v["step"], 50), "p95": pct(v["step"], 95),
                           "n": len(v["step"])}}
           for c, v in res.items()}
    out["ratio"] = {k: round(out["kept"][f"{k}_ms"]["p50"] / out["forgotten"][f"{k}_ms"]["p50"], 2)
                    for k in ("prompt", "step")}
    print(f"{'past sessions':<16}{'cells kept':>14}{'prompt p50/p95 ms':>20}{'step p50/p95 ms':>18}")
    for c in ("kept", "forgotten"):
        o = out[c]
        print(f"{c:<16}{str(o['cells_kept']):>14}"
              f"{str(o['prompt_ms']['p50']) + ' / ' + str(o['prompt_ms']['p95']):>20}"
              f"{str(o['step_ms']['p50']) + ' / ' + str(o['step_ms']['p95']):>18}")
    print(f"kept / forgotten: prompt x{out['ratio']['prompt']}, step x{out['ratio']['step']}")
    write_json(a.out, {**out, "args": vars(a)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
