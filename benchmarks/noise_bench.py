"""Noise suppression benchmark: WER, VAD false starts and CPU, each denoiser
setting side by side in one run (issue 32).

People's recordings (Debian ``pocketsphinx-testdata`` LibriVox sentences and
commands, ``alsa-utils`` phrases: :mod:`voice_server.testing.speech_corpus`)
mixed with noise at the given SNRs:

* ``babble``: eight other recordings of the same corpus summed (never the
  clip's own speaker sentence), the room full of people a phone agent hears;
* ``pink``: stationary 1/f noise (fan, road, line hiss).

Each mix goes through the real listen stage (silero VAD, Whisper tiny.en,
one stream at a time) wide-band (16 kHz) and over the phone line (8 kHz
G.711 mu-law), once per ``noise_reduction`` setting: ``off``, ``near_field``,
``far_field`` (what the Realtime settings run, runtime/models/listen/denoise.py)
and the engines themselves (``rnnoise``, ``webrtc-N``, ``dtln``, ``gtcrn``) for
the choice; and ``noisy_asr``: no denoiser, but a line that sounds noisy read
by Whisper base (the stage's ``asr_noisy_model``, line_noise.py), whose
recognition CPU over ``off``'s is ``asr_cpu_added_s_per_caller_minute``.
False starts: 60 s of each noise alone, the turns the VAD opened.  CPU: the
denoiser alone, per audio second, on this machine.

The other people in the room: the ``voice_lock`` setting (no denoiser, the
lock on the caller's voice) is measured by voice_lock_bench's functions on
the caller talking over another person (``talker_0db``, ``talker_-5db``,
``tv``): other people alone (``competing_talker_turns``), while a reply
plays (``false_barge_ins``), and the caller's WER with the lock off and on.

    .venv/bin/python -m benchmarks.noise_bench                  # wide-band, SNR 5 and 0 dB, one lock caller
    .venv/bin/python -m benchmarks.noise_bench --full           # + the phone line, three lock callers
    .venv/bin/python -m benchmarks.noise_bench --quick          # SNR 5 dB, a quarter of the lock trials
    .venv/bin/python -m benchmarks.noise_bench --snr 0,5,10 --settings off,near_field,rnnoise
    .venv/bin/python -m benchmarks.noise_bench --first-audio    # + a real server's first audio (slow)

Prints a table; writes ``--out`` (benchmarks/results/noise.json):
``conditions[name][setting]`` for each condition (``clean``, ``babble_5db``,
``babble_0db``, ``pink_5db`` ..., ``talker_0db``, ``talker_-5db``, ``tv``)
with ``wer_off`` (no processing), ``wer_on`` (the setting), ``clean_wer``,
``false_starts_babble_60s``, ``competing_talker_turns`` and
``false_barge_ins`` (the voice lock's; null for a denoiser, which lets
every other voice through), ``cpu_s_per_caller_minute`` and
``first_audio_p50_ms`` (clean speech, with ``--first-audio``; else null);
and as before ``wer[line][noise@snr][setting]``,
``false_starts[noise][setting]``, ``cpu_ms_per_audio_s[setting]``, the
targets, and ``voice_lock`` (voice_lock_bench's summary).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.asr_bench import LEAD_S, TAIL_S, transcribe
from runtime.executor import WorkItem
from runtime.models.listen.denoise import make_denoiser
from runtime.models.listen.executor import ListenExecutor
from runtime.models.voice_contract import LISTEN_RATE_HZ, SPEECH_STARTED
from voice_server.testing.report import write_json
from voice_server.testing.speech_corpus import Clip, CorpusUnavailable, human_clips, phone_line
from voice_server.testing.wer import corpus_wer

LOCK = "voice_lock"        # the setting measured by voice_lock_bench (no denoiser)
LOCK_CONDITIONS = ("talker_0db", "talker_-5db", "tv")
NOISY_ASR = "noisy_asr"    # no denoiser; a noisy line read by the stage's asr_noisy_model
NOISY_MODEL = "base"
SETTINGS = {"off": None, "near_field": "near_field", "far_field": "far_field", NOISY_ASR: None}
BABBLE_TALKERS = 8
NOISE_ONLY_S = 60.0


def pink_noise(n: int, rng: np.random.Generator) -> np.ndarray:
    spec = np.fft.rfft(rng.standard_normal(n))
    spec /= np.sqrt(np.arange(1, spec.size + 1))
    x = np.fft.irfft(spec, n)
    return (x / np.abs(x).max()).astype(np.float32)


def babble_noise(n: int, others: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    out = np.zeros(n, np.float32)
    for o in rng.choice(len(others), size=min(BABBLE_TALKERS, len(others)), replace=False):
        out += np.roll(np.resize(others[o], n), int(rng.integers(n)))
    return out / max(float(np.abs(out).max()), 1e-6)


def mix(speech: np.ndarray, noise: np.ndarray, snr_db: float) -> np.ndarray:
    ps, pn = float(np.mean(speech ** 2)), float(np.mean(noise ** 2))
    y = speech + noise * np.sqrt(ps / (pn * 10 ** (snr_db / 10)))
    return np.clip(y, -1.0, 1.0).astype(np.float32)


def on_line(audio: np.ndarray, line: str) -> tuple[np.ndarray, int]:
    if line == "phone":
        return phone_line(audio).astype(np.float32) / 32768.0, 8000
    return audio, LISTEN_RATE_HZ


def padded(speech: np.ndarray, noise: np.ndarray | None = None, snr_db: float = 0.0) -> np.ndarray:
    """``speech`` between LEAD_S and TAIL_S of quiet, and ``noise`` (as long as
    all three) over the whole at ``snr_db`` to the speech: a room's noise goes
    on while the caller is silent."""
    lead, tail = int(LEAD_S * LISTEN_RATE_HZ), int(TAIL_S * LISTEN_RATE_HZ)
    y = np.concatenate([np.zeros(lead, np.float32), speech, np.zeros(tail, np.float32)])
    if noise is None:
        return y
    ps, pn = float(np.mean(speech ** 2)), float(np.mean(noise ** 2))
    y = y + noise[:y.size] * np.sqrt(ps / (pn * 10 ** (snr_db / 10)))
    return np.clip(y, -1.0, 1.0).astype(np.float32)


def noisy_sets(clips: list[Clip], snrs: list[float], seed: int = 7) -> dict[str, list]:
    """``{"clean": [(clip, audio)], "babble@5": ..., "pink@5": ...}`` at 16 kHz,
    each clip with its lead and tail (digital silence, or the noise going on)."""
    rng = np.random.default_rng(seed)
    pad = int((LEAD_S + TAIL_S) * LISTEN_RATE_HZ)
    sets: dict[str, list] = {"clean": [(c, padded(c.audio)) for c in clips]}
    for snr in snrs:
        for kind in ("babble", "pink"):
            items = []
            for c in clips:
                others = [o.audio for o in clips if o.name != c.name]
                n = c.audio.size + pad
                noise = babble_noise(n, others, rng) if kind == "babble" else pink_noise(n, rng)
                items.append((c, padded(c.audio, noise, snr)))
            sets[f"{kind}@{snr:g}"] = items
    return sets


def false_starts(ex: ListenExecutor, noise: np.ndarray, setting, rid: int) -> int:
    """Turns the VAD opened on noise alone (speech_started events)."""
    ex.open(rid, {"sample_rate": LISTEN_RATE_HZ, "noise_reduction": setting})
    step, n = LISTEN_RATE_HZ // 50, 0
    try:
        for i in range(0, noise.size, step):
            evs = ex.process([WorkItem(rid, noise[i:i + step], {},
                                       final=i + step >= noise.size)])[0]
            n += sum(1 for e in evs if e["type"] == SPEECH_STARTED)
            ex.collect()
    finally:
        ex.release(rid)
    return n


def denoiser_cpu_ms(setting, audio: np.ndarray) -> float:
    d = make_denoiser(setting)
    if d is None:
        return 0.0
    c0 = time.process_time()
    for i in range(0, audio.size, 320):
        d.process(audio[i:i + 320])
    return (time.process_time() - c0) * 1000 / (audio.size / LISTEN_RATE_HZ)


def condition_name(set_name: str) -> str:
    """``babble@5`` -> ``babble_5db``; ``clean`` stays."""
    kind, _, snr = set_name.partition("@")
    return f"{kind}_{snr}db" if snr else kind


def voice_lock_results(callers_n: int, quick: bool) -> dict:
    """voice_lock_bench on one caller or three (``quick``: a quarter of the
    other people): its summary and mean WERs, lock on and off."""
    from benchmarks import voice_lock_bench as vl

    clips = human_clips()
    ex = ListenExecutor(threads=1, asr_peek_ms=0, turn_model=None)
    ex.load()
    callers = {}
    try:
        for rid, caller in enumerate(["cards", "alsa", "librivox"][:callers_n]):
            got = {}
            for side, lock in (("on", True), ("off", False)):
                cpu0 = ex.cpu_by_role().get("voice_lock", 0.0)
                got[side] = vl.run_caller(ex, caller, clips, lock, 10 * rid + (not lock), np.random.default_rng(0),
                                          quick)
                if lock:
                    cpu = ex.cpu_by_role().get("voice_lock", 0.0) - cpu0
                    got[side]["cpu_s_per_caller_minute"] = cpu / (got[side]["audio_s"] / 60)
            got["extra"] = vl.run_extra(ex, caller, clips, 10 * rid + 2, np.random.default_rng(1), quick)
            callers[caller] = got
            print("voice lock,", caller, {k: v for k, v in got["extra"].items()}, flush=True)
    finally:
        ex.close()
    rows = list(callers.values())

    def mean(f) -> float:
        return round(float(np.mean([f(r) for r in rows])), 4)

    out = {"callers": list(callers),
           "clean_wer": {side: mean(lambda r: r[side]["clean"]["wer"]) for side in ("on", "off")},
           "cpu_s_per_caller_minute": mean(lambda r: r["on"]["cpu_s_per_caller_minute"]),
           "false_barge_ins": sum(r["extra"]["agent_speaking"]["false_barge_ins"] for r in rows),
           "barge_in_trials": sum(r["extra"]["agent_speaking"]["competing_trials"] for r in rows),
           # 60 s of eight other people talking at once, after the caller's enrolment
           "false_starts_babble_60s": max(r["extra"]["babble"]["false_starts_60s"] for r in rows)}
    for cond in LOCK_CONDITIONS:
        out[cond] = {side: {"wer": mean(lambda r: r[side][cond]["wer"]),
                            **{k: sum(r[side][cond][k] for r in rows)
                               for k in ("competing_talker_turns", "competing_trials",
                                         "caller_turns", "caller_trials")}}
                     for side in ("on", "off")}
    return out


def first_audio_p50_ms(config: str | None) -> float | None:
    """A real server's first audio on clean speech: capacity_bench at one
    caller (its recorded questions, three turns)."""
    import asyncio

    from benchmarks import capacity_bench

    a = argparse.Namespace(config=config, url=None, key=None, levels="1", turns=3, seed=7,
                           caller_voice="flite")
    return asyncio.run(capacity_bench.main_async(a))["1"]["first_audio_ms"]["p50"]


def conditions(results: dict, settings: list[str]) -> dict:
    """``conditions[name][setting]``: the issue's keys, from what was measured
    (wide-band WER; the phone line's stays under ``wer``).  The voice lock's
    rows come from voice_lock_bench's own clips (each caller's), so their
    WERs compare with each other (lock off / on), not with the denoisers'."""
    wide = results["wer"].get("wide") or next(iter(results["wer"].values()), {})
    babble = results["false_starts"].get("babble", {})
    first = results.get("first_audio_p50_ms")
    lock = results.get(LOCK)
    out: dict = {}

    added = results.get("asr_cpu_added_s_per_caller_minute", {})

    def row(setting: str, wer_off, wer_on, clean, extra: dict | None = None) -> dict:
        cpu = results["cpu_ms_per_audio_s"].get(setting)
        if setting in added:
            extra = {"asr_cpu_added_s_per_caller_minute": added[setting], **(extra or {})}
        return {"wer_off": wer_off, "wer_on": wer_on, "clean_wer": clean,
                "false_starts_babble_60s": lock["false_starts_babble_60s"] if setting == LOCK and lock
                else babble.get(setting),
                "competing_talker_turns": None, "false_barge_ins": None,
                "cpu_s_per_caller_minute": None if cpu is None else round(cpu * 60 / 1000, 4),
                "first_audio_p50_ms": first, **(extra or {})}

    for set_name, by_setting in wide.items():
        off = by_setting.get("off")
        out[condition_name(set_name)] = {
            name: row(name, off, wer, wide.get("clean", {}).get(name)) for name, wer in by_setting.items()}
    if lock:
        cpu = lock["cpu_s_per_caller_minute"]
        for cond in LOCK_CONDITIONS:
            on, off = lock[cond]["on"], lock[cond]["off"]
            out.setdefault(cond, {})[LOCK] = row(LOCK, off["wer"], on["wer"], lock["clean_wer"]["on"], {
                "competing_talker_turns": on["competing_talker_turns"],
                "competing_trials": on["competing_trials"],
                "caller_turns": on["caller_turns"], "caller_trials": on["caller_trials"],
                "false_barge_ins": lock["false_barge_ins"],
                "barge_in_trials": lock["barge_in_trials"], "cpu_s_per_caller_minute": cpu})
            out[cond]["off"] = row("off", off["wer"], off["wer"], lock["clean_wer"]["off"], {
                "competing_talker_turns": off["competing_talker_turns"],
                "competing_trials": off["competing_trials"],
                "caller_turns": off["caller_turns"], "caller_trials": off["caller_trials"]})
        # voice_lock_bench's callers' own clips (not the clips above): off and on on the same ones
        out.setdefault("clean", {})[LOCK] = row(LOCK, lock["clean_wer"]["off"], lock["clean_wer"]["on"],
                                                lock["clean_wer"]["on"], {"cpu_s_per_caller_minute": cpu})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snr", default=None, help="comma list of SNRs in dB (default 5,0; --quick: 5)")
    ap.add_argument("--lines", default=None, help="default wide (--full: wide,phone)")
    ap.add_argument("--settings", default=",".join([*SETTINGS, LOCK]))
    ap.add_argument("--quick", action="store_true",
                    help="SNR 5 dB, the voice lock on a quarter of the other people: the run's "
                         "shape, in a few minutes")
    ap.add_argument("--full", action="store_true",
                    help="the phone line too and the voice lock on three callers (~25 min)")
    ap.add_argument("--first-audio", action="store_true",
                    help="also start a real server and measure first audio on clean speech (slow)")
    ap.add_argument("--config", default=None, help="the server's config for --first-audio")
    ap.add_argument("--out", default="benchmarks/results/noise.json")
    a = ap.parse_args(argv)
    try:
        clips = [c for c in human_clips() if c.group != "cards"]
    except CorpusUnavailable as exc:
        print(f"no human clips: {exc}")
        return 2
    snrs = [float(s) for s in (a.snr or ("5" if a.quick else "5,0")).split(",")]
    lines = (a.lines or ("wide,phone" if a.full else "wide")).split(",")
    names = a.settings.split(",")
    settings = {s: SETTINGS.get(s, s) for s in names if s != LOCK}
    sets = noisy_sets(clips, snrs)
    ex = ListenExecutor(threads=1, asr_threads=1, asr_engine="whisper", asr_model="tiny.en")
    ex.load()
    executors = {name: ex for name in settings}
    if NOISY_ASR in settings:
        executors[NOISY_ASR] = ListenExecutor(threads=1, asr_threads=1, asr_engine="whisper",
                                              asr_model="tiny.en", asr_noisy_model=NOISY_MODEL,
                                              asr_noisy_preload=True)
        executors[NOISY_ASR].load()
    results: dict = {"clips": len(clips), "audio_s": round(sum(c.seconds for c in clips), 1),
                     "wer": {}, "false_starts": {}, "cpu_ms_per_audio_s": {}}
    busy: dict[str, float] = {name: 0.0 for name in settings}   # recognition, wide band
    rid = 0
    try:
        for line in lines:
            for set_name, items in sets.items():
                row = results["wer"].setdefault(line, {}).setdefault(set_name, {})
                for name, setting in settings.items():   # side by side, same mixes
                    pairs = []
                    rec = executors[name]
                    busy0 = rec.stats()["asr"]["busy_s"]
                    for clip, audio in items:
                        rid += 1
                        x, rate = on_line(audio, line)
                        pairs.append((clip.text, transcribe(rec, x, rate, rid,
                                                            {"noise_reduction": setting},
                                                            pad=False)))
                    row[name] = round(corpus_wer(pairs), 4)
                    if line == "wide":
                        busy[name] += rec.stats()["asr"]["busy_s"] - busy0
                print(f"{line:<6} {set_name:<10}" + "".join(f"{k}={v * 100:5.1f}%  "
                                                           for k, v in row.items()), flush=True)
        rng = np.random.default_rng(11)
        n = int(NOISE_ONLY_S * LISTEN_RATE_HZ)
        noises = {"babble": babble_noise(n, [c.audio for c in clips], rng) * 0.3,
                  "pink": pink_noise(n, rng) * 0.3}
        for kind, noise in noises.items():
            for name, setting in settings.items():
                rid += 1
                results["false_starts"].setdefault(kind, {})[name] = \
                    false_starts(ex, noise, setting, rid)
        for name, setting in settings.items():
            results["cpu_ms_per_audio_s"][name] = round(denoiser_cpu_ms(setting, noises["pink"]), 2)
        if NOISY_ASR in settings and "off" in settings and "wide" in lines:
            minutes = sum(c.seconds for c in clips) * len(sets) / 60.0
            results["asr_cpu_added_s_per_caller_minute"] = {
                NOISY_ASR: round((busy[NOISY_ASR] - busy["off"]) / minutes, 3)}
            print("recognition CPU added by noisy_asr, s per caller-minute (all conditions):",
                  results["asr_cpu_added_s_per_caller_minute"][NOISY_ASR])
    finally:
        for rec in {id(r): r for r in executors.values()}.values():
            rec.close()
    print("false starts on 60 s of noise alone:", results["false_starts"])
    print("denoiser CPU, ms per audio second:", results["cpu_ms_per_audio_s"])
    if LOCK in names:
        results[LOCK] = lock = voice_lock_results(3 if a.full else 1, a.quick)
        print(f"{LOCK}: " + ", ".join(
            f"{c} other alone {lock[c]['on']['competing_talker_turns']}/{lock[c]['on']['competing_trials']}"
            f" caller {lock[c]['on']['caller_turns']}/{lock[c]['on']['caller_trials']}"
            f" WER {lock[c]['off']['wer'] * 100:.1f}% -> {lock[c]['on']['wer'] * 100:.1f}%"
            for c in LOCK_CONDITIONS) +
            f"; false barge-ins {lock['false_barge_ins']}/{lock['barge_in_trials']},"
            f" {lock['cpu_s_per_caller_minute']} CPU s per caller-minute", flush=True)
    results["first_audio_p50_ms"] = first_audio_p50_ms(a.config) if a.first_audio else None
    results["conditions"] = conditions(results, names)
    wide = results["wer"].get("wide", {})
    if "babble@5" in wide and "near_field" in settings and "off" in settings:
        off, on = wide["babble@5"]["off"], wide["babble@5"]["near_field"]
        results["targets"] = {
            "babble@5 relative WER drop >= 30%": bool(off > 0 and (off - on) / off >= 0.30),
            "clean WER rise <= 1 point": wide["clean"]["near_field"] - wide["clean"]["off"] <= 0.01,
            "false starts on noise <= 1": all(v["near_field"] <= 1
                                              for v in results["false_starts"].values()),
        }
    if "babble@5" in wide and NOISY_ASR in settings and "off" in settings:
        off, on = wide["babble@5"]["off"], wide["babble@5"][NOISY_ASR]
        results.setdefault("targets", {}).update({
            "noisy_asr: babble@5 relative WER drop >= 30%": bool(off > 0 and (off - on) / off >= 0.30),
            "noisy_asr: clean WER rise <= 0.5 point": wide["clean"][NOISY_ASR] - wide["clean"]["off"] <= 0.005,
        })
    if "targets" in results:
        print("targets:", results["targets"])
    write_json(a.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
