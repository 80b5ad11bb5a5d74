"""The health endpoints: ``/health`` (every replica ready), ``/health/ready``
(may take a new call) and ``/health/live`` (should not be restarted).

The verdicts are runtime/health.py's; this module only answers them over HTTP
(200 yes, 503 no) and asks no key, so a load balancer or an orchestrator can
probe.  docs/CLIENTS.md lists the status each gives during a replica restart.
"""

from __future__ import annotations

from typing import Any, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .context import ApiContext

NOT_RUNNING = {"status": "unavailable", "reason": "the pipeline is not running"}


async def health(ctx: ApiContext, request: Request) -> Response:
    """Every replica of every stage ready: 200, else 503 (the original meaning, kept)."""
    p = ctx.running()
    if p is None:
        return JSONResponse(NOT_RUNNING, status_code=503)
    snap = p.snapshot()
    procs = {k: {"ready": v["ready"], "pid": v["pid"], "restarts": v["restarts"],
                 "heartbeat_age_ms": v["heartbeat_age_ms"], "held": len(v.get("held") or ())}
             for k, v in snap["processes"].items()}
    h = p.health(float(ctx.setting("readiness_grace_s")))
    body = {"status": "ok" if h.all_ready else "unavailable", "pipeline": p.cfg.name,
            "ready": h.ready, "live": h.live,
            "live_requests": snap["live_requests"], "counters": snap["counters"], "processes": procs}
    return JSONResponse(body, status_code=200 if h.all_ready else 503)


async def ready(ctx: ApiContext, request: Request) -> Response:
    """May this server take a new call (runtime/health.py)?  200 ready, 503 not."""
    return _probe(ctx, lambda h: h.ready, "ready", "not_ready")


async def live(ctx: ApiContext, request: Request) -> Response:
    """Should this server process be restarted (runtime/health.py)?  200 no, 503 yes."""
    return _probe(ctx, lambda h: h.live, "live", "dead")


def _probe(ctx: ApiContext, answer: Callable[[Any], bool], yes: str, no: str) -> Response:
    p = ctx.running()
    if p is None:
        return JSONResponse(NOT_RUNNING, status_code=503)
    h = p.health(float(ctx.setting("readiness_grace_s")))
    ok = answer(h)
    return JSONResponse({"status": yes if ok else no, **h.to_json()}, status_code=200 if ok else 503)


__all__ = ["health", "ready", "live"]
