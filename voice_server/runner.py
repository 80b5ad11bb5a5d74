"""SessionRunner: carries out the session core's commands against the Pipeline.

The one piece of glue between the sans-I/O :class:`voice_server.session.Session`
and the runtime, reused by every transport (Realtime WebSocket, WebRTC,
Twilio).  A transport gives it callbacks and feeds it what arrives::

    runner = SessionRunner(session, pipeline, send_event,
                           send_audio=None, flush_audio=None, on_close=None,
                           pause_audio=None, resume_audio=None,
                           rewind_audio=None,   # (item_id, played_ms): empty the far end
                           transport="websocket",   # label: websocket | webrtc | a phone provider
                           call_control=None)       # a live phone call's CallControl
    await runner.start()                  # session.created, listen stream, timers;
                                          # registers in voice_server.session_registry (+ metrics)
    runner.client_event(text)             # one JSON client event (sync)
    runner.reject_client_frame(code, msg) # a frame the transport could not hand over
                                          # (binary, oversized): error, rate limited
    runner.input_audio(pcm, rate)         # non-JSON transports (sync)
    runner.playback_progress(item, ms)    # what the listener heard (sync)
    runner.key_pressed(key)               # a phone caller's DTMF key (sync)
    runner.pause_output() / resume_output()  # hold / release the active reply's audio
    runner.call_actions_changed()         # the transport's CallControl.actions() changed
    unwatch = runner.watch(fn)            # fn(event) for each event sent (a sideband socket)
    await runner.close()                  # client gone: abort everything, stop tasks
    runner.begin_drain(code, msg)         # server drain: error event, no new responses
    await runner.shutdown(1001, reason)   # end of drain: cancel with events, close

Rules it keeps:

* Order: every command is carried out in the order the session returned it.
  Events (and stream-mode audio) go through ONE outbox drained by ONE writer
  task, so no event of a response can overtake its ``response.done``.
* Pacing: the session holds a reply's output and says when the next part is
  due (``Session.next_output_ms``); one task calls ``pump_output`` then, so
  the client holds at most ``output_lead_ms`` of audio it has not played.
* Barge-in is one event-loop turn: ``CancelResponse`` calls
  ``pipeline.abort`` synchronously, inside the same call that handled the
  listen event (the runtime's output gate closes at once).
* Call actions: with a ``call_control`` (voice_server/call_control.py) the
  session offers the model the operator's actions among
  ``call_control.actions()``; ``HangUpCall`` / ``TransferCall`` / ``SendDtmf``
  go through the outbox (after the events before them) and run as tasks of
  the session; their results go back to ``Session.call_action_done``.
* Nothing leaks: every request the session caused (listen streams, responses,
  transcriptions) is tracked; ``close`` aborts the live ones, cancels every
  task and waits (bounded) for the stages' abort acks.

The runner owns the outbox, the timers and the table of live requests; two
helpers carry out the commands of one family each against the pipeline:
:class:`voice_server.listening.Listening` (the microphone stream and
push-to-talk buffers) and :class:`voice_server.replies.Replies` (prefill,
prepared reply, the reply, forget).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Coroutine

import numpy as np

from . import session_registry as _registry
from .listening import Listening, next_item
from .logs import bind_ids
from .metrics import TurnTimer
from .records.recorder import CallRecorder
from .replies import Replies
from .runner_host import RequestKind
from .call_control import CallControl
from .call_actions_runner import run_call_action
from .session import (AudioOut, CallAction, CancelResponse, Close, ConfigureListen,
                      DropPreparedReply, FeedListen, FlushAudio, HangUpCall, PauseAudio,
                      PrefillConversation, PrepareReply, ResumeAudio, RewindAudio, SendDtmf,
                      SendEvent, Session, StartResponse, StopListen, TranscribeBuffer,
                      TransferCall)
from .session.server_events import error_body

log = logging.getLogger("voice_server.runner")

SendEventFn = Callable[[dict], Awaitable[None]]
SendAudioFn = Callable[[str, str, np.ndarray, int], Awaitable[None]]
FlushAudioFn = Callable[[str], Awaitable[None]]  # also PauseAudio / ResumeAudio
RewindAudioFn = Callable[[str, float], Awaitable[None]]  # (item_id, played_ms)
CloseFn = Callable[[int, str], Awaitable[None]]
# the session's commands that the writer task carries out, in order
Outbound = SendEvent | AudioOut | FlushAudio | PauseAudio | RewindAudio | ResumeAudio | Close \
    | HangUpCall | TransferCall | SendDtmf

@dataclass
class RunnerOptions:
    listen_deadline_s: float = 3660.0
    response_deadline_s: float = 120.0
    transcribe_deadline_s: float = 60.0
    tick_ms: float = 100.0
    max_outbox_events: int = 20000
    abort_ack_timeout_s: float = 2.0
    listen_restarts: int = 3  # consecutive listen failures before the session is closed
    # push-to-talk transcription: the listen stage with lenient VAD
    transcribe_params: dict = field(default_factory=lambda: {
        "threshold": 0.4, "silence_duration_ms": 1500, "prefix_padding_ms": 300,
        "min_speech_ms": 100})

    @classmethod
    def from_settings(cls, s) -> "RunnerOptions":
        return cls(listen_deadline_s=s.effective_listen_deadline_s,
                   response_deadline_s=s.response_deadline_s,
                   transcribe_deadline_s=s.transcribe_deadline_s, tick_ms=s.tick_ms,
                   max_outbox_events=s.max_outbox_events)


def _now_ms() -> float:
    return time.monotonic() * 1000.0


class SessionRunner:
    def __init__(self, session: Session, pipeline, send_event: SendEventFn, *,
                 send_audio: SendAudioFn | None = None, flush_audio: FlushAudioFn | None = None,
                 pause_audio: FlushAudioFn | None = None,
                 resume_audio: FlushAudioFn | None = None,
                 rewind_audio: RewindAudioFn | None = None, on_close: CloseFn | None = None,
                 options: RunnerOptions | None = None,
                 clock: Callable[[], float] = _now_ms, transport: str = "other",
                 call_control: CallControl | None = None) -> None:
        self.session = session
        # what the call can do besides audio (voice_server/call_control.py); None: nothing
        self.call_control = call_control
        self.transport = transport  # metrics/sessions label: websocket | webrtc | twilio | telnyx ...
        self.started_at = time.time()
        self.draining = False
        self.turns = TurnTimer()  # per-turn latency metrics (voice_server.metrics)
        self.pipeline = pipeline
        self._send_event = send_event
        self._send_audio = send_audio
        self._item_actions = {FlushAudio: flush_audio, PauseAudio: pause_audio,
                              ResumeAudio: resume_audio}
        self._rewind_audio = rewind_audio
        self._on_close = on_close
        self.opt = options or RunnerOptions()
        self.clock = clock
        self.closed = False
        self.close_code: tuple[int, str] | None = None
        self._closing: asyncio.Task | None = None
        self._done = asyncio.Event()
        self._outbox: deque[Outbound] = deque()
        self._outbox_ready = asyncio.Event()
        self._pace_wake = asyncio.Event()  # the session holds output due earlier
        self._pace_due: float | None = None  # what the pacer task sleeps until
        self.live: dict[int, RequestKind] = {}  # every pipeline request this session has open
        self._tasks: set[asyncio.Task] = set()
        self._tickets: list = []
        # sync callbacks given every event the client is sent (watch: a call's sideband)
        self._watchers: list[Callable[[dict], None]] = []
        # small debug history for tests/ops: the messages each response was started with
        self.started_responses: deque = deque(maxlen=16)
        self.stats = {"events_sent": 0, "audio_chunks": 0, "aborts": 0, "prepared": 0,
                      "prepared_used": 0, "prepared_wasted": 0, "think_tokens": 0,
                      "think_tokens_wasted": 0, "prefills": 0}
        self.record: CallRecorder | None = None   # the call record, when the server keeps them
        self.trace = None   # voice_server.traces.turn_traces.SessionTraces, when tracing is on
        self.listening = Listening(self)   # listen requests (voice_server/listening.py)
        self.replies = Replies(self)       # think requests (voice_server/replies.py)

    # ------------------------------------------------------------------ public
    async def start(self) -> None:
        bind_ids(session_id=self.session.session_id)  # log lines of this session's tasks
        _registry.register(self)
        store = _registry.registry_for(self.pipeline).records
        if store is not None:   # call records on (voice_server.records)
            self.record = CallRecorder(store, self.session, self.transport, self.clock())
            self.turns.observers.append(self.record.turn_times)
        tracing = _registry.registry_for(self.pipeline).traces
        if tracing is not None:   # OpenTelemetry turn traces (voice_server.traces)
            self.trace = tracing.session(self.session.session_id)
            self.turns.observers.append(self.trace.turn)
        self.spawn(self._writer(), "writer")
        self.spawn(self.listening.write(), "listen-writer")
        self.spawn(self._ticker(), "ticker")
        self.spawn(self._pacer(), "pacer")
        self.dispatch(self.session.start(self.clock()))
        self.call_actions_changed()

    def watch(self, listener: Callable[[dict], None]) -> Callable[[], None]:
        """``listener(event)`` for every event sent from now on, after the
        transport got it (a SIP call's sideband WebSocket); it must not block
        nor raise.  Returns the function that stops it."""
        self._watchers.append(listener)

        def unwatch() -> None:
            with contextlib.suppress(ValueError):
                self._watchers.remove(listener)
        return unwatch

    def call_actions_changed(self) -> None:
        """The call's ``CallControl.actions()`` may have changed (a SIP call
        answered, a hold): the model is offered what it can do from the next
        response on."""
        if not self.closed and self.call_control is not None:
            self.dispatch(self.session.set_call_actions_available(self.call_control.actions()))

    def client_event(self, raw) -> None:
        if not self.closed:
            self.dispatch(self.session.client_event(raw, self.clock()))

    def input_audio(self, pcm: np.ndarray, sample_rate: int) -> None:
        if not self.closed:
            self.dispatch(self.session.input_audio(pcm, sample_rate, self.clock()))

    def playback_progress(self, item_id: str, played_ms: float) -> None:
        if not self.closed:
            self.dispatch(self.session.playback_progress(item_id, played_ms, self.clock()))

    def key_pressed(self, key: str) -> None:
        """A phone caller's DTMF key (``Session.key_pressed``)."""
        if not self.closed:
            self.dispatch(self.session.key_pressed(key, self.clock(), int(time.time())))

    def pause_output(self) -> None:
        """Hold the active reply's audio where it is (``Session.pause_output``)."""
        if not self.closed:
            self.dispatch(self.session.pause_output(self.clock()))

    def resume_output(self) -> None:
        """Release the paused reply from where it stopped (``Session.resume_output``)."""
        if not self.closed:
            self.dispatch(self.session.resume_output(self.clock()))

    def call_held(self, held: bool) -> None:
        """The caller held the call or took it off hold (``Session.call_held``)."""
        if not self.closed:
            self.dispatch(self.session.call_held(held, self.clock()))

    def reject_client_frame(self, code: str, message: str) -> None:
        """The transport got a client frame it cannot hand over as an event
        (binary WebSocket frame, undecodable or oversized data-channel message).
        Goes through the session core (``Session.reject_client_frame``) rather
        than :meth:`send_error`, so the frame counts as traffic for the idle
        timeout and against the client-event rate limit."""
        if not self.closed:
            self.dispatch(self.session.reject_client_frame(code, message, self.clock()))

    def send_error(self, code: str, message: str, param: str | None = None,
                   type_: str = "invalid_request_error", cause: str | None = None) -> None:
        """An ``error`` event that did not come from the session core nor from
        anything the client sent (server side: drain, dropped events).  For a
        rejected client frame use :meth:`reject_client_frame`."""
        if self.closed:
            return
        self._push(SendEvent(self._make_error(type_, code, message, param, cause)))

    @property
    def live_request_ids(self) -> list[int]:
        return list(self.live)

    @property
    def live_requests(self) -> dict[int, str]:
        """Request id -> what it is (``listen``, ``response``, ``prepared``, ``prefill``,
        ``transcribe``): a copy."""
        return {rid: kind.value for rid, kind in self.live.items()}

    @property
    def response_pending_submit(self) -> bool:
        """A response was started by the session but is not in the pipeline yet."""
        return bool(self.replies.active) and RequestKind.RESPONSE not in self.live.values()

    @property
    def output_pending(self) -> bool:
        """The session still holds a reply's output for pacing: a turn in progress."""
        return not self.closed and self.session.output_held

    @property
    def closing(self) -> bool:
        return self.closed or self._closing is not None

    async def wait_closed(self) -> None:
        await self._done.wait()

    async def close(self) -> None:
        """Client gone (or server shutdown): abort everything, stop every task."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    # ---------------------------------------------------------------- dispatch
    def dispatch(self, cmds: list) -> None:
        """Carry out session commands, in order.  Synchronous: no await in here."""
        for c in cmds:
            if isinstance(c, SendEvent):
                self._push(c)
            elif isinstance(c, CancelResponse):
                self.replies.cancel(c.response_id, c.reason)
            elif isinstance(c, FeedListen):
                self.listening.feed(c)
                if self.record is not None:
                    self.record.caller_audio(c.pcm16k, self.clock())
            elif isinstance(c, ConfigureListen):
                self.listening.configure(c)
            elif isinstance(c, StopListen):
                self.listening.stop(c)
            elif isinstance(c, StartResponse):
                self.started_responses.append({"response_id": c.response_id,
                                               "messages": list(c.messages),
                                               "modalities": list(c.modalities),
                                               "tools": c.tools, "tool_choice": c.tool_choice})
                self.replies.start(c)
            elif isinstance(c, PrepareReply):
                self.replies.prepare(c)
            elif isinstance(c, PrefillConversation):
                self.replies.prefill(c)
            elif isinstance(c, DropPreparedReply):
                self.replies.drop_prepared()
            elif isinstance(c, TranscribeBuffer):
                self.spawn(self.listening.transcribe(c.item_id, c.pcm16k), "transcribe")
                if self.record is not None:   # push-to-talk: the caller's words end now
                    self.record.caller_audio(c.pcm16k, self.clock())
            elif isinstance(c, (FlushAudio, RewindAudio)):
                # (rewind: the session takes back what it released; it sends it again)
                self._flush_outbox_audio(c.item_id)
                self._push(c)
            elif isinstance(c, (AudioOut, PauseAudio, ResumeAudio, Close, HangUpCall,
                                TransferCall, SendDtmf)):
                self._push(c)
        # Whatever the session was told may have held output without releasing
        # any (a clause that arrives while the listener's lead is full gives no
        # command at all): the pacer must hear of it whether or not commands came,
        # or it sleeps on with nothing due and the reply stalls mid-way.
        due = self.session.next_output_ms
        if due is not None and (self._pace_due is None or due < self._pace_due):
            self._pace_wake.set()

    # -------------------------------------------------------------- internals
    def spawn(self, coro: Coroutine, name: str) -> asyncio.Task:
        """A task of this session's, cancelled and awaited when it closes."""
        t = asyncio.ensure_future(coro)
        t.set_name(f"runner-{self.session.session_id}-{name}")
        self._tasks.add(t)
        t.add_done_callback(self._task_done)
        return t

    def _task_done(self, t: asyncio.Task) -> None:
        self._tasks.discard(t)
        if not t.cancelled() and t.exception() is not None:
            log.error("session %s: task %s failed: %r", self.session.session_id, t.get_name(),
                      t.exception(), exc_info=t.exception())

    def _make_error(self, type_: str, code: str | None, message: str,
                    param: str | None = None, cause: str | None = None) -> dict:
        return {"type": "error", "event_id": self.session.ids.new("event"),
                "error": error_body(type_, code, message, param, cause)}

    def _push(self, item: Outbound) -> None:
        if self.closed:
            return
        self._outbox.append(item)
        self._outbox_ready.set()
        if len(self._outbox) > self.opt.max_outbox_events:
            log.warning("session %s: client does not read its events; closing",
                        self.session.session_id)
            self._outbox.clear()
            self._begin_close(1008, "client too slow: outbound event queue overflowed")

    def _flush_outbox_audio(self, item_id: str) -> None:
        if any(type(x) is AudioOut for x in self._outbox):
            self._outbox = deque(x for x in self._outbox
                                 if not (type(x) is AudioOut and x.item_id == item_id))

    def _begin_close(self, code: int, reason: str) -> None:
        if self.close_code is None:
            self.close_code = (code, reason)
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())

    def push_server_error(self, code: str, message: str) -> None:
        """A ``server_error`` event on the outbox, in order with the rest."""
        self._push(SendEvent(self._make_error("server_error", code, message)))

    def close_soon(self, code: int, reason: str) -> None:
        self._begin_close(code, reason)

    def abort_request(self, rid: int, reason: str) -> None:
        """Synchronous: the runtime closes the output gate inside this call."""
        self.stats["aborts"] += 1
        try:
            ticket = self.pipeline.abort(rid, reason)
        except Exception as exc:  # noqa: BLE001 - a closed pipeline must not break close()
            log.warning("abort %s failed: %r", rid, exc)
            return
        self._tickets.append(ticket)
        if self.trace is not None and self.live.get(rid) is RequestKind.RESPONSE:
            self.trace.response_aborted(ticket, reason)
        if len(self._tickets) > 64:
            self._tickets = [t for t in self._tickets if not _ticket_done(t)]

    # -------------------------------------------------------------- the tasks
    async def _writer(self) -> None:
        while True:
            x = await next_item(self._outbox, self._outbox_ready)
            try:
                if type(x) is SendEvent:
                    await self._send_event(x.event)
                    for w in list(self._watchers):
                        w(x.event)
                    self.stats["events_sent"] += 1
                    self.turns.event_sent(x.event)
                    if self.record is not None:
                        self.record.event(x.event, self.clock())
                elif type(x) is AudioOut:
                    if self._send_audio is not None:
                        await self._send_audio(x.response_id, x.item_id, x.pcm, x.sample_rate)
                        self.stats["audio_chunks"] += 1
                        self.turns.audio_sent(x.response_id)
                        if self.record is not None:
                            self.record.agent_audio(x.pcm, x.sample_rate, self.clock())
                elif type(x) is Close:
                    self._begin_close(x.code, x.reason)
                    return
                elif type(x) is RewindAudio:
                    if self._rewind_audio is not None:
                        await self._rewind_audio(x.item_id, x.played_ms)
                elif isinstance(x, (HangUpCall, TransferCall, SendDtmf)):
                    self._call_action(x)
                else:   # FlushAudio, PauseAudio, ResumeAudio: the transport's own action
                    action = self._item_actions[type(x)]
                    if action is not None:
                        await action(x.item_id)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the transport is gone
                log.info("session %s: send failed (%r); closing", self.session.session_id, exc)
                self._begin_close(1011, "send failed")
                return

    def _call_action(self, cmd: CallAction) -> None:
        """Run one of the agent's call actions as a task of the session (a
        transfer waits for its outcome; the writer goes on meanwhile)."""
        async def run() -> None:
            result = await run_call_action(self.call_control, cmd, self.session.session_id)
            if result.close:
                self.close_soon(1000, "agent_hangup")
            elif not self.closed:
                self.dispatch(self.session.call_action_done(cmd.call_id, result.output,
                                                            self.clock(), reply=result.reply))
        self.spawn(run(), "call-action")

    async def _ticker(self) -> None:
        period = self.opt.tick_ms / 1000.0
        while True:
            await asyncio.sleep(period)
            self.dispatch(self.session.tick(self.clock()))

    async def _pacer(self) -> None:
        """Release held output when the session says it is due."""
        while True:
            due = self._pace_due = self.session.next_output_ms
            self._pace_wake.clear()
            if due is None:
                await self._pace_wake.wait()
                continue
            delay = (due - self.clock()) / 1000.0
            if delay > 0.001:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._pace_wake.wait(), delay)
                continue
            self._pace_due = None
            cmds = self.session.pump_output(self.clock())
            self.dispatch(cmds)
            if not cmds:  # due but nothing to give: do not spin
                await asyncio.sleep(0.005)

    # ------------------------------------------------------------------ close
    async def _close(self) -> None:
        try:
            if not self.session.closed:
                self.dispatch(self.session.disconnect(self.clock()))
            # a Close command (session expired, slow client): let its events out first
            if self.close_code is not None and self._on_close is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._drain_outbox(), 2.0)
            self.closed = True
            self.listening.end_all()
            self.replies.drop_prepared()
            for rid in list(self.live):
                self.abort_request(rid, "disconnected")
            self.replies.cancel_all("disconnected")
            current = asyncio.current_task()
            tasks = [t for t in list(self._tasks) if t is not current]
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            # requests submitted while we were cancelling
            for rid in list(self.live):
                self.abort_request(rid, "disconnected")
            self.live.clear()
            pending = [t for t in self._tickets if not _ticket_done(t)]
            if pending:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.gather(*[_await(t) for t in pending],
                                                          return_exceptions=True),
                                           self.opt.abort_ack_timeout_s)
            self._tickets.clear()
            await self.replies.forget_conversation()
            self._outbox.clear()
            if self.close_code is not None and self._on_close is not None:
                with contextlib.suppress(Exception):
                    await self._on_close(*self.close_code)
        finally:
            self.closed = True
            if self.record is not None:
                self.record.close(self.clock())
            _registry.unregister(self)
            self._done.set()

    # ------------------------------------------------------------------ drain
    def begin_drain(self, code: str, message: str) -> None:
        """Server shutdown began: tell the client; start no new response from now on."""
        self.draining = True
        self.send_error(code, message, type_="server_error")

    async def shutdown(self, code: int = 1001, reason: str = "server shutting down") -> None:
        """End of a drain: cancel the active response (its response.done goes out), close."""
        if not self.closed and self._closing is None:
            # the session core's own cancel path: CancelResponse + response.done (cancelled)
            self.dispatch(self.session.cancel_response("server_shutting_down", self.clock()))
            if self.close_code is None:
                self.close_code = (code, reason)  # close() lets the events out, then closes
        await self.close()

    async def _drain_outbox(self) -> None:
        while self._outbox and any(not t.done() and t.get_name().endswith("writer")
                                   for t in self._tasks):
            await asyncio.sleep(0.01)


def _ticket_done(t) -> bool:
    f = getattr(t, "acked", None)
    return f is None or f.done()


async def _await(t):
    return await t


__all__ = ["SessionRunner", "RunnerOptions"]
