"""The voice pipeline's contract: what the listen, think and speak stages
exchange with each other and with the server, defined once.

The stage executors (``runtime.models``) and the server (``voice_server``)
are written and tested apart; this module is the one place both import the
stage names, the listen rate, the payload shapes and the error codes from, so
that a renamed key or a new event type cannot reach one side only.

Payloads travel as plain msgpack dicts, so the shapes are ``TypedDict``\\ s (no
cost on the hot path: building one is building a dict) with one constructor
per shape.  :func:`validate_listen_event`, :func:`validate_speak_chunk` and
:func:`validate_think_chunk` check a payload against its shape; they are for
tests and for code that takes payloads from outside the pipeline, not for
every chunk.
"""

from __future__ import annotations

import functools
import typing
from typing import Any, Literal, Union

import numpy as np
from typing_extensions import NotRequired, TypedDict

from runtime.errors import ErrorCode, StageError
# TOOL_CHOICES is re-exported: the server checks tool_choice with it.  tools.py loads
# jsonschema only when a tool is parsed, so this import stays light.
from runtime.models.think.tools import TOOL_CHOICES, parse_tools

# ----------------------------------------------------------------- stages
LISTEN = "listen"
THINK = "think"
SPEAK = "speak"
STAGES = (LISTEN, THINK, SPEAK)
# A spoken reply goes think -> speak; a text-only reply stops at think.
SPOKEN_REPLY_ROUTE = (THINK, SPEAK)
TEXT_REPLY_ROUTE = (THINK,)
# A spoken reply's request params for the speak stage: the voice (an OpenAI name
# or a shipped voice, runtime.models.speak.voices), the pace (1.0: the voice's
# own; a Realtime session allows 0.25..1.5, /v1/audio/speech 0.25..4.0) and the
# language of the caller the reply answers (ISO-639-1, as the listen stage heard
# or the client pinned it; absent or None: not known).  A shipped voice named in
# SPEAK_VOICE wins; otherwise SPEAK_LANGUAGE picks the language's voice (an
# OpenAI name keeps its gender where that language has one).
SPEAK_VOICE = "voice"
SPEAK_SPEED = "speed"
SPEAK_LANGUAGE = "language"

# The one rate the listen stage's models (silero VAD, Whisper, pocketsphinx,
# Smart Turn) work at; the server resamples client audio to it and keeps its
# input timeline in it.
LISTEN_RATE_HZ = 16000

# ------------------------------------------------- error codes on the wire
# The runtime's closed set (runtime.errors.ErrorCode), as the strings an
# ``ErrorInfo.to_wire()`` dict carries.
ERROR_CODES = frozenset(code.value for code in ErrorCode)

# ------------------------------------------------------ listen stage output
# Times are ms on the listen request's own input timeline.
SPEECH_STARTED = "speech_started"
ONSET = "onset"
ONSET_DROPPED = "onset_dropped"
PARTIAL = "partial"
SPEECH_STOPPED = "speech_stopped"
FINAL = "final"
TURN_LIKELY_OVER = "turn_likely_over"
TURN_CONTINUES = "turn_continues"
SPEECH_PAUSED = "speech_paused"
SPEECH_RESUMED = "speech_resumed"
INTERIM = "interim"
LANGUAGE = "language"
LISTEN_EVENT_TYPES = (SPEECH_STARTED, PARTIAL, SPEECH_STOPPED, FINAL, ONSET, ONSET_DROPPED,
                      TURN_LIKELY_OVER, TURN_CONTINUES, SPEECH_PAUSED, SPEECH_RESUMED, INTERIM,
                      LANGUAGE)
# The listen event keys that are positions on the input timeline.
LISTEN_TIME_KEYS = ("audio_start_ms", "audio_end_ms")

