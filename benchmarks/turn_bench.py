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

* ``wasted_think_ratio``: think tokens of replies prepared during a pause and
  then dropped (the speaker went on), over all think tokens (from ``/metrics``).

And during a long reply (paced: the client holds at most ``output_lead_ms``):

* ``stop_ms``: real interruptions ("wait, stop, what about tomorrow") -> when a
  client that plays each delta on arrival and stops at ``speech_started`` (as
  standard clients do) stops hearing the reply, from the first interrupting
  frame sent (p50/p95);
* ``false_cancel_rate`` / ``resumed_rate``: of coughs and a door knock (noise
  bursts made here), backchannels ("mm hmm", "yeah", "okay", "right", flite)
  and the reply's own audio fed back into the mic (-20 dB, 150 ms late), the
  share that cancelled the reply, and the share paused and then resumed.

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
from voice_server.testing.callers.caller import Caller, connected
from voice_server.testing.report import pct, write_json
from voice_server.testing.server_process import add_server_arguments, served

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
BACKCHANNELS = ["mm hmm", "yeah", "okay", "right"]
INTERRUPTIONS = ["wait, stop, what about tomorrow", "actually tell me the time instead",
                 "no no, i meant the other one", "hold on, can you repeat that"]
STORY = "tell me a long story about a dragon who learns to fly"


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
    nrng = np.random.default_rng(seed)
    noises = []
    for dur_ms in (120, 160, 200):           # coughs: shaped bursts of noise
        n = int(RATE * dur_ms / 1000)
        env = np.hanning(n) * 9000
        noises.append({"kind": "cough", "pcm": (nrng.normal(0, 1, n) * env).astype(np.int16)})
    knock = np.zeros(int(RATE * 0.35), np.int16)  # a door: two short knocks
    for at in (0, int(RATE * 0.2)):
        k = int(RATE * 0.03)
        knock[at:at + k] = (nrng.normal(0, 1, k) * np.hanning(k) * 14000).astype(np.int16)
    noises.append({"kind": "knock", "pcm": knock})
    backchannels = [{"kind": "backchannel", "text": t,
                     "pcm": speak(t, *VOICES[i % len(VOICES)])} for i, t in enumerate(BACKCHANNELS)]
    interruptions = [{"kind": "interruption", "text": t, "pcm": speak(t, *VOICES[(i + 1) % len(VOICES)])}
                     for i, t in enumerate(INTERRUPTIONS)]
    story = speak(STORY, "slt", 1.0)
    return {"complete": complete, "paused": paused, "noise": noises, "backchannel": backchannels,
            "interruption": interruptions, "story": story}


def heard_until(events: list[dict], response_id: str) -> float | None:
    """When a client that plays each delta as it arrives (and stops at
    ``speech_started``, as standard clients do) stops hearing this reply."""
    start, received_ms, stopped = None, 0.0, None
    for e in events:
        if e["type"] == "response.output_audio.delta" and e["response_id"] == response_id:
            start = start if start is not None else e["_t"]
            received_ms += len(e["delta"]) * 3 / 4 / 2 / RATE * 1000     # base64 -> pcm16
        elif e["type"] == "input_audio_buffer.speech_started" and start is not None:
            stopped = e["_t"]
            break
    if start is None:
        return None
    ran_out = start + received_ms / 1000
    return min(ran_out, stopped) if stopped is not None else ran_out


