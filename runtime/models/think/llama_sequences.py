"""The llama.cpp thinker's sequences: each request's state, and their KV cells.

Every request decodes in a llama.cpp sequence of its own, a sequence id and
the KV cells tagged with it.  ``Seq`` is what the thinker knows of one request
while it runs (its prompt left to decode, its position, how its reply is being
written).  ``SequencePool`` owns the ids and what the cells hold between
requests: the free ids, the cells a finished sequence keeps for the next turn
of its conversation (the conversation cache), and the system prompt decoded
once into a reserved sequence (the prefix cache).  It is the one place that
removes or copies cells, so what the books say the cache holds is decided here.

A long call outgrows a sequence's window, and then its oldest turns leave the
prompt (the session's ``truncation``, or the thinker's own fit): the prompt
is the kept one with a run of tokens cut out after the system prompt.  Its
cells are still good after the cut: the run is removed and the cells after
it are shifted down by its length (llama.cpp re-rotates their keys), so the
turn decodes only what is new instead of the whole conversation again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable

from runtime.models.think.sampling import Sampling
from runtime.models.think.text_stream import Utf8Stream
from runtime.models.think.tool_call_format import CallStream

MIN_CONVERSATION_MATCH = 8  # tokens past the system prompt for a kept sequence to be reused
# A kept conversation with its oldest turns cut out is found by the first SHIFT_PROBE
# tokens after the cut, and reused when at least SHIFT_MIN_MATCH tokens go on matching:
# the same run of turns, token for token, is the same conversation.
SHIFT_PROBE = 16
SHIFT_MIN_MATCH = 32



class ReplyMode(Enum):
    """How a reply is being written; a reply moves from DECIDE (or PROBE) to
    TEXT or CALL once the model has shown which it writes."""

    TEXT = "text"        # plain text
    CALL = "call"        # a grammar-constrained tool call
    DECIDE = "decide"    # tool_choice auto, not decided yet: the first token decides
    PROBE = "probe"      # native dialect: a call begun, to read which name it writes (Probe)


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
    mode: ReplyMode = ReplyMode.TEXT
    sampling: Sampling | None = None
    call_sampler: Any = None     # tool_choice auto: the grammar chain, ready if the reply calls
    calls: CallStream | None = None
    probe: Probe | None = None   # ReplyMode.PROBE: the name being read
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

    def __init__(self, lc: Any, mem: Any, max_sequences: int, *, conversation_cache: bool,
                 shared_cells: bool = False) -> None:
        self._lc = lc
        self._mem = mem
        self._max_sequences = max_sequences
        self._conversation_cache = conversation_cache   # whether a released sequence keeps its cells
        self._can_shift = bool(lc.llama_memory_can_shift(mem))  # cells can move (K-shift)
        # one pool of cells (kv_unified): two sequences may hold the same ones
        self._shared_cells = shared_cells
        # ids no request holds, the least recently released first
        self.free: list[int] = list(range(max_sequences - 1, -1, -1))
        self.kept: dict[int, list[int]] = {}  # free seq id -> tokens its cells still hold
        self._kept_for: dict[int, str] = {}   # free seq id -> whose conversation they are
        self.prefix: list[int] = []           # the system prompt's tokens in prefix_seq's cells
        # what the books say, for stats()
        self.prefix_hits = 0                  # requests that shared the prefix's cells
        self.conversation_hits = 0            # requests that took a kept sequence
        self.conversation_tokens_reused = 0   # prompt tokens those found decoded
        self.shifted_hits = 0                 # of those, kept cells reused after a cut (shifted)
        self.running_hits = 0                 # requests that shared a running request's cells
        self.shifted_tokens_dropped = 0       # cells the cuts removed
        self.kept_dropped_for_room = 0        # times the kept cells were dropped for a decode
        self.kept_forgotten = 0               # kept sequences dropped because their conversation ended
        self.kept_superseded = 0              # kept sequences dropped for a newer one of their conversation

    @property
    def prefix_seq(self) -> int:
        """The reserved sequence whose cells hold the system prompt."""
        return self._max_sequences

    def use_prefix(self, ids: list[int]) -> None:
        """``ids`` are decoded into ``prefix_seq``: share them with every new request."""
        self.prefix = ids

    def claim(self, ids: list[int], active: Iterable[Seq] = (),
              conversation: str | None = None) -> tuple[int, int]:
        """A free sequence for this prompt and how many of its tokens are already
        decoded: in cells kept from an earlier turn of ``conversation``, or
        shared with a running request of it (``active``).

        Only the conversation's own cells: two callers who open with the same
        words ("Hello.") match past the system prompt, and a claim by tokens
        alone took the other caller's whole conversation for those few tokens,
        so the other's next turn read everything again (seen in a soak whose
        two callers ask the same questions).  Cells are never shared across
        conversations either: a cut shifts a kept sequence's cells, and shared
        cells would move under the other sequence too."""
        lc, mem = self._lc, self._mem
        best, best_n = None, 0
        limit = len(ids) - 1  # keep one token to decode for logits
        if self._conversation_cache:
            for sid, kept in self._kept_of(conversation):
                n = common_prefix(kept, ids, limit)
                if n > best_n:
                    best, best_n = sid, n
        # The oldest turns cut out: the cells after the cut are worth more than a
        # match that ends at the cut (the system text and the next header).
        cut = (self._cut_match(ids, conversation)
               if self._conversation_cache and self._can_shift else None)
        if cut is not None and cut.reused > best_n:
            return self._take_cut(cut)
        shared = (self._running_match(ids, active, limit, conversation)
                  if self._conversation_cache and self._shared_cells and conversation else None)
        if shared is not None and shared[1] > best_n:
            return self._share(*shared)
        # More than the system prompt and the next turn's header (requests that
        # name no conversation are told apart by their tokens alone); or cells
        # that hold nothing past the match (a prefill-only request's): taking
        # them loses nothing.
        if best is not None and (best_n >= len(self.prefix) + MIN_CONVERSATION_MATCH
                                 or best_n == len(self.kept[best]) >= 4):
            self.free.remove(best)
            del self.kept[best]
            self._kept_for.pop(best, None)
            lc.llama_memory_seq_rm(mem, best, best_n, -1)
            self.conversation_hits += 1
            self.conversation_tokens_reused += best_n
            return best, best_n
        seq_id = self._fresh()
        cached = self._reuse_prefix(seq_id, ids) if self.prefix else 0
        self.prefix_hits += 1 if cached else 0
        return seq_id, cached

    def kept_cells(self, conversation: str) -> list[list[int]]:
        """The tokens of the cells kept for ``conversation`` (what a claim may reuse)."""
        return [kept for _, kept in self._kept_of(conversation)]

    def _kept_of(self, conversation: str | None) -> list[tuple[int, list[int]]]:
        """The kept sequences ``conversation`` may take: its own (those of no
        conversation when it is None)."""
        return [(sid, kept) for sid, kept in self.kept.items()
                if self._kept_for.get(sid) == conversation]

    def _running_match(self, ids: list[int], active: Iterable[Seq], limit: int,
                       conversation: str) -> tuple[Seq, int] | None:
        """The running request of ``conversation`` whose decoded cells hold the
        longest head of ``ids`` past the system prompt and the next header (the
        caller spoke while the reply to their last turn still ran: that reply
        holds the conversation's cells, not the kept ones)."""
        best: tuple[Seq, int] | None = None
        for seq in active:
            if seq.kv is None or seq.conversation != conversation:
                continue
            n = common_prefix(seq.kv, ids, limit)
            if n >= len(self.prefix) + MIN_CONVERSATION_MATCH and (best is None or n > best[1]):
                best = (seq, n)
        return best

    def _share(self, running: Seq, n: int) -> tuple[int, int]:
        """A fresh sequence holding the first ``n`` cells of ``running``'s (shared:
        llama.cpp tags the same cells with both ids)."""
        seq_id = self._fresh()
        self._lc.llama_memory_seq_cp(self._mem, running.seq_id, seq_id, 0, n)
        self.running_hits += 1
        self.conversation_tokens_reused += n
        return seq_id, n

    def _fresh(self) -> int:
        """A free id with its cells dropped: one that holds nothing, else the
        least recently released (its conversation is the stalest): a prefill
        with nothing to decode must not push a live conversation's cells out."""
        seq_id = next((sid for sid in self.free if sid not in self.kept), self.free[0])
        self.free.remove(seq_id)
        self.kept.pop(seq_id, None)
        self._kept_for.pop(seq_id, None)
        self._lc.llama_memory_seq_rm(self._mem, seq_id, -1, -1)
        return seq_id

    def _cut_match(self, ids: list[int], conversation: str | None) -> "_Cut | None":
        """The kept sequence of ``conversation`` that holds ``ids`` but for a run
        cut out after their common head (the system prompt), the one that covers
        most of ``ids``.  Never a cut inside the cells it shares with the prefix
        cache: the shift would move them for every sequence that shares them."""
        best: _Cut | None = None
        limit = len(ids) - 1  # keep one token to decode for logits
        for sid, kept in self._kept_of(conversation):
            head = common_prefix(kept, ids, limit)
            with_prefix = common_prefix(self.prefix, kept, len(kept))   # cells shared with it
            if head < max(4, with_prefix) or limit - head < SHIFT_MIN_MATCH:
                continue
            probe = ids[head:head + SHIFT_PROBE]
            # every place the probe matches: a call repeats itself ("Thank you.",
            # a question asked twice), and the first such place can be an older
            # turn whose match ends soon; the longest match, the earliest of equals
            for at in range(head + 1, len(kept) - SHIFT_MIN_MATCH + 1):
                if kept[at:at + SHIFT_PROBE] != probe:
                    continue
                run = common_prefix(kept[at:], ids[head:], limit - head)
                if run >= SHIFT_MIN_MATCH and (best is None or head + run > best.reused):
                    best = _Cut(sid, head, at - head, head + run)
        return best

    def _take_cut(self, cut: "_Cut") -> tuple[int, int]:
        """Claim ``cut.seq_id``: remove the cut run, shift the cells after it down, drop
        what follows the match.  Returns (seq id, tokens decoded)."""
        lc, mem, sid = self._lc, self._mem, cut.seq_id
        self.free.remove(sid)
        del self.kept[sid]
        self._kept_for.pop(sid, None)
        start, end = cut.head, cut.head + cut.dropped
        lc.llama_memory_seq_rm(mem, sid, start, end)
        lc.llama_memory_seq_add(mem, sid, end, -1, -cut.dropped)
        lc.llama_memory_seq_rm(mem, sid, cut.reused, -1)
        self.conversation_hits += 1
        self.conversation_tokens_reused += cut.reused
        self.shifted_hits += 1
        self.shifted_tokens_dropped += cut.dropped
        return sid, cut.reused

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
            if seq.conversation:
                # one kept sequence a conversation, the newest: the others are its
                # older states (a read-ahead, a reply overtaken), and every kept cell
                # costs each step's attention (it spans the whole pool of cells)
                for sid in [s for s, c in self._kept_for.items() if c == seq.conversation]:
                    self._drop_kept_one(sid)
                    self.kept_superseded += 1
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
            self._drop_kept_one(sid)
            self.kept_forgotten += 1

    def _drop_kept_one(self, sid: int) -> None:
        self._lc.llama_memory_seq_rm(self._mem, sid, -1, -1)
        del self.kept[sid]
        self._kept_for.pop(sid, None)

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


@dataclass(frozen=True)
class _Cut:
    """A kept sequence whose prompt is the new one with ``dropped`` tokens cut at ``head``."""

    seq_id: int
    head: int       # tokens shared from the start (the system prompt, at least)
    dropped: int    # tokens cut out after the head (the oldest turns)
    reused: int     # tokens of the new prompt the cells hold once the cut is made


def common_prefix(a: list[int], b: list[int], limit: int) -> int:
    """How many leading tokens ``a`` and ``b`` share, at most ``limit``."""
    n = 0
    top = min(len(a), len(b), limit)
    while n < top and a[n] == b[n]:
        n += 1
    return n
