"""The voice contract's shapes, constructors and validators, and the server's
use of its error-code set (the stages' own output is checked against it in
test_listen.py and test_speak.py)."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.errors import ErrorCode
from runtime.models import voice_contract as vc
from runtime.models.listen.pocketsphinx_asr import StreamingRecognizer
from runtime.models.listen.utterance_asr import StreamingDecoder
from voice_server.transports.http.errors import STATUS_OF


def test_constructors_build_valid_events_of_every_type():
    events = [vc.speech_started_event(120), vc.partial_event("what is"),
              vc.speech_stopped_event(980), vc.final_event("what is it", 120, 980),
              vc.onset_event(90), vc.onset_dropped_event(),
              vc.turn_likely_over_event("what is it"), vc.turn_continues_event(),
              vc.speech_paused_event(700), vc.speech_resumed_event(),
              vc.interim_event("what is", True), vc.language_event("es", 0.93)]
    assert [e["type"] for e in events] == list(vc.LISTEN_EVENT_TYPES)
    for e in events:
        assert vc.validate_listen_event(e) == e
    timed = [k for e in events for k in e if k.endswith("_ms")]
    assert set(timed) == set(vc.LISTEN_TIME_KEYS)


@pytest.mark.parametrize("bad", [
    {"type": "final", "text": "x", "audio_start_ms": 1},                          # key missing
    {"type": "partial", "text": "x", "confidence": 0.9},                          # key not in the contract
    {"type": "partial", "text": 3},                                               # wrong type
    {"type": "speech_started", "audio_start_ms": 1.5},                            # float time
    {"type": "speech_started", "audio_start_ms": True},                           # bool is not int
    {"type": "turn_continues", "text": "x"},                                      # key not in the contract
    {"type": "speech_paused", "audio_start_ms": 1},                               # wrong time key
    {"type": "speech_pausing", "audio_end_ms": 1},                                # unknown type
    {"text": "x"},                                                                # no type
    "final",
])
def test_listen_validator_rejects_drift(bad):
    with pytest.raises(ValueError):
        vc.validate_listen_event(bad)


def test_speak_chunk_constructor_and_validator():
    chunk = vc.speak_chunk(np.zeros(2205, np.int16), 22050, "Hello.")
    assert chunk["duration_ms"] == pytest.approx(100.0)
    assert vc.validate_speak_chunk(chunk) is not None
    for bad in (dict(chunk, audio=np.zeros(10, np.float32)),           # not int16
                dict(chunk, audio=np.zeros((10, 2), np.int16)),         # not mono 1-D
                dict(chunk, audio=[0, 1]),                              # not an array
                dict(chunk, sample_rate="22050"),
                {k: v for k, v in chunk.items() if k != "text"},
                dict(chunk, voice="slt")):
        with pytest.raises(ValueError):
            vc.validate_speak_chunk(bad)


def test_think_request_carries_max_tokens_only_when_given():
    msgs = [{"role": "user", "content": "hi"}]
    assert vc.think_request(msgs) == {"messages": msgs}
    assert vc.think_request(msgs, 32) == {"messages": msgs, "max_tokens": 32}


def test_streaming_decoder_builds_contract_events():
    """The recogniser side's builders of partials and finals, checked without
    the timing that decides whether a live stream shows a partial (the
    recognition thread is replaced: its calls are only recorded)."""

    class RecordingThread:
        def __init__(self) -> None:
            self.calls: list = []

        def submit(self, call) -> None:
            self.calls.append(call)

    thread = RecordingThread()
    dec = StreamingDecoder(7, thread, StreamingRecognizer())
    dec.begin(np.zeros(512, np.float32))
    [partial] = dec.result(thread.calls[-1].tag, "what is")
    assert vc.validate_listen_event(partial) == vc.partial_event("what is")
    assert dec.end(120, 980) == []
    [final] = dec.result(thread.calls[-1].tag, " what is it ")
    assert vc.validate_listen_event(final) == vc.final_event("what is it", 120, 980)


def test_every_runtime_error_code_has_an_http_status():
    assert vc.ERROR_CODES == {c.value for c in ErrorCode}
    assert set(STATUS_OF) == vc.ERROR_CODES