# ------------------------------------------------------- listen stage input
# A listen request's param that the server updates while the stream runs
# (``RequestHandle.send(pcm, params=...)``): True while the caller hears the
# agent's reply, False while not.  The stage spends early readings (peeks)
# where they can change something: the first, which tells a backchannel from
# an interruption, only over a reply; the later ones, which ready the reply's
# prompt, only when no reply plays.  Absent: every early reading runs.
AGENT_SPEAKING = "agent_speaking"
# A listen request's param, at its open or on a chunk when it changes: the
# rate the caller's audio had before the server brought it to 16 kHz (8000:
# a telephone line), on which the voice lock has higher bars (voice_lock.py).
LINE_RATE = "line_rate"
# A listen request's language params (runtime/models/listen/language.py): the
# client's pin (ISO-639-1; None: detect), and where a new stream of a session
# starts from when it detected one before (a hint, not a pin).  A multilingual
# Whisper only; an English-only model hears English whatever they say.
LISTEN_LANGUAGE = "language"
LISTEN_LANGUAGE_START = "language_start"


class SpeechStarted(TypedDict):
    type: Literal["speech_started"]
    audio_start_ms: int


class Partial(TypedDict):
    """The whole hypothesis so far for the utterance being spoken."""

    type: Literal["partial"]
    text: str


class SpeechStopped(TypedDict):
    type: Literal["speech_stopped"]
    audio_end_ms: int


class Final(TypedDict):
    type: Literal["final"]
    text: str
    audio_start_ms: int
    audio_end_ms: int
    # a short utterance read again after an acknowledgements prompt ("Uh-huh."
    # for Whisper's "I heard that."), when about as likely (whisper_asr.Heard)
    alternative: NotRequired[str]
    # the language it was transcribed in (ISO-639-1), where the text is not empty
    language: NotRequired[str]


class Language(TypedDict):
    """The stream's language changed: locked on a first long utterance, or
    switched on clear evidence (runtime/models/listen/language.py).  Comes
    just before the ``final`` that changed it; ``probability`` is Whisper's
    on that utterance."""

    type: Literal["language"]
    language: str
    probability: float


class Onset(TypedDict):
    """The first speech frame, before ``min_speech_ms`` confirms it as speech."""

    type: Literal["onset"]
    audio_start_ms: int


class OnsetDropped(TypedDict):
    """The last ``onset`` was too short to be speech.  A word-sized sound
    (Whisper) is read first and comes with its ``text`` and times: a one-word
    command ("Stop.") said over a reply is shorter than speech must be, but
    it is an interruption all the same."""

    type: Literal["onset_dropped"]
    text: NotRequired[str]
    audio_start_ms: NotRequired[int]
    audio_end_ms: NotRequired[int]


class TurnLikelyOver(TypedDict):
    """During a pause, the speculative transcript is ready: the turn may be
    over and a reply can be prepared (Whisper only)."""

    type: Literal["turn_likely_over"]
    text: str


class TurnContinues(TypedDict):
    """The speaker went on after a ``turn_likely_over``: drop what was prepared."""

    type: Literal["turn_continues"]


class SpeechPaused(TypedDict):
    """The speaker has been silent for a moment (64 ms); the utterance is not
    over yet: the silence window decides that."""

    type: Literal["speech_paused"]
    audio_end_ms: int


class SpeechResumed(TypedDict):
    """Speech again after a ``speech_paused``, in the same utterance."""

    type: Literal["speech_resumed"]


class Interim(TypedDict):
    """An early transcript of the utterance so far (Whisper): ``paused`` when it
    covers the words up to a pause the speaker is still in, else a look at the
    first ``asr_peek_ms`` of speech while it goes on.  May be empty (a cough)."""

    type: Literal["interim"]
    text: str
    paused: bool
    alternative: NotRequired[str]       # as in Final


ListenEvent = Union[SpeechStarted, Partial, SpeechStopped, Final, Onset, OnsetDropped, TurnLikelyOver,
                    TurnContinues, SpeechPaused, SpeechResumed, Interim, Language]


def speech_started_event(audio_start_ms: int) -> SpeechStarted:
    return {"type": SPEECH_STARTED, "audio_start_ms": audio_start_ms}


def partial_event(text: str) -> Partial:
    return {"type": PARTIAL, "text": text}


def speech_stopped_event(audio_end_ms: int) -> SpeechStopped:
    return {"type": SPEECH_STOPPED, "audio_end_ms": audio_end_ms}


