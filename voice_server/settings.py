"""Server settings: read from the pipeline YAML's ``extra:`` mapping plus env.

The YAML may carry the server's settings either directly under ``extra:`` or
under ``extra.server:``::

    extra:
      server:
        api_keys: []                 # or env VOICE_AGENT_API_KEYS=k1,k2
        admin_keys: []               # /v1/sessions, /v1/requests/{id}; env VOICE_AGENT_ADMIN_KEYS
        drain_grace_s: 10            # SIGTERM: running turns may finish this long
        allowed_origins: []          # browser Origins; [] = same host / loopback pages only,
                                     # with or without a key (transports.access)
        max_sessions: 32
        instructions: ""             # "" = the thinker's own system prompt
        voice: alloy
        max_output_tokens: null
        limits: {max_session_s: 3600, max_append_b64_bytes: 15728640}
        records: {enabled: false, folder: call-records, recording: false,
                  max_age_days: 30, max_total_mb: 1024}   # voice_server.records
        traces: {otlp_endpoint: null}   # e.g. http://127.0.0.1:4318/v1/traces (voice_server.traces)

Environment (wins over the YAML): ``VOICE_AGENT_API_KEYS`` (comma separated),
``VOICE_AGENT_ALLOWED_ORIGINS`` (comma separated), ``VOICE_AGENT_MAX_SESSIONS``,
``VOICE_AGENT_TWILIO_AUTH_TOKEN``, ``VOICE_AGENT_ADMIN_KEYS`` (comma separated),
``VOICE_AGENT_DRAIN_GRACE_S``, ``VOICE_AGENT_WS_MAX_MESSAGE_BYTES``,
``VOICE_AGENT_DATACHANNEL_MAX_MESSAGE_BYTES``, ``VOICE_AGENT_OUTPUT_LEAD_MS``,
``VOICE_AGENT_EXTENSION_EVENTS`` (``0``/``false``/``no``/``off`` turns them
off), ``VOICE_AGENT_RECORDS_DIR`` (call records on, in that folder) and
``VOICE_AGENT_RECORDS_AUDIO`` (``1``: record the audio too; voice_server.records),
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (turn traces on, to that OTLP/HTTP URL;
voice_server.traces), and one
``VOICE_AGENT_LIMIT_<NAME>`` per :class:`ServerLimits` field (e.g.
``VOICE_AGENT_LIMIT_IDLE_TIMEOUT_S=300``, ``VOICE_AGENT_LIMIT_MAX_CLIENT_EVENTS_PER_S=100``).

Limits (defaults): WebSocket message ``ws_max_message_bytes`` 16 MiB (bigger:
an ``error`` event ``message_too_large``, then the protocol layer closes with
1009; voice_server.third_party_patches), WebRTC ``oai-events`` message
``datachannel_max_message_bytes`` 256 KiB (bigger: ``message_too_large``, the
call goes on), ``max_sessions`` 32 (503 before the upgrade), and
ServerLimits: ``max_append_b64_bytes`` 15 MiB, ``max_buffered_input_s`` 120,
``max_session_s`` 3600, ``idle_timeout_s`` 600, ``max_client_events_per_s``
200 with bursts of ``client_events_burst`` 400.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field

from .records.settings import RecordSettings
from .session.backchannel import InterruptionSettings
from .session.config import ServerLimits, SessionSettings, TurnDetection
from .traces.settings import TraceSettings


# Environment variables naming a field (strings; pydantic converts and checks
# scalars). Comma lists, booleans and the turn detection shorthand are parsed
# in _from_env.
_ENV_FIELDS = {f"VOICE_AGENT_{f.upper()}": f for f in (
    "api_keys", "ice_hosts", "allowed_origins", "admin_keys", "max_sessions",
    "twilio_auth_token", "drain_grace_s", "ws_max_message_bytes", "output_lead_ms",
    "extension_events", "turn_detection", "datachannel_max_message_bytes")}
_ENV_LISTS = {"api_keys", "ice_hosts", "allowed_origins", "admin_keys"}


def _env_bool(value: str) -> bool:
    return value.lower() not in ("0", "false", "no", "off")


def _from_env(field: str, value: str) -> Any:
    if field in _ENV_LISTS:
        return [v.strip() for v in value.split(",") if v.strip()]
    if field == "extension_events":
        return _env_bool(value)
    if field == "turn_detection":      # server_vad | semantic_vad[:eagerness]
        kind, _, eagerness = value.partition(":")
        return {"type": kind, **({"eagerness": eagerness} if eagerness else {})}
    return value


class ServerSettings(BaseModel):
    model_config = ConfigDict(extra="ignore")

    api_keys: list[str] = Field(default_factory=list)
    # admin endpoints (voice_server.admin); none configured: loopback-bound servers only
    admin_keys: list[str] = Field(default_factory=list)
    drain_grace_s: float = Field(10.0, ge=0)  # graceful drain on SIGTERM (voice_server.drain)
    allowed_origins: list[str] = Field(default_factory=list)
    max_sessions: int = Field(32, ge=1)
    # session defaults
    model: str = "voice-agent"
    instructions: str = ""
    voice: str = "alloy"
    max_output_tokens: Optional[int] = Field(None, ge=1)
    limits: ServerLimits = ServerLimits()
    # WebRTC (voice_server.transports.webrtc): STUN/TURN servers ("stun:h:p" or {"urls", "username",
    # "credential"}; [] = host candidates only, never aiortc's public STUN default), the
    # exact host addresses to offer ([] = aioice's choice, which never includes 127.0.0.1;
    # env VOICE_AGENT_ICE_HOSTS=127.0.0.1), and the client secrets' default lifetime
    ice_servers: list[Any] = Field(default_factory=list)
    ice_hosts: list[str] = Field(default_factory=list)
    client_secret_ttl_s: float = Field(60.0, ge=10, le=7200)
    # runner
    listen_deadline_s: Optional[float] = None  # None: limits.max_session_s + 60
    response_deadline_s: float = Field(120.0, gt=0)
    transcribe_deadline_s: float = Field(60.0, gt=0)
    tick_ms: float = Field(100.0, gt=0)
    max_outbox_events: int = Field(20000, ge=16)
    ws_max_message_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    # WebRTC oai-events messages: bigger ones are dropped with an error event
    # (message_too_large), the call goes on.  The default is what aiortc puts in
    # the SDP answer (a=max-message-size:262144): a peer that honours the SDP never
    # reaches it; a lower value is enforced here; a higher one only bounds peers
    # that ignore the SDP.  (The check runs on the reassembled message: aiortc
    # buffers a message whole before handing it over.)
    datachannel_max_message_bytes: int = Field(256 * 1024, ge=1024)
    web_demo_dir: Optional[str] = None
    # telephony (voice_server.transports.twilio): <Stream url> in the TwiML (None: from the Host
    # header) and the account auth token that checks X-Twilio-Signature (None: no check)
    twilio_stream_url: Optional[str] = None
    twilio_auth_token: Optional[str] = None
    # agent audio is released in real time so that the listener (WebSocket
    # client, Twilio, the WebRTC track) holds at most this much it has not
    # played: the server knows what was heard and can pause the reply.
    # 0 (or less): sent as fast as it is made
    output_lead_ms: float = 300.0
    # voice_agent.* events (voice_agent.output_audio.paused / .resumed) on the
    # WebSocket and the WebRTC data channel; False: only Realtime API events
    extension_events: bool = True
    # turn detection of a new session, before any session.update: the Realtime
    # default (server_vad, 500 ms of silence) unless the YAML names another,
    # e.g. {type: semantic_vad, eagerness: auto} (env VOICE_AGENT_TURN_DETECTION=
    # server_vad | semantic_vad | semantic_vad:<eagerness>)
    turn_detection: Optional[TurnDetection] = None
    # a reply the caller talks over: backchannel words, when speech is an
    # interruption, the echo guard (voice_server.session.backchannel)
    interruptions: InterruptionSettings = InterruptionSettings()
    # call records: transcripts, turn timings, recordings (voice_server.records); off by
    # default, recordings off even when records are on
    records: RecordSettings = RecordSettings()
    # OpenTelemetry traces of each turn over OTLP/HTTP (voice_server.traces); no endpoint: off
    traces: TraceSettings = TraceSettings()

    def session_defaults(self, model: str | None = None) -> SessionSettings:
        """What a new session starts with, on every transport."""
        extra = {"turn_detection": self.turn_detection} if self.turn_detection else {}
        return SessionSettings(model=(model or self.model)[:256], instructions=self.instructions,
                               voice=self.voice, max_output_tokens=self.max_output_tokens, **extra)

    @property
    def auth_required(self) -> bool:
        return bool(self.api_keys)

    @property
    def effective_listen_deadline_s(self) -> float:
        if self.listen_deadline_s is not None:
            return self.listen_deadline_s
        return self.limits.max_session_s + 60.0

    @classmethod
    def from_sources(cls, extra: Mapping[str, Any] | None = None,
                     env: Mapping[str, str] | None = None, **overrides: Any) -> "ServerSettings":
        """YAML ``extra`` (or its ``server`` sub-mapping), then env, then ``overrides``."""
        env = os.environ if env is None else env
        data: dict[str, Any] = {}
        extra = dict(extra or {})
        src = extra.get("server") if isinstance(extra.get("server"), dict) else extra
        data.update({k: v for k, v in src.items() if k in cls.model_fields})
        for name, value in env.items():
            field = _ENV_FIELDS.get(name)
            if field is not None and value.strip():
                data[field] = _from_env(field, value.strip())
        lim = {k: env[f"VOICE_AGENT_LIMIT_{k.upper()}"] for k in ServerLimits.model_fields
               if env.get(f"VOICE_AGENT_LIMIT_{k.upper()}")}
        if lim:  # strings: pydantic converts them (lax mode) and checks them
            base = data.get("limits")
            base = base.model_dump() if isinstance(base, ServerLimits) else dict(base or {})
            data["limits"] = {**base, **lim}
        rec = {}
        if env.get("VOICE_AGENT_RECORDS_DIR", "").strip():   # records on, in this folder
            rec = {"enabled": True, "folder": env["VOICE_AGENT_RECORDS_DIR"].strip()}
        if env.get("VOICE_AGENT_RECORDS_AUDIO", "").strip():
            rec["recording"] = _env_bool(env["VOICE_AGENT_RECORDS_AUDIO"].strip())
        otlp = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        if otlp:   # the standard OpenTelemetry variable
            base = data.get("traces")
            base = base.model_dump() if isinstance(base, TraceSettings) else dict(base or {})
            data["traces"] = {**base, "otlp_endpoint": otlp}
        if rec:
            base = data.get("records")
            base = base.model_dump() if isinstance(base, RecordSettings) else dict(base or {})
            data["records"] = {**base, **rec}
        data.update(overrides)
        return cls.model_validate(data)


__all__ = ["ServerSettings"]
