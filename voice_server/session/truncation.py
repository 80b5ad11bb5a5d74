"""The Realtime ``truncation`` setting and the history it keeps in the model's
context.

A voice session sends its whole conversation with every turn, and a long call
outgrows the think stage's context.  ``truncation`` says what then happens:

* ``"auto"`` (the default) - when the conversation no longer fits, the
  oldest items leave the model's context until the rest takes at most 3/4 of
  the room (``AUTO_RETENTION``), so that the next turns add to a stable prefix;
* ``{"type": "retention_ratio", "retention_ratio": r}`` - when it no longer
  fits, the oldest items leave until the rest takes at most ``r`` of the room,
  so the next turns add to a stable prefix (the think stage reuses a prompt's
  decoded cells only up to the first change: a cut every turn would re-decode
  the whole history every turn); ``token_limits.post_instructions`` lowers the
  room;
* ``"disabled"`` - nothing is dropped; a response whose conversation does not
  fit fails with ``context_length_exceeded``.

The room is the think stage's context per conversation less the reply's tokens
and the system text (instructions and tools), counted in characters at an
estimated ``chars_per_token``, plus the chat template's tokens around each
item (the server holds no tokenizer; the think stage still fits the prompt
exactly, so an estimate that is off costs a cut there, never a failure).  Items out of the context stay in the conversation (the
client can still retrieve them); a ``function_call`` and its output leave
together, as a call without its result is a turn no model can read.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict

from .errors import ClientError
from .items import FUNCTION_CALL, FUNCTION_CALL_OUTPUT, Item

AUTO, DISABLED, RETENTION_RATIO = "auto", "disabled", "retention_ratio"
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"  # the error code under ``disabled``
# ``auto`` cuts as retention_ratio 0.75 does: a window-full call forgets a few
# turns at a time, not one every turn (a prompt whose head moves every turn
# is re-read at every turn by an engine that caches prefixes)
AUTO_RETENTION = 0.75


class Truncation(BaseModel):
    """One session's ``truncation``; ``post_instructions``: the client's own
    lower bound on the room (tokens), None: the model's."""
    model_config = ConfigDict(frozen=True)
    type: Literal["auto", "disabled", "retention_ratio"] = AUTO
    retention_ratio: float = 1.0
    post_instructions: Optional[int] = None

    def wire(self) -> Any:
        if self.type != RETENTION_RATIO:
            return self.type
        out: dict[str, Any] = {"type": RETENTION_RATIO, "retention_ratio": self.retention_ratio}
        if self.post_instructions is not None:
            out["token_limits"] = {"post_instructions": self.post_instructions}
        return out


def parse_truncation(value: Any, param: str) -> Truncation:
    """``"auto"`` | ``"disabled"`` | ``{"type": "retention_ratio",
    "retention_ratio": 0..1, "token_limits": {"post_instructions": N}}``."""
    if value in (AUTO, DISABLED):
        return Truncation(type=value)
    if not isinstance(value, dict) or value.get("type") != RETENTION_RATIO:
        raise ClientError("invalid_value", f"Invalid value for '{param}': expected 'auto', "
                          "'disabled' or {'type': 'retention_ratio', 'retention_ratio': R}.",
                          param)
    ratio = value.get("retention_ratio")
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0.0 <= ratio <= 1.0:
        raise ClientError("invalid_value", f"Invalid value for '{param}.retention_ratio': "
                          f"{ratio!r}. Expected a number from 0.0 to 1.0.",
                          f"{param}.retention_ratio")
    limits = value.get("token_limits")
    post = None
    if limits is not None:
        post = limits.get("post_instructions") if isinstance(limits, dict) else limits
        if post is not None and (isinstance(post, bool) or not isinstance(post, int) or post < 1):
            raise ClientError("invalid_value", f"Invalid value for "
                              f"'{param}.token_limits.post_instructions': {post!r}. Expected "
                              "a positive integer.", f"{param}.token_limits.post_instructions")
    return Truncation(type=RETENTION_RATIO, retention_ratio=float(ratio), post_instructions=post)


