"""Telnyx media streaming over WebSocket (Call Control ``stream_url`` with
``stream_bidirectional_mode: "rtp"``, or TeXML ``<Stream>``).

Wire (Telnyx "Stream call media over WebSocket" AsyncAPI page and the Call
Control "Streaming start" page): text frames.  Inbound ``connected``,
``start {stream_id, start: {call_control_id, custom_parameters,
media_format {encoding, sample_rate, channels}}}``, ``media {media: {track,
chunk, timestamp, payload}}`` (base64 RTP payload, no RTP header), ``dtmf
{dtmf: {digit}}``, ``mark {mark: {name}}``, ``error {payload}``, ``stop``.
Outbound ``media {media: {payload}}``, ``mark {mark: {name}}``, ``clear``;
Telnyx returns a mark once the audio before it has played, and returns the
queued marks on ``clear``.

Carried here: PCMU and PCMA at 8 kHz, mono, the same codec both ways (set
``stream_bidirectional_codec`` to the call's codec).  Any other
``media_format`` (G722, OPUS, AMR-WB, L16) closes the stream with 1003.
Sending tones is a Call Control REST command, not a stream message: not
offered.
"""

from __future__ import annotations

from .codec import (Bad, CallEnd, Inbound, Noted, Outbound, PhoneCodec, Unsupported,
                    json_message)
from .line import ALAW_8K, MULAW_8K

_LINES = {"PCMU": MULAW_8K, "PCMA": ALAW_8K}


class TelnyxCodec(PhoneCodec):
    provider = "telnyx"
    frame_ms = 20
    marks_echo_on_clear = True

    def events(self):
        return {"media": self.media_in, "mark": self.mark_in, "start": self._start,
                "dtmf": self.dtmf_in, "stop": lambda _: CallEnd("stop"),
                "connected": lambda _: Noted("connected"),
                "error": lambda m: Bad(f"Telnyx reported an error: "
                                       f"{str(m.get('payload'))[:200]}")}

    def _start(self, msg: dict) -> Inbound:
        st = msg.get("start")
        if not isinstance(st, dict):
            return Bad("start without a start object")
        fmt = st.get("media_format")
        fmt = fmt if isinstance(fmt, dict) else {}
        line = _LINES.get(str(fmt.get("encoding", "PCMU")).upper())
        if line is None or fmt.get("sample_rate", 8000) not in (8000, "8000") \
                or fmt.get("channels", 1) not in (1, "1"):
            return Unsupported(f"media_format {str(fmt)[:120]} (PCMU or PCMA, 8 kHz, mono)")
        return self.begin(msg.get("stream_id"), st.get("call_control_id"), line,
                          st.get("custom_parameters"))

    def media(self, payload: bytes) -> Outbound:
        return json_message({"event": "media", "media": {"payload": self.b64(payload)}})

    def mark(self, name: str) -> Outbound:
        return json_message({"event": "mark", "mark": {"name": name}})

    def clear(self) -> Outbound:
        return json_message({"event": "clear"})


__all__ = ["TelnyxCodec"]
