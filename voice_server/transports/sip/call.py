"""One answered SIP call <-> one session: the thin I/O side of a SIP call.

The call owns its dialog (aiosipua's), its RTP (:class:`CallMedia`) and its
:class:`SessionRunner`; the session core is used unchanged
(``audio_out_mode="stream"``, as the phone bridges):

* caller audio -> ``runner.input_audio``; keys -> ``runner.key_pressed``;
* ``AudioOut`` -> the playout; each frame sent is heard, and the played
  position goes to ``runner.playback_progress``;
* ``FlushAudio`` (barge-in) / ``RewindAudio`` (pause) drop the queued frames
  at once, so the next 20 ms tick already carries silence;
* a re-INVITE that holds us (``sendonly`` / ``inactive``) stops our RTP and
  pauses the reply (``runner.pause_output``); caller audio is not listened
  to; the RTP timeout does not count; the resume goes on where it stopped;
* BYE from the caller, our BYE (:meth:`hang_up`), an RTP timeout, or the
  session closing itself (idle hang-up, ``max_session_s``) end the call,
  and :meth:`run` leaves nothing behind (runner, tasks, RTP port).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import secrets
import time
from enum import Enum
from typing import Any, Callable, Optional, Protocol

import numpy as np
from aiosipua import IncomingCall as DialogCall
from aiosipua import SipRequest, SipResponse
from aiosipua.sdp import SdpMessage

from ...call_control import TransferOutcome
from ...runner import RunnerOptions, SessionRunner
from ...session import Session
from ..access import AdmissionTicket
from .control import SipCallControl
from .incoming import Accept, IncomingCall
from .media import MediaEvents
from .payload import PayloadFormat
from .playout import Heard
from .ports import PortPool
from .rtp import Dropped
from .sdp import MediaPlan, answer_sdp
from .settings import SipSettings

log = logging.getLogger("voice_server.transports.sip")

REFER_ANSWER_S = 32.0  # Timer F: the REFER's final response
TRANSFER_OUTCOME_S = 60.0  # the NOTIFY that says how the transfer ended
WATCH_EVERY_S = 1.0
# SessionRunner takes the call's actions once it has a call_control parameter
_RUNNER_TAKES_CONTROL = "call_control" in inspect.signature(SessionRunner.__init__).parameters


class CallMedia(Protocol):
    """A call's RTP as the call drives it: :class:`.media.RtpMedia` in this
    process, or :class:`.media_remote.RemoteMedia` for one in the RTP process."""
    last_rx: float  # when the caller's RTP last came (the RTP timeout reads it)
    sending: bool  # False while the caller holds us
    stats: dict

    async def bind(self, host: str, port: int) -> None: ...
    def start(self) -> None: ...
    async def close(self) -> None: ...
    def renegotiate(self, fmt: PayloadFormat, dtmf_pt: Optional[int],
                    remote: tuple[str, int]) -> None: ...
    def send_digits(self, digits: str) -> None: ...
    def play(self, response_id: str, item_id: str, pcm: np.ndarray, rate: int) -> None: ...
    def finish(self, response_id: str) -> None: ...
    def flush(self, item_id: str) -> None: ...
    def rewind(self, item_id: str, played_ms: float) -> None: ...
    def hold_item(self, item_id: str, paused: bool) -> None: ...
    def line_held(self, held: bool) -> None: ...
    @property
    def alive(self) -> bool: ...


class CallHost(Protocol):
    """What a call needs of its endpoint (:class:`.endpoint.SipEndpoint`)."""
    pipeline: Any
    settings: Any  # ServerSettings
    sip: SipSettings
    ports: PortPool
    bad_log: Callable[..., None]

    def new_media(self, fmt: PayloadFormat, dtmf_pt: Optional[int], remote: tuple[str, int],
                  events: MediaEvents) -> CallMedia: ...
    async def bind_rtp(self, media: CallMedia) -> int: ...
    def sdp_message(self, text: str) -> SdpMessage: ...
    def in_dialog_request(self, call: "SipCall", method: str) -> SipRequest: ...
    def send(self, call: "SipCall", request: SipRequest) -> None: ...
    def forget(self, call: "SipCall") -> None: ...


class CallState(Enum):
    ANSWERING = "answering"
    ACTIVE = "active"
    ENDED = "ended"


class SipCall:
    """One answered call (module docstring)."""

    def __init__(self, endpoint: CallHost, dialog: DialogCall, info: IncomingCall,
                 ticket: AdmissionTicket) -> None:
        self.ep = endpoint
        self.dialog = dialog  # aiosipua's dialog and INVITE transaction
        self.info = info  # what the incoming hook saw: ids, URIs, headers
        self.ticket = ticket  # our place among max_sessions until the runner registers
        self.settings = endpoint.settings  # read once: a call keeps the settings it met
        self.state = CallState.ANSWERING
        self.plan: Optional[MediaPlan] = None  # the current offer/answer
        self.media: Optional[CallMedia] = None
        self.port: Optional[int] = None  # our RTP port (from the endpoint's pool)
        self.session: Optional[Session] = None
        self.runner: Optional[SessionRunner] = None
        self.control = SipCallControl(self)
        self.held = False  # the caller holds us: they neither hear nor talk to the agent
        self.end_reason = ""  # why the call ended (logs, the test's view)
        self.ended = asyncio.Event()
        self.sdp_version = 0  # o= version of our answers
        self.keys_pressed: list[str] = []  # the caller's keys, in order (last 256)
        self.dropped = 0  # RTP datagrams ignored
        self.answering_machine: Optional[bool] = None  # a call we place may ask (None: settings)
        self._sdp_session = secrets.randbits(31)
        self._refer: Optional[asyncio.Future] = None  # our REFER's final response
        self._transfer: Optional[asyncio.Future] = None  # the NOTIFY's final sipfrag status
        self._refer_cseq: Optional[int] = None

    # ------------------------------------------------------------ ids
    @property
    def call_id(self) -> str:
        return self.info.call_id

    @property
    def sip_call_id(self) -> str:
        return self.info.sip_call_id

    @property
    def headers(self) -> list[dict]:
        """The INVITE's headers, in order: ``{"name", "value"}``."""
        return [dict(h) for h in self.info.headers]

    @property
    def call_control(self) -> SipCallControl:
        return self.control

    @property
    def finished(self) -> bool:
        return self.state is CallState.ENDED

    # ------------------------------------------------------------ answer
    async def answer(self, plan: MediaPlan, decision: Accept) -> None:
        """Bind RTP, start the session, send 200 OK with our SDP and start the clock.
        Raises :class:`~.ports.PortsExhausted` (the endpoint answers 503)."""
        await self.bind_media(plan)
        await self._go_live(plan, decision, send_answer=True)

    async def bind_media(self, plan: MediaPlan) -> int:
        """Our RTP socket for ``plan`` (a call we place binds it before its
        offer, with a provisional plan the callee's answer then replaces)."""
        self.plan = plan
        self.media = self.ep.new_media(plan.format, plan.dtmf_pt, plan.remote, MediaEvents(
            on_audio=self._audio, on_key=self._key, on_heard=self._heard,
            on_dropped=self._dropped))
        self.port = await self.ep.bind_rtp(self.media)
        return self.port

    async def connected(self, plan: MediaPlan, decision: Accept) -> None:
        """A call we placed was answered with ``plan``: the session starts (no SDP to send)."""
        assert self.media is not None
        self.media.renegotiate(plan.format, plan.dtmf_pt, plan.remote)
        self.plan = plan
        await self._go_live(plan, decision, send_answer=False)

    async def _go_live(self, plan: MediaPlan, decision: Accept, send_answer: bool) -> None:
        self._start_session()
        await self.runner.start()
        self.ticket.release()  # the registered runner counts itself now
        if send_answer:
            self.dialog.accept(self.ep.sdp_message(answer_sdp(
                plan, self.ep.sip.advertised_host, self.port, self._sdp_session, 0)))
        self.state = CallState.ACTIVE
        self._apply_hold(plan.held)
        self.media.start()
        if decision.session:
            self.runner.client_event({"type": "session.update",
                                      "session": {"type": "realtime", **decision.session}})
        log.info("sip %s: %s (%s, %s, rtp %s -> %s:%s, session %s)", self.call_id,
                 "answered" if send_answer else "connected", self.sip_call_id,
                 plan.format.name, self.port, *plan.remote, self.session.session_id)

    def _start_session(self) -> None:
        s = self.settings
        self.session = Session("sess_" + secrets.token_hex(10), s.phone_session_defaults(),
                               audio_out_mode="stream", limits=s.limits,
                               output_lead_ms=s.output_lead_ms, interruptions=s.interruptions,
                               extension_events=False,  # no channel for events
                               hang_up_after=s.phone_idle_hang_up_after or None,
                               answering_machine=s.phone_answering_machine
                               if self.answering_machine is None else self.answering_machine,
                               clear_on_pause=s.phone_clear_on_pause)
        extra = {"call_control": self.control} if _RUNNER_TAKES_CONTROL else {}
        self.runner = SessionRunner(self.session, self.ep.pipeline, self._event,
                                    send_audio=self._send_audio, flush_audio=self._flush_audio,
                                    rewind_audio=self._rewind_audio,
                                    pause_audio=self._pause_audio,
                                    resume_audio=self._resume_audio,
                                    on_close=self._runner_closed,
                                    options=RunnerOptions.from_settings(s), transport="sip",
                                    **extra)

    # ------------------------------------------------------------ re-INVITE
    def reoffer(self, plan: MediaPlan, dialog: Optional[DialogCall] = None) -> None:
        """A re-INVITE's offer was read: answer it 200 with the mirrored
        direction, move or hold the stream."""
        assert self.media is not None
        if plan.format != self.plan.format or plan.dtmf_pt != self.plan.dtmf_pt or \
                plan.remote != self.plan.remote:
            self.media.renegotiate(plan.format, plan.dtmf_pt, plan.remote)
        self.plan = plan
        self.sdp_version += 1
        (dialog or self.dialog).accept(self.ep.sdp_message(answer_sdp(
            plan, self.ep.sip.advertised_host, self.port, self._sdp_session, self.sdp_version)))
        self._apply_hold(plan.held)

    def _apply_hold(self, held: bool) -> None:
        if held == self.held:
            return
        self.held = held
        log.info("sip %s: %s", self.call_id, "held by the caller" if held else "resumed")
        self.media.line_held(held)
        if self.runner is not None:
            self.runner.call_held(held)

    # ------------------------------------------------------------ media in
    def _audio(self, pcm: np.ndarray, rate: int) -> None:
        if self.runner is not None and not self.held:
            self.runner.input_audio(pcm, rate)

    def _key(self, key: str) -> None:
        log.info("sip %s: key %s pressed", self.call_id, key)
        self.keys_pressed = (self.keys_pressed + [key])[-256:]
        if self.runner is not None and not self.held:
            self.runner.key_pressed(key)

    def _heard(self, heard: Heard) -> None:
        if self.runner is not None:
            self.runner.playback_progress(heard.item_id, heard.ms)

    def _dropped(self, d: Dropped) -> None:
        self.dropped += 1
        self.ep.bad_log("sip %s: RTP ignored (%s)", self.call_id, d.why)

    # ------------------------------------------------------------ the runner's side
    async def _event(self, event: dict) -> None:
        if event.get("type") == "error":
            self.ep.bad_log("sip %s: session error %s", self.call_id,
                            (event.get("error") or {}).get("code"))
        elif event.get("type") == "response.done":
            r = event.get("response") or {}
            if r.get("status") == "failed":
                log.warning("sip %s: response %s failed: %s", self.call_id, r.get("id"),
                            (r.get("status_details") or {}).get("error"))
            if r.get("status") != "cancelled":
                self.media.finish(r.get("id", ""))

    async def _send_audio(self, response_id: str, item_id: str, pcm: np.ndarray,
                          rate: int) -> None:
        self.media.play(response_id, item_id, pcm, rate)

    async def _flush_audio(self, item_id: str) -> None:
        self.media.flush(item_id)

    async def _rewind_audio(self, item_id: str, played_ms: float) -> None:
        self.media.rewind(item_id, played_ms)

    async def _pause_audio(self, item_id: str) -> None:
        self.media.hold_item(item_id, True)

    async def _resume_audio(self, item_id: str) -> None:
        self.media.hold_item(item_id, False)

    async def _runner_closed(self, code: int, reason: str) -> None:
        self.hang_up(f"session closed: {reason or code}")

    # ------------------------------------------------------------ actions
    def hang_up(self, reason: str) -> None:
        """Our BYE; the call ends."""
        if self.state is CallState.ACTIVE:
            with contextlib.suppress(Exception):  # a TCP peer already gone
                self.dialog.hangup()
        self.end(reason)

    def end(self, reason: str) -> None:
        """The call is over (BYE either way, timeout, shutdown): :meth:`run` cleans up."""
        if not self.end_reason:
            self.end_reason = reason
        self.state = CallState.ENDED
        for fut in (self._refer, self._transfer):
            if fut is not None and not fut.done():
                fut.set_result(None)
        self.ended.set()

    def send_digits(self, digits: str) -> bool:
        if self.media is None or self.finished or self.plan.dtmf_pt is None:
            return False
        self.media.send_digits(digits)
        return True

    async def refer(self, target: str) -> TransferOutcome:
        """REFER the caller to ``target`` and wait for the NOTIFY that ends it."""
        if self.state is not CallState.ACTIVE or self._transfer is not None:
            return TransferOutcome("failed", None, "no active call, or a transfer in progress")
        loop = asyncio.get_running_loop()
        self._refer, self._transfer = loop.create_future(), loop.create_future()
        try:
            req = self.ep.in_dialog_request(self, "REFER")
            req.headers.set_single("Refer-To", f"<{target}>")
            req.headers.set_single("Referred-By", f"<{self.dialog.dialog.local_uri}>")
            self._refer_cseq = int(req.cseq.seq) if req.cseq is not None else None
            self.ep.send(self, req)
            answer = await asyncio.wait_for(self._refer, REFER_ANSWER_S)
            if answer is None:
                return TransferOutcome("failed", None, "the call ended")
            if answer >= 300:
                return TransferOutcome("failed", answer, "REFER refused")
            final = await asyncio.wait_for(self._transfer, TRANSFER_OUTCOME_S)
            if final is None:
                return TransferOutcome("failed", None, "the call ended")
            if 200 <= final < 300:
                self.hang_up("transferred")  # the caller is the target's now
                return TransferOutcome("completed", final)
            return TransferOutcome("failed", final)
        except asyncio.TimeoutError:
            return TransferOutcome("failed", None, "no answer to the transfer")
        finally:
            self._refer = self._transfer = None

    def on_response(self, resp: SipResponse) -> None:
        """A response to one of our in-dialog requests (REFER, BYE)."""
        cseq = resp.cseq
        if cseq is None or resp.status_code < 200:
            return
        if cseq.method.upper() == "REFER" and self._refer is not None and \
                not self._refer.done() and cseq.seq == self._refer_cseq:
            self._refer.set_result(resp.status_code)

    def on_transfer_progress(self, status: int) -> None:
        """A NOTIFY's sipfrag status for our REFER."""
        if status >= 200 and self._transfer is not None and not self._transfer.done():
            self._transfer.set_result(status)

    # ------------------------------------------------------------ life
    async def run(self) -> None:
        """From the 200 OK until the call ends; leaves nothing behind."""
        watch = asyncio.ensure_future(self._watch())
        try:
            await self.ended.wait()
        finally:
            watch.cancel()
            with contextlib.suppress(BaseException):
                await watch
            await self.close()

    async def close(self) -> None:
        self.state = CallState.ENDED
        self.ended.set()
        try:
            if self.runner is not None:
                await self.runner.close()
        finally:
            self.ticket.release()
            if self.media is not None:
                await self.media.close()
            if self.port is not None:
                self.ep.ports.give_back(self.port)
                self.port = None
            self.ep.forget(self)
            log.info("sip %s: ended (%s) %s", self.call_id, self.end_reason,
                     self.media.stats if self.media else {})

    async def _watch(self) -> None:
        """The RTP timeout (never while held) and a session that closed itself."""
        timeout = self.settings.sip.rtp_timeout_s
        while not self.ended.is_set():
            await asyncio.sleep(min(WATCH_EVERY_S, timeout / 4))
            if self.runner is not None and self.runner.closed:
                self.hang_up("session closed")
            elif not self.media.alive:
                log.warning("sip %s: the RTP process ended, hanging up", self.call_id)
                self.hang_up("media_lost")
            elif not self.held and time.monotonic() - self.media.last_rx > timeout:
                log.warning("sip %s: no RTP for %.0f s, hanging up", self.call_id, timeout)
                self.hang_up("rtp_timeout")


__all__ = ["SipCall", "CallState"]
