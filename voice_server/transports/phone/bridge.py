"""The phone bridge: one WebSocket call from a phone provider <-> one session.

One :class:`PhoneEndpoint` per provider (``/v1/telephony/<provider>``), all
with the same access rules, and one :class:`PhoneCall` per stream.  The call
is the thin I/O side: it reads the socket, hands each message to the
provider's codec (:mod:`.codec`), acts on what the codec says it was, and
sends what the playout (:mod:`.playout`) queued.  The session core
(``audio_out_mode="stream"``) and :class:`SessionRunner` are used unchanged:

* inbound audio -> int16 PCM at the line's rate -> ``runner.input_audio``;
* ``AudioOut`` -> the playout (line format, provider frames, marks); a mark
  echo -> ``runner.playback_progress(item_id, ms)``, so the session knows
  what the caller heard and a barge-in truncates there;
* ``FlushAudio`` (barge-in) -> the item's queued audio is dropped and the
  provider's clear verb goes out next;
* the provider's end message or a socket close -> ``runner.close()``.

Pacing: the session releases audio in real time (100 ms slices), so the
provider holds at most ``ServerSettings.output_lead_ms`` of unplayed audio.
A pause (the caller's first speech frame over a reply) clears it
(``RewindAudio``: the provider's clear verb goes out next, the session takes
back what was not played and sends it again from there if the reply goes
on, :meth:`.Playout.rewind`), so the caller stops hearing the agent at once
rather than after the provider's lead (``phone_clear_on_pause``; off: the
provider plays out what it holds).

Phone providers have no error channel: bad input (malformed JSON, bad
base64, unknown events, missing fields, media before start, a binary frame
where the provider sends none) is logged (throttled) and ignored, and a
failed response is logged while the call goes on.  A start whose audio
format the bridge cannot carry closes the stream (1003); a message over
``ws_max_message_bytes`` gets a bare 1009 close (no Realtime ``error``:
:mod:`voice_server.third_party_patches`).

Silence and keys: a call's session gets ``phone_idle_timeout_ms`` as its idle
timeout and hangs up after ``phone_idle_hang_up_after`` unanswered check-ins
(:mod:`voice_server.session.silence`): the session closes (``idle_hangup``)
once the goodbye was heard and the bridge closes the stream (1000), which
tells the provider the stream is over (Twilio/Plivo/Exotel go on with the
call's next instruction, none: hang up; Vonage ends the leg; Telnyx stops
streaming).  DTMF keys go to ``runner.key_pressed``
(:mod:`voice_server.session.keypad`); :meth:`PhoneCall.send_digits` plays
tones into the call (:mod:`.tones`: the provider's DTMF message, or in-band).

Call actions (:mod:`voice_server.call_control`): a call is its runner's
:class:`CallControl`.  ``end_call`` closes the stream (1000) as the idle
hang-up does; ``send_dtmf`` plays tones where the provider's stream has a
message for them (Plivo's ``sendDTMF``); no provider's media stream can
transfer a call (their transfer is a REST call with the account's
credentials, outside the stream), so ``transfer`` is never offered.  The
operator turns actions on for phone calls with ``phone_call_actions``
(``voice_agent.call_actions``'s shape).

The call's custom parameters (Twilio ``customParameters``, Telnyx/Exotel
``custom_parameters``, Plivo ``extra_headers``, Vonage endpoint headers) may
set ``instructions``, ``voice``, ``max_output_tokens``, ``voice_lock``
(true/false) and ``noise_reduction`` (near_field/far_field/off), applied as a
``session.update`` so the usual limits hold (``phone_voice_lock`` and
``phone_noise_reduction`` are the defaults of every call), and ``answering_machine=true``
(or ``phone_answering_machine``): an outbound call whose session first tells
a person from a machine (:mod:`voice_server.session.answering_machine`),
answers a person's hello, and leaves a machine the message after its beep,
then ends the call.

Access (every provider the same): a valid API key - ``Authorization: Bearer
KEY``, either half of ``Authorization: Basic`` (Exotel's
``wss://KEY:TOKEN@host`` URLs) or Telnyx's ``x-telnyx-streaming-auth-token``
- or the provider's own signature where it has one (Twilio's
``X-Twilio-Signature`` when ``twilio_auth_token`` is set).  With neither API
keys nor a provider secret configured the endpoint is open (the server then
binds loopback only).  As on every transport (:mod:`..access`) a browser
``Origin`` must pass the Origin policy, and a stream takes one of the
``max_sessions`` places from its upgrade until its call ends.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import secrets
from collections import deque
from typing import Callable, Mapping, Optional

import numpy as np
from starlette.websockets import WebSocket, WebSocketState

from ...call_control import END_CALL, SEND_DTMF, TransferOutcome
from ...runner import RunnerOptions, SessionRunner
from ...session import Session
from ...settings import ServerSettings
from ..access import (AdmissionTicket, Refusal, admit, bearer_token, busy_refusal, denial_response,
                      key_matches, origin_allowed, origin_refusal)
from ..ws_reader import read_websocket, until_first
from .codec import (Bad, CallAudio, CallEnd, CallStart, Inbound, KeyPress, Noted, Played,
                    PhoneCodec, Unsupported)
from .playout import Playout

log = logging.getLogger("voice_server.transports.phone")

PARAM_KEYS = ("instructions", "voice", "max_output_tokens")  # custom parameters -> session
_YES = ("1", "true", "yes", "on")
TELNYX_TOKEN_HEADER = "x-telnyx-streaming-auth-token"

# (headers, scope, settings) -> True/False: the provider's signature verdict, None: no opinion
SignatureCheck = Callable[[Mapping[str, str], Mapping, ServerSettings], Optional[bool]]


class ThrottledLog:
    """A warning for the first few and every 100th, debug otherwise: a flood of
    bad frames must not flood the log."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, msg: str, *args) -> None:
        self.count += 1
        n = self.count
        log.log(logging.WARNING if n <= 5 or n % 100 == 0 else logging.DEBUG,
                msg + " [%d so far]", *args, n)


