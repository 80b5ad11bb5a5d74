"""Two recognisers behind one ``hear``: the quick one for clean lines, a
stronger one for lines that sound noisy (line_noise.py says which).

The recognition thread batches segments of every stream into one call; a
batch that holds both kinds is split, each part read by its recogniser (one
after the other, on the same thread), and the results put back in order.

The strong recogniser is loaded when the first noisy line is heard, on a
thread of its own, not at start-up: a box whose lines are all clean (and
every test server) never pays its load time or its memory (Whisper base:
~1.7 s of CPU, 110-180 MB).  Until it is ready the quick one reads
everything, so no segment waits for the load.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Sequence

import numpy as np

log = logging.getLogger(__name__)

Hear = Callable[..., list]


class NoisyLineASR:
    """``hear(segments, noisy=[...], **per_segment_lists)`` over two recognisers,
    the strong one made by ``load_strong`` when first needed (or by ``load()``)."""

    def __init__(self, quick: Hear, load_strong: Callable[[], Hear]) -> None:
        self.quick = quick
        self._load_strong = load_strong
        self._strong: Hear | None = None
        self._loader: threading.Thread | None = None
        self._lock = threading.Lock()
        self.noisy_segments = 0          # segments the strong one read
        self.read_while_loading = 0      # noisy segments the quick one read meanwhile
        self.load_error: str | None = None

    @property
    def strong_ready(self) -> bool:
        return self._strong is not None

    def load(self, wait: bool = True) -> None:
        """Starts loading the strong recogniser (once); ``wait`` blocks until done."""
        with self._lock:
            if self._loader is None:
                self._loader = threading.Thread(target=self._load, name="listen-asr-load",
                                                daemon=True)
                self._loader.start()
            loader = self._loader
        if wait:
            loader.join()

    def _load(self) -> None:
        try:
            self._strong = self._load_strong()
        except Exception as exc:       # a broken model file: clean lines go on as before
            self.load_error = f"{type(exc).__name__}: {exc}"
            log.error("listen: the noisy-line recogniser did not load (%s); "
                      "the quick one reads every line", self.load_error)

    def hear(self, segments: Sequence[np.ndarray], noisy: Sequence[bool] | None = None,
             **kw: Any) -> list:
        """The recognisers' results, in the segments' order.  Every keyword that
        is a list is one value per segment and is split with them; the others
        (``early``) go to both."""
        if not noisy or not any(noisy):
            return list(self.quick(list(segments), **kw))
        strong = self._strong
        if strong is None:
            self.load(wait=False)
            self.read_while_loading += sum(map(bool, noisy))
            return list(self.quick(list(segments), **kw))
        out: list = [None] * len(segments)
        for want, hear in ((False, self.quick), (True, strong)):
            idx = [i for i, n in enumerate(noisy) if bool(n) == want]
            if not idx:
                continue
            part = {k: ([v[i] for i in idx] if isinstance(v, list) else v) for k, v in kw.items()}
            for i, r in zip(idx, hear([segments[i] for i in idx], **part)):
                out[i] = r
            if want:
                self.noisy_segments += len(idx)
        return out

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"noisy_segments": self.noisy_segments,
                               "noisy_read_while_loading": self.read_while_loading,
                               "noisy_model_loaded": self.strong_ready}
        if self.load_error:
            out["noisy_model_error"] = self.load_error
        return out
