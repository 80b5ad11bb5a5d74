"""The llama.cpp thinker's sequences: each request's state, and their KV cells.

Every request decodes in a llama.cpp sequence of its own, a sequence id and
the KV cells tagged with it.  ``Seq`` is what the thinker knows of one request
while it runs (its prompt left to decode, its position, how its reply is being
written).  ``SequencePool`` owns the ids and what the cells hold between
requests: the free ids, the cells a finished sequence keeps for the next turn
of its conversation (the conversation cache), and the system prompt decoded
once into a reserved sequence (the prefix cache).  It is the one place that
removes or copies cells, so what the books say the cache holds is decided here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime.models.think.sampling import Sampling
from runtime.models.think.text_stream import Utf8Stream
from runtime.models.think.tool_call_format import CallStream

MIN_CONVERSATION_MATCH = 8  # tokens past the system prompt for a kept sequence to be reused

# How a reply is being written: plain text, a grammar-constrained tool call,
# not decided yet (tool_choice auto: the first token decides), or, in a native
# tool dialect, a call begun to read which name the model writes (see Probe).
TEXT, CALL, DECIDE, PROBE = "text", "call", "decide", "probe"


@dataclass
class Probe:
    """tool_choice auto, native dialect: the reply begins as a call (the first
    token's probability of one reached ``tool_call_threshold``, 0.005 for
    Qwen: see tool_dialect for why); the call's head is decoded and the model
    writes the name unconstrained.  A name among the callable tools makes the
    reply that call; any other name ("get_capital") means the model wanted a
    tool it does not have, and the reply goes back to where it began as text.
    Measured on Qwen2.5-Coder-0.5B: the first token alone put 0.5-0.8 on a call
    for "what is twelve times twelve", the name it then wrote was no tool's."""

    start: int                 # the reply's first position: the cells from here are dropped on text
    text_token: int            # what the text sampler chose there, the reply's first token on text
    head: str                  # the call's bytes before the name (decoded as the probe began)
    tokens: list[int] = field(default_factory=list)  # the name's tokens so far, decoded after the head
    name: str = ""
    p: float = 1.0             # the probability of the name so far (each token the model's top choice)


@dataclass
class Seq:
    rid: int
    seq_id: int
    sampler: Any
    text: Utf8Stream
    max_tokens: int
    prompt: list[int]            # prompt tokens not yet decoded (chunked prefill)
    pos: int = 0                 # next position in this sequence
    pending: int | None = None   # sampled token to feed at the next step
    generated: int = 0
    finished: bool = False
    kv: list[int] | None = None  # the tokens this sequence's KV cells hold, by position
                                 # (None: unknown after a failed decode, never reused)
    mode: str = TEXT
    sampling: Sampling | None = None
    call_sampler: Any = None     # tool_choice auto: the grammar chain, ready if the reply calls
    calls: CallStream | None = None
    probe: Probe | None = None   # mode PROBE: the name being read
    call_names: frozenset[str] = frozenset()  # the tools this reply may call
    max_calls: int = 1
    prefill_only: bool = False   # decode the prompt into the cache, answer nothing
    usage: tuple[int, int] | None = None   # (prompt tokens, of them cached): report at the end
    conversation: str | None = None   # whose (CONVERSATION)
    reply_start: int = 0              # the position of the reply's first token
    grammar: str | None = None        # tool_choice auto: the call grammar, should the reply call after all
    forgotten: bool = False           # its conversation ended while it ran: keep nothing