def caller_keys(headers: Mapping[str, str]) -> list[str]:
    """The API key candidates a provider's upgrade request can carry (module docstring)."""
    keys = [bearer_token(headers), headers.get(TELNYX_TOKEN_HEADER)]
    auth = headers.get("authorization") or ""
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "basic":
        with contextlib.suppress(binascii.Error, ValueError):
            user, _, password = base64.b64decode(value.strip(), validate=True) \
                .decode("utf-8", "replace").partition(":")
            keys += [user, password]
    return [k for k in keys if k]


_NO = ("0", "false", "no", "off")


def session_update(params: Mapping[str, str]) -> dict:
    """The ``session`` of a ``session.update`` from a call's custom parameters.

    ``voice_lock`` (true/false) and ``noise_reduction`` (near_field, far_field
    or off) turn the listen side's features on for one number's calls; a value
    that is neither goes through as it was, so that the session refuses it by
    name (the call's log shows the error; the other fields apply)."""
    out: dict = {}
    lock = params.get("voice_lock")
    if lock is not None:
        v = lock.strip().lower()
        out["voice_agent"] = {"voice_lock": True if v in _YES else False if v in _NO else lock}
    noise = params.get("noise_reduction")
    if noise is not None:
        v = noise.strip().lower()
        out["audio"] = {"input": {"noise_reduction": None if v in _NO + ("none", "null", "")
                                  else {"type": v}}}
    for k in PARAM_KEYS:
        v = params.get(k)
        if v is None:
            continue
        if k == "max_output_tokens":
            sv = v.strip()
            out[k] = int(sv) if sv.isdigit() else sv
        else:
            out[k] = v
    return out


