"""The ``voice-agent`` command.

    voice-agent serve --config configs/voice-cpu.yaml [--host 127.0.0.1] [--port 8000]
                      [--ray-address auto|HOST:PORT]
                      [--log-level warning] [--log-json]
    voice-agent chat  --config configs/voice-cpu.yaml --wav question.wav [--out reply.wav] [--json]
    voice-agent chat  --config configs/voice-cpu.yaml --text "what is the capital of france"

``chat`` runs one voice turn through the multi-process pipeline: the WAV is
streamed into listen in 20 ms chunks (16 kHz, faster than real time unless
``--realtime``), followed by 1 s of silence so the VAD can decide the end of
speech; the final transcript goes through think -> speak and the reply audio
is written as a WAV.  Timings (ms):

* ``asr_final``: last sample of the file sent -> final transcript received
* ``first_token``: turn submitted -> first text delta from think
* ``first_audio``: turn submitted -> first audio chunk from speak
* ``total``: end of input (file audio sent, or start with --text) -> turn done

Exit codes: 0 ok, 1 the turn failed, 2 the pipeline could not start (missing
model or library: one line naming the stage) or bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import wave
from pathlib import Path

import numpy as np

from runtime.models.voice_contract import (FINAL, LISTEN, LISTEN_RATE_HZ, SPEAK, SPOKEN_REPLY_ROUTE, THINK,
                                           think_request)

CHUNK_MS = 20


def read_wav(path: str) -> tuple[np.ndarray, int]:
    """Mono int16 samples and the file's rate (8/16/32-bit PCM, any channel count)."""
    with wave.open(path, "rb") as w:
        rate, ch, width = w.getframerate(), w.getnchannels(), w.getsampwidth()
        raw = w.readframes(w.getnframes())
    if width == 2:
        a = np.frombuffer(raw, dtype="<i2").astype(np.float32)
    elif width == 1:
        a = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) * 256.0
    elif width == 4:
        a = np.frombuffer(raw, dtype="<i4").astype(np.float32) / 65536.0
    else:
        raise ValueError(f"{path}: {8 * width}-bit WAV is not supported (use 16-bit PCM)")
    if ch > 1:
        a = a.reshape(-1, ch).mean(axis=1)
    return np.clip(a, -32768, 32767).astype(np.int16), rate


def to_16k(audio: np.ndarray, rate: int) -> np.ndarray:
    if rate == LISTEN_RATE_HZ:
        return audio
    import soxr
    return soxr.resample(audio, rate, LISTEN_RATE_HZ).astype(np.int16)


def write_wav(path: str, audio: np.ndarray, rate: int) -> None:
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.asarray(audio, dtype="<i2").tobytes())


async def transcribe(pipeline, audio16k: np.ndarray, realtime: bool = False,
                     silence_s: float = 1.0) -> tuple[str, float | None, list[dict]]:
    """Stream audio into listen; return (final transcript, ms from end of audio to final, events)."""
    h = await pipeline.submit(None, entry=LISTEN, stream_input=True,
                              params={"sample_rate": LISTEN_RATE_HZ})
    step = LISTEN_RATE_HZ * CHUNK_MS // 1000
    t_end_audio: list[float] = []

    async def feed() -> None:
        t0 = time.monotonic()
        n = 0
        for i in range(0, len(audio16k), step):
            await h.send(np.ascontiguousarray(audio16k[i:i + step]))
            n += 1
            if realtime:
                await asyncio.sleep(max(0.0, t0 + n * CHUNK_MS / 1000 - time.monotonic()))
        t_end_audio.append(time.monotonic())
        silence = np.zeros(step, dtype=np.int16)
        for _ in range(int(silence_s * 1000 / CHUNK_MS)):
            await h.send(silence)
            n += 1
            if realtime:
                await asyncio.sleep(max(0.0, t0 + n * CHUNK_MS / 1000 - time.monotonic()))
        await h.end_input()

    feeder = asyncio.ensure_future(feed())
    finals: list[str] = []
    events: list[dict] = []
    asr_ms: float | None = None
    try:
        async for ev in h:
            if ev.kind == "chunk":
                events.append(ev.payload)
                if ev.payload.get("type") == FINAL:
                    if asr_ms is None and t_end_audio:
                        asr_ms = (time.monotonic() - t_end_audio[0]) * 1000
                    if ev.payload.get("text"):
                        finals.append(ev.payload["text"])
            elif ev.kind != "done":
                msg = ev.error.message if ev.error else ev.reason
                raise RuntimeError(f"listen failed: {msg}")
    finally:
        if not feeder.done():
            feeder.cancel()
        try:
            await feeder
        except (asyncio.CancelledError, Exception):  # noqa: BLE001
            pass
    return " ".join(finals), asr_ms, events


