"""A session's think requests: words prefilled while the caller speaks, the
reply prepared during the pause, the reply itself, and the last ``forget``.

Every think request names its conversation (the session), whose cells the
think stage may keep for the next turn until the session closes, and all of
them reach the same think replica (``affinity``), where those cells are.
A prepared reply (:mod:`voice_server.prepared_reply`) is adopted by the
response that asks exactly what it asked, and aborted otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Optional

from runtime.errors import ErrorCode, PipelineClosed
from runtime.executor import CONVERSATION, FORGET, PREFILL_ONLY, PREFILL_WORDS
from runtime.models.voice_contract import (SPEAK_LANGUAGE, SPEAK_SPEED, SPEAK_VOICE, SPOKEN_REPLY_ROUTE, TEXT_REPLY_ROUTE,
                                           THINK, ThinkRequest, think_request)

from . import metrics
from .logs import bind_ids
from .prepared_reply import PreparedReply, request_key
from .runner_host import RequestKind, RunnerHost
from .session import PrefillConversation, PrepareReply, StartResponse

log = logging.getLogger("voice_server.runner")


@dataclass
class ActiveResponse:
    response_id: str
    cmd: StartResponse
    rid: Optional[int] = None              # its pipeline request, once submitted
    cancel_reason: Optional[str] = None    # set by a cancel, before or after submission
    task: Optional[asyncio.Task] = None
    think_chunks: int = 0                  # think chunks forwarded (token accounting)


def chat_messages(c: StartResponse | PrepareReply | PrefillConversation) -> list:
    """The conversation after the instructions as its system message (first,
    also before the system items a client put in the conversation)."""
    msgs = list(c.messages)
    if c.instructions:
        msgs = [{"role": "system", "content": c.instructions}] + msgs
    return msgs


def reply_request(c: StartResponse | PrepareReply) -> tuple[ThinkRequest, list[str], dict]:
    """The think(+speak) request a response (or a prepared reply) submits: the
    conversation, the instructions as its system message, and the tools
    (already in the chat-completions shape); a spoken reply's params carry the
    session's voice and pace to the speak stage, and the caller's language
    where it is known (the speak stage picks its voice when the client chose none)."""
    spoken = "audio" in c.modalities
    params = {SPEAK_VOICE: c.voice, SPEAK_SPEED: c.speed} if spoken else {}
    if spoken and c.language:
        params[SPEAK_LANGUAGE] = c.language
    return (think_request(chat_messages(c), c.max_tokens, c.tools, c.tool_choice, include_usage=True),
            list(SPOKEN_REPLY_ROUTE if spoken else TEXT_REPLY_ROUTE), params)


class Replies:
    def __init__(self, host: RunnerHost) -> None:
        self.host = host
        self.active: dict[str, ActiveResponse] = {}   # response id -> the response
        self._prepared: PreparedReply | None = None   # preemptive generation (prepared_reply.py)
        self._thought = False    # a think request was sent: the stage may keep its cells
        self._prefilling: asyncio.Task | None = None  # PrefillConversation in flight

    # ------------------------------------------------------------ submission
    async def _submit_think(self, payload: ThinkRequest, route: list[str], params: dict | None = None):
        host = self.host
        self._thought = True
        return await host.pipeline.submit(payload, entry=THINK, route=route,
                                          params={CONVERSATION: host.session.session_id, **(params or {})},
                                          deadline_s=host.opt.response_deadline_s,
                                          affinity=host.session.session_id)

    async def forget_conversation(self) -> None:
        """The session is over: the think stage drops what it keeps of it (the
        request ends at once; its end is not waited for)."""
        if not self._thought:
            return
        host = self.host
        with contextlib.suppress(Exception):   # a closed pipeline keeps nothing either
            await host.pipeline.submit({}, entry=THINK, route=[THINK],
                                       params={FORGET: True, CONVERSATION: host.session.session_id},
                                       affinity=host.session.session_id)

    # ------------------------------------------------------------ while the caller speaks
    def prefill(self, c: PrefillConversation) -> None:
        """Fire and forget: the think stage keeps what it decoded for the reply's
        prompt (an engine that cannot keep it ends the request at once)."""
        host = self.host
        msgs = chat_messages(c) + ([{"role": "user", "content": c.words}] if c.words else [])
        if host.draining or host.closed or not msgs or \
                (self._prefilling is not None and not self._prefilling.done()):
            return
        host.stats["prefills"] += 1

        async def run() -> None:
            rid = None
            try:
                h = await self._submit_think(think_request(msgs, None, c.tools, c.tool_choice),
                                             [THINK], {PREFILL_ONLY: True, PREFILL_WORDS: bool(c.words)})
                rid = h.request_id
                host.live[rid] = RequestKind.PREFILL
                async for _ in h:
                    pass
            except Exception as exc:  # noqa: BLE001 - only time is lost: the reply decodes it all
                log.debug("conversation prefill failed: %r", exc)
            finally:
                if rid is not None:
                    host.live.pop(rid, None)
        self._prefilling = host.spawn(run(), "prefill")

    # ------------------------------------------------------------ during the pause
    def prepare(self, c: PrepareReply) -> None:
        host = self.host
        self.drop_prepared()
        if host.draining or host.closed:
            return
        payload, route, params = reply_request(c)
        p = PreparedReply(request_key(payload, route, params))
        self._prepared = p
        host.stats["prepared"] += 1

        async def submit():
            h = await self._submit_think(payload, route, params)
            host.live[h.request_id] = RequestKind.PREPARED
            if self._prepared is not p and not p.adopted:   # dropped while submitting
                host.abort_request(h.request_id, "turn_continues")
            return h

        async def hold():
            try:
                await p.run(submit)
            finally:
                if p.request_id is not None:
                    host.live.pop(p.request_id, None)
        p.task = host.spawn(hold(), "prepared-reply")

    def drop_prepared(self) -> None:
        host = self.host
        p, self._prepared = self._prepared, None
        if p is None:
            return
        if p.request_id is not None and p.request_id in host.live:
            host.abort_request(p.request_id, "turn_continues")   # nothing of it was sent
        host.stats["prepared_wasted"] += 1
        host.stats["think_tokens_wasted"] += p.think_chunks
        host.stats["think_tokens"] += p.think_chunks
        metrics.prepared_reply("wasted", p.think_chunks)

    def _adopt_prepared(self, key: str) -> PreparedReply | None:
        p = self._prepared
        if p is None:
            return None
        if p.key != key:
            self.drop_prepared()               # the committed turn asks something else
            return None
        self._prepared = None
        p.adopted = True
        self.host.stats["prepared_used"] += 1
        return p

    # ------------------------------------------------------------ the reply
    def start(self, c: StartResponse) -> None:
        host = self.host
        r = ActiveResponse(c.response_id, c)
        self.active[c.response_id] = r
        host.turns.response_started(c.response_id)
        r.task = host.spawn(self._run(r), "response")

    def cancel(self, response_id: str, reason: str) -> None:
        r = self.active.get(response_id)
        if r is None:
            return
        if r.cancel_reason is None:
            r.cancel_reason = reason
        if r.rid is not None and r.rid in self.host.live:
            self.host.abort_request(r.rid, reason)

    def cancel_all(self, reason: str) -> None:
        """The session is closing: responses not yet submitted never will be."""
        for r in list(self.active.values()):
            if r.cancel_reason is None:
                r.cancel_reason = reason

    def _finish(self, response_id: str, status: str, error: dict | None) -> None:
        host = self.host
        host.dispatch(host.session.response_finished(response_id, status, error, host.clock()))

    async def _submit_or_adopt(self, r: ActiveResponse, payload: ThinkRequest, route: list[str],
                               params: dict):
        """The reply's request handle, adopting the prepared reply when it asks the
        same; None when the response failed to start (already reported)."""
        prepared = self._adopt_prepared(request_key(payload, route, params))
        try:
            if prepared is None:
                return None, await self._submit_think(payload, route, params)
            await prepared.submitted.wait()
            if prepared.error is not None:
                raise prepared.error
            return prepared, prepared
        except Exception as exc:  # noqa: BLE001 - every start failure fails this response only
            code = ErrorCode.STAGE_UNAVAILABLE if isinstance(exc, PipelineClosed) else ErrorCode.INTERNAL
            self._finish(r.response_id, "failed",
                         {"code": code.value, "message": f"could not start the response: {exc}"})
            return prepared, None

    async def _forward_events(self, r: ActiveResponse, events) -> None:
        """The reply's events into the session, counting its think chunks."""
        host = self.host
        async for ev in events:
            now = host.clock()
            if ev.kind == "chunk":
                if ev.stage == THINK:
                    r.think_chunks += 1
                host.turns.chunk(r.response_id, ev.stage)
                host.dispatch(host.session.response_chunk(r.response_id, ev.stage, ev.payload, now))
            elif ev.kind == "done":
                self._finish(r.response_id, "completed", None)
            elif ev.kind == "cancelled":
                self._finish(r.response_id, "cancelled", ev.error.to_wire() if ev.error else None)
            else:
                self._finish(r.response_id, "failed", ev.error.to_wire() if ev.error is not None else
                             {"code": ErrorCode.INTERNAL.value, "message": str(ev.reason or "failed")})

    async def _run(self, r: ActiveResponse) -> None:
        host = self.host
        payload, route, params = reply_request(r.cmd)
        prepared = None
        try:
            if r.cancel_reason is not None:
                return  # cancelled before it was submitted: the session already said so
            if host.draining:  # the server is shutting down: no new turns
                self._finish(r.response_id, "failed", {"code": ErrorCode.STAGE_UNAVAILABLE.value,
                                                       "message": "the server is shutting down"})
                return
            prepared, h = await self._submit_or_adopt(r, payload, route, params)
            if h is None:
                return
            r.rid = h.request_id
            host.live[h.request_id] = RequestKind.RESPONSE
            bind_ids(request_id=h.request_id)  # this task's log lines
            if r.cancel_reason is not None or host.closed:
                host.abort_request(h.request_id, r.cancel_reason or "disconnected")
            try:
                await self._forward_events(r, h.replay() if prepared is not None else h)
            finally:
                host.live.pop(h.request_id, None)
        finally:
            self.active.pop(r.response_id, None)
            host.stats["think_tokens"] += r.think_chunks
            if prepared is not None:
                metrics.prepared_reply("used", r.think_chunks)
            else:
                metrics.think_tokens_used(r.think_chunks)
