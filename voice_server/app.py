"""The voice server application: Starlette app + uvicorn runner.

    app = build_app(pipeline, settings)      # routes: /v1/realtime (WebSocket),
                                             # /v1/telephony/twilio (+ /twiml),
                                             # /v1/realtime/calls (WebRTC),
                                             # voice_server.transports.http routes,
                                             # /metrics (voice_server.metrics),
                                             # /v1/sessions, /v1/requests/{id} (.admin),
                                             # /v1/calls (.transports.calls_api),
                                             # SIP on its own port when enabled
                                             # (.transports.sip, docs/SIP.md),
                                             # web_demo/ as static files at /
    await serve("configs/voice-cpu.yaml", "127.0.0.1", 8000)

``serve`` starts the Pipeline (stage processes, model loading), runs uvicorn,
prints ONE line when ready, and closes everything on SIGINT/SIGTERM.  With no
API key configured it only binds loopback.

Command line (until a ``voice-agent`` CLI delegates here)::

    python -m voice_server.app --config configs/voice-cpu.yaml --host 127.0.0.1 --port 8000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import HTMLResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from runtime.models.speak.voices import voice_names
from runtime.models.voice_contract import SPEAK

from . import admin, metrics
from .drain import DrainGate, install_signal_drain
from .records.store import CallStore
from .session_registry import registry_for
from .settings import ServerSettings
from .transports.access import is_loopback
from .call_registry import CallRegistry
from .call_webhook import CallWebhook
from .transports.calls_api import calls_routes
from .transports.sip.dial_api import dial_routes
from .transports.sip.registration_api import registration_routes
from .transports.sip_calls_api import sip_calls_routes
from .transports.client_secrets import ClientSecretStore
from .transports.http.routes import http_routes
from .transports.realtime_ws import realtime_route
from .transports.phone.routes import phone_routes
from .transports.webrtc import webrtc_routes

log = logging.getLogger("voice_server.app")

REPO_ROOT = Path(__file__).resolve().parent.parent
WEB_DEMO = REPO_ROOT / "web_demo"

_PLACEHOLDER = """<!doctype html>
<html><head><meta charset="utf-8"><title>voice-agent</title></head>
<body><h1>voice-agent</h1>
<p>The realtime endpoint is <code>/v1/realtime</code> (OpenAI Realtime WebSocket).
The web demo page is not built yet.</p></body></html>
"""


def _demo_dir(settings: ServerSettings) -> Path:
    d = Path(settings.web_demo_dir) if settings.web_demo_dir else WEB_DEMO
    if not d.exists():
        d.mkdir(parents=True, exist_ok=True)
    if d == WEB_DEMO and not any(d.iterdir()):
        (d / "index.html").write_text(_PLACEHOLDER)
    return d


def with_speak_voices(settings: ServerSettings, pipeline) -> ServerSettings:
    """``settings``, its sessions now allowed the speak stage's voices: OpenAI's
    names and the names of the voices its engine has installed (a stage with
    another executor, or no speak stage: OpenAI's names).  The same object:
    the routes and whoever started the server share it."""
    try:
        engine = pipeline.cfg.stage(SPEAK).args.get("engine", "flite")
        names = voice_names(str(engine))
    except (AttributeError, KeyError, ValueError):
        return settings
    settings.limits = settings.limits.model_copy(update={"voices": tuple(names)})
    return settings


def build_app(pipeline, settings: ServerSettings | None = None, *,
              close_pipeline: bool = False) -> Starlette:
    """The ASGI app over a started Pipeline.  ``close_pipeline``: the lifespan
    closes it at shutdown (``serve`` passes True)."""
    settings = with_speak_voices(settings or ServerSettings(), pipeline)
    # in place: the routes and whoever built the app share one settings object
    settings.think_context = settings.think_context_of(getattr(pipeline, "cfg", None))
    # one store: a secret minted on /v1/realtime/client_secrets opens a WebSocket
    # session or a WebRTC call, once
    client_secrets = ClientSecretStore(default_ttl_s=settings.client_secret_ttl_s)
    ws_route, endpoint = realtime_route(pipeline, settings)
    endpoint.secrets = client_secrets
    routes: list[Any] = [ws_route]
    ph_routes, phone = phone_routes(pipeline, settings)
    routes += ph_routes
    routes += list(http_routes(pipeline, settings))
    routes += metrics.routes(pipeline, settings, places=lambda p: registry_for(p).places)
    routes += admin.routes(pipeline, settings)
    rtc_routes, rtc_endpoint = webrtc_routes(pipeline, settings, client_secrets)
    # SIP calls' control plane, OpenAI-shaped (voice_server.call_registry): the SIP
    # transport registers its calls here; before the WebRTC routes (/hangup is shared)
    sip_calls = CallRegistry(CallWebhook(settings.sip_webhook_url, settings.sip_webhook_secret)
                             if settings.sip_webhook_url else None,
                             settings.sip_accept_timeout_s)
    endpoint.sip_calls = sip_calls
    routes += sip_calls_routes(sip_calls, settings, other_hangup=rtc_endpoint.delete_call)
    routes += dial_routes(lambda: sip, settings)   # calls the agent places (SIP off: 404)
    routes += registration_routes(lambda: sip, settings)   # sip.register's state
    routes += rtc_routes
    # call records (voice_server.records): every runner of this pipeline records into it
    records = CallStore(settings.records) if settings.records.enabled else None
    registry_for(pipeline).records = records
    # turn traces (voice_server.traces): the SDK is imported only when an endpoint is set
    tracing = None
    if settings.traces.enabled:
        from .traces.turn_traces import Tracing
        tracing = Tracing(settings.traces)
    registry_for(pipeline).traces = tracing
    routes += calls_routes(pipeline, settings)
    sip = None
    if settings.sip.enabled:  # SIP trunks and PBXs (docs/SIP.md); listeners bound at startup
        from .transports.sip.endpoint import SipEndpoint
        from .transports.sip.registered import registry_hook
        ringing, ended = registry_hook(sip_calls, lambda call_id: sip.call(call_id))
        sip = SipEndpoint(pipeline, settings, on_incoming=ringing, on_ended=ended)
    demo = _demo_dir(settings)
    if (demo / "index.html").exists():
        routes.append(Mount("/", app=StaticFiles(directory=str(demo), html=True), name="web"))
    else:
        routes.append(Route("/", lambda request: HTMLResponse(_PLACEHOLDER)))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        if sip is not None:
            await sip.start()
        try:
            yield
        finally:
            if sip is not None:
                await sip.close()
            await sip_calls.close()
            await rtc_endpoint.close_all()
            await endpoint.close_all()
            for ep in phone.values():
                await ep.close_all()
            if records is not None:   # after the sessions: their last writes go in first
                registry_for(pipeline).records = None
                await asyncio.get_running_loop().run_in_executor(None, records.close)
            if tracing is not None:
                registry_for(pipeline).traces = None
                await asyncio.get_running_loop().run_in_executor(None, tracing.shutdown)
            if close_pipeline:
                await pipeline.close()

    middleware = [Middleware(DrainGate, pipeline=pipeline)]  # 503 while draining
    if settings.allowed_origins:  # CORS for the HTTP API; none configured: same-origin only
        middleware.insert(0, cors_middleware(settings.allowed_origins))
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware)
    app.state.pipeline = pipeline
    app.state.webrtc = rtc_endpoint
    app.state.client_secrets = client_secrets
    app.state.settings = settings
    app.state.realtime = endpoint
    app.state.phone = phone  # provider name -> PhoneEndpoint
    app.state.twilio = phone["twilio"]
    app.state.sip_calls = sip_calls  # voice_server.call_registry: where SIP calls register
    app.state.sip = sip  # the SipEndpoint, None when SIP is off
    return app


def cors_middleware(origins: list[str]) -> Middleware:
    """Starlette CORS for the HTTP endpoints, from ``settings.allowed_origins`` (the
    same list that admits WebSocket Origins; ``"*"`` allows any).  Credentials are
    Bearer headers, never cookies, so ``allow_credentials`` stays off."""
    from starlette.middleware.cors import CORSMiddleware
    any_origin = "*" in origins
    return Middleware(CORSMiddleware,
                      allow_origins=["*"] if any_origin else [o.rstrip("/") for o in origins],
                      allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
                      allow_headers=["Authorization", "Content-Type", "OpenAI-Beta"],
                      expose_headers=["Location", "Retry-After"], max_age=600)


def check_bind(host: str, settings: ServerSettings) -> None:
    """Refuse a non-loopback bind without an API key (raises SystemExit)."""
    if not settings.auth_required and not is_loopback(host):
        raise SystemExit(
            f"refusing to listen on {host!r} without an API key: anyone who can reach it could "
            "use the server. Set VOICE_AGENT_API_KEYS=key1[,key2] (or extra.server.api_keys in "
            "the pipeline YAML), or bind 127.0.0.1.")


def uvicorn_config(app, settings: ServerSettings, host: str, port: int, **kw):
    """uvicorn's Config for the app.  WebSockets use
    :class:`voice_server.third_party_patches.ExplainingWebSocketProtocol` (uvicorn's
    own sans-I/O protocol, which also sends a ``message_too_large`` error
    event before the 1009 close of a message above ``ws_max_message_bytes``)."""
    import uvicorn
    from .third_party_patches import ExplainingWebSocketProtocol
    kw.setdefault("ws", ExplainingWebSocketProtocol)
    return uvicorn.Config(app, host=host, port=port, log_level=kw.pop("log_level", "warning"),
                          ws_max_size=settings.ws_max_message_bytes, ws_ping_interval=20.0,
                          ws_ping_timeout=20.0, lifespan="on", **kw)


async def serve(config_path: str | os.PathLike, host: str = "127.0.0.1", port: int = 8000, *,
                settings: ServerSettings | None = None, log_level: str = "warning",
                ready_file=None, log_json: bool | None = None) -> None:
    """Start the pipeline and serve until SIGINT/SIGTERM; prints one line when ready.

    SIGTERM/SIGINT drain first (voice_server.drain.drain): new sessions and
    requests get 503, sessions get an ``error`` (server_shutting_down), running
    turns get ``settings.drain_grace_s``, the rest is cancelled, sessions close
    with 1001; then the pipeline closes and serve returns.  A second signal
    skips the rest of the grace period.  ``log_json`` (not None): configure
    logging here, JSON lines or text (voice_server.logs).
    """
    import uvicorn
    from runtime.pipeline import Pipeline
    from runtime.config import load_config

    uv_kw: dict[str, Any] = {"timeout_graceful_shutdown": 3}
    if log_json is not None:
        from .logs import configure_logging
        configure_logging(log_level, log_json)
        uv_kw["log_config"] = None  # uvicorn's loggers go through ours
    cfg = load_config(config_path)
    settings = settings or ServerSettings.from_sources(cfg.extra)
    check_bind(host, settings)
    # bind before loading models: a busy port fails fast
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise SystemExit(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    pipeline = await Pipeline.start(cfg)
    try:
        app = build_app(pipeline, settings, close_pipeline=True)
        server = uvicorn.Server(uvicorn_config(app, settings, host, port, log_level=log_level,
                                               **uv_kw))
        server.capture_signals = contextlib.nullcontext  # ours drain first, then stop uvicorn
        remove_signals = install_signal_drain(pipeline, settings.drain_grace_s,
                                              lambda: setattr(server, "should_exit", True))
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.05)
        if server.started:
            shown = f"[{host}]" if ":" in host else host
            note = "" if settings.auth_required else \
                " (no API key configured: loopback only)"
            print(f"voice-agent ready: demo http://{shown}:{port}/  realtime "
                  f"ws://{shown}:{port}/v1/realtime{note}", file=ready_file or sys.stdout,
                  flush=True)
        try:
            await task
        finally:
            remove_signals()
    finally:
        sock.close()
        await pipeline.close()  # no-op when the lifespan closed it already


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="voice_server.app", description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/voice-cpu.yaml")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--log-level", default="warning")
    a = ap.parse_args(argv)
    logging.basicConfig(level=a.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(serve(a.config, a.host, a.port, log_level=a.log_level))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
