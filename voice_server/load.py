"""The server's load at a glance: how close it is to refusing callers.

Read from ``pipeline.snapshot()`` (the stats each stage process reports
five times a second) and the session registry, when ``/v1/runtime`` or
``/metrics`` asks; nothing is recorded on the hot path.

The one ``figure`` is the highest of three shares, each 1.0 when that part
is full:

* sessions: live sessions plus handshakes in flight over ``max_sessions``
  (at 1.0 every transport refuses new callers: docs/CLIENTS.md);
* recognition: the listen stage's recognition thread's busy share of the
  last 5 s (its queue wait grows as 1 / (1 - busy): near 1 every caller's
  transcript is late, and early readings are dropped from 0.7 on);
* think: the think stage's steps' busy share of the last 5 s.

With several replicas of a stage the busiest counts (a caller is pinned to
one) and the queues add up.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from runtime.models.voice_contract import LISTEN, THINK


@dataclass(frozen=True)
class Load:
    """One reading of the load (module docstring): what an operator or an
    autoscaler compares with the callers' latency to place ``max_sessions``."""

    sessions: int                 # live sessions of every transport + handshakes in flight
    max_sessions: int
    recognition_queued: int       # transcripts (and pocketsphinx steps) waiting
    recognition_queued_early: int  # early readings (peeks) waiting
    recognition_busy: float       # busy share of the recognition thread, last 5 s
    early_dropped: int            # early readings dropped unrun so far (superseded, late, busy)
    think_waiting: int            # think requests queued, not yet in the running batch
    think_running: int
    think_busy: float             # busy share of the think stage's steps, last 5 s

    @property
    def figure(self) -> float:
        """The fullest part, 0..1 (more where max_sessions was lowered under live sessions)."""
        return round(max(self.sessions / max(self.max_sessions, 1), self.recognition_busy,
                         self.think_busy), 3)

    def to_dict(self) -> dict:
        return {**asdict(self), "figure": self.figure}


def load_of(snapshot: dict, places: int, max_sessions: int) -> Load:
    """The load in a ``pipeline.snapshot()`` (``{}``: no pipeline yet) with
    ``places`` of ``max_sessions`` taken (``SessionRegistry.places``)."""
    asr = [(st.get("executor") or {}).get("asr") or {} for st in _stages(snapshot, LISTEN)]
    think = _stages(snapshot, THINK)
    return Load(
        sessions=places, max_sessions=max_sessions,
        recognition_queued=sum(int(a.get("queued", 0)) for a in asr),
        recognition_queued_early=sum(int(a.get("queued_early", 0)) for a in asr),
        recognition_busy=max((float(a.get("busy_fraction", 0.0)) for a in asr), default=0.0),
        early_dropped=sum(int(a.get(k, 0)) for a in asr
                          for k in ("early_superseded", "early_late", "early_busy")),
        think_waiting=sum(int(st.get("waiting", 0)) for st in think),
        think_running=sum(int(st.get("running", 0)) for st in think),
        think_busy=max((float(st.get("busy_fraction", 0.0)) for st in think), default=0.0))


def _stages(snap: dict, name: str) -> list[dict]:
    """The stats of every replica of stage ``name``."""
    return [proc["stages"][name] for proc in (snap.get("processes") or {}).values()
            if name in (proc.get("stages") or {})]


__all__ = ["Load", "load_of"]
