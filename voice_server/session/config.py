"""Session settings: the effective configuration, its wire form, and the
merging of a client's ``session.update`` into it.

* :class:`SessionSettings` - what the client may change (instructions,
  modalities, audio formats, turn detection, ...).  Defaults match the
  OpenAI Realtime API (server VAD: threshold 0.5, prefix 300 ms, silence
  500 ms, create_response and interrupt_response true; PCM16 24 kHz).
* :class:`ServerLimits` - what the operator fixes (append size, buffered
  input, instructions length, session duration...).
* :func:`apply_session_update` - validates one ``session`` object (GA shape,
  plus beta aliases: ``modalities``, ``voice``, ``input_audio_format``,
  ``output_audio_format`` as "pcm16"/"g711_ulaw"/"g711_alaw",
  top-level ``turn_detection``, ``input_audio_transcription``,
  ``max_response_output_tokens``) and returns a new settings object, or
  raises :class:`ClientError` (the old settings stay in force).
  ``tools`` and ``tool_choice`` are checked (tools.py) and kept.
  Unsupported optional fields (tracing, noise_reduction, the transcription
  model, voice names...) are accepted and ignored.
  ``semantic_vad`` (with ``eagerness``) runs the end-of-turn model in the
  listen stage.
* :func:`session_to_wire` - the effective values as reported in
  ``session.created`` / ``session.updated``.
"""

from __future__ import annotations

from typing import Any, List, Literal, Optional, Tuple, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.models.speak.voices import OPENAI_VOICES

from ..audio_codec import PCM, PCMA, PCMU, G711_RATE
from .errors import ClientError, from_validation_error
from .tools import choice_still_valid, parse_tool_choice, parse_tools

# ---------------------------------------------------------------------------
# Effective settings
# ---------------------------------------------------------------------------


class AudioFormat(BaseModel):
    model_config = ConfigDict(frozen=True)
    type: Literal["audio/pcm", "audio/pcmu", "audio/pcma"] = PCM
    rate: int = 24000

    @property
    def sample_rate(self) -> int:
        return self.rate if self.type == PCM else G711_RATE

    def wire(self) -> dict:
        if self.type == PCM:
            return {"type": PCM, "rate": self.rate}
        return {"type": self.type}


EAGERNESS = ("low", "medium", "high", "auto")


class TurnDetection(BaseModel):
    """``server_vad`` ends the turn after a fixed silence; ``semantic_vad`` asks an
    end-of-turn model at silence onset and waits briefly after a complete-sounding
    turn, longer after a cut one (``eagerness`` sets how long: listen stage)."""
    model_config = ConfigDict(frozen=True)
    type: Literal["server_vad", "semantic_vad"] = "server_vad"
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    idle_timeout_ms: Optional[int] = None
    create_response: bool = True
    interrupt_response: bool = True
    eagerness: Literal["low", "medium", "high", "auto"] = "auto"
    min_speech_ms: int = 250  # extension: enforced by the listen stage

    def listen_params(self) -> dict:
        return {"threshold": self.threshold, "silence_duration_ms": self.silence_duration_ms,
                "prefix_padding_ms": self.prefix_padding_ms, "min_speech_ms": self.min_speech_ms,
                "turn_mode": "semantic" if self.type == "semantic_vad" else "silence",
                "eagerness": self.eagerness}

    def wire(self) -> dict:
        if self.type == "semantic_vad":
            return {"type": "semantic_vad", "eagerness": self.eagerness,
                    "create_response": self.create_response,
                    "interrupt_response": self.interrupt_response}
        return {"type": "server_vad", "threshold": self.threshold,
                "prefix_padding_ms": self.prefix_padding_ms,
                "silence_duration_ms": self.silence_duration_ms,
                "idle_timeout_ms": self.idle_timeout_ms,
                "create_response": self.create_response,
                "interrupt_response": self.interrupt_response}


class SessionSettings(BaseModel):
    """Effective, client-changeable session configuration (immutable)."""
    model_config = ConfigDict(frozen=True)
    model: str = "voice-agent"
    instructions: str = ""
    output_modalities: List[Literal["audio", "text"]] = Field(default_factory=lambda: ["audio"])
    voice: str = "alloy"
    speed: float = 1.0
    input_format: AudioFormat = AudioFormat()
    output_format: AudioFormat = AudioFormat()
    turn_detection: Optional[TurnDetection] = TurnDetection()
    # None = the client turned input transcription events off; the server
    # still transcribes internally (it needs the text to answer).
    transcription_model: Optional[str] = "server-asr"
    max_output_tokens: Optional[int] = None  # None = "inf"
    # function tools in the Realtime shape ({"type": "function", "name", ...}, tools.py)
    tools: List[dict] = Field(default_factory=list)
    tool_choice: Union[str, dict] = "auto"


