"""SessionRunner: carries out the session core's commands against the Pipeline.

The one piece of glue between the sans-I/O :class:`voice_server.session.Session`
and the runtime, reused by every transport (Realtime WebSocket, WebRTC,
Twilio).  A transport gives it callbacks and feeds it what arrives::

    runner = SessionRunner(session, pipeline, send_event,
                           send_audio=None, flush_audio=None, on_close=None,
                           pause_audio=None, resume_audio=None,
                           transport="websocket")   # label: websocket | webrtc | twilio
    await runner.start()                  # session.created, listen stream, timers;
                                          # registers in voice_server.session_registry (+ metrics)
    runner.client_event(text)             # one JSON client event (sync)
    runner.reject_client_frame(code, msg) # a frame the transport could not hand over
                                          # (binary, oversized): error, rate limited
    runner.input_audio(pcm, rate)         # non-JSON transports (sync)
    runner.playback_progress(item, ms)    # what the listener heard (sync)
    runner.pause_output() / resume_output()  # hold / release the active reply's audio
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
* Nothing leaks: every request the session caused (listen streams, responses,
  transcriptions) is tracked; ``close`` aborts the live ones, cancels every
  task and waits (bounded) for the stages' abort acks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional

import numpy as np

from runtime.errors import ErrorCode
from runtime.executor import CONVERSATION, FORGET, PREFILL_ONLY, PREFILL_WORDS
from runtime.models.voice_contract import (FINAL, LISTEN, LISTEN_RATE_HZ, LISTEN_TIME_KEYS, SPEAK_SPEED,
                                           SPEAK_VOICE, SPOKEN_REPLY_ROUTE,
                                           TEXT_REPLY_ROUTE, THINK, ThinkRequest, think_request)

from . import session_registry as _registry
from .logs import bind_ids
from . import metrics
from .metrics import TurnTimer
from .prepared_reply import PreparedReply, request_key
from .session import (AudioOut, CancelResponse, Close, ConfigureListen, DropPreparedReply,
                      FeedListen, FlushAudio, PauseAudio, PrefillConversation, PrepareReply,
                      ResumeAudio, SendEvent, Session, StartResponse, StopListen, TranscribeBuffer)
from .session.server_events import error_body

log = logging.getLogger("voice_server.runner")

SendEventFn = Callable[[dict], Awaitable[None]]
SendAudioFn = Callable[[str, str, np.ndarray, int], Awaitable[None]]
FlushAudioFn = Callable[[str], Awaitable[None]]  # also PauseAudio / ResumeAudio
CloseFn = Callable[[int, str], Awaitable[None]]

_STOP = object()


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


@dataclass
class _Resp:
    response_id: str
    cmd: StartResponse
    rid: Optional[int] = None
    cancel_reason: Optional[str] = None
    task: Optional[asyncio.Task] = None


@dataclass
class _Listen:
    params: dict
    offset_ms: float
    handle: Any = None
    task: Optional[asyncio.Task] = None
    ended: bool = False  # we ended/aborted it on purpose


def _now_ms() -> float:
    return time.monotonic() * 1000.0


class SessionRunner:
    def __init__(self, session: Session, pipeline, send_event: SendEventFn, *,
                 send_audio: SendAudioFn | None = None, flush_audio: FlushAudioFn | None = None,
                 pause_audio: FlushAudioFn | None = None,
                 resume_audio: FlushAudioFn | None = None, on_close: CloseFn | None = None,
                 options: RunnerOptions | None = None,
                 clock: Callable[[], float] = _now_ms, transport: str = "other") -> None:
        self.session = session
        self.transport = transport  # metrics/sessions label: websocket | webrtc | twilio
        self.started_at = time.time()
        self.draining = False
        self.turns = TurnTimer()  # per-turn latency metrics (voice_server.metrics)
        self.pipeline = pipeline
        self._send_event = send_event
        self._send_audio = send_audio
        self._flush_audio = flush_audio
        self._item_actions = {"flush": flush_audio, "pause": pause_audio,
                              "resume": resume_audio}
        self._on_close = on_close
        self.opt = options or RunnerOptions()
        self.clock = clock
        self.closed = False
        self.close_code: tuple[int, str] | None = None
        self._closing: asyncio.Task | None = None
        self._done = asyncio.Event()
        # outbox: ("event", dict) | ("audio", AudioOut) | ("flush" | "pause" | "resume",
        # item_id) | ("close", Close)
        self._outbox: deque = deque()
        self._outbox_ready = asyncio.Event()
        # listen input: ("pcm", arr) | ("configure", _Listen) | ("stop", None)
        self._listen_q: deque = deque()
        self._pace_wake = asyncio.Event()  # the session holds output due earlier
        self._pace_due: float | None = None  # what the pacer task sleeps until
        self._listen_ready = asyncio.Event()
        self._listen: _Listen | None = None
        self._listen_failures = 0
        self._responses: dict[str, _Resp] = {}
        self._live: dict[int, str] = {}  # request id -> what ("listen"/"response"/"transcribe"/...)
        self._tasks: set[asyncio.Task] = set()
        self._tickets: list = []
        # small debug history for tests/ops: the messages each response was started with
        self.started_responses: deque = deque(maxlen=16)
        self.stats = {"events_sent": 0, "audio_chunks": 0, "aborts": 0, "prepared": 0,
                      "prepared_used": 0, "prepared_wasted": 0, "think_tokens": 0,
                      "think_tokens_wasted": 0, "prefills": 0}
        self._prepared: PreparedReply | None = None   # preemptive generation (prepared_reply.py)
        self._thought = False    # a think request was sent: the stage may keep its cells
        self._prefilling: asyncio.Task | None = None  # PrefillConversation in flight

    # ------------------------------------------------------------------ public
    async def start(self) -> None:
        bind_ids(session_id=self.session.session_id)  # log lines of this session's tasks
        _registry.register(self)
        self._spawn(self._writer(), "writer")
        self._spawn(self._listen_writer(), "listen-writer")
        self._spawn(self._ticker(), "ticker")
        self._spawn(self._pacer(), "pacer")
        self.dispatch(self.session.start(self.clock()))

    def client_event(self, raw) -> None:
        if not self.closed:
            self.dispatch(self.session.client_event(raw, self.clock()))

    def input_audio(self, pcm: np.ndarray, sample_rate: int) -> None:
        if not self.closed:
            self.dispatch(self.session.input_audio(pcm, sample_rate, self.clock()))

    def playback_progress(self, item_id: str, played_ms: float) -> None:
        if not self.closed:
            self.dispatch(self.session.playback_progress(item_id, played_ms, self.clock()))

    def pause_output(self) -> None:
        """Hold the active reply's audio where it is (``Session.pause_output``)."""
        if not self.closed:
            self.dispatch(self.session.pause_output(self.clock()))

    def resume_output(self) -> None:
        """Release the paused reply from where it stopped (``Session.resume_output``)."""
        if not self.closed:
            self.dispatch(self.session.resume_output(self.clock()))

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
        self._push(("event", self._make_error(type_, code, message, param, cause)))

    @property
    def live_request_ids(self) -> list[int]:
        return list(self._live)

    @property
    def live_requests(self) -> dict[int, str]:
        """Request id -> what it is (``listen``, ``response``, ``prepared``, ``prefill``,
        ``transcribe``): a copy."""
        return dict(self._live)

    @property
    def response_pending_submit(self) -> bool:
        """A response was started by the session but is not in the pipeline yet."""
        return bool(self._responses) and "response" not in self._live.values()

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
                self._push(("event", c.event))
            elif isinstance(c, CancelResponse):
                self._cancel(c.response_id, c.reason)
            elif isinstance(c, FeedListen):
                if self._listen is not None:
                    self._listen_push(("pcm", c.pcm16k))
            elif isinstance(c, ConfigureListen):
                lst = _Listen(dict(c.params), self.session.input_ms)
                self._listen = lst
                self._listen_push(("configure", lst))
            elif isinstance(c, StopListen):
                self._listen = None
                self._listen_push(("stop", None))
            elif isinstance(c, StartResponse):
                r = _Resp(c.response_id, c)
                self._responses[c.response_id] = r
                self.turns.response_started(c.response_id)
                self.started_responses.append({"response_id": c.response_id,
                                               "messages": list(c.messages),
                                               "modalities": list(c.modalities),
                                               "tools": c.tools, "tool_choice": c.tool_choice})
                r.task = self._spawn(self._run_response(r), "response")
            elif isinstance(c, PrepareReply):
                self._prepare(c)
            elif isinstance(c, PrefillConversation):
                self._prefill_conversation(c)
            elif isinstance(c, DropPreparedReply):
                self._drop_prepared()
            elif isinstance(c, TranscribeBuffer):
                self._spawn(self._transcribe(c.item_id, c.pcm16k), "transcribe")
            elif isinstance(c, AudioOut):
                self._push(("audio", c))
            elif isinstance(c, FlushAudio):
                self._flush_outbox_audio(c.item_id)
                self._push(("flush", c.item_id))
            elif isinstance(c, PauseAudio):
                self._push(("pause", c.item_id))
            elif isinstance(c, ResumeAudio):
                self._push(("resume", c.item_id))
            elif isinstance(c, Close):
                self._push(("close", c))
        if cmds:
            due = self.session.next_output_ms
            if due is not None and (self._pace_due is None or due < self._pace_due):
                self._pace_wake.set()

    # -------------------------------------------------------------- internals
    def _spawn(self, coro, name: str) -> asyncio.Task:
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

    def _push(self, item) -> None:
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
        if any(k == "audio" for k, _ in self._outbox):
            self._outbox = deque(x for x in self._outbox
                                 if not (x[0] == "audio" and x[1].item_id == item_id))

    def _begin_close(self, code: int, reason: str) -> None:
        if self.close_code is None:
            self.close_code = (code, reason)
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())

    def _cancel(self, response_id: str, reason: str) -> None:
        r = self._responses.get(response_id)
        if r is None:
            return
        if r.cancel_reason is None:
            r.cancel_reason = reason
        if r.rid is not None and r.rid in self._live:
            self._abort(r.rid, reason)

    def _abort(self, rid: int, reason: str) -> None:
        """Synchronous: the runtime closes the output gate inside this call."""
        self.stats["aborts"] += 1
        try:
            ticket = self.pipeline.abort(rid, reason)
        except Exception as exc:  # noqa: BLE001 - a closed pipeline must not break close()
            log.warning("abort %s failed: %r", rid, exc)
            return
        self._tickets.append(ticket)
        if len(self._tickets) > 64:
            self._tickets = [t for t in self._tickets if not _ticket_done(t)]

    def _listen_push(self, item) -> None:
        self._listen_q.append(item)
        self._listen_ready.set()

    # -------------------------------------------------------------- the tasks
    @staticmethod
    async def _next(queue: deque, ready: asyncio.Event):
        """The next item of a task's queue, waiting for one (the producer sets ``ready``)."""
        while not queue:
            ready.clear()
            await ready.wait()
        return queue.popleft()

    async def _writer(self) -> None:
        while True:
            kind, x = await self._next(self._outbox, self._outbox_ready)
            try:
                if kind == "event":
                    await self._send_event(x)
                    self.stats["events_sent"] += 1
                    self.turns.event_sent(x)
                elif kind == "audio":
                    if self._send_audio is not None:
                        await self._send_audio(x.response_id, x.item_id, x.pcm, x.sample_rate)
                        self.stats["audio_chunks"] += 1
                        self.turns.audio_sent(x.response_id)
                elif kind in self._item_actions:
                    action = self._item_actions[kind]
                    if action is not None:
                        await action(x)
                elif kind == "close":
                    self._begin_close(x.code, x.reason)
                    return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the transport is gone
                log.info("session %s: send failed (%r); closing", self.session.session_id, exc)
                self._begin_close(1011, "send failed")
                return

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

    async def _listen_writer(self) -> None:
        cur: _Listen | None = None
        while True:
            kind, x = await self._next(self._listen_q, self._listen_ready)
            if kind == "pcm":
                # coalesce what queued up meanwhile: fewer, larger messages
                parts = [x]
                while self._listen_q and self._listen_q[0][0] == "pcm":
                    parts.append(self._listen_q.popleft()[1])
                if cur is None or cur.handle is None or cur.ended:
                    continue
                pcm = parts[0] if len(parts) == 1 else np.concatenate(parts)
                try:
                    await cur.handle.send(pcm)
                except Exception as exc:  # noqa: BLE001
                    log.warning("listen send failed: %r", exc)
            elif kind == "configure":
                await self._end_listen(cur)
                cur = x
                await self._open_listen(cur)
            elif kind == "stop":
                await self._end_listen(cur)
                cur = None

    async def _open_listen(self, lst: _Listen) -> None:
        params = {"sample_rate": LISTEN_RATE_HZ, **lst.params}
        try:
            h = await self.pipeline.submit(None, entry=LISTEN, stream_input=True, params=params,
                                           deadline_s=self.opt.listen_deadline_s)
        except Exception as exc:  # noqa: BLE001
            self._listen_failed(lst, {"code": ErrorCode.STAGE_UNAVAILABLE.value,
                                      "message": f"listen could not start: {exc}"})
            return
        lst.handle = h
        self._live[h.request_id] = "listen"
        if lst.ended:  # stopped while submitting
            self._abort(h.request_id, "listen_stopped")
        lst.task = self._spawn(self._read_listen(lst), "listen")

    async def _end_listen(self, lst: _Listen | None) -> None:
        if lst is None or lst.ended:
            return
        lst.ended = True
        h = lst.handle
        if h is None or h.request_id not in self._live:
            return
        try:
            await h.end_input()  # flushes a final for speech in progress
        except Exception:  # noqa: BLE001
            self._abort(h.request_id, "listen_stopped")

    async def _read_listen(self, lst: _Listen) -> None:
        h = lst.handle
        off = lst.offset_ms
        term = None
        try:
            async for ev in h:
                if ev.kind == "chunk":
                    p = ev.payload
                    if not isinstance(p, dict):
                        continue
                    if off:
                        p = dict(p)
                        for k in LISTEN_TIME_KEYS:
                            if k in p:
                                p[k] = int(round(p[k] + off))
                    self._listen_failures = 0
                    self.turns.listen_event(p)
                    self.dispatch(self.session.listen_event(p, self.clock()))
                else:
                    term = ev
        finally:
            self._live.pop(h.request_id, None)
        if term is None or self.closed or lst.ended:
            return
        # The listen stream ended without us asking (stage crash, deadline): say so
        # and start a new one with the same params, so the session keeps listening.
        err = term.error.to_wire() if term.error is not None else \
            {"code": ErrorCode.INTERNAL.value, "message": f"listen stream ended ({term.kind}: {term.reason})"}
        self._listen_failed(lst, err)

    def _listen_failed(self, lst: _Listen, err: dict) -> None:
        if self.closed:
            return
        self._push(("event", self._make_error(
            "server_error", err.get("code", ErrorCode.INTERNAL.value),
            f"Speech input failed: {err.get('message', '')}".strip())))
        # an utterance that was being spoken gets an (empty) end, so nothing waits forever
        s = self.session
        self.dispatch(s.listen_lost(self.clock()))
        if self._listen is not lst:
            return
        self._listen_failures += 1
        if self._listen_failures > self.opt.listen_restarts:
            self._push(("event", self._make_error(
                "server_error", ErrorCode.STAGE_UNAVAILABLE.value,
                "Speech input keeps failing; closing the session.")))
            self._push(("close", Close(1011, "speech input unavailable")))
            return
        new = _Listen(dict(lst.params), s.input_ms)
        self._listen = new
        self._listen_push(("configure", new))

    @staticmethod
    def _messages(c: StartResponse | PrepareReply | PrefillConversation) -> list:
        """The conversation with the instructions as its system message."""
        msgs = list(c.messages)
        if c.instructions and not any(m.get("role") == "system" for m in msgs):
            msgs = [{"role": "system", "content": c.instructions}] + msgs
        return msgs

    @classmethod
    def _request(cls, c: StartResponse | PrepareReply) -> tuple[ThinkRequest, list[str], dict]:
        """The think(+speak) request a response (or a prepared reply) submits:
        the conversation, the instructions as its system message, and the
        tools (already in the chat-completions shape); a spoken reply's params
        carry the session's voice and pace to the speak stage."""
        spoken = "audio" in c.modalities
        return (think_request(cls._messages(c), c.max_tokens, c.tools, c.tool_choice,
                              include_usage=True),
                list(SPOKEN_REPLY_ROUTE if spoken else TEXT_REPLY_ROUTE),
                {SPEAK_VOICE: c.voice, SPEAK_SPEED: c.speed} if spoken else {})

    async def _submit_think(self, payload: ThinkRequest, route: list[str],
                            params: dict | None = None):
        """Every think request names its conversation (this session), whose cells
        the think stage may keep for the next turn until the session closes; all
        of them reach the same think replica, where those cells are."""
        self._thought = True
        return await self.pipeline.submit(payload, entry=THINK, route=route,
                                          params={CONVERSATION: self.session.session_id,
                                                  **(params or {})},
                                          deadline_s=self.opt.response_deadline_s,
                                          affinity=self.session.session_id)

    async def _forget_conversation(self) -> None:
        """The session is over: the think stage drops what it keeps of it (the
        request ends at once; its end is not waited for)."""
        if not self._thought:
            return
        with contextlib.suppress(Exception):   # a closed pipeline keeps nothing either
            await self.pipeline.submit({}, entry=THINK, route=[THINK],
                                       params={FORGET: True,
                                               CONVERSATION: self.session.session_id},
                                       affinity=self.session.session_id)

    def _prefill_conversation(self, c: PrefillConversation) -> None:
        """Fire and forget: the think stage keeps what it decoded for the reply's
        prompt (an engine that cannot keep it ends the request at once)."""
        msgs = self._messages(c) + ([{"role": "user", "content": c.words}] if c.words else [])
        if self.draining or self.closed or not msgs or \
                (self._prefilling is not None and not self._prefilling.done()):
            return
        self.stats["prefills"] += 1

        async def run() -> None:
            rid = None
            try:
                h = await self._submit_think(think_request(msgs, None, c.tools, c.tool_choice),
                                             [THINK], {PREFILL_ONLY: True,
                                                       PREFILL_WORDS: bool(c.words)})
                rid = h.request_id
                self._live[rid] = "prefill"
                async for _ in h:
                    pass
            except Exception as exc:  # noqa: BLE001 - only time is lost: the reply decodes it all
                log.debug("conversation prefill failed: %r", exc)
            finally:
                if rid is not None:
                    self._live.pop(rid, None)
        self._prefilling = self._spawn(run(), "prefill")

    def _prepare(self, c: PrepareReply) -> None:
        self._drop_prepared()
        if self.draining or self.closed:
            return
        payload, route, params = self._request(c)
        p = PreparedReply(request_key(payload, route, params))
        self._prepared = p
        self.stats["prepared"] += 1

        async def submit():
            h = await self._submit_think(payload, route, params)
            self._live[h.request_id] = "prepared"
            if self._prepared is not p and not p.adopted:   # dropped while submitting
                self._abort(h.request_id, "turn_continues")
            return h

        async def hold():
            try:
                await p.run(submit)
            finally:
                if p.request_id is not None:
                    self._live.pop(p.request_id, None)
        p.task = self._spawn(hold(), "prepared-reply")

    def _drop_prepared(self) -> None:
        p, self._prepared = self._prepared, None
        if p is None:
            return
        if p.request_id is not None and p.request_id in self._live:
            self._abort(p.request_id, "turn_continues")   # nothing of it was sent
        self.stats["prepared_wasted"] += 1
        self.stats["think_tokens_wasted"] += p.think_chunks
        self.stats["think_tokens"] += p.think_chunks
        metrics.prepared_reply("wasted", p.think_chunks)

    def _adopt_prepared(self, key: str) -> PreparedReply | None:
        p = self._prepared
        if p is None:
            return None
        if p.key != key:
            self._drop_prepared()               # the committed turn asks something else
            return None
        self._prepared = None
        p.adopted = True
        self.stats["prepared_used"] += 1
        return p

    async def _run_response(self, r: _Resp) -> None:
        c = r.cmd
        payload, route, params = self._request(c)
        think_chunks = 0
        prepared = None
        try:
            if r.cancel_reason is not None:
                return  # cancelled before it was submitted: the session already said so
            if self.draining:  # the server is shutting down: no new turns
                self.dispatch(self.session.response_finished(
                    r.response_id, "failed", {"code": ErrorCode.STAGE_UNAVAILABLE.value,
                                              "message": "the server is shutting down"},
                    self.clock()))
                return
            prepared = self._adopt_prepared(request_key(payload, route, params))
            try:
                if prepared is not None:
                    await prepared.submitted.wait()
                    if prepared.error is not None:
                        raise prepared.error
                    h = prepared
                else:
                    h = await self._submit_think(payload, route, params)
            except Exception as exc:  # noqa: BLE001
                self.dispatch(self.session.response_finished(
                    r.response_id, "failed",
                    {"code": (ErrorCode.STAGE_UNAVAILABLE if "closed" in str(exc)
                              else ErrorCode.INTERNAL).value,
                     "message": f"could not start the response: {exc}"}, self.clock()))
                return
            r.rid = h.request_id
            self._live[h.request_id] = "response"
            bind_ids(request_id=h.request_id)  # this task's log lines
            if r.cancel_reason is not None or self.closed:
                self._abort(h.request_id, r.cancel_reason or "disconnected")
            try:
                async for ev in (h.replay() if prepared is not None else h):
                    now = self.clock()
                    if ev.kind == "chunk":
                        if ev.stage == THINK:
                            think_chunks += 1
                        self.turns.chunk(r.response_id, ev.stage)
                        self.dispatch(self.session.response_chunk(r.response_id, ev.stage,
                                                                  ev.payload, now))
                    elif ev.kind == "done":
                        self.dispatch(self.session.response_finished(r.response_id, "completed",
                                                                     None, now))
                    elif ev.kind == "cancelled":
                        self.dispatch(self.session.response_finished(
                            r.response_id, "cancelled",
                            ev.error.to_wire() if ev.error else None, now))
                    else:
                        err = ev.error.to_wire() if ev.error is not None else \
                            {"code": ErrorCode.INTERNAL.value, "message": str(ev.reason or "failed")}
                        self.dispatch(self.session.response_finished(r.response_id, "failed",
                                                                     err, now))
            finally:
                self._live.pop(h.request_id, None)
        finally:
            self._responses.pop(r.response_id, None)
            self.stats["think_tokens"] += think_chunks
            if prepared is not None:
                metrics.prepared_reply("used", think_chunks)
            else:
                metrics.think_tokens_used(think_chunks)

    async def _transcribe(self, item_id: str, pcm: np.ndarray) -> None:
        params = {"sample_rate": LISTEN_RATE_HZ, **self.opt.transcribe_params}
        texts: list[str] = []
        error = None
        rid = None
        try:
            h = await self.pipeline.submit(None, entry=LISTEN, stream_input=True, params=params,
                                           deadline_s=self.opt.transcribe_deadline_s)
            rid = h.request_id
            self._live[rid] = "transcribe"
            step = LISTEN_RATE_HZ  # one second per message
            for i in range(0, max(pcm.size, 1), step):
                await h.send(np.ascontiguousarray(pcm[i:i + step]))
            await h.end_input()
            async for ev in h:
                if ev.kind == "chunk":
                    p = ev.payload
                    if isinstance(p, dict) and p.get("type") == FINAL and p.get("text"):
                        texts.append(str(p["text"]).strip())
                elif ev.kind != "done":
                    error = ev.error.to_wire() if ev.error is not None else \
                        {"code": ErrorCode.INTERNAL.value, "message": f"transcription {ev.kind}"}
        except Exception as exc:  # noqa: BLE001
            error = {"code": ErrorCode.INTERNAL.value, "message": f"transcription failed: {exc}"}
        finally:
            if rid is not None:
                self._live.pop(rid, None)
        if self.closed:
            return
        text = " ".join(t for t in texts if t)
        self.dispatch(self.session.transcription_result(item_id, text, self.clock(),
                                                        error=error))

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
            for lst in (self._listen,):
                if lst is not None:
                    lst.ended = True
            self._listen = None
            self._drop_prepared()
            for rid in list(self._live):
                self._abort(rid, "disconnected")
            for r in list(self._responses.values()):
                if r.cancel_reason is None:
                    r.cancel_reason = "disconnected"
            current = asyncio.current_task()
            tasks = [t for t in list(self._tasks) if t is not current]
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            # requests submitted while we were cancelling
            for rid in list(self._live):
                self._abort(rid, "disconnected")
            self._live.clear()
            pending = [t for t in self._tickets if not _ticket_done(t)]
            if pending:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.gather(*[_await(t) for t in pending],
                                                          return_exceptions=True),
                                           self.opt.abort_ack_timeout_s)
            self._tickets.clear()
            await self._forget_conversation()
            self._outbox.clear()
            if self.close_code is not None and self._on_close is not None:
                with contextlib.suppress(Exception):
                    await self._on_close(*self.close_code)
        finally:
            self.closed = True
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
