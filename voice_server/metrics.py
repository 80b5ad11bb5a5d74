"""Prometheus metrics: ``GET /metrics`` (text exposition format, no auth).

Two sources, so the hot path pays (almost) nothing:

* **Pipeline state, read at scrape time.**  :class:`PipelineCollector` turns
  ``pipeline.snapshot()`` (the coordinator's counters and the stats every
  stage process reports about twice a second) into metric families when
  Prometheus scrapes.  Nothing is recorded per message.

  ==================================== =====================================================
  ``voice_stage_held_requests``         requests a stage holds (queued or running); labels
                                        stage, group, replica
  ``voice_stage_waiting_requests``      queued, not yet in the running batch (AR stages)
  ``voice_stage_running_requests``      items in flight in the running batch (AR stages;
                                        other kinds: = held)
  ``voice_stage_last_batch_size``       size of the last step's batch
  ``voice_stage_batch_size``            histogram (counts) of batch sizes, buckets 1,2,4,..
  ``voice_stage_steps_total``           steps executed
  ``voice_stage_step_seconds_total``    time spent in steps
  ``voice_process_restarts_total``      supervisor restarts of a stage process (group, replica)
  ``voice_process_ready``               1 when the process reported ready
  ``voice_process_heartbeat_age_seconds``
  ``voice_process_tombstones``          abort tombstones the process keeps
  ``voice_shm_lent_bytes``              shared-memory bytes lent and not yet released
                                        (owner = group/replica or "coordinator")
  ``voice_shm_lent_buffers``            shared-memory buffers lent and not yet released
  ``voice_live_requests``               requests in the coordinator's live table
  ``voice_requests_total``              by outcome: submitted|completed|cancelled|failed
  ``voice_request_aborts_total``        aborts issued (barge-in, cancel, disconnect, ...)
  ``voice_request_errors_total``        failed requests by error code (closed set)
  ``voice_stage_busy_fraction``         share of the last 5 s a stage spent in steps
  ``voice_load``                        the load figure, 1.0 = full (voice_server.load:
                                        the highest of sessions / max_sessions and the
                                        recognition and think busy fractions)
  ``voice_session_places``              places taken (live sessions + handshakes) and
                                        ``voice_max_sessions``
  ``voice_recognition_queue``           recognition jobs waiting, by reading
                                        (transcript | early)
  ``voice_recognition_busy_fraction``   the recognition thread's busy share, last 5 s
  ``voice_early_readings_dropped_total`` early readings (peeks) dropped unrun under load
  ``voice_think_queue``                 think requests by state (waiting | running)
  ==================================== =====================================================

* **Per-turn latencies, recorded by the session runner** with a few calls
  into a :class:`TurnTimer` per event (a dict lookup and a clock read):

  ========================================== ==============================================
  ``voice_turn_end_of_utterance_seconds``     VAD ``speech_stopped`` received -> final
                                              transcript received
  ``voice_turn_first_token_seconds``          response started -> first text delta from
                                              the thinker
  ``voice_turn_first_audio_seconds``          end of user speech (``speech_stopped``
                                              received; label trigger="speech") or the
                                              response start for client-created responses
                                              (trigger="client") -> first audio sent to the
                                              client (an audio delta event, or an audio
                                              chunk handed to the transport)
  ``voice_turn_barge_in_seconds``             ``speech_started`` received -> the
                                              ``response.done`` (cancelled, turn_detected)
                                              sent
  ``voice_responses_total``                   response.done sent, by status
  ``voice_active_sessions``                   open sessions, by transport
  ``voice_sessions_total``                    sessions opened, by transport
  ========================================== ==============================================

Sessions per transport.  The label ``transport`` is ``"websocket"``,
``"webrtc"`` or a phone provider (``"twilio"``, ``"telnyx"``, ``"plivo"``,
``"exotel"``, ``"vonage"``).  A transport that drives a
:class:`voice_server.runner.SessionRunner` only passes
``SessionRunner(..., transport="webrtc")``: the runner registers the session
(:mod:`voice_server.session_registry`) which calls :func:`session_opened` /
:func:`session_closed` itself.  A transport that does not use a runner calls
the two functions directly, once each per session::

    from voice_server import metrics
    metrics.session_opened("twilio")
    try: ...
    finally: metrics.session_closed("twilio")

The turn metrics and session gauges live in one process-wide registry
(:data:`REGISTRY`); apps built in the same process (tests) share them.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from runtime.errors import ErrorCode
from runtime.models.voice_contract import FINAL, SPEECH_STARTED, SPEECH_STOPPED, THINK

from .load import Load, load_of

TRANSPORTS = ("websocket", "webrtc", "twilio", "telnyx", "plivo", "exotel", "vonage")
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0,
                   3.0, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)

REGISTRY = CollectorRegistry(auto_describe=True)

EOU = Histogram("voice_turn_end_of_utterance_seconds",
                "VAD speech_stopped received -> final transcript received",
                buckets=LATENCY_BUCKETS, registry=REGISTRY)
FIRST_TOKEN = Histogram("voice_turn_first_token_seconds",
                        "Response started -> first text delta from the thinker",
                        buckets=LATENCY_BUCKETS, registry=REGISTRY)
FIRST_AUDIO = Histogram("voice_turn_first_audio_seconds",
                        "End of user speech (or response start for client-created responses)"
                        " -> first audio sent to the client", ["trigger"],
                        buckets=LATENCY_BUCKETS, registry=REGISTRY)
BARGE_IN = Histogram("voice_turn_barge_in_seconds",
                     "speech_started received -> response.done (cancelled) sent",
                     buckets=LATENCY_BUCKETS, registry=REGISTRY)
RESPONSES = Counter("voice_responses", "response.done events sent, by status", ["status"],
                    registry=REGISTRY)
ACTIVE_SESSIONS = Gauge("voice_active_sessions", "Open sessions, by transport", ["transport"],
                        registry=REGISTRY)
SESSIONS = Counter("voice_sessions", "Sessions opened, by transport", ["transport"],
                   registry=REGISTRY)
PREPARED = Counter("voice_prepared_replies", "Replies generated before their turn was committed "
                   "(preemptive generation), by outcome", ["outcome"], registry=REGISTRY)
THINK_TOKENS = Counter("voice_think_tokens", "Think deltas generated for replies, by outcome: "
                       "used, or wasted (a prepared reply dropped)", ["outcome"], registry=REGISTRY)
for _o in ("used", "wasted"):
    PREPARED.labels(_o)
    THINK_TOKENS.labels(_o)
for _t in TRANSPORTS:  # every transport shows up, also at zero
    ACTIVE_SESSIONS.labels(_t)
    SESSIONS.labels(_t)
for _t in ("speech", "client"):
    FIRST_AUDIO.labels(_t)
for _s in ("completed", "cancelled", "failed", "incomplete"):
    RESPONSES.labels(_s)


def session_opened(transport: str) -> None:
    ACTIVE_SESSIONS.labels(transport).inc()
    SESSIONS.labels(transport).inc()


def session_closed(transport: str) -> None:
    ACTIVE_SESSIONS.labels(transport).dec()


class _Turn:
    """The moments of one response's turn (``time.monotonic()`` seconds; None:
    not reached).  ``ref`` is what first audio is timed from."""

    __slots__ = ("started", "ref", "trigger", "speech_started", "transcript", "first_token",
                 "last_token", "first_speak", "first_audio", "last_audio")

    def __init__(self, started: float, ref: float, trigger: str, speech_started: float | None,
                 transcript: float | None) -> None:
        self.started, self.ref, self.trigger = started, ref, trigger
        self.speech_started, self.transcript = speech_started, transcript
        self.first_token = self.last_token = self.first_speak = None
        self.first_audio = self.last_audio = None


class TurnTimer:
    """Per-session turn timing; the runner feeds it, it observes the histograms.

    Every method is O(1) and does not allocate on the common path.  Each
    ``observers`` callable (call records, traces) gets, when a turn's
    ``response.done`` is sent, its response id and the turn's moments in
    ``time.monotonic()`` seconds (None where the turn had no such moment):
    ``trigger`` (speech | client), ``speech_started`` and ``speech_stopped``
    (the caller's words), ``transcript`` (their final transcript),
    ``response_started`` (the end of the turn decided: the reply submitted),
    ``first_token``, ``last_token``, ``first_speak`` (the first synthesised
    chunk), ``first_audio``, ``last_audio`` (handed to the transport),
    ``done`` and ``barge_in_speech`` (the speech that cancelled it, for a
    barge-in); and the response's ``status`` and ``usage``.
    """

    __slots__ = ("speech_started_t", "stops", "unanswered_stop", "unanswered_start",
                 "last_final_t", "responses", "observers")

    def __init__(self) -> None:
        self.speech_started_t: float | None = None
        self.stops: deque = deque(maxlen=8)      # speech_stopped times awaiting a final
        self.unanswered_stop: float | None = None  # end of user speech not yet answered
        self.unanswered_start: float | None = None  # its start
        self.last_final_t: float | None = None   # the last final transcript's arrival
        self.responses: dict[str, _Turn] = {}
        self.observers: list[Callable[[str, dict], None]] = []

    def listen_event(self, ev: dict) -> None:
        t = ev.get("type")
        if t == SPEECH_STARTED:
            self.speech_started_t = time.monotonic()
        elif t == SPEECH_STOPPED:
            now = time.monotonic()
            self.stops.append(now)
            self.unanswered_stop, self.unanswered_start = now, self.speech_started_t
        elif t == FINAL and self.stops:
            self.last_final_t = time.monotonic()
            EOU.observe(self.last_final_t - self.stops.popleft())

    def response_started(self, response_id: str) -> None:
        now = time.monotonic()
        if self.unanswered_stop is not None:
            turn = _Turn(now, self.unanswered_stop, "speech", self.unanswered_start,
                         self.last_final_t)
            self.unanswered_stop = None
        else:
            turn = _Turn(now, now, "client", None, None)
        if len(self.responses) > 32:  # responses whose done never went out (closed session)
            self.responses.clear()
        self.responses[response_id] = turn

    def chunk(self, response_id: str, stage: str) -> None:
        r = self.responses.get(response_id)
        if r is None:
            return
        if stage == THINK:
            r.last_token = time.monotonic()
            if r.first_token is None:
                r.first_token = r.last_token
                FIRST_TOKEN.observe(r.first_token - r.started)
        elif r.first_speak is None:
            r.first_speak = time.monotonic()

    def audio_sent(self, response_id: str) -> None:
        r = self.responses.get(response_id)
        if r is None:
            return
        r.last_audio = time.monotonic()
        if r.first_audio is None:
            r.first_audio = r.last_audio
            FIRST_AUDIO.labels(r.trigger).observe(r.first_audio - r.ref)

    def event_sent(self, ev: dict) -> None:
        t = ev.get("type")
        if t is None or not t.startswith("response."):
            return
        if t.endswith("audio.delta"):  # response.output_audio.delta | response.audio.delta
            self.audio_sent(ev.get("response_id"))
        elif t == "response.done":
            resp = ev.get("response") or {}
            status = resp.get("status") or "unknown"
            RESPONSES.labels(status).inc()
            r = self.responses.pop(resp.get("id"), None)
            details = resp.get("status_details") or {}
            barge_in = status == "cancelled" and details.get("reason") == "turn_detected" \
                and self.speech_started_t is not None
            if barge_in:
                BARGE_IN.observe(time.monotonic() - self.speech_started_t)
            if self.observers and r is not None:
                moments = {"trigger": r.trigger, "speech_started": r.speech_started,
                           "speech_stopped": r.ref if r.trigger == "speech" else None,
                           "transcript": r.transcript, "response_started": r.started,
                           "first_token": r.first_token, "last_token": r.last_token,
                           "first_speak": r.first_speak, "first_audio": r.first_audio,
                           "last_audio": r.last_audio, "done": time.monotonic(),
                           "barge_in_speech": self.speech_started_t if barge_in else None,
                           "status": status, "reason": details.get("reason"),
                           "usage": resp.get("usage")}
                for observe in self.observers:
                    observe(resp.get("id"), moments)


# --------------------------------------------------------------------- scrape-time view
class PipelineCollector(Collector):
    """Metric families from ``pipeline.snapshot()``, computed at scrape time;
    with ``places`` (the pipeline -> places taken among ``max_sessions``: the
    session registry, which imports this module) the load families too."""

    def __init__(self, pipeline, places: Callable[[Any], int] | None = None,
                 max_sessions: int = 0) -> None:
        self._pipeline = pipeline
        self._places = places
        self._max_sessions = max_sessions

    def _get_pipeline(self):
        p = self._pipeline
        return p() if callable(p) and not hasattr(p, "snapshot") else p

    def describe(self) -> Iterable:
        return []  # families depend on the pipeline; no auto-describe at registration

    def collect(self) -> Iterable:
        p = self._get_pipeline()
        if p is None or getattr(p, "closed", False):
            return []
        try:
            snap = p.snapshot()
        except Exception:  # noqa: BLE001 - a scrape must not break the server
            return []
        out = list(_families(snap))
        if self._places is not None:
            out += _load_families(load_of(snap, self._places(p), self._max_sessions))
        return out


def _families(snap: dict[str, Any]):
    sl = ["stage", "group", "replica"]
    held = GaugeMetricFamily("voice_stage_held_requests",
                             "Requests a stage holds (queued or running)", labels=sl)
    waiting = GaugeMetricFamily("voice_stage_waiting_requests",
                                "Requests queued at a stage, not yet running", labels=sl)
    running = GaugeMetricFamily("voice_stage_running_requests",
                                "Items in flight in a stage's running batch", labels=sl)
    last_batch = GaugeMetricFamily("voice_stage_last_batch_size",
                                   "Batch size of the stage's last step", labels=sl)
    batch = HistogramMetricFamily("voice_stage_batch_size", "Batch sizes of a stage's steps",
                                  labels=sl)
    steps = CounterMetricFamily("voice_stage_steps", "Steps a stage executed", labels=sl)
    step_s = CounterMetricFamily("voice_stage_step_seconds", "Time a stage spent in steps",
                                 labels=sl)
    busy = GaugeMetricFamily("voice_stage_busy_fraction",
                             "Share of the last 5 s a stage spent in steps", labels=sl)
    pl = ["group", "replica"]
    restarts = CounterMetricFamily("voice_process_restarts",
                                   "Supervisor restarts of a stage process", labels=pl)
    ready = GaugeMetricFamily("voice_process_ready", "1 when the stage process is ready",
                              labels=pl)
    hb = GaugeMetricFamily("voice_process_heartbeat_age_seconds",
                           "Seconds since the process's last heartbeat", labels=pl)
    tomb = GaugeMetricFamily("voice_process_tombstones", "Abort tombstones the process keeps",
                             labels=pl)
    node = GaugeMetricFamily("voice_process_node", "1 per stage replica, labelled with the node it "
                             "runs on (host name, or Ray node id and address)", labels=pl + ["node", "node_ip"])
    lent_b = GaugeMetricFamily("voice_shm_lent_bytes",
                               "Shared-memory bytes lent and not yet released", labels=["owner"])
    lent_n = GaugeMetricFamily("voice_shm_lent_buffers",
                               "Shared-memory buffers lent and not yet released",
                               labels=["owner"])
    for key, proc in sorted((snap.get("processes") or {}).items()):
        group, _, replica = key.partition("/")
        plv = [group, replica]
        restarts.add_metric(plv, proc.get("restarts", 0) or 0)
        ready.add_metric(plv, 1.0 if proc.get("ready") else 0.0)
        hb.add_metric(plv, (proc.get("heartbeat_age_ms") or 0.0) / 1000.0)
        tomb.add_metric(plv, proc.get("tombstones", 0) or 0)
        node.add_metric(plv + [str(proc.get("node") or ""), str(proc.get("node_ip") or "")], 1.0)
        pool = proc.get("pool") or {}
        lent_b.add_metric([key], pool.get("lent_bytes", 0) or 0)
        lent_n.add_metric([key], pool.get("lent", 0) or 0)
        for stage, st in sorted((proc.get("stages") or {}).items()):
            lv = [stage, group, replica]
            h = st.get("held", 0) or 0
            held.add_metric(lv, h)
            if "waiting" in st:
                waiting.add_metric(lv, st.get("waiting") or 0)
            running.add_metric(lv, st["running"] if "running" in st else h)
            last_batch.add_metric(lv, st.get("last_batch_size", 0) or 0)
            steps.add_metric(lv, st.get("steps", 0) or 0)
            step_s.add_metric(lv, st.get("step_time_s", 0.0) or 0.0)
            busy.add_metric(lv, st.get("busy_fraction", 0.0) or 0.0)
            sizes = {int(k): int(v) for k, v in (st.get("batch_sizes") or {}).items()}
            buckets = [(str(b), sum(n for s, n in sizes.items() if s <= b))
                       for b in BATCH_BUCKETS]
            buckets.append(("+Inf", sum(sizes.values())))
            batch.add_metric(lv, buckets, sum_value=sum(s * n for s, n in sizes.items()))
    pool = snap.get("coordinator_pool") or {}
    lent_b.add_metric(["coordinator"], pool.get("lent_bytes", 0) or 0)
    lent_n.add_metric(["coordinator"], pool.get("lent", 0) or 0)
    yield from (held, waiting, running, last_batch, batch, steps, step_s, busy, restarts, ready, hb,
                tomb, node, lent_b, lent_n)

    live = GaugeMetricFamily("voice_live_requests", "Requests in the coordinator's live table")
    live.add_metric([], snap.get("live_requests", 0) or 0)
    yield live
    c = snap.get("counters") or {}
    req = CounterMetricFamily("voice_requests", "Pipeline requests by outcome", labels=["outcome"])
    for k in ("submitted", "completed", "cancelled", "failed"):
        req.add_metric([k], c.get(k, 0) or 0)
    yield req
    ab = CounterMetricFamily("voice_request_aborts", "Aborts issued to the pipeline")
    ab.add_metric([], c.get("aborts", 0) or 0)
    yield ab
    err = CounterMetricFamily("voice_request_errors", "Failed requests by error code",
                              labels=["code"])
    by_code = dict(c.get("errors_by_code") or {})
    for code in ErrorCode:
        err.add_metric([code.value], by_code.pop(code.value, 0))
    for code, n in sorted(by_code.items()):
        err.add_metric([str(code)], n)
    yield err


def _load_families(load: Load):
    fig = GaugeMetricFamily("voice_load", "The load figure, 1.0 = full: the highest of "
                            "sessions / max_sessions and the recognition and think busy fractions")
    fig.add_metric([], load.figure)
    places = GaugeMetricFamily("voice_session_places", "Places taken among max_sessions "
                               "(live sessions + handshakes in flight)")
    places.add_metric([], load.sessions)
    cap = GaugeMetricFamily("voice_max_sessions", "Sessions admitted at most (max_sessions)")
    cap.add_metric([], load.max_sessions)
    rq = GaugeMetricFamily("voice_recognition_queue", "Recognition jobs waiting, by reading",
                           labels=["reading"])
    rq.add_metric(["transcript"], load.recognition_queued)
    rq.add_metric(["early"], load.recognition_queued_early)
    rb = GaugeMetricFamily("voice_recognition_busy_fraction",
                           "The recognition thread's busy share of the last 5 s")
    rb.add_metric([], load.recognition_busy)
    dropped = CounterMetricFamily("voice_early_readings_dropped",
                                  "Early readings (peeks) dropped unrun under load")
    dropped.add_metric([], load.early_dropped)
    tq = GaugeMetricFamily("voice_think_queue", "Think requests, by state", labels=["state"])
    tq.add_metric(["waiting"], load.think_waiting)
    tq.add_metric(["running"], load.think_running)
    yield from (fig, places, cap, rq, rb, dropped, tq)


def render(pipeline, places: Callable[[Any], int] | None = None, max_sessions: int = 0) -> bytes:
    """The exposition text: process-wide turn/session metrics + this pipeline's view."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(PipelineCollector(pipeline, places, max_sessions))
    return generate_latest(REGISTRY) + generate_latest(reg)


def routes(pipeline, settings=None, path: str = "/metrics",
           places: Callable[[Any], int] | None = None) -> list[Route]:
    """``places``: the pipeline -> places taken (``SessionRegistry.places``),
    for the load families (app.py passes it)."""
    max_sessions = int(getattr(settings, "max_sessions", 0) or 0)

    async def metrics(request: Request) -> Response:
        return Response(render(pipeline, places, max_sessions), media_type=CONTENT_TYPE_LATEST)
    return [Route(path, metrics, methods=["GET"])]


__all__ = ["REGISTRY", "PipelineCollector", "TurnTimer", "render", "routes", "session_opened",
           "session_closed", "TRANSPORTS"]


def prepared_reply(outcome: str, think_tokens: int) -> None:
    """A prepared reply was adopted ("used") or dropped ("wasted")."""
    PREPARED.labels(outcome).inc()
    THINK_TOKENS.labels(outcome).inc(think_tokens)


def think_tokens_used(n: int) -> None:
    THINK_TOKENS.labels("used").inc(n)