class ServerLimits(BaseModel):
    """Operator limits; safe defaults."""
    model_config = ConfigDict(frozen=True)
    max_append_b64_bytes: int = 15 * 1024 * 1024
    max_buffered_input_s: float = 120.0
    max_instructions_chars: int = 32768
    max_item_text_chars: int = 100_000
    max_session_s: float = 3600.0
    min_commit_ms: float = 100.0
    max_metadata_keys: int = 16
    max_metadata_key_chars: int = 64
    max_metadata_value_chars: int = 512
    max_output_tokens_cap: int = 4096
    max_tools: int = 128
    max_tools_chars: int = 100_000  # the tools list as JSON
    # no client traffic (events or input audio) for this long: error ``idle_timeout``
    # and close (0 = never)
    idle_timeout_s: float = 600.0
    # client events per session: a token bucket, ``rate`` per second refilled up to
    # ``burst``; an event over it is dropped with an ``error`` ``rate_limit_exceeded``
    # (the session stays open).  0 = no limit
    max_client_events_per_s: float = 200.0
    client_events_burst: int = 400
    # the voices a session may choose (audio.output.voice): OpenAI's names, which the
    # speak stage maps to its installed voices, and those voices' own names
    # (build_app fills this in from the speak stage's engine)
    voices: Tuple[str, ...] = tuple(OPENAI_VOICES)


# ---------------------------------------------------------------------------
# session.update payload (validation only; unknown fields ignored)
# ---------------------------------------------------------------------------

_STRICT = ConfigDict(strict=True, extra="ignore")

_BETA_FORMATS = {"pcm16": AudioFormat(type=PCM, rate=24000),
                 "g711_ulaw": AudioFormat(type=PCMU), "g711_alaw": AudioFormat(type=PCMA),
                 PCM: AudioFormat(type=PCM, rate=24000),
                 PCMU: AudioFormat(type=PCMU), PCMA: AudioFormat(type=PCMA)}


class _FormatIn(BaseModel):
    model_config = _STRICT
    type: Optional[str] = None
    rate: Optional[int] = None


class _TurnDetectionIn(BaseModel):
    model_config = _STRICT
    type: str = "server_vad"
    threshold: Optional[float] = Field(default=None, ge=0.0, le=1.0)
    prefix_padding_ms: Optional[int] = Field(default=None, ge=0, le=10_000)
    silence_duration_ms: Optional[int] = Field(default=None, ge=0, le=10_000)
    idle_timeout_ms: Optional[int] = Field(default=None, ge=1, le=3_600_000)
    create_response: Optional[bool] = None
    interrupt_response: Optional[bool] = None
    min_speech_ms: Optional[int] = Field(default=None, ge=0, le=10_000)
    eagerness: Any = None


class _AudioInputIn(BaseModel):
    model_config = _STRICT
    format: Union[str, _FormatIn, None] = None
    transcription: Any = None
    noise_reduction: Any = None
    turn_detection: Optional[_TurnDetectionIn] = None


class _AudioOutputIn(BaseModel):
    model_config = _STRICT
    format: Union[str, _FormatIn, None] = None
    voice: Any = None
    speed: Optional[float] = Field(default=None, ge=0.25, le=1.5)


class _AudioIn(BaseModel):
    model_config = _STRICT
    input: Optional[_AudioInputIn] = None
    output: Optional[_AudioOutputIn] = None


class _SessionIn(BaseModel):
    model_config = _STRICT
    type: Optional[str] = None
    model: Optional[str] = None
    instructions: Optional[str] = None
    output_modalities: Optional[List[str]] = None
    modalities: Optional[List[str]] = None  # beta
    audio: Optional[_AudioIn] = None
    voice: Any = None  # beta
    input_audio_format: Union[str, _FormatIn, None] = None  # beta
    output_audio_format: Union[str, _FormatIn, None] = None  # beta
    turn_detection: Optional[_TurnDetectionIn] = None  # beta
    input_audio_transcription: Any = None  # beta
    max_output_tokens: Union[int, str, None] = None
    max_response_output_tokens: Union[int, str, None] = None  # beta
    tools: Any = None  # checked by tools.py
    tool_choice: Any = None
    # accepted and ignored
    tracing: Any = None
    temperature: Any = None
    include: Any = None
    truncation: Any = None
    prompt: Any = None


