"""Exotel Voicebot applet (bidirectional AgentStream).

Wire (Exotel "AgentStream - WebSocket protocol" and "Working with the Stream
and Voicebot Applet" pages): text frames.  Inbound ``connected``, ``start
{stream_sid, start: {stream_sid, call_sid, custom_parameters, media_format
{encoding: "audio/x-raw", sample_rate: "8000", bit_rate: "16"}}}``, ``media
{media: {chunk, timestamp, payload}}`` (base64 16-bit little-endian PCM),
``dtmf {dtmf: {digit, duration}}``, ``mark {mark: {name}}``, ``stop {stop:
{reason}}``.  Outbound ``media {stream_sid, media: {payload}}``, ``mark
{stream_sid, mark: {name}}``, ``clear {stream_sid}``.  Exotel asks for
outbound chunks of at least 3.2 kB (the page calls that 100 ms) in multiples
of 320 bytes: the bridge sends 3.2 kB frames (200 ms at 8 kHz, 100 ms at
16 kHz) or 100 ms where that is more (24 kHz).  The stream has no message that plays
tones.  Rates: 8000 (default), 16000 or 24000 (``?sample-rate=`` on the
applet's URL).
"""

from __future__ import annotations

from .codec import (Bad, CallEnd, Inbound, Noted, Outbound, PhoneCodec, Unsupported,
                    json_message)
from .line import Encoding, LineFormat

_RATES = (8000, 16000, 24000)
MIN_CHUNK_BYTES = 3200  # Exotel's smallest outbound chunk (a multiple of 320 bytes)


class ExotelCodec(PhoneCodec):
    provider = "exotel"
    frame_ms = 100
    marks_echo_on_clear = True  # not documented either way: echoes after a clear are ignored

    def events(self):
        return {"media": self.media_in, "mark": self.mark_in, "start": self._start,
                "dtmf": self.dtmf_in, "stop": self._stop,
                "connected": lambda _: Noted("connected")}

    @staticmethod
    def _stop(msg: dict) -> Inbound:
        st = msg.get("stop")
        return CallEnd(str(st.get("reason", "stop"))[:40] if isinstance(st, dict) else "stop")

    def _start(self, msg: dict) -> Inbound:
        st = msg.get("start")
        if not isinstance(st, dict):
            return Bad("start without a start object")
        fmt = st.get("media_format")
        fmt = fmt if isinstance(fmt, dict) else {}
        try:
            rate = int(fmt.get("sample_rate", 8000))
            bits = int(fmt.get("bit_rate", 16))
        except (TypeError, ValueError):
            rate, bits = 0, 0
        if str(fmt.get("encoding", "audio/x-raw")).lower() != "audio/x-raw" \
                or rate not in _RATES or bits != 16:
            return Unsupported(f"media_format {str(fmt)[:120]} (audio/x-raw, 16 bit)")
        return self.begin(st.get("stream_sid") or msg.get("stream_sid"), st.get("call_sid"),
                          LineFormat(Encoding.L16, rate), st.get("custom_parameters"))

    def frame_bytes(self) -> int:
        return max(MIN_CHUNK_BYTES, self.line.frame_bytes(self.frame_ms))

    def media(self, payload: bytes) -> Outbound:
        return json_message({"event": "media", "stream_sid": self.stream_id,
                             "media": {"payload": self.b64(payload)}})

    def mark(self, name: str) -> Outbound:
        return json_message({"event": "mark", "stream_sid": self.stream_id,
                             "mark": {"name": name}})

    def clear(self) -> Outbound:
        return json_message({"event": "clear", "stream_sid": self.stream_id})


__all__ = ["ExotelCodec"]
