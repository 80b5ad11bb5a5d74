import warnings

import numpy as np
import pytest

from voice_server.audio_codec import (PCM, PCMA, PCMU, StreamResampler, alaw_decode,
                                      alaw_encode, decode_wire_audio, encode_wire_audio,
                                      mulaw_decode, mulaw_encode, pcm16_from_bytes, resample,
                                      wire_sample_rate)


def _i16(*v):
    return np.array(v, dtype=np.int16)


def test_mulaw_known_vectors():
    assert mulaw_encode(_i16(0)) == b"\xff"
    assert mulaw_encode(_i16(-1)) == b"\x7f"
    assert mulaw_encode(_i16(1)) == b"\xff"
    assert mulaw_encode(_i16(32767)) == b"\x80"
    assert mulaw_encode(_i16(-32768)) == b"\x00"
    assert list(mulaw_decode(b"\xff\x7f\x80\x00")) == [0, 0, 32124, -32124]
    # first segment steps of 8, second segment starts at 132 (G.711 table)
    assert list(mulaw_decode(b"\xfe\xf0\xef\x7e")) == [8, 120, 132, -8]


def _g191_ulaw(x: int) -> int:
    absno = ((~x) >> 2) if x < 0 else (x >> 2)
    absno = min(absno + 33, 0x1FFF)
    i, seg = absno >> 6, 1
    while i:
        seg, i = seg + 1, i >> 1
    out = ((8 - seg) << 4) | (0x0F - ((absno >> seg) & 0x0F))
    return out | 0x80 if x >= 0 else out


def test_mulaw_matches_itu_reference_for_all_inputs():
    x = np.arange(-32768, 32768, 7, dtype=np.int64)
    ours = np.frombuffer(mulaw_encode(x.astype(np.int16)), np.uint8)
    ref = np.array([_g191_ulaw(int(v)) for v in x], np.uint8)
    assert np.array_equal(ours, ref)


def test_alaw_known_vectors():
    assert alaw_encode(_i16(0)) == b"\xd5"
    assert alaw_encode(_i16(-1)) == b"\x55"
    assert alaw_encode(_i16(32767)) == b"\xaa"
    assert alaw_encode(_i16(-32768)) == b"\x2a"
    assert list(alaw_decode(b"\xd5\x55\xaa\x2a")) == [8, -8, 32256, -32256]


def test_alaw_matches_stdlib_audioop():
    with warnings.catch_warnings():  # deprecated in 3.11-3.12; 3.13+ has it from audioop-lts
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop
    x = np.arange(-32768, 32768, dtype=np.int16)
    assert alaw_encode(x) == audioop.lin2alaw(x.tobytes(), 2)
    codes = bytes(range(256))
    assert alaw_decode(codes).tobytes() == audioop.alaw2lin(codes, 2)
    assert mulaw_decode(codes).tobytes() == audioop.ulaw2lin(codes, 2)


@pytest.mark.parametrize("enc,dec", [(mulaw_encode, mulaw_decode), (alaw_encode, alaw_decode)])
def test_g711_round_trip(enc, dec):
    codes = bytes(range(256))
    pcm = dec(codes)
    again = enc(pcm)
    # every code round-trips except mu-law's "negative zero" 0x7F -> 0xFF
    diff = [c for c, a in zip(codes, again) if c != a]
    assert diff in ([], [0x7F])
    assert np.array_equal(dec(again), pcm)
    # a sine survives with > 30 dB SNR
    t = np.arange(8000) / 8000
    sig = (12000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    out = dec(enc(sig)).astype(np.float64)
    err = out - sig
    snr = 10 * np.log10(np.sum(sig.astype(np.float64) ** 2) / np.sum(err ** 2))
    assert snr > 30


def test_decoders_accept_bytes_like():
    assert mulaw_decode(bytearray(b"\xff")).tolist() == [0]
    assert alaw_decode(memoryview(b"\xd5")).tolist() == [8]
    assert mulaw_decode(np.array([0xFF], np.uint8)).tolist() == [0]
    with pytest.raises(TypeError):
        mulaw_encode(np.array([0.5]))


def test_resample_lengths_and_passthrough():
    x = (np.random.default_rng(0).standard_normal(1600) * 1000).astype(np.int16)
    assert len(resample(x, 16000, 24000)) == 2400
    assert len(resample(x, 16000, 8000)) == 800
    assert np.array_equal(resample(x, 16000, 16000), x)


def test_stream_resampler_is_seamless():
    sr_in, sr_out = 22050, 24000
    t = np.arange(sr_in) / sr_in
    x = (10000 * np.sin(2 * np.pi * 300 * t)).astype(np.int16)
    st = StreamResampler(sr_in, sr_out)
    parts = [st.process(x[i:i + 441]) for i in range(0, len(x), 441)] + [st.flush()]
    y = np.concatenate(parts)
    assert abs(len(y) - sr_out) <= 2
    ref = resample(x, sr_in, sr_out)
    n = min(len(y), len(ref)) - 200
    # no clicks: the streamed signal matches the one-shot one closely
    assert np.max(np.abs(y[200:n].astype(int) - ref[200:n].astype(int))) < 200
    assert st.samples_out == len(y)


def test_wire_helpers():
    assert wire_sample_rate(PCM) == 24000 and wire_sample_rate(PCMU) == 8000
    assert wire_sample_rate(PCMA, 16000) == 8000
    pcm = _i16(1, -2, 300)
    for fmt in (PCM, PCMU, PCMA):
        data = encode_wire_audio(pcm, fmt)
        back = decode_wire_audio(data, fmt)
        assert back.dtype == np.int16 and len(back) == 3
    assert encode_wire_audio(pcm, PCM) == b"\x01\x00\xfe\xff\x2c\x01"
    with pytest.raises(ValueError):
        pcm16_from_bytes(b"\x00")
    with pytest.raises(ValueError):
        decode_wire_audio(b"", "audio/opus")