def _parse_format(value, current: AudioFormat, param: str) -> AudioFormat:
    if isinstance(value, str):
        fmt = _BETA_FORMATS.get(value)
        if fmt is None:
            raise ClientError("invalid_value", f"Invalid value for '{param}': {value!r}. Supported "
                              "values are: 'audio/pcm', 'audio/pcmu', 'audio/pcma' "
                              "('pcm16', 'g711_ulaw', 'g711_alaw').", param)
        return fmt
    ftype = value.type if value.type is not None else PCM
    fmt = _BETA_FORMATS.get(ftype)
    if fmt is None:
        raise ClientError("invalid_value", f"Invalid value for '{param}.type': {ftype!r}. "
                          "Supported values are: 'audio/pcm', 'audio/pcmu', 'audio/pcma'.",
                          f"{param}.type")
    if fmt.type == PCM and value.rate is not None:
        if not 8000 <= value.rate <= 48000:
            raise ClientError("invalid_value", f"Invalid value for '{param}.rate': {value.rate}. "
                              "Supported rates are 8000..48000 (24000 recommended).",
                              f"{param}.rate")
        fmt = AudioFormat(type=PCM, rate=value.rate)
    return fmt


def _modalities(value: list[str], param: str) -> list[str]:
    bad = [m for m in value if m not in ("audio", "text")]
    if bad or not value:
        raise ClientError("invalid_value", f"Invalid value for '{param}': {value!r}. Supported "
                          "values are ['audio'] or ['text'].", param)
    return ["audio"] if "audio" in value else ["text"]


def _max_tokens(value, param: str, limits: ServerLimits) -> Optional[int]:
    if value == "inf":
        return None
    if isinstance(value, str) or isinstance(value, bool) or value < 1 \
            or value > limits.max_output_tokens_cap:
        raise ClientError("invalid_value", f"Invalid value for '{param}': {value!r}. Expected an "
                          f"integer 1..{limits.max_output_tokens_cap} or 'inf'.", param)
    return int(value)


def _turn_detection(td: _TurnDetectionIn, current: Optional[TurnDetection],
                    param: str) -> TurnDetection:
    if td.type not in ("server_vad", "semantic_vad"):
        raise ClientError("invalid_value", f"Invalid value for '{param}.type': {td.type!r}. "
                          "Supported values are: 'server_vad', 'semantic_vad'.", f"{param}.type")
    base = current or TurnDetection()
    changes = {k: getattr(td, k) for k in ("threshold", "prefix_padding_ms", "silence_duration_ms",
                                           "create_response", "interrupt_response",
                                           "min_speech_ms")
               if getattr(td, k) is not None}
    changes["type"] = td.type
    if td.eagerness is not None:
        if td.eagerness not in EAGERNESS:
            raise ClientError("invalid_value", f"Invalid value for '{param}.eagerness': "
                              f"{td.eagerness!r}. Supported values are: "
                              + ", ".join(f"'{e}'" for e in EAGERNESS) + ".", f"{param}.eagerness")
        changes["eagerness"] = td.eagerness
    if "idle_timeout_ms" in td.model_fields_set:
        changes["idle_timeout_ms"] = td.idle_timeout_ms
    return base.model_copy(update=changes)


