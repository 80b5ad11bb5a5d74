"""Telephony bridge: Twilio Media Streams (bidirectional, ``<Connect><Stream>``).

Routes (see :func:`twilio_routes`):

* ``WebSocket /v1/telephony/twilio`` - the media stream.  Text frames only.
  Inbound ``connected``, ``start``, ``media`` (base64 G.711 mu-law, 8 kHz),
  ``dtmf``, ``mark``, ``stop``; outbound ``media``, ``mark``, ``clear``.
* ``POST /v1/telephony/twilio/twiml`` - the TwiML a Twilio number's voice
  webhook fetches: ``<Response><Connect><Stream url="wss://.../v1/telephony/
  twilio">``.  The stream URL is ``ServerSettings.twilio_stream_url`` or, by
  default, derived from the request's Host header.

The call reuses the sans-I/O :class:`Session` (``audio_out_mode="stream"``)
and :class:`SessionRunner` unchanged; this module only translates:

* inbound mu-law -> int16 PCM -> ``runner.input_audio(pcm, 8000)``;
* ``AudioOut`` -> resampled to 8 kHz (stateful, per item) -> mu-law ->
  ``media`` messages of 20 ms (160 bytes), a ``mark`` after every 200 ms and
  after each chunk (a 100 ms slice when paced), named ``"<item_id>:<ms>"``
  (ms of that item's audio sent so far).  Before an
  item's first frame goes a ``"<item_id>:0:start"`` mark, after its last
  (on ``response.done``) a ``"<item_id>:<ms>:end"`` mark (the tail frame is
  padded with mu-law silence).  Twilio echoes a mark once the audio before it
  has played: the echo becomes ``runner.playback_progress(item_id, ms)``, so
  the session knows what the caller heard and barge-in truncates to it.
* Pacing: the session releases ``AudioOut`` in real time (100 ms slices), so
  Twilio holds at most ``ServerSettings.output_lead_ms`` of unplayed audio;
  a paused reply (``Session.pause_output``) simply stops sending ``media``
  (Twilio plays out what it holds) and resumes where it stopped; only a
  cancel sends ``clear``.
* ``FlushAudio`` (barge-in) -> every queued frame of the item is dropped and
  ``clear`` is sent next.  The session core flushes an active response, and
  also a finished reply that is still playing (the marks tell it what was
  heard), so a caller who talks over it silences it.  After a ``clear``, marks
  outstanding at that moment are ignored when Twilio echoes them (they were
  cleared, not heard).  No ``media`` of the old reply follows the ``clear``.
* ``stop`` or socket close -> ``runner.close()`` (aborts every request).

Telephony has no error channel: bad input (malformed JSON, binary frames,
bad base64, unknown events, missing fields, media before ``start``) is logged
and ignored; a failed response is logged and the call goes on.  A ``start``
whose ``mediaFormat`` is not mu-law/8000/mono closes the stream (1003).

``start.customParameters`` (``<Parameter>`` in the TwiML) may set
``instructions``, ``voice`` and ``max_output_tokens`` for the call (applied as
a ``session.update``, so the usual limits hold).

Authentication of the stream: a valid ``Authorization: Bearer KEY`` (server
API keys), or - when ``twilio_auth_token`` is configured - a valid
``X-Twilio-Signature`` on the upgrade request (Twilio signs the stream URL).
With neither API keys nor a token configured the endpoint is open (the server
then only binds loopback).  As on every transport
(:mod:`voice_server.transports.access`), a request with a browser ``Origin``
must pass the Origin policy, and the stream takes one of the ``max_sessions``
places from the upgrade until its call ends (before ``start`` too).  The TwiML endpoint checks ``X-Twilio-Signature``
(HMAC-SHA1 over the full URL + sorted POST params) when a token is configured
and answers 403 when it does not match.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import logging
import secrets
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Mapping
from urllib.parse import parse_qsl, urlsplit
from xml.sax.saxutils import quoteattr

import numpy as np
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketState

from ..audio_codec import StreamResampler, mulaw_decode, mulaw_encode
from ..runner import RunnerOptions, SessionRunner
from ..session import Session
from ..settings import ServerSettings
from .access import (AdmissionTicket, Refusal, admit, bearer_token, busy_refusal,
                     denial_response, host_of, is_loopback, key_matches, origin_allowed,
                     origin_refusal)
from .ws_reader import read_websocket, until_first

log = logging.getLogger("voice_server.transports.twilio")

STREAM_PATH = "/v1/telephony/twilio"
TWIML_PATH = "/v1/telephony/twilio/twiml"
RATE = 8000
FRAME_BYTES = 160  # 20 ms of 8 kHz mu-law
MARK_EVERY_FRAMES = 10  # a mark per 200 ms of audio (and per chunk): what was heard, to 200 ms
MULAW_SILENCE = b"\xff"
MAX_MEDIA_PAYLOAD = 64 * 1024  # base64 chars of one inbound media message (~5 s)
MAX_TWIML_BODY = 64 * 1024
_PARAM_KEYS = ("instructions", "voice", "max_output_tokens")


# ------------------------------------------------------------------ signatures

def twilio_signature(auth_token: str, url: str, params: Iterable[tuple[str, str]] | Mapping
                     | None = None) -> str:
    """Twilio's ``X-Twilio-Signature``: base64(HMAC-SHA1(token, url + k1v1k2v2...)),
    keys sorted (each key's values sorted too)."""
    items = list(params.items()) if isinstance(params, Mapping) else list(params or [])
    grouped: dict[str, set[str]] = {}
    for k, v in items:
        grouped.setdefault(str(k), set()).add(str(v))
    data = url + "".join(k + v for k in sorted(grouped) for v in sorted(grouped[k]))
    mac = hmac.new(auth_token.encode(), data.encode("utf-8"), hashlib.sha1)
    return base64.b64encode(mac.digest()).decode("ascii")


def signature_ok(auth_token: str, signature: str | None, urls: Iterable[str],
                 params=None) -> bool:
    if not signature:
        return False
    ok = False
    for u in dict.fromkeys(urls):  # unique, in order; no early exit
        ok |= hmac.compare_digest(twilio_signature(auth_token, u, params).encode(),
                                  signature.encode())
    return ok


def _url_variants(url: str) -> list[str]:
    """The URL as received, plus the other scheme (TLS ends at a proxy/tunnel)."""
    p = urlsplit(url)
    out = [url]
    swap = {"http": "https", "ws": "wss", "https": "http", "wss": "ws"}.get(p.scheme)
    if swap:
        out.append(p._replace(scheme=swap).geturl())
    return out


def stream_url_for(settings: ServerSettings, host_header: str | None,
                   forwarded_proto: str | None = None) -> str:
    """The ``<Stream url>``: configured, else ``wss://<Host>/v1/telephony/twilio``
    (``ws://`` for a loopback Host or ``X-Forwarded-Proto: http``)."""
    if settings.twilio_stream_url:
        return settings.twilio_stream_url
    host = host_header or "localhost"
    proto = (forwarded_proto or "").split(",")[0].strip().lower()
    scheme = "ws" if proto == "http" or (not proto and is_loopback(host_of(host))) else "wss"
    return f"{scheme}://{host}{STREAM_PATH}"


# ------------------------------------------------------------------ the call

@dataclass
class _ItemOut:
    item_id: str
    response_id: str
    resampler: StreamResampler | None = None
    rem: bytes = b""
    sent_bytes: int = 0  # 8 kHz mu-law bytes queued for this item (= samples)

    @property
    def ms(self) -> int:
        return self.sent_bytes * 1000 // RATE


class TwilioCall:
    """One Media Stream: the Twilio wire <-> a SessionRunner."""

    def __init__(self, ws: WebSocket, endpoint: "TwilioEndpoint",
                 ticket: AdmissionTicket) -> None:
        self.ws = ws
        self.ep = endpoint
        self.ticket = ticket  # our place among max_sessions until the runner registers
        self.settings = endpoint.settings
        self.stream_sid: str | None = None
        self.call_sid: str | None = None
        self.session: Session | None = None
        self.runner: SessionRunner | None = None
        self.ended = asyncio.Event()  # stop received, or the socket is gone
        self.bad_messages = 0
        self.errors_logged = 0  # session error events (telephony can only log them)
        self.stats = {"media_in": 0, "media_out": 0, "marks_out": 0, "marks_in": 0,
                      "clears": 0, "marks_ignored": 0}
        # outbound: (kind, item_id, text, mark) sent in order by one sender task
        self._out: deque = deque()
        self._out_ready = asyncio.Event()
        self._items: dict[str, _ItemOut] = {}
        self._outstanding: dict[str, tuple[str, int]] = {}  # mark name -> (item, ms)
        self._cleared: set[str] = set()
        self._sender: asyncio.Task | None = None

    # -------------------------------------------------------------- inbound
    def _bad(self, why: str) -> None:
        self.bad_messages += 1
        n = self.bad_messages
        level = logging.WARNING if n <= 5 or n % 100 == 0 else logging.DEBUG
        log.log(level, "twilio %s: ignored message (%s) [%d bad so far]",
                self.stream_sid or "-", why, n)

    async def on_text(self, text: str) -> None:
        try:
            msg = json.loads(text)
        except (ValueError, TypeError):
            self._bad("malformed JSON")
            return
        if not isinstance(msg, dict):
            self._bad("not a JSON object")
            return
        ev = msg.get("event")
        if ev == "media":
            self._on_media(msg)
        elif ev == "mark":
            self._on_mark(msg)
        elif ev == "start":
            await self._on_start(msg)
        elif ev == "stop":
            log.info("twilio %s: stop", self.stream_sid)
            self.ended.set()
        elif ev == "connected":
            log.debug("twilio: connected %s", msg.get("protocol"))
        elif ev == "dtmf":
            d = msg.get("dtmf")
            log.info("twilio %s: dtmf %r", self.stream_sid,
                     d.get("digit") if isinstance(d, dict) else None)
        else:
            self._bad(f"unknown event {str(ev)[:40]!r}")

    async def _on_start(self, msg: dict) -> None:
        if self.runner is not None:
            self._bad("second start")
            return
        st = msg.get("start")
        sid = (st or {}).get("streamSid") if isinstance(st, dict) else None
        sid = sid or msg.get("streamSid")
        if not isinstance(st, dict) or not isinstance(sid, str) or not sid:
            self._bad("start without start.streamSid")
            return
        fmt = st.get("mediaFormat")
        if isinstance(fmt, dict):
            enc = str(fmt.get("encoding", "audio/x-mulaw")).lower()
            rate, ch = fmt.get("sampleRate", RATE), fmt.get("channels", 1)
            if enc not in ("audio/x-mulaw", "audio/mulaw", "audio/pcmu") or rate != RATE \
                    or ch != 1:
                log.error("twilio %s: unsupported mediaFormat %r; closing", sid, fmt)
                await self._close_ws(1003, "unsupported mediaFormat")
                self.ended.set()
                return
        self.stream_sid = sid[:128]
        cs = st.get("callSid")
        self.call_sid = cs[:128] if isinstance(cs, str) else None
        s = self.settings
        config = s.session_defaults()
        self.session = Session("sess_" + secrets.token_hex(10), config, audio_out_mode="stream",
                               limits=s.limits, output_lead_ms=s.output_lead_ms,
                               interruptions=s.interruptions,
                               extension_events=False)  # no channel for events
        self.runner = SessionRunner(self.session, self.ep.pipeline, self._send_event,
                                    send_audio=self._send_audio, flush_audio=self._flush_audio,
                                    on_close=self._on_runner_close,
                                    options=RunnerOptions.from_settings(s),
                                    transport="twilio")
        self.ep.runners[self.session.session_id] = self.runner
        self.ep.calls[self.session.session_id] = self
        log.info("twilio %s: call %s started (session %s)", self.stream_sid, self.call_sid,
                 self.session.session_id)
        await self.runner.start()
        self.ticket.release()  # the registered runner counts itself now
        update = self._params_update(st.get("customParameters"))
        if update:
            self.runner.client_event({"type": "session.update",
                                      "session": {"type": "realtime", **update}})

    def _params_update(self, params) -> dict:
        if params is None:
            return {}
        if not isinstance(params, dict):
            self._bad("customParameters is not an object")
            return {}
        out: dict = {}
        for k in _PARAM_KEYS:
            v = params.get(k)
            if v is None:
                continue
            if k == "max_output_tokens":
                sv = str(v).strip()
                out[k] = int(sv) if sv.isdigit() else sv
            else:
                out[k] = str(v)
        return out

    def _on_media(self, msg: dict) -> None:
        if self.runner is None:
            self._bad("media before start")
            return
        m = msg.get("media")
        if not isinstance(m, dict):
            self._bad("media without media object")
            return
        track = m.get("track")
        if track is not None and track != "inbound":
            return  # only the caller's audio is input
        payload = m.get("payload")
        if not isinstance(payload, str) or len(payload) > MAX_MEDIA_PAYLOAD:
            self._bad("media.payload missing, not a string or too long")
            return
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            self._bad("media.payload is not base64")
            return
        if not data:
            return
        self.stats["media_in"] += 1
        self.runner.input_audio(mulaw_decode(data), RATE)

    def _on_mark(self, msg: dict) -> None:
        m = msg.get("mark")
        name = m.get("name") if isinstance(m, dict) else None
        if not isinstance(name, str):
            self._bad("mark without mark.name")
            return
        self.stats["marks_in"] += 1
        info = self._outstanding.pop(name, None)
        if name in self._cleared:
            self._cleared.discard(name)
            self.stats["marks_ignored"] += 1
            return  # cleared, not played
        if info is None:
            self._bad(f"unknown mark {name[:60]!r}")
            return
        if self.runner is not None:
            self.runner.playback_progress(info[0], info[1])

    # ------------------------------------------------------------- outbound
    def _queue(self, kind: str, item_id: str | None, body: dict, mark=None) -> None:
        body = {"event": kind, "streamSid": self.stream_sid, **body}
        self._out.append((kind, item_id, json.dumps(body, separators=(",", ":")), mark))
        self._out_ready.set()

    def _queue_mark(self, it: _ItemOut, suffix: str = "") -> None:
        name = f"{it.item_id}:{it.ms}{suffix}"
        self._queue("mark", it.item_id, {"mark": {"name": name}}, (name, it.item_id, it.ms))

    def _queue_frames(self, it: _ItemOut, data: bytes) -> int:
        """Whole 20 ms frames of ``data`` (returns how many), a mark every
        MARK_EVERY_FRAMES and one after the last frame."""
        n = len(data) // FRAME_BYTES
        for k in range(n):
            frame = data[k * FRAME_BYTES:(k + 1) * FRAME_BYTES]
            self._queue("media", it.item_id,
                        {"media": {"payload": base64.b64encode(frame).decode("ascii")}})
            it.sent_bytes += FRAME_BYTES
            if k < n - 1 and (it.sent_bytes // FRAME_BYTES) % MARK_EVERY_FRAMES == 0:
                self._queue_mark(it)
        if n:
            self._queue_mark(it)
        return n

    async def _send_audio(self, response_id: str, item_id: str, pcm: np.ndarray,
                          sample_rate: int) -> None:
        if self.stream_sid is None:
            return
        it = self._items.get(item_id)
        if it is None:
            it = self._items[item_id] = _ItemOut(item_id, response_id)
            self._queue_mark(it, ":start")
        tail = np.zeros(0, np.int16)
        if it.resampler is not None and it.resampler.in_rate != sample_rate:
            tail = it.resampler.flush()
            it.resampler = None
        if it.resampler is None:
            it.resampler = StreamResampler(sample_rate, RATE)
        pcm8 = it.resampler.process(np.asarray(pcm, np.int16).reshape(-1))
        if tail.size:
            pcm8 = np.concatenate([tail, pcm8])
        data = it.rem + mulaw_encode(pcm8)
        n = self._queue_frames(it, data)
        it.rem = data[n * FRAME_BYTES:]

    def _finish_item(self, response_id: str) -> None:
        it = next((x for x in self._items.values() if x.response_id == response_id), None)
        if it is None:
            return
        del self._items[it.item_id]
        data = it.rem + (mulaw_encode(it.resampler.flush()) if it.resampler else b"")
        if data:
            pad = (-len(data)) % FRAME_BYTES
            self._queue_frames(it, data + MULAW_SILENCE * pad)
        self._queue_mark(it, ":end")  # the whole reply has played

    async def _flush_audio(self, item_id: str) -> None:
        """Barge-in: drop what is queued for the item, ``clear`` goes out next."""
        self._items.pop(item_id, None)
        if self.stream_sid is None:
            return
        self._out = deque(x for x in self._out if x[1] != item_id)
        # marks Twilio still holds were cleared, not played: ignore their echo
        self._cleared.update(self._outstanding)
        self._outstanding.clear()
        body = json.dumps({"event": "clear", "streamSid": self.stream_sid},
                          separators=(",", ":"))
        self._out.appendleft(("clear", item_id, body, None))
        self._out_ready.set()

    async def _send_event(self, ev: dict) -> None:
        """Session (Realtime) events: telephony has no channel for them; a few
        drive the stream, the rest are logged."""
        t = ev.get("type")
        if t == "response.done":
            r = ev.get("response") or {}
            status = r.get("status")
            if status == "failed":
                log.warning("twilio %s: response %s failed: %s", self.stream_sid, r.get("id"),
                            (r.get("status_details") or {}).get("error"))
            if status != "cancelled":
                self._finish_item(r.get("id"))
        elif t == "error":
            # throttled like _bad: a flood of rejected frames must not flood the log
            self.errors_logged += 1
            n = self.errors_logged
            log.log(logging.WARNING if n <= 5 or n % 100 == 0 else logging.DEBUG,
                    "twilio %s: %s [%d errors so far]", self.stream_sid, ev.get("error"), n)

    async def _send_loop(self) -> None:
        try:
            while True:
                if not self._out:
                    self._out_ready.clear()
                    await self._out_ready.wait()
                    continue
                kind, _item, text, mark = self._out.popleft()
                if mark is not None:  # before the await: a clear meanwhile must see it
                    self._outstanding[mark[0]] = (mark[1], mark[2])
                await self.ws.send_text(text)
                if kind == "media":
                    self.stats["media_out"] += 1
                elif kind == "mark":
                    self.stats["marks_out"] += 1
                elif kind == "clear":
                    self.stats["clears"] += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - socket gone
            log.info("twilio %s: send failed (%r)", self.stream_sid, exc)
            self.ended.set()

    async def _on_runner_close(self, code: int, reason: str) -> None:
        log.info("twilio %s: session closed (%s %s)", self.stream_sid, code, reason)
        self.ended.set()

    async def _close_ws(self, code: int = 1000, reason: str = "") -> None:
        if self.ws.application_state != WebSocketState.DISCONNECTED:
            with contextlib.suppress(Exception):
                await self.ws.close(code, reason[:120])

    # ------------------------------------------------------------------ run
    async def run(self) -> None:
        self._sender = asyncio.ensure_future(self._send_loop())
        try:
            await until_first(self._read(), self.ended.wait())
        finally:
            try:
                if self.runner is not None:
                    await self.runner.close()
            finally:
                self.ticket.release()
                self._sender.cancel()
                with contextlib.suppress(BaseException):
                    await self._sender
                if self.session is not None:
                    self.ep.runners.pop(self.session.session_id, None)
                    self.ep.calls.pop(self.session.session_id, None)
                await self._close_ws(1000)
                log.info("twilio %s: call ended %s", self.stream_sid, self.stats)

    async def _read(self) -> None:
        await read_websocket(self.ws, self.on_text, self._on_binary, stop=self.ended.is_set,
                             label=lambda: f"twilio {self.stream_sid or '-'}")

    def _on_binary(self, _data: bytes) -> None:
        """Media Streams has no binary messages.  Counted as a bad message and,
        once the call has a session, rejected through it (traffic + rate limit;
        its ``error`` event is only logged: telephony has no error channel)."""
        self._bad("binary frame (Media Streams uses JSON text frames)")
        if self.runner is not None:
            self.runner.reject_client_frame(
                "binary_frames_not_supported",
                "Binary frames are not supported: Media Streams messages are JSON text frames.")


class TwilioEndpoint:
    """ASGI WebSocket endpoint for Media Streams; one per app."""

    def __init__(self, pipeline, settings: ServerSettings) -> None:
        self.pipeline = pipeline
        self.settings = settings
        self.runners: dict[str, SessionRunner] = {}
        self.calls: dict[str, TwilioCall] = {}

    def _authorized(self, ws: WebSocket) -> bool:
        s = self.settings
        if s.auth_required and key_matches(bearer_token(ws.headers), s.api_keys):
            return True
        token = s.twilio_auth_token
        if token:
            sig = ws.headers.get("x-twilio-signature")
            path = ws.scope.get("path", STREAM_PATH)
            qs = ws.scope.get("query_string", b"").decode("latin-1")
            host = ws.headers.get("host") or ""
            urls = []
            if s.twilio_stream_url:
                urls.append(s.twilio_stream_url)
            for scheme in ("wss", "ws", "https", "http"):
                urls.append(f"{scheme}://{host}{path}" + (f"?{qs}" if qs else ""))
            return signature_ok(token, sig, urls)
        return not s.auth_required

    async def _deny(self, ws: WebSocket, refusal: Refusal) -> None:
        try:
            await ws.send_denial_response(denial_response(refusal))
        except RuntimeError:
            await ws.close(1008)

    async def __call__(self, scope, receive, send) -> None:
        ws = WebSocket(scope, receive, send)
        s = self.settings
        if not origin_allowed(ws.headers.get("origin"), ws.headers.get("host"),
                              s.allowed_origins):  # Twilio sends none; a browser page might
            await self._deny(ws, origin_refusal())
            return
        if not self._authorized(ws):
            log.warning("twilio: stream rejected (no valid API key or X-Twilio-Signature)")
            await self._deny(ws, Refusal(403, "forbidden",
                                         "No valid API key or X-Twilio-Signature."))
            return
        ticket = admit(self.pipeline, s.max_sessions)  # every transport's sessions count
        if ticket is None:
            await self._deny(ws, busy_refusal(s.max_sessions))   # the same as every transport
            return
        try:
            await ws.accept()
        except Exception:  # noqa: BLE001 - gone during the handshake
            ticket.release()
            return
        await TwilioCall(ws, self, ticket).run()

    async def close_all(self) -> None:
        for c in list(self.calls.values()):
            c.ended.set()
        await asyncio.gather(*(r.close() for r in list(self.runners.values())),
                             return_exceptions=True)


# ------------------------------------------------------------------ TwiML

def twiml_endpoint(settings: ServerSettings):
    async def twiml(request: Request) -> Response:
        body = await request.body()
        if len(body) > MAX_TWIML_BODY:
            return Response("request too large", status_code=413, media_type="text/plain")
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        params = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True) \
            if ctype in ("application/x-www-form-urlencoded", "") and body else []
        token = settings.twilio_auth_token
        if token:
            url = str(request.url)
            urls = _url_variants(url)
            fproto = request.headers.get("x-forwarded-proto")
            if fproto:
                urls.append(urlsplit(url)._replace(scheme=fproto.split(",")[0].strip()).geturl())
            if not signature_ok(token, request.headers.get("x-twilio-signature"), urls, params):
                log.warning("twilio: TwiML request with a bad X-Twilio-Signature")
                return Response("invalid X-Twilio-Signature", status_code=403,
                                media_type="text/plain")
        url = stream_url_for(settings, request.headers.get("host"),
                             request.headers.get("x-forwarded-proto"))
        form = dict(params)
        extra = "".join(f"<Parameter name={quoteattr(k.lower())} value={quoteattr(form[k][:256])}/>"
                        for k in ("From", "To") if form.get(k))
        xml = ('<?xml version="1.0" encoding="UTF-8"?>'
               f"<Response><Connect><Stream url={quoteattr(url)}>{extra}</Stream></Connect>"
               "</Response>")
        return Response(xml, media_type="application/xml")
    return twiml


def twilio_routes(pipeline, settings: ServerSettings) -> tuple[list, TwilioEndpoint]:
    """``[WebSocketRoute(/v1/telephony/twilio), Route(POST /v1/telephony/twilio/twiml)]``
    and the endpoint (its ``close_all`` belongs in the app's shutdown)."""
    ep = TwilioEndpoint(pipeline, settings)
    return [WebSocketRoute(STREAM_PATH, ep),
            Route(TWIML_PATH, twiml_endpoint(settings), methods=["POST"])], ep


__all__ = ["TwilioEndpoint", "TwilioCall", "twilio_routes", "twilio_signature", "signature_ok",
           "stream_url_for", "STREAM_PATH", "TWIML_PATH"]
