"""Voice lock benchmark (issue 41): does another person's speech open turns once the
caller is enrolled, and what does the lock cost the caller?

People's recordings only (speech_corpus.py).  Each speaker in turn is the
caller: enrolled from their two longest clips (clean), then, while the agent is
silent, through the real listen stage (silero VAD, Whisper tiny.en) with the
lock on and off:

* ``competing_talker_turns``: every other person's clip alone, at the level the
  condition names relative to the caller, and the turns it opened (target 0
  with the lock on);
* the caller's other clips with that person talking under them: the caller's
  turns opened (``caller_turns``, and ``caller_short_turns`` for clips up to
  ``SHORT_CLIP_S``) and the word error rate;
* ``clean_wer`` on the caller's clips alone, lock on and off;
* ``cpu_s_per_caller_minute``: CPU of the speaker-embedding thread per minute
  of audio streamed with the lock on.

Conditions (``talker_Xdb``: the caller is X dB above the other talker, so at
-5 dB the talker is the louder): ``talker_0db``, ``talker_-5db``, ``tv`` (other
people's speech over a music-like chord bed, at 0 dB).

    .venv/bin/python -m benchmarks.voice_lock_bench [--quick] [--out FILE]

Writes benchmarks/results/voice_lock.json.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from runtime.executor import WorkItem
from runtime.models.listen.executor import ListenExecutor
from runtime.models.voice_contract import LISTEN_RATE_HZ
from voice_server.testing.report import write_json
from voice_server.testing.speech_corpus import Clip, human_clips, speaker_of
from voice_server.testing.wer import corpus_wer

CHUNK = LISTEN_RATE_HZ * 20 // 1000
SHORT_CLIP_S = 1.6
CONDITIONS = {"talker_0db": 0.0, "talker_-5db": -5.0, "tv": 0.0}


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x)) + 1e-12))


def chord_bed(n: int, rng: np.random.Generator) -> np.ndarray:
    """Music-like: a sequence of three-note chords with a slow beat, 0.5 s each."""
    t = np.arange(n) / LISTEN_RATE_HZ
    out = np.zeros(n, np.float32)
    step = LISTEN_RATE_HZ // 2
    for i in range(0, n, step):
        root = 110.0 * 2 ** (int(rng.integers(0, 12)) / 12)
        seg = t[i:i + step]
        for ratio in (1.0, 1.26, 1.5, 2.0):
            out[i:i + step] += np.sin(2 * np.pi * root * ratio * seg) * np.exp(-3 * (seg - seg[0]))
    return out


def background(cond: str, other: np.ndarray, n: int, caller_rms: float,
               rng: np.random.Generator) -> np.ndarray:
    """The condition's sound alone, scaled to ``CONDITIONS[cond]`` dB under the caller."""
    speech = np.resize(other, n)
    if cond == "tv":
        music = chord_bed(n, rng)
        speech = speech / rms(speech) + 0.5 * music / rms(music)
    return (speech * caller_rms / rms(speech) * 10 ** (-CONDITIONS[cond] / 20)).astype(np.float32)


