"""Offer/answer for one audio stream (RFC 3264), socket-free.

:func:`read_offer` turns the caller's SDP into a :class:`MediaPlan` (the
format both sides have, the RFC 4733 payload type, where to send RTP and the
caller's direction) or raises :class:`NoSharedCodec` (the endpoint answers
488) or :class:`BadSdp` (400).  :func:`answer_sdp` writes our answer.

Hold (RFC 3264 section 8.4): a caller that offers ``sendonly`` or
``inactive`` (or the old ``c=0.0.0.0``) is answered ``recvonly`` /
``inactive`` and hears nothing until an offer with ``sendrecv`` again.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional, Sequence

from aiosipua import parse_sdp

from .payload import FORMATS, PayloadFormat

DTMF_EVENT = "telephone-event"
OUR_DTMF_PT = 101  # the telephone-event payload type of our own offers (calls we place)
ANSWER_DIRECTION = {"sendrecv": "sendrecv", "sendonly": "recvonly", "recvonly": "sendonly",
                    "inactive": "inactive"}
MAX_SDP_CHARS = 16 * 1024


class BadSdp(ValueError):
    """SDP we cannot read, or one with no audio stream: 400 / 488."""


class NoSharedCodec(ValueError):
    """An audio offer with none of our formats: 488 Not Acceptable Here."""


@dataclass(frozen=True)
class MediaPlan:
    """What one offer/answer settled."""
    format: PayloadFormat
    dtmf_pt: Optional[int]  # the caller's telephone-event payload type, None: no RFC 4733
    remote: tuple[str, int]  # where our RTP goes (the caller's c= and m= port)
    caller_direction: str  # sendrecv | sendonly | recvonly | inactive, as offered

    @property
    def held(self) -> bool:
        """The caller put us on hold: they do not listen (RFC 3264 section 8.4)."""
        return self.caller_direction in ("sendonly", "inactive") or _unspecified(self.remote[0])

    @property
    def answer_direction(self) -> str:
        if _unspecified(self.remote[0]):
            return "inactive"
        return ANSWER_DIRECTION[self.caller_direction]


def _unspecified(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).is_unspecified
    except ValueError:
        return False


def _rtpmaps(attrs: dict[str, list[str]]) -> dict[int, tuple[str, int]]:
    """payload type -> (encoding name, clock rate) from ``a=rtpmap``."""
    out: dict[int, tuple[str, int]] = {}
    for line in attrs.get("rtpmap", []):
        pt, _, rest = line.partition(" ")
        name, _, clock = rest.strip().partition("/")
        clock = clock.partition("/")[0]
        if pt.isdigit() and clock.isdigit():
            out[int(pt)] = (name.strip(), int(clock))
    return out


def read_offer(text: str, allowed: Sequence[str],
               prefer: Optional[PayloadFormat] = None) -> MediaPlan:
    """The plan for the caller's offer ``text``: the first format in the
    caller's order that ``allowed`` names (``prefer`` first, when the caller
    still offers it: a re-INVITE keeps the call's format)."""
    if len(text) > MAX_SDP_CHARS:
        raise BadSdp("SDP too large")
    try:
        sdp = parse_sdp(text)
    except Exception as exc:  # noqa: BLE001 - a third-party parser's errors are not typed
        raise BadSdp(f"unreadable SDP ({type(exc).__name__})") from None
    audio = sdp.audio
    if audio is None or audio.port == 0:
        raise BadSdp("no audio stream offered")
    addr = sdp.rtp_address
    if addr is None:
        raise BadSdp("no connection address")
    if "RTP/AVP" not in audio.proto.upper():
        raise NoSharedCodec(f"transport {audio.proto} not supported (RTP/AVP only)")
    maps = _rtpmaps(audio.attributes)
    offered: list[PayloadFormat] = []
    dtmf_pt = None
    for f in audio.formats:
        if not f.isdigit():
            continue
        pt = int(f)
        name, clock = maps.get(pt, ("", 0))
        if name.lower() == DTMF_EVENT and clock == 8000:
            dtmf_pt = dtmf_pt if dtmf_pt is not None else pt
            continue
        fmt = next((x for x in FORMATS.values() if x.payload_type == pt), None) \
            if not name else FORMATS.get(name.upper())
        if fmt is not None and fmt.payload_type == pt and fmt.name in allowed:
            offered.append(fmt)
    if not offered:
        raise NoSharedCodec("none of " + ", ".join(allowed) + " offered")
    chosen = prefer if prefer in offered else offered[0]
    return MediaPlan(chosen, dtmf_pt, (addr[0], int(addr[1])), audio.direction)


def offer_sdp(codecs: Sequence[str], host: str, port: int, session_id: int) -> str:
    """Our offer, for a call we place: ``codecs`` in our order, telephone-event
    (:data:`OUR_DTMF_PT`), ptime 20, sendrecv.  The callee's answer is read
    with :func:`read_offer` (it names the one format it took)."""
    fam = "IP6" if ":" in host else "IP4"
    fmts = [FORMATS[c] for c in codecs]
    pts = [str(f.payload_type) for f in fmts] + [str(OUR_DTMF_PT)]
    lines = ["v=0", f"o=voice-agent {session_id} 0 IN {fam} {host}", "s=voice-agent",
             f"c=IN {fam} {host}", "t=0 0", f"m=audio {port} RTP/AVP {' '.join(pts)}"]
    lines += [f"a=rtpmap:{f.payload_type} {f.name}/{f.clock_rate}" for f in fmts]
    lines += [f"a=rtpmap:{OUR_DTMF_PT} {DTMF_EVENT}/8000", f"a=fmtp:{OUR_DTMF_PT} 0-15",
              "a=ptime:20", "a=sendrecv"]
    return "\r\n".join(lines) + "\r\n"


def answer_sdp(plan: MediaPlan, host: str, port: int, session_id: int, version: int) -> str:
    """Our answer: one format, telephone-event when the caller offered it,
    ptime 20 and the direction that mirrors theirs."""
    fam = "IP6" if ":" in host else "IP4"
    fmt = plan.format
    pts = [str(fmt.payload_type)] + ([str(plan.dtmf_pt)] if plan.dtmf_pt is not None else [])
    lines = ["v=0", f"o=voice-agent {session_id} {version} IN {fam} {host}", "s=voice-agent",
             f"c=IN {fam} {host}", "t=0 0", f"m=audio {port} RTP/AVP {' '.join(pts)}",
             f"a=rtpmap:{fmt.payload_type} {fmt.name}/{fmt.clock_rate}"]
    if plan.dtmf_pt is not None:
        lines += [f"a=rtpmap:{plan.dtmf_pt} {DTMF_EVENT}/8000", f"a=fmtp:{plan.dtmf_pt} 0-15"]
    lines += ["a=ptime:20", f"a={plan.answer_direction}"]
    return "\r\n".join(lines) + "\r\n"


__all__ = ["MediaPlan", "BadSdp", "NoSharedCodec", "read_offer", "answer_sdp", "offer_sdp"]
