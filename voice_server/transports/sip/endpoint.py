"""The SIP endpoint: listeners, access, admission, the incoming-call hook,
and the routing of every request to its call.

Per INVITE, in order, each check with its own final answer (RFC 3261
section 21): 100 Trying (at once), 403 for a source outside ``allow_from``,
401 with a digest challenge where users are configured, 486 Busy Here past
``max_sessions`` (every transport's sessions count, as everywhere:
:func:`..access.admit`), 488 when no codec is shared (400 for unreadable
SDP), then 180 Ringing while the incoming hook decides (:mod:`.incoming`;
480 when it does not in ``answer_timeout_s``), then 200 OK with our SDP or
the hook's final status.  A CANCEL before the answer gets 200 and the
INVITE 487 (aiosipua) and the ringing call is dropped with its place;
one after the answer gets 200 and changes nothing.

Afterwards: a re-INVITE goes to its call (hold, resume, a moved stream; 488
when the new offer shares no codec), BYE ends it (200; 481 for a call we do
not know), NOTIFY reports a transfer, responses to our REFER and BYE go to
the call that sent them.  OPTIONS gets 200, other methods 405, requests that
miss mandatory headers 400 (aiosipua); an unreadable datagram is logged and
dropped.  Nothing a peer sends can raise out of here: aiosipua's transports
log any exception of a handler, and each handler keeps to its call.

With ``sip.tls`` a TLS listener on its own port takes calls as the TCP one
does (:class:`.listeners.TlsListener`); a call that came over it says
``transport=tls`` in our Contact and ``SIP/2.0/TLS`` in our Via, and the
calls we place to ``sips:`` or ``;transport=tls`` URIs go out over TLS.

With ``sip.register`` (``SipSettings.registration``) the endpoint also keeps itself registered with a
registrar over its UDP listener (:mod:`.registration`); the registrar's
answers go there, and the calls it routes to us arrive as any INVITE (so
its address must be in ``allow_from``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
from collections import OrderedDict
from typing import Callable, Optional

from aiosipua import IncomingCall as DialogCall
from aiosipua import (DialogState, SipMessage, SipRequest, SipResponse, SipUAC, SipUAS,
                      parse_sdp)
from aiosipua.sdp import serialize_sdp
from aiosipua.sdp import SdpMessage

from ...session_registry import registry_for
from ...settings import ServerSettings
from ..access import admit
from ..phone.bridge import ThrottledLog
from .access import DigestGuard, source_allowed
from .call import CallMedia, CallState, SipCall
from .incoming import Accept, IncomingCall, IncomingHook, Reject, accept_with_headers
from .media import MediaEvents, RtpMedia
from .media_remote import MediaProcess
from .ports import PortPool
from .registration import RegistrationKeeper
from .outbound import (KEPT, DialRequest, OutboundDialog, PlacedCall, ack_of_refusal, kept_in,
                       outcome_of, route_of, transport_of)
from .payload import FORMATS, PayloadFormat
from .sdp import OUR_DTMF_PT, BadSdp, MediaPlan, NoSharedCodec, offer_sdp, read_offer
from .listeners import ConnectionTcpTransport, DatagramListener, TlsListener
from .tls import dialing_context, listener_context

log = logging.getLogger("voice_server.transports.sip")

MAX_HEADERS_SHOWN = 64  # headers handed to the hook at most (a flood is cut there)
CONNECT_WAIT_S = 10.0  # a callee's re-INVITE that beats its call's session waits this long
INVITES_KEPT = 256  # our own INVITEs remembered, to ACK a retransmitted refusal


class SipEndpoint:
    """The SIP listeners of one server (module docstring).  ``start`` in the
    app's startup, ``close`` in its shutdown."""

    def __init__(self, pipeline, settings: ServerSettings,
                 on_incoming: IncomingHook = accept_with_headers,
                 on_ended: Optional[Callable[[str], None]] = None) -> None:
        self.pipeline = pipeline
        self.settings = settings  # each call reads it at its INVITE
        self.on_incoming = on_incoming  # the operator's decision (module .incoming)
        self.on_ended = on_ended  # told each answered call's id once it is over
        self.sip = settings.sip
        self.ports = PortPool(*self.sip.rtp_ports)
        self.digest = DigestGuard(self.sip.users, self.sip.realm)
        self.calls: dict[str, SipCall] = {}  # our call id -> answered call
        self.by_sip_id: dict[str, SipCall] = {}  # SIP Call-ID -> answered call
        self.ringing: dict[str, asyncio.Task] = {}  # SIP Call-ID -> the INVITE being decided
        self.bad_log = ThrottledLog()
        self.uas: dict[str, SipUAS] = {}  # transport name -> its UAS
        self.registration: Optional[RegistrationKeeper] = None  # sip.register (UDP)
        self.uac: Optional[SipUAC] = None  # our own requests on the UDP listener (dial, REGISTER)
        self.tls: Optional[TlsListener] = None  # sip.tls: its listener (its UAS: uas["tls"])
        self.placed: dict[str, PlacedCall] = {}  # calls we placed, newest last (KEPT at most)
        self.dialing: dict[str, asyncio.Task] = {}  # placed call id -> its task, until it ends
        # our INVITEs by SIP Call-ID (the last INVITES_KEPT): a refusal's ACK is built from one
        self.invites: OrderedDict[str, SipRequest] = OrderedDict()
        # SIP Call-ID -> set once a call we placed is connected (or failed): a re-INVITE
        # the callee sends on our ACK can arrive before the answer's session is up
        self.connecting: dict[str, asyncio.Event] = {}
        self._tasks: set[asyncio.Task] = set()
        # the calls' RTP and send clocks in a process of their own (media_process.py)
        self.media_process = MediaProcess() if self.sip.media_process else None
        self.closing = False  # close() has begun: a placed call still ringing is cancelled

    # ------------------------------------------------------------ life
    async def start(self) -> None:
        """Bind the listeners (OSError: the port is taken; TlsFileError: a
        ``sip.tls`` file cannot be used)."""
        addr = (self.sip.host, self.sip.port)
        listeners = [(name, self.sip.port) for name in self.sip.transports]
        if self.sip.tls is not None:  # the files are read before anything binds
            tls = self.sip.tls
            self.tls = TlsListener(local_addr=(self.sip.host, tls.port),
                                   listen_context=listener_context(tls),
                                   dial_context=dialing_context(tls),
                                   handshake_timeout_s=tls.handshake_timeout_s)
            listeners.append(("tls", tls.port))
        for name, port in listeners:
            tr = self._listener(name, port)
            uas = SipUAS(tr, user_agent=self.sip.user_agent,
                         advertised_addr=(self.sip.advertised_host, port))
            uas.on_invite = lambda call, n=name: self._spawn(self._ring(call, n))
            uas.on_reinvite = self._reinvite
            uas.on_bye = self._bye
            uas.on_cancel = self._cancel
            uas.on_ack_timeout = lambda call: self._ended(call.call_id, "no ACK")
            uas.on_transfer_progress = self._transfer_progress
            tr.on_message = lambda msg, src, u=uas: self._message(u, msg, src)
            await tr.start()  # what SipUAS.start does, with our router in front
            self.uas[name] = uas
            if name in ("udp", "tls"):   # the transports we dial on
                # uas.uac: in-dialog requests (BYE, re-INVITE) on the calls we place
                # there, and the answers to our requests (_message)
                uas.uac = SipUAC(tr, advertised_addr=(self.sip.advertised_host, port))
        if self.sip.transports:
            log.info("SIP listening on %s:%s (%s)", *addr, "/".join(self.sip.transports))
        if self.tls is not None:
            log.info("SIP over TLS listening on %s:%s", self.sip.host, self.sip.tls.port)
        if self.media_process is not None:
            await self.media_process.ensure_started()  # not on the first call's answer
        if "udp" in self.uas:
            self.uac = self.uas["udp"].uac
        if self.sip.registration is not None:
            if self.uac is None:
                raise ValueError("sip.register needs the udp transport")
            self.registration = RegistrationKeeper(self.sip.registration, self.uac,
                                                   self.sip.user_agent)
            self.registration.start()

    def _listener(self, name: str, port: int):
        addr = (self.sip.host, port)
        if name == "udp":
            return DatagramListener(local_addr=addr)
        if name == "tcp":
            return ConnectionTcpTransport(local_addr=addr)
        return self.tls

    async def close(self) -> None:
        if self.registration is not None:
            await self.registration.close()
        for call in list(self.calls.values()):
            call.hang_up("server shutting down")
        for t in list(self.ringing.values()):
            t.cancel()
        self.closing = True
        for placed_id, t in list(self.dialing.items()):   # still ringing: CANCEL, not a wait
            if placed_id not in self.calls:
                t.cancel()
        tasks = list(self._tasks)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for uas in self.uas.values():
            with contextlib.suppress(Exception):
                await uas.stop()
        if self.media_process is not None:
            await self.media_process.stop()

    def _spawn(self, coro) -> asyncio.Task:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._task_done)
        return t

    def _task_done(self, t: asyncio.Task) -> None:
        self._tasks.discard(t)
        if not t.cancelled() and t.exception() is not None:
            log.error("SIP task failed: %r", t.exception(), exc_info=t.exception())

    # ------------------------------------------------------------ routing
    def _message(self, uas: SipUAS, msg: SipMessage, src: tuple[str, int]) -> None:
        """Responses to our own requests go to their call; requests to the UAS."""
        if isinstance(msg, SipResponse):
            call = self.by_sip_id.get(msg.call_id or "")
            method = msg.cseq.method.upper() if msg.cseq is not None else ""
            if call is not None and method != "INVITE":
                call.on_response(msg)  # our REFER's or BYE's answer
            elif uas.uac is not None:  # (the UAC of the transport the answer came on)
                invite = self.invites.get(msg.call_id or "")
                if invite is not None and method == "INVITE" and msg.status_code >= 300:
                    uas.uac.transport.send(ack_of_refusal(invite, msg), src)
                uas.uac.handle_response(msg, src)  # a call we place, a REGISTER
            return
        if msg.method.upper() == "CANCEL" and self._late_cancel(uas, msg):
            return
        uas._on_message(msg, src)

    def _late_cancel(self, uas: SipUAS, cancel: SipRequest) -> bool:
        """A CANCEL of an INVITE we answered already changes nothing (RFC 3261
        section 9.2): 200 for the CANCEL, the call goes on.  aiosipua would
        forget the call's dialog, and the caller's BYE would then find none."""
        call = self.by_sip_id.get(cancel.call_id or "")
        if call is None or call.state is not CallState.ACTIVE or \
                uas._calls.get(call.sip_call_id) is not call.dialog:
            return False
        branch = cancel.via[0].branch if cancel.via else None
        invite = call.dialog.invite.via
        if not branch or not invite or invite[0].branch != branch:
            return False   # not the INVITE's transaction: aiosipua answers 481
        uas.transport.send_reply(call.dialog.dialog.create_response(cancel, 200, "OK"))
        return True

    # ------------------------------------------------------------ calls we place
    def dial(self, req: DialRequest) -> PlacedCall:
        """Place a call (:mod:`.outbound`); its progress shows on the returned record."""
        placed = PlacedCall("sipout_" + secrets.token_hex(12), req.to)
        store = registry_for(self.pipeline).records
        if store is not None:   # call records on: the attempt is kept whatever its outcome
            placed.observer = kept_in(store)
            placed.observer(placed)
        self.placed[placed.id] = placed
        for old in [k for k, p in self.placed.items() if p.finished][:max(0, len(self.placed) - KEPT)]:
            del self.placed[old]
        task = self._spawn(self._place(placed, req))
        self.dialing[placed.id] = task
        task.add_done_callback(lambda _t: self.dialing.pop(placed.id, None))
        return placed

    def hang_up_placed(self, placed: PlacedCall) -> bool:
        """End a call we placed: CANCEL while it rings, BYE once answered;
        False when it is over already."""
        if placed.finished:
            return False
        call = self.calls.get(placed.id)
        if call is not None:
            call.hang_up("hangup requested")
        elif placed.id in self.dialing:
            self.dialing[placed.id].cancel()
        return True

    async def _place(self, placed: PlacedCall, req: DialRequest) -> None:
        ticket = admit(self.pipeline, self.settings.max_sessions)
        if ticket is None:
            return placed.settle("failed", reason="max_sessions reached")
        call: Optional[SipCall] = None
        tls_peer: Optional[tuple[str, int]] = None  # the TLS connection this call holds
        try:
            transport = transport_of(req.to)
            uas = self.uas.get(transport)
            if uas is None:
                return placed.settle("failed", reason="placing calls needs the udp transport"
                                     if transport == "udp" else "dialing over TLS needs sip.tls")
            try:
                remote = route_of(req.to, self.sip.outbound_proxy_addr)
            except ValueError as exc:
                return placed.settle("failed", reason=str(exc))
            if transport == "tls":
                try:
                    await self.tls.connect(remote)
                except (OSError, asyncio.TimeoutError) as exc:   # ssl.SSLError among them
                    log.warning("sip %s: TLS to %s:%s failed: %s", placed.id, *remote, exc)
                    why = getattr(exc, "verify_message", None) or getattr(exc, "reason", None)
                    return placed.settle("failed", reason=f"TLS connection to {remote[0]}:"
                                         f"{remote[1]} failed: {why or type(exc).__name__}")
                tls_peer = remote
            uac = uas.uac
            host = self.sip.advertised_host
            port = uac.advertised_addr[1]
            info = IncomingCall(call_id=placed.id, sip_call_id="", from_uri=f"sip:{req.from_user}@{host}",
                                to_uri=req.to, source=remote, transport=transport, headers=())
            call = SipCall(self, None, info, ticket)
            call.answering_machine = req.answering_machine
            rtp_port = await call.bind_media(MediaPlan(FORMATS[self.sip.codecs[0]], OUR_DTMF_PT,
                                                       remote, "sendrecv"))
            offer = offer_sdp(self.sip.codecs, host, rtp_port, secrets.randbits(31))
            out = uac.send_invite(f"sip:{req.from_user}@{host}:{port}", req.to,
                                  remote, parse_sdp(offer), user_agent=self.sip.user_agent)
            call.dialog = OutboundDialog(out, uac)
            self.connecting[out.call_id] = connected = asyncio.Event()  # (set: the session is up)
            self.invites[out.call_id] = out.invite
            while len(self.invites) > INVITES_KEPT:
                self.invites.popitem(last=False)
            call.info = dataclasses.replace(info, sip_call_id=out.call_id)
            out.on_ringing = lambda _c: placed.ring()
            try:
                await out.wait_answered(req.ring_timeout_s)
            except asyncio.CancelledError:  # hung up by the operator (or the server stopping)
                out.cancel(uac)
                placed.settle("cancelled", reason="server shutting down" if self.closing
                              else "hung up before the answer")
                raise
            except TimeoutError:
                out.cancel(uac)
                return placed.settle("no_answer", reason="not answered in time")
            except RuntimeError:
                return placed.settle(outcome_of(out._reject_code), out._reject_code,
                                     out._reject_reason)
            try:
                plan = read_offer(serialize_sdp(out.sdp_answer) if out.sdp_answer else "",
                                  self.sip.codecs)
            except (BadSdp, NoSharedCodec) as exc:
                out.hangup(uac)
                return placed.settle("failed", 200, f"unusable answer: {exc}")
            self.calls[call.call_id] = call
            self.by_sip_id[out.call_id] = call
            await call.connected(plan, Accept(req.session))
            self.connecting.pop(out.call_id, None)
            connected.set()
            placed.answer(call.session.session_id)
            await call.run()
            placed.settle("ended", reason=call.end_reason)
        except Exception as exc:  # noqa: BLE001 - the placed call fails, the server goes on
            log.exception("sip %s: placing the call failed", placed.id)
            placed.settle("failed", reason=f"{type(exc).__name__}")
        finally:
            if not placed.finished:   # cancelled past its ring: only the server stopping does
                placed.settle("ended" if placed.answered_at else "cancelled",
                              reason="server shutting down")
            if call is not None and call.state is not CallState.ENDED:
                call.end(placed.reason or placed.status)
                await call.close()
            elif call is None:
                ticket.release()
            if call is not None and isinstance(call.dialog, OutboundDialog):
                call.dialog.uac.remove_call(call.dialog.call_id)
                waiting = self.connecting.pop(call.dialog.call_id, None)
                if waiting is not None:
                    waiting.set()  # never connected: a re-INVITE that waited gets 481
            if tls_peer is not None:
                self.tls.release(tls_peer)

    def placed_call(self, call_id: str) -> Optional[PlacedCall]:
        return self.placed.get(call_id)

    def _reinvite(self, dialog: DialogCall) -> None:
        """A re-INVITE, on a call we answered or one we placed (aiosipua hands
        the callee's as a wrapper of the same shape): hold, resume, a moved
        stream or another codec."""
        waiting = self.connecting.get(dialog.call_id)
        if waiting is not None:  # a call we placed, its session not up yet
            log.debug("sip: re-INVITE on %s waits for its session to start", dialog.call_id)
            dialog.trying()  # stops the callee's retransmissions meanwhile
            self._spawn(self._reinvite_once_connected(dialog, waiting))
            return
        call = self.by_sip_id.get(dialog.call_id)
        if call is None or call.finished:
            dialog.reject(481, "Call/Transaction Does Not Exist")
            return
        try:
            plan = read_offer(dialog.invite.text, self.sip.codecs, prefer=call.plan.format)
        except (BadSdp, NoSharedCodec) as exc:
            log.warning("sip %s: re-INVITE refused: %s", call.call_id, exc)
            # the re-INVITE fails, the call goes on as it was (RFC 3261 section 14.2)
            dialog._send_response(488, "Not Acceptable Here")
            return
        call.reoffer(plan, dialog)

    async def _reinvite_once_connected(self, dialog: DialogCall, connected: asyncio.Event) -> None:
        try:
            await asyncio.wait_for(connected.wait(), CONNECT_WAIT_S)
        except asyncio.TimeoutError:  # RFC 3261 section 14.2: try again later
            dialog._send_response(500, "Server Internal Error", extra_headers={"Retry-After": "2"})
            return
        self._reinvite(dialog)  # 481 when the call did not come up

    def _bye(self, dialog: DialogCall, request: SipRequest) -> None:
        self._ended(dialog.call_id, "caller hung up")

    def _ended(self, sip_call_id: str, reason: str) -> None:
        call = self.by_sip_id.get(sip_call_id)
        if call is not None:
            call.end(reason)

    def _cancel(self, request: SipRequest, src: tuple[str, int]) -> None:
        task = self.ringing.pop(request.call_id or "", None)
        if task is not None:
            log.info("sip: %s cancelled before the answer", request.call_id)
            task.cancel()

    def _transfer_progress(self, sip_call_id: str, status: int, reason: str) -> None:
        call = self.by_sip_id.get(sip_call_id)
        if call is not None:
            call.on_transfer_progress(status)

    # ------------------------------------------------------------ a new call
    async def _ring(self, dialog: DialogCall, transport: str) -> None:
        """From the INVITE to the answer (module docstring)."""
        sip_id = dialog.call_id
        if sip_id in self.ringing or sip_id in self.by_sip_id:
            return  # a retransmitted INVITE: the first one is being answered
        if dialog.dialog.state is DialogState.TERMINATED:
            # CANCELled before this task ran (aiosipua sent 487): over TCP or TLS
            # the INVITE and its CANCEL can come in one read
            return
        self.ringing[sip_id] = asyncio.current_task()
        try:
            await self._decide(dialog, transport)
        except asyncio.CancelledError:
            self._forget_dialog(dialog)  # CANCEL (487 sent) or shutdown
            call = self.by_sip_id.get(sip_id)
            if call is not None:  # cancelled while the answer was under way
                call.end("cancelled")
                await call.close()
        finally:
            self.ringing.pop(sip_id, None)

    async def _decide(self, dialog: DialogCall, transport: str) -> None:
        s = self.settings
        src = dialog.source_addr
        if not source_allowed(src[0], self.sip.allow_from):
            log.warning("sip: INVITE from %s refused (not in allow_from)", src[0])
            return self._final(dialog, 403, "Forbidden")
        if self.digest.enabled and not self.digest.verify(
                "INVITE", dialog.invite.get_header("authorization")):
            return self._final(dialog, 401, "Unauthorized",
                               {"WWW-Authenticate": self.digest.challenge()})
        try:
            plan = read_offer(dialog.invite.text, self.sip.codecs)
        except NoSharedCodec as exc:
            log.warning("sip: INVITE from %s refused: %s", src[0], exc)
            return self._final(dialog, 488, "Not Acceptable Here")
        except BadSdp as exc:
            log.warning("sip: INVITE from %s refused: %s", src[0], exc)
            return self._final(dialog, 488 if dialog.invite.body else 400,
                               "Not Acceptable Here" if dialog.invite.body else "Bad Request")
        ticket = admit(self.pipeline, s.max_sessions)
        if ticket is None:
            log.warning("sip: INVITE from %s refused: max_sessions (%d) reached", src[0],
                        s.max_sessions)
            return self._final(dialog, 486, "Busy Here")
        try:
            info = self._incoming(dialog, transport)
            dialog.ringing()
            try:
                decision = await asyncio.wait_for(self.on_incoming(info),
                                                  self.sip.answer_timeout_s)
            except asyncio.TimeoutError:
                return self._final(dialog, 480, "Temporarily Unavailable")
            if isinstance(decision, Reject):
                status = decision.status if 400 <= decision.status < 700 else 603
                return self._final(dialog, status, decision.reason)
            call = SipCall(self, dialog, info, ticket)
            self.calls[call.call_id] = call
            self.by_sip_id[dialog.call_id] = call
            try:
                await call.answer(plan, decision if isinstance(decision, Accept) else Accept())
            except Exception:
                log.exception("sip %s: could not answer", call.call_id)
                if call.state is CallState.ANSWERING:
                    with contextlib.suppress(Exception):  # the call must end whatever happens
                        self._final(dialog, 503, "Service Unavailable")
                call.end("answer failed")
        finally:
            ticket.release()  # a call that registered released it already (harmless twice)
        self._spawn(call.run())
        self.ringing.pop(dialog.call_id, None)  # a CANCEL now finds nothing to cancel

    def _incoming(self, dialog: DialogCall, transport: str) -> IncomingCall:
        headers = []
        for name, values in dialog.invite.headers.items():
            for v in values:
                headers.append({"name": name, "value": v})
        return IncomingCall(call_id="sip_" + secrets.token_hex(12), sip_call_id=dialog.call_id,
                            from_uri=dialog.caller, to_uri=dialog.callee,
                            source=dialog.source_addr, transport=transport,
                            headers=tuple(headers[:MAX_HEADERS_SHOWN]))

    def _final(self, dialog: DialogCall, status: int, reason: str,
               headers: Optional[dict] = None) -> None:
        """A final non-2xx answer to the INVITE; the dialog is forgotten."""
        if headers:  # aiosipua's reject() takes no headers (a 401 needs its challenge)
            dialog._send_response(status, reason, extra_headers=headers)
            dialog.dialog.terminate()
        else:
            dialog.reject(status, reason)
        self._forget_dialog(dialog)

    def _forget_dialog(self, dialog: DialogCall) -> None:
        """aiosipua keeps a rejected INVITE's dialog until its ACK; an ACK that
        never comes (a flood, a lost datagram) would keep it for ever.  The ACK
        of a forgotten dialog is ignored, as it should be."""
        for uas in self.uas.values():
            if uas._calls.get(dialog.call_id) is dialog:
                uas._calls.pop(dialog.call_id, None)
                uas._remove_invite_transaction(dialog.invite)

    # ------------------------------------------------------------ for the calls
    def new_media(self, fmt: PayloadFormat, dtmf_pt: Optional[int], remote: tuple[str, int],
                  events: MediaEvents) -> CallMedia:
        """A call's RTP: in the RTP process (``sip.media_process``), else here."""
        if self.media_process is not None:
            return self.media_process.new_media(fmt, dtmf_pt, remote, events)
        return RtpMedia(fmt, dtmf_pt, remote, events)

    async def bind_rtp(self, media: CallMedia) -> int:
        """Bind ``media`` to a free port of the range (PortsExhausted: none)."""
        for port in self.ports.candidates():
            try:
                await media.bind(self.sip.host, port)
            except OSError:
                continue
            self.ports.take(port)
            return port
        raise AssertionError("unreachable: candidates() raises when exhausted")

    @staticmethod
    def sdp_message(text: str) -> SdpMessage:
        return parse_sdp(text)

    def in_dialog_request(self, call: SipCall, method: str) -> SipRequest:
        host, port = self.sip.advertised_host, self.sip.port
        return call.dialog.dialog.create_request(method, via_host=host, via_port=port,
                                                 via_transport=call.info.transport.upper())

    def send(self, call: SipCall, request: SipRequest) -> None:
        call.dialog.transport.send(request, call.dialog.source_addr)

    def forget(self, call: SipCall) -> None:
        self.calls.pop(call.call_id, None)
        if self.by_sip_id.get(call.sip_call_id) is call:
            del self.by_sip_id[call.sip_call_id]
        if call.dialog is not None:  # (a call we place that failed before its INVITE has none)
            self._forget_dialog(call.dialog)
        if self.on_ended is not None:
            self.on_ended(call.call_id)

    def call(self, call_id: str) -> Optional[SipCall]:
        """A live call by our id (``sip_...``) or its SIP Call-ID."""
        return self.calls.get(call_id) or self.by_sip_id.get(call_id)


__all__ = ["SipEndpoint"]