class PhoneCall:
    """One provider stream: its socket <-> a SessionRunner (module docstring)."""

    def __init__(self, ws: WebSocket, endpoint: "PhoneEndpoint",
                 ticket: AdmissionTicket) -> None:
        self.ws = ws
        self.ep = endpoint
        self.ticket = ticket  # our place among max_sessions until the runner registers
        self.settings = endpoint.settings  # read once: a call keeps the settings it met
        self.codec: PhoneCodec = endpoint.codec_cls()  # the provider's protocol state
        self.playout = Playout(self.codec)  # what goes out, and what was heard
        self.call_id: Optional[str] = None  # the provider's call id, from the start
        self.session: Optional[Session] = None  # made on the start message
        self.runner: Optional[SessionRunner] = None  # made on the start message
        self.ended = asyncio.Event()  # the provider ended the stream, or the socket is gone
        self.media_in = 0  # caller audio messages handed to the session
        self.keys_pressed: deque[str] = deque(maxlen=256)  # the last DTMF keys, in order
        self._bad_log = ThrottledLog()  # malformed provider messages
        self._error_log = ThrottledLog()  # session error events (nowhere to send them)
        self._out_ready = asyncio.Event()  # the playout has something to send
        self._sender: Optional[asyncio.Task] = None

    @property
    def provider(self) -> str:
        return self.codec.provider

    @property
    def stream_id(self) -> Optional[str]:
        return self.codec.stream_id

    @property
    def bad_messages(self) -> int:
        return self._bad_log.count

    @property
    def stats(self) -> dict[str, int]:
        return {"media_in": self.media_in, **self.playout.stats.as_dict()}

    def _bad(self, why: str) -> None:
        self._bad_log("%s %s: ignored message (%s)", self.provider, self.stream_id or "-", why)

    # ------------------------------------------------------------ inbound
    async def on_text(self, text: str) -> None:
        await self.handle(self.codec.parse_text(text))

    def on_binary(self, data: bytes) -> None:
        msg = self.codec.parse_binary(data)
        if isinstance(msg, CallAudio):
            self._audio(msg)
            return
        why = msg.why if isinstance(msg, Bad) else type(msg).__name__
        self._bad(why)
        if self.runner is not None:  # counted as traffic and against the rate limit
            self.runner.reject_client_frame("bad_binary_frame", f"Binary frame ignored: {why}.")

    async def handle(self, msg: Inbound) -> None:
        """Act on one parsed provider message."""
        if isinstance(msg, CallAudio):
            self._audio(msg)
        elif isinstance(msg, Played):
            self._played(msg.name)
        elif isinstance(msg, KeyPress):
            self._key(msg.digit)
        elif isinstance(msg, CallStart):
            await self._start(msg)
        elif isinstance(msg, CallEnd):
            log.info("%s %s: stream ended by the provider (%s)", self.provider,
                     self.stream_id, msg.reason)
            self.ended.set()
        elif isinstance(msg, Noted):
            log.debug("%s %s: %s", self.provider, self.stream_id or "-", msg.what)
        elif isinstance(msg, Unsupported):
            log.error("%s: unsupported audio format, closing: %s", self.provider, msg.why)
            await self._close_ws(1003, "unsupported media format")
            self.ended.set()
        else:
            self._bad(msg.why)

    def _audio(self, msg: CallAudio) -> None:
        if self.runner is None or msg.pcm.size == 0:
            return
        self.media_in += 1
        self.runner.input_audio(msg.pcm, msg.rate)

    def _played(self, name: str) -> None:
        heard, why = self.playout.played(name)
        if why:
            self._bad(why)
        elif heard is not None and self.runner is not None:
            self.runner.playback_progress(*heard)

    def _key(self, digit: str) -> None:
        log.info("%s %s: key %s pressed", self.provider, self.stream_id, digit)
        self.keys_pressed.append(digit)
        if self.runner is not None:
            self.runner.key_pressed(digit)

    async def _start(self, st: CallStart) -> None:
        s = self.settings
        self.call_id = st.call_id
        self.session = Session("sess_" + secrets.token_hex(10), s.phone_session_defaults(),
                               audio_out_mode="stream", limits=s.limits,
                               output_lead_ms=s.output_lead_ms, interruptions=s.interruptions,
                               extension_events=False,  # no channel for events
                               hang_up_after=s.phone_idle_hang_up_after or None,
                               answering_machine=s.phone_answering_machine or
                               st.params.get("answering_machine", "").lower() in _YES,
                               clear_on_pause=s.phone_clear_on_pause)
        self.runner = SessionRunner(self.session, self.ep.pipeline, self._session_event,
                                    send_audio=self._send_audio, flush_audio=self._flush_audio,
                                    rewind_audio=self._rewind_audio,
                                    on_close=self._on_runner_close,
                                    options=RunnerOptions.from_settings(s),
                                    transport=self.provider, call_control=self)
        self.ep.runners[self.session.session_id] = self.runner
        self.ep.calls[self.session.session_id] = self
        log.info("%s %s: call %s started at %s (session %s)", self.provider, self.stream_id,
                 self.call_id, st.line, self.session.session_id)
        await self.runner.start()
        self.ticket.release()  # the registered runner counts itself now
        update = session_update(st.params)
        if update:
            self.runner.client_event({"type": "session.update",
                                      "session": {"type": "realtime", **update}})

    def send_digits(self, digits: str) -> bool:
        """Play DTMF tones to the caller's line (after what is queued): the
        provider's message where it has one, else in-band; False: the call has
        not started."""
        if not self.codec.started or not self.playout.digits(digits):
            return False
        self._out_ready.set()
        return True

    # ------------------------------------------------------------ CallControl
    def actions(self) -> frozenset[str]:
        """End the call and press keys (in-band where the stream has no DTMF message)."""
        if not self.codec.started:
            return frozenset()
        return frozenset({END_CALL, SEND_DTMF})

    async def hang_up(self, reason: str) -> None:
        """Close the stream (1000): the provider hangs up or goes on with the
        call's next instruction."""
        log.info("%s %s: the agent ends the call (%s)", self.provider, self.stream_id, reason)
        self.ended.set()

    async def transfer(self, target_uri: str) -> TransferOutcome:
        return TransferOutcome("unsupported", detail=f"a {self.provider} media stream cannot "
                               "transfer a call")

    async def send_dtmf(self, digits: str) -> bool:
        return self.send_digits(digits)

    # ------------------------------------------------------------ session side
    async def _send_audio(self, response_id: str, item_id: str, pcm: np.ndarray,
                          sample_rate: int) -> None:
        if self.codec.started:
            self.playout.audio(response_id, item_id, pcm, sample_rate)
            self._out_ready.set()

    async def _flush_audio(self, item_id: str) -> None:
        if self.codec.started:
            self.playout.flush(item_id)
            self._out_ready.set()

    async def _rewind_audio(self, item_id: str, played_ms: float) -> None:
        if self.codec.started:
            self.playout.rewind(item_id, played_ms)
            self._out_ready.set()

    async def _session_event(self, ev: dict) -> None:
        """Session (Realtime) events: a phone line has no channel for them; the
        end of a response closes its audio, errors are logged."""
        t = ev.get("type")
        if t == "response.done":
            r = ev.get("response") or {}
            if r.get("status") == "failed":
                log.warning("%s %s: response %s failed: %s", self.provider, self.stream_id,
                            r.get("id"), (r.get("status_details") or {}).get("error"))
            if r.get("status") != "cancelled" and self.codec.started:
                self.playout.finish(r.get("id"))
                self._out_ready.set()
        elif t == "error":
            self._error_log("%s %s: %s", self.provider, self.stream_id, ev.get("error"))

    async def _on_runner_close(self, code: int, reason: str) -> None:
        log.info("%s %s: session closed (%s %s)", self.provider, self.stream_id, code, reason)
        self.ended.set()

    # ------------------------------------------------------------ socket
    async def _send_loop(self) -> None:
        try:
            while True:
                q = self.playout.next()
                if q is None:
                    self._out_ready.clear()
                    await self._out_ready.wait()
                    continue
                if q.message.text is not None:
                    await self.ws.send_text(q.message.text)
                else:
                    await self.ws.send_bytes(q.message.data)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the socket is gone, whatever the error
            log.info("%s %s: send failed (%r)", self.provider, self.stream_id, exc)
            self.ended.set()

    async def _close_ws(self, code: int = 1000, reason: str = "") -> None:
        if self.ws.application_state != WebSocketState.DISCONNECTED:
            with contextlib.suppress(Exception):
                await self.ws.close(code, reason[:120])

    async def run(self) -> None:
        """The call, from the accepted upgrade until its end; leaves nothing behind."""
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
                log.info("%s %s: call ended %s", self.provider, self.stream_id, self.stats)

    async def _read(self) -> None:
        await read_websocket(self.ws, self.on_text, self.on_binary, stop=self.ended.is_set,
                             label=lambda: f"{self.provider} {self.stream_id or '-'}")