def final_event(text: str, audio_start_ms: int, audio_end_ms: int,
                alternative: str | None = None, language: str | None = None) -> Final:
    ev: Final = {"type": FINAL, "text": text, "audio_start_ms": audio_start_ms,
                 "audio_end_ms": audio_end_ms}
    if alternative:
        ev["alternative"] = alternative
    if language and text:
        ev["language"] = language
    return ev


def language_event(language: str, probability: float) -> Language:
    return {"type": LANGUAGE, "language": language, "probability": round(float(probability), 3)}


def onset_event(audio_start_ms: int) -> Onset:
    return {"type": ONSET, "audio_start_ms": audio_start_ms}


def onset_dropped_event(text: str | None = None, audio_start_ms: int = 0,
                        audio_end_ms: int = 0) -> OnsetDropped:
    if text is None:
        return {"type": ONSET_DROPPED}
    return {"type": ONSET_DROPPED, "text": text, "audio_start_ms": int(audio_start_ms),
            "audio_end_ms": int(audio_end_ms)}


def turn_likely_over_event(text: str) -> TurnLikelyOver:
    return {"type": TURN_LIKELY_OVER, "text": text}


def turn_continues_event() -> TurnContinues:
    return {"type": TURN_CONTINUES}


def speech_paused_event(audio_end_ms: int) -> SpeechPaused:
    return {"type": SPEECH_PAUSED, "audio_end_ms": audio_end_ms}


def speech_resumed_event() -> SpeechResumed:
    return {"type": SPEECH_RESUMED}


def interim_event(text: str, paused: bool, alternative: str | None = None) -> Interim:
    ev: Interim = {"type": INTERIM, "text": text, "paused": paused}
    if alternative:
        ev["alternative"] = alternative
    return ev


# ------------------------------------------------------- think stage input
# Tools travel in the OpenAI chat-completions shape, the one every
# OpenAI-compatible engine (SGLang, vLLM, llama.cpp's server) takes as is:
#   tools:       [{"type": "function", "function": {"name", "description", "parameters"}}]
#   tool_choice: "auto" | "none" | "required" | {"type": "function", "function": {"name": N}}
# and so do the messages that carry a call and its result:
#   {"role": "assistant", "content": "", "tool_calls": [{"id", "type": "function",
#                                                        "function": {"name", "arguments"}}]}
#   {"role": "tool", "tool_call_id": ID, "content": OUTPUT}


class ToolFunction(TypedDict):
    name: str
    description: NotRequired[str]
    parameters: NotRequired[dict]


class ToolSpec(TypedDict):
    type: Literal["function"]
    function: ToolFunction


class ToolCallFunction(TypedDict):
    name: str
    arguments: str          # JSON text, as the model wrote it


class ToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: ToolCallFunction


class ChatMessage(TypedDict):
    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: NotRequired[list[ToolCall]]     # assistant messages only
    tool_call_id: NotRequired[str]              # tool messages only


class ThinkRequest(TypedDict):
    """What the server submits to think; the thinkers also accept sampling
    overrides (temperature, top_p, ...) beside ``max_tokens``."""

    messages: list[ChatMessage]
    max_tokens: NotRequired[int]
    tools: NotRequired[list[ToolSpec]]
    tool_choice: NotRequired[Any]   # one of TOOL_CHOICES or {"type": "function", "function": {"name": N}}
    include_usage: NotRequired[bool]   # a usage event in the last chunk (thinkers that count)


def validate_tools(tools: Any, tool_choice: Any = None) -> None:
    """A ``ValueError`` saying what is wrong with a request's ``tools`` /
    ``tool_choice`` (names, JSON-Schema parameters, duplicates, a choice
    naming an unknown tool...); the same check the thinkers apply, for the
    server to refuse bad tools before submitting."""
    try:
        parse_tools(tools, tool_choice)
    except StageError as e:
        raise ValueError(str(e)) from None


