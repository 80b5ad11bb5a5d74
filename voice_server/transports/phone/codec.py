"""What every provider codec turns its wire into, and the base they share.

A codec is the socket-free half of a phone bridge (the Pipecat split: one
serializer per provider, one transport for all).  It keeps the provider's
protocol state (the stream id, the line format, whether the call has
started) and does two things:

* ``parse_text(text)`` / ``parse_binary(data)`` turn ONE WebSocket message
  from the provider into ONE :data:`Inbound` value.  They never raise: a
  malformed message is a :class:`Bad` naming the reason, so the bridge logs
  it and the call goes on.
* ``media(payload)``, ``mark(name)``, ``clear()``, ``send_digits(digits)``
  build the :class:`Outbound` messages the provider understands.

The bridge (:mod:`.bridge`) owns the socket and the session; the playout
(:mod:`.playout`) decides what audio and which marks go out when.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Mapping, Optional, Union

import numpy as np

from ...session.keypad import KEYS
from .line import LineAudioError, LineFormat

MAX_MEDIA_PAYLOAD = 64 * 1024  # base64 chars of one media message: 48 KB, 6 s of mu-law
MAX_ID_CHARS = 128  # stream / call ids kept (and logged) at most this long
MAX_PARAMS = 16  # custom parameters taken from a start message
MAX_PARAM_CHARS = 1024


# ------------------------------------------------------------------ inbound
@dataclass
class CallStart:
    """The call's stream began: who it is, the line's format, the custom parameters."""
    stream_id: str
    call_id: Optional[str]
    line: LineFormat
    params: dict[str, str] = field(default_factory=dict)


@dataclass
class CallAudio:
    """The caller's audio, decoded to int16 PCM at ``rate``."""
    pcm: np.ndarray
    rate: int


@dataclass
class KeyPress:
    """A DTMF key the caller pressed: ``0-9``, ``*``, ``#`` or ``A-D``."""
    digit: str


@dataclass
class Played:
    """The provider played everything sent before the mark ``name``."""
    name: str


@dataclass
class CallEnd:
    """The provider ended the stream (the call hung up, or the stream was stopped)."""
    reason: str


@dataclass
class Noted:
    """A well-formed message the bridge has nothing to do with (``connected``,
    the other track's audio, a clear's acknowledgement): logged at debug."""
    what: str


@dataclass
class Bad:
    """A malformed or unexpected message: logged (throttled) and ignored."""
    why: str


@dataclass
class Unsupported:
    """A start whose audio format the bridge cannot carry: the stream is closed (1003)."""
    why: str


Inbound = Union[CallStart, CallAudio, KeyPress, Played, CallEnd, Noted, Bad, Unsupported]


# ------------------------------------------------------------------ outbound
@dataclass(frozen=True)
class Outbound:
    """One WebSocket message to the provider: a text (JSON) or a binary frame."""
    text: Optional[str] = None
    data: Optional[bytes] = None


def json_message(body: dict) -> Outbound:
    return Outbound(text=json.dumps(body, separators=(",", ":")))


DTMF_DIGITS = KEYS  # one rule for what a key is: the session's keypad


