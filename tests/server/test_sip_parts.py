"""The SIP endpoint's socket-free parts: SDP offer/answer, RFC 4733 in and out,
RTP in (sources, payload types, reordering), the playout clock, the port pool,
digest auth, the incoming-call hook's header settings and the settings model."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from aiortp import DtmfEvent, RtpPacket
from pydantic import ValidationError

from voice_server.transports.sip.access import DigestGuard, source_allowed
from voice_server.transports.sip.dtmf import KeyReader, KeyWriter
from voice_server.transports.sip.incoming import IncomingCall, session_from_headers
from voice_server.transports.sip.payload import G722, PCMA, PCMU, PayloadCodec
from voice_server.transports.sip.playout import PROGRESS_MS, Playout
from voice_server.transports.sip.ports import PortPool, PortsExhausted
from voice_server.transports.sip.rtp import CallerAudio, CallerKey, Dropped, RtpReader, RtpWriter
from voice_server.transports.sip.sdp import BadSdp, NoSharedCodec, answer_sdp, read_offer
from voice_server.transports.sip.settings import SipSettings

ALL = ("PCMU", "PCMA", "G722")


def offer(formats: str, maps: str = "", direction: str = "sendrecv", ip: str = "10.0.0.5") -> str:
    return (f"v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\n"
            f"m=audio 4000 RTP/AVP {formats}\r\n{maps}a={direction}\r\n")


DTMF = "a=rtpmap:101 telephone-event/8000\r\n"


# ------------------------------------------------------------------ SDP
def test_the_callers_order_wins_and_telephone_event_is_kept():
    plan = read_offer(offer("8 0 101", DTMF), ALL)
    assert plan.format is PCMA and plan.dtmf_pt == 101 and plan.remote == ("10.0.0.5", 4000)
    assert read_offer(offer("9 0"), ALL).format is G722  # static types need no rtpmap
    assert read_offer(offer("9 0"), ("PCMU",)).format is PCMU  # only what we allow
    assert read_offer(offer("0 8"), ALL, prefer=PCMA).format is PCMA  # re-INVITE keeps it


def test_no_shared_codec_and_unreadable_offers():
    with pytest.raises(NoSharedCodec):
        read_offer(offer("18", "a=rtpmap:18 G729/8000\r\n"), ALL)
    with pytest.raises(BadSdp):
        read_offer("this is not sdp", ALL)
    with pytest.raises(BadSdp):
        read_offer(offer("0").replace("m=audio 4000", "m=video 4000"), ALL)


@pytest.mark.parametrize("offered,answered,held", [
    ("sendrecv", "sendrecv", False), ("sendonly", "recvonly", True),
    ("inactive", "inactive", True), ("recvonly", "sendonly", False)])
def test_hold_directions(offered, answered, held):
    plan = read_offer(offer("0 101", DTMF, offered), ALL)
    assert plan.answer_direction == answered and plan.held is held
    text = answer_sdp(plan, "192.0.2.1", 20000, 7, 1)
    assert f"a={answered}" in text and "m=audio 20000 RTP/AVP 0 101" in text
    assert "a=rtpmap:101 telephone-event/8000" in text and "a=ptime:20" in text


def test_old_style_hold_with_a_zero_address():
    plan = read_offer(offer("0", ip="0.0.0.0"), ALL)
    assert plan.held and plan.answer_direction == "inactive"


# ------------------------------------------------------------------ RFC 4733
def test_a_key_is_reported_once_without_the_marker_bit():
    r = KeyReader()
    start = DtmfEvent(1, False, 10, 160).serialize()
    end = DtmfEvent(1, True, 10, 1280).serialize()
    got = [r.feed(1000, p) for p in (start, start, end, end, end)]
    assert got == ["1", None, None, None, None]
    assert r.feed(2000, end) == "1"  # the same key again, a new event (first packets lost)
    assert r.feed(2000, DtmfEvent(11, False, 10, 160).serialize()) == "#"


def test_keys_out_are_progress_then_three_ends_then_a_gap():
    ticks = KeyWriter().ticks("5#")
    per_key = 8 + 3  # 7 progress ticks + the end tick, then 3 ticks of audio
    assert len(ticks) == 2 * per_key
    first = ticks[:8]
    assert first[0].marker and first[0].starts_event and not any(t.marker for t in first[1:])
    assert len(first[-1].payloads) == 3 and all(DtmfEvent.parse(p).end for p in first[-1].payloads)
    assert [DtmfEvent.parse(t.payloads[0]).duration for t in first[:3]] == [160, 320, 480]
    assert all(not t.payloads for t in ticks[8:11])
    w = RtpWriter(0, 101, 160)
    pkts = [RtpPacket.parse(b) for t in ticks[:8] for b in w.events(t)]
    assert len({p.timestamp for p in pkts}) == 1 and pkts[0].marker == 1


# ------------------------------------------------------------------ RTP in
def packet(seq: int, ts: int, pt: int = 0, payload: bytes = b"\xff" * 160, ssrc: int = 7) -> bytes:
    return RtpPacket(payload_type=pt, sequence_number=seq, timestamp=ts, ssrc=ssrc,
                     payload=payload).serialize()


def test_rtp_from_another_source_or_of_another_type_is_dropped():
    r = RtpReader(PayloadCodec(PCMU), 101, "10.0.0.5")
    out = r.feed(packet(1, 160), ("10.0.0.6", 4000))
    assert isinstance(out[0], Dropped) and out[0].wrong_source
    assert isinstance(r.feed(packet(2, 320, pt=8), ("10.0.0.5", 4000))[0], Dropped)
    assert isinstance(r.feed(b"\x80" * 5, ("10.0.0.5", 4000))[0], Dropped)
    assert isinstance(r.feed(b"\x00" * 40, ("10.0.0.5", 4000))[0], Dropped)  # version 0
    assert isinstance(r.feed(packet(3, 480, pt=101, payload=b"\x01"), ("10.0.0.5", 4000))[-1],
                      Dropped)  # a short event


def test_the_jitter_buffer_puts_packets_back_in_order():
    r = RtpReader(PayloadCodec(PCMU), 101, "10.0.0.5")
    level = {n: bytes([0x80 + n]) * 160 for n in range(1, 5)}  # four distinct frames
    got = []
    for seq in (1, 3, 2, 4):
        got += r.feed(packet(seq, seq * 160, payload=level[seq]), ("10.0.0.5", 1))
    frames = [m.pcm for m in got if isinstance(m, CallerAudio)]
    assert len(frames) == 3  # the last waits for its successor
    assert [int(f[0]) for f in frames] == [int(PayloadCodec(PCMU).decode(level[n])[0])
                                           for n in (1, 2, 3)]
    keys = r.feed(packet(5, 800, pt=101, payload=DtmfEvent(3, False, 10, 160).serialize()),
                  ("10.0.0.5", 1))
    assert isinstance(keys[-1], CallerKey) and keys[-1].key == "3"


def test_g722_round_trip_keeps_a_tone():
    c = PayloadCodec(G722)
    t = np.arange(320 * 10) / 16000
    pcm = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    out = np.concatenate([c.decode(c.encode(pcm[k:k + 320])) for k in range(0, pcm.size, 320)])
    assert out.size == pcm.size and np.abs(out[1600:]).mean() > 2000


# ------------------------------------------------------------------ playout
def tone(ms: int, rate: int = 8000) -> np.ndarray:
    return np.full(rate * ms // 1000, 3000, np.int16)


def test_playout_frames_heard_positions_and_end():
    p = Playout(PCMU)
    p.audio("r1", "i1", tone(250), 8000)
    assert len(p.queue) == 12  # 240 ms whole frames; 10 ms waits for more
    heard = [h for h in (p.next()[1] for _ in range(12)) if h is not None]
    assert [h.ms for h in heard] == [PROGRESS_MS, 2 * PROGRESS_MS]
    p.finish("r1")  # the 10 ms tail, padded to one frame, ends the item
    pcm, h = p.next()
    assert pcm.size == 160 and h.item_id == "i1" and h.ms == 260
    assert p.next() == (None, None) and not p.items


def test_barge_in_drops_queued_frames_at_once_and_rewind_restarts_the_count():
    p = Playout(PCMU)
    p.audio("r1", "i1", tone(300, 24000), 24000)  # resampled to the line
    assert len(p.queue) >= 12  # the resampler holds a few ms back
    for _ in range(5):
        p.next()
    p.flush("i1")
    assert p.next()[0] is None and p.stats.flushed_frames >= 7
    p.audio("r2", "i2", tone(200), 8000)
    p.rewind("i2", 60)  # the caller heard 60 ms; the session sends the rest again
    assert not p.queue
    p.audio("r2", "i2", tone(100), 8000)
    assert [f.end_ms for f in p.queue] == [80, 100, 120, 140, 160]
    ms = [h.ms for h in (p.next()[1] for _ in range(5)) if h]
    assert ms == [160]  # 60 + 100: counted from where the caller stopped


def test_a_paused_item_waits_while_silence_goes_out():
    p = Playout(PCMA)
    p.audio("r", "i", tone(100), 8000)
    p.hold("i", paused=True)
    assert p.next()[0] is None and len(p.queue) == 5
    p.hold("i", paused=False)
    assert p.next()[0] is not None


# ------------------------------------------------------------------ ports, access, hook
def test_port_pool_gives_even_ports_round_robin_and_runs_out():
    pool = PortPool(20001, 20006)
    first = next(pool.candidates())
    assert first == 20002
    pool.take(first)
    assert next(pool.candidates()) == 20004
    pool.take(20004)
    pool.take(20006)
    with pytest.raises(PortsExhausted):
        next(pool.candidates())
    pool.give_back(20004)
    assert next(pool.candidates()) == 20004


def test_source_networks():
    assert source_allowed("127.0.0.1", ["127.0.0.0/8"])
    assert not source_allowed("10.1.2.3", ["127.0.0.0/8", "192.168.0.0/16"])
    assert not source_allowed("not-an-ip", ["0.0.0.0/0"])


def _md5(s: str) -> str:
    return hashlib.md5(s.encode()).hexdigest()  # noqa: S324 - the RFC's algorithm


def test_digest_auth_accepts_the_right_answer_only():
    g = DigestGuard({"pbx": "secret"}, "voice-agent")
    ch = g.challenge()
    nonce = ch.split('nonce="')[1].split('"')[0]
    ha1, ha2 = _md5("pbx:voice-agent:secret"), _md5("INVITE:sip:agent@h")
    resp = _md5(f"{ha1}:{nonce}:00000001:abc:auth:{ha2}")
    header = (f'Digest username="pbx", realm="voice-agent", nonce="{nonce}", '
              f'uri="sip:agent@h", response="{resp}", qop=auth, nc=00000001, cnonce="abc"')
    assert g.verify("INVITE", header)
    assert not g.verify("INVITE", header.replace(resp, "0" * 32))
    assert not g.verify("INVITE", header.replace(nonce, "1." + "0" * 32))  # not our nonce
    assert not g.verify("INVITE", None) and not g.verify("INVITE", "Digest garbage")


def test_per_call_settings_from_headers():
    call = IncomingCall("sip_1", "x@y", "sip:a", "sip:b", ("127.0.0.1", 5), "udp", (
        {"name": "X-Voice-Agent-Instructions", "value": "Be brief."},
        {"name": "x-voice-agent-max-output-tokens", "value": "40"},
        {"name": "X-Other", "value": "ignored"}))
    assert session_from_headers(call) == {"instructions": "Be brief.", "max_output_tokens": 40}
    assert call.header("x-other") == "ignored"


def test_settings_are_checked_once():
    assert not SipSettings().enabled
    assert SipSettings(host="0.0.0.0").advertised_host == "127.0.0.1"
    for bad in ({"allow_from": ["not a net"]}, {"rtp_ports": [5000, 4000]},
                {"transports": ["tls"]}, {"codecs": ["G729"]}, {"surprise": 1}):
        with pytest.raises(ValidationError):
            SipSettings(**bad)