def apply_session_update(current: SessionSettings, session: Any,
                         limits: ServerLimits = ServerLimits()) -> SessionSettings:
    """Validate a ``session.update``'s ``session`` object and merge it."""
    if not isinstance(session, dict):
        raise ClientError("invalid_type", "Invalid type for 'session': expected an object.",
                          "session")
    try:
        s = _SessionIn.model_validate(session)
    except ValidationError as exc:
        raise from_validation_error(exc, "session") from None
    upd: dict[str, Any] = {}
    if s.type is not None and s.type != "realtime":
        raise ClientError("invalid_value", f"Invalid value for 'session.type': {s.type!r}. "
                          "Supported values are: 'realtime'.", "session.type")
    if s.model is not None:
        upd["model"] = s.model
    if s.instructions is not None:
        if len(s.instructions) > limits.max_instructions_chars:
            raise ClientError("string_above_max_length",
                              f"Invalid 'session.instructions': string too long. Expected at "
                              f"most {limits.max_instructions_chars} characters.",
                              "session.instructions")
        upd["instructions"] = s.instructions
    if s.modalities is not None:
        upd["output_modalities"] = _modalities(s.modalities, "session.modalities")
    if s.output_modalities is not None:
        upd["output_modalities"] = _modalities(s.output_modalities, "session.output_modalities")
    for key in ("max_response_output_tokens", "max_output_tokens"):
        if key in s.model_fields_set:
            v = getattr(s, key)
            upd["max_output_tokens"] = None if v is None else _max_tokens(v, f"session.{key}",
                                                                          limits)
    voice, voice_param = s.voice, "session.voice"
    # beta flat fields first, GA nested fields override
    if s.input_audio_format is not None:
        upd["input_format"] = _parse_format(s.input_audio_format, current.input_format,
                                            "session.input_audio_format")
    if s.output_audio_format is not None:
        upd["output_format"] = _parse_format(s.output_audio_format, current.output_format,
                                             "session.output_audio_format")
    td_current = current.turn_detection
    if "turn_detection" in s.model_fields_set:
        upd["turn_detection"] = None if s.turn_detection is None else _turn_detection(
            s.turn_detection, td_current, "session.turn_detection")
    if "input_audio_transcription" in s.model_fields_set:
        upd["transcription_model"] = _transcription_model(s.input_audio_transcription, current)
    a = s.audio
    if a is not None and a.input is not None:
        i = a.input
        if i.format is not None:
            upd["input_format"] = _parse_format(i.format, current.input_format,
                                                "session.audio.input.format")
        if "turn_detection" in i.model_fields_set:
            upd["turn_detection"] = None if i.turn_detection is None else _turn_detection(
                i.turn_detection, td_current, "session.audio.input.turn_detection")
        if "transcription" in i.model_fields_set:
            upd["transcription_model"] = _transcription_model(i.transcription, current)
    if a is not None and a.output is not None:
        o = a.output
        if o.format is not None:
            upd["output_format"] = _parse_format(o.format, current.output_format,
                                                 "session.audio.output.format")
        if o.speed is not None:
            upd["speed"] = o.speed
        if o.voice is not None:
            voice, voice_param = o.voice, "session.audio.output.voice"
    if voice is not None:
        upd["voice"] = _voice(voice, voice_param, limits)
    upd.update(_tool_settings(s, current, limits))
    return current.model_copy(update=upd)


def _voice(voice: Any, param: str, limits: ServerLimits) -> str:
    """A voice name (or ``{"id": name}``) the speak stage has; anything else is an
    error event and the session keeps the voice it had."""
    name = voice.get("id") if isinstance(voice, dict) else voice
    if not isinstance(name, str) or name not in limits.voices:
        raise ClientError("invalid_value",
                          f"Invalid value for '{param}': {name!r}. Supported values are: "
                          + ", ".join(f"'{v}'" for v in limits.voices) + ".", param)
    return name


def _tool_settings(s: _SessionIn, current: SessionSettings, limits: ServerLimits) -> dict:
    """``tools`` / ``tool_choice`` of an update.  A choice kept from before
    that no longer fits the new tools (a named function that went, ``required``
    with none left) falls back to ``auto``."""
    upd: dict[str, Any] = {}
    tools = current.tools
    if "tools" in s.model_fields_set:
        tools = upd["tools"] = parse_tools(s.tools, "session.tools", limits.max_tools,
                                           limits.max_tools_chars)
    if s.tool_choice is not None:
        upd["tool_choice"] = parse_tool_choice(s.tool_choice, tools, "session.tool_choice")
    elif not choice_still_valid(current.tool_choice, tools):
        upd["tool_choice"] = "auto"
    return upd


def _transcription_model(value: Any, current: SessionSettings) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, dict) and isinstance(value.get("model"), str):
        return value["model"]
    return current.transcription_model or "server-asr"


def session_to_wire(settings: SessionSettings, session_id: str,
                    expires_at: int = 0) -> dict:
    """Full effective session object for session.created/updated."""
    tr = None if settings.transcription_model is None else {"model": settings.transcription_model}
    return {
        "type": "realtime",
        "object": "realtime.session",
        "id": session_id,
        "model": settings.model,
        "output_modalities": list(settings.output_modalities),
        "instructions": settings.instructions,
        "tools": [dict(t) for t in settings.tools],
        "tool_choice": settings.tool_choice,
        "max_output_tokens": "inf" if settings.max_output_tokens is None
        else settings.max_output_tokens,
        "tracing": None,
        "truncation": "auto",
        "prompt": None,
        "expires_at": expires_at,
        "include": None,
        "audio": {
            "input": {
                "format": settings.input_format.wire(),
                "transcription": tr,
                "noise_reduction": None,
                "turn_detection": None if settings.turn_detection is None
                else settings.turn_detection.wire(),
            },
            "output": {
                "format": settings.output_format.wire(),
                "voice": settings.voice,
                "speed": settings.speed,
            },
        },
    }