async def during_reply(c: Caller, story: np.ndarray, trial: dict, echo: bool = False) -> dict:
    """Ask for a long reply; about a second into its audio, play the trial sound
    (or the reply's own audio back at -20 dB, 150 ms late, as a speakerphone
    would); report whether the reply was cancelled, paused, resumed, and for
    real interruptions when the client stopped hearing it."""
    n = len(c.events)
    c.say(story)
    i, first = await c.wait(lambda e: e["type"] == "response.output_audio.delta", n, 60)
    rid = first["response_id"]
    await asyncio.sleep(1.0)
    if echo:
        import base64
        pcm = np.concatenate([np.frombuffer(base64.b64decode(e["delta"]), "<i2")
                              for e in c.events[i:] if e["type"] == "response.output_audio.delta"
                              and e["response_id"] == rid])
        sound = np.concatenate([np.zeros(int(RATE * 0.15), np.int16), (pcm[:RATE * 2] // 10)])
    else:
        sound = trial["pcm"]
    start, end = c.say(sound)
    t0 = await asyncio.wait_for(start, 30)
    await asyncio.wait_for(end, 30)
    await asyncio.sleep(1.5)
    evs = c.events[i:]
    cancelled = any(e["type"] == "response.done" and e["response"]["id"] == rid
                    and e["response"]["status"] == "cancelled" for e in evs)
    resumed = any(e["type"] == "voice_agent.output_audio.resumed" and e["response_id"] == rid
                  for e in evs)
    stop = heard_until(evs, rid) if cancelled else None
    if not any(e["type"] == "response.done" and e["response"]["id"] == rid for e in c.events[i:]):
        await c.t.send_event({"type": "response.cancel"})
    await settle(c, n)
    return {"cancelled": cancelled, "resumed": resumed,
            "stop_ms": None if stop is None else (stop - t0) * 1000}


async def interruption_trials(c: Caller, sets: dict) -> dict:
    await c.t.send_event({"type": "session.update", "session": {
        "type": "realtime", "max_output_tokens": 120,
        "instructions": "You tell long, detailed stories of many sentences."}})
    stops, false_cancel, resumed, total_false = [], 0, 0, 0
    for trial in sets["interruption"]:
        r = await during_reply(c, sets["story"], trial)
        if r["stop_ms"] is not None:
            stops.append(r["stop_ms"])
    for trial in sets["noise"] + sets["backchannel"] + [{"kind": "echo"}] * 2:
        r = await during_reply(c, sets["story"], trial, echo=trial["kind"] == "echo")
        total_false += 1
        false_cancel += r["cancelled"]
        resumed += r["resumed"] and not r["cancelled"]
    return {"stop_ms": {"p50": pct(stops, 50), "p95": pct(stops, 95), "n": len(stops),
                        "not_stopped": len(sets["interruption"]) - len(stops)},
            "false_cancel_rate": round(false_cancel / total_false, 3),
            "resumed_rate": round(resumed / total_false, 3), "false_trials": total_false}


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


async def run_mode(url: str, key: str | None, mode: str, sets: dict, repeat: int,
                   interrupts: bool = True) -> dict:
    latency, premature, errors = [], [], 0
    async with connected(RealtimeWSTransport(url, key), session={
            "max_output_tokens": 16,
            "audio": {"input": {"turn_detection": turn_detection(mode)}}}) as c:
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
        inter = await interruption_trials(c, sets) if interrupts else \
            {"stop_ms": {"p50": None, "p95": None}, "false_cancel_rate": None, "resumed_rate": None}
    return {"latency_ms": {"p50": pct(latency, 50), "p95": pct(latency, 95), "n": len(latency)},
            "premature_rate": round(sum(premature) / len(premature), 3) if premature else None,
            "premature_n": len(premature), **inter, "wasted_think_ratio": None, "errors": errors}


async def main_async(a) -> dict:
    sets = build_sets(a.seed)
    modes: dict = {}
    async with served(a.config, a.url) as server:
        for mode in a.modes.split(","):
            before = [await server.metric("voice_think_tokens_total", outcome=o)
                      for o in ("used", "wasted")]
            modes[mode] = r = await run_mode(server.url, a.key, mode, sets, a.repeat,
                                             not a.no_interruptions)
            used, wasted = [await server.metric("voice_think_tokens_total", outcome=o) - b
                            for o, b in zip(("used", "wasted"), before)]
            r["wasted_think_ratio"] = round(wasted / (used + wasted), 3) if used + wasted else None
            r["prepared_replies"] = {"think_tokens_used": used, "think_tokens_wasted": wasted}
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
    ap.add_argument("--no-interruptions", action="store_true",
                    help="only latency and premature end of turn (faster)")
    add_server_arguments(ap, "benchmarks/results/turn.json")
    a = ap.parse_args()
    modes = asyncio.run(main_async(a))
    listen = modes.pop("_listen_stats", {})
    print(f"\n{'mode':<22}{'latency p50/p95 ms':>22}{'premature':>11}{'wasted think':>14}"
          f"{'stop p50/p95 ms':>20}{'false cancel':>14}{'resumed':>9}")
    for mode, r in modes.items():
        lat, st = r["latency_ms"], r["stop_ms"]
        print(f"{mode:<22}{str(lat['p50']) + ' / ' + str(lat['p95']):>22}{r['premature_rate']!s:>11}"
              f"{r['wasted_think_ratio']!s:>14}{str(st['p50']) + ' / ' + str(st['p95']):>20}"
              f"{r['false_cancel_rate']!s:>14}{r['resumed_rate']!s:>9}")
    print("end-of-turn verdicts:", listen)
    targets = {}
    sem = modes.get("semantic_vad:auto") or modes.get("semantic_vad:medium")
    if sem:
        targets["semantic latency p50<=450"] = (sem["latency_ms"]["p50"] or 1e9) <= 450
        targets["semantic latency p95<=700"] = (sem["latency_ms"]["p95"] or 1e9) <= 700
        targets["premature<=10%"] = (sem["premature_rate"] if sem["premature_rate"] is not None
                                     else 1) <= 0.10
        if sem["stop_ms"]["p50"] is not None:
            targets["stop p50<=250"] = sem["stop_ms"]["p50"] <= 250
        if sem["false_cancel_rate"] is not None:
            targets["false cancels<=5%"] = sem["false_cancel_rate"] <= 0.05
            targets["resumed>=90%"] = sem["resumed_rate"] >= 0.90
    print("targets:", ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in targets.items()))
    write_json(a.out, {"modes": modes, "verdicts": listen, "targets_met": targets, "seed": a.seed})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
