"""Is in-process TTS (ctypes) worth it over spawning the engine's CLI per sentence?

The speak stage synthesises one clause at a time, so fixed per-call cost
(process start, voice load, WAV round trip) lands directly on time-to-first-
audio. This measures both ways for flite and espeak-ng on the same sentences.

    .venv/bin/python benchmarks/tts_engines.py [--repeats 3]

Prints a table of median ms per sentence and writes
benchmarks/results/tts_engines.json.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import tempfile
import time
import wave
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
from voice_server.testing.report import write_json
from runtime.models.speak.executor import make_synthesizer

SENTENCES = [
    "Paris is the capital of France.",
    "Sure, I can help with that.",
    "The meeting has been moved to three thirty on Thursday afternoon.",
    "It is a lovely city.",
    "Please hold on while I look up the weather forecast for tomorrow morning in your area.",
]


def cli_command(engine: str, text: str, out: str) -> list[str]:
    if engine == "flite":
        return ["flite", "-voice", "slt", "-t", text, "-o", out]
    return ["espeak-ng", "-v", "en-us", "-w", out, text]


def time_cli(engine: str, text: str, tmp: str) -> tuple[float, float]:
    """Spawn, synthesise to a WAV, read it back: what a service shelling out would pay."""
    out = os.path.join(tmp, f"{engine}.wav")
    t0 = time.perf_counter()
    subprocess.run(cli_command(engine, text, out), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with wave.open(out) as w:
        frames = w.readframes(w.getnframes())
        secs = w.getnframes() / w.getframerate()
    elapsed = (time.perf_counter() - t0) * 1000
    assert frames
    return elapsed, secs


def time_lib(synth, text: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    audio = synth.synthesize(text)
    elapsed = (time.perf_counter() - t0) * 1000
    return elapsed, audio.size / synth.sample_rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "tts_engines.json"))
    args = ap.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for engine in ("flite", "espeak"):
            t0 = time.perf_counter()
            synth = make_synthesizer(engine)
            init_ms = (time.perf_counter() - t0) * 1000
            for i, text in enumerate(SENTENCES):
                lib = [time_lib(synth, text) for _ in range(args.repeats)]
                cli = [time_cli(engine, text, tmp) for _ in range(args.repeats)]
                rows.append({
                    "engine": engine, "sentence": i + 1, "chars": len(text),
                    "audio_s": round(lib[0][1], 3),
                    "ctypes_ms": round(statistics.median(t for t, _ in lib), 2),
                    "cli_ms": round(statistics.median(t for t, _ in cli), 2),
                    "cli_audio_s": round(cli[0][1], 3),
                    "ctypes_init_ms": round(init_ms, 1),
                })

    print(f"{'engine':7} {'#':>2} {'chars':>5} {'audio s':>8} {'ctypes ms':>10} {'CLI ms':>8} "
          f"{'ctypes RTF':>10} {'CLI/ctypes':>10}")
    for r in rows:
        print(f"{r['engine']:7} {r['sentence']:>2} {r['chars']:>5} {r['audio_s']:>8.2f} "
              f"{r['ctypes_ms']:>10.1f} {r['cli_ms']:>8.1f} "
              f"{r['ctypes_ms'] / 1000 / max(r['audio_s'], 1e-9):>10.3f} "
              f"{r['cli_ms'] / max(r['ctypes_ms'], 1e-9):>10.1f}")
    summary = {}
    for engine in ("flite", "espeak"):
        mine = [r for r in rows if r["engine"] == engine]
        summary[engine] = {
            "ctypes_ms_mean": round(statistics.mean(r["ctypes_ms"] for r in mine), 2),
            "cli_ms_mean": round(statistics.mean(r["cli_ms"] for r in mine), 2),
            "ctypes_init_ms": mine[0]["ctypes_init_ms"],
        }
        print(f"{engine}: mean ctypes {summary[engine]['ctypes_ms_mean']} ms, "
              f"mean CLI {summary[engine]['cli_ms_mean']} ms per sentence "
              f"(one-time ctypes init {summary[engine]['ctypes_init_ms']} ms)")

    write_json(args.out, {
        "repeats": args.repeats, "cpu_count": os.cpu_count(), "machine": platform.machine(),
        "python": platform.python_version(), "rows": rows, "summary": summary,
    })


if __name__ == "__main__":
    main()