class ThinkContext(BaseModel):
    """The think stage's context as the sessions see it (fixed by the server,
    read from the think stage's args when the app is built:
    :func:`runtime.models.think.context_window.context_window`).
    ``system_prompt``: the stage's own, which a client's instructions follow;
    ``tokens``: the prompt and the reply of one conversation, or
    ``prompt_chars``: a prompt budget in characters; neither: unknown, and
    only ``token_limits.post_instructions`` keeps history out."""
    model_config = ConfigDict(frozen=True)
    system_prompt: str = ""
    tokens: Optional[int] = None
    prompt_chars: Optional[int] = None
    reply_tokens: int = 64
    tool_reply_tokens: int = 256
    chars_per_token: float = 4.0
    # the chat template's tokens around each message (ChatML: 5): a spoken
    # turn is a few words, so without them the estimate runs short and the
    # think stage cuts the prompt itself
    message_tokens: int = 0

    @property
    def per_item_chars(self) -> int:
        """What each item adds to the prompt besides its own text, in characters."""
        return int(self.message_tokens * self.chars_per_token)

    def room(self, system: int, max_tokens: int | None, tools: bool,
             truncation: Truncation) -> int | None:
        """Characters the conversation may take after ``system`` characters of
        system text, with a reply of ``max_tokens`` (None: the stage's
        default); None: no bound known."""
        cpt = self.chars_per_token
        if self.tokens:
            # at least the stage's default reply: what it reserves for the
            # conversation read ahead while the caller speaks, and so for every
            # reply (a shorter one must not keep turns the read-ahead left out)
            reply = max(max_tokens or 0, self.reply_tokens)
            if tools:
                reply = max(reply, self.tool_reply_tokens)
            reply = min(reply, self.tokens // 2)
            room: int | None = int((self.tokens - reply) * cpt) - system
        elif self.prompt_chars:
            room = self.prompt_chars - system
        else:
            room = None
        if truncation.post_instructions is not None:
            post = int(truncation.post_instructions * cpt)
            room = post if room is None else min(room, post)
        return None if room is None else max(room, 0)


class ContextTooLong(Exception):
    """The conversation does not fit and truncation is ``disabled``."""

    def __init__(self, chars: int, room: int) -> None:
        super().__init__(f"{chars} > {room} characters")
        self.chars = chars
        self.room = room


def item_chars(item: Item) -> int:
    """What an item adds to the prompt, in characters."""
    if item.type == FUNCTION_CALL:
        return len(item.name or "") + len(item.arguments or "")
    if item.type == FUNCTION_CALL_OUTPUT:
        return len(item.output or "")
    return len(item.text())


def system_chars(system_text: str | None, tools: list | None) -> int:
    """The characters of what goes before the conversation: the system text
    and the tools the think stage lists in it."""
    return len(system_text or "") + (len(json.dumps(tools)) if tools else 0)


def drop_oldest(items: list[Item], dropped: set[str], room: int, truncation: Truncation,
                per_item: int = 0) -> set[str]:
    """The ids of the items to take out of the context (added to ``dropped``,
    which holds those out already) so that the rest fits in ``room``
    characters, each item counting ``per_item`` more than its text; the newest
    item always stays (the think stage cuts the head of a turn too long for
    the context by itself).  Raises :class:`ContextTooLong` under ``disabled``
    when it does not fit."""
    def cost(it: Item) -> int:
        return item_chars(it) + per_item

    live = [it for it in items if it.id not in dropped]
    total = sum(cost(it) for it in live)
    if total <= room:
        return set()
    if truncation.type == DISABLED:
        raise ContextTooLong(total, room)
    target = room * (truncation.retention_ratio if truncation.type == RETENTION_RATIO
                     else AUTO_RETENTION)
    by_call: dict[str, list[Item]] = {}
    for it in live:
        if it.type in (FUNCTION_CALL, FUNCTION_CALL_OUTPUT) and it.call_id:
            by_call.setdefault(it.call_id, []).append(it)
    out: set[str] = set()
    for it in live[:-1]:
        if total <= target:
            break
        if it.id in out:
            continue
        unit = by_call.get(it.call_id, [it]) if it.call_id else [it]
        if live[-1] in unit:   # the newest item's call stays with it
            continue
        for part in unit:
            out.add(part.id)
            total -= cost(part)
    return out
