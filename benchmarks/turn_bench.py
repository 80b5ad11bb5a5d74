"""Turn-taking benchmark: each turn-detection mode side by side, in one run.

Spoken test sets are built here with flite voices (slt, rms, awb, kal16),
varied in voice and speaking rate, with pause lengths drawn from a fixed seed:

* ``complete``: whole questions, then silence;
* ``paused``: a sentence with a 400-900 ms pause in the middle ("i would like
  to book a table ... for two people at seven").

For ``server_vad`` (a fixed 500 ms silence window, today's default) and
``semantic_vad`` at each eagerness (the Smart Turn model decides how long to
wait), over a real served ``voice-agent serve`` (its own process) and the
Realtime WebSocket, in real time:

* ``latency_ms``: TRUE end of the user's speech (last speech frame sent) ->
  first ``response.output_audio.delta`` at the client (p50/p95, ``complete``);
* ``premature_rate``: share of ``paused`` sentences whose turn was ended in the
  pause (the server committed the first half, or answered, before the
  second half was spoken);
* ``verdicts``: the end-of-turn model's complete/incomplete counts.

The interruption figures the turn-taking issue also names (``stop_ms``,
``false_cancel_rate``, ``resumed_rate``, ``wasted_think_ratio``) are reported
as ``null`` until the server pauses and resumes replies (see README).

    .venv/bin/python -m benchmarks.turn_bench
    .venv/bin/python -m benchmarks.turn_bench --modes server_vad,semantic_vad:auto --repeat 1

Prints a table; writes benchmarks/results/turn.json with keys
``modes.<mode>.{latency_ms.{p50,p95}, premature_rate, stop_ms.{p50,p95},
false_cancel_rate, resumed_rate, wasted_think_ratio}``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import tempfile
import wave

import numpy as np

from voice_server.audio_codec import resample
from voice_server.testing.callers.base import RealtimeWSTransport
from voice_server.testing.callers.caller import Caller
from voice_server.testing.report import pct, write_json
from voice_server.testing.server_process import served

RATE = 24000
VOICES = [("slt", 1.0), ("rms", 1.0), ("awb", 1.1), ("kal16", 0.95), ("slt", 1.15), ("rms", 0.9)]
COMPLETE = ["what is the capital of france", "can you recommend a good book",
            "how far away is the moon", "what time does the store open tomorrow",
            "tell me a fun fact about cats", "what is the weather like today"]
PAUSED = [("i would like to book a table", "for two people at seven"),
          ("can you tell me how", "to get to the train station"),
          ("my order number is", "four five six seven"),
          ("i was wondering if", "you could help me with my account"),
          ("what i really need is", "a cheaper phone plan"),
          ("please remind me to", "call my mother this evening")]
MODES = ["server_vad", "semantic_vad:low", "semantic_vad:medium", "semantic_vad:high"]


def speak(text: str, voice: str, stretch: float) -> np.ndarray:
    """int16 at 24 kHz, the synthesiser's leading/trailing quiet cut (the true speech bounds)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.wav")
        subprocess.run(["flite", "-voice", voice, "--setf", f"duration_stretch={stretch}",
                        "-t", text, "-o", path], check=True, capture_output=True, timeout=60)
        with wave.open(path, "rb") as w:
            pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
            rate = w.getframerate()
    pcm = resample(pcm, rate, RATE)
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 300)
    return pcm[loud[0]:loud[-1] + 1] if loud.size else pcm


def build_sets(seed: int) -> dict:
    rng = random.Random(seed)
    complete = []
    for i, text in enumerate(COMPLETE):
        voice, stretch = VOICES[i % len(VOICES)]
        complete.append({"text": text, "pcm": speak(text, voice, stretch)})
    paused = []
    for i, (a, b) in enumerate(PAUSED):
        voice, stretch = VOICES[(i + 2) % len(VOICES)]
        gap_ms = rng.uniform(400, 900)
        paused.append({"text": f"{a} {b}", "first": speak(a, voice, stretch),
                       "second": speak(b, voice, stretch), "gap_ms": round(gap_ms)})
    return {"complete": complete, "paused": paused}


def turn_detection(mode: str) -> dict:
    if mode == "server_vad":
        return {"type": "server_vad"}
    _, eagerness = mode.split(":")
    return {"type": "semantic_vad", "eagerness": eagerness}


