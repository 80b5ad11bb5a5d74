"""NoisyLineASR: a batch of both kinds is split between the recognisers and
put back in order, with each segment's own keyword values."""

from __future__ import annotations

import numpy as np

from runtime.models.listen.noisy_line_asr import NoisyLineASR


def _recogniser(name: str, calls: list):
    def hear(segments, **kw):
        calls.append((name, len(segments), kw))
        return [f"{name}:{int(s[0])}" for s in segments]
    return hear


def test_a_mixed_batch_is_split_and_put_back_in_order():
    calls: list = []
    asr = NoisyLineASR(_recogniser("quick", calls), _recogniser("strong", calls))
    segs = [np.full(4, i, np.float32) for i in range(4)]
    out = asr.hear(segs, noisy=[False, True, False, True], full_window=[True, False, False, True],
                   early=True)
    assert out == ["quick:0", "strong:1", "quick:2", "strong:3"]
    assert calls == [("quick", 2, {"full_window": [True, False], "early": True}),
                     ("strong", 2, {"full_window": [False, True], "early": True})]
    assert asr.noisy_segments == 2


def test_without_a_noisy_segment_only_the_quick_one_reads():
    calls: list = []
    asr = NoisyLineASR(_recogniser("quick", calls), _recogniser("strong", calls))
    assert asr.hear([np.zeros(4, np.float32)], noisy=[False]) == ["quick:0"]
    assert asr.hear([np.ones(4, np.float32)]) == ["quick:1"]
    assert [c[0] for c in calls] == ["quick", "quick"] and asr.noisy_segments == 0
