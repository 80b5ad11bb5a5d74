"""Commands: everything the session core asks its transport/runner to do.

The core never performs I/O; each input method returns ``list[Command]`` in
the order they must be carried out.  Transports send ``SendEvent`` payloads
(JSON text) to the client; the runner turns the other commands into runtime
calls (listen stream, response requests, aborts) or transport actions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

import numpy as np


@dataclass
class SendEvent:
    """A schema-complete server event (dict ready for ``json.dumps``)."""
    event: dict

    @property
    def type(self) -> str:
        return self.event["type"]


@dataclass
class FeedListen:
    """Input audio for the listen stage (VAD + streaming ASR), 16 kHz int16 mono."""
    pcm16k: np.ndarray


@dataclass
class ConfigureListen:
    """(Re)start the listen stream with these VAD params.

    Keys: threshold, silence_duration_ms, prefix_padding_ms, min_speech_ms.
    Emitted at start() when turn detection is on and whenever those values
    change (including switching from push-to-talk back to server VAD).
    """
    params: dict


@dataclass
class StopListen:
    """End the listen stream (turn_detection became null = push-to-talk, or close)."""


@dataclass
class TranscribeBuffer:
    """Transcribe this finished utterance (push-to-talk commit, or a client
    ``input_audio`` item without transcript).  Answer with
    ``Session.transcription_result(item_id, text, now_ms)``."""
    item_id: str
    pcm16k: np.ndarray


@dataclass
class StartResponse:
    """Submit think(+speak) to the runtime.

    ``messages``: the conversation as chat messages (``voice_contract``:
    ``{"role", "content"}``, assistant ``tool_calls`` and ``tool`` results),
    truncated assistant turns already cut to what was heard, the items the
    ``truncation`` setting took out of the context left out (prompt.py).
    ``instructions``: the system message, put first: the think stage's own
    prompt followed by the client's instructions (None: the stage's own prompt
    alone).  ``tools`` / ``tool_choice``: in the chat-completions shape, None
    without tools.
    """
    response_id: str
    messages: list
    modalities: list
    max_tokens: int | None
    instructions: str | None
    metadata: dict | None = None
    tools: list | None = None
    tool_choice: Any = None
    voice: str | None = None   # audio.output.voice and .speed, for the speak stage
    speed: float = 1.0
    language: str | None = None   # the caller's language (ISO-639-1), for the speak stage


@dataclass
class PrepareReply:
    """Preemptive generation: the listen stage has the words of a turn that looks
    over, but the turn is not committed yet.  The runner starts the reply it would
    get (``messages`` as a StartResponse would carry them) and holds its output;
    a StartResponse with the same request adopts it, anything else drops it."""
    messages: list
    modalities: list
    max_tokens: int | None
    instructions: str | None
    tools: list | None = None
    tool_choice: Any = None
    voice: str | None = None
    speed: float = 1.0
    language: str | None = None


@dataclass
class PrefillConversation:
    """The caller started to speak: the think stage decodes the conversation so
    far, up to where their words will go, while they talk, so that the reply's
    prompt (prepared in the pause) decodes only their words.  Nothing is
    answered and nothing reaches the client; ``messages``, ``instructions`` and
    the tools as the next response will carry them.  ``words``: a transcript
    of the speech still going on, decoded too (the reply's prompt then
    decodes only what follows them)."""
    messages: list
    instructions: str | None
    tools: list | None = None
    tool_choice: Any = None
    words: str = ""


@dataclass
class DropPreparedReply:
    """The speaker went on: abort the prepared reply; nothing of it reaches the client."""


@dataclass
class CancelResponse:
    """Abort the runtime request (distributed abort). reason: turn_detected |
    client_cancelled | disconnected | session_expired | item_truncated."""
    response_id: str
    reason: str


@dataclass
class AudioOut:
    """Audio to play (audio_out_mode == "stream" only), native speak rate."""
    response_id: str
    item_id: str
    pcm: np.ndarray
    sample_rate: int


@dataclass
class FlushAudio:
    """Stream transports: drop every queued sample of this item now (barge-in)."""
    item_id: str


@dataclass
class PauseAudio:
    """Stream transports: stop playing this item's queued audio and keep it
    (``Session.pause_output``); what arrives for it meanwhile is kept too."""
    item_id: str


@dataclass
class RewindAudio:
    """Stream transports that can empty the listener's buffer (a phone
    provider's ``clear``): drop what is queued or unplayed of this item now;
    the session sends it again, from ``played_ms`` (ms of the item's audio,
    where the listener stopped), if the reply goes on (``Session.pause_output``
    with ``clear_on_pause``)."""
    item_id: str
    played_ms: float


@dataclass
class ResumeAudio:
    """Stream transports: play this item's kept audio again, from where it stopped."""
    item_id: str


@dataclass
class Close:
    code: int
    reason: str


@dataclass
class HangUpCall:
    """The agent's ``end_call`` (agent_actions.py): everything it said was
    heard; end the call (``CallControl.hang_up``).  ``call_id``: the
    function call's."""
    call_id: str
    reason: str


@dataclass
class TransferCall:
    """The agent's ``transfer_call``: hand the caller to ``target_uri``
    (``CallControl.transfer``) and answer with ``Session.call_action_done``."""
    call_id: str
    target_uri: str


@dataclass
class SendDtmf:
    """The agent's ``send_dtmf``: press ``digits`` on the line
    (``CallControl.send_dtmf``) and answer with ``Session.call_action_done``."""
    call_id: str
    digits: str


# the agent's call actions: carried out by the runner with the call's CallControl
CallAction = Union[HangUpCall, TransferCall, SendDtmf]


Command = Union[SendEvent, FeedListen, ConfigureListen, StopListen, TranscribeBuffer,
                StartResponse, PrepareReply, PrefillConversation, DropPreparedReply,
                CancelResponse, AudioOut, FlushAudio, PauseAudio, RewindAudio, ResumeAudio, Close,
                HangUpCall, TransferCall, SendDtmf]

__all__ = ["SendEvent", "FeedListen", "ConfigureListen", "StopListen", "TranscribeBuffer",
           "StartResponse", "PrepareReply", "PrefillConversation", "DropPreparedReply",
           "CancelResponse", "AudioOut",
           "FlushAudio", "PauseAudio", "RewindAudio", "ResumeAudio", "Close", "Command",
           "HangUpCall", "TransferCall", "SendDtmf", "CallAction"]
