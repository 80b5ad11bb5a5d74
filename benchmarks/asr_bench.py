"""ASR benchmark: word error rate and CPU per audio second, each engine on the same clips.

Every engine runs through the real listen stage code (silero VAD cutting the
stream, the recognition thread, speculative starts), one stream at a time, on
one core for recognition, in one run so the figures compare:

* ``human``: people reading and speaking commands (LibriVox utterances and
  "go forward ten meters" from Debian ``pocketsphinx-testdata``, the speaker
  test phrases from ``alsa-utils``); the target set (<= 6% for the default);
* ``human_cards``: card names spoken by another person (same package), reported
  on their own: a small vocabulary Whisper tiny mishears ("clubs" -> "close");
* ``human_phone``: the ``human`` clips through 8 kHz G.711 mu-law, as a Twilio
  caller is heard (target <= 12%);
* ``flite``: synthetic speech (flite's slt voice), for comparison only: synthetic
  voices flatter some engines and punish others.

The recordings are read where the Debian packages are installed, else fetched
with ``apt-get download`` + ``dpkg -x`` into a cache folder; without apt the
human sets are skipped with a message.

    .venv/bin/python -m benchmarks.asr_bench
    .venv/bin/python -m benchmarks.asr_bench --engines whisper-tiny.en,pocketsphinx

Also the listen executor's peak RSS with 8 streams speaking at once, for
pocketsphinx and the default Whisper, each in a process of its own.

Prints a table; writes benchmarks/results/asr.json with keys
``wer.<engine>.<set>``, ``cpu_per_audio_s.<engine>`` and
``listen_rss_8_streams_mb.<engine>``.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import tempfile
import time
import wave
from pathlib import Path

import numpy as np
import soxr

from voice_server.testing.report import write_json
from runtime.executor import WorkItem
from runtime.models.listen.executor import ListenExecutor
from runtime.models.voice_contract import LISTEN_RATE_HZ
from voice_server.testing.speech_corpus import Clip, CorpusUnavailable, human_clips, phone_line
from voice_server.testing.wer import corpus_wer

ENGINES = {
    "pocketsphinx": {"asr_engine": "pocketsphinx"},
    "whisper-tiny.en": {"asr_engine": "whisper", "asr_model": "tiny.en"},          # the default
    # the default without the second reading of short sounds (its cost, side by side)
    "whisper-tiny.en-no-alt": {"asr_engine": "whisper", "asr_model": "tiny.en", "asr_alt_prompt": ""},
    "whisper-tiny.en-30s": {"asr_engine": "whisper", "asr_model": "tiny.en", "asr_window_s": 30},
    "whisper-base": {"asr_engine": "whisper", "asr_model": "base"},
}
FLITE_SENTENCES = ["what is the capital of france", "please book a table for two at seven",
                   "how is the weather going to be tomorrow morning",
                   "turn off the lights in the kitchen", "i would like to cancel my order",
                   "can you tell me a short story about a dragon"]


def flite_clips() -> list[Clip]:
    if shutil.which("flite") is None:
        return []
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, text in enumerate(FLITE_SENTENCES):
            path = Path(tmp) / f"{i}.wav"
            subprocess.run(["flite", "-voice", "slt", "-t", text, "-o", str(path)], check=True)
            with wave.open(str(path)) as w:
                x = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768
                rate = w.getframerate()
            out.append(Clip(f"flite-{i}", "flite", text,
                            soxr.resample(x, rate, LISTEN_RATE_HZ).astype(np.float32)))
    return out


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)   # every thread of this process
    return r.ru_utime + r.ru_stime


LEAD_S, TAIL_S = 0.5, 1.0    # silence around a clip: the stream's quiet before, and its end of turn


def transcribe(ex: ListenExecutor, audio: np.ndarray, rate: int, rid: int,
               params: dict | None = None, pad: bool = True) -> str:
    """One clip as a caller's stream (20 ms chunks, faster than real time) -> its finals
    (``params``: more listen parameters, e.g. ``noise_reduction``); ``pad``: with
    LEAD_S and TAIL_S of digital silence around it (False: the clip has its own)."""
    if pad:
        lead, tail = np.zeros(int(rate * LEAD_S), np.float32), np.zeros(int(rate * TAIL_S), np.float32)
        audio = np.concatenate([lead, audio, tail])
    ex.open(rid, {"sample_rate": rate, **(params or {})})
    texts: list[str] = []
    step = rate // 50

    def take(results) -> None:
        texts.extend(e["text"] for r, evs in results if r == rid for e in evs if e["type"] == "final")

    try:
        for i in range(0, len(audio), step):
            take([(rid, ex.process([WorkItem(rid, audio[i:i + step], {}, final=i + step >= len(audio))])[0])])
            take(ex.collect())
        deadline = time.monotonic() + 60
        while ex.pending(rid) and time.monotonic() < deadline:
            time.sleep(0.002)
            take(ex.collect())
        take(ex.collect())
    finally:
        ex.release(rid)
    return " ".join(t for t in texts if t)


def run_engine(name: str, args: dict, sets: dict[str, list[tuple[Clip, np.ndarray, int]]]) -> dict:
    ex = ListenExecutor(threads=1, asr_threads=1, **args)
    ex.load()
    wers, cpu, audio_s, rid = {}, 0.0, 0.0, 0
    try:
        for set_name, items in sets.items():
            pairs = []
            for clip, audio, rate in items:
                rid += 1
                c0 = _cpu_s()
                pairs.append((clip.text, transcribe(ex, audio, rate, rid)))
                cpu += _cpu_s() - c0
                audio_s += clip.seconds
            wers[set_name] = round(corpus_wer(pairs), 4)
            wers[f"{set_name}_errors"] = [(r, h) for r, h in pairs if corpus_wer([(r, h)]) > 0]
    finally:
        ex.close()
    return {"wer": wers, "cpu_per_audio_s": round(cpu / max(audio_s, 1e-9), 4)}


LISTEN_RSS = r"""
import json, sys, time
import numpy as np
from runtime.executor import WorkItem
from runtime.models.listen.executor import ListenExecutor
from voice_server.testing.speech_corpus import human_clips

