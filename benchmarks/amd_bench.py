"""Answering-machine detection benchmark: recordings made here, over the phone line.

Each recording is an outbound call's first seconds as the phone network
carries them (8 kHz G.711 mu-law): half a second of line silence, the answer,
then the silence of someone (or something) waiting. Answers:

* ``machine``: voicemail greetings (flite voices slt, rms, awb, kal) followed,
  after 0.3-0.8 s, by a beep of 800-1400 Hz for 0.3-0.6 s (one in four
  without a beep: the greeting just ends);
* ``person (flite)``: short answers ("Hello?", "Yes, this is Anna.") in the
  same voices;
* ``person (recorded)``: people's short recordings from the corpus
  (``alsa-utils`` phrases, "go forward ten meters"), the nearest thing to a
  real "hello" the Debian packages hold;
* ``person reading``: LibriVox sentences of 3-7 s, a person who talks on:
  shown apart, since the rule calls a long first answer a machine.

The listen stage's silero VAD (the real stage code) gives the speech bounds;
:class:`voice_server.session.answering_machine.AnsweringMachineDetector` the
verdict, exactly as a session does.

    .venv/bin/python -m benchmarks.amd_bench

Prints accuracy, time to the verdict after the answer began, and when the
message would start after a machine's beep; writes benchmarks/results/amd.json.
"""

from __future__ import annotations

import argparse

import numpy as np
import soxr

from runtime.executor import WorkItem
from runtime.models.listen.executor import ListenExecutor
from runtime.models.voice_contract import SPEECH_STARTED, SPEECH_STOPPED
from voice_server.session.answering_machine import AnsweringMachineDetector, Verdict
from voice_server.testing.audio import flite_pcm
from voice_server.testing.report import pct, write_json
from voice_server.testing.speech_corpus import CorpusUnavailable, human_clips, phone_line

SR = 16000
VOICES = ("slt", "rms", "awb", "kal")
GREETINGS = [
    "Hi, you have reached Jane. I can not take your call right now. "
    "Please leave a message after the tone.",
    "Hello, this is the voicemail of Michael Brown. Leave your name and number and "
    "I will call you back.",
    "The person you are calling is not available. Please record your message after the beep.",
    "Thanks for calling Acme Dental. Our office is closed. Leave a message and we will "
    "return your call tomorrow.",
    "Hey, it is Sam. Leave a message.",
    "You have reached five five five, zero one four two. Please leave a message.",
]
ANSWERS = ["Hello?", "Yes, this is Anna.", "Hello, who is calling?", "Speaking.", "Hi!",
           "Hello, Jane speaking."]


def beep(rng: np.random.Generator) -> np.ndarray:
    ms, freq = rng.uniform(300, 600), rng.uniform(800, 1400)
    t = np.arange(int(SR * ms / 1000)) / SR
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def recordings(rng: np.random.Generator) -> list[tuple[str, str, np.ndarray, float | None]]:
    """(set, expected, 16 kHz float audio of the answer alone, where its beep ends in it)."""
    out = []
    for i, text in enumerate(GREETINGS):
        for v in VOICES:
            g = flite_pcm(text, SR, voice=v).astype(np.float32) / 32768
            if (i + VOICES.index(v)) % 4 == 3:
                out.append(("machine", "machine", g, None))
                continue
            gap = np.zeros(int(SR * rng.uniform(0.3, 0.8)), np.float32)
            b = beep(rng)
            audio = np.concatenate([g, gap, b])
            out.append(("machine", "machine", audio, audio.size * 1000 / SR))
    for text in ANSWERS:
        for v in VOICES:
            out.append(("person (flite)", "human",
                        flite_pcm(text, SR, voice=v).astype(np.float32) / 32768, None))
    try:
        for c in human_clips():
            if c.group == "commands":
                out.append(("person (recorded)", "human", c.audio, None))
            elif c.group == "librivox":
                out.append(("person reading", "human", c.audio, None))
    except CorpusUnavailable as exc:
        print(f"people's recordings skipped: {exc}")
    return out


def run_one(ex: ListenExecutor, rid: int, answer: np.ndarray) -> tuple[str | None, float | None,
                                                                       float | None]:
    """(verdict, its position in ms, where the message would start) over the phone line."""
    lead, wait = np.zeros(SR // 2, np.float32), np.zeros(SR * 4, np.float32)
    line = phone_line(np.concatenate([lead, answer, wait]))  # 8 kHz int16
    pcm16 = soxr.resample(line.astype(np.float32) / 32768, 8000, SR)
    pcm16 = np.clip(pcm16 * 32768, -32768, 32767).astype(np.int16)
    det = AnsweringMachineDetector()
    ex.open(rid, {"sample_rate": 8000})
    verdict_at = speak_at = None
    try:
        for i in range(0, line.size, 160):  # 20 ms chunks, as a phone bridge sends them
            chunk = line[i:i + 160].astype(np.float32) / 32768
            evs = ex.process([WorkItem(rid, chunk, {}, final=i + 160 >= line.size)])[0]
            ex.collect()
            for e in evs:
                if e["type"] == SPEECH_STARTED:
                    det.speech_started(float(e["audio_start_ms"]))
                elif e["type"] == SPEECH_STOPPED:
                    det.speech_stopped(float(e["audio_end_ms"]))
            pos = (i + 160) * 1000 / 8000
            det.audio(pcm16[i * 2:(i + 160) * 2], pos)
            if det.advance(pos) is not None:
                verdict_at = pos
            if speak_at is None and det.verdict is Verdict.MACHINE and det.greeting_over(pos):
                speak_at = pos
    finally:
        ex.release(rid)
    return (det.verdict.value if det.verdict else None), verdict_at, speak_at


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/amd.json")
    a = ap.parse_args()
    rng = np.random.default_rng(5)
    recs = recordings(rng)
    ex = ListenExecutor(threads=1, asr_threads=1, asr_engine="pocketsphinx")
    ex.load()
    rows: dict[str, dict] = {}
    try:
        for rid, (name, expected, audio, beep_end) in enumerate(recs, 1):
            verdict, at, speak = run_one(ex, rid, audio)
            r = rows.setdefault(name, {"n": 0, "right": 0, "verdict_ms": [], "after_beep_ms": [],
                                       "wrong": []})
            r["n"] += 1
            r["right"] += verdict == expected
            if verdict != expected:
                r["wrong"].append(verdict)
            if at is not None:
                r["verdict_ms"].append(at - 500.0)  # after the answer began
            if speak is not None and beep_end is not None:
                r["after_beep_ms"].append(speak - 500.0 - beep_end)
    finally:
        ex.close()
    results = {}
    print(f"{'answer':<20}{'n':>4}{'right':>8}{'verdict p50 ms':>16}{'msg after beep p50':>20}")
    for name, r in rows.items():
        results[name] = {"n": r["n"], "accuracy": round(r["right"] / r["n"], 3),
                         "verdict_ms_p50": pct(r["verdict_ms"], 50),
                         "message_after_beep_ms_p50": pct(r["after_beep_ms"], 50),
                         "wrong": r["wrong"]}
        res = results[name]
        print(f"{name:<20}{r['n']:>4}{res['accuracy'] * 100:>7.0f}%"
              f"{res['verdict_ms_p50'] or 0:>16.0f}{res['message_after_beep_ms_p50'] or 0:>20.0f}")
    write_json(a.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
