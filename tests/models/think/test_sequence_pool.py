"""SequencePool's bookkeeping, with llama.cpp's memory calls recorded (the
unit beside it: the cells themselves are tested on the real model in
test_thinker_llama.py)."""

from __future__ import annotations

from runtime.models.think.llama_sequences import Seq, SequencePool
from runtime.models.think.text_stream import Utf8Stream


class _Memory:
    """What the pool asks of llama.cpp: it records the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def llama_memory_can_shift(self, mem) -> bool:
        return True

    def __getattr__(self, name):
        return lambda *a: self.calls.append((name, *a[1:]))


SYS = [1, 2, 3, 4]
AGAIN = list(range(100, 120))          # a turn said twice in the call ("Thank you.")


def _kept(pool: SequencePool, tokens: list[int], conversation: str) -> None:
    sid, _ = pool.claim(tokens + [0], conversation=conversation)
    pool.release(Seq(rid=1, seq_id=sid, sampler=None, text=Utf8Stream(), max_tokens=0,
                     prompt=[], kv=list(tokens), conversation=conversation))


def test_a_cut_is_found_past_an_earlier_copy_of_its_first_words():
    lc = _Memory()
    pool = SequencePool(lc, "mem", 2, conversation_cache=True)
    old, later = list(range(10, 30)), list(range(30, 70))
    _kept(pool, SYS + old + AGAIN + list(range(200, 220)) + AGAIN + later, "c")
    ids = SYS + AGAIN + later + [999]         # the oldest turns cut, up to the second copy
    sid, cached = pool.claim(ids, conversation="c")
    assert cached == len(ids) - 1
    assert pool.shifted_hits == 1 and pool.shifted_tokens_dropped == 60


def test_another_conversations_cells_are_neither_taken_nor_shared():
    lc = _Memory()
    pool = SequencePool(lc, "mem", 3, conversation_cache=True, shared_cells=True)
    opening = SYS + list(range(10, 60))       # both callers opened with the same words
    _kept(pool, opening + list(range(300, 400)), "ann")
    sid, cached = pool.claim(opening + [7, 8], conversation="ben")
    assert cached == 0 and pool.conversation_hits == 0
    assert pool.kept and list(pool._kept_for.values()) == ["ann"]
    assert not [c for c in lc.calls if c[0] == "llama_memory_seq_cp"]
