"""Do the words of a pause read like the end of a turn?  Asked of a small chat LLM.

Smart Turn hears intonation, and synthetic or flat voices defeat it: it
scores flite's "can you recommend a good book" 0.008 while Whisper writes the
words of a cut first half with a full stop too.  A chat model has read
millions of user messages: after the words so far, how likely is the message
to end here (the chat template's end-of-message token, or a full stop,
question or exclamation mark next)?  SmolLM2-135M-Instruct, the GGUF the
think stage already ships, puts 11 of the 12 questions of
benchmarks/turn_bench.py at 0.13-0.72 (and "can you recommend a good book" at
0.009), the cut first halves ("i need to change my flight", "could you check
the") at 3e-5-0.013 and a person's sentence cut mid-word at 0.059.  The text is lower-cased and stripped of
punctuation first, because Whisper punctuates a cut sentence as a whole one.

One decode of the words (up to ~60 tokens) on one thread: 40-100 ms here,
which the listen stage runs on a thread of its own at a lower priority, so
that it does not slow the reply being prepared meanwhile.  The model keeps
what it decoded last: read while the caller still speaks (the words so far),
the pause's words decode only past what they share with those.
"""

from __future__ import annotations

import math
import re
import threading

import numpy as np

from runtime.errors import ErrorCode, StageError
from runtime.models.think.llama_sequences import common_prefix
from runtime.models.think.llama_vocab import llama_tokenize

# What may follow the last word when the message is over.
END_MARKS = ("<|im_end|>", "?", ".", "!")
MAX_WORDS = 40            # the end of a long turn is what matters; bounds the decode
N_CTX = 128              # 40 words and the template's head fit
_NOT_WORD = re.compile(r"[^\w\s']+")


def normalised(text: str) -> str:
    """Lower case, no punctuation: Whisper's full stop after a cut sentence must not count."""
    words = _NOT_WORD.sub(" ", text.lower()).split()
    return " ".join(words[-MAX_WORDS:])


class TextTurnEnd:
    """P(the user's message ends after ``text``) from a chat model's next token."""

    def __init__(self, model_path: str | None = None, threads: int = 1) -> None:
        from runtime.models.think.llama_vocab import import_llama_cpp
        from runtime.models.model_files import ModelFileMissing, smollm2_gguf

        lc = import_llama_cpp()
        try:
            path = model_path or smollm2_gguf()
        except ModelFileMissing as e:
            raise StageError(ErrorCode.STAGE_UNAVAILABLE, str(e)) from None
        lc.llama_backend_init()
        self._lc = lc
        self._model = lc.llama_model_load_from_file(str(path).encode(), lc.llama_model_default_params())
        if not self._model:
            raise StageError(ErrorCode.STAGE_UNAVAILABLE, f"llama.cpp could not load {path!r}")
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = N_CTX
        cparams.n_seq_max = 1
        cparams.n_threads = cparams.n_threads_batch = max(1, int(threads))
        cparams.no_perf = True
        self._ctx = lc.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            lc.llama_model_free(self._model)
            raise StageError(ErrorCode.RESOURCE_EXHAUSTED, "llama.cpp could not create a context")
        self._mem = lc.llama_get_memory(self._ctx)
        self._vocab = lc.llama_model_get_vocab(self._model)
        self._n_vocab = lc.llama_vocab_n_tokens(self._vocab)
        self._batch = lc.llama_batch_init(N_CTX, 0, 1)
        self._lock = threading.Lock()
        self._kv: list[int] = []       # the tokens whose cells the context holds
        self._head = self._tokens("<|im_start|>user\n")
        self._ends = []
        for mark in END_MARKS:
            ids = self._tokens(mark)
            if len(ids) != 1:
                raise StageError(ErrorCode.STAGE_UNAVAILABLE,
                                 f"text end-of-turn: {path!r} has no single token for {mark!r}")
            self._ends.append(ids[0])

    def _tokens(self, text: str) -> list[int]:
        return llama_tokenize(self._lc, self._vocab, text, add_bos=False)

    def probability(self, text: str) -> float | None:
        """None when there are no words to judge (a cough, silence)."""
        words = normalised(text)
        if not words:
            return None
        ids = (self._head + self._tokens(words))[:N_CTX]
        lc, b = self._lc, self._batch
        with self._lock:
            kept = common_prefix(self._kv, ids, len(ids) - 1)   # the last token's logits are the reading
            lc.llama_memory_seq_rm(self._mem, 0, kept, -1)
            self._kv = []              # whatever fails below leaves nothing to trust
            for i, tok in enumerate(ids[kept:]):
                b.token[i] = tok
                b.pos[i] = kept + i
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = 0
                b.logits[i] = 1 if kept + i == len(ids) - 1 else 0
            b.n_tokens = len(ids) - kept
            rc = lc.llama_decode(self._ctx, b)
            if rc != 0:
                lc.llama_memory_clear(self._mem, True)
                raise RuntimeError(f"llama_decode returned {rc}")
            self._kv = ids
            logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(self._ctx, len(ids) - 1 - kept),
                                           shape=(self._n_vocab,)).astype(np.float64)
        top = logits.max()
        log_z = top + math.log(float(np.exp(logits - top).sum()))
        return float(sum(math.exp(logits[t] - log_z) for t in self._ends))

    @property
    def cached_tokens(self) -> int:
        return len(self._kv)

    def close(self) -> None:
        lc = getattr(self, "_lc", None)
        if lc is None or not getattr(self, "_ctx", None):
            return
        lc.llama_batch_free(self._batch)
        lc.llama_free(self._ctx)
        lc.llama_model_free(self._model)
        self._ctx = None

    def __del__(self) -> None:   # a stage that never calls close must not leak the model
        try:
            self.close()
        except Exception:
            pass


__all__ = ["END_MARKS", "TextTurnEnd", "normalised"]
