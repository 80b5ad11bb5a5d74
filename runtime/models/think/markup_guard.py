"""Never speak markup: a reply's text is filtered before it leaves the thinker.

A small model sometimes writes a tool call as words (Qwen2.5-Coder-0.5B, issue
43: ``Markup: "tools": [ "function": "send_message", ...`` spoken aloud), or,
being a coder model, answers with a code block.  :class:`MarkupGuard` is a
sans-I/O filter over one reply's text deltas: prose passes as it comes, text
that may start markup is held until it proves to be prose, and markup is held
to the end of its structure and never released.  At the reply's end the
markup is read for the call it meant (:mod:`markup_call`), else dropped.

What starts markup: ``{`` or ``[`` (to the matching bracket), a fence
(to the closing fence), a tag ``<name ...>`` (to its ``>``; the text between
two tags is prose unless it is markup itself), and a JSON key ``"name":``
(to the end of its line, or of the brackets it opens).  Stray ``}`` ``]``
and inline-code backticks are dropped.  Prose waits at most for the end of
a quoted word or a character after ``<`` or a backtick.

:class:`GuardedReplies` applies one guard per running reply to a thinker's
step results, and turns recovered calls into tool-call events; every thinker
passes its ``step`` results through it.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Sequence

from runtime.executor import StepResult
from runtime.models.think.markup_call import MarkupCall, call_in_markup
from runtime.models.think.tool_call_format import JsonStrings, new_call_id
from runtime.models.think.tools import Tool
from runtime.models.voice_contract import (TOOL_CALL_DELTA, USAGE, ThinkEvent, think_chunk,
                                           think_events, tool_call_delta_event, tool_call_done_event)

log = logging.getLogger(__name__)

FENCE = "```"
_KEY = re.compile(r'"[A-Za-z_][\w-]*"\s*:')              # a JSON key: markup
_MAYBE_KEY = re.compile(r'"[A-Za-z_][\w-]*("\s*)?$|"$')   # may still become one
_TRIGGERS = re.compile(r'[{}\[\]<"`]')


class Segment(Enum):
    """What kind of markup is being held, and so where it ends."""

    BRACKETS = "brackets"   # at the bracket that closes the first
    KEY = "key"             # at the line's end once its brackets are closed
    FENCE = "fence"         # after the closing fence
    TAG = "tag"             # after the tag's ``>``


@dataclass
class GuardEnd:
    """How a reply ended: the last prose to release, and the markup held back."""

    text: str        # prose still held at the end, released now
    markup: str      # every markup segment of the reply, joined (empty: none)
    spoke: bool      # the reply released prose (not only whitespace)


class MarkupGuard:
    """Filters one reply's text.  Feed each delta to :meth:`feed` and send on
    what it returns; at the reply's end :meth:`finish` releases the rest and
    says what markup was held back."""

    def __init__(self) -> None:
        self._held = ""                       # text not decided yet, from a possible markup start
        self._segment: Segment | None = None  # the markup being held, None in prose
        self._depth = 0                       # open brackets in the segment (outside strings)
        self._strings = JsonStrings()         # whether the segment is inside a JSON string
        self._markup: list[str] = []          # the reply's markup segments, held back
        self.spoke = False                    # prose (not only whitespace) was released
        self.call_like = False                # markup began as a call does: an object, a JSON
                                              # key or a tool tag (not a list, code or other tags)

    @property
    def markup(self) -> str:
        return "".join(self._markup)

    def feed(self, text: str) -> str:
        """The part of the text so far that is prose and can be spoken now."""
        self._held += text
        out: list[str] = []
        while self._held:
            if self._segment is not None:
                if not self._hold_markup():
                    break
            elif not self._pass_prose(out):
                break
        released = "".join(out)
        self.spoke = self.spoke or bool(released.strip())
        return released

    def finish(self) -> GuardEnd:
        """The reply ended: an undecided start is prose (unless it is a tag's or a
        fence's), an open segment is markup."""
        tail = ""
        if self._segment is not None:
            self._markup[-1] += self._held
        elif self._held[:1] not in ("<", "`"):
            tail = self._held
        self._held, self._segment = "", None
        self.spoke = self.spoke or bool(tail.strip())
        return GuardEnd(tail, self.markup, self.spoke)

    # ------------------------------------------------------------ prose
    def _pass_prose(self, out: list[str]) -> bool:
        """Release prose up to the next possible markup start and decide it;
        False when more text is needed to decide."""
        m = _TRIGGERS.search(self._held)
        if m is None:
            out.append(self._held)
            self._held = ""
            return True
        out.append(self._held[:m.start()])
        self._held = self._held[m.start():]
        return self._decide(out)

    def _decide(self, out: list[str]) -> bool:
        """``_held`` starts with a trigger character: markup, prose or undecided."""
        held = self._held
        ch = held[0]
        if ch in "{[":
            return self._start(Segment.BRACKETS)
        if ch in "}]":                               # debris of markup: dropped
            self._held = held[1:]
            return True
        if ch == "`":
            if held.startswith(FENCE):
                return self._start(Segment.FENCE, skip=len(FENCE))
            if len(held) < len(FENCE) and FENCE.startswith(held):
                return False
            self._held = held.lstrip("`")            # inline code: its words are spoken
            return True
        if ch == "<":
            if len(held) == 1:
                return False
            if held[1].isalpha() or held[1] in "/!?_":
                return self._start(Segment.TAG)
        elif ch == '"':
            if _KEY.match(held):
                return self._start(Segment.KEY)
            if _MAYBE_KEY.match(held):
                return False
        out.append(ch)                               # a quote or a "<" in prose
        self._held = held[1:]
        return True

    def _start(self, kind: Segment, skip: int = 0) -> bool:
        self.call_like = (self.call_like or kind is Segment.KEY
                          or self._held.startswith(("{", "<tool", "<function")))
        self._segment, self._depth = kind, 0
        self._strings = JsonStrings()
        self._markup.append(self._held[:skip])
        self._held = self._held[skip:]
        return True

    # ------------------------------------------------------------ markup
    def _hold_markup(self) -> bool:
        """Move held text into the open segment up to its end; False when the
        segment goes on past what arrived."""
        end = self._segment_end()
        if end is None:
            self._markup[-1] += self._held
            self._held = ""
            return False
        self._markup[-1] += self._held[:end]
        self._held = self._held[end:]
        self._segment = None
        return True

    def _segment_end(self) -> int | None:
        """Where in ``_held`` the open segment ends (past its last character)."""
        if self._segment is Segment.FENCE:
            return self._fence_end()
        for i, ch in enumerate(self._held):
            if self._segment is Segment.TAG:
                if ch == ">":
                    return i + 1
                continue
            if self._strings.inside(ch):
                continue
            if ch in "{[":
                self._depth += 1
            elif ch in "}]":
                self._depth = max(self._depth - 1, 0)
                if self._depth == 0 and self._segment is Segment.BRACKETS:
                    return i + 1
            elif ch == "\n" and self._depth == 0 and self._segment is Segment.KEY:
                return i
        return None

    def _fence_end(self) -> int | None:
        """The closing fence's end (it may have begun in what is held already)."""
        seen = self._markup[-1] + self._held
        at = seen.find(FENCE, len(FENCE))
        return None if at < 0 else at + len(FENCE) - len(self._markup[-1])


# ---------------------------------------------------------------- per reply
@dataclass
class _Reply:
    guard: MarkupGuard
    tools: tuple[Tool, ...]   # the tools this reply may call (a markup call of one becomes a call)
    calls: int = 0            # tool calls the thinker made in it
    retried: bool = False     # it was begun again (see GuardedReplies.filter's ``retry``)


@dataclass
class GuardedReplies:
    """One :class:`MarkupGuard` per running reply of a thinker.  ``open`` at
    admission, ``filter`` every step's results, ``close`` at release."""

    replies: dict[int, _Reply] = field(default_factory=dict)   # by request id, open to close
    # what was kept from speech, for stats()
    markup_dropped: int = 0    # replies whose markup was dropped
    markup_calls: int = 0      # replies whose markup became the call it meant
    retries: int = 0           # replies begun again as calls (a call written as text)

    def open(self, request_id: int, tools: Sequence[Tool] = ()) -> None:
        """``tools``: those the reply may call (none when it may not call)."""
        self.replies[request_id] = _Reply(MarkupGuard(), tuple(tools))

    def close(self, request_id: int) -> None:
        self.replies.pop(request_id, None)

    def filter(self, results: dict[int, Any],
               retry: Callable[[int], bool] | None = None) -> dict[int, Any]:
        """``results`` with each reply's markup held back.  A reply that may call
        and begins to write a call as text (see ``MarkupGuard.call_like``) may be
        begun again as a call: ``retry(request_id)`` returns True when the thinker
        did so (that reply's result then carries no usage event and does not
        finish).  Otherwise, at the reply's end, its markup becomes the call it
        writes (of a tool it may call, arguments valid) or is dropped."""
        return {rid: self._filtered(rid, r, retry) if isinstance(r, StepResult) else r
                for rid, r in results.items()}

    def _filtered(self, rid: int, result: StepResult,
                  retry: Callable[[int], bool] | None) -> StepResult:
        reply = self.replies.get(rid)
        if reply is None:
            return result
        out: list[ThinkEvent] = []
        usage: list[ThinkEvent] = []
        for ev in think_events(result.chunk):
            if isinstance(ev, str):
                out.append(reply.guard.feed(ev))
            elif ev["type"] == USAGE:
                usage.append(ev)
            else:
                if ev["type"] == TOOL_CALL_DELTA and "call_id" in ev:   # a call's first event
                    reply.calls += 1
                out.append(ev)
        if self._retried(rid, reply, retry):
            return StepResult(think_chunk(out), False)
        if not result.finished:
            return StepResult(think_chunk(out + usage), False)
        out.extend(self._end(rid, reply))
        return StepResult(think_chunk(out + usage), True)

    def _retried(self, rid: int, reply: _Reply, retry: Callable[[int], bool] | None) -> bool:
        """Markup that begins like a call, in a reply that may call and has not:
        the thinker begins it again as a call if it can (``retry``)."""
        guard = reply.guard
        if (retry is None or reply.retried or reply.calls or not reply.tools
                or not guard.call_like or not retry(rid)):
            return False
        log.info("request %s: a call written as text (%r), begun again as a call", rid,
                 guard.markup[:80])
        reply.retried = True
        reply.guard = MarkupGuard()
        self.retries += 1
        return True

    def _end(self, rid: int, reply: _Reply) -> list[ThinkEvent]:
        end = reply.guard.finish()
        if not end.markup.strip():
            return [end.text]
        call = None if reply.calls else call_in_markup(end.markup, reply.tools)
        if call is None:
            self.markup_dropped += 1
            log.info("request %s: markup kept from speech: %r", rid, end.markup[:120])
            return [end.text]
        self.markup_calls += 1
        log.info("request %s: markup read as a call of %s", rid, call.name)
        return [end.text, *call_events(0, call)]

    def stats(self) -> dict:
        return {"markup_dropped": self.markup_dropped, "markup_calls": self.markup_calls,
                "markup_retries": self.retries}


def call_events(index: int, call: MarkupCall) -> list[ThinkEvent]:
    """A whole call as the events a streamed one makes: its head, its arguments, done."""
    call_id = new_call_id()
    return [tool_call_delta_event(index, "", call_id, call.name),
            tool_call_delta_event(index, call.arguments),
            tool_call_done_event(index, call_id, call.name, call.arguments)]