def think_request(messages: list[ChatMessage], max_tokens: int | None = None,
                  tools: list[ToolSpec] | None = None, tool_choice: Any = None,
                  include_usage: bool = False) -> ThinkRequest:
    req: ThinkRequest = {"messages": messages}
    if max_tokens is not None:
        req["max_tokens"] = int(max_tokens)
    if include_usage:
        req["include_usage"] = True
    if tools:
        req["tools"] = tools
        if tool_choice is not None:
            req["tool_choice"] = tool_choice
    return req


# ------------------------------------------------------ think stage output
# A think chunk is either a text delta (``str``, what it always was) or, when
# the step produced tool-call events, a list of text deltas and tool-call
# events in the order they were produced.  The speak stage speaks only the
# text; the server turns the events into Realtime ``function_call`` items.
TOOL_CALL_DELTA = "tool_call_delta"
TOOL_CALL_DONE = "tool_call_done"
TOOL_CALL_EVENTS = (TOOL_CALL_DELTA, TOOL_CALL_DONE)
# With ``include_usage`` in the request, a thinker that counts tokens puts one
# usage event in the reply's last chunk (as OpenAI's chat streams do with
# ``stream_options.include_usage``): the server reports it in response.done.
# It also says why the reply ended: ``stop`` (the model ended it, or its last
# allowed tool call is complete) or ``length`` (the token budget, max_tokens or
# the context, cut it), which the server reports as an ``incomplete`` response
# and as the HTTP API's ``finish_reason``.
USAGE = "usage"
STOP = "stop"
LENGTH = "length"
FINISH_REASONS = (STOP, LENGTH)
THINK_EVENT_TYPES = TOOL_CALL_EVENTS + (USAGE,)


class ToolCallDelta(TypedDict):
    """A piece of call ``index``'s arguments.  The first delta of a call
    carries its ``call_id`` and ``name``; ``arguments`` may be empty there."""

    type: Literal["tool_call_delta"]
    index: int
    call_id: NotRequired[str]
    name: NotRequired[str]
    arguments: str


class ToolCallDone(TypedDict):
    """Call ``index`` is complete; ``arguments`` is its whole JSON text."""

    type: Literal["tool_call_done"]
    index: int
    call_id: str
    name: str
    arguments: str


class Usage(TypedDict):
    """Tokens of one reply: its prompt (of which ``cached_tokens`` were already
    in the engine's cache) and what it generated."""

    type: Literal["usage"]
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    finish_reason: NotRequired[Literal["stop", "length"]]   # why the reply ended (FINISH_REASONS)


def usage_event(input_tokens: int, cached_tokens: int, output_tokens: int,
                finish_reason: str | None = None) -> Usage:
    """``finish_reason``: :data:`STOP` or :data:`LENGTH` where the thinker knows
    it (every thinker here does); None leaves it out."""
    ev: Usage = {"type": USAGE, "input_tokens": int(input_tokens), "cached_tokens": int(cached_tokens),
                 "output_tokens": int(output_tokens)}
    if finish_reason is not None:
        if finish_reason not in FINISH_REASONS:
            raise ValueError(f"finish_reason must be one of {FINISH_REASONS}, got {finish_reason!r}")
        ev["finish_reason"] = finish_reason  # type: ignore[typeddict-item]
    return ev


def cut_by_budget(chunk: Any) -> bool:
    """The chunk's usage event says the token budget cut the reply."""
    return any(isinstance(e, dict) and e.get("type") == USAGE and e.get("finish_reason") == LENGTH
               for e in think_events(chunk))


ThinkEvent = Union[str, ToolCallDelta, ToolCallDone, Usage]
ThinkChunk = Union[str, list[ThinkEvent]]


def tool_call_delta_event(index: int, arguments: str, call_id: str | None = None,
                          name: str | None = None) -> ToolCallDelta:
    ev: ToolCallDelta = {"type": TOOL_CALL_DELTA, "index": index, "arguments": arguments}
    if call_id is not None:
        ev["call_id"] = call_id
    if name is not None:
        ev["name"] = name
    return ev


def tool_call_done_event(index: int, call_id: str, name: str, arguments: str) -> ToolCallDone:
    return {"type": TOOL_CALL_DONE, "index": index, "call_id": call_id, "name": name,
            "arguments": arguments}


