"""Two recognisers behind one ``hear``: the quick one for clean lines, a
stronger one for lines that sound noisy (line_noise.py says which).

The recognition thread batches segments of every stream into one call; a
batch that holds both kinds is split, each part read by its recogniser (one
after the other, on the same thread), and the results put back in order.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

Hear = Callable[..., list]


class NoisyLineASR:
    """``hear(segments, noisy=[...], **per_segment_lists)`` over two recognisers."""

    def __init__(self, quick: Hear, strong: Hear) -> None:
        self.quick = quick
        self.strong = strong
        self.noisy_segments = 0          # segments the strong one read

    def hear(self, segments: Sequence[np.ndarray], noisy: Sequence[bool] | None = None,
             **kw: Any) -> list:
        """The recognisers' results, in the segments' order.  Every keyword that
        is a list is one value per segment and is split with them; the others
        (``early``) go to both."""
        if not noisy or not any(noisy):
            return list(self.quick(list(segments), **kw))
        out: list = [None] * len(segments)
        for strong, hear in ((False, self.quick), (True, self.strong)):
            idx = [i for i, n in enumerate(noisy) if bool(n) == strong]
            if not idx:
                continue
            part = {k: ([v[i] for i in idx] if isinstance(v, list) else v) for k, v in kw.items()}
            for i, r in zip(idx, hear([segments[i] for i in idx], **part)):
                out[i] = r
            if strong:
                self.noisy_segments += len(idx)
        return out