class SequencePool:
    """The ``max_sequences`` sequence ids of a context (``mem``: its
    ``llama_memory``), plus one more reserved for the prefix cache, and what
    their cells hold.  ``claim`` gives a request an id and tells it how much
    of its prompt is decoded already; ``release`` takes it back."""

    def __init__(self, lc: Any, mem: Any, max_sequences: int, *, conversation_cache: bool) -> None:
        self._lc = lc
        self._mem = mem
        self._max_sequences = max_sequences
        self._conversation_cache = conversation_cache   # whether a released sequence keeps its cells
        # ids no request holds, the least recently released first
        self.free: list[int] = list(range(max_sequences - 1, -1, -1))
        self.kept: dict[int, list[int]] = {}  # free seq id -> tokens its cells still hold
        self._kept_for: dict[int, str] = {}   # free seq id -> whose conversation they are
        self.prefix: list[int] = []           # the system prompt's tokens in prefix_seq's cells
        # what the books say, for stats()
        self.prefix_hits = 0                  # requests that shared the prefix's cells
        self.conversation_hits = 0            # requests that took a kept sequence
        self.conversation_tokens_reused = 0   # prompt tokens those found decoded
        self.kept_dropped_for_room = 0        # times the kept cells were dropped for a decode
        self.kept_forgotten = 0               # kept sequences dropped because their conversation ended

    @property
    def prefix_seq(self) -> int:
        """The reserved sequence whose cells hold the system prompt."""
        return self._max_sequences

    def use_prefix(self, ids: list[int]) -> None:
        """``ids`` are decoded into ``prefix_seq``: share them with every new request."""
        self.prefix = ids

    def claim(self, ids: list[int]) -> tuple[int, int]:
        """A free sequence for this prompt and how many of its tokens are already decoded."""
        lc, mem = self._lc, self._mem
        best, best_n = None, 0
        if self._conversation_cache:
            limit = len(ids) - 1  # keep one token to decode for logits
            for sid, kept in self.kept.items():
                n = common_prefix(kept, ids, limit)
                if n > best_n:
                    best, best_n = sid, n
        # More than the system prompt and the next turn's header: a different
        # conversation matches that far too, and must not take this one's cells;
        # unless they hold nothing past the match (a prefill-only request's cells,
        # or another request that stopped there): taking them loses nothing.
        if best is not None and (best_n >= len(self.prefix) + MIN_CONVERSATION_MATCH
                                 or best_n == len(self.kept[best]) >= 4):
            self.free.remove(best)
            del self.kept[best]
            self._kept_for.pop(best, None)
            lc.llama_memory_seq_rm(mem, best, best_n, -1)
            self.conversation_hits += 1
            self.conversation_tokens_reused += best_n
            return best, best_n
        seq_id = self.free.pop(0)  # least recently released: its conversation is the stalest
        self.kept.pop(seq_id, None)
        self._kept_for.pop(seq_id, None)
        lc.llama_memory_seq_rm(mem, seq_id, -1, -1)
        cached = self._reuse_prefix(seq_id, ids) if self.prefix else 0
        self.prefix_hits += 1 if cached else 0
        return seq_id, cached

    def _reuse_prefix(self, seq_id: int, ids: list[int]) -> int:
        """Share the cached system-prompt cells; returns how many prompt tokens they cover."""
        n = common_prefix(self.prefix, ids, len(ids) - 1)  # keep one token to decode for logits
        if n < 4:
            return 0
        self._lc.llama_memory_seq_cp(self._mem, self.prefix_seq, seq_id, 0, n)
        return n

    def rewind(self, seq: Seq, start: int) -> None:
        """Drop ``seq``'s cells from position ``start`` on; it decodes from there next."""
        self._lc.llama_memory_seq_rm(self._mem, seq.seq_id, start, -1)
        seq.pos = start
        if seq.kv is not None:
            del seq.kv[start:]

    def release(self, seq: Seq) -> None:
        """A finished request's id is free again; its cells are kept for the next
        turn of its conversation, or dropped."""
        if self._conversation_cache and seq.kv and not seq.forgotten:
            self.kept[seq.seq_id] = seq.kv  # the next turn of this conversation starts here
            if seq.conversation:
                self._kept_for[seq.seq_id] = seq.conversation
        else:
            self._lc.llama_memory_seq_rm(self._mem, seq.seq_id, -1, -1)
        self.free.append(seq.seq_id)

    def drop_kept(self) -> bool:
        """Free the cells that finished sequences kept; False when there were none."""
        if not self.kept:
            return False
        for sid in self.kept:
            self._lc.llama_memory_seq_rm(self._mem, sid, -1, -1)
        self.kept.clear()
        self._kept_for.clear()
        self.kept_dropped_for_room += 1
        return True

    def forget(self, conversation: str) -> None:
        """Drop the cells kept for ``conversation`` (it ended)."""
        for sid in [s for s, c in self._kept_for.items() if c == conversation]:
            self._lc.llama_memory_seq_rm(self._mem, sid, -1, -1)
            del self.kept[sid], self._kept_for[sid]
            self.kept_forgotten += 1

    def close(self) -> None:
        """The context is going: nothing is kept any more."""
        self.kept.clear()
        self._kept_for.clear()

    def cells_used(self) -> int:
        """Cells the KV cache really holds, as llama.cpp reports it (not our bookkeeping)."""
        lc = self._lc
        used = 0
        for sid in range(self._max_sequences):
            hi = lc.llama_memory_seq_pos_max(self._mem, sid)
            if hi >= 0:
                used += hi - lc.llama_memory_seq_pos_min(self._mem, sid) + 1
        return used


def common_prefix(a: list[int], b: list[int], limit: int) -> int:
    """How many leading tokens ``a`` and ``b`` share, at most ``limit``."""
    n = 0
    top = min(len(a), len(b), limit)
    while n < top and a[n] == b[n]:
        n += 1
    return n
