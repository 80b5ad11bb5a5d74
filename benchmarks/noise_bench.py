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
and the engines themselves (``rnnoise``, ``webrtc-N``) for the choice.
False starts: 60 s of each noise alone, the turns the VAD opened.  CPU: the
denoiser alone, per audio second, on this machine.

    .venv/bin/python -m benchmarks.noise_bench                  # SNR 5 dB, both lines
    .venv/bin/python -m benchmarks.noise_bench --snr 0,5,10 --settings off,near_field,rnnoise

Prints a table; writes benchmarks/results/noise.json (``wer[line][noise@snr][setting]``,
``false_starts[noise][setting]``, ``cpu_ms_per_audio_s[setting]``, the targets).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.asr_bench import transcribe
from runtime.executor import WorkItem
from runtime.models.listen.denoise import make_denoiser
from runtime.models.listen.executor import ListenExecutor
from runtime.models.voice_contract import LISTEN_RATE_HZ, SPEECH_STARTED
from voice_server.testing.report import write_json
from voice_server.testing.speech_corpus import Clip, CorpusUnavailable, human_clips, phone_line
from voice_server.testing.wer import corpus_wer

SETTINGS = {"off": None, "near_field": "near_field", "far_field": "far_field",
            "rnnoise": "rnnoise"}
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


def noisy_sets(clips: list[Clip], snrs: list[float], seed: int = 7) -> dict[str, list]:
    """``{"clean": [(clip, audio)], "babble@5": ..., "pink@5": ...}`` at 16 kHz."""
    rng = np.random.default_rng(seed)
    sets: dict[str, list] = {"clean": [(c, c.audio) for c in clips]}
    for snr in snrs:
        for kind in ("babble", "pink"):
            items = []
            for c in clips:
                others = [o.audio for o in clips if o.name != c.name]
                noise = babble_noise(c.audio.size, others, rng) if kind == "babble" \
                    else pink_noise(c.audio.size, rng)
                items.append((c, mix(c.audio, noise, snr)))
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snr", default="5", help="comma list of SNRs in dB (default 5)")
    ap.add_argument("--lines", default="wide,phone")
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--out", default="benchmarks/results/noise.json")
    a = ap.parse_args()
    try:
        clips = [c for c in human_clips() if c.group != "cards"]
    except CorpusUnavailable as exc:
        print(f"no human clips: {exc}")
        return 2
    snrs = [float(s) for s in a.snr.split(",")]
    settings = {s: SETTINGS.get(s, s) for s in a.settings.split(",")}
    sets = noisy_sets(clips, snrs)
    ex = ListenExecutor(threads=1, asr_threads=1, asr_engine="whisper", asr_model="tiny.en")
    ex.load()
    results: dict = {"clips": len(clips), "audio_s": round(sum(c.seconds for c in clips), 1),
                     "wer": {}, "false_starts": {}, "cpu_ms_per_audio_s": {}}
    rid = 0
    try:
        for line in a.lines.split(","):
            for set_name, items in sets.items():
                row = results["wer"].setdefault(line, {}).setdefault(set_name, {})
                for name, setting in settings.items():   # side by side, same mixes
                    pairs = []
                    for clip, audio in items:
                        rid += 1
                        x, rate = on_line(audio, line)
                        pairs.append((clip.text, transcribe(ex, x, rate, rid,
                                                            {"noise_reduction": setting})))
                    row[name] = round(corpus_wer(pairs), 4)
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
    finally:
        ex.close()
    print("false starts on 60 s of noise alone:", results["false_starts"])
    print("denoiser CPU, ms per audio second:", results["cpu_ms_per_audio_s"])
    wide = results["wer"].get("wide", {})
    if "babble@5" in wide and "near_field" in settings and "off" in settings:
        off, on = wide["babble@5"]["off"], wide["babble@5"]["near_field"]
        results["targets"] = {
            "babble@5 relative WER drop >= 30%": bool(off > 0 and (off - on) / off >= 0.30),
            "clean WER rise <= 1 point": wide["clean"]["near_field"] - wide["clean"]["off"] <= 0.01,
            "false starts on noise <= 1": all(v["near_field"] <= 1
                                              for v in results["false_starts"].values()),
        }
        print("targets:", results["targets"])
    write_json(a.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