# ------------------------------------------------------------------ the base
class PhoneCodec:
    """Base of the provider codecs: shared parsing helpers and defaults.

    Class attributes a provider sets:

    * ``provider`` - the name in logs, metrics and ``/v1/telephony/<provider>``.
    * ``frame_ms`` - audio per outbound media message (the provider's frame).
    * ``marks_echo_on_clear`` - after a clear, does the provider send back the
      marks it dropped?  (Then the bridge must ignore those echoes: cleared,
      not heard.)
    """

    provider: ClassVar[str] = "phone"
    frame_ms: ClassVar[int] = 20
    marks_echo_on_clear: ClassVar[bool] = True

    def __init__(self) -> None:
        self.stream_id: Optional[str] = None  # set by the start message
        self.line: Optional[LineFormat] = None  # set by the start message
        self._handlers: Optional[dict] = None  # events(), built on the first message

    @property
    def started(self) -> bool:
        return self.line is not None

    # -- inbound: the provider's wire -> Inbound (never raises)
    def parse_text(self, text: str) -> Inbound:
        """One JSON message, through the provider's :meth:`events` table."""
        msg = self.load(text)
        if isinstance(msg, Bad):
            return msg
        if self._handlers is None:
            self._handlers = self.events()
        ev = msg.get("event")
        handler = self._handlers.get(ev) if isinstance(ev, str) else None
        if handler is None:
            return Bad(f"unknown event {str(ev)[:40]!r}")
        return handler(msg)

    def events(self) -> dict[str, Callable[[dict], Inbound]]:
        """The provider's ``event`` names and what each message means."""
        raise NotImplementedError

    def parse_binary(self, data: bytes) -> Inbound:
        return Bad("binary frame (this provider sends JSON text frames only)")

    # -- outbound: built for the line of the started call
    def media(self, payload: bytes) -> Outbound:
        raise NotImplementedError

    def mark(self, name: str) -> Outbound:
        raise NotImplementedError

    def clear(self) -> Outbound:
        raise NotImplementedError

    def frame_bytes(self) -> int:
        """Bytes of line audio per outbound media message."""
        return self.line.frame_bytes(self.frame_ms)

    def send_digits(self, digits: str) -> Optional[Outbound]:
        """Tones played into the call, or None: the provider's stream cannot."""
        return None

    # -- helpers for the subclasses
    @staticmethod
    def load(text: str) -> Union[dict, Bad]:
        """The message as a JSON object, or :class:`Bad`."""
        try:
            msg = json.loads(text)
        except (ValueError, TypeError):
            return Bad("malformed JSON")
        return msg if isinstance(msg, dict) else Bad("not a JSON object")

    def begin(self, stream_id, call_id, line: LineFormat, params=None) -> Inbound:
        """The start message's fields, checked: :class:`CallStart` or :class:`Bad`."""
        if self.started:
            return Bad("second start")
        if not isinstance(stream_id, str) or not stream_id:
            return Bad("start without a stream id")
        self.stream_id = stream_id[:MAX_ID_CHARS]
        self.line = line
        call = call_id[:MAX_ID_CHARS] if isinstance(call_id, str) else None
        return CallStart(self.stream_id, call, line, clean_params(params))

    def audio(self, payload) -> Inbound:
        """A base64 media payload of the started call: :class:`CallAudio` or
        :class:`Bad` (before start, not a string, too long, not base64, not
        whole samples)."""
        if self.line is None:
            return Bad("media before start")
        if not isinstance(payload, str) or len(payload) > MAX_MEDIA_PAYLOAD:
            return Bad("media payload missing, not a string or too long")
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            return Bad("media payload is not base64")
        return self.raw_audio(data)

    def raw_audio(self, data: bytes) -> Inbound:
        if self.line is None:
            return Bad("media before start")
        try:
            return CallAudio(self.line.decode(data), self.line.rate)
        except LineAudioError as exc:
            return Bad(str(exc))

    def media_in(self, msg: dict) -> Inbound:
        """``{"media": {"track"?, "payload"}}``: the caller's audio (another
        track's is :class:`Noted`)."""
        m = msg.get("media")
        if not isinstance(m, dict):
            return Bad("media without media object")
        if m.get("track") not in (None, "inbound"):
            return Noted("audio of another track")
        return self.audio(m.get("payload"))

    def mark_in(self, msg: dict) -> Inbound:
        """``{"mark": {"name"}}``: a mark the provider played."""
        m = msg.get("mark")
        return self.played(m.get("name") if isinstance(m, dict) else None)

    def dtmf_in(self, msg: dict) -> Inbound:
        """``{"dtmf": {"digit"}}``: a key the caller pressed."""
        d = msg.get("dtmf")
        return self.key(d.get("digit") if isinstance(d, dict) else None)

    @staticmethod
    def key(digit) -> Inbound:
        if isinstance(digit, str) and digit.upper() in DTMF_DIGITS and len(digit) == 1:
            return KeyPress(digit.upper())
        return Bad(f"dtmf without a valid digit ({str(digit)[:8]!r})")

    @staticmethod
    def played(name) -> Inbound:
        return Played(name) if isinstance(name, str) else Bad("mark without a name")

    @staticmethod
    def b64(payload: bytes) -> str:
        return base64.b64encode(payload).decode("ascii")


def clean_params(params) -> dict[str, str]:
    """Custom parameters as a small str -> str dict (keys lower case)."""
    if not isinstance(params, Mapping):
        return {}
    out: dict[str, str] = {}
    for k, v in list(params.items())[:MAX_PARAMS]:
        if isinstance(v, (str, int, float)) and not isinstance(v, bool):
            out[str(k)[:64].lower()] = str(v)[:MAX_PARAM_CHARS]
    return out


__all__ = ["CallStart", "CallAudio", "KeyPress", "Played", "CallEnd", "Noted", "Bad",
           "Unsupported", "Inbound", "Outbound", "PhoneCodec", "json_message", "clean_params",
           "DTMF_DIGITS", "MAX_MEDIA_PAYLOAD"]
