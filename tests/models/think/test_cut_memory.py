"""CutMemory: a conversation's cut never moves back, whatever the server sends."""

from __future__ import annotations

from runtime.models.think.chat import fit_messages
from runtime.models.think.cut_memory import CutMemory

SYSTEM = {"role": "system", "content": "Be brief."}


def _turns(n: int) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn number {i:02d}"}
            for i in range(n)]


def _fit(budget: int):
    """fit_messages measuring characters: each turn is 14."""
    return lambda messages: fit_messages(
        messages, lambda ms: sum(len(m["content"]) for m in ms), budget)


def test_a_turn_cut_before_is_cut_again_when_the_server_sends_it():
    cuts = CutMemory()
    first = cuts.fit("call", [SYSTEM, *_turns(10)], _fit(9 + 14 * 6))
    assert first.truncated and first.messages[1]["content"] == "turn number 04"
    # the server dropped only two turns of its own, and the rest would fit now
    again = cuts.fit("call", [SYSTEM, *_turns(11)[2:]], _fit(9 + 14 * 10))
    assert again.truncated
    assert [m["content"] for m in again.messages[1:]] == [f"turn number {i:02d}" for i in range(4, 11)]


def test_once_the_server_dropped_the_cut_turn_there_is_nothing_to_remember():
    cuts = CutMemory()
    cuts.fit("call", [SYSTEM, *_turns(10)], _fit(9 + 14 * 6))
    assert len(cuts) == 1
    later = cuts.fit("call", [SYSTEM, *_turns(12)[6:]], _fit(9 + 14 * 10))
    assert not later.truncated and len(later.messages) == 7
    assert len(cuts) == 0


def test_other_conversations_and_requests_of_none_are_left_alone():
    cuts = CutMemory()
    cuts.fit("ann", [SYSTEM, *_turns(10)], _fit(9 + 14 * 6))
    whole = [SYSTEM, *_turns(8)]
    assert cuts.fit("ben", whole, _fit(1000)).messages == whole
    assert cuts.fit(None, whole, _fit(1000)).messages == whole
    cuts.forget("ann")
    assert cuts.fit("ann", whole, _fit(1000)).messages == whole


def test_it_remembers_a_bounded_number_of_conversations():
    cuts = CutMemory(limit=2)
    for name in ("a", "b", "c"):
        cuts.fit(name, [SYSTEM, *_turns(10)], _fit(9 + 14 * 6))
    assert len(cuts) == 2


def test_a_cut_made_on_the_words_so_far_holds_for_the_whole_turn():
    """A read-ahead is cut with the caller's words so far as its last turn; the
    reply sends the whole turn, in the final transcript's case and commas."""
    cuts = CutMemory()
    said = [SYSTEM, *_turns(9), {"role": "user", "content": "stop and"}]
    first = cuts.fit("call", said, _fit(9 + 14 + 8))
    assert [m["content"] for m in first.messages[1:]] == ["turn number 08", "stop and"]
    reply = [SYSTEM, *_turns(9), {"role": "user", "content": "Stop, and tell me the time."}]
    again = cuts.fit("call", reply, _fit(1000))
    assert again.truncated
    assert [m["content"] for m in again.messages[1:]] == ["turn number 08",
                                                          "Stop, and tell me the time."]
    shouted = [SYSTEM, *_turns(8), {"role": "user", "content": "TURN number 08!"},
               {"role": "assistant", "content": "It is noon."},
               {"role": "user", "content": "And the date?"}]
    assert cuts.fit("call", shouted, _fit(1000)).messages[1]["content"] == "TURN number 08!"