def stream(ex: ListenExecutor, rid: int, audio: np.ndarray) -> list[dict]:
    """One utterance's audio (with silence around it) in 20 ms chunks; each chunk's
    jobs are waited out, so verdicts land no later than in real time."""
    pad = np.zeros(LISTEN_RATE_HZ // 4, np.float32)
    pcm = (np.clip(np.concatenate([pad, audio, pad, pad, pad, pad]), -1, 1) * 32767).astype(np.int16)
    out: list[dict] = []
    for i in range(0, len(pcm), CHUNK):
        [res] = ex.process([WorkItem(rid, pcm[i:i + CHUNK], {}, final=False)])
        if isinstance(res, BaseException):
            raise res
        out += res
        while ex.pending(rid):
            out += [e for r, evs in ex.collect() if r == rid for e in evs]
            time.sleep(0.001)
        out += [e for r, evs in ex.collect() if r == rid for e in evs]
    return out


def turns(evs: list[dict]) -> int:
    return sum(e["type"] == "speech_started" for e in evs)


def text(evs: list[dict]) -> str:
    return " ".join(e["text"] for e in evs if e["type"] == "final")


def run_caller(ex: ListenExecutor, caller: str, clips: list[Clip], lock: bool, rid: int,
               rng: np.random.Generator, quick: bool) -> dict:
    mine = sorted((c for c in clips if speaker_of(c) == caller), key=lambda c: -c.seconds)
    others = [c for c in clips if speaker_of(c) != caller]
    if quick:
        others = others[::4]
    enrol, tests = mine[:2], mine[2:]
    ex.open(rid, {"voice_lock": lock})
    audio_s = 0.0
    try:
        for c in enrol:
            stream(ex, rid, c.audio)
            audio_s += c.seconds
        enrolled = bool(ex._streams[rid].lock.enrolled) if lock else None
        caller_rms = float(np.mean([rms(c.audio) for c in mine]))
        out: dict = {"enrolled": enrolled, "clean": {}}
        refs, hyps = [c.text for c in tests], []
        for c in tests:
            hyps.append(text(stream(ex, rid, c.audio)))
            audio_s += c.seconds
        out["clean"]["wer"] = corpus_wer(list(zip(refs, hyps)))
        for cond in CONDITIONS:
            alone = 0
            for o in others:
                bg = background(cond, o.audio, o.audio.size, caller_rms, rng)
                alone += turns(stream(ex, rid, bg))
                audio_s += o.seconds
            opened = short = short_n = 0
            hyps = []
            for k, c in enumerate(tests):
                o = others[k % len(others)].audio
                evs = stream(ex, rid, c.audio + background(cond, o, c.audio.size, caller_rms, rng))
                audio_s += c.seconds
                opened += turns(evs) > 0
                if c.seconds <= SHORT_CLIP_S:
                    short_n += 1
                    short += turns(evs) > 0
                hyps.append(text(evs))
            out[cond] = {"competing_talker_turns": alone, "competing_trials": len(others),
                         "caller_turns": opened, "caller_trials": len(tests),
                         "caller_short_turns": short, "caller_short_trials": short_n,
                         "wer": corpus_wer(list(zip(refs, hyps)))}
        out["audio_s"] = round(audio_s, 1)
        out["counters"] = {k: v for k, v in ex._streams[rid].voice_counts.items()}
        return out
    finally:
        ex.release(rid)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/voice_lock.json")
    ap.add_argument("--quick", action="store_true",
                    help="one caller, a quarter of the other people's clips (checks it runs)")
    args = ap.parse_args(argv)
    clips = human_clips()
    callers = ["cards"] if args.quick else ["cards", "alsa", "librivox"]
    ex = ListenExecutor(threads=1, asr_peek_ms=0, turn_model=None)
    ex.load()
    results: dict = {"callers": {}}
    rid = 1
    try:
        for caller in callers:
            results["callers"][caller] = {}
            for lock in (True, False):
                cpu0 = ex.cpu_by_role().get("voice_lock", 0.0)
                got = run_caller(ex, caller, clips, lock, rid, np.random.default_rng(0), args.quick)
                rid += 1
                if lock:
                    cpu = ex.cpu_by_role().get("voice_lock", 0.0) - cpu0
                    got["cpu_s_per_caller_minute"] = round(cpu / (got["audio_s"] / 60), 3)
                results["callers"][caller]["on" if lock else "off"] = got
                print(caller, "lock on" if lock else "lock off", got, flush=True)
    finally:
        ex.close()
    summary: dict = {}
    for cond in CONDITIONS:
        for side in ("on", "off"):
            rows = [r[side][cond] for r in results["callers"].values()]
            summary.setdefault(cond, {})[side] = {
                k: sum(r[k] for r in rows) for k in ("competing_talker_turns", "competing_trials",
                                                     "caller_turns", "caller_trials",
                                                     "caller_short_turns", "caller_short_trials")}
    summary["clean_wer"] = {side: float(np.mean([r[side]["clean"]["wer"]
                                                 for r in results["callers"].values()]))
                            for side in ("on", "off")}
    summary["cpu_s_per_caller_minute"] = float(np.mean(
        [r["on"]["cpu_s_per_caller_minute"] for r in results["callers"].values()]))
    results["summary"] = summary
    print(summary)
    write_json(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
