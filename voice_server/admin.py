"""Admin endpoints: the coordinator's view of a request, and the live sessions.

    GET /v1/requests/{id}   the coordinator's record of a runtime request (live, or one
                            of the last 4096 finished): state, entry, route, reason,
                            error, per-stage progress (chunks, done, queue/compute ms),
                            timings, and held_by (the stage processes that hold it now)
    GET /v1/sessions        {"object": "list", "draining": bool, "data": [{"id",
                            "transport", "state", "active_response_id", "started_at"
                            (unix seconds), "age_s", "live_requests" {id: kind},
                            "model"}]}
    GET /v1/runtime         the runtime at a glance: {"pid" (this server process),
                            "sessions", "draining", "live_requests", "counters",
                            "coordinator_pool", "processes" {"group/replica": {"pid",
                            "ready", "restarts", "node" (host name, or the Ray node id),
                            "node_ip" (Ray), "heartbeat_age_ms", "held", "pool",
                            "tombstones", "stages"}}, "shm_prefix", "shm_segments",
                            "load" (voice_server.load: sessions and max_sessions,
                            recognition queue and busy share, think queue and busy
                            share, and the one "figure", 1.0 = full)}:
                            what an operator (or benchmarks/soak.py, from another
                            process) checks for leaks: requests left, buffers lent,
                            segments in /dev/shm, stage pids to watch

Auth, checked before anything else:

* Keys come from ``settings.admin_keys`` (YAML ``extra.server.admin_keys``) or env
  ``VOICE_AGENT_ADMIN_KEYS=k1,k2`` -- separate from the API keys: an API key
  lets a caller talk to the agent, an admin key lets it see everybody's
  sessions.  Sent as ``Authorization: Bearer KEY``; compared in constant time
  (:func:`voice_server.transports.access.key_matches`).
* With admin keys configured: no key or an unknown one -> 401; a valid API key
  that is not an admin key -> 403.
* With NO admin key configured the endpoints answer only when the connection
  came in on a loopback address (a server bound to 127.0.0.1 / ::1, the
  default); otherwise 403.  Behind a reverse proxy on the same host every
  request arrives over loopback: configure an admin key there.
"""

from __future__ import annotations

import os

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .load import load_of
from .session_registry import registry_for
from .transports.access import bearer_token, is_loopback, key_matches


def _err(status: int, code: str, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"type": "invalid_request_error", "code": code,
                                   "message": message, "param": None}},
                        status_code=status, headers=headers)


def check_admin(request: Request, settings) -> JSONResponse | None:
    """None when the caller may use the admin endpoints, else the error response."""
    admin_keys = list(getattr(settings, "admin_keys", None) or [])
    if not admin_keys:
        server = request.scope.get("server") or (None, None)
        if is_loopback(server[0]):
            return None
        return _err(403, "admin_disabled",
                    "Admin endpoints are disabled: no admin key is configured "
                    "(VOICE_AGENT_ADMIN_KEYS) and the server is not bound to loopback.")
    key = bearer_token(request.headers)
    if not key:
        return _err(401, "missing_admin_key", "Send 'Authorization: Bearer ADMIN_KEY'.",
                    {"WWW-Authenticate": "Bearer"})
    if key_matches(key, admin_keys):
        return None
    if key_matches(key, getattr(settings, "api_keys", None) or []):
        return _err(403, "admin_key_required", "This key is not an admin key.")
    return _err(401, "invalid_admin_key", "Incorrect admin key.", {"WWW-Authenticate": "Bearer"})


def routes(pipeline, settings) -> list[Route]:
    def live():
        return pipeline() if callable(pipeline) and not hasattr(pipeline, "status") else pipeline

    async def request_status(request: Request):
        denied = check_admin(request, settings)
        if denied is not None:
            return denied
        raw = request.path_params["rid"]
        try:
            rid = int(raw)
        except ValueError:
            return _err(400, "invalid_request_id", f"Request ids are integers, not {raw!r}.")
        p = live()
        st = p.status(rid) if p is not None else None
        if st is None:
            return _err(404, "request_not_found",
                        f"No request {rid} (unknown, or finished too long ago).")
        return JSONResponse(st)

    async def sessions(request: Request):
        denied = check_admin(request, settings)
        if denied is not None:
            return denied
        reg = registry_for(live())
        return JSONResponse({"object": "list", "draining": reg.draining, "data": reg.list()})

    async def runtime(request: Request):
        denied = check_admin(request, settings)
        if denied is not None:
            return denied
        p = live()
        reg = registry_for(p)
        body = {"pid": os.getpid(), "sessions": len(reg), "draining": reg.draining}
        snap = p.snapshot() if p is not None else {}
        if p is not None:
            body.update(snap)
            body["shm_prefix"] = p.shm_prefix
            body["shm_segments"] = len(p.segments())
        body["load"] = load_of(snap, reg.places, getattr(settings, "max_sessions", 0)).to_dict()
        return JSONResponse(body)

    return [Route("/v1/requests/{rid}", request_status, methods=["GET"]),
            Route("/v1/sessions", sessions, methods=["GET"]),
            Route("/v1/runtime", runtime, methods=["GET"])]


__all__ = ["routes", "check_admin"]
