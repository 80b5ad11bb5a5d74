"""What every scheduler shares: per-request input assembly and the stage context.

A stage learns of a request from its first message; it knows which inputs to
wait for from the request's route (carried in the params), so stages stay
ignorant of the pipeline around them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from runtime.busy_window import BusyWindow
from runtime.errors import ErrorInfo
from runtime.executor import WorkItem


class StageContext(Protocol):
    """What the process loop offers a scheduler."""

    name: str

    def emit(self, rid: int, payload: Any, end: bool = False) -> None: ...
    def finish(self, rid: int) -> None: ...
    def fail(self, rid: int, error: BaseException | ErrorInfo) -> None: ...
    def expected_sources(self, rid: int, params: dict) -> set[str]: ...
    def poll_control(self) -> None: ...
    def is_dead(self, rid: int) -> bool: ...


@dataclass
class Pending:
    """A request's state at one stage."""

    rid: int
    params: dict
    expected: set[str]
    inputs: dict[str, list[Any]] = field(default_factory=dict)
    ended: set[str] = field(default_factory=set)
    t_arrive: float = field(default_factory=time.monotonic)
    t_start: float | None = None
    compute_s: float = 0.0
    n_out: int = 0

    def add(self, src: str, payload: Any, has_payload: bool, end: bool) -> None:
        if has_payload:
            self.inputs.setdefault(src, []).append(payload)
        if end:
            self.ended.add(src)

    @property
    def complete(self) -> bool:
        return self.expected <= self.ended

    def assembled(self) -> Any:
        """One value per source (a list when it sent several chunks); a dict for fan-in."""
        def one(src: str) -> Any:
            chunks = self.inputs.get(src, [])
            if len(chunks) == 1:
                return chunks[0]
            return chunks if chunks else None

        if len(self.expected) == 1:
            return one(next(iter(self.expected)))
        return {src: one(src) for src in sorted(self.expected)}

    def work_item(self) -> WorkItem:
        return WorkItem(self.rid, self.assembled(), self.params)


class Scheduler:
    """Base: holds requests; subclasses decide what one ``run_once`` executes."""

    kind = "base"

    def __init__(self, ctx: StageContext, executor: Any, cfg: Any) -> None:
        self.ctx = ctx
        self.executor = executor
        self.cfg = cfg
        self.requests: dict[int, Pending] = {}
        self.batch_sizes: dict[int, int] = {}
        self.steps = 0
        self.step_time_s = 0.0
        self.busy = BusyWindow()        # the steps' share of the last few seconds (stats)
        self.last_batch_size = 0

    # ---- input ---------------------------------------------------------------------
    def on_input(self, rid: int, src: str, payload: Any, has_payload: bool, end: bool,
                 params: dict | None) -> None:
        req = self.requests.get(rid)
        if req is None:
            params = params or {}
            req = Pending(rid, params, self.ctx.expected_sources(rid, params))
            self.requests[rid] = req
            self.on_new(req)
        elif params:
            # a later chunk's params update (RequestHandle.send): the executor
            # sees it on this chunk's WorkItem and after; the route stays
            req.params.update({k: v for k, v in params.items() if k != "_route"})
        self.accept(req, src, payload, has_payload, end)

    def on_new(self, req: Pending) -> None:
        pass

    def accept(self, req: Pending, src: str, payload: Any, has_payload: bool, end: bool) -> None:
        req.add(src, payload, has_payload, end)

    # ---- work ----------------------------------------------------------------------
    def has_work(self) -> bool:
        raise NotImplementedError

    def wait_hint(self) -> float | None:
        """Seconds until timed work is due (None: nothing timed)."""
        return None

    def run_once(self) -> None:
        raise NotImplementedError

    def wakeup_fd(self) -> int | None:
        """A descriptor the stage loop should poll: readable when work finished off-thread."""
        return None

    # ---- ends ----------------------------------------------------------------------
    def drop(self, rid: int) -> bool:
        """Abort or failure: forget the request everywhere; True if it was held."""
        self._leave(rid)
        return self.requests.pop(rid, None) is not None

    def done(self, rid: int) -> Pending | None:
        self._leave(rid)
        return self.requests.pop(rid, None)

    def _leave(self, rid: int) -> None:
        """A scheduler's own state for a request that ends (done or dropped)."""

    def _release(self, rid: int) -> None:
        """Give the executor's state for the request back; never takes the stage down."""
        try:
            self.executor.release(rid)
        except Exception:  # noqa: BLE001 - a failing release must not end the stage
            pass

    def held(self) -> list[int]:
        return list(self.requests)

    def record_batch(self, n: int, seconds: float) -> None:
        self.steps += 1
        self.step_time_s += seconds
        now = time.monotonic()
        self.busy.add(now - seconds, now)
        self.last_batch_size = n
        self.batch_sizes[n] = self.batch_sizes.get(n, 0) + 1

    def stats(self) -> dict:
        s = {"kind": self.kind, "held": len(self.requests), "steps": self.steps,
             "step_time_s": round(self.step_time_s, 6), "last_batch_size": self.last_batch_size,
             "busy_fraction": round(self.busy.fraction(time.monotonic()), 3),
             "batch_sizes": dict(self.batch_sizes)}
        try:
            executor_stats = self.executor.stats()
        except Exception:  # noqa: BLE001 - numbers for a status page must never fail a stage
            executor_stats = None
        if executor_stats:
            s["executor"] = executor_stats
        return s

    def deadline_expired(self, now: float) -> list[int]:
        limit = getattr(self.cfg, "deadline_s", None)
        if not limit:
            return []
        return [rid for rid, r in self.requests.items() if now - r.t_arrive > limit]
