"""The OpenAI-Realtime-compatible WebSocket endpoint, ``/v1/realtime``.

A thin transport: JSON text frames in -> :class:`SessionRunner` -> JSON text
frames out.  Everything about turns, responses and barge-in lives in the
session core; everything about requests in the runner.

Before the upgrade is accepted, problems are HTTP statuses:
401 (missing/bad key), 403 (Origin not allowed), 503 (too many sessions).
After it, every problem is an ``error`` event and the session stays open -
binary frames included (rejected through the session core, so they count
against its rate limit) - except a message above ``ws_max_message_bytes``:
an ``error`` ``message_too_large``, then close 1009
(voice_server.third_party_patches).

Auth: ``Authorization: Bearer KEY``, or for browsers the subprotocols
``realtime`` + ``openai-insecure-api-key.KEY`` (``realtime`` is echoed when
offered).  Keys come from :class:`voice_server.settings.ServerSettings`;
Origin, keys, client secrets and ``max_sessions`` are judged by
:func:`voice_server.transports.access.admit_session`, as on every transport.

Output pacing: ``response.output_audio.delta`` events go out at the rate of
real time, so the client holds at most ``ServerSettings.output_lead_ms`` of
audio beyond what it has played (assuming it plays what it gets at once);
the session therefore knows the played position, truncates a barged-in reply
there itself, and can pause a reply (``voice_agent.output_audio.paused`` /
``.resumed``, unless ``extension_events`` is off).  While the caller can talk
over the reply the lead is ``interruptible_lead_ms`` (80 ms): a client that
knows only the standard events cannot be told to stop at the pause and plays
out what it holds.

``?call_id=...`` attaches to a live SIP call's session instead of opening
one (:mod:`.call_sideband`; the calls are ``self.sip_calls``).

A client secret ``ek_...`` (``POST /v1/realtime/client_secrets``) works in
either place instead of a key: single-use, expiring; its session config and
session id apply to the session (401 ``invalid_client_secret`` otherwise).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets

from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketState

from ..runner import RunnerOptions, SessionRunner
from ..session import Session
from ..session.config import apply_session_update
from ..session.errors import ClientError
from ..settings import ServerSettings
from ..call_registry import CallRegistry
from .access import Refusal, admit_session, bearer_token, denial_response
from .call_sideband import attach
from .ws_reader import read_websocket, until_first

log = logging.getLogger("voice_server.transports.realtime_ws")

KEY_PROTOCOL_PREFIX = "openai-insecure-api-key."


class RealtimeEndpoint:
    """ASGI WebSocket endpoint; one instance per app (it counts the sessions)."""

    def __init__(self, pipeline, settings: ServerSettings) -> None:
        self.pipeline = pipeline
        self.settings = settings
        self.runners: dict[str, SessionRunner] = {}
        self.secrets = None  # ClientSecretStore (build_app: app.state.client_secrets)
        self.sip_calls = None  # CallRegistry (build_app: app.state.sip_calls): ?call_id=

    async def _deny(self, ws: WebSocket, refusal: Refusal) -> None:
        try:
            await ws.send_denial_response(denial_response(refusal))
        except RuntimeError:  # server without the denial-response extension: plain 403
            await ws.close(1008)

    async def __call__(self, scope, receive, send) -> None:
        ws = WebSocket(scope, receive, send)
        await self.handle(ws)

    async def handle(self, ws: WebSocket) -> None:
        s = self.settings
        offered = list(ws.scope.get("subprotocols") or [])
        key = bearer_token(ws.headers)
        if key is None:
            key = next((p[len(KEY_PROTOCOL_PREFIX):] for p in offered
                        if p.startswith(KEY_PROTOCOL_PREFIX)), None)
        call_id = ws.query_params.get("call_id")
        if call_id is not None:   # a sideband to a live SIP call
            await attach(ws, self.sip_calls or CallRegistry(), s, key, call_id,
                         "realtime" if "realtime" in offered else None)
            return
        store = self.secrets
        if store is None:
            store = getattr(getattr(ws.scope.get("app"), "state", None), "client_secrets", None)
        try:  # before accept: HTTP statuses (403 Origin, 401 key/secret, 503 busy)
            admitted = admit_session(self.pipeline, s, origin=ws.headers.get("origin"),
                                     host=ws.headers.get("host"), key=key, secrets=store)
        except Refusal as refusal:
            await self._deny(ws, refusal)
            return
        try:
            await self._run(ws, admitted.secret, offered, admitted.ticket)
        finally:
            admitted.ticket.release()

    async def _run(self, ws: WebSocket, secret, offered: list, ticket) -> None:
        s = self.settings
        try:
            await ws.accept(subprotocol="realtime" if "realtime" in offered else None)
        except Exception:  # noqa: BLE001 - client vanished during the handshake
            return
        model = ws.query_params.get("model") or s.model
        dialect = "beta" if "realtime=v1" in (ws.headers.get("openai-beta") or "") else "ga"
        config = s.session_defaults(model)
        sess_cfg = dict(secret.session) if secret is not None else {}
        session_id = sess_cfg.pop("_session_id", None) or "sess_" + secrets.token_hex(10)
        if sess_cfg:
            try:  # validated at mint time; applied like a first session.update
                config = apply_session_update(config, sess_cfg, s.limits)
            except ClientError as exc:
                log.info("client secret's session config no longer valid: %s", exc.message)
        session = Session(session_id, config, audio_out_mode="events",
                          limits=s.limits, dialect=dialect, output_lead_ms=s.output_lead_ms,
                          interruptions=s.interruptions, extension_events=s.extension_events,
                          interruptible_lead_ms=s.interruptible_lead_ms)

        async def send_event(ev: dict) -> None:
            await ws.send_text(json.dumps(ev, separators=(",", ":"), ensure_ascii=False))

        async def on_close(code: int, reason: str) -> None:
            if ws.application_state != WebSocketState.DISCONNECTED:
                await ws.close(code, reason[:120])

        runner = SessionRunner(session, self.pipeline, send_event, on_close=on_close,
                               options=RunnerOptions.from_settings(s), transport="websocket")
        self.runners[session.session_id] = runner
        try:
            await runner.start()
            ticket.release()  # the registered runner counts itself now
            await until_first(self._read(ws, runner), runner.wait_closed())
        finally:
            try:
                await runner.close()
            finally:
                self.runners.pop(session.session_id, None)
                if ws.application_state != WebSocketState.DISCONNECTED:
                    with contextlib.suppress(Exception):
                        await ws.close(1000)

    async def _read(self, ws: WebSocket, runner: SessionRunner) -> None:
        def on_bytes(_data: bytes) -> None:
            runner.reject_client_frame(
                "binary_frames_not_supported",
                "Binary frames are not supported: send client events as JSON text frames "
                "(audio base64 in input_audio_buffer.append).")

        await read_websocket(ws, runner.client_event, on_bytes,
                             label=f"session {runner.session.session_id}")

    async def close_all(self) -> None:
        await asyncio.gather(*(r.close() for r in list(self.runners.values())),
                             return_exceptions=True)


def realtime_route(pipeline, settings: ServerSettings,
                   path: str = "/v1/realtime") -> tuple[WebSocketRoute, RealtimeEndpoint]:
    ep = RealtimeEndpoint(pipeline, settings)
    return WebSocketRoute(path, ep), ep


__all__ = ["RealtimeEndpoint", "realtime_route", "KEY_PROTOCOL_PREFIX"]
