"""Every speak engine side by side, in one run, on one sentence set.

Per engine (each in a process of its own, one onnxruntime/BLAS thread, the
engines' rounds alternated so that a busy moment of the machine hits them all):

* ``cpu_per_audio_s``: CPU seconds of synthesis per second of audio made;
* ``first_chunk_ms``: each sentence is streamed in 4-character deltas through
  the speak stage's executor, as a reply arrives from the LLM (all measures
  below are of that audio): wall time of the call that returned the first
  audio (the first clause, ``first_clause_words: 2`` as in configs/voice-cpu.yaml);
* ``wer_wide`` / ``wer_phone``: the audio heard back by the default ASR
  (Whisper tiny.en), as the Realtime WebSocket carries it (the engine's rate)
  and as a phone caller gets it (resampled once to 8 kHz, G.711 mu-law, as the
  Twilio bridge does); both sides through ``spoken_form`` and the shared WER
  normaliser, so "$5" and "five dollars" are the same words;
* ``dnsmos_ovrl`` / ``dnsmos_sig``: DNSMOS P.835 (speechmos) at 16 kHz, a proxy
  for how natural the voice sounds (it was trained on noisy speech; read the
  ranking, not the absolute number);
* ``peak_rss_mb``: the engine's process (Python, numpy, the engine and its voice).

With ``--service`` the whole server (configs/voice-cpu.yaml, speak engine
swapped) is started per engine and its process tree's RSS summed after one
spoken reply.

    python -m benchmarks.tts_bench [--repeats 2] [--service]

Prints a table and writes benchmarks/results/tts_bench.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from voice_server.testing.report import write_json

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("hibari", "flite", "espeak")
# A call centre's replies: money, times, dates, a phone number, names, a URL.
SENTENCES = [
    "Thanks for calling, how can I help you today?",
    "Your order shipped this morning and should arrive on Thursday.",
    "The balance on your account is $1,250.75.",
    "Our store opens at 9:30 am and closes at 6 pm.",
    "I have booked you in with Dr. Nguyen on March 5th.",
    "You can reach our support team at 555-0142.",
    "I'm sorry about the delay, I will look into it right away.",
    "Your refund of $42 will show up within 3 to 5 business days.",
    "Is there anything else I can help you with?",
    "You can also find the form at acme.com/returns.",
]
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# ---------------------------------------------------------------- worker
def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _speak_all(ex, rid: int, text: str, piece: int | None) -> tuple[list, float | None]:
    """Feed ``text`` (in ``piece``-char deltas, or whole); the chunks, and the wall ms
    of the call that gave the first audio."""
    from runtime.executor import WorkItem
    ex.open(rid, {})
    pieces = [text[i:i + piece] for i in range(0, len(text), piece)] if piece else [text]
    chunks: list = []
    first_ms = None
    for k, p in enumerate(pieces):
        t0 = time.perf_counter()
        [out] = ex.process([WorkItem(rid, p, {}, final=k == len(pieces) - 1)])
        if out and first_ms is None:
            first_ms = (time.perf_counter() - t0) * 1000
        chunks += out
        while ex.has_results():
            chunks += [c for _, cs in ex.collect() for c in cs]
    ex.release(rid)
    return chunks, first_ms


def worker(engine: str, out_dir: str) -> None:
    """One engine in this process: synthesise the set, save the audio, print JSON."""
    from runtime.models.speak.executor import SpeakExecutor
    t0 = time.perf_counter()
    ex = SpeakExecutor(engine=engine, threads=1, first_clause_words=2)
    ex.load()
    load_s = time.perf_counter() - t0
    _speak_all(ex, 1, "Warming up the voice.", None)
    rows = []
    for i, text in enumerate(SENTENCES):
        # as a reply arrives from the LLM: the audio a caller hears, clause by clause
        c0 = time.process_time()
        chunks, first_ms = _speak_all(ex, 100 + i, text, 4)
        cpu = time.process_time() - c0
        rate = int(chunks[0]["sample_rate"])
        audio = np.concatenate([c["audio"] for c in chunks])
        np.save(os.path.join(out_dir, f"{engine}-{i}.npy"), audio)
        rows.append({"i": i, "rate": rate, "audio_s": audio.size / rate, "cpu_s": cpu,
                     "first_chunk_ms": first_ms})
    print(json.dumps({"engine": engine, "load_s": load_s, "peak_rss_mb": _peak_rss_mb(),
                      "rows": rows}))


def run_worker(engine: str, out_dir: str) -> dict:
    env = {**os.environ, **THREAD_ENV, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "benchmarks.tts_bench", "--worker", engine,
                          "--dir", out_dir], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- judging
def phone_line(pcm: np.ndarray, rate: int) -> np.ndarray:
    """What a phone caller hears: once to 8 kHz (the Twilio bridge's resampler), mu-law."""
    from voice_server.audio_codec import StreamResampler, mulaw_decode, mulaw_encode
    rs = StreamResampler(rate, 8000)
    pcm8 = np.concatenate([rs.process(pcm), rs.flush()])
    return mulaw_decode(mulaw_encode(pcm8))


def to_16k(pcm: np.ndarray, rate: int) -> np.ndarray:
    import soxr
    x = pcm.astype(np.float32) / 32768
    return soxr.resample(x, rate, 16000) if rate != 16000 else x


def judge(engine: str, out_dir: str, asr, rows: list[dict]) -> dict:
    from speechmos import dnsmos

    from runtime.models.speak.spoken_form import spoken_form
    from voice_server.testing.wer import corpus_wer, wer
    wide, phone, ovrl, sig = [], [], [], []
    for r in rows:
        pcm = np.load(os.path.join(out_dir, f"{engine}-{r['i']}.npy"))
        ref = spoken_form(SENTENCES[r["i"]])
        x16 = to_16k(pcm, r["rate"])
        heard_wide, heard_phone = asr.transcribe([x16, to_16k(phone_line(pcm, r["rate"]), 8000)])
        wide.append((ref, spoken_form(heard_wide)))
        phone.append((ref, spoken_form(heard_phone)))
        mos = dnsmos.run(np.clip(x16, -1, 1), 16000)
        ovrl.append(float(mos["ovrl_mos"]))
        sig.append(float(mos["sig_mos"]))
    return {"wer_wide": corpus_wer(wide), "wer_phone": corpus_wer(phone),
            "dnsmos_ovrl": statistics.mean(ovrl), "dnsmos_sig": statistics.mean(sig),
            "misheard": [(r, h) for r, h in wide + phone if wer(r, h) > 0]}


# ---------------------------------------------------------------- whole service
async def service_rss_mb(engine: str) -> float:
    """voice-agent serve with this speak engine: RSS of its process tree after a spoken reply."""
    import psutil
    import yaml

    from voice_server.testing.realtime_client import RTClient
    from voice_server.testing.server_process import ServerProcess
    cfg = yaml.safe_load((ROOT / "configs" / "voice-cpu.yaml").read_text())
    speak = next(s for s in cfg["stages"] if s["name"] == "speak")
    speak["args"]["engine"] = engine
    speak["args"].pop("voice", None)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(cfg, f)
    srv = ServerProcess(f.name)
    await asyncio.to_thread(srv.start)
    try:
        c = await RTClient.connect(srv.url)
        await c.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "Say hello to the caller."}]}})
        await c.send({"type": "response.create"})
        await c.wait("response.done", timeout=60)
        await c.close()
        root = psutil.Process(srv.pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**20
    finally:
        await asyncio.to_thread(srv.stop)
        os.unlink(f.name)


# ---------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--repeats", type=int, default=2, help="rounds, engines alternated")
    ap.add_argument("--service", action="store_true", help="also the whole server's RSS")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "tts_bench.json"))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker, a.dir)
        return
    engines = a.engines.split(",")
    runs: dict[str, list[dict]] = {e: [] for e in engines}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(a.repeats):
            for e in (engines if k % 2 == 0 else engines[::-1]):
                runs[e].append(run_worker(e, tmp))
                print(f"round {k + 1}: {e} done", flush=True)
        from runtime.models.listen.whisper_asr import WhisperASR
        asr = WhisperASR()
        results = {}
        for e in engines:
            rows = [r for run in runs[e] for r in run["rows"]]
            audio_s = sum(r["audio_s"] for r in rows)
            results[e] = {
                "cpu_per_audio_s": sum(r["cpu_s"] for r in rows) / audio_s,
                "first_chunk_ms_p50": statistics.median(r["first_chunk_ms"] for r in rows),
                "first_chunk_ms_max": max(r["first_chunk_ms"] for r in rows),
                "sample_rate": rows[0]["rate"],
                "peak_rss_mb": max(run["peak_rss_mb"] for run in runs[e]),
                "load_s": statistics.median(run["load_s"] for run in runs[e]),
                **judge(e, tmp, asr, runs[e][-1]["rows"]),
            }
    if a.service:
        for e in engines:
            results[e]["service_rss_mb"] = asyncio.run(service_rss_mb(e))
    print(f"\n{'engine':8} {'rate':>6} {'CPU s/s':>8} {'1st ms':>7} {'WER wide':>9} "
          f"{'WER 8k':>7} {'DNSMOS':>7} {'SIG':>5} {'RSS MB':>7} {'service MB':>10}")
    for e, r in results.items():
        print(f"{e:8} {r['sample_rate']:>6} {r['cpu_per_audio_s']:>8.4f} "
              f"{r['first_chunk_ms_p50']:>7.1f} {r['wer_wide'] * 100:>8.1f}% "
              f"{r['wer_phone'] * 100:>6.1f}% {r['dnsmos_ovrl']:>7.2f} {r['dnsmos_sig']:>5.2f} "
              f"{r['peak_rss_mb']:>7.0f} {r.get('service_rss_mb', float('nan')):>10.0f}")
    write_json(a.out, {"sentences": SENTENCES, "repeats": a.repeats, "cpu_count": os.cpu_count(),
                       "machine": platform.machine(), "python": platform.python_version(),
                       "targets": {"dnsmos_ovrl": ">= 3.3", "wer": "<= 2% both lines",
                                   "cpu_per_audio_s": "<= 0.03", "service_rss_mb": "<= 1229"},
                       "results": results})


if __name__ == "__main__":
    main()