async def reply(pipeline, text: str, max_tokens: int | None = None) -> dict:
    """One think -> speak turn; reply text, audio, timings."""
    payload = think_request([{"role": "user", "content": text}], max_tokens or None)
    t0 = time.monotonic()
    h = await pipeline.submit(payload, entry=THINK, route=list(SPOKEN_REPLY_ROUTE))
    deltas: list[str] = []
    audio: list[np.ndarray] = []
    rate = 16000
    first_token = first_audio = None
    terminal = None
    async for ev in h:
        now = (time.monotonic() - t0) * 1000
        if ev.kind == "chunk" and ev.stage == THINK:
            if first_token is None:
                first_token = now
            if isinstance(ev.payload, str):
                deltas.append(ev.payload)
        elif ev.kind == "chunk" and ev.stage == SPEAK:
            if first_audio is None:
                first_audio = now
            audio.append(np.asarray(ev.payload["audio"], dtype=np.int16).reshape(-1))
            rate = int(ev.payload["sample_rate"])
        elif ev.kind != "chunk":
            terminal = ev
    await asyncio.sleep(0.1)   # let the stages' done reports (queue/compute) arrive
    status = pipeline.status(h.request_id) or {}
    return {"reply": "".join(deltas).strip(), "audio": np.concatenate(audio) if audio else np.zeros(0, np.int16),
            "sample_rate": rate, "first_token_ms": first_token, "first_audio_ms": first_audio,
            "terminal": terminal, "stages": status.get("stages", {})}


async def run_chat(args: argparse.Namespace) -> int:
    from runtime.pipeline import Pipeline

    try:
        pipeline = await Pipeline.start(args.config)
    except Exception as e:  # noqa: BLE001 - one clear line: which stage, why
        print(f"voice-agent: cannot start the pipeline: {str(e).strip().splitlines()[0]}", file=sys.stderr)
        return 2
    try:
        asr_ms = None
        if args.wav:
            audio, rate = read_wav(args.wav)
            transcript, asr_ms, _ = await transcribe(pipeline, to_16k(audio, rate), realtime=args.realtime)
        else:
            transcript = args.text
        t_turn = time.monotonic()
        if not transcript.strip():
            out = {"transcript": transcript, "reply": "", "audio_seconds": 0.0,
                   "timings_ms": {"asr_final": _r(asr_ms)}, "error": "no speech recognised"}
            print(json.dumps(out) if args.json else "no speech recognised")
            return 1
        r = await reply(pipeline, transcript, args.max_tokens)
        total = (time.monotonic() - t_turn) * 1000 + (asr_ms or 0.0)
        term = r["terminal"]
        audio_s = len(r["audio"]) / r["sample_rate"]
        if args.out and len(r["audio"]):
            write_wav(args.out, r["audio"], r["sample_rate"])
        timings = {"asr_final": _r(asr_ms), "first_token": _r(r["first_token_ms"]),
                   "first_audio": _r(r["first_audio_ms"]), "total": _r(total),
                   "stages": {s: {"queue": v.get("queue_ms"), "compute": v.get("compute_ms")}
                              for s, v in r["stages"].items()}}
        ok = term is not None and term.kind == "done"
        out = {"transcript": transcript, "reply": r["reply"], "audio_seconds": round(audio_s, 3),
               "timings_ms": timings, "status": term.kind if term else "unknown"}
        if not ok:
            out["error"] = term.error.to_wire() if term is not None and term.error else {"reason": term.reason if term else None}
        if args.json:
            print(json.dumps(out))
        else:
            print(f"transcript : {transcript}")
            print(f"reply      : {r['reply']}")
            print(f"audio      : {audio_s:.2f} s" + (f" -> {args.out}" if args.out and len(r['audio']) else ""))
            print("timings ms : " + ", ".join(f"{k}={v}" for k, v in timings.items() if k != "stages"))
            for s, v in timings["stages"].items():
                print(f"  {s:<8} queue={v['queue']} compute={v['compute']}")
            if not ok:
                print(f"turn {out['status']}: {out.get('error')}")
        return 0 if ok else 1
    finally:
        await pipeline.close()


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="voice-agent", description="Realtime voice agent service")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the HTTP/WebSocket server")
    s.add_argument("--config", required=True, help="pipeline YAML, e.g. configs/voice-cpu.yaml")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--ray-address", default=None,
                   help="placement.backend ray: join this Ray cluster ('auto' or HEAD:PORT; sets "
                        "RAY_ADDRESS); without it a ray config starts a private one-node Ray")
    s.add_argument("--log-level", default="warning", help="debug|info|warning|error")
    s.add_argument("--log-json", action="store_true",
                   help="log JSON lines with session_id/request_id (env VOICE_AGENT_LOG_JSON=1)")
    c = sub.add_parser("chat", help="one voice turn through the pipeline, from a WAV file or text")
    c.add_argument("--config", required=True)
    src = c.add_mutually_exclusive_group(required=True)
    src.add_argument("--wav", help="question audio (PCM WAV, any rate/channels)")
    src.add_argument("--text", help="question text (skips listen)")
    c.add_argument("--out", help="write the reply audio here (WAV)")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.add_argument("--realtime", action="store_true", help="stream the WAV at real-time pace")
    c.add_argument("--max-tokens", type=int, default=None)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cmd == "serve":
        if args.ray_address:
            os.environ["RAY_ADDRESS"] = args.ray_address
        if not Path(args.config).exists():
            print(f"voice-agent: config not found: {args.config}", file=sys.stderr)
            return 2
        from voice_server import app  # lazy: the server pulls in much more than the CLI needs
        try:
            from voice_server.logs import json_from_env
            asyncio.run(app.serve(args.config, args.host, args.port, log_level=args.log_level,
                                  log_json=bool(args.log_json or json_from_env())))
        except KeyboardInterrupt:
            pass
        return 0
    if args.wav and not Path(args.wav).exists():
        print(f"voice-agent: no such file: {args.wav}", file=sys.stderr)
        return 2
    if not Path(args.config).exists():
        print(f"voice-agent: config not found: {args.config}", file=sys.stderr)
        return 2
    return asyncio.run(run_chat(args))


if __name__ == "__main__":
    sys.exit(main())
