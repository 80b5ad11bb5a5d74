"""Plain HTTP endpoints on the pipeline: health, model list, OpenAI speech and chat.

Health: ``/health`` (every replica ready), ``/health/ready`` (may take a new
call) and ``/health/live`` (should not be restarted), from runtime/health.py;
docs/CLIENTS.md lists the status each gives during a replica restart.

``routes(pipeline, settings)`` returns Starlette routes; the app mounts them.
``pipeline`` is a running :class:`runtime.pipeline.Pipeline` or a zero-argument
callable returning one (or None while it is not up), so an app that starts the
pipeline in its lifespan can hand in ``lambda: app.state.pipeline``.

Error rules (docs/CONCEPTS.md, "Errors"):

* Before the first byte an error is a real HTTP status with an OpenAI-style
  body ``{"error": {"message", "type", "code", "param"}}``.  To make that
  possible every streaming endpoint waits for the runtime's first event
  before it sends the status line: a request the thinker rejects is a 400,
  not a 200 followed by nothing.
* After the first byte, SSE streams carry an ``event: error`` with the same
  body and then the terminal ``data: [DONE]``.  A client can always tell
  completed (``[DONE]`` / ``speech.audio.done`` without an error) from
  failed.
* Raw audio (``stream_format: "audio"``) has no in-band channel.  After the
  first byte a failure aborts the chunked body: the terminating zero-length
  chunk is never sent and the connection is closed, which HTTP clients report
  as an incomplete body (never a silently short file).  Clients that want the
  reason should ask for ``stream_format: "sse"``.
* A client that disconnects aborts its runtime request (``pipeline.abort``):
  before the first byte (polled while waiting) and after it (a disconnect
  listener runs beside every stream).

Chat completions take ``tools`` / ``tool_choice`` / ``parallel_tool_calls``
and answer with ``tool_calls`` (finish_reason ``tool_calls``), streamed as
OpenAI's ``delta.tool_calls`` pieces: the think stage's call events
(docs/TOOLS.md), through the same thinker a Realtime session uses.  Bad tools
are a 400 before anything is submitted.

Speech output is 16-bit little-endian mono PCM at ``speech_sample_rate``
(24 kHz by default, what OpenAI clients assume for ``pcm``), resampled from
the TTS engine's rate; ``X-Sample-Rate`` says the rate, ``X-Request-Id`` the
runtime request id.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import re
import struct
import time
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

import numpy as np
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from runtime.errors import ErrorCode
from runtime.models.voice_contract import (LENGTH, SPEAK, SPEAK_SPEED, SPEAK_VOICE, TEXT_REPLY_ROUTE,
                                           THINK, TOOL_CALL_DELTA, TOOL_CALL_DONE, USAGE, think_events,
                                           think_request, validate_tools)

from .access import http_refusal

log = logging.getLogger(__name__)

SPEECH_FORMATS = ("pcm", "wav")
OPENAI_ONLY_FORMATS = ("mp3", "opus", "aac", "flac")
STREAM_FORMATS = ("audio", "sse")
SPEECH_ALIASES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
ROLE_MAP = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
            "tool": "tool"}
DISCONNECT_POLL_S = 0.25

# runtime error code -> (HTTP status, OpenAI error type)
STATUS_OF = {
    ErrorCode.BAD_INPUT.value: (400, "invalid_request_error"),
    ErrorCode.UNSUPPORTED.value: (400, "invalid_request_error"),
    ErrorCode.RESOURCE_EXHAUSTED.value: (503, "server_overloaded"),
    ErrorCode.TIMEOUT.value: (504, "timeout_error"),
    ErrorCode.STAGE_UNAVAILABLE.value: (503, "service_unavailable"),
    ErrorCode.CANCELLED.value: (503, "service_unavailable"),
    ErrorCode.INTERNAL.value: (500, "server_error"),
}

DEFAULTS = {
    "api_keys": None,               # None: env VOICE_AGENT_API_KEYS
    "allowed_origins": None,        # None: same host / loopback pages only
    "model": "voice-agent",
    "max_body_bytes": 1 << 20,
    "max_speech_chars": 4096,
    "max_prompt_chars": 200_000,
    "speech_sample_rate": 24000,
    "response_deadline_s": None,    # None: the pipeline's request_deadline_s
    "readiness_grace_s": 10.0,      # /health/ready: how long a replica may be re-created
}


class ApiError(Exception):
    def __init__(self, status: int, message: str, type_: str = "invalid_request_error",
                 code: str | None = None, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": type_, "code": code, "param": param}}
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body, status_code=self.status, headers=self.headers)


def error_body(info: Any) -> dict:
    """The OpenAI-style body for a runtime ErrorInfo."""
    code = info.code.value if info is not None else ErrorCode.INTERNAL.value
    _, type_ = STATUS_OF.get(code, (500, "server_error"))
    msg = info.message if info is not None else "the request failed"
    err = {"message": msg, "type": type_, "code": code, "param": None}
    if info is not None:
        err["stage"] = info.stage
        err["retryable"] = info.retryable
    return {"error": err}


def cancelled_body(reason: Any) -> dict:
    """The body for a stream the runtime cancelled without an ErrorInfo."""
    return {"error": {"message": f"the request was cancelled ({reason})", "type": "service_unavailable",
                      "code": ErrorCode.CANCELLED.value, "param": None}}


def runtime_error(ev: Any) -> ApiError:
    """A terminal non-'done' event before the first byte -> a proper HTTP status."""
    if ev.kind == "cancelled":
        info = ev.error
        code = ErrorCode.CANCELLED.value
        msg = info.message if info else f"the request was cancelled ({ev.reason})"
        return ApiError(503, msg, "service_unavailable", code)
    info = ev.error
    code = info.code.value if info is not None else ErrorCode.INTERNAL.value
    status, type_ = STATUS_OF.get(code, (500, "server_error"))
    headers = {"Retry-After": "1"} if status in (429, 503) else None
    return ApiError(status, info.message if info else "the request failed", type_, code, headers=headers)


def sse(data: Any, event: str | None = None) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


SSE_DONE = b"data: [DONE]\n\n"


def wav_header(sample_rate: int, channels: int = 1, bits: int = 16) -> bytes:
    """A streaming WAV header: sizes unknown, so 0xFFFFFFFF as most players accept."""
    block = channels * bits // 8
    return (b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVE"
            + b"fmt " + struct.pack("<IHHIIHH", 16, 1, channels, sample_rate, sample_rate * block, block, bits)
            + b"data" + struct.pack("<I", 0xFFFFFFFF))


class StreamAborted(RuntimeError):
    """Raised inside a raw byte stream after its first byte: the body must not end cleanly."""


class PipelineStream(Response):
    """A streaming response that always listens for the client going away.

    Starlette's StreamingResponse only notices a disconnect on ASGI < 2.4 or
    at the next send; a voice turn can sit between chunks for a while and its
    runtime request must be aborted at once, so the listener runs beside the
    stream whatever the server's ASGI version.
    """

    def __init__(self, body: AsyncIterator[bytes], on_disconnect: Callable[[], None],
                 status_code: int = 200, headers: dict | None = None, media_type: str | None = None) -> None:
        self.body_iterator = body
        self.on_disconnect = on_disconnect
        self.status_code = status_code
        self.media_type = media_type
        self.background = None
        self.init_headers(headers)

    async def __call__(self, scope, receive, send) -> None:
        async def stream() -> None:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def listen() -> None:
            while True:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    return

        st = asyncio.ensure_future(stream())
        ls = asyncio.ensure_future(listen())
        try:
            done, _ = await asyncio.wait({st, ls}, return_when=asyncio.FIRST_COMPLETED)
            if st not in done:
                self.on_disconnect()            # first: the stream's own cleanup must not win the race
                st.cancel()
                try:
                    await st
                except (asyncio.CancelledError, Exception):  # noqa: BLE001
                    pass
                return
            exc = st.exception()
            if isinstance(exc, OSError):       # the send failed: the client went away
                self.on_disconnect()
                return
            if exc is not None:
                raise exc
        finally:
            ls.cancel()
            if not st.done():
                st.cancel()
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except Exception:  # noqa: BLE001
                    pass


def _setting(settings: Any, name: str) -> Any:
    if settings is None:
        return DEFAULTS[name]
    if isinstance(settings, dict):
        v = settings.get(name, DEFAULTS[name])
    else:
        v = getattr(settings, name, DEFAULTS[name])
    return DEFAULTS[name] if v is None and name != "api_keys" else v


def _api_keys(settings: Any) -> set[str]:
    keys = _setting(settings, "api_keys")
    if not keys:
        env = os.environ.get("VOICE_AGENT_API_KEYS", "")
        keys = [k for k in env.split(",")]
    elif isinstance(keys, str):
        keys = keys.split(",")
    return {k.strip() for k in keys if k and k.strip()}


class _Turn:
    """One runtime request as the HTTP layer sees it: events in, abort on the way out."""

    def __init__(self, pipeline: Any, handle: Any) -> None:
        self.pipeline = pipeline
        self.handle = handle
        self.rid = handle.request_id
        self.finished = False

    async def next(self, timeout: float | None = None):
        ev = await self.handle.next_event(timeout)
        if ev.terminal:
            self.finished = True
        return ev

    def abort(self, reason: str) -> None:
        if not self.finished:
            self.finished = True
            log.info("request %s aborted: %s", self.rid, reason)
            self.pipeline.abort(self.rid, reason)


@dataclass(frozen=True)
class _SpeechAsk:
    """A ``/v1/audio/speech`` body, checked field by field (OpenAI's names)."""

    text: str
    voice: str | None
    fmt: str                # response_format: wav or pcm
    stream_format: str      # audio (the bytes) or sse (speech.audio.delta events)
    speed: float

    @property
    def sentences(self) -> list[str]:
        return [s for s in re.split(r"(?<=[.!?;:])\s+", self.text) if s]

    @classmethod
    def parse(cls, data: dict, max_chars: int) -> "_SpeechAsk":
        text = data.get("input")
        if not isinstance(text, str) or not text.strip():
            raise ApiError(400, "'input' must be a non-empty string", param="input", code="invalid_value")
        if len(text) > max_chars:
            raise ApiError(413, f"'input' is {len(text)} characters; the limit is {max_chars}",
                           param="input", code="input_too_long")
        voice = data.get("voice")
        if voice is not None and not isinstance(voice, (str, dict)):
            raise ApiError(400, "'voice' must be a string", param="voice", code="invalid_type")
        fmt = data.get("response_format", "wav")
        if fmt in OPENAI_ONLY_FORMATS:
            raise ApiError(400, f"response_format {fmt!r} is not supported here; use one of "
                                f"{', '.join(SPEECH_FORMATS)}", param="response_format", code="unsupported_value")
        if fmt not in SPEECH_FORMATS:
            raise ApiError(400, f"response_format must be one of {', '.join(SPEECH_FORMATS)}",
                           param="response_format", code="invalid_value")
        stream_format = data.get("stream_format", "audio")
        if stream_format not in STREAM_FORMATS:
            raise ApiError(400, f"stream_format must be one of {', '.join(STREAM_FORMATS)}",
                           param="stream_format", code="invalid_value")
        speed = data.get("speed", 1.0)
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not 0.25 <= speed <= 4.0:
            raise ApiError(400, "'speed' must be a number in 0.25..4.0", param="speed", code="invalid_value")
        return cls(text, voice.get("id") if isinstance(voice, dict) else voice, fmt, stream_format,
                   float(speed))


class _SpeechAudio:
    """The speak stage's chunks as 16-bit little-endian bytes at the server's
    output rate (resampled, streaming, when the voice speaks at another)."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.n_bytes = 0
        self._resampler = None

    def chunk(self, ev: Any) -> bytes:
        audio = np.asarray(ev.payload["audio"], dtype=np.int16).reshape(-1)
        rate = int(ev.payload["sample_rate"])
        if rate != self.rate:
            if self._resampler is None:
                import soxr
                self._resampler = soxr.ResampleStream(rate, self.rate, 1, dtype="int16")
            audio = self._resampler.resample_chunk(audio)
        return self._count(audio)

    def flush(self) -> bytes:
        """What the resampler still holds, at the end."""
        if self._resampler is None:
            return b""
        return self._count(self._resampler.resample_chunk(np.zeros(0, dtype=np.int16), last=True))

    def _count(self, audio: np.ndarray) -> bytes:
        b = audio.astype("<i2").tobytes()
        self.n_bytes += len(b)
        return b


async def _speech_events(ev: Any, turn: "_Turn", audio: _SpeechAudio,
                         n_chars: int) -> AsyncIterator[bytes]:
    """``stream_format=sse``: the audio as ``speech.audio.delta`` events, then
    ``speech.audio.done``; an error after the first byte arrives in-band."""
    try:
        while True:
            if ev.kind in ("chunk", "done"):
                b = audio.chunk(ev) if ev.kind == "chunk" else audio.flush()
                if b:
                    yield sse({"type": "speech.audio.delta", "audio": base64.b64encode(b).decode()})
                if ev.kind == "done":
                    yield sse({"type": "speech.audio.done",
                               "usage": {"input_characters": n_chars,
                                         "output_audio_seconds": round(audio.n_bytes / 2 / audio.rate, 3)}})
                    return
            else:
                info = ev.error
                yield sse(error_body(info) if info is not None or ev.kind == "error"
                          else cancelled_body(ev.reason), event="error")
                yield SSE_DONE
                return
            ev = await turn.next()
    finally:
        turn.abort("stream_closed")


async def _speech_bytes(ev: Any, turn: "_Turn", audio: _SpeechAudio, wav: bool) -> AsyncIterator[bytes]:
    """The audio itself (after a WAV header for ``wav``).  Raw audio has no
    in-band errors: a failure after the first byte aborts the body."""
    try:
        if wav:
            yield wav_header(audio.rate)
        while True:
            if ev.kind in ("chunk", "done"):
                b = audio.chunk(ev) if ev.kind == "chunk" else audio.flush()
                if b:
                    yield b
                if ev.kind == "done":
                    return
            else:
                msg = ev.error.message if ev.error else f"cancelled ({ev.reason})"
                log.warning("speech request %s failed after the first byte; aborting the body "
                            "(raw audio has no in-band errors, use stream_format=sse): %s",
                            turn.rid, msg)
                raise StreamAborted(msg)
            ev = await turn.next()
    finally:
        turn.abort("stream_closed")


class HttpApi:
    def __init__(self, pipeline: Any, settings: Any = None) -> None:
        self._pipeline = pipeline
        self.settings = settings

    # ---- plumbing --------------------------------------------------------------------------
    @property
    def pipeline(self) -> Any:
        p = self._pipeline
        if p is not None and not hasattr(p, "submit") and callable(p):
            p = p()
        return p

    def _live_pipeline(self, stages: list[str]) -> Any:
        p = self.pipeline
        if p is None or getattr(p, "closed", False):
            raise ApiError(503, "the pipeline is not running", "service_unavailable",
                           ErrorCode.STAGE_UNAVAILABLE.value,
                           headers={"Retry-After": "1"})
        procs = p.snapshot()["processes"]
        cfg = p.cfg
        for s in stages:
            try:
                group = cfg.group_of(s).name
            except Exception:  # noqa: BLE001
                raise ApiError(503, f"the pipeline has no stage {s!r}", "service_unavailable",
                               ErrorCode.STAGE_UNAVAILABLE.value) from None
            mine = [v for k, v in procs.items() if k.split("/")[0] == group]
            if not mine or not all(v["ready"] for v in mine):
                raise ApiError(503, f"stage {s!r} is not ready (starting or restarting)",
                               "service_unavailable", ErrorCode.STAGE_UNAVAILABLE.value,
                               headers={"Retry-After": "1"})
        return p

    def _check_auth(self, request: Request) -> None:
        """The Origin policy and the key, as on every transport
        (:mod:`voice_server.transports.access`); ``api-key`` is accepted as
        well as ``Authorization: Bearer`` (Azure-style clients)."""
        refusal = http_refusal(request.headers, _setting(self.settings, "allowed_origins") or [],
                               _api_keys(self.settings))
        if refusal is not None:
            raise ApiError(refusal.status, refusal.message, refusal.type, refusal.code,
                           headers=refusal.headers)

    async def _json(self, request: Request) -> dict:
        limit = int(_setting(self.settings, "max_body_bytes"))
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise ApiError(413, f"request body over {limit} bytes", code="request_too_large")
        body = b""
        try:
            async for part in request.stream():
                body += part
                if len(body) > limit:
                    raise ApiError(413, f"request body over {limit} bytes", code="request_too_large")
        except ClientDisconnect:
            raise
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise ApiError(400, f"the body is not valid JSON: {e}", code="invalid_json") from None
        if not isinstance(data, dict):
            raise ApiError(400, "the body must be a JSON object", code="invalid_json")
        return data

    def model_ids(self) -> list[dict]:
        p = self.pipeline
        own = str(_setting(self.settings, "model"))
        ids: list[tuple[str, str]] = [(own, "voice-agent")]
        if p is not None:
            cfg = p.cfg
            ids.append((cfg.name, "voice-agent"))
            for s in cfg.stages:
                name = s.args.get("model") or (os.path.splitext(os.path.basename(str(s.args["model_path"])))[0]
                                               if s.args.get("model_path") else None)
                if name:
                    ids.append((str(name), s.name))
            if any(s.name == SPEAK for s in cfg.stages):
                ids.extend((a, SPEAK) for a in SPEECH_ALIASES)
        seen: dict[str, dict] = {}
        for mid, owner in ids:
            seen.setdefault(mid, {"id": mid, "object": "model", "created": 0, "owned_by": owner})
        return list(seen.values())

    def _check_model(self, data: dict, stage: str) -> str:
        model = data.get("model")
        if model is None:
            return str(_setting(self.settings, "model"))
        if not isinstance(model, str):
            raise ApiError(400, "'model' must be a string", param="model", code="invalid_type")
        known = {m["id"]: m["owned_by"] for m in self.model_ids()}
        if model not in known:
            raise ApiError(404, f"the model {model!r} does not exist; see GET /v1/models",
                           "not_found_error", "model_not_found", "model")
        if known[model] not in ("voice-agent", stage):
            raise ApiError(400, f"the model {model!r} cannot serve this endpoint (it is a "
                                f"{known[model]!r} model)", param="model", code="model_not_supported")
        return model

    async def _first_event(self, request: Request, turn: _Turn):
        """Wait for the runtime's first event; abort if the client leaves meanwhile."""
        while True:
            try:
                return await turn.next(DISCONNECT_POLL_S)
            except (asyncio.TimeoutError, TimeoutError):
                if await request.is_disconnected():
                    turn.abort("client_disconnected")
                    raise ClientDisconnect() from None

    async def _first_ok_event(self, request: Request, turn: _Turn):
        """The runtime's first event, or the HTTP error it means (before the first
        byte a failure is a status); a client that leaves aborts the turn."""
        try:
            first = await self._first_event(request, turn)
        except BaseException:
            turn.abort("client_disconnected")
            raise
        if first.kind in ("error", "cancelled"):
            raise runtime_error(first)
        return first

    def _deadline(self) -> float | None:
        v = _setting(self.settings, "response_deadline_s")
        return float(v) if v else None

    # ---- endpoints ---------------------------------------------------------------------------
    def _running(self) -> Any | None:
        p = self.pipeline
        return None if p is None or getattr(p, "closed", False) else p

    _NOT_RUNNING = {"status": "unavailable", "reason": "the pipeline is not running"}

    async def health(self, request: Request) -> Response:
        """Every replica of every stage ready: 200, else 503 (the original meaning, kept)."""
        p = self._running()
        if p is None:
            return JSONResponse(self._NOT_RUNNING, status_code=503)
        snap = p.snapshot()
        procs = {k: {"ready": v["ready"], "pid": v["pid"], "restarts": v["restarts"],
                     "heartbeat_age_ms": v["heartbeat_age_ms"], "held": len(v.get("held") or ())}
                 for k, v in snap["processes"].items()}
        h = p.health(float(_setting(self.settings, "readiness_grace_s")))
        body = {"status": "ok" if h.all_ready else "unavailable", "pipeline": p.cfg.name,
                "ready": h.ready, "live": h.live,
                "live_requests": snap["live_requests"], "counters": snap["counters"], "processes": procs}
        return JSONResponse(body, status_code=200 if h.all_ready else 503)

    async def ready(self, request: Request) -> Response:
        """May this server take a new call (runtime/health.py)?  200 ready, 503 not."""
        return self._probe(lambda h: h.ready, "ready", "not_ready")

    async def live(self, request: Request) -> Response:
        """Should this server process be restarted (runtime/health.py)?  200 no, 503 yes."""
        return self._probe(lambda h: h.live, "live", "dead")

    def _probe(self, answer: Callable[[Any], bool], yes: str, no: str) -> Response:
        p = self._running()
        if p is None:
            return JSONResponse(self._NOT_RUNNING, status_code=503)
        h = p.health(float(_setting(self.settings, "readiness_grace_s")))
        ok = answer(h)
        return JSONResponse({"status": yes if ok else no, **h.to_json()}, status_code=200 if ok else 503)

    async def models(self, request: Request) -> Response:
        self._check_auth(request)
        return JSONResponse({"object": "list", "data": self.model_ids()})

    async def model(self, request: Request) -> Response:
        self._check_auth(request)
        mid = request.path_params["model"]
        for m in self.model_ids():
            if m["id"] == mid:
                return JSONResponse(m)
        raise ApiError(404, f"the model {mid!r} does not exist", "not_found_error", "model_not_found", "model")

    # -- POST /v1/audio/speech
    async def speech(self, request: Request) -> Response:
        self._check_auth(request)
        data = await self._json(request)
        self._check_model(data, SPEAK)
        ask = _SpeechAsk.parse(data, int(_setting(self.settings, "max_speech_chars")))
        p = self._live_pipeline([SPEAK])
        audio = _SpeechAudio(int(_setting(self.settings, "speech_sample_rate")))
        h = await p.submit(None, entry=SPEAK, route=[SPEAK], stream_input=True,
                           params={SPEAK_VOICE: ask.voice, SPEAK_SPEED: ask.speed},
                           deadline_s=self._deadline())
        turn = _Turn(p, h)
        try:
            # sentence by sentence: the first is synthesised (and sent) while the rest waits
            for i, part in enumerate(ask.sentences):
                await h.send(part if i == len(ask.sentences) - 1 else part + " ")
            await h.end_input()
        except BaseException:
            turn.abort("client_disconnected")
            raise
        first = await self._first_ok_event(request, turn)
        headers = {"X-Request-Id": str(turn.rid), "X-Sample-Rate": str(audio.rate),
                   "Cache-Control": "no-cache"}
        if ask.stream_format == "sse":
            body, media = _speech_events(first, turn, audio, len(ask.text)), "text/event-stream"
        else:
            body = _speech_bytes(first, turn, audio, wav=ask.fmt == "wav")
            media = "audio/wav" if ask.fmt == "wav" else "audio/pcm"
        return PipelineStream(body, lambda: turn.abort("client_disconnected"), headers=headers,
                              media_type=media)

    # -- POST /v1/chat/completions
    def _chat_payload(self, data: dict) -> tuple[dict, int | None]:
        msgs = data.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise ApiError(400, "'messages' must be a non-empty array", param="messages", code="invalid_value")
        out = []
        total = 0
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or m.get("role") not in ROLE_MAP:
                raise ApiError(400, f"messages[{i}] needs a role in {sorted(ROLE_MAP)}",
                               param=f"messages[{i}].role", code="invalid_value")
            content = m.get("content")
            if content is None:
                content = ""
            if isinstance(content, list):
                texts = []
                for part in content:
                    if not isinstance(part, dict) or part.get("type") != "text" or \
                            not isinstance(part.get("text"), str):
                        raise ApiError(400, f"messages[{i}].content: only text parts are supported",
                                       param=f"messages[{i}].content", code="unsupported_value")
                    texts.append(part["text"])
                content = "".join(texts)
            if not isinstance(content, str):
                raise ApiError(400, f"messages[{i}].content must be a string",
                               param=f"messages[{i}].content", code="invalid_type")
            total += len(content)
            msg = {"role": ROLE_MAP[m["role"]], "content": content}
            # call shapes are checked by the thinker (a bad one is a 400 before the first byte)
            if m.get("tool_calls") is not None and m["role"] == "assistant":
                msg["tool_calls"] = m["tool_calls"]
            if m["role"] == "tool":
                msg["tool_call_id"] = m.get("tool_call_id")
            out.append(msg)
        limit = int(_setting(self.settings, "max_prompt_chars"))
        if total > limit:
            raise ApiError(413, f"the messages hold {total} characters; the limit is {limit}",
                           param="messages", code="input_too_long")
        n = data.get("n", 1)
        if n not in (1, None):
            raise ApiError(400, "only n=1 is supported", param="n", code="unsupported_value")
        for unsupported in ("functions", "function_call", "stop", "logprobs"):
            if data.get(unsupported):
                raise ApiError(400, f"'{unsupported}' is not supported by this server"
                                    + (" (use 'tools')" if unsupported.startswith("function") else ""),
                               param=unsupported, code="unsupported_parameter")
        if "stream" in data and not isinstance(data["stream"], bool) and data["stream"] is not None:
            raise ApiError(400, "'stream' must be a boolean", param="stream", code="invalid_type")
        tools, tool_choice = data.get("tools"), data.get("tool_choice")
        if tools is not None or tool_choice is not None:
            try:
                validate_tools(tools, tool_choice)
            except ValueError as e:
                raise ApiError(400, str(e), param="tool_choice" if "tool_choice" in str(e) else "tools",
                               code="invalid_value") from None
        # usage always: its finish_reason says whether the budget cut the reply
        payload: dict = think_request(out, tools=tools or None, tool_choice=tool_choice,
                                      include_usage=True)
        if data.get("parallel_tool_calls") is not None:
            payload["parallel_tool_calls"] = data["parallel_tool_calls"]
        max_tokens = data.get("max_completion_tokens", data.get("max_tokens"))
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens   # validated by the thinker -> 400 before the first byte
        for k in ("temperature", "top_p", "seed"):
            if data.get(k) is not None:
                payload[k] = data[k]
        return payload, max_tokens if isinstance(max_tokens, int) else None

    async def chat(self, request: Request) -> Response:
        self._check_auth(request)
        data = await self._json(request)
        model = self._check_model(data, THINK)
        payload, max_tokens = self._chat_payload(data)
        stream = bool(data.get("stream"))
        include_usage = bool((data.get("stream_options") or {}).get("include_usage")) \
            if isinstance(data.get("stream_options"), dict) else False
        p = self._live_pipeline([THINK])
        if max_tokens is None:
            try:
                max_tokens = int(p.cfg.stage(THINK).args.get("max_tokens", 64))
            except Exception:  # noqa: BLE001
                max_tokens = 64
        h = await p.submit(payload, entry=THINK, route=list(TEXT_REPLY_ROUTE), deadline_s=self._deadline())
        turn = _Turn(p, h)
        first = await self._first_ok_event(request, turn)
        cid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        headers = {"X-Request-Id": str(turn.rid), "Cache-Control": "no-cache"}

        calls = _Calls()
        end: dict = {}   # the thinker's usage event: token counts and why the reply ended

        def finish_reason(n_chunks: int) -> str:
            if calls.done:
                return "tool_calls"
            cut = end["finish_reason"] == LENGTH if "finish_reason" in end else n_chunks >= max_tokens
            return "length" if cut or calls.started else "stop"

        def usage(n_chunks: int) -> dict:
            """The thinker's counts; a thinker that does not count: the chunks only."""
            if "input_tokens" not in end:
                return {"prompt_tokens": None, "completion_tokens": n_chunks, "total_tokens": None}
            return {"prompt_tokens": end["input_tokens"], "completion_tokens": end["output_tokens"],
                    "total_tokens": end["input_tokens"] + end["output_tokens"],
                    "prompt_tokens_details": {"cached_tokens": end["cached_tokens"]}}

        def note(e: dict) -> dict | None:
            """One think event: the usage kept, a call's piece returned."""
            if e.get("type") == USAGE:
                end.update(e)
                return None
            return calls.add(e)

        if not stream:
            parts: list[str] = []
            n = 0
            ev = first
            try:
                while ev.kind == "chunk":
                    n += 1
                    for e in think_events(ev.payload):
                        if isinstance(e, str):
                            parts.append(e)
                        else:
                            note(e)
                    ev = await self._first_event(request, turn)
            except BaseException:
                turn.abort("client_disconnected")
                raise
            if ev.kind != "done":
                raise runtime_error(ev)
            message: dict = {"role": "assistant", "content": "".join(parts) or (None if calls.done else "")}
            if calls.done:
                message["tool_calls"] = calls.done
            return JSONResponse({
                "id": cid, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": message,
                             "finish_reason": finish_reason(n), "logprobs": None}],
                "usage": usage(n),
            }, headers=headers)

        def chunk(delta: dict, finish: str | None = None) -> bytes:
            return sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]})

        async def body() -> AsyncIterator[bytes]:
            ev = first
            n = 0
            try:
                yield chunk({"role": "assistant", "content": ""})
                while True:
                    if ev.kind == "chunk":
                        n += 1
                        for e in think_events(ev.payload):
                            if isinstance(e, str):
                                yield chunk({"content": e})
                            elif (piece := note(e)) is not None:
                                yield chunk({"tool_calls": [piece]})
                    elif ev.kind == "done":
                        yield chunk({}, finish_reason(n))
                        if include_usage:
                            yield sse({"id": cid, "object": "chat.completion.chunk", "created": created,
                                       "model": model, "choices": [], "usage": usage(n)})
                        yield SSE_DONE
                        return
                    else:
                        body_ = error_body(ev.error) if ev.error is not None else cancelled_body(ev.reason)
                        yield sse(body_, event="error")
                        yield SSE_DONE
                        return
                    ev = await turn.next()
            finally:
                turn.abort("stream_closed")

        return PipelineStream(body(), lambda: turn.abort("client_disconnected"), headers=headers,
                              media_type="text/event-stream")


