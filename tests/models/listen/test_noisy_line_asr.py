"""NoisyLineASR: a batch of both kinds is split between the recognisers and
put back in order, with each segment's own keyword values; the strong one
loads only when a noisy line first needs it, and nobody waits for it."""

from __future__ import annotations

import threading

import numpy as np

from runtime.models.listen.noisy_line_asr import NoisyLineASR


def _recogniser(name: str, calls: list):
    def hear(segments, **kw):
        calls.append((name, len(segments), kw))
        return [f"{name}:{int(s[0])}" for s in segments]
    return hear


def test_a_mixed_batch_is_split_and_put_back_in_order():
    calls: list = []
    asr = NoisyLineASR(_recogniser("quick", calls), lambda: _recogniser("strong", calls))
    asr.load()
    segs = [np.full(4, i, np.float32) for i in range(4)]
    out = asr.hear(segs, noisy=[False, True, False, True], full_window=[True, False, False, True],
                   early=True)
    assert out == ["quick:0", "strong:1", "quick:2", "strong:3"]
    assert calls == [("quick", 2, {"full_window": [True, False], "early": True}),
                     ("strong", 2, {"full_window": [False, True], "early": True})]
    assert asr.noisy_segments == 2


def test_without_a_noisy_segment_only_the_quick_one_reads():
    calls: list = []
    asr = NoisyLineASR(_recogniser("quick", calls), lambda: _recogniser("strong", calls))
    assert asr.hear([np.zeros(4, np.float32)], noisy=[False]) == ["quick:0"]
    assert asr.hear([np.ones(4, np.float32)]) == ["quick:1"]
    assert [c[0] for c in calls] == ["quick", "quick"] and asr.noisy_segments == 0
    assert not asr.strong_ready        # a clean box never loads the strong one


def test_the_first_noisy_line_starts_the_load_and_the_quick_one_reads_meanwhile():
    calls: list = []
    gate = threading.Event()

    def load():
        gate.wait(5)
        return _recogniser("strong", calls)

    asr = NoisyLineASR(_recogniser("quick", calls), load)
    assert asr.hear([np.ones(4, np.float32)], noisy=[True]) == ["quick:1"]   # not held
    assert asr.stats() == {"noisy_segments": 0, "noisy_read_while_loading": 1,
                           "noisy_model_loaded": False}
    gate.set()
    asr.load()                                       # joins the load already started
    assert asr.hear([np.ones(4, np.float32)], noisy=[True]) == ["strong:1"]
    assert asr.stats()["noisy_model_loaded"] and asr.noisy_segments == 1


def test_a_model_that_fails_to_load_leaves_the_quick_one_reading():
    def broken():
        raise OSError("model.bin: truncated")

    asr = NoisyLineASR(_recogniser("quick", []), broken)
    asr.load()
    assert asr.hear([np.ones(4, np.float32)], noisy=[True]) == ["quick:1"]
    assert "truncated" in asr.stats()["noisy_model_error"]
