"""The phone bridges' socket-free halves: each provider's codec (one message
in, one meaning out; never raises) and the playout (frames, marks, clear),
with no server and no socket."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from voice_server.transports.phone.codec import (Bad, CallAudio, CallEnd, CallStart, KeyPress,
                                                 Noted, Played, Unsupported)
from voice_server.transports.phone.exotel import ExotelCodec
from voice_server.transports.phone.line import Encoding
from voice_server.transports.phone.playout import Kind, Playout
from voice_server.transports.phone.plivo import PlivoCodec
from voice_server.transports.phone.telnyx import TelnyxCodec
from voice_server.transports.phone.twilio import TwilioCodec
from voice_server.transports.phone.vonage import VonageCodec

B64_20MS_MULAW = base64.b64encode(b"\xff" * 160).decode()
B64_20MS_L16 = base64.b64encode(b"\x00" * 320).decode()  # at 8 kHz
B64_20MS_L16_16K = base64.b64encode(b"\x00" * 640).decode()

# (codec, start message, media message, end message or None, expected encoding, rate)
CASES = {
    "twilio": (TwilioCodec, {"event": "start", "start": {
        "streamSid": "MZ1", "callSid": "CA1", "customParameters": {"Voice": "x"},
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}},
        {"event": "media", "media": {"track": "inbound", "payload": B64_20MS_MULAW}},
        {"event": "stop"}, Encoding.MULAW, 8000),
    "telnyx": (TelnyxCodec, {"event": "start", "stream_id": "S1", "start": {
        "call_control_id": "v3:c", "custom_parameters": {"voice": "x"},
        "media_format": {"encoding": "PCMA", "sample_rate": 8000, "channels": 1}}},
        {"event": "media", "media": {"track": "inbound", "payload": B64_20MS_MULAW}},
        {"event": "stop"}, Encoding.ALAW, 8000),
    "plivo": (PlivoCodec, {"event": "start", "start": {
        "callId": "c", "streamId": "S1", "mediaFormat": {"encoding": "audio/x-l16",
                                                         "sampleRate": 16000}},
        "extra_headers": "voice=x;userId=1"},
        {"event": "media", "media": {"track": "inbound", "payload": B64_20MS_L16_16K}},
        None, Encoding.L16, 16000),
    "exotel": (ExotelCodec, {"event": "start", "stream_sid": "S1", "start": {
        "stream_sid": "S1", "call_sid": "C1", "custom_parameters": {"voice": "x"},
        "media_format": {"encoding": "audio/x-raw", "sample_rate": "8000", "bit_rate": "16"}}},
        {"event": "media", "media": {"payload": B64_20MS_L16}},
        {"event": "stop", "stop": {"reason": "callended"}}, Encoding.L16, 8000),
    "vonage": (VonageCodec, {"event": "websocket:connected",
                             "content-type": "audio/l16;rate=16000", "voice": "x"},
               b"\x00" * 640, None, Encoding.L16, 16000),
}


def feed(codec, msg):
    if isinstance(msg, bytes):
        return codec.parse_binary(msg)
    return codec.parse_text(json.dumps(msg))


@pytest.mark.parametrize("provider", list(CASES))
def test_a_call_in_the_providers_format(provider):
    cls, start, media, end, enc, rate = CASES[provider]
    c = cls()
    assert isinstance(feed(c, media), Bad)  # before the start
    st = feed(c, start)
    assert isinstance(st, CallStart) and (st.line.encoding, st.line.rate) == (enc, rate)
    assert st.params["voice"] == "x"
    assert isinstance(feed(c, start), Bad)  # a second start
    audio = feed(c, media)
    assert isinstance(audio, CallAudio) and audio.rate == rate and audio.pcm.size == rate // 50
    if end is not None:
        assert isinstance(feed(c, end), CallEnd)


@pytest.mark.parametrize("provider", list(CASES))
def test_bad_input_never_raises(provider):
    cls, start, media, *_ = CASES[provider]
    c = cls()
    feed(c, start)
    for junk in ("not json", "[1]", "{}", '{"event": "nope"}', '{"event": "media"}',
                 '{"event": "media", "media": {"payload": "!!"}}',
                 '{"event": "media", "media": {"payload": 5}}',
                 '{"event": "dtmf", "dtmf": {"digit": "xy"}}', '{"event": "mark"}'):
        assert isinstance(c.parse_text(junk), (Bad, Noted)), junk
    if provider != "vonage":
        assert isinstance(c.parse_binary(b"\x00\x01"), Bad)
    else:
        assert isinstance(c.parse_binary(b"\x00\x01\x02"), Bad)  # not whole samples


def test_each_provider_reports_keys_and_marks_in_its_own_words():
    assert TwilioCodec().parse_text('{"event": "dtmf", "dtmf": {"digit": "5"}}') == KeyPress("5")
    assert VonageCodec().parse_text('{"event": "websocket:dtmf", "digit": "#"}') == KeyPress("#")
    assert PlivoCodec().parse_text('{"event": "playedStream", "name": "a:0"}') == Played("a:0")
    assert VonageCodec().parse_text(
        '{"event": "websocket:notify", "payload": {"name": "a:0"}}') == Played("a:0")
    assert isinstance(TelnyxCodec().parse_text('{"event": "start", "stream_id": "s", "start": '
                                               '{"media_format": {"encoding": "OPUS"}}}'),
                      Unsupported)


@pytest.mark.parametrize("provider", list(CASES))
def test_playout_frames_marks_and_the_clear_verb(provider):
    cls, start, *_ = CASES[provider]
    c = cls()
    feed(c, start)
    p = Playout(c)
    pcm = (np.sin(np.arange(24000 // 2) / 5) * 8000).astype(np.int16)  # 500 ms at 24 kHz
    p.audio("resp_1", "item_1", pcm, 24000)
    sent = []
    while (q := p.next()) is not None:
        sent.append(q)
    media = [q for q in sent if q.kind is Kind.MEDIA]
    assert media and all(len(_payload(c, q.message)) == c.frame_bytes() for q in media)
    marks = [q.mark[0] for q in sent if q.kind is Kind.MARK]
    assert marks[0] == "item_1:0:start" and len(marks) >= 2
    # the provider plays the first marks: the played position is known
    assert p.played(marks[1]) == (("item_1", int(marks[1].split(":")[1])), "")
    assert p.played("nobody:0")[1].startswith("unknown mark")
    # barge-in: queued audio goes, the clear goes first
    p.audio("resp_1", "item_1", pcm, 24000)
    p.flush("item_1")
    assert p.next().kind is Kind.CLEAR and p.next() is None
    if c.marks_echo_on_clear:  # a mark dropped by the clear comes back: not heard
        p2 = Playout(c)
        p2.audio("r", "i", pcm, 24000)
        names = [q.mark[0] for q in iter(p2.next, None) if q.mark]
        p2.flush("i")
        assert p2.played(names[-1]) == (None, "")


def _payload(codec, msg) -> bytes:
    if msg.data is not None:
        return msg.data
    body = json.loads(msg.text)
    return base64.b64decode(body["media"]["payload"])


@pytest.mark.parametrize("provider", list(CASES))
def test_playout_rewind_clears_and_goes_on_from_the_played_position(provider):
    """A pause clears the provider's buffer but keeps the item: the audio sent
    again after it is marked from where the caller stopped hearing it."""
    cls, start, *_ = CASES[provider]
    c = cls()
    feed(c, start)
    p = Playout(c)
    pcm = (np.sin(np.arange(24000) / 5) * 8000).astype(np.int16)  # 1 s at 24 kHz
    p.audio("resp_1", "item_1", pcm, 24000)
    list(iter(p.next, None))
    p.audio("resp_1", "item_1", pcm[:2400], 24000)   # queued, not sent yet
    p.rewind("item_1", 400.0)
    assert p.next().kind is Kind.CLEAR and p.next() is None   # the queued audio went too
    p.audio("resp_1", "item_1", pcm[:12000], 24000)   # 500 ms sent again
    sent = list(iter(p.next, None))
    assert [q for q in sent if q.kind is Kind.MEDIA]
    marks = [q.mark for q in sent if q.kind is Kind.MARK]
    assert not any(m[0].endswith(":start") for m in marks)   # the same item goes on
    assert 400 < marks[-1][2] <= 900 and marks[-1][1] == "item_1"
    p.rewind("gone", 100.0)     # an item with nothing open: only the clear
    assert p.next().kind is Kind.CLEAR


def test_a_barge_in_right_after_a_rewind_sends_no_second_clear():
    cls, start, *_ = CASES["twilio"]
    c = cls()
    feed(c, start)
    p = Playout(c)
    pcm = np.zeros(4800, np.int16)
    p.audio("r", "i", pcm, 24000)
    list(iter(p.next, None))
    p.rewind("i", 100.0)
    p.flush("i")
    assert p.next().kind is Kind.CLEAR and p.next() is None
    p.audio("r", "j", pcm, 24000)      # sent again after a rewind: a flush clears again
    list(iter(p.next, None))
    p.rewind("j", 100.0)
    list(iter(p.next, None))
    p.audio("r", "j", pcm, 24000)
    p.flush("j")
    assert p.next().kind is Kind.CLEAR