async def settle(c: Caller, n: int, quiet_s: float = 1.0, limit_s: float = 30.0) -> None:
    """Wait until every response created since event n is done and the line is quiet."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while loop.time() < deadline:
        await asyncio.sleep(quiet_s)
        evs = c.events[n:]
        created = sum(1 for e in evs if e["type"] == "response.created")
        done = sum(1 for e in evs if e["type"] == "response.done")
        if done >= created and (not evs or loop.time() - evs[-1]["_t"] >= quiet_s):
            return


async def run_mode(url: str, key: str | None, mode: str, sets: dict, repeat: int) -> dict:
    t = RealtimeWSTransport(url, key)
    await t.connect()
    c = Caller(t, {})
    tasks = [asyncio.ensure_future(c.reader()), asyncio.ensure_future(c.mic())]
    latency, premature, errors = [], [], 0
    try:
        await c.wait(lambda e: e["type"] == "session.created", 0, 30)
        await t.send_event({"type": "session.update", "session": {
            "type": "realtime", "max_output_tokens": 16,
            "audio": {"input": {"turn_detection": turn_detection(mode)}}}})
        await c.wait(lambda e: e["type"] == "session.updated", 0, 30)
        for _ in range(repeat):
            for item in sets["complete"]:
                n = len(c.events)
                _, end = c.say(item["pcm"])
                t_end = await asyncio.wait_for(end, 60)
                _, d = await c.wait(lambda e: e["type"] in ("response.output_audio.delta",
                                                            "response.done"), n, 60)
                if d["type"] == "response.output_audio.delta":
                    latency.append((d["_t"] - t_end) * 1000)
                else:
                    errors += 1
                await c.wait(lambda e: e["type"] == "response.done", n, 60)
                await asyncio.sleep(0.8)
            for item in sets["paused"]:
                n = len(c.events)
                pcm = np.concatenate([item["first"], np.zeros(int(RATE * item["gap_ms"] / 1000),
                                                              np.int16), item["second"]])
                start, _ = c.say(pcm)
                t_start = await asyncio.wait_for(start, 60)
                second_at = t_start + (item["first"].size / RATE) + item["gap_ms"] / 1000
                _, done = await c.wait(lambda e: e["type"] == "response.done", n, 60)
                early = [e for e in c.events[n:] if e["type"] == "input_audio_buffer.committed"
                         and e["_t"] < second_at]
                premature.append(1 if early else 0)
                await settle(c, n)    # a premature turn gets a second reply: let it finish
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await t.close()
    return {"latency_ms": {"p50": pct(latency, 50), "p95": pct(latency, 95), "n": len(latency)},
            "premature_rate": round(sum(premature) / len(premature), 3) if premature else None,
            "premature_n": len(premature),
            "stop_ms": {"p50": None, "p95": None}, "false_cancel_rate": None, "resumed_rate": None,
            "wasted_think_ratio": None, "errors": errors}


async def main_async(a) -> dict:
    sets = build_sets(a.seed)
    modes: dict = {}
    async with served(a.config, a.url) as server:
        for mode in a.modes.split(","):
            modes[mode] = await run_mode(server.url, a.key, mode, sets, a.repeat)
            r = modes[mode]
            print(f"{mode}: latency p50/p95 {r['latency_ms']['p50']}/{r['latency_ms']['p95']} ms, "
                  f"premature {r['premature_rate']}", flush=True)
        rt = await server.runtime()
        for p in rt.get("processes", {}).values():
            ex = p.get("stages", {}).get("listen", {}).get("executor")
            if ex:
                modes["_listen_stats"] = {k: v for k, v in ex.items() if k.startswith("verdict")}
    return modes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--url", help="a running server's http://HOST:PORT")
    ap.add_argument("--key", default=os.environ.get("VOICE_AGENT_API_KEY"))
    ap.add_argument("--config", default="configs/voice-cpu.yaml")
    ap.add_argument("--out", default="benchmarks/results/turn.json")
    a = ap.parse_args()
    modes = asyncio.run(main_async(a))
    listen = modes.pop("_listen_stats", {})
    print(f"\n{'mode':<22}{'latency p50/p95 ms':>22}{'premature':>11}")
    for mode, r in modes.items():
        lat = r["latency_ms"]
        print(f"{mode:<22}{str(lat['p50']) + ' / ' + str(lat['p95']):>22}{r['premature_rate']!s:>11}")
    print("end-of-turn verdicts:", listen)
    targets = {}
    sem = modes.get("semantic_vad:auto") or modes.get("semantic_vad:medium")
    if sem:
        targets["semantic latency p50<=450"] = (sem["latency_ms"]["p50"] or 1e9) <= 450
        targets["semantic latency p95<=700"] = (sem["latency_ms"]["p95"] or 1e9) <= 700
        targets["premature<=10%"] = (sem["premature_rate"] if sem["premature_rate"] is not None
                                     else 1) <= 0.10
    print("targets:", ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in targets.items()))
    write_json(a.out, {"modes": modes, "verdicts": listen, "targets_met": targets, "seed": a.seed})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
