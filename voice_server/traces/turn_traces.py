"""One OpenTelemetry trace per turn, drawn from the moments the runner's
:class:`voice_server.metrics.TurnTimer` already takes.

When the turn's ``response.done`` goes out the timer hands its moments to
:meth:`SessionTraces.turn`, which writes the whole trace at once with the
spans' real start and end times (nothing is opened while the turn runs, so
the hot path pays nothing more than the timer's clock reads)::

    turn                      the caller's speech start (or the reply's start) -> done
      vad.end_of_speech       speech start -> the VAD's end of speech
      asr                     end of speech -> the final transcript
      turn.end_decision       end of speech -> the reply submitted (the turn is over)
      think                   reply submitted -> last token; ttft_ms, tokens
      speak                   first token -> first synthesised chunk
      transport.send          first audio handed to the transport -> the last
      barge_in.abort          a cancelled reply's abort -> every stage's ack; reason,
                              request.live (false: the reply had left the pipeline
                              whole and only its paced audio was cut: no acks)
        abort.ack             one per stage process: abort -> its ack; process

Every span carries ``session.id`` and ``response.id``.  A barge-in trace is
written once the abort's acks are in (at most ``ACK_WAIT_S`` later).

The SDK is imported only by :class:`Tracing`, which the server makes only
when an OTLP endpoint is configured (or a test hands it an exporter): with
tracing off nothing of OpenTelemetry is loaded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from .settings import TraceSettings

log = logging.getLogger("voice_server.traces")

TURN, VAD, ASR, DECISION, THINK, SPEAK, SEND, ABORT, ACK = (
    "turn", "vad.end_of_speech", "asr", "turn.end_decision", "think", "speak", "transport.send",
    "barge_in.abort", "abort.ack")
SPAN_ORDER = (VAD, ASR, DECISION, THINK, SPEAK, SEND, ABORT)   # by start time
ACK_WAIT_S = 2.0


class Tracing:
    """The server's tracer provider (imports the SDK)."""

    def __init__(self, settings: TraceSettings, exporter: Any = None) -> None:
        """``exporter``: where spans go instead of OTLP (tests: an in-memory one,
        exported synchronously)."""
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        self.provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}))
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            # a background thread exports: the event loop only queues finished spans
            self.provider.add_span_processor(
                BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otlp_endpoint)))
        else:
            self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("voice_server.traces")
        self.in_context = trace.set_span_in_context
        self._offset_ns = time.time_ns() - time.monotonic_ns()   # monotonic -> epoch

    def ns(self, t_monotonic: float) -> int:
        return int(t_monotonic * 1e9) + self._offset_ns

    def session(self, session_id: str) -> "SessionTraces":
        return SessionTraces(self, session_id)

    def shutdown(self) -> None:
        """Export what is queued and stop (blocking: call it off the event loop)."""
        self.provider.shutdown()


class SessionTraces:
    """One session's turns as traces."""

    def __init__(self, tracing: Tracing, session_id: str) -> None:
        self.tracing = tracing
        self.session_id = session_id
        self._abort: tuple[Any, str, float] | None = None   # the reply's abort: ticket, reason, when

    def response_aborted(self, ticket: Any, reason: str) -> None:
        """The active reply's request was aborted (its response.done follows)."""
        self._abort = (ticket, reason, time.monotonic())

    def turn(self, response_id: str, moments: dict) -> None:
        """TurnTimer's observer: the turn is over; write its trace (after the
        abort's acks, for a cancelled reply)."""
        abort, self._abort = self._abort, None
        if abort is None and moments.get("status") == "cancelled":
            # generated whole before the cut: only its paced audio stopped, no
            # request was left in the pipeline to abort, no stage acks
            abort = (None, moments.get("reason") or "", moments["done"])
        acked = getattr(abort[0], "acked", None) if abort is not None else None
        if acked is None or acked.done():
            self._write(response_id, moments, abort)
        else:
            asyncio.ensure_future(self._write_after_acks(response_id, moments, abort, acked))

    async def _write_after_acks(self, response_id: str, moments: dict, abort: tuple,
                                acked: asyncio.Future) -> None:
        try:
            await asyncio.wait_for(asyncio.shield(acked), ACK_WAIT_S)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - draw what came
            pass
        self._write(response_id, moments, abort)

    def _write(self, response_id: str, m: dict, abort: tuple | None) -> None:
        tr = self.tracing
        ids = {"session.id": self.session_id, "response.id": response_id}
        start = m.get("speech_started") or m["response_started"]
        end = m["done"]
        root = tr.tracer.start_span(TURN, start_time=tr.ns(start), attributes={
            **ids, "turn.trigger": m.get("trigger") or "", "response.status": m.get("status") or ""})
        ctx = tr.in_context(root)

        def child(name: str, t0: float | None, t1: float | None, parent=ctx, **attrs: Any):
            if t0 is None or t1 is None:
                return None
            span = tr.tracer.start_span(name, context=parent, start_time=tr.ns(t0),
                                        attributes={**ids, **attrs})
            span.end(end_time=tr.ns(max(t0, t1)))
            return span

        usage = m.get("usage") or {}
        child(VAD, m.get("speech_started"), m.get("speech_stopped"))
        child(ASR, m.get("speech_stopped"), m.get("transcript"))
        child(DECISION, m.get("speech_stopped"), m["response_started"])
        think_attrs = {"tokens.output": int(usage.get("output_tokens") or 0),
                       "tokens.input": int(usage.get("input_tokens") or 0)}
        if m.get("first_token") is not None:
            think_attrs["ttft_ms"] = round((m["first_token"] - m["response_started"]) * 1000, 1)
        child(THINK, m["response_started"], m.get("last_token"), **think_attrs)
        child(SPEAK, m.get("first_token"), m.get("first_speak"))
        child(SEND, m.get("first_audio"), m.get("last_audio"))
        if abort is not None:
            end = max(end, self._abort_spans(child, abort))
        root.end(end_time=tr.ns(end))

    def _abort_spans(self, child, abort: tuple) -> float:
        """The abort and one span per stage process's ack; when the last came."""
        ticket, reason, t0 = abort
        acks = dict(getattr(ticket, "acked_at", {}) or {})
        last = max(acks.values(), default=t0)
        pending = sorted(f"{g}/{r}" for g, r in getattr(ticket, "expected", ()))
        span = child(ABORT, t0, last, reason=reason, **{"acks.pending": pending,
                                                        "request.live": ticket is not None})
        parent = self.tracing.in_context(span)
        for (group, replica), t in sorted(acks.items(), key=lambda kv: kv[1]):
            child(ACK, t0, t, parent=parent, process=f"{group}/{replica}",
                  ack_ms=round((t - t0) * 1000, 1))
        return last


__all__ = ["Tracing", "SessionTraces", "SPAN_ORDER", "TURN", "VAD", "ASR", "DECISION", "THINK",
           "SPEAK", "SEND", "ABORT", "ACK"]
