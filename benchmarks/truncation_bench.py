"""A conversation ten times longer than the think stage's context, answered
turn after turn, by the session's ``truncation`` against the think stage alone.

Why: a long call outgrows the model's context (1024 tokens per conversation in
configs/voice-cpu.yaml).  The think stage never fails on it (it cuts the
prompt to fit), but it gets the whole history with every turn, measures it
token by token to cut it, and cuts at a different place every turn, so its
decoded cells of the last turn seldom match.  The session's ``truncation``
keeps the history within the context before asking: ``auto`` cuts as little
as needed, ``retention_ratio`` 0.5 cuts deeper and then adds to a stable
prompt.  Variants, alternated session by session in one run, each on the real
CPU pipeline (greedy thinker) over the Realtime WebSocket, text replies:

* ``thinker`` - a server with ``context_tokens: 0``: the session sends the
  whole conversation, the think stage fits it;
* ``auto`` and ``retention_0.5`` - the default server, the session's setting.

Each session gets N long text items (default 40 of ~1,200 characters), then T
short questions, each answered before the next.  Per turn: time from
``response.create`` to the first text delta and to ``response.done``, prompt
tokens and how many of them the think stage had decoded already (``usage``).

    .venv/bin/python -m benchmarks.truncation_bench [--items 40] [--turns 6] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from voice_server.settings import ServerSettings
from voice_server.testing import TEST_API_KEY, ServerThread
from voice_server.testing.greedy_config import greedy_config
from voice_server.testing.realtime_client import RTClient
from voice_server.testing.report import pct, write_json

ROOT = Path(__file__).resolve().parents[1]
FILLER = ("The river runs past the old mill and the fields where the farmers grow "
          "wheat and barley every summer. ") * 12
QUESTIONS = ["What is the capital of France?", "Name a fruit.", "How many legs has a cat?",
             "Say hello.", "What colour is the sky?", "Name a day of the week.",
             "What is two plus two?", "Name an animal."]
VARIANTS = {"thinker": None, "auto": "auto",
            "retention_0.5": {"type": "retention_ratio", "retention_ratio": 0.5}}


async def one_session(url: str, truncation, items: int, turns: int) -> list[dict]:
    c = await RTClient.connect(url)
    try:
        await c.wait("session.created")
        update = {"type": "realtime", "output_modalities": ["text"],
                  "audio": {"input": {"turn_detection": None}}}
        if truncation is not None:
            update["truncation"] = truncation
        await c.send({"type": "session.update", "session": update})
        await c.wait("session.updated")
        for i in range(items):
            role, kind = ("user", "input_text") if i % 2 == 0 else ("assistant", "output_text")
            await c.send({"type": "conversation.item.create", "item": {
                "type": "message", "role": role,
                "content": [{"type": kind, "text": f"Note {i}. {FILLER}"}]}})
        await c.wait("conversation.item.done", lambda e: e["item"]["content"][0]["text"]
                     .startswith(f"Note {items - 1}."), timeout=60)
        out = []
        for t in range(turns):
            await c.send({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": QUESTIONS[t % len(QUESTIONS)]}]}})
            start = len(c.events)
            t0 = time.monotonic()
            await c.send({"type": "response.create"})
            done = await c.wait("response.done", start=start, timeout=180)
            first = next((c.times[i] for i in range(start, len(c.events))
                          if c.events[i]["type"] == "response.output_text.delta"), None)
            usage = done["response"]["usage"]
            out.append({"turn": t, "status": done["response"]["status"],
                        "first_text_ms": None if first is None else round((first - t0) * 1e3, 1),
                        "done_ms": round((c.times[c.index(done)] - t0) * 1e3, 1),
                        "input_tokens": usage["input_tokens"],
                        "cached_tokens": usage["input_token_details"]["cached_tokens"]})
        return out
    finally:
        await c.close()


def summary(turns: list[dict]) -> dict:
    first = [t for t in turns if t["turn"] == 0]
    later = [t for t in turns if t["turn"] > 0]
    return {"first_turn_first_text_ms_p50": pct([t["first_text_ms"] for t in first], 50),
            "later_turns_first_text_ms_p50": pct([t["first_text_ms"] for t in later], 50),
            "later_turns_first_text_ms_p95": pct([t["first_text_ms"] for t in later], 95),
            "input_tokens_p50": pct([t["input_tokens"] for t in turns], 50),
            "later_turns_cached_share": round(sum(t["cached_tokens"] for t in later) /
                                              max(sum(t["input_tokens"] for t in later), 1), 3),
            "completed": sum(t["status"] == "completed" for t in turns), "turns": len(turns)}


async def run(a: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = str(greedy_config(Path(tmp)))
        base = dict(api_keys=[TEST_API_KEY], max_sessions=4, max_output_tokens=a.max_tokens)
        servers = {"thinker": ServerThread(cfg, ServerSettings(context_tokens=0, **base)).start(),
                   "session": ServerThread(cfg, ServerSettings(**base)).start()}
        try:
            per: dict[str, list[dict]] = {v: [] for v in VARIANTS}
            for _ in range(a.rounds):
                for name, truncation in VARIANTS.items():
                    srv = servers["thinker" if name == "thinker" else "session"]
                    per[name] += await one_session(srv.url, truncation, a.items, a.turns)
            return {name: {"summary": summary(turns), "turns": turns}
                    for name, turns in per.items()}
        finally:
            for srv in servers.values():
                srv.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=40)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" /
                                         "truncation_bench.json"))
    a = ap.parse_args(argv)
    res = asyncio.run(run(a))
    print(f"{a.items} items of ~{len(FILLER)} chars, {a.turns} turns, {a.rounds} rounds, "
          f"greedy, {a.max_tokens} tokens per reply")
    print(f"{'variant':<14} {'1st turn ms':>11} {'later p50':>9} {'later p95':>9} "
          f"{'prompt tok':>10} {'cached':>6} {'completed':>9}")
    for name, r in res.items():
        s = r["summary"]
        print(f"{name:<14} {s['first_turn_first_text_ms_p50']!s:>11} "
              f"{s['later_turns_first_text_ms_p50']!s:>9} {s['later_turns_first_text_ms_p95']!s:>9} "
              f"{s['input_tokens_p50']!s:>10} {s['later_turns_cached_share']:>6} "
              f"{s['completed']}/{s['turns']:<7}")
    write_json(a.out, {"items": a.items, "turns": a.turns, "rounds": a.rounds,
                       "max_tokens": a.max_tokens, "variants": res})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
