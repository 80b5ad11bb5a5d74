"""llama.cpp's library and a model's vocabulary: text to tokens and back.

Every part of the llama.cpp thinker reads tokens (the sampler chains, the
tool-call decision, the chunks a reply emits), and two other users of
llama.cpp (the text end-of-turn reader, the Qwen requantiser) load the same
library.  Importing it, and turning text into tokens and a token into its
bytes, is written here once; ``LlamaVocab`` owns the buffer the pieces are
read into.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Sequence

from runtime.errors import ErrorCode, StageError
from runtime.models.think.llama_log import route_to_logger

_INSTALL = "pip install llama-cpp-python"


def import_llama_cpp() -> Any:
    """The ``llama_cpp`` module, set up to share the cores; a StageError when it is missing."""
    # ggml's CPU backend uses OpenMP; libgomp's default spin-waiting barriers make
    # decoding ~100x slower (seconds per token) as soon as another busy process
    # shares the cores (listen/speak stages, a second pipeline).  Must be set
    # before libgomp is loaded, i.e. before the import.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import llama_cpp
    except ImportError as e:
        raise StageError(ErrorCode.STAGE_UNAVAILABLE,
                         f"llama-cpp-python is not installed ({e}); fix: {_INSTALL}") from None
    route_to_logger(llama_cpp)  # its load chatter at debug level, not on stderr
    return llama_cpp


def llama_tokenize(lc: Any, vocab: Any, text: str, add_bos: bool) -> list[int]:
    """Text (chat special tokens parsed as such) to a model's token ids."""
    data = text.encode("utf-8")
    cap = len(data) + 16
    buf = (lc.llama_token * cap)()
    n = lc.llama_tokenize(vocab, data, len(data), buf, cap, add_bos, True)
    if n < 0:                      # llama.cpp says how many it needs
        cap = -n
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(vocab, data, len(data), buf, cap, add_bos, True)
    return list(buf[:n])


class LlamaVocab:
    """A loaded model's vocabulary (``model``: a ``llama_model`` pointer)."""

    def __init__(self, lc: Any, model: Any) -> None:
        self._lc = lc
        self.handle = lc.llama_model_get_vocab(model)   # the llama_vocab pointer llama.cpp calls take
        self.n_tokens: int = lc.llama_vocab_n_tokens(self.handle)
        self._piece_buf = ctypes.create_string_buffer(256)   # grown when a piece is longer

    def tokenize(self, text: str) -> list[int]:
        """Prompt text (with chat special tokens) to ids, BOS first if the model adds one."""
        return llama_tokenize(self._lc, self.handle, text, add_bos=True)

    def bos(self) -> int:
        return self._lc.llama_vocab_bos(self.handle)

    def is_eog(self, token: int) -> bool:
        """Whether ``token`` ends a generation (end of turn, end of text)."""
        return self._lc.llama_vocab_is_eog(self.handle, token)

    def piece(self, token: int) -> bytes:
        """A token's bytes (a piece may hold part of a UTF-8 character)."""
        lc = self._lc
        n = lc.llama_token_to_piece(self.handle, token, self._piece_buf, len(self._piece_buf), 0, False)
        if n < 0:
            self._piece_buf = ctypes.create_string_buffer(-n)
            n = lc.llama_token_to_piece(self.handle, token, self._piece_buf, -n, 0, False)
        return self._piece_buf.raw[:n]

    def first_token(self, text: str) -> int:
        bos = self.bos()  # a model that adds BOS to every text must not make it the marker
        return next(t for t in self.tokenize(text) if t != bos)

    def tokens_starting(self, prefixes: Sequence[str]) -> list[int]:
        """Every token whose text starts (after spaces) with one of ``prefixes``: the
        vocabulary has many ways to begin the same thing (Qwen: ``{``, ``{"``, ``{\n``...).
        Reads the whole vocabulary once (~0.3 s for Qwen's 151k tokens)."""
        if not prefixes:
            return []
        heads = tuple(p.encode() for p in prefixes)
        return [t for t in range(self.n_tokens) if self.piece(t).lstrip().startswith(heads)]
