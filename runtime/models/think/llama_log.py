"""llama.cpp's own log, through our logger: its chatter at debug level, its errors shown.

llama.cpp writes what it does while loading a model (tensor counts, the
vocabulary's oddities such as ``control-looking token ... was not
control-type; this is probably a bug in the model``) through one process-wide
callback.  llama-cpp-python installs a callback of its own on import that
reads the levels of an older ggml (``INFO=1, WARN=2, ERROR=3``); the ggml it
now ships numbers them ``DEBUG=1, INFO=2, WARN=3, ERROR=4``, so a warning is
taken for an error and printed on stderr whatever its verbosity says.  A user
of ``make serve`` reads that line as something broken.

:func:`route_to_logger` replaces that callback: every message goes to the
``llama.cpp`` logger, errors at ERROR (still shown) and everything else at
DEBUG (shown with ``--log-level debug``; at INFO with the thinker's
``verbose: true``).  ggml sends a line in pieces (a
``CONT`` piece continues the one before), so pieces are joined into lines.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any

log = logging.getLogger("llama.cpp")

# ggml.h, enum ggml_log_level (the ggml that llama-cpp-python 0.3.x ships)
GGML_ERROR = 4
GGML_CONT = 5


class LineJoiner:
    """Pieces of ggml's log in, whole lines out to ``logger`` at the level of their first piece."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._lock = threading.Lock()  # ggml may log from its worker threads
        self._text = ""                # the line so far
        self._level = logging.DEBUG    # the level of the line so far
        self.chatter = logging.DEBUG   # the level of every line that is not an error

    def piece(self, ggml_level: int, text: str) -> None:
        """Take one piece; every line it completes is logged."""
        with self._lock:
            if ggml_level != GGML_CONT:  # a new piece's own level; an error anywhere makes the line one
                level = logging.ERROR if ggml_level == GGML_ERROR else self.chatter
                self._level = max(self._level, level) if self._text else level
            self._text += text
            *lines, self._text = self._text.split("\n")
            level = self._level
        for line in lines:
            if line.strip():
                self._logger.log(level, "%s", line.rstrip())


_joiner = LineJoiner(log)
_callback: Any = None  # kept alive: ggml holds only a C pointer to it


def route_to_logger(lc: Any, *, verbose: bool = False) -> None:
    """Send llama.cpp's log (``lc`` is the imported ``llama_cpp`` module) to the ``llama.cpp`` logger.

    Idempotent; call it before loading a model, or the load's messages are
    printed by the callback installed before.  ``verbose`` logs what is not an
    error at INFO instead of DEBUG.
    """
    global _callback
    _joiner.chatter = logging.INFO if verbose else logging.DEBUG
    if _callback is None:
        _callback = lc.llama_log_callback(
            lambda level, text, _user: _joiner.piece(level, (text or b"").decode("utf-8", "replace")))
    lc.llama_log_set(_callback, ctypes.c_void_p(0))
