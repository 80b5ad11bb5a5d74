"""Plivo audio streams (``<Stream bidirectional="true" keepCallAlive="true">``).

Wire (Plivo "Stream Event Protocol" / "Audio Streaming Protocol Reference"
pages, the ``playAudio``, ``checkpoint`` and ``clearAudio`` event pages):
text frames.  Inbound ``start {start: {callId, streamId, tracks,
mediaFormat {encoding, sampleRate}}, extra_headers}``, ``media {streamId,
media: {track, timestamp, chunk, payload}}``, ``dtmf {dtmf: {track, digit,
timestamp}}``, ``playedStream {streamId, name}`` (a checkpoint has played;
an older page calls it ``played``), ``clearedAudio``.  Outbound
``playAudio {media: {contentType, sampleRate, payload}}``, ``checkpoint
{streamId, name}``, ``clearAudio {streamId}``, ``sendDTMF {dtmf: "123"}``.
A checkpoint is answered only when the audio before it played, so cleared
checkpoints never come back.  Plivo sends no stop message: the stream ends
when the socket closes (the status callback is HTTP, not on the stream).

Formats: ``audio/x-mulaw`` 8 kHz, ``audio/x-l16`` 8 or 16 kHz (little-endian).
``extra_headers`` (``k=v`` pairs separated by ``;`` or ``,``) are the call's
custom parameters.
"""

from __future__ import annotations

from typing import Optional

from .codec import (Bad, DTMF_DIGITS, Inbound, Noted, Outbound, PhoneCodec, Unsupported,
                    json_message)
from .line import Encoding, LineFormat, MULAW_8K

_CONTENT_TYPE = {Encoding.MULAW: "audio/x-mulaw", Encoding.L16: "audio/x-l16"}


def _line(fmt) -> Optional[LineFormat]:
    if not isinstance(fmt, dict):
        return MULAW_8K
    enc = str(fmt.get("encoding", "audio/x-mulaw")).lower()
    try:
        rate = int(fmt.get("sampleRate", 8000))
    except (TypeError, ValueError):
        return None
    if enc == "audio/x-mulaw" and rate == 8000:
        return MULAW_8K
    if enc == "audio/x-l16" and rate in (8000, 16000):
        return LineFormat(Encoding.L16, rate)
    return None


def _headers(extra) -> dict[str, str]:
    if not isinstance(extra, str):
        return {}
    pairs = (p.partition("=") for p in extra.replace(",", ";").split(";"))
    return {k.strip(): v.strip() for k, sep, v in pairs if sep and k.strip()}


class PlivoCodec(PhoneCodec):
    provider = "plivo"
    frame_ms = 20
    marks_echo_on_clear = False

    def events(self):
        return {"media": self.media_in, "playedStream": self._played, "played": self._played,
                "start": self._start, "dtmf": self.dtmf_in,
                "clearedAudio": lambda _: Noted("clearedAudio")}

    def _played(self, msg: dict) -> Inbound:
        return self.played(msg.get("name"))

    def _start(self, msg: dict) -> Inbound:
        st = msg.get("start")
        if not isinstance(st, dict):
            return Bad("start without a start object")
        line = _line(st.get("mediaFormat"))
        if line is None:
            return Unsupported(f"mediaFormat {str(st.get('mediaFormat'))[:120]}")
        return self.begin(st.get("streamId"), st.get("callId"), line,
                          _headers(msg.get("extra_headers")))

    def media(self, payload: bytes) -> Outbound:
        return json_message({"event": "playAudio", "media": {
            "contentType": _CONTENT_TYPE[self.line.encoding], "sampleRate": self.line.rate,
            "payload": self.b64(payload)}})

    def mark(self, name: str) -> Outbound:
        return json_message({"event": "checkpoint", "streamId": self.stream_id, "name": name})

    def clear(self) -> Outbound:
        return json_message({"event": "clearAudio", "streamId": self.stream_id})

    def send_digits(self, digits: str) -> Optional[Outbound]:
        if not digits or any(d not in DTMF_DIGITS for d in digits):
            return None
        return json_message({"event": "sendDTMF", "dtmf": digits})


__all__ = ["PlivoCodec"]
