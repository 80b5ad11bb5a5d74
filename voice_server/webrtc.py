"""OpenAI-style WebRTC transport (aiortc), beside the ``/v1/realtime`` WebSocket.

Signalling (HTTP, JSON errors shaped like OpenAI's
``{"error": {"type", "code", "message", "param"}}``):

* ``POST /v1/realtime/calls[?model=M]`` - body: the SDP offer
  (``Content-Type: application/sdp``).  ``201`` with the SDP answer
  (``application/sdp``) and ``Location: /v1/realtime/calls/{call_id}``.
  400 for an offer that is not SDP / cannot be answered, 401 bad key,
  403 Origin not allowed, 413 too large, 503 too many sessions.
* ``DELETE /v1/realtime/calls/{call_id}`` (also ``POST .../hangup``) - hang up:
  the session ends and its requests are aborted.  ``204``; ``404`` unknown.
* ``POST /v1/realtime/client_secrets`` - body (optional JSON)
  ``{"expires_after": {"anchor": "created_at", "seconds": N},
  "session": {...session.update fields...}}`` -> ``{"value": "ek_...",
  "expires_at": EPOCH, "session": {...effective session...}}``.  The secret is
  single-use and expires (default ``client_secret_ttl_s`` = 60 s); a browser
  sends it instead of the real key (``Authorization: Bearer ek_...``) and gets
  the session configured at mint time.

Auth is the WebSocket's: ``Authorization: Bearer KEY`` with a configured key,
or a live client secret (the only way a browser should authenticate when keys
are configured).  Minting requires the real key.

Media and events:

* The client's microphone track (Opus, decoded by aiortc, 48 kHz) goes to
  ``Session.input_audio`` (the session resamples it).
* One audio track back: :class:`voice_server.webrtc_audio.PacedAudioTrack`,
  paced in real time (20 ms frames); the session runs with
  ``audio_out_mode="stream"``: ``AudioOut`` fills the track's queue,
  ``FlushAudio`` (barge-in, ``output_audio_buffer.clear``) empties it at once,
  and every frame sent reports ``playback_progress`` so truncation knows what
  was heard.  The core emits ``output_audio_buffer.started`` (first audio of
  a response), ``.cleared`` (flush) and ``.stopped`` (everything played).
* The data channel the client opens, ``oai-events``, carries the WebSocket's
  JSON events both ways (client events in; server events, errors included,
  out).  A message above ``ServerSettings.datachannel_max_message_bytes`` or
  binary data that is not UTF-8 gets an ``error`` (``message_too_large``,
  ``invalid_json``) through the session core (rate limited like events) and
  the call goes on; so does a text message that is not valid UTF-8
  (:func:`guard_text_decoding`: aiortc would otherwise end the call).
  Server events produced before the channel opens are held (bounded) and
  sent when it opens, so ``session.created`` is always the first.
* A peer connection that fails or closes, a DELETE, or a session ``Close``
  (expired, slow client) ends the call: the runner aborts every request.

ICE: ``ServerSettings.ice_servers`` (default none - aiortc's public STUN
default is never used) and ``ice_hosts`` (env ``VOICE_AGENT_ICE_HOSTS``): the
exact host addresses to offer, e.g. ``127.0.0.1`` on a loopback-only host
(see :mod:`voice_server.webrtc_ice`).  The answer carries all candidates
(no trickle ICE).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .client_secrets import ClientSecretStore, is_client_secret
from .realtime_ws import _bearer, _key_ok, origin_allowed
from .runner import RunnerOptions, SessionRunner
from .session import Session, SessionSettings
from .session.config import apply_session_update, session_to_wire
from .session.errors import ClientError
from .settings import ServerSettings
from .webrtc_audio import PacedAudioTrack, frame_to_mono
from .webrtc_ice import (low_latency_audio_receiver, offered_hosts, parse_hosts,
                         rtc_configuration)

log = logging.getLogger("voice_server.webrtc")

EVENTS_LABEL = "oai-events"
MAX_SDP_BYTES = 64 * 1024
MAX_PENDING_EVENTS = 2000  # held until the data channel opens
CONNECT_TIMEOUT_S = 30.0  # answered but never connected: hang up
MAX_DC_BUFFERED = 8 * 1024 * 1024  # bytes queued on the data channel: client not reading


def _error(status: int, code: str, message: str, type_: str = "invalid_request_error",
           param: str | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"type": type_, "code": code, "message": message,
                                   "param": param}}, status_code=status, headers=headers)


def _utf8_size(msg: str | bytes) -> int:
    """Bytes of a data-channel message as it was on the wire (aiortc hands
    text messages over decoded)."""
    if isinstance(msg, str):
        return len(msg.encode("utf-8", "surrogatepass"))
    return len(msg)


def guard_text_decoding(sctp) -> bool:
    """Hand a data-channel text message that is not valid UTF-8 over as bytes.

    aiortc decodes text messages (string PPID) inside its SCTP receive path;
    a UnicodeDecodeError there goes up through the DTLS transport's receive
    task and ends it - the client could kill its own call with one bad
    message, with no error event.  Re-tagged as binary, the message reaches
    :meth:`Call.on_channel_message`, which rejects it (``invalid_json``) and
    the call goes on.  aiortc has no hook for this, so it wraps a private
    method of this one transport: returns False (and changes nothing) when
    this aiortc version lays it out differently.
    """
    try:
        from aiortc.rtcsctptransport import WEBRTC_BINARY, WEBRTC_STRING
        original = sctp._receive
    except (ImportError, AttributeError) as exc:
        log.warning("data-channel UTF-8 guard not applied: %r", exc)
        return False

    async def receive(stream_id: int, pp_id: int, data: bytes) -> None:
        if pp_id == WEBRTC_STRING:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                pp_id = WEBRTC_BINARY
        await original(stream_id, pp_id, data)

    sctp._receive = receive
    return True


class Call:
    """One WebRTC call: peer connection + session + runner."""

    def __init__(self, endpoint: "WebRTCEndpoint", call_id: str, pc, session: Session) -> None:
        self.endpoint = endpoint
        self.id = call_id
        self.pc = pc
        self.session = session
        self.runner: SessionRunner | None = None
        self.out_track = PacedAudioTrack(on_played=self._on_played)
        self.channel = None
        self.pending: list[str] = []
        self.pending_dropped = 0
        self.created = time.monotonic()
        self.connected = asyncio.Event()
        self.ended = False
        self._end_task: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self.stats = {"mic_frames": 0, "events_in": 0, "events_out": 0}
        # read at call setup, like the session's other limits
        self.max_message_bytes = endpoint.settings.datachannel_max_message_bytes

    # ----------------------------------------------------------- callbacks
    def _on_played(self, item_id: str, played_ms: float) -> None:
        if self.runner is not None:
            self.runner.playback_progress(item_id, played_ms)

    async def send_event(self, ev: dict) -> None:
        text = json.dumps(ev, separators=(",", ":"), ensure_ascii=False)
        ch = self.channel
        if ch is not None and ch.readyState == "open":
            if ch.bufferedAmount > MAX_DC_BUFFERED:
                raise ConnectionError("client does not read the oai-events channel")
            ch.send(text)
            self.stats["events_out"] += 1
        elif len(self.pending) < MAX_PENDING_EVENTS:
            self.pending.append(text)
        else:
            self.pending_dropped += 1

    async def send_audio(self, response_id: str, item_id: str, pcm, sample_rate: int) -> None:
        self.out_track.push(item_id, pcm, sample_rate)

    async def flush_audio(self, item_id: str) -> None:
        self.out_track.flush(item_id)

    async def on_close(self, code: int, reason: str) -> None:
        log.info("call %s: session closed (%s %s)", self.id, code, reason)
        self.end(f"session closed: {reason}")

    # --------------------------------------------------------------- wiring
    def spawn(self, coro, name: str) -> asyncio.Task:
        t = asyncio.ensure_future(coro)
        t.set_name(f"webrtc-{self.id}-{name}")
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
        return t

    def attach_channel(self, channel) -> None:
        if channel.label != EVENTS_LABEL or self.channel is not None:
            return
        self.channel = channel

        def flush_pending() -> None:
            pend, self.pending = self.pending, []
            for text in pend:
                channel.send(text)
                self.stats["events_out"] += 1
            if self.pending_dropped and self.runner is not None:
                self.runner.send_error("events_dropped", f"{self.pending_dropped} server events "
                                       "were dropped before the oai-events channel opened.",
                                       type_="server_error")

        @channel.on("message")
        def on_message(msg) -> None:
            if self.runner is None or self.ended:
                return
            self.stats["events_in"] += 1
            # an exception here would go up through aiortc's SCTP receive path
            # and end the DTLS transport, i.e. the call: never let one out
            try:
                self.on_channel_message(msg)
            except Exception:  # noqa: BLE001
                log.exception("call %s: oai-events message handling failed", self.id)

        @channel.on("close")
        def on_close() -> None:
            log.debug("call %s: oai-events closed", self.id)

        if channel.readyState == "open":
            flush_pending()
        else:
            channel.on("open", flush_pending)

    def on_channel_message(self, msg: str | bytes) -> None:
        """One ``oai-events`` message: a client event for the runner, or - too
        large, or bytes that are not UTF-8 - rejected through the session core
        (an ``error``, counted against the rate limit; the call goes on)."""
        cap = self.max_message_bytes
        size = _utf8_size(msg)
        if size > cap:
            self.runner.reject_client_frame(
                "message_too_large", f"The oai-events message ({size} bytes) is larger than "
                f"the limit of {cap} bytes; it was dropped.")
            return
        if isinstance(msg, (bytes, bytearray)):
            try:
                msg = bytes(msg).decode("utf-8")
            except UnicodeDecodeError:
                self.runner.reject_client_frame("invalid_json", "oai-events messages must be "
                                                "JSON text (UTF-8).")
                return
        self.runner.client_event(msg)

    def attach_track(self, track) -> None:
        if track.kind != "audio":
            return  # video etc.: not consumed
        self.spawn(self._read_mic(track), "mic")

    async def _read_mic(self, track) -> None:
        from aiortc.mediastreams import MediaStreamError
        while not self.ended:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            if self.runner is None:
                continue
            try:
                pcm = frame_to_mono(frame)
            except ValueError as exc:
                log.warning("call %s: %s", self.id, exc)
                continue
            self.stats["mic_frames"] += 1
            self.runner.input_audio(pcm, frame.sample_rate)

    async def watch_connect(self) -> None:
        try:
            await asyncio.wait_for(self.connected.wait(), CONNECT_TIMEOUT_S)
        except asyncio.TimeoutError:
            self.end("ICE/DTLS did not connect")

    def on_state(self) -> None:
        st = self.pc.connectionState
        log.debug("call %s: connection %s", self.id, st)
        if st == "connected":
            self.connected.set()
        elif st in ("failed", "closed"):
            self.end(f"peer connection {st}")

    # ------------------------------------------------------------------ end
    def end(self, why: str = "") -> asyncio.Task:
        if self._end_task is None:
            self.ended = True
            log.info("call %s: ending (%s)", self.id, why)
            self._end_task = asyncio.ensure_future(self._end())
        return self._end_task

    async def _end(self) -> None:
        try:
            if self.runner is not None:
                await self.runner.close()
            current = asyncio.current_task()
            tasks = [t for t in list(self._tasks) if t is not current]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.out_track.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.pc.close(), 5.0)
        finally:
            self.endpoint.calls.pop(self.id, None)


class WebRTCEndpoint:
    def __init__(self, pipeline, settings: ServerSettings, realtime=None,
                 secrets_store: ClientSecretStore | None = None) -> None:
        self.pipeline = pipeline
        self.settings = settings
        self.realtime = realtime  # the WebSocket endpoint: sessions count together
        self.secrets = secrets_store or ClientSecretStore(
            default_ttl_s=getattr(settings, "client_secret_ttl_s", 60.0))
        self.ice_hosts = parse_hosts(settings.ice_hosts)  # ValueError: not IP literals
        self.calls: dict[str, Call] = {}
        self._pending = 0

    # ----------------------------------------------------------------- auth
    def _check_origin(self, request: Request) -> JSONResponse | None:
        if not origin_allowed(request.headers.get("origin"), request.headers.get("host"),
                              self.settings):
            return _error(403, "origin_not_allowed", "This Origin may not use the server.")
        return None

    def _auth(self, request: Request, allow_secret: bool):
        """-> (ok, client_secret or None, error response)."""
        key = _bearer(request.headers)
        if allow_secret and is_client_secret(key):
            sec = self.secrets.consume(key)
            if sec is None:
                return False, None, _error(401, "invalid_client_secret",
                                           "The client secret is unknown, expired or already "
                                           "used.", headers={"WWW-Authenticate": "Bearer"})
            return True, sec, None
        if not self.settings.auth_required or _key_ok(key, self.settings.api_keys):
            return True, None, None
        return False, None, _error(401, "invalid_api_key", "Missing or incorrect API key. Send "
                                   "'Authorization: Bearer KEY' (or a client secret ek_...).",
                                   headers={"WWW-Authenticate": "Bearer"})

    def _live_sessions(self) -> int:
        """Sessions of every transport (the per-pipeline registry) + handshakes in flight."""
        from .sessions import registry_for
        n = max(len(registry_for(self.pipeline)), len(self.calls)) + self._pending
        if self.realtime is not None:
            n += getattr(self.realtime, "_pending", 0)
        return n

    # --------------------------------------------------------- client secret
    async def client_secrets(self, request: Request) -> Response:
        bad = self._check_origin(request)
        if bad is not None:
            return bad
        ok, _, err = self._auth(request, allow_secret=False)
        if not ok:
            return err
        body: Any = {}
        raw = await request.body()
        if raw.strip():
            try:
                body = json.loads(raw)
            except ValueError:
                return _error(400, "invalid_json", "The body must be JSON.")
        if not isinstance(body, dict):
            return _error(400, "invalid_type", "The body must be a JSON object.")
        ttl = None
        ea = body.get("expires_after")
        if ea is not None:
            if not isinstance(ea, dict) or not isinstance(ea.get("seconds"), (int, float)) \
                    or isinstance(ea.get("seconds"), bool):
                return _error(400, "invalid_value", "expires_after must be {\"anchor\": "
                              "\"created_at\", \"seconds\": N}.", param="expires_after")
            ttl = float(ea["seconds"])
        sess = body.get("session") or {}
        try:
            config = self._base_config(None)
            if sess:
                apply_session_update(config, sess, self.settings.limits)
        except ClientError as exc:
            return _error(400, exc.code or "invalid_value", exc.message,
                          param=exc.param and f"session.{exc.param}".replace("session.session",
                                                                             "session"))
        session_id = "sess_" + secrets.token_hex(10)
        try:
            sec = self.secrets.mint(dict(sess, _session_id=session_id), ttl)
        except OverflowError:
            return _error(503, "server_busy", "Too many live client secrets.",
                          type_="server_error")
        effective = apply_session_update(config, sess, self.settings.limits) if sess else config
        wire = session_to_wire(effective, session_id, sec.expires_at)
        return JSONResponse({"value": sec.value, "expires_at": sec.expires_at,
                             "session": wire})

    def _base_config(self, model: str | None) -> SessionSettings:
        s = self.settings
        return SessionSettings(model=(model or s.model)[:256], instructions=s.instructions,
                               voice=s.voice, max_output_tokens=s.max_output_tokens)

    # ---------------------------------------------------------------- calls
    async def create_call(self, request: Request) -> Response:
        bad = self._check_origin(request)
        if bad is not None:
            return bad
        ctype = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
        if ctype.startswith("multipart/"):
            return _error(415, "unsupported_content_type", "Send the SDP offer as the body "
                          "with Content-Type: application/sdp.")
        if not is_client_secret(_bearer(request.headers)):
            ok, _, err = self._auth(request, allow_secret=False)
            if not ok:
                return err
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > MAX_SDP_BYTES:
                return _error(413, "sdp_too_large",
                              f"The SDP offer is larger than {MAX_SDP_BYTES} bytes.")
        try:
            sdp = raw.decode("utf-8")
        except UnicodeDecodeError:
            return _error(400, "invalid_offer", "The SDP offer is not UTF-8 text.")
        if not sdp.lstrip().startswith("v=0"):
            return _error(400, "invalid_offer", "The body is not an SDP offer (it must start "
                          "with 'v=0').")
        # a client secret is burnt only by a plausible offer
        ok, secret, err = self._auth(request, allow_secret=True)
        if not ok:
            return err
        if self._live_sessions() >= self.settings.max_sessions:
            return _error(503, "server_busy", f"Too many sessions ({self.settings.max_sessions})"
                          "; try again later.", type_="server_error",
                          headers={"Retry-After": "5"})
        self._pending += 1
        try:
            return await self._answer(request, sdp, secret)
        finally:
            self._pending -= 1

    async def _answer(self, request: Request, sdp: str, secret) -> Response:
        from aiortc import RTCPeerConnection, RTCSessionDescription

        s = self.settings
        sess_cfg = dict(secret.session) if secret is not None else {}
        session_id = sess_cfg.pop("_session_id", None) or "sess_" + secrets.token_hex(10)
        config = self._base_config(request.query_params.get("model"))
        if sess_cfg:
            try:
                config = apply_session_update(config, sess_cfg, s.limits)
            except ClientError as exc:  # validated at mint time; the limits may have changed
                return _error(400, exc.code or "invalid_value", exc.message, param=exc.param)
        session = Session(session_id, config, audio_out_mode="stream", limits=s.limits)
        call_id = "rtc_" + secrets.token_hex(12)
        pc = RTCPeerConnection(rtc_configuration(s.ice_servers))
        call = Call(self, call_id, pc, session)
        pc.on("datachannel", call.attach_channel)
        pc.on("track", call.attach_track)
        pc.on("connectionstatechange", call.on_state)
        try:
            try:
                await pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
            except Exception as exc:  # noqa: BLE001 - aiortc raises many kinds on bad SDP
                raise _BadOffer(f"The SDP offer could not be parsed or applied: {exc}") from None
            audio = [t for t in pc.getTransceivers() if t.kind == "audio"]
            if not audio and pc.sctp is None:
                raise _BadOffer("The offer has neither an audio section nor a data channel.")
            if pc.sctp is not None:
                guard_text_decoding(pc.sctp)
            if audio:
                low_latency_audio_receiver(audio[0].receiver)
                pc.addTrack(call.out_track)  # reuses the offer's audio transceiver
            try:
                answer = await pc.createAnswer()
                with offered_hosts(self.ice_hosts):
                    await pc.setLocalDescription(answer)
            except Exception as exc:  # noqa: BLE001
                raise _BadOffer(f"The offer cannot be answered: {exc}") from None
        except _BadOffer as exc:
            with contextlib.suppress(Exception):
                await pc.close()
            return _error(400, "invalid_offer", str(exc)[:500])
        except BaseException:
            with contextlib.suppress(Exception):
                await pc.close()
            raise

        runner = SessionRunner(session, self.pipeline, call.send_event,
                               send_audio=call.send_audio, flush_audio=call.flush_audio,
                               on_close=call.on_close, options=RunnerOptions.from_settings(s),
                               transport="webrtc")
        call.runner = runner
        self.calls[call_id] = call
        await runner.start()
        call.spawn(call.watch_connect(), "connect-watch")
        call.spawn(self._watch_runner(call), "runner-watch")
        if pc.connectionState in ("failed", "closed"):
            call.end(f"peer connection {pc.connectionState}")
        return Response(pc.localDescription.sdp, status_code=201, media_type="application/sdp",
                        headers={"Location": f"/v1/realtime/calls/{call_id}"})

    async def _watch_runner(self, call: Call) -> None:
        await call.runner.wait_closed()
        call.end("session ended")

    async def delete_call(self, request: Request) -> Response:
        bad = self._check_origin(request)
        if bad is not None:
            return bad
        call = self.calls.get(request.path_params["call_id"])
        if call is None:
            return _error(404, "call_not_found", "No such call.")
        # hanging up needs the key, or nothing when keys are off; the call id
        # itself (unguessable, known only to the caller) also suffices, so a
        # browser that used a one-time secret can hang up its own call.
        await asyncio.shield(call.end("hung up"))
        return Response(status_code=204)

    async def close_all(self) -> None:
        await asyncio.gather(*(c.end("server shutdown") for c in list(self.calls.values())),
                             return_exceptions=True)


class _BadOffer(Exception):
    pass


def webrtc_routes(pipeline, settings: ServerSettings, realtime=None,
                  secrets_store: ClientSecretStore | None = None) \
        -> tuple[list[Route], WebRTCEndpoint]:
    ep = WebRTCEndpoint(pipeline, settings, realtime, secrets_store)
    routes = [
        Route("/v1/realtime/calls", ep.create_call, methods=["POST"]),
        Route("/v1/realtime/calls/{call_id}", ep.delete_call, methods=["DELETE"]),
        Route("/v1/realtime/calls/{call_id}/hangup", ep.delete_call, methods=["POST"]),
        Route("/v1/realtime/client_secrets", ep.client_secrets, methods=["POST"]),
    ]
    return routes, ep


__all__ = ["WebRTCEndpoint", "Call", "webrtc_routes", "EVENTS_LABEL"]
