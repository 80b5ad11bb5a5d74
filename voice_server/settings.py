"""Server settings: read from the pipeline YAML's ``extra:`` mapping plus env.

The YAML may carry the server's settings either directly under ``extra:`` or
under ``extra.server:``::

    extra:
      server:
        api_keys: []                 # or env VOICE_AGENT_API_KEYS=k1,k2
        admin_keys: []               # /v1/sessions, /v1/requests/{id}; env VOICE_AGENT_ADMIN_KEYS
        drain_grace_s: 10            # SIGTERM: running turns may finish this long
        readiness_grace_s: 10        # /health/ready stays 200 while a lost replica is re-created this long
        allowed_origins: []          # browser Origins; [] = same host / loopback pages only,
                                     # with or without a key (transports.access)
        max_sessions: 32
        instructions: ""             # a new session's instructions, after the thinker's
                                     # own system prompt ("": that prompt alone)
        context_tokens: null         # the think stage's context per conversation
                                     # (null: read from its args; 0: unknown)
        chars_per_token: 4.0         # the history's estimate (session.truncation)
        voice: alloy
        max_output_tokens: null
        limits: {max_session_s: 3600, max_append_b64_bytes: 15728640}
        records: {enabled: false, folder: call-records, recording: false,
                  max_age_days: 30, max_total_mb: 1024}   # voice_server.records
        traces: {otlp_endpoint: null}   # e.g. http://127.0.0.1:4318/v1/traces (voice_server.traces)
        noise_reduction: null        # near_field | far_field: every new session's denoiser
        voice_lock: null             # true: every new session locks on its caller's voice
        phone_noise_reduction: null  # phone and SIP calls alone (off: none); null: the above
        phone_voice_lock: null       # phone and SIP calls alone; null: voice_lock
        sip: {enabled: false, host: 127.0.0.1, port: 5060, transports: [udp, tcp],
              allow_from: [127.0.0.0/8], rtp_ports: [20000, 20999]}   # docs/SIP.md

Environment (wins over the YAML): ``VOICE_AGENT_API_KEYS`` (comma separated),
``VOICE_AGENT_ALLOWED_ORIGINS`` (comma separated), ``VOICE_AGENT_MAX_SESSIONS``,
``VOICE_AGENT_TWILIO_AUTH_TOKEN``, ``VOICE_AGENT_ADMIN_KEYS`` (comma separated),
``VOICE_AGENT_DRAIN_GRACE_S``, ``VOICE_AGENT_WS_MAX_MESSAGE_BYTES``,
``VOICE_AGENT_DATACHANNEL_MAX_MESSAGE_BYTES``, ``VOICE_AGENT_OUTPUT_LEAD_MS``,
``VOICE_AGENT_INTERRUPTIBLE_LEAD_MS``, ``VOICE_AGENT_PHONE_CLEAR_ON_PAUSE`` (a boolean),
``VOICE_AGENT_EXTENSION_EVENTS`` (``0``/``false``/``no``/``off`` turns them
off), ``VOICE_AGENT_NOISE_REDUCTION``, ``VOICE_AGENT_VOICE_LOCK``,
``VOICE_AGENT_PHONE_NOISE_REDUCTION``, ``VOICE_AGENT_PHONE_VOICE_LOCK`` (the
voice locks: ``true``/``false``, or ``default``), ``VOICE_AGENT_PHONE_IDLE_TIMEOUT_MS``,
``VOICE_AGENT_PHONE_IDLE_HANG_UP_AFTER``, ``VOICE_AGENT_PHONE_ANSWERING_MACHINE``
(a boolean like the extension events), ``VOICE_AGENT_RECORDS_DIR`` (call records on, in that folder) and
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
from typing import Any, Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from runtime.models.think.context_window import context_window
from runtime.models.voice_contract import THINK

from .records.settings import RecordSettings
from .session.backchannel import InterruptionSettings
from .session.call_actions import CallActionsSetting
from .webhook_signing import secret_bytes
from .session.config import NoiseReduction, ServerLimits, SessionSettings, TurnDetection
from .session.truncation import ThinkContext
from .traces.settings import TraceSettings
from .transports.sip.settings import SipSettings


# Environment variables naming a field (strings; pydantic converts and checks
# scalars). Comma lists, booleans and the turn detection shorthand are parsed
# in _from_env.
_ENV_FIELDS = {f"VOICE_AGENT_{f.upper()}": f for f in (
    "api_keys", "ice_hosts", "allowed_origins", "admin_keys", "max_sessions",
    "twilio_auth_token", "drain_grace_s", "ws_max_message_bytes", "output_lead_ms",
    "extension_events", "turn_detection", "datachannel_max_message_bytes",
    "phone_idle_timeout_ms", "phone_idle_hang_up_after", "noise_reduction",
    "phone_answering_machine", "interruptible_lead_ms", "phone_clear_on_pause",
    "sip_webhook_url", "sip_webhook_secret", "sip_accept_timeout_s", "voice_lock",
    "phone_voice_lock", "phone_noise_reduction")}
_ENV_LISTS = {"api_keys", "ice_hosts", "allowed_origins", "admin_keys"}


def _env_bool(value: str) -> bool:
    return value.lower() not in ("0", "false", "no", "off")


def _from_env(field: str, value: str) -> Any:
    if field in _ENV_LISTS:
        return [v.strip() for v in value.split(",") if v.strip()]
    if field in ("extension_events", "phone_answering_machine", "phone_clear_on_pause"):
        return _env_bool(value)
    if field == "noise_reduction":
        return None if value.strip().lower() in ("", "none", "null", "off") else value.strip()
    if field in ("voice_lock", "phone_voice_lock", "phone_noise_reduction"):
        # pydantic reads true/false/1/0/yes/no/on/off and refuses the rest by name
        return None if value.strip().lower() in ("", "default", "none", "null") else value.strip()
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
    # /health/ready stays 200 while a lost stage replica is being re-created for up to this long
    # (runtime/health.py); past it, or with no replacement coming, the server is not ready
    readiness_grace_s: float = Field(10.0, gt=0)
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
    # telephony (voice_server.transports.phone.twilio): <Stream url> in the TwiML (None: from the Host
    # header) and the account auth token that checks X-Twilio-Signature (None: no check)
    twilio_stream_url: Optional[str] = None
    twilio_auth_token: Optional[str] = None
    # phone calls (every provider): after this much silence once a reply was
    # heard the agent checks in (turn_detection.idle_timeout_ms of the call's
    # session; None: the session default), and after this many unanswered
    # check-ins it says goodbye and ends the call (0: never)
    phone_idle_timeout_ms: Optional[int] = Field(8000, ge=500, le=600_000)
    phone_idle_hang_up_after: int = Field(2, ge=0, le=100)
    # outbound phone calls: tell a person from an answering machine before the
    # first reply, and leave the message after a machine's beep
    # (voice_server.session.answering_machine); a call's custom parameter
    # answering_machine=true turns it on for that call alone
    phone_answering_machine: bool = False
    # the agent's call actions on phone calls (voice_server.session.call_actions:
    # {"end_call": {}, "send_dtmf": {...}}, the shape of a session's
    # voice_agent.call_actions); None: none.  A stream offers those it can do
    phone_call_actions: Optional[CallActionsSetting] = None
    # SIP calls' control plane (voice_server.call_registry): the operator's URL told of
    # each incoming call (a signed realtime.call.incoming webhook; None: calls are
    # answered with the session defaults), its signing secret (whsec_<base64>, or any
    # string), and how long a call may ring unanswered before it is rejected (480)
    sip_webhook_url: Optional[str] = None
    sip_webhook_secret: Optional[str] = None
    sip_accept_timeout_s: float = Field(30.0, gt=0, le=600)

    @field_validator("phone_noise_reduction", mode="before")
    @classmethod
    def _yaml_off(cls, v: Any) -> Any:
        """YAML reads a bare ``off`` as false."""
        return "off" if v is False else v

    @model_validator(mode="after")
    def _webhook_secret(self) -> "ServerSettings":
        if self.sip_webhook_url and not self.sip_webhook_secret:
            raise ValueError("sip_webhook_url needs sip_webhook_secret (webhooks are signed)")
        if self.sip_webhook_secret:
            secret_bytes(self.sip_webhook_secret)   # fails the start naming the problem
        return self
    # agent audio is released in real time so that the listener (WebSocket
    # client, Twilio, the WebRTC track) holds at most this much it has not
    # played: the server knows what was heard and can pause the reply.
    # 0 (or less): sent as fast as it is made
    output_lead_ms: float = 300.0
    # ... and this much on the Realtime WebSocket while the caller can talk over
    # the reply (VAD with interrupt_response): a client that knows only the
    # standard events plays on, after the server pauses the reply at the
    # caller's first speech frame, what it holds.  The floor: the lateness of
    # the server's own releases and the jitter of the caller's audio raise it
    # up to output_lead_ms (voice_server.session.lead_sizer: an underrun is a
    # stutter); None: output_lead_ms
    interruptible_lead_ms: Optional[float] = Field(80.0, gt=0)
    # phone lines: a pause clears the provider's buffer (its clear verb) and the
    # reply goes on, if it does, from where the caller stopped hearing it;
    # False: the provider plays out what it holds (up to output_lead_ms)
    phone_clear_on_pause: bool = True
    # voice_agent.* events (voice_agent.output_audio.paused / .resumed) on the
    # WebSocket and the WebRTC data channel; False: only Realtime API events
    extension_events: bool = True
    # turn detection of a new session, before any session.update: the Realtime
    # default (server_vad, 500 ms of silence) unless the YAML names another,
    # e.g. {type: semantic_vad, eagerness: auto} (env VOICE_AGENT_TURN_DETECTION=
    # server_vad | semantic_vad | semantic_vad:<eagerness>)
    turn_detection: Optional[TurnDetection] = None
    # noise suppression of a new session's input before VAD and ASR, before any
    # session.update (audio.input.noise_reduction): near_field | far_field | None
    # (env VOICE_AGENT_NOISE_REDUCTION; "none" or "" = off)
    noise_reduction: NoiseReduction = None
    # the lock on the caller's voice of a new session, before any session.update
    # (session.voice_agent.voice_lock; runtime/models/listen/voice_lock.py): True |
    # False | None (the listen stage's own voice_lock arg decides; env
    # VOICE_AGENT_VOICE_LOCK=true|false|default)
    voice_lock: Optional[bool] = None
    # phone calls (every provider and SIP) alone, whose callers have no
    # session.update to send: their noise suppression (near_field | far_field |
    # off; None: noise_reduction above) and voice lock (None: voice_lock above).
    # A call's custom parameters, or a SIP call's accept, may set either per call
    phone_noise_reduction: Optional[Literal["near_field", "far_field", "off"]] = None
    phone_voice_lock: Optional[bool] = None
    # a reply the caller talks over: backchannel words, when speech is an
    # interruption, the echo guard (voice_server.session.backchannel)
    interruptions: InterruptionSettings = InterruptionSettings()
    # the think stage's context as sessions see it (its system prompt, which a
    # client's instructions follow, and the room a conversation's history has:
    # session.truncation), read from the think stage's args when the app is built
    # (think_context_of); context_tokens overrides its size (0: unknown, the think
    # stage alone fits a long history); chars_per_token: the server's estimate, as
    # it holds no tokenizer
    context_tokens: Optional[int] = Field(None, ge=0)
    chars_per_token: float = Field(4.0, gt=0)
    think_context: ThinkContext = ThinkContext()
    # call records: transcripts, turn timings, recordings (voice_server.records); off by
    # default, recordings off even when records are on
    records: RecordSettings = RecordSettings()
    # OpenTelemetry traces of each turn over OTLP/HTTP (voice_server.traces); no endpoint: off
    traces: TraceSettings = TraceSettings()
    # the SIP endpoint (voice_server.transports.sip, docs/SIP.md); off by default
    sip: SipSettings = SipSettings()

    def session_defaults(self, model: str | None = None) -> SessionSettings:
        """What a new session starts with, on every transport."""
        extra = {"turn_detection": self.turn_detection} if self.turn_detection else {}
        return SessionSettings(model=(model or self.model)[:256], instructions=self.instructions,
                               voice=self.voice, max_output_tokens=self.max_output_tokens,
                               context=self.think_context,
                               noise_reduction=self.noise_reduction,
                               voice_lock=self.voice_lock, **extra)

    def think_context_of(self, cfg: Any) -> ThinkContext:
        """The think stage of pipeline config ``cfg`` as sessions see it
        (``context_tokens`` overrides its size; no think stage: unknown)."""
        stage = next((st for st in getattr(cfg, "stages", ()) if st.name == THINK), None)
        ctx = ThinkContext(chars_per_token=self.chars_per_token)
        if stage is not None:
            w = context_window(stage.executor, stage.args)
            ctx = ctx.model_copy(update={
                "system_prompt": w.system_prompt, "tokens": w.tokens,
                "prompt_chars": w.prompt_chars, "reply_tokens": w.reply_tokens,
                "tool_reply_tokens": w.tool_reply_tokens, "message_tokens": w.message_tokens})
        if self.context_tokens is not None:
            ctx = ctx.model_copy(update={"tokens": self.context_tokens or None,
                                         "prompt_chars": None})
        return ctx

    def phone_session_defaults(self) -> SessionSettings:
        """What a phone call's session starts with: :meth:`session_defaults`
        with ``phone_idle_timeout_ms`` as the turn detection's idle timeout,
        ``phone_call_actions``, ``phone_noise_reduction`` and ``phone_voice_lock``."""
        s = self.session_defaults()
        if self.phone_call_actions is not None:
            s = s.model_copy(update={"call_actions": self.phone_call_actions})
        if self.phone_noise_reduction is not None:
            s = s.model_copy(update={"noise_reduction": None if self.phone_noise_reduction == "off"
                                     else self.phone_noise_reduction})
        if self.phone_voice_lock is not None:
            s = s.model_copy(update={"voice_lock": self.phone_voice_lock})
        td = s.turn_detection
        if td is None or self.phone_idle_timeout_ms is None:
            return s
        return s.model_copy(update={"turn_detection": td.model_copy(
            update={"idle_timeout_ms": self.phone_idle_timeout_ms})})

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
