"""Multi-turn conversations on the thinker, with and without the conversation cache.

Why: a voice session sends its whole conversation with every turn.  Without
reuse the prompt to decode grows by a turn each time, for every concurrent
session, and the time to the first token grows with it (the soak saw first
audio climb from 6 to 28 s over 3 minutes with 8 callers).  The thinker's
``conversation_cache`` keeps a finished sequence's KV cells and decodes only
the new tail of the next turn.  This runs the same conversations both ways
in one run (greedy decoding, so both see the same replies and histories):

* S sessions (default 8) talk in lock step: turn t of every session is
  admitted at once and stepped to the end, the reply goes into its history;
* per turn: prompt tokens, tokens actually decoded for the prompt, time to
  the first token (p50 over sessions), and the wall time of the whole run.

    .venv/bin/python benchmarks/conversation_bench.py [--sessions 8] [--turns 12]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from voice_server.testing.report import pct, write_json
from runtime.executor import WorkItem
from runtime.models.think.llama_cpp_thinker import LlamaCppThinker

QUESTIONS = [
    "Hi, my name is {name}. What can you help me with?",
    "What is a good name for a cat?",
    "How far away is the moon?",
    "Tell me one fact about the ocean.",
    "What should I cook for dinner tonight?",
    "How do I make a cup of tea?",
    "What is the capital of Spain?",
    "Can you suggest a short walk in a city?",
    "What is the weather usually like in spring?",
    "Tell me a short joke.",
    "What did I say my name was?",
    "Thanks, goodbye.",
]
NAMES = ["Ada", "Ben", "Chloe", "Dev", "Emma", "Femi", "Gus", "Hana", "Ivan", "Jun"]


def run(cache: bool, sessions: int, turns: int, max_tokens: int) -> dict:
    t = LlamaCppThinker(n_threads=2, max_sequences=sessions, max_tokens=max_tokens,
                        temperature=0.0, seed=1, conversation_cache=cache)
    t.load()
    history: list[list[dict]] = [[] for _ in range(sessions)]
    per_turn = []
    rid = 0
    t_all = time.perf_counter()
    try:
        for turn in range(turns):
            q = QUESTIONS[turn % len(QUESTIONS)]
            rids, first, texts, prompt_tokens = {}, {}, {}, 0
            t0 = time.perf_counter()
            for s in range(sessions):
                rid += 1
                history[s].append({"role": "user",
                                   "content": q.format(name=NAMES[s % len(NAMES)])})
                prompt_tokens += len(t.tokenize(t.render(history[s])))
                t.prefill(WorkItem(rid, {"messages": list(history[s])}, params={}))
                rids[rid], texts[rid] = s, ""
            decoded = sum(len(seq.prompt) for seq in t._seqs.values())
            live = list(rids)
            while live:
                for r, res in t.step(live).items():
                    if isinstance(res, Exception):
                        raise res
                    first.setdefault(r, time.perf_counter() - t0)
                    texts[r] += res.chunk or ""
                    if res.finished:
                        t.release(r)
                        live.remove(r)
            for r, s in rids.items():
                history[s].append({"role": "assistant", "content": texts[r].strip()})
            ms = [v * 1000 for v in first.values()]
            per_turn.append({"turn": turn + 1, "prompt_tokens": prompt_tokens,
                             "prompt_tokens_decoded": decoded,
                             "first_token_ms_p50": pct(ms, 50), "first_token_ms_max": pct(ms, 100),
                             "turn_wall_ms": round((time.perf_counter() - t0) * 1000, 1)})
        st = t.stats()
    finally:
        t.close()
    return {"conversation_cache": cache, "wall_s": round(time.perf_counter() - t_all, 2),
            "per_turn": per_turn, "conversation_hits": st["conversation_hits"],
            "tokens_reused": st["conversation_tokens_reused"],
            "replies_last_turn": [h[-1]["content"] for h in history[:2]]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--turns", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"
                                         / "conversation_bench.json"))
    a = ap.parse_args(argv)
    off = run(False, a.sessions, a.turns, a.max_tokens)
    on = run(True, a.sessions, a.turns, a.max_tokens)
    print(f"{a.sessions} sessions x {a.turns} turns, greedy, {a.max_tokens} tokens per reply")
    print(f"{'turn':>4} {'prompt tok':>10} {'decoded off':>11} {'decoded on':>10} "
          f"{'1st tok p50 off':>15} {'on':>7} {'turn ms off':>11} {'on':>7}")
    for x, y in zip(off["per_turn"], on["per_turn"]):
        print(f"{x['turn']:>4} {x['prompt_tokens']:>10} {x['prompt_tokens_decoded']:>11} "
              f"{y['prompt_tokens_decoded']:>10} {x['first_token_ms_p50']!s:>15} "
              f"{y['first_token_ms_p50']!s:>7} {x['turn_wall_ms']:>11} {y['turn_wall_ms']:>7}")
    same = off["replies_last_turn"] == on["replies_last_turn"]
    last_off, last_on = off["per_turn"][-1], on["per_turn"][-1]
    speedup = round(last_off["first_token_ms_p50"] / max(last_on["first_token_ms_p50"], 1e-9), 2)
    print(f"wall: off {off['wall_s']} s, on {on['wall_s']} s; last turn first token p50 "
          f"{speedup}x faster with the cache; same replies: {same}")
    write_json(a.out, {"sessions": a.sessions, "turns": a.turns, "max_tokens": a.max_tokens,
                       "off": off, "on": on, "last_turn_first_token_speedup": speedup,
                       "same_replies": same})
    return 0


if __name__ == "__main__":
    sys.exit(main())