def think_events(chunk: Any) -> list[ThinkEvent]:
    """A think chunk as a list of events (a bare text delta is one event)."""
    if isinstance(chunk, str):
        return [chunk] if chunk else []
    if isinstance(chunk, (list, tuple)):
        return [e for e in chunk if (isinstance(e, str) and e) or isinstance(e, dict)]
    return []


def think_chunk(events: list[ThinkEvent]) -> ThinkChunk | None:
    """Events produced in one step as one chunk: adjacent text deltas joined, a
    bare ``str`` when there are no tool-call events, None when there is nothing."""
    out: list[ThinkEvent] = []
    for e in events:
        if isinstance(e, str):
            if not e:
                continue
            if out and isinstance(out[-1], str):
                out[-1] += e
                continue
        out.append(e)
    if not out:
        return None
    if len(out) == 1 and isinstance(out[0], str):
        return out[0]
    return out


def think_text(chunk: Any) -> str:
    """The text a think chunk carries, tool-call events left out."""
    return "".join(e for e in think_events(chunk) if isinstance(e, str))


# ------------------------------------------------------ speak stage output
class SpeakChunk(TypedDict):
    """One synthesised clause: mono int16 PCM at ``sample_rate`` (the TTS
    engine's own rate, not the listen rate) and the clause as the LLM wrote
    it, markdown included."""

    audio: np.ndarray
    sample_rate: int
    text: str
    duration_ms: float


def speak_chunk(audio: np.ndarray, sample_rate: int, text: str) -> SpeakChunk:
    return {"audio": audio, "sample_rate": sample_rate, "text": text,
            "duration_ms": audio.shape[0] * 1000.0 / sample_rate}


# ------------------------------------------------------------- validation
def validate_listen_event(payload: Any) -> ListenEvent:
    """``payload`` if it is exactly one of the listen event shapes (strict
    types, no extra keys); a ``ValueError`` saying why otherwise."""
    return _adapters()[0].validate_python(payload, strict=True)


def validate_speak_chunk(payload: Any) -> SpeakChunk:
    """``payload`` if it is a :class:`SpeakChunk` with 1-D int16 audio (strict
    types, no extra keys); a ``ValueError`` saying why otherwise."""
    chunk = _adapters()[1].validate_python(payload, strict=True)
    audio = chunk["audio"]
    if audio.dtype != np.int16 or audio.ndim != 1:
        raise ValueError(f"speak chunk audio must be a 1-D int16 array, got {audio.ndim}-D {audio.dtype}")
    return chunk


def validate_think_chunk(payload: Any) -> ThinkChunk:
    """``payload`` if it is a think chunk: a ``str``, or a non-empty list of
    text deltas, tool-call and usage events of exactly their shapes (strict
    types, no extra keys); a ``ValueError`` saying why otherwise."""
    if isinstance(payload, str):
        return payload
    if not isinstance(payload, list) or not payload:
        raise ValueError(f"a think chunk is a str or a non-empty list, got {type(payload).__name__}")
    adapter = _adapters()[2]
    for e in payload:
        if isinstance(e, str):
            continue
        adapter.validate_python(e, strict=True)
        if e["type"] == TOOL_CALL_DELTA and ("call_id" in e) != ("name" in e):
            raise ValueError(f"a tool_call_delta carries call_id and name together or neither: {e!r}")
    return payload


# pydantic is imported on first use: the stages and the CLI, which only build
# payloads, do not pay for building the validators.
@functools.cache
def _adapters() -> tuple[Any, Any, Any]:
    from typing import Annotated

    from pydantic import ConfigDict, Field, TypeAdapter, with_config

    forbid = with_config(ConfigDict(extra="forbid", arbitrary_types_allowed=True))
    shapes = typing.get_args(ListenEvent)
    listen = Annotated[Union[tuple(forbid(shape) for shape in shapes)], Field(discriminator="type")]
    calls = Annotated[Union[forbid(ToolCallDelta), forbid(ToolCallDone), forbid(Usage)],
                      Field(discriminator="type")]
    return TypeAdapter(listen), TypeAdapter(forbid(SpeakChunk)), TypeAdapter(calls)
