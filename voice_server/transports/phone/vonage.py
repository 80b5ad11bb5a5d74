"""Vonage Voice API WebSocket (NCCO ``connect`` to a ``websocket`` endpoint).

Wire (Vonage "WebSockets in the Vonage Voice API" guide and the NCCO
reference): audio is BINARY frames of 16-bit little-endian linear PCM, mono,
20 ms each (320 bytes at 8 kHz, 640 at 16 kHz), both ways; control is JSON
text.  The first text frame is ``{"event": "websocket:connected",
"content-type": "audio/l16;rate=16000", ...}`` with the NCCO endpoint's
``headers`` as further keys (the call's custom parameters here).  Outbound
``{"action": "notify", "payload": {...}}`` is answered with
``{"event": "websocket:notify", "payload": {...}}`` once the audio sent before
it has played (the played position), ``{"action": "clear"}`` drops the
buffered audio (answered ``websocket:cleared``).  ``websocket:dtmf {digit,
duration}`` reports a key press.  There is no stop message: the call's end
closes the socket.  Sending tones is a REST call, not a stream message.
"""

from __future__ import annotations

import secrets

from .codec import Inbound, Noted, Outbound, PhoneCodec, Unsupported, json_message
from .line import Encoding, LineFormat

_RATES = (8000, 16000, 24000)
_NOT_PARAMS = ("event", "content-type")


def _rate(content_type) -> int:
    """The rate of ``audio/l16;rate=N`` (0: not that format)."""
    if not isinstance(content_type, str):
        return 0
    kind, _, rest = content_type.replace(" ", "").lower().partition(";")
    if kind != "audio/l16":
        return 0
    opts = dict(p.partition("=")[::2] for p in rest.split(";") if p)
    try:
        return int(opts.get("rate", 0))
    except ValueError:
        return 0


class VonageCodec(PhoneCodec):
    provider = "vonage"
    frame_ms = 20  # Vonage wants exactly 20 ms per binary frame
    marks_echo_on_clear = True  # not documented either way: echoes after a clear are ignored

    def events(self):
        return {"websocket:notify": self._notify, "websocket:connected": self._connected,
                "websocket:dtmf": lambda m: self.key(m.get("digit")),
                "websocket:cleared": lambda _: Noted("websocket:cleared")}

    def _notify(self, msg: dict) -> Inbound:
        p = msg.get("payload")
        return self.played(p.get("name") if isinstance(p, dict) else None)

    def _connected(self, msg: dict) -> Inbound:
        rate = _rate(msg.get("content-type"))
        if rate not in _RATES:
            return Unsupported(f"content-type {str(msg.get('content-type'))[:60]!r} "
                               "(audio/l16;rate=8000|16000|24000)")
        params = {k: v for k, v in msg.items() if k not in _NOT_PARAMS}
        call = params.get("uuid") or params.get("call_uuid")
        return self.begin("vonage-" + secrets.token_hex(8), call,
                          LineFormat(Encoding.L16, rate), params)

    def parse_binary(self, data: bytes) -> Inbound:
        return self.raw_audio(data)

    def media(self, payload: bytes) -> Outbound:
        return Outbound(data=payload)

    def mark(self, name: str) -> Outbound:
        return json_message({"action": "notify", "payload": {"name": name}})

    def clear(self) -> Outbound:
        return json_message({"action": "clear"})


__all__ = ["VonageCodec"]
