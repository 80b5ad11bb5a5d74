"""Twilio Media Streams (bidirectional, ``<Connect><Stream>``): the codec,
the TwiML webhook and ``X-Twilio-Signature``.

Wire (Twilio's "Media Streams - WebSocket Messages" page): text frames only.
Inbound ``connected``, ``start {streamSid, start: {streamSid, callSid,
customParameters, mediaFormat {encoding: "audio/x-mulaw", sampleRate: 8000,
channels: 1}}}``, ``media {media: {track, chunk, timestamp, payload}}``,
``dtmf {dtmf: {track, digit}}``, ``mark {mark: {name}}``, ``stop``.  Outbound
``media {streamSid, media: {payload}}``, ``mark {streamSid, mark: {name}}``,
``clear {streamSid}``; Twilio echoes a mark once the audio before it has
played, and echoes the marks it dropped on ``clear``.  Twilio's stream has no
message that plays DTMF tones.

``POST /v1/telephony/twilio/twiml`` answers a number's voice webhook with
``<Response><Connect><Stream url="wss://HOST/v1/telephony/twilio">`` (the
caller's From/To as ``<Parameter>``s).  The stream URL is
``ServerSettings.twilio_stream_url`` or, by default, derived from the Host
header.  When ``twilio_auth_token`` is set, both the webhook and the stream's
upgrade must carry a valid ``X-Twilio-Signature`` (HMAC-SHA1 of the URL and
the sorted POST parameters) unless the upgrade has an API key; a bad one is
refused with 403.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
from typing import Iterable, Mapping, Optional
from urllib.parse import parse_qsl, urlsplit
from xml.sax.saxutils import quoteattr

from starlette.requests import Request
from starlette.responses import Response

from ...settings import ServerSettings
from ..access import host_of, is_loopback
from .codec import (Bad, CallEnd, Inbound, Noted, Outbound, PhoneCodec, Unsupported,
                    json_message)
from .line import MULAW_8K
from .paths import TWILIO_PATH

log = logging.getLogger("voice_server.transports.phone.twilio")

TWIML_PATH = TWILIO_PATH + "/twiml"
MAX_TWIML_BODY = 64 * 1024
_MULAW_NAMES = ("audio/x-mulaw", "audio/mulaw", "audio/pcmu")


class TwilioCodec(PhoneCodec):
    provider = "twilio"
    frame_ms = 20  # 160 bytes of mu-law per media message
    marks_echo_on_clear = True

    def events(self):
        return {"media": self.media_in, "mark": self.mark_in, "start": self._start,
                "dtmf": self.dtmf_in, "stop": lambda _: CallEnd("stop"),
                "connected": lambda m: Noted(f"connected {str(m.get('protocol'))[:20]}")}

    def _start(self, msg: dict) -> Inbound:
        st = msg.get("start")
        if not isinstance(st, dict):
            return Bad("start without a start object")
        fmt = st.get("mediaFormat")
        if isinstance(fmt, dict):
            enc = str(fmt.get("encoding", "audio/x-mulaw")).lower()
            if enc not in _MULAW_NAMES or fmt.get("sampleRate", 8000) != 8000 \
                    or fmt.get("channels", 1) != 1:
                return Unsupported(f"mediaFormat {str(fmt)[:120]}")
        return self.begin(st.get("streamSid") or msg.get("streamSid"), st.get("callSid"),
                          MULAW_8K, st.get("customParameters"))

    def media(self, payload: bytes) -> Outbound:
        return json_message({"event": "media", "streamSid": self.stream_id,
                             "media": {"payload": self.b64(payload)}})

    def mark(self, name: str) -> Outbound:
        return json_message({"event": "mark", "streamSid": self.stream_id,
                             "mark": {"name": name}})

    def clear(self) -> Outbound:
        return json_message({"event": "clear", "streamSid": self.stream_id})


# ------------------------------------------------------------------ signatures
def twilio_signature(auth_token: str, url: str,
                     params: Iterable[tuple[str, str]] | Mapping | None = None) -> str:
    """Twilio's ``X-Twilio-Signature``: base64(HMAC-SHA1(token, url + k1v1k2v2...)),
    keys sorted (each key's values sorted too)."""
    items = list(params.items()) if isinstance(params, Mapping) else list(params or [])
    grouped: dict[str, set[str]] = {}
    for k, v in items:
        grouped.setdefault(str(k), set()).add(str(v))
    data = url + "".join(k + v for k in sorted(grouped) for v in sorted(grouped[k]))
    mac = hmac.new(auth_token.encode(), data.encode("utf-8"), hashlib.sha1)
    return base64.b64encode(mac.digest()).decode("ascii")


def signature_ok(auth_token: str, signature: str | None, urls: Iterable[str],
                 params=None) -> bool:
    """Does ``signature`` sign any of ``urls`` (every one compared, constant time)?"""
    if not signature:
        return False
    ok = False
    for u in dict.fromkeys(urls):  # unique, in order; no early exit
        ok |= hmac.compare_digest(twilio_signature(auth_token, u, params).encode(),
                                  signature.encode())
    return ok


def signed_urls(host: str, path_qs: str) -> list[str]:
    """The URLs Twilio may have signed for a request to ``path_qs`` on ``host``:
    the request's URL under every scheme (TLS often ends at a proxy or
    tunnel, so the scheme Twilio saw is unknown here)."""
    return [f"{scheme}://{host}{path_qs}" for scheme in ("wss", "ws", "https", "http")]


def twilio_upgrade_signed(headers: Mapping[str, str], scope: Mapping,
                          settings: ServerSettings) -> Optional[bool]:
    """The stream upgrade's ``X-Twilio-Signature`` verdict, or None when no
    ``twilio_auth_token`` is configured (no opinion)."""
    token = settings.twilio_auth_token
    if not token:
        return None
    qs = scope.get("query_string", b"").decode("latin-1")
    path_qs = scope.get("path", TWILIO_PATH) + (f"?{qs}" if qs else "")
    urls = [settings.twilio_stream_url] if settings.twilio_stream_url else []
    return signature_ok(token, headers.get("x-twilio-signature"),
                        urls + signed_urls(headers.get("host") or "", path_qs))


def stream_url_for(settings: ServerSettings, host_header: str | None,
                   forwarded_proto: str | None = None) -> str:
    """The ``<Stream url>``: configured, else ``wss://<Host>/v1/telephony/twilio``
    (``ws://`` for a loopback Host or ``X-Forwarded-Proto: http``)."""
    if settings.twilio_stream_url:
        return settings.twilio_stream_url
    host = host_header or "localhost"
    proto = (forwarded_proto or "").split(",")[0].strip().lower()
    scheme = "ws" if proto == "http" or (not proto and is_loopback(host_of(host))) else "wss"
    return f"{scheme}://{host}{TWILIO_PATH}"


# ------------------------------------------------------------------ TwiML
def twiml_endpoint(settings: ServerSettings):
    """The ``POST /v1/telephony/twilio/twiml`` handler (module docstring)."""
    async def twiml(request: Request) -> Response:
        body = await request.body()
        if len(body) > MAX_TWIML_BODY:
            return Response("request too large", status_code=413, media_type="text/plain")
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        params = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True) \
            if ctype in ("application/x-www-form-urlencoded", "") and body else []
        token = settings.twilio_auth_token
        if token:
            u = urlsplit(str(request.url))
            path_qs = u.path + (f"?{u.query}" if u.query else "")
            urls = signed_urls(u.netloc, path_qs)
            if not signature_ok(token, request.headers.get("x-twilio-signature"), urls, params):
                log.warning("twilio: TwiML request with a bad X-Twilio-Signature")
                return Response("invalid X-Twilio-Signature", status_code=403,
                                media_type="text/plain")
        url = stream_url_for(settings, request.headers.get("host"),
                             request.headers.get("x-forwarded-proto"))
        form = dict(params)
        extra = "".join(f"<Parameter name={quoteattr(k.lower())} value={quoteattr(form[k][:256])}/>"
                        for k in ("From", "To") if form.get(k))
        xml = ('<?xml version="1.0" encoding="UTF-8"?>'
               f"<Response><Connect><Stream url={quoteattr(url)}>{extra}</Stream></Connect>"
               "</Response>")
        return Response(xml, media_type="application/xml")
    return twiml


__all__ = ["TwilioCodec", "twilio_signature", "signature_ok", "stream_url_for",
           "twilio_upgrade_signed", "twiml_endpoint", "TWIML_PATH"]
