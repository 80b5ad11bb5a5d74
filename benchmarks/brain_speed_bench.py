"""How fast one thinker model runs under each llama.cpp setting, side by side.

The default brain's cost is its time to first token and its time per token,
and both depend on settings llama.cpp leaves to us: the threads of a
one-token step, the KV cache's element type, fused attention, the weights'
quantisation.  Each variant is the think stage's own executor
(``LlamaCppThinker``) with its prefix and conversation caches on, as served;
the variants are loaded one after another inside each round and the rounds
alternate them, because these machines are noisy.  Per variant (medians over
rounds):

* ``first_turn_ms``: a new caller's first question (system prompt cached at
  load, ~60 prompt tokens left) -> its first token;
* ``next_turn_ms``: the same conversation's next question, asked after the
  reply (the conversation's cells kept: only the new words are read);
* ``long_prompt_ms_per_token``: a ~600-token conversation read from scratch,
  per token (a caller whose cells were dropped);
* ``decode_ms``: one reply's step (one token) and ``decode2_ms``: two
  replies stepped together;
* ``deep_next_turn_ms`` and ``deep_decode_ms``: the next question and one
  reply's step in a conversation of ~700 cells (most of a long call's window,
  benchmarks/long_call_bench.py), its earlier turns cached.

    .venv/bin/python -m benchmarks.brain_speed_bench --model qwen2.5-coder-1.5b
    .venv/bin/python -m benchmarks.brain_speed_bench --variants base,t1,kv_q8 --rounds 5

Writes benchmarks/results/brain_speed.json.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from pathlib import Path

from runtime.executor import WorkItem
from runtime.models.think.llama_cpp_thinker import LlamaCppThinker
from voice_server.testing.report import write_json

ROOT = Path(__file__).resolve().parents[1]
SYSTEM = ("You are a friendly voice assistant; everything you write is spoken aloud. Answer in "
          "one or two short, plain sentences. Do not use lists, markdown, code or emoji.")
BASE = dict(n_threads=2, n_threads_batch=2, max_sequences=4, n_ctx=4096, max_tokens=48,
            temperature=0.0, repeat_penalty=1.1, seed=1, system_prompt=SYSTEM)
VARIANTS = {
    "base": {},                                   # the shipped Q4_K_M, 2 threads, f16 cells
    "t1": {"n_threads": 1},                       # one thread for a one-token step
    "kv_q8": {"kv_type": "q8_0"},                 # cells in 8 bits
    "fa_off": {"flash_attn": "off"},              # unfused attention
    "q4_0": {"requantize": "q4_0"},               # weights requantised once to Q4_0
    "ubatch_128": {"n_ubatch": 128},              # prompts read in smaller pieces
}
TOPICS = ["the moon", "bread", "rivers", "trains", "volcanoes", "chess", "bees", "glass",
          "the ocean", "tea", "winter", "maps"]


def _question(i: int) -> str:
    topic = TOPICS[i % len(TOPICS)]
    return (f"My friend number {i} keeps asking me about {topic}, and I never know what to say. "
            f"Could you tell me one thing about {topic} that most people do not know?")


def _history(i: int, turns: int) -> list[dict]:
    msgs: list[dict] = []
    for k in range(turns):
        msgs += [{"role": "user", "content": _question(i * 100 + k)},
                 {"role": "assistant", "content": f"Here is something about {TOPICS[k % len(TOPICS)]}: "
                  "it has a long history, and people have written about it for centuries."}]
    return msgs


def _run(th: LlamaCppThinker, rids: list[int], messages: list[list[dict]], max_tokens: int
         ) -> tuple[float, list[float], list[str]]:
    """Admit one request per message list and step them together to the end:
    (time to the first step's tokens in ms, each later step's ms, the replies)."""
    for rid, msgs in zip(rids, messages):
        th.prefill(WorkItem(rid, {"messages": msgs}, params={"max_tokens": max_tokens}))
    live, texts = list(rids), {rid: "" for rid in rids}
    t0 = time.perf_counter()
    first_ms, steps = None, []
    while live:
        ts = time.perf_counter()
        for rid, res in th.step(live).items():
            if isinstance(res, Exception):
                raise res
            if res.chunk is not None:
                texts[rid] += res.chunk if isinstance(res.chunk, str) else ""
            if res.finished:
                th.release(rid)
                live.remove(rid)
        now = time.perf_counter()
        if first_ms is None:
            first_ms = (now - t0) * 1000
        else:
            steps.append((now - ts) * 1000)
    return first_ms, steps, [texts[r] for r in rids]


def measure(th: LlamaCppThinker, r: int) -> dict:
    """One round of every figure on a loaded thinker (ids and words unique to round r)."""
    rid = itertools.count(r * 1000 + 1)
    q = [{"role": "user", "content": _question(r)}]
    first, steps, [reply] = _run(th, [next(rid)], [q], 48)
    first_tokens = len(steps) + 1
    convo = q + [{"role": "assistant", "content": reply},
                 {"role": "user", "content": _question(r + 50)}]
    nxt, _, _ = _run(th, [next(rid)], [convo], 1)
    long_msgs = _history(r, 9) + [{"role": "user", "content": _question(r + 7)}]
    long_first, _, _ = _run(th, [next(rid)], [long_msgs], 1)
    long_tokens = len(th.tokenize(th.render([{"role": "system", "content": SYSTEM}, *long_msgs])))
    _, steps2, _ = _run(th, [next(rid), next(rid)], [[{"role": "user", "content": _question(r + 90)}],
                                                     [{"role": "user", "content": _question(r + 91)}]], 32)
    deep = _history(r + 200, 12) + [{"role": "user", "content": _question(r + 300)}]
    _, _, [deep_reply] = _run(th, [next(rid)], [deep], 8)          # read and cached
    deep += [{"role": "assistant", "content": deep_reply},
             {"role": "user", "content": _question(r + 301)}]
    deep_first, deep_steps, _ = _run(th, [next(rid)], [deep], 16)
    return {"first_turn_ms": first, "next_turn_ms": nxt,
            "deep_next_turn_ms": deep_first,
            "deep_decode_ms": statistics.median(deep_steps) if deep_steps else None,
            "long_prompt_ms_per_token": long_first / long_tokens,
            "decode_ms": statistics.median(steps) if steps else None,
            "decode2_ms": statistics.median(steps2) if steps2 else None,
            "reply_tokens": first_tokens}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "brain_speed.json"))
    args = ap.parse_args(argv)
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        ap.error(f"unknown variants {unknown}; known: {sorted(VARIANTS)}")
    rows: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(args.rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            th = LlamaCppThinker(model=args.model, **{**BASE, **VARIANTS[n]})
            th.load()
            try:
                _run(th, [999_000 + r], [[{"role": "user", "content": "Hello."}]], 4)   # warm-up
                rows[n].append(measure(th, r + 1))
            finally:
                th.close()
    keys = ("first_turn_ms", "next_turn_ms", "long_prompt_ms_per_token", "decode_ms", "decode2_ms",
            "deep_next_turn_ms", "deep_decode_ms")
    result = {n: {k: round(statistics.median(x[k] for x in rows[n]), 2) for k in keys}
              for n in names}
    print(f"\n{args.model}, {args.rounds} rounds alternated (medians, ms)")
    print(f"{'variant':<12}" + "".join(f"{k:>26}" for k in keys))
    for n in names:
        print(f"{n:<12}" + "".join(f"{result[n][k]:>26}" for k in keys))
    write_json(args.out, {"model": args.model, "rounds": args.rounds, "variants": result,
                          "settings": {n: {**BASE, **VARIANTS[n]} for n in names}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
