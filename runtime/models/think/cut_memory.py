"""Where the thinker last cut each conversation: its cut never moves back.

The server holds no tokenizer, so its estimate can let a long call's
conversation through that does not fit, and the thinker then cuts the
oldest turns itself (``chat.fit_messages``).  Later the server drops old
items by its own count, and may drop fewer than the thinker had cut: sent
as it is, that prompt holds turns the conversation's kept cells no longer
hold, and the whole conversation (~950 tokens, seconds on two cores) is
read again.  So the thinker remembers the first message it kept after a
cut, and cuts there again while the server still sends it; once the server
has dropped it too, there is nothing left to remember.

The turns are remembered as they will be sent again, not as they were: the
last message of a prompt is the turn being said (a read-ahead holds the
caller's words so far), so it is never part of what is remembered, and text
is compared without case and punctuation (the pause's reading and the
final transcript can differ in nothing else).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Callable

from runtime.models.think.chat import Fitted, Message

# conversations remembered at most (the least recently cut go first): a session
# that ends tells the thinker (forget); this bounds the ones that never do
MAX_CONVERSATIONS = 1024


_NOT_A_WORD = re.compile(r"[\W_]+")


def _turn(m: Message) -> tuple:
    """A turn as it is compared: its role, its words, its calls."""
    words = _NOT_A_WORD.sub(" ", str(m.get("content") or "")).strip().casefold()
    return m.get("role"), words, repr(m.get("tool_calls"))


def _key(turns: list[Message]) -> tuple:
    """The first two turns: one short turn ("Yes.") alone recurs in a call,
    two in a row hardly do."""
    return tuple(_turn(m) for m in turns[:2])


class CutMemory:
    """Per conversation, the first turns of the prompt the thinker last cut."""

    def __init__(self, limit: int = MAX_CONVERSATIONS) -> None:
        self._first: OrderedDict[str, tuple] = OrderedDict()
        self._limit = limit

    def fit(self, conversation: str | None, messages: list[Message],
            fit: Callable[[list[Message]], Fitted]) -> Fitted:
        """``fit(messages)``, after cutting the turns before where this
        conversation was last cut, when they are sent again; the cut made is
        remembered for the next turn."""
        if not conversation:
            return fit(messages)
        system = [m for m in messages if m["role"] == "system"][:1]
        turns = [m for m in messages if m["role"] != "system"]
        first = self._first.get(conversation)
        at = None if first is None else next(
            (i for i in range(1, len(turns)) if _key(turns[i:i + len(first)]) == first), None)
        if at is not None:
            messages = system + turns[at:]
        fitted = fit(messages)
        if fitted.truncated:
            self._remember(conversation, [m for m in fitted.messages if m["role"] != "system"][:-1])
        elif at is None:
            self._first.pop(conversation, None)   # dropped by the server too (or never cut)
        return Fitted(fitted.messages, fitted.truncated or at is not None)

    def remember(self, conversation: str, turns: list[Message]) -> None:
        """The conversation was cut before ``turns`` (those kept before the
        prompt's last) by its caller (a thinker that lined the prompt up with
        its cells)."""
        self._remember(conversation, turns)

    def _remember(self, conversation: str, turns: list[Message]) -> None:
        """``turns``: those kept before the prompt's last."""
        if not turns:     # only the turn being said was kept: nothing sent again to find
            self._first.pop(conversation, None)
            return
        self._first[conversation] = _key(turns)
        self._first.move_to_end(conversation)
        while len(self._first) > self._limit:
            self._first.popitem(last=False)

    def forget(self, conversation: str) -> None:
        """The conversation ended."""
        self._first.pop(conversation, None)

    def __len__(self) -> int:
        return len(self._first)
