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

And, with the lock on only (off, every one of these opens a turn):

* ``short_words``: the first ``SHORT_WORD_S`` of speech of each clip alone
  (a "yes", a "stop"): the caller's turns opened and other people's;
* ``agent_speaking``: the same clips while the server says a reply plays
  (``agent_speaking``): ``false_barge_ins`` counts another person's clips
  that gave the session something to cancel the reply with (a
  ``speech_started``, or an ``onset_dropped`` with words); the caller's
  clips must still open a turn (``caller_barge_ins``);
* ``babble``: 60 s of eight other people talking at once, as loud as the
  caller, after the caller's enrolment: the turns it opened
  (``false_starts_60s``; issue 41's target: at most 1);
* ``phone``: enrolment and trials over an 8 kHz G.711 mu-law line
  (speech_corpus.phone_line, as noise_bench's ``on_line``): other people alone, the caller alone and
  over another talker at the same level.

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
from runtime.models.voice_contract import AGENT_SPEAKING, LISTEN_RATE_HZ
from voice_server.testing.report import write_json
from voice_server.testing.speech_corpus import Clip, human_clips, phone_line, speaker_of
from voice_server.testing.wer import corpus_wer

CHUNK = LISTEN_RATE_HZ * 20 // 1000
SHORT_CLIP_S = 1.6
CONDITIONS = {"talker_0db": 0.0, "talker_-5db": -5.0, "tv": 0.0}
SHORT_WORD_S = 0.5


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


def stream(ex: ListenExecutor, rid: int, audio: np.ndarray, rate: int = LISTEN_RATE_HZ,
           params: dict | None = None) -> list[dict]:
    """One utterance's audio (with silence around it) in 20 ms chunks; each chunk's
    jobs are waited out, so verdicts land no later than in real time.  ``rate``:
    the audio's own rate (8000 over the phone line); ``params``: each chunk's."""
    pad = np.zeros(rate // 4, np.float32)
    pcm = (np.clip(np.concatenate([pad, audio, pad, pad, pad, pad]), -1, 1) * 32767).astype(np.int16)
    chunk = rate * 20 // 1000
    out: list[dict] = []
    for i in range(0, len(pcm), chunk):
        [res] = ex.process([WorkItem(rid, pcm[i:i + chunk], params or {}, final=False)])
        if isinstance(res, BaseException):
            raise res
        out += res
        while ex.pending(rid):
            out += [e for r, evs in ex.collect() if r == rid for e in evs]
            time.sleep(0.001)
        out += [e for r, evs in ex.collect() if r == rid for e in evs]
    return out


def first_words(audio: np.ndarray, seconds: float = SHORT_WORD_S) -> np.ndarray:
    """The first ``seconds`` from where the clip's speech starts (a 20 ms frame
    within 20 dB of its loudest): a short word's worth of the speaker."""
    step = LISTEN_RATE_HZ // 50
    frames = [rms(audio[i:i + step]) for i in range(0, audio.size - step, step)]
    start = next(i for i, f in enumerate(frames) if f >= 0.1 * max(frames)) * step
    return audio[start:start + int(seconds * LISTEN_RATE_HZ)]


def barge_ins(evs: list[dict]) -> int:
    """Whether the session got something to cancel a playing reply with."""
    return int(any(e["type"] == "speech_started" or
                   (e["type"] == "onset_dropped" and e.get("text")) for e in evs))


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


def enrol_caller(ex: ListenExecutor, rid: int, audios: list[np.ndarray], feed) -> int:
    """The caller's clips, longest first, until the lock is enrolled: the clips
    it took (0: never).  Two short clips may not hold the 2 s of voice it
    needs, and another person's speech before enrolment would be enrolled
    instead (two utterances of one other voice agree with each other)."""
    for n, x in enumerate(audios, 1):
        feed(ex, rid, x)
        if ex._streams[rid].lock.enrolled:
            return n
    return 0


def run_extra(ex: ListenExecutor, caller: str, clips: list[Clip], rid: int,
              rng: np.random.Generator, quick: bool) -> dict:
    """Short words, the agent speaking and the phone line, lock on (module doc)."""
    mine = sorted((c for c in clips if speaker_of(c) == caller), key=lambda c: -c.seconds)
    others = [c for c in clips if speaker_of(c) != caller]
    if quick:
        others = others[::4]
    tests = mine[2:]
    caller_rms = float(np.mean([rms(c.audio) for c in mine]))
    out: dict = {}
    ex.open(rid, {"voice_lock": True})
    try:
        out["enrol_clips"] = enrol_caller(ex, rid, [c.audio for c in mine], stream)
        out["short_words"] = {
            "caller_turns": sum(turns(stream(ex, rid, first_words(c.audio))) > 0 for c in tests),
            "caller_trials": len(tests),
            "other_turns": sum(turns(stream(ex, rid, first_words(o.audio))) > 0 for o in others),
            "other_trials": len(others)}
        talking = {AGENT_SPEAKING: True}
        out["agent_speaking"] = {
            "false_barge_ins": sum(barge_ins(stream(ex, rid, background("talker_0db", o.audio,
                                                                        o.audio.size, caller_rms,
                                                                        rng), params=talking))
                                   for o in others),
            "competing_trials": len(others),
            "caller_barge_ins": sum(turns(stream(ex, rid, c.audio, params=talking)) > 0
                                    for c in tests),
            "caller_trials": len(tests)}
        # a room full of talk after enrolment: eight other people at once
        from benchmarks.noise_bench import BABBLE_TALKERS, NOISE_ONLY_S, babble_noise

        room = babble_noise(int(NOISE_ONLY_S * LISTEN_RATE_HZ), [o.audio for o in others], rng)
        room *= caller_rms / max(rms(room), 1e-9)          # as loud as the caller
        out["babble"] = {"false_starts_60s": turns(stream(ex, rid, room)),
                         "talkers": BABBLE_TALKERS, "seconds": NOISE_ONLY_S}
    finally:
        ex.release(rid)
    ex.open(rid + 1, {"voice_lock": True, "sample_rate": 8000})
    try:
        def phone(x: np.ndarray) -> list[dict]:
            return stream(ex, rid + 1, phone_line(x).astype(np.float32) / 32768.0, rate=8000)

        enrolled = enrol_caller(ex, rid + 1, [c.audio for c in mine], lambda e, r, x: phone(x))
        mixed = [c.audio + background("talker_0db", others[k % len(others)].audio, c.audio.size,
                                      caller_rms, rng) for k, c in enumerate(tests)]
        out["phone"] = {
            "enrol_clips": enrolled,
            "competing_talker_turns": sum(turns(phone(background("talker_0db", o.audio,
                                                                 o.audio.size, caller_rms, rng)))
                                          for o in others),
            "competing_trials": len(others),
            "caller_turns": sum(turns(phone(c.audio)) > 0 for c in tests),
            "caller_over_talker_turns": sum(turns(phone(x)) > 0 for x in mixed),
            "caller_trials": len(tests)}
    finally:
        ex.release(rid + 1)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/voice_lock.json")
    ap.add_argument("--quick", action="store_true",
                    help="one caller, a quarter of the other people's clips (checks it runs)")
    ap.add_argument("--extra-only", action="store_true",
                    help="only the short words, the agent speaking and the phone line")
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
            for lock in () if args.extra_only else (True, False):
                cpu0 = ex.cpu_by_role().get("voice_lock", 0.0)
                got = run_caller(ex, caller, clips, lock, rid, np.random.default_rng(0), args.quick)
                rid += 1
                if lock:
                    cpu = ex.cpu_by_role().get("voice_lock", 0.0) - cpu0
                    got["cpu_s_per_caller_minute"] = round(cpu / (got["audio_s"] / 60), 3)
                results["callers"][caller]["on" if lock else "off"] = got
                print(caller, "lock on" if lock else "lock off", got, flush=True)
            got = run_extra(ex, caller, clips, rid, np.random.default_rng(1), args.quick)
            rid += 2
            results["callers"][caller]["extra"] = got
            print(caller, "lock on, extra", got, flush=True)
    finally:
        ex.close()
    summary: dict = {}
    for cond in () if args.extra_only else CONDITIONS:
        for side in ("on", "off"):
            rows = [r[side][cond] for r in results["callers"].values()]
            summary.setdefault(cond, {})[side] = {
                k: sum(r[k] for r in rows) for k in ("competing_talker_turns", "competing_trials",
                                                     "caller_turns", "caller_trials",
                                                     "caller_short_turns", "caller_short_trials")}
    if not args.extra_only:
        summary["clean_wer"] = {side: float(np.mean([r[side]["clean"]["wer"]
                                                     for r in results["callers"].values()]))
                                for side in ("on", "off")}
        summary["cpu_s_per_caller_minute"] = float(np.mean(
            [r["on"]["cpu_s_per_caller_minute"] for r in results["callers"].values()]))
    for section in ("short_words", "agent_speaking", "phone"):
        rows = [r["extra"][section] for r in results["callers"].values()]
        summary[section] = {k: sum(r[k] for r in rows) for k in rows[0]}
    babble = [r["extra"]["babble"]["false_starts_60s"] for r in results["callers"].values()]
    summary["babble"] = {"false_starts_60s_max": max(babble), "trials_of_60s": len(babble)}
    results["summary"] = summary
    print(summary)
    write_json(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
