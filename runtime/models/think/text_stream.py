"""Turning generated tokens into text deltas that are always valid UTF-8.

A byte-level tokenizer may split one character (an emoji is 4 bytes) across
several tokens.  Emitting each token's bytes as it comes would send broken
characters downstream (TTS, JSON events), so these helpers hold back an
incomplete tail until the character is complete.
"""

from __future__ import annotations

import codecs
from typing import Callable, Sequence


class Utf8Stream:
    """For engines that yield raw bytes per token (llama.cpp pieces)."""

    def __init__(self) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, data: bytes) -> str | None:
        text = self._dec.decode(data)
        return text or None

    def flush(self) -> str | None:
        """End of generation: an incomplete tail can never complete, so it becomes U+FFFD."""
        text = self._dec.decode(b"", final=True)
        return text or None


class TokenTextStream:
    """For tokenizers that only decode whole id sequences (HF tokenizers).

    Decodes a short window of recent ids and emits what is new once it no longer
    ends in a replacement character; the window keeps the cost per token
    constant instead of re-decoding the whole reply.
    """

    def __init__(self, decode: Callable[[Sequence[int]], str]) -> None:
        self._decode = decode
        self._ids: list[int] = []
        self._prefix = 0  # start of the window used as left context
        self._read = 0    # ids up to here are already emitted

    def push(self, token_id: int) -> str | None:
        self._ids.append(token_id)
        before = self._decode(self._ids[self._prefix:self._read])
        now = self._decode(self._ids[self._prefix:])
        if len(now) > len(before) and not now.endswith("\ufffd"):
            delta = now[len(before):]
            self._prefix, self._read = self._read, len(self._ids)
            return delta or None
        return None

    def flush(self) -> str | None:
        before = self._decode(self._ids[self._prefix:self._read])
        now = self._decode(self._ids[self._prefix:])
        self._prefix = self._read = len(self._ids)
        delta = now[len(before):]
        return delta or None