class PhoneEndpoint:
    """ASGI WebSocket endpoint of one provider; ``close_all`` belongs in the
    app's shutdown."""

    def __init__(self, codec_cls: type[PhoneCodec], pipeline, settings: ServerSettings,
                 signature: SignatureCheck | None = None) -> None:
        self.codec_cls = codec_cls
        self.pipeline = pipeline
        self.settings = settings  # replaceable: each new call reads it at admission
        self.signature = signature  # the provider's own upgrade signature, if it has one
        self.runners: dict[str, SessionRunner] = {}
        self.calls: dict[str, PhoneCall] = {}

    @property
    def provider(self) -> str:
        return self.codec_cls.provider

    def _authorized(self, ws: WebSocket) -> bool:
        s = self.settings
        if s.auth_required and any(key_matches(k, s.api_keys) for k in caller_keys(ws.headers)):
            return True
        if self.signature is not None:
            verdict = self.signature(ws.headers, ws.scope, s)
            if verdict is not None:
                return verdict
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
                              s.allowed_origins):  # providers send none; a browser page might
            await self._deny(ws, origin_refusal())
            return
        if not self._authorized(ws):
            log.warning("%s: stream rejected (no valid API key or provider signature)",
                        self.provider)
            await self._deny(ws, Refusal(403, "forbidden", "No valid API key or provider signature."))
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
        await PhoneCall(ws, self, ticket).run()

    async def close_all(self) -> None:
        for c in list(self.calls.values()):
            c.ended.set()
        await asyncio.gather(*(r.close() for r in list(self.runners.values())),
                             return_exceptions=True)


__all__ = ["PhoneCall", "PhoneEndpoint", "ThrottledLog", "caller_keys", "session_update",
           "PARAM_KEYS"]
