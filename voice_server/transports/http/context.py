"""What every HTTP endpoint shares: the pipeline, the settings, and the checks
at the edge (key and Origin, body size and JSON, stages ready, deadline).

``pipeline`` is a running :class:`runtime.pipeline.Pipeline` or a
zero-argument callable returning one (or None while it is not up), so an app
that starts the pipeline in its lifespan can hand in
``lambda: app.state.pipeline``.  ``settings`` is a
:class:`voice_server.settings.ServerSettings`, a dict or None; a setting it
lacks (or leaves None) takes its value from ``DEFAULTS``.

:class:`ApiContext` is the one owner of that state; each endpoint family
(:mod:`.health`, :mod:`.models`, :mod:`.speech`, :mod:`.chat`) is a set of
functions handed it by :mod:`.routes`.
"""

from __future__ import annotations

import json
import os
from typing import Any

from starlette.requests import ClientDisconnect, Request

from runtime.errors import ErrorCode

from ..access import http_refusal
from .errors import ApiError

DEFAULTS = {
    "api_keys": None,               # None: env VOICE_AGENT_API_KEYS
    "allowed_origins": None,        # None: same host / loopback pages only
    "model": "voice-agent",
    "max_body_bytes": 1 << 20,
    "max_speech_chars": 4096,
    "max_prompt_chars": 200_000,
    "speech_sample_rate": 24000,
    "response_deadline_s": None,    # None: the pipeline's request_deadline_s
    "readiness_grace_s": 10.0,      # /health/ready: how long a replica may be re-created
}


class ApiContext:
    """The pipeline and the settings of one set of HTTP routes, and the checks
    every endpoint makes with them; an endpoint raises the ApiError a check gives."""

    def __init__(self, pipeline: Any, settings: Any = None) -> None:
        self._pipeline = pipeline   # a Pipeline, or a callable returning one (None while not up)
        self.settings = settings    # ServerSettings, a dict or None: read through setting()

    def setting(self, name: str) -> Any:
        """``name`` from the settings, else its ``DEFAULTS`` value (``api_keys``
        may stay None: the environment decides, see ``_api_keys``)."""
        settings = self.settings
        if settings is None:
            return DEFAULTS[name]
        if isinstance(settings, dict):
            v = settings.get(name, DEFAULTS[name])
        else:
            v = getattr(settings, name, DEFAULTS[name])
        return DEFAULTS[name] if v is None and name != "api_keys" else v

    @property
    def pipeline(self) -> Any:
        p = self._pipeline
        if p is not None and not hasattr(p, "submit") and callable(p):
            p = p()
        return p

    def running(self) -> Any | None:
        """The pipeline, or None while it is not up or is closed."""
        p = self.pipeline
        return None if p is None or getattr(p, "closed", False) else p

    def live_pipeline(self, stages: list[str]) -> Any:
        """The pipeline, if every replica of each of ``stages`` is ready; else a 503."""
        p = self.pipeline
        if p is None or getattr(p, "closed", False):
            raise ApiError(503, "the pipeline is not running", "service_unavailable",
                           ErrorCode.STAGE_UNAVAILABLE.value,
                           headers={"Retry-After": "1"})
        procs = p.snapshot()["processes"]
        cfg = p.cfg
        for s in stages:
            try:
                group = cfg.group_of(s).name
            except Exception:  # noqa: BLE001
                raise ApiError(503, f"the pipeline has no stage {s!r}", "service_unavailable",
                               ErrorCode.STAGE_UNAVAILABLE.value) from None
            mine = [v for k, v in procs.items() if k.split("/")[0] == group]
            if not mine or not all(v["ready"] for v in mine):
                raise ApiError(503, f"stage {s!r} is not ready (starting or restarting)",
                               "service_unavailable", ErrorCode.STAGE_UNAVAILABLE.value,
                               headers={"Retry-After": "1"})
        return p

    def check_auth(self, request: Request) -> None:
        """The Origin policy and the key, as on every transport
        (:mod:`voice_server.transports.access`); ``api-key`` is accepted as
        well as ``Authorization: Bearer`` (Azure-style clients)."""
        refusal = http_refusal(request.headers, self.setting("allowed_origins") or [], self._api_keys())
        if refusal is not None:
            raise ApiError(refusal.status, refusal.message, refusal.type, refusal.code,
                           headers=refusal.headers)

    def _api_keys(self) -> set[str]:
        keys = self.setting("api_keys")
        if not keys:
            env = os.environ.get("VOICE_AGENT_API_KEYS", "")
            keys = [k for k in env.split(",")]
        elif isinstance(keys, str):
            keys = keys.split(",")
        return {k.strip() for k in keys if k and k.strip()}

    async def read_json(self, request: Request) -> dict:
        """The body as a JSON object: a 413 over ``max_body_bytes``, a 400 if it is not one."""
        limit = int(self.setting("max_body_bytes"))
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise ApiError(413, f"request body over {limit} bytes", code="request_too_large")
        body = b""
        try:
            async for part in request.stream():
                body += part
                if len(body) > limit:
                    raise ApiError(413, f"request body over {limit} bytes", code="request_too_large")
        except ClientDisconnect:
            raise
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise ApiError(400, f"the body is not valid JSON: {e}", code="invalid_json") from None
        if not isinstance(data, dict):
            raise ApiError(400, "the body must be a JSON object", code="invalid_json")
        return data

    def deadline(self) -> float | None:
        """The runtime deadline for one request (None: the pipeline's own)."""
        v = self.setting("response_deadline_s")
        return float(v) if v else None


__all__ = ["ApiContext", "DEFAULTS"]