class _Calls:
    """The tool calls of one chat completion, from the think stage's call events."""

    def __init__(self) -> None:
        self.started: set[int] = set()
        self.done: list[dict] = []

    def add(self, ev: dict) -> dict | None:
        """Record one event; the streamed ``delta.tool_calls`` item it makes, if any."""
        i = ev.get("index", 0)
        if ev.get("type") == TOOL_CALL_DONE:
            self.done.append({"id": ev["call_id"], "type": "function",
                              "function": {"name": ev["name"], "arguments": ev["arguments"]}})
            return None
        if ev.get("type") != TOOL_CALL_DELTA:
            return None
        if i not in self.started:
            self.started.add(i)
            return {"index": i, "id": ev.get("call_id"), "type": "function",
                    "function": {"name": ev.get("name"), "arguments": ev.get("arguments", "")}}
        return {"index": i, "function": {"arguments": ev.get("arguments", "")}} if ev.get("arguments") else None


def _wrap(fn):
    async def endpoint(request: Request) -> Response:
        try:
            return await fn(request)
        except ApiError as e:
            return e.response()
        except ClientDisconnect:
            return Response(status_code=499)
        except Exception as e:  # noqa: BLE001 - an unexpected bug is still a proper status
            log.exception("HTTP endpoint %s failed", request.url.path)
            return ApiError(500, f"internal error: {type(e).__name__}: {e}", "server_error",
                            ErrorCode.INTERNAL.value).response()
    return endpoint


def routes(pipeline: Any, settings: Any = None) -> list[Route]:
    """GET /health, /health/ready, /health/live, GET /v1/models[/{model}], POST /v1/audio/speech,
    POST /v1/chat/completions."""
    api = HttpApi(pipeline, settings)
    return [
        Route("/health", _wrap(api.health), methods=["GET"]),
        Route("/health/ready", _wrap(api.ready), methods=["GET"]),
        Route("/health/live", _wrap(api.live), methods=["GET"]),
        Route("/v1/models", _wrap(api.models), methods=["GET"]),
        Route("/v1/models/{model:path}", _wrap(api.model), methods=["GET"]),
        Route("/v1/audio/speech", _wrap(api.speech), methods=["POST"]),
        Route("/v1/chat/completions", _wrap(api.chat), methods=["POST"]),
    ]


__all__ = ["routes", "HttpApi", "ApiError", "PipelineStream", "StreamAborted", "wav_header", "STATUS_OF"]
