"""What call records and turn traces cost a caller: capacity_bench's level at
N callers (default 4) on a server with records (transcripts AND recordings)
plus OpenTelemetry traces on, against the same server with both off,
alternated (off, on, off, on, ...) in one run, each round on a fresh server.

"On" is everything at once: ``VOICE_AGENT_RECORDS_DIR`` (a temporary folder),
``VOICE_AGENT_RECORDS_AUDIO=1`` and ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
pointing at a local sink (voice_server.testing.otlp_sink) that accepts every
export, so the exporter does its real work.  The run checks that "on" did
record (calls in ``GET /v1/calls``) and did export (posts at the sink).

    .venv/bin/python -m benchmarks.records_cost_bench                  # N=4, 1 round each
    .venv/bin/python -m benchmarks.records_cost_bench --rounds 2 --turns 3

Target: first audio p95 with records+traces at most 5% above without.  As
latency on a shared machine is noisy, it also measures (first, in-process)
the CPU the record and trace hooks take on the event loop, and on the
store's and exporter's threads, for one minute of a simulated call
(``--hooks-only``: just that).
Prints a table; writes benchmarks/results/records_cost.json.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile

import httpx

from benchmarks.capacity_bench import level, trim
from voice_server.testing.callers.caller import load_speech
from voice_server.testing.otlp_sink import OtlpSink
from voice_server.testing.report import pct, write_json
from voice_server.testing.server_process import ServerProcess

def hook_cost(turns: int = 6, sink_url: str | None = None) -> dict:
    """The event loop's CPU time in the record and trace hooks for one minute of
    call (``turns`` turns of 4 s of caller speech in 20 ms frames and a 6 s
    reply in 40 ms 24 kHz audio deltas, plus each turn's item events), and the
    store's worker thread CPU for it: deterministic where latency is noise."""
    import base64
    import time

    import numpy as np

    from voice_server.metrics import TurnTimer
    from voice_server.records.recorder import CallRecorder
    from voice_server.records.settings import RecordSettings
    from voice_server.records.store import CallStore
    from voice_server.session import Session, SessionSettings
    from voice_server.traces.settings import TraceSettings
    from voice_server.traces.turn_traces import Tracing

    rng = np.random.default_rng(0)
    frame = (rng.standard_normal(320) * 3000).astype(np.int16)
    delta = base64.b64encode((rng.standard_normal(960) * 3000).astype("<i2").tobytes()).decode()
    with tempfile.TemporaryDirectory(prefix="records-hooks-") as folder:
        store = CallStore(RecordSettings(enabled=True, folder=folder, recording=True))
        tracing = Tracing(TraceSettings(otlp_endpoint=sink_url)) if sink_url else None
        process0 = time.process_time()
        loop_s = 0.0
        timer = TurnTimer()
        t0 = time.thread_time()
        rec = CallRecorder(store, Session("bench", SessionSettings()), "websocket", 0.0)
        timer.observers.append(rec.turn_times)
        if tracing is not None:
            timer.observers.append(tracing.session("bench").turn)
        loop_s += time.thread_time() - t0
        now = 0.0
        for k in range(turns):
            rid, item = f"resp_{k}", f"item_{k}"
            for _ in range(200):                    # 4 s of the caller
                now += 20.0
                t0 = time.thread_time()
                rec.caller_audio(frame, now)
                loop_s += time.thread_time() - t0
            events = [{"type": "conversation.item.added", "item": {
                "id": f"u{k}", "type": "message", "role": "user",
                "content": [{"type": "input_audio", "transcript": None}]}},
                {"type": "conversation.item.input_audio_transcription.completed",
                 "item_id": f"u{k}", "content_index": 0, "transcript": "what is the time"}]
            events += [{"type": "response.output_audio.delta", "response_id": rid,
                        "item_id": item, "delta": delta}] * 150      # 6 s of reply
            events += [{"type": "conversation.item.done", "item": {
                "id": item, "type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "output_audio", "transcript": "It is noon. " * 8}]}},
                {"type": "response.done", "response": {"id": rid, "status": "completed",
                                                       "status_details": None,
                                                       "usage": {"output_tokens": 24}}}]
            timer.listen_event({"type": "speech_started"})
            timer.listen_event({"type": "speech_stopped"})
            timer.response_started(rid)
            timer.chunk(rid, "think")
            for ev in events:
                now += 40.0 if ev["type"] == "response.output_audio.delta" else 1.0
                t0 = time.thread_time()
                timer.event_sent(ev)
                rec.event(ev, now)
                loop_s += time.thread_time() - t0
        t0 = time.thread_time()
        rec.close(now)
        loop_s += time.thread_time() - t0
        store.close()
        if tracing is not None:
            tracing.shutdown()
        total_s = time.process_time() - process0
    return {"call_minutes": turns * 10 / 60, "loop_ms": round(loop_s * 1000, 1),
            "other_threads_ms": round((total_s - loop_s) * 1000, 1)}


OFF = {"VOICE_AGENT_RECORDS_DIR": None, "VOICE_AGENT_RECORDS_AUDIO": None,
       "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": None, "VOICE_AGENT_API_KEYS": None}


async def one_round(config: str, env: dict, n: int, speech: dict, turns: int, seed: int) -> dict:
    proc = ServerProcess(config, env=env)
    await asyncio.to_thread(proc.start)
    try:
        r = await level(proc, proc.url, None, n, speech, turns, seed)
        async with httpx.AsyncClient(base_url=proc.http, timeout=30) as http:
            calls = await http.get("/v1/calls")
        r["calls_recorded"] = len(calls.json()["data"]) if calls.status_code == 200 else 0
        return r
    finally:
        await proc.aclose()
        await asyncio.to_thread(proc.stop)


async def main_async(a) -> dict:
    speech = load_speech()
    speech = {k: [trim(p) for p in v] if isinstance(v, list) else trim(v) for k, v in speech.items()}
    out: dict = {"off": [], "on": []}
    with OtlpSink() as sink, tempfile.TemporaryDirectory(prefix="records-bench-") as folder:
        out["hooks"] = hook_cost(sink_url=sink.url)
        print(f"hooks: {out['hooks']['loop_ms']} ms of event loop and "
              f"{out['hooks']['other_threads_ms']} ms on other threads per "
              f"{out['hooks']['call_minutes']:g} min of call", flush=True)
        if a.hooks_only:
            return out
        on = {**OFF, "VOICE_AGENT_RECORDS_DIR": folder, "VOICE_AGENT_RECORDS_AUDIO": "1",
              "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": sink.url}
        for k in range(a.rounds):
            for name, env in (("off", OFF), ("on", on)):
                posts0 = sink.posts
                r = await one_round(a.config, env, a.callers, speech, a.turns, a.seed + k)
                r["otlp_posts"] = sink.posts - posts0
                out[name].append(r)
                print(f"round {k} {name}: first audio p50/p95 {r['first_audio_ms']['p50']}/"
                      f"{r['first_audio_ms']['p95']} ms over {r['turns']} turns, errors "
                      f"{r['errors']}, calls recorded {r['calls_recorded']}, OTLP posts "
                      f"{r['otlp_posts']}", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--callers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--config", default="configs/voice-cpu.yaml")
    ap.add_argument("--out", default="benchmarks/results/records_cost.json")
    ap.add_argument("--hooks-only", action="store_true",
                    help="only the hooks' CPU for one call-minute (no servers, no callers)")
    a = ap.parse_args()
    runs = asyncio.run(main_async(a))
    hooks = runs.pop("hooks")
    if a.hooks_only:
        write_json(a.out, {"hooks": hooks})
        return 0
    # the rounds' samples pooled per variant: p95 of every first audio measured
    summary = {}
    for name, rs in runs.items():
        fa = [x for r in rs for x in r["first_audio_samples_ms"]]
        bi = [x for r in rs for x in r["barge_in_samples_ms"]]
        summary[name] = {"turns": len(fa), "first_audio_ms": {"p50": pct(fa, 50), "p95": pct(fa, 95)},
                         "barge_in_ms": {"p50": pct(bi, 50), "p95": pct(bi, 95)},
                         "errors": sum(r["errors"] for r in rs),
                         "calls_recorded": sum(r["calls_recorded"] for r in rs),
                         "otlp_posts": sum(r["otlp_posts"] for r in rs),
                         "server_cores": [r["cpu_cores"].get("server") for r in rs]}
    off, on = summary["off"]["first_audio_ms"]["p95"], summary["on"]["first_audio_ms"]["p95"]
    growth = None if not off or on is None else round(100.0 * (on - off) / off, 1)
    print(f"\n{'':>4} {'turns':>6} {'first audio p50/p95 ms':>24} {'barge-in p50/p95 ms':>22} "
          f"{'errors':>7} {'calls':>6} {'OTLP posts':>11}  server cores")
    for name, s in summary.items():
        fa, bi = s["first_audio_ms"], s["barge_in_ms"]
        print(f"{name:>4} {s['turns']:>6} {str(fa['p50']) + ' / ' + str(fa['p95']):>24} "
              f"{str(bi['p50']) + ' / ' + str(bi['p95']):>22} {s['errors']:>7} "
              f"{s['calls_recorded']:>6} {s['otlp_posts']:>11}  {s['server_cores']}")
    ok = growth is not None and growth <= 5.0
    print(f"first audio p95 growth with records+traces: {growth} % (target <= 5 %: "
          f"{'met' if ok else 'MISSED'})")
    write_json(a.out, {"hooks": hooks, "callers": a.callers, "rounds": a.rounds, "turns": a.turns,
                       "variants": summary, "runs": runs, "first_audio_p95_growth_pct": growth,
                       "target_met": ok})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
