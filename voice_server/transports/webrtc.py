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

Auth is the WebSocket's (:mod:`voice_server.transports.access`):
``Authorization: Bearer KEY`` with a configured key, or a live client secret
(the only way a browser should authenticate when keys are configured), which
is spent only when the call gets a place (a 503 leaves it usable).  Minting
requires the real key.

Media and events:

* The client's microphone track (Opus, decoded by aiortc, 48 kHz) goes to
  ``Session.input_audio`` (the session resamples it).
* One audio track back: :class:`voice_server.transports.webrtc_audio.PacedAudioTrack`,
  paced in real time (20 ms frames); the session runs with
  ``audio_out_mode="stream"``: ``AudioOut`` fills the track's queue,
  ``FlushAudio`` (barge-in, ``output_audio_buffer.clear``) empties it at once,
  ``PauseAudio`` / ``ResumeAudio`` hold its queue (silence goes out meanwhile)
  and let it go on; the session releases audio into it in real time with
  ``output_lead_ms`` ahead, so the queue stays short,
  and every frame sent reports ``playback_progress`` so truncation knows what
  was heard.  The core emits ``output_audio_buffer.started`` (first audio of
  a response), ``.cleared`` (flush) and ``.stopped`` (everything played).
* The data channel the client opens, ``oai-events``, carries the WebSocket's
  JSON events both ways (client events in; server events, errors included,
  out).  A message above ``ServerSettings.datachannel_max_message_bytes`` or
  binary data that is not UTF-8 gets an ``error`` (``message_too_large``,
  ``invalid_json``) through the session core (rate limited like events) and
  the call goes on; so does a text message that is not valid UTF-8
  (:func:`voice_server.third_party_patches.guard_text_decoding`: aiortc would
  otherwise end the call).
  Server events produced before the channel opens are held (bounded) and
  sent when it opens, so ``session.created`` is always the first.
* A peer connection that fails or closes, a DELETE, or a session ``Close``
  (expired, slow client) ends the call: the runner aborts every request.

ICE: ``ServerSettings.ice_servers`` (default none - aiortc's public STUN
default is never used) and ``ice_hosts`` (env ``VOICE_AGENT_ICE_HOSTS``): the
exact host addresses to offer, e.g. ``127.0.0.1`` on a loopback-only host
(see :mod:`voice_server.transports.webrtc_ice`).  The answer carries all candidates
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

from ..runner import RunnerOptions, SessionRunner
from ..session import Session
from ..session.config import apply_session_update, session_to_wire
from ..session.errors import ClientError
from ..settings import ServerSettings
from ..third_party_patches import guard_text_decoding, low_latency_audio_receiver, offered_hosts
from .access import (KEY_HELP, Admitted, Refusal, admit_session, bearer_token, denial_response,
                     key_matches, origin_allowed, origin_refusal)
from .client_secrets import ClientSecretStore, is_client_secret
from .webrtc_audio import PacedAudioTrack, frame_to_mono
from .webrtc_ice import parse_hosts, rtc_configuration

log = logging.getLogger("voice_server.transports.webrtc")

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

    async def pause_audio(self, item_id: str) -> None:
        self.out_track.pause(item_id)

    async def resume_audio(self, item_id: str) -> None:
        self.out_track.resume(item_id)

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
    def __init__(self, pipeline, settings: ServerSettings,
                 secrets_store: ClientSecretStore) -> None:
        self.pipeline = pipeline
        self.settings = settings
        self.secrets = secrets_store  # shared with the WebSocket (app.state.client_secrets)
        self.ice_hosts = parse_hosts(settings.ice_hosts)  # ValueError: not IP literals
        self.calls: dict[str, Call] = {}

    # ----------------------------------------------------------------- auth
    def _check_origin(self, request: Request) -> JSONResponse | None:
        if not origin_allowed(request.headers.get("origin"), request.headers.get("host"),
                              self.settings.allowed_origins):
            return denial_response(origin_refusal())
        return None

    def _key_error(self, request: Request) -> JSONResponse | None:
        """The real key (no client secret): None when it is good or none is needed."""
        s = self.settings
        if not s.auth_required or key_matches(bearer_token(request.headers), s.api_keys):
            return None
        return _error(401, "invalid_api_key", KEY_HELP, headers={"WWW-Authenticate": "Bearer"})

    # --------------------------------------------------------- client secret
    async def client_secrets(self, request: Request) -> Response:
        bad = self._check_origin(request)
        if bad is not None:
            return bad
        err = self._key_error(request)
        if err is not None:
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
            config = self.settings.session_defaults()
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

    # ---------------------------------------------------------------- calls
    async def create_call(self, request: Request) -> Response:
        bad = self._check_origin(request)
        if bad is not None:
            return bad
        ctype = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
        if ctype.startswith("multipart/"):
            return _error(415, "unsupported_content_type", "Send the SDP offer as the body "
                          "with Content-Type: application/sdp.")
        if not is_client_secret(bearer_token(request.headers)):
            err = self._key_error(request)  # a bad key is a 401 whatever the body
            if err is not None:
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
        # a client secret is spent only by a plausible offer that got a place
        try:
            admitted = admit_session(self.pipeline, self.settings,
                                     origin=request.headers.get("origin"),
                                     host=request.headers.get("host"),
                                     key=bearer_token(request.headers), secrets=self.secrets)
        except Refusal as refusal:
            return denial_response(refusal)
        try:
            return await self._answer(request, sdp, admitted)
        finally:
            admitted.ticket.release()

    async def _answer(self, request: Request, sdp: str, admitted: Admitted) -> Response:
        from aiortc import RTCPeerConnection, RTCSessionDescription

        s = self.settings
        secret = admitted.secret
        sess_cfg = dict(secret.session) if secret is not None else {}
        session_id = sess_cfg.pop("_session_id", None) or "sess_" + secrets.token_hex(10)
        config = self.settings.session_defaults(request.query_params.get("model"))
        if sess_cfg:
            try:
                config = apply_session_update(config, sess_cfg, s.limits)
            except ClientError as exc:  # validated at mint time; the limits may have changed
                return _error(400, exc.code or "invalid_value", exc.message, param=exc.param)
        session = Session(session_id, config, audio_out_mode="stream", limits=s.limits,
                          output_lead_ms=s.output_lead_ms, interruptions=s.interruptions,
                          extension_events=s.extension_events)
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
                               pause_audio=call.pause_audio, resume_audio=call.resume_audio,
                               on_close=call.on_close, options=RunnerOptions.from_settings(s),
                               transport="webrtc")
        call.runner = runner
        self.calls[call_id] = call
        await runner.start()
        admitted.ticket.release()  # the registered runner counts itself now
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


def webrtc_routes(pipeline, settings: ServerSettings, secrets_store: ClientSecretStore) \
        -> tuple[list[Route], WebRTCEndpoint]:
    ep = WebRTCEndpoint(pipeline, settings, secrets_store)
    routes = [
        Route("/v1/realtime/calls", ep.create_call, methods=["POST"]),
        Route("/v1/realtime/calls/{call_id}", ep.delete_call, methods=["DELETE"]),
        Route("/v1/realtime/calls/{call_id}/hangup", ep.delete_call, methods=["POST"]),
        Route("/v1/realtime/client_secrets", ep.client_secrets, methods=["POST"]),
    ]
    return routes, ep


__all__ = ["WebRTCEndpoint", "Call", "webrtc_routes", "EVENTS_LABEL"]
