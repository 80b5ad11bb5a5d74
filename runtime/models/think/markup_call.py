"""Reading a tool call out of markup a model wrote as text.

A small model asked for a tool sometimes writes the call as words instead of
in its call format: a JSON object, a fenced JSON block, Hermes tags, or loose
JSON it never closes (Qwen2.5-Coder-0.5B, issue 43: ``Markup: "tools": [
"function": "send_message", "parameters": ...``).  :func:`call_in_markup`
finds the call it meant, if it names an offered tool and its arguments are
valid for that tool's schema; :mod:`markup_guard` makes it a real call.

Accepted shapes (nested anywhere in the markup): ``{"name", "arguments"}``,
``{"function", "parameters"}``, ``{"tool", "args"}``, the OpenAI
``{"function": {"name", "arguments"}}``, ``{TOOL: {...}}``, a name beside its
arguments' own keys, the arguments as a JSON string, and JSON cut short
(closed here) or with keys inside a list (read by key, not parsed).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from runtime.models.think.tool_call_format import JsonStrings
from runtime.models.think.tools import Tool

NAME_KEYS = ("name", "function", "tool", "tool_name", "function_name")
ARGS_KEYS = ("arguments", "parameters", "args", "params", "input")
_TAG = re.compile(r"</?[A-Za-z_][\w-]*>|```[A-Za-z]*")
_KEYED_NAME = re.compile(r'"(?:%s)"\s*:\s*"([A-Za-z0-9_-]{1,64})"' % "|".join(NAME_KEYS))
_KEYED_ARGS = re.compile(r'"(?:%s)"\s*:\s*' % "|".join(ARGS_KEYS))


@dataclass(frozen=True)
class MarkupCall:
    name: str
    arguments: str   # JSON text of an object valid for the tool's schema


def call_in_markup(markup: str, tools: Sequence[Tool]) -> MarkupCall | None:
    """The first call of one of ``tools`` that ``markup`` writes, or None."""
    if not tools or not markup.strip():
        return None
    by_name = {t.name: t for t in tools}
    text = _TAG.sub(" ", markup)
    for value in _json_values(text):
        for name, args in _call_shapes(value, by_name):
            if _valid(args, by_name[name]):
                return MarkupCall(name, json.dumps(args))
    return _keyed_call(text, by_name)


def _json_values(text: str) -> Iterator[Any]:
    """Every JSON value the text holds: the whole, as an object's body, and each
    ``{...}`` region (closed where the text stops short)."""
    stripped = text.strip()
    for candidate in (stripped, "{" + stripped.strip(",") + "}"):
        value = _loads(candidate)
        if value is not None:
            yield value
    for start in (i for i, ch in enumerate(text) if ch == "{"):
        value = _loads(text[start:start + _value_end(text, start)])
        if value is not None:
            yield value


def _loads(text: str) -> Any:
    """``text`` as JSON, closed first if it stops short; None if it is not."""
    for candidate in (text, closed(text)):
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    return None


def _outside_strings(text: str) -> tuple[list[tuple[int, str]], bool]:
    """The characters outside JSON strings, with their index, and whether the
    text ends inside a string."""
    strings = JsonStrings()
    return [(i, ch) for i, ch in enumerate(text) if not strings.inside(ch)], strings.in_string


def _value_end(text: str, start: int) -> int:
    """The length of the bracketed value at ``start`` (to the text's end if unclosed)."""
    depth = 0
    for i, ch in _outside_strings(text[start:])[0]:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text) - start


def closed(text: str) -> str:
    """JSON cut short, closed: an open string, then each open bracket in turn
    (a dangling ``,`` dropped, a key with no value given ``null``)."""
    stack: list[str] = []
    chars, in_string = _outside_strings(text)
    for _, ch in chars:
        if ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
    out = text + ('"' if in_string else "")
    out = out.rstrip()
    if out.endswith(":"):
        out += " null"   # a key whose value never came
    elif out.endswith(","):
        out = out[:-1]
    return out + "".join(reversed(stack))


def _call_shapes(value: Any, by_name: dict[str, Tool]) -> Iterator[tuple[str, Any]]:
    """(name, arguments) for every dict in ``value`` shaped like a call of a known tool."""
    if isinstance(value, list):
        for v in value:
            yield from _call_shapes(v, by_name)
        return
    if not isinstance(value, dict):
        return
    name = next((value[k] for k in NAME_KEYS if isinstance(value.get(k), str)
                 and value[k] in by_name), None)
    if name is not None:
        args = next((value[k] for k in ARGS_KEYS if k in value), None)
        if args is None:   # the arguments' own keys beside the name
            args = {k: v for k, v in value.items() if k not in NAME_KEYS}
        yield name, _parsed(args)
    for k, v in value.items():
        if k in by_name and isinstance(v, dict):
            yield k, v
        if isinstance(v, (dict, list)):
            yield from _call_shapes(v, by_name)


def _parsed(args: Any) -> Any:
    """Arguments written as a JSON string are read as the object they hold."""
    if isinstance(args, str):
        value = _loads(args)
        return value if value is not None else args
    return args


def _keyed_call(text: str, by_name: dict[str, Tool]) -> MarkupCall | None:
    """A call in JSON too broken to parse: a name key naming a tool, and the
    object after an arguments key."""
    names = [m.group(1) for m in _KEYED_NAME.finditer(text) if m.group(1) in by_name]
    args_at = _KEYED_ARGS.search(text)
    if not names or args_at is None:
        return None
    rest = text[args_at.end():]
    if not rest.startswith("{"):
        return None
    args = _loads(rest[:_value_end(rest, 0)])
    tool = by_name[names[0]]
    return MarkupCall(tool.name, json.dumps(args)) if _valid(args, tool) else None


def _valid(args: Any, tool: Tool) -> bool:
    if not isinstance(args, dict):
        return False
    import jsonschema   # loaded with the tools it checks (see tools.py)

    try:
        jsonschema.validate(args, tool.parameters)
    except jsonschema.ValidationError:
        return False
    return True
