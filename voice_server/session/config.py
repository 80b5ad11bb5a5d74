"""Session settings: the effective configuration, its wire form, and the
merging of a client's ``session.update`` into it.

* :class:`SessionSettings` - what the client may change (instructions,
  modalities, audio formats, turn detection, ...).  Defaults match the
  OpenAI Realtime API (server VAD: threshold 0.5, prefix 300 ms, silence
  500 ms, create_response and interrupt_response true; PCM16 24 kHz).
* :class:`ServerLimits` - what the operator fixes (append size, buffered
  input, instructions length, session duration...).
* :func:`merge_session_update` - validates one ``session`` object (GA shape,
  plus beta aliases: ``modalities``, ``voice``, ``input_audio_format``,
  ``output_audio_format`` as "pcm16"/"g711_ulaw"/"g711_alaw",
  top-level ``turn_detection``, ``input_audio_transcription``,
  ``max_response_output_tokens``) field by field and returns a new settings
  object with the valid fields and a :class:`ClientError` for each bad one
  (a client whose update carries one field this server refuses keeps the
  rest: its audio format, its turn detection).  :func:`apply_session_update`
  takes it whole or raises the first error (a client secret's session).
  ``tools`` and ``tool_choice`` are checked (tools.py) and kept; the choice
  only for its form, as clients set it before the tools it names.
  ``truncation`` is checked and kept (truncation.py).
  ``voice_agent`` (an extension, like the ``voice_agent.*`` events) holds the
  operator's ``call_actions`` (call_actions.py); a client tool named like an
  action turned on is refused (``tool_name_reserved``), whichever came first.
  ``audio.input.noise_reduction`` (``{"type": "near_field"|"far_field"}`` or
  null) picks the listen stage's denoiser (runtime/models/listen/denoise.py),
  applied before VAD and ASR.
  ``audio.input.transcription.language`` (ISO-639-1, or null: detect) pins
  the language the caller is heard in (runtime/models/listen/language.py);
  the session's language, pinned or detected, is what the reply is asked to
  answer in and spoken in (prompt.py, the speak request's ``language``).
  Unsupported optional fields (tracing, the transcription model, voice
  names...) are accepted and ignored.
  ``semantic_vad`` (with ``eagerness``) runs the end-of-turn model in the
  listen stage.
* :func:`session_to_wire` - the effective values as reported in
  ``session.created`` / ``session.updated``.
"""

from __future__ import annotations

from typing import Any, List, Literal, Optional, Tuple, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.models.listen.language import check_language
from runtime.models.speak.voices import OPENAI_VOICES

from ..audio_codec import PCM, PCMA, PCMU, G711_RATE
from .call_actions import CallActionsSetting, parse_call_actions, reserved_clash
from .errors import ClientError, from_validation_error
from .tools import check_tool_choice, parse_tools
from .truncation import ThinkContext, Truncation, parse_truncation

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
NOISE_REDUCTION = ("near_field", "far_field")
NoiseReduction = Optional[Literal["near_field", "far_field"]]


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
            extra = {"idle_timeout_ms": self.idle_timeout_ms} if self.idle_timeout_ms else {}
            return {"type": "semantic_vad", "eagerness": self.eagerness,
                    "create_response": self.create_response,
                    "interrupt_response": self.interrupt_response, **extra}
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
    noise_reduction: NoiseReduction = None  # the listen stage's denoiser (None: off)
    # None = the client turned input transcription events off; the server
    # still transcribes internally (it needs the text to answer).
    transcription_model: Optional[str] = "server-asr"
    # audio.input.transcription.language: the caller's language, pinned
    # (ISO-639-1); None: detected by the listen stage
    language: Optional[str] = None
    max_output_tokens: Optional[int] = None  # None = "inf"
    # function tools in the Realtime shape ({"type": "function", "name", ...}, tools.py)
    tools: List[dict] = Field(default_factory=list)
    # as the client set it; checked against the tools when a response starts
    tool_choice: Union[str, dict] = "auto"
    truncation: Truncation = Truncation()
    # extension (session.voice_agent.call_actions): the agent's call actions the
    # operator turned on (call_actions.py); None: none
    call_actions: Optional[CallActionsSetting] = None
    # extension (session.voice_agent.voice_lock): once the caller's voice is
    # enrolled, other people's speech opens no turn (runtime/models/listen/voice_lock.py);
    # None: the listen stage's default
    voice_lock: Optional[bool] = None
    # fixed by the server, never by a client, never on the wire
    context: ThinkContext = ThinkContext()


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
    truncation: Any = None  # checked by truncation.py
    voice_agent: Any = None  # extension: {"call_actions": ...}, checked by call_actions.py
    # accepted and ignored
    tracing: Any = None
    temperature: Any = None
    include: Any = None
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