def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) / 1024 for l in f if l.startswith("VmRSS:"))

ex = ListenExecutor(**json.loads(sys.argv[1]))
ex.load()
clips = [c for c in human_clips() if c.group == "librivox"]
streams = 8
for rid in range(streams):
    ex.open(rid, {"sample_rate": 16000})
peak = rss_mb()
for k in range(2):                           # every stream speaks twice, all at once
    audio = [np.concatenate([np.zeros(8000, np.float32), clips[(rid + k) % len(clips)].audio,
                             np.zeros(16000, np.float32)]) for rid in range(streams)]
    longest = max(a.size for a in audio)
    for i in range(0, longest, 320):
        items = [WorkItem(rid, a[i:i + 320], {}, final=False) for rid, a in enumerate(audio) if i < a.size]
        ex.process(items)
        ex.collect()
        peak = max(peak, rss_mb())
    deadline = time.monotonic() + 60
    while any(ex.pending(r) for r in range(streams)) and time.monotonic() < deadline:
        time.sleep(0.01)
        ex.collect()
        peak = max(peak, rss_mb())
print(json.dumps({"peak_rss_mb": round(peak, 1), "end_rss_mb": round(rss_mb(), 1)}))
"""


def listen_rss(args: dict) -> dict:
    """Peak RSS of a listen stage's executor with 8 streams talking at once, in a process
    of its own (so engines compare in one run, and this process does not count)."""
    import json
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", LISTEN_RSS, json.dumps(args)], capture_output=True,
                       text=True, timeout=600)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--out", default="benchmarks/results/asr.json")
    ap.add_argument("--skip-rss", action="store_true",
                    help="leave out the listen-stage memory with 8 streams (each engine)")
    a = ap.parse_args()
    sets: dict[str, list[tuple[Clip, np.ndarray, int]]] = {}
    try:
        people = human_clips()
        sets["human"] = [(c, c.audio, LISTEN_RATE_HZ) for c in people if c.group != "cards"]
        sets["human_cards"] = [(c, c.audio, LISTEN_RATE_HZ) for c in people if c.group == "cards"]
        sets["human_phone"] = [(c, phone_line(c.audio).astype(np.float32) / 32768, 8000)
                               for c in people if c.group != "cards"]
    except CorpusUnavailable as exc:
        print(f"human clips skipped: {exc}")
    flite = flite_clips()
    if flite:
        sets["flite"] = [(c, c.audio, LISTEN_RATE_HZ) for c in flite]
    if not sets:
        print("no clips: nothing to measure")
        return 2
    results: dict = {"wer": {}, "cpu_per_audio_s": {}, "errors": {},
                     "clips": {k: len(v) for k, v in sets.items()},
                     "audio_s": {k: round(sum(c.seconds for c, _, _ in v), 2) for k, v in sets.items()}}
    for name in a.engines.split(","):
        r = run_engine(name, ENGINES[name], sets)
        results["wer"][name] = {k: v for k, v in r["wer"].items() if not k.endswith("_errors")}
        results["errors"][name] = {k[:-7]: v for k, v in r["wer"].items() if k.endswith("_errors")}
        results["cpu_per_audio_s"][name] = r["cpu_per_audio_s"]
    if not a.skip_rss:
        results["listen_rss_8_streams_mb"] = {
            name: listen_rss({"threads": 1, "asr_threads": 1, **ENGINES[name]})
            for name in ("pocketsphinx", "whisper-tiny.en")}
    cols = list(sets)
    print(f"{'engine':<22}" + "".join(f"{c:>13}" for c in cols) + f"{'cpu/audio s':>13}")
    for name in results["wer"]:
        row = results["wer"][name]
        print(f"{name:<22}" + "".join(f"{row[c] * 100:>12.1f}%" for c in cols)
              + f"{results['cpu_per_audio_s'][name]:>13.3f}")
    for name, r in results.get("listen_rss_8_streams_mb", {}).items():
        print(f"listen executor, 8 streams at once, {name}: peak RSS {r.get('peak_rss_mb')} MB")
    default = results["wer"].get("whisper-tiny.en", {})
    verdicts = {"human<=6%": default.get("human", 1) <= 0.06,
                "human_phone<=12%": default.get("human_phone", 1) <= 0.12}
    results["targets_met"] = verdicts
    print("targets (default engine):", ", ".join(f"{k} {'met' if v else 'MISSED'}"
                                                  for k, v in verdicts.items()))
    write_json(a.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