def _optional_max_tokens(value, param: str, limits: ServerLimits) -> Optional[int]:
    return None if value is None else _max_tokens(value, param, limits)


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


def merge_session_update(current: SessionSettings, session: Any,
                         limits: ServerLimits = ServerLimits()) \
        -> tuple[SessionSettings, list[ClientError]]:
    """Merge a ``session.update``'s ``session`` object field by field: the
    valid fields apply, each bad one is left out and reported (one
    :class:`ClientError` per field, in the order met)."""
    if not isinstance(session, dict):
        return current, [ClientError("invalid_type", "Invalid type for 'session': expected an "
                                     "object.", "session")]
    errors: list[ClientError] = []
    s = _validate_fields(session, errors)
    upd: dict[str, Any] = {}

    def put(key: str, fn, *args) -> None:
        """``upd[key] = fn(*args)``, or the field's ClientError kept."""
        try:
            upd[key] = fn(*args)
        except ClientError as err:
            errors.append(err)

    if s.type is not None and s.type != "realtime":
        errors.append(ClientError("invalid_value", f"Invalid value for 'session.type': "
                                  f"{s.type!r}. Supported values are: 'realtime'.",
                                  "session.type"))
    if s.model is not None:
        upd["model"] = s.model
    if s.instructions is not None:
        if len(s.instructions) > limits.max_instructions_chars:
            errors.append(ClientError(
                "string_above_max_length", f"Invalid 'session.instructions': string too long. "
                f"Expected at most {limits.max_instructions_chars} characters.",
                "session.instructions"))
        else:
            upd["instructions"] = s.instructions
    for key in ("modalities", "output_modalities"):
        if getattr(s, key) is not None:
            put("output_modalities", _modalities, getattr(s, key), f"session.{key}")
    for key in ("max_response_output_tokens", "max_output_tokens"):
        if key in s.model_fields_set:
            put("max_output_tokens", _optional_max_tokens, getattr(s, key), f"session.{key}",
                limits)
    voice, voice_param = s.voice, "session.voice"
    td_current = current.turn_detection

    def turn_detection(td: Optional[_TurnDetectionIn], param: str) -> Optional[TurnDetection]:
        return None if td is None else _turn_detection(td, td_current, param)

    # beta flat fields first, GA nested fields override
    if s.input_audio_format is not None:
        put("input_format", _parse_format, s.input_audio_format, current.input_format,
            "session.input_audio_format")
    if s.output_audio_format is not None:
        put("output_format", _parse_format, s.output_audio_format, current.output_format,
            "session.output_audio_format")
    if "turn_detection" in s.model_fields_set:
        put("turn_detection", turn_detection, s.turn_detection, "session.turn_detection")
    if "input_audio_transcription" in s.model_fields_set:
        upd["transcription_model"] = _transcription_model(s.input_audio_transcription, current)
        put("language", _transcription_language, s.input_audio_transcription, current,
            "session.input_audio_transcription.language")
    a = s.audio
    if a is not None and a.input is not None:
        i = a.input
        if i.format is not None:
            put("input_format", _parse_format, i.format, current.input_format,
                "session.audio.input.format")
        if "turn_detection" in i.model_fields_set:
            put("turn_detection", turn_detection, i.turn_detection,
                "session.audio.input.turn_detection")
        if "transcription" in i.model_fields_set:
            upd["transcription_model"] = _transcription_model(i.transcription, current)
            put("language", _transcription_language, i.transcription, current,
                "session.audio.input.transcription.language")
        if "noise_reduction" in i.model_fields_set:
            put("noise_reduction", _noise_reduction, i.noise_reduction,
                "session.audio.input.noise_reduction")
    if a is not None and a.output is not None:
        o = a.output
        if o.format is not None:
            put("output_format", _parse_format, o.format, current.output_format,
                "session.audio.output.format")
        if o.speed is not None:
            upd["speed"] = o.speed
        if o.voice is not None:
            voice, voice_param = o.voice, "session.audio.output.voice"
    if voice is not None:
        put("voice", _voice, voice, voice_param, limits)
    if "tools" in s.model_fields_set:
        put("tools", parse_tools, s.tools, "session.tools", limits.max_tools,
            limits.max_tools_chars)
    if s.tool_choice is not None:
        put("tool_choice", check_tool_choice, s.tool_choice, "session.tool_choice")
    if s.truncation is not None:
        put("truncation", parse_truncation, s.truncation, "session.truncation")
    if "voice_agent" in s.model_fields_set:
        va = s.voice_agent
        lock_only = isinstance(va, dict) and "voice_lock" in va and "call_actions" not in va
        if not lock_only:
            put("call_actions", _call_actions, va)
        if isinstance(va, dict) and "voice_lock" in va:
            put("voice_lock", _voice_lock, va["voice_lock"])
    _refuse_reserved_names(current, upd, errors)
    return current.model_copy(update=upd), errors


def _call_actions(value: Any) -> Optional[CallActionsSetting]:
    """``session.voice_agent``: ``{"call_actions": ...}`` (null: every action off)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ClientError("invalid_type", "Invalid type for 'session.voice_agent': expected "
                          "an object.", "session.voice_agent")
    return parse_call_actions(value.get("call_actions"), "session.voice_agent.call_actions")


def _voice_lock(value: Any) -> Optional[bool]:
    """``session.voice_agent.voice_lock``: true, false, or null (the server's default)."""
    if value is not None and not isinstance(value, bool):
        raise ClientError("invalid_type", "Invalid type for 'session.voice_agent.voice_lock': "
                          "expected a boolean or null.", "session.voice_agent.voice_lock")
    return value


def _refuse_reserved_names(current: SessionSettings, upd: dict,
                           errors: list[ClientError]) -> None:
    """A client tool may not take the name of a call action turned on: the
    field of this update that makes the clash is left out (the tools when
    both came)."""
    actions = upd.get("call_actions", current.call_actions)
    err = reserved_clash(upd.get("tools", current.tools), actions, "session.tools")
    if err is None:
        return
    if "tools" in upd:
        del upd["tools"]
        errors.append(err)
    else:
        del upd["call_actions"]
        errors.append(ClientError("tool_name_reserved", "Invalid "
                                  "'session.voice_agent.call_actions': a client tool of the "
                                  "session already has an action's name; " + err.message,
                                  "session.voice_agent.call_actions"))


def _voice(voice: Any, param: str, limits: ServerLimits) -> str:
    """A voice name (or ``{"id": name}``) the speak stage has; anything else is an
    error event and the session keeps the voice it had."""
    name = voice.get("id") if isinstance(voice, dict) else voice
    if not isinstance(name, str) or name not in limits.voices:
        raise ClientError("invalid_value",
                          f"Invalid value for '{param}': {name!r}. Supported values are: "
                          + ", ".join(f"'{v}'" for v in limits.voices) + ".", param)
    return name


def apply_session_update(current: SessionSettings, session: Any,
                         limits: ServerLimits = ServerLimits()) -> SessionSettings:
    """Validate a ``session`` object whole and merge it: the first bad field
    raises its :class:`ClientError` (a client secret's session, checked when
    it is minted, is refused whole)."""
    settings, errors = merge_session_update(current, session, limits)
    if errors:
        raise errors[0]
    return settings


def _validate_fields(session: dict, errors: list[ClientError]) -> "_SessionIn":
    """The update's fields that have the right JSON types: each one that does
    not is taken out (its innermost field: a bad ``threshold`` leaves the rest
    of ``turn_detection`` in) and reported."""
    data = _copy_dicts(session)
    for _ in range(64):  # one field out per round; a session object has fewer
        try:
            return _SessionIn.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            errors.append(from_validation_error(exc, "session"))
            if not _remove(data, first.get("loc", ())):
                break
    return _SessionIn()


def _copy_dicts(value: Any) -> Any:
    return {k: _copy_dicts(v) for k, v in value.items()} if isinstance(value, dict) else value


def _remove(data: dict, loc: tuple) -> bool:
    """Take out the innermost field of ``data`` on the path ``loc`` (a list
    index or one of pydantic's union tags ends the walk there)."""
    path: list[tuple[dict, str]] = []
    node: Any = data
    for part in loc:
        if not isinstance(node, dict) or part not in node:
            break
        path.append((node, part))
        node = node[part]
    if not path:
        return False
    parent, key = path[-1]
    del parent[key]
    return True


def _noise_reduction(value: Any, param: str) -> NoiseReduction:
    """``{"type": "near_field"|"far_field"}`` or null."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in NOISE_REDUCTION:
        raise ClientError("invalid_value", f"Invalid value for '{param}': {value!r}. Expected "
                          "null or {'type': 'near_field' | 'far_field'}.", param)
    return kind


def _transcription_model(value: Any, current: SessionSettings) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, dict) and isinstance(value.get("model"), str):
        return value["model"]
    return current.transcription_model or "server-asr"


def _transcription_language(value: Any, current: SessionSettings, param: str) -> Optional[str]:
    """``transcription.language``: an ISO-639-1 code Whisper knows, or
    null / absent (detect); a transcription object without it keeps no pin,
    as the API's does (its fields are set together)."""
    if not isinstance(value, dict):
        return None
    lang = value.get("language")
    if lang == "":
        return None
    try:
        return check_language(lang)
    except ValueError:
        raise ClientError("invalid_value", f"Invalid value for '{param}': {lang!r}. Expected an "
                          "ISO-639-1 language code (such as 'en', 'es', 'ja') or null.",
                          param) from None


def session_to_wire(settings: SessionSettings, session_id: str,
                    expires_at: int = 0) -> dict:
    """Full effective session object for session.created/updated."""
    tr = None if settings.transcription_model is None else {"model": settings.transcription_model}
    if tr is not None and settings.language is not None:
        tr["language"] = settings.language
    va = {} if settings.call_actions is None else {"call_actions": settings.call_actions.wire()}
    if settings.voice_lock is not None:
        va["voice_lock"] = settings.voice_lock
    extension = {"voice_agent": va} if va else {}
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
        "truncation": settings.truncation.wire(),
        "prompt": None,
        "expires_at": expires_at,
        "include": None,
        "audio": {
            "input": {
                "format": settings.input_format.wire(),
                "transcription": tr,
                "noise_reduction": None if settings.noise_reduction is None
                else {"type": settings.noise_reduction},
                "turn_detection": None if settings.turn_detection is None
                else settings.turn_detection.wire(),
            },
            "output": {
                "format": settings.output_format.wire(),
                "voice": settings.voice,
                "speed": settings.speed,
            },
        },
        **extension,
    }
