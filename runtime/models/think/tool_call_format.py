"""How the embedded llama.cpp thinker writes tool calls, reads them back, and
constrains them with a grammar.

A call is written in the style most open models are trained on (Hermes/Qwen):

    <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>

with the exact bytes around the JSON (newlines or none) a :class:`CallFormat`,
so that a model with its own tools template (Qwen2.5) writes calls the way it
was trained to (see ``tool_dialect``).  SmolLM2's chat template has no tool
format, so for it the tools are listed in the system prompt by this module and
a tool's result is folded into the user turn that asked for it (see
:func:`plain_messages` for why).

The grammar (GBNF, built from each tool's JSON schema by llama-cpp-python's
``SchemaConverter``) fixes every byte outside the arguments, so the reply can be
parsed as it streams with a small state machine (:class:`CallStream`) and the
arguments are valid JSON for the schema whatever the model's preferences.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any, Sequence

from runtime.errors import ErrorCode, StageError
from runtime.models.think.chat import Message
from runtime.models.think.tools import Tool, Tools
from runtime.models.voice_contract import (ThinkEvent, tool_call_delta_event,
                                           tool_call_done_event)

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
_NAME_HEAD = '{"name": "'
_ARGS_HEAD = '", "arguments": '

# The first token of CALL_OPEN is what the model says first when it means to call.
MARKER = CALL_OPEN


@dataclass(frozen=True)
class CallFormat:
    """The fixed bytes of a call: ``head`` name ``args_head`` arguments ``tail``,
    calls joined by ``separator``."""

    head: str = CALL_OPEN + _NAME_HEAD
    args_head: str = _ARGS_HEAD
    tail: str = "}" + CALL_CLOSE
    separator: str = "\n"

    def text(self, name: str, arguments: str) -> str:
        """One call as the grammar makes the model write it."""
        return f"{self.head}{name}{self.args_head}{arguments}{self.tail}"


# The format this module's own tool prompt teaches (SmolLM2 and any template without tools).
PROMPTED_CALL = CallFormat()
# Qwen2.5's tools template: the JSON on a line of its own between the tags.
QWEN_CALL = CallFormat(head=CALL_OPEN + "\n" + _NAME_HEAD, tail="}\n" + CALL_CLOSE)

_TOOLS_INTRO = (
    "You have these tools:\n{tools}\n\n"
    "When a tool can answer the user, reply only with "
    '<tool_call>{{"name": ..., "arguments": {{...}}}}</tool_call>. Otherwise answer normally.\n\n'
    "Examples:\nUser: {example_ask}\n"
    'Assistant: <tool_call>{{"name": "{example}", "arguments": {{...}}}}</tool_call>\n'
    "User: Hello!\nAssistant: Hello! How can I help you?"
)


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def _signature(tool: Tool) -> str:
    props = tool.parameters.get("properties") or {}
    args = ", ".join(f"{json.dumps(k)}: {(v or {}).get('type', 'any') if isinstance(v, dict) else 'any'}"
                     for k, v in props.items())
    desc = f" {tool.description}" if tool.description else ""
    return f"{tool.name}:{desc} Arguments: {{{args}}}"


def tools_prompt(tools: Sequence[Tool]) -> str:
    """The paragraph appended to the system prompt that lists the tools and the call format."""
    first = tools[0]  # the example asks for what the first tool does, in its own words
    return _TOOLS_INTRO.format(tools="\n".join(_signature(t) for t in tools), example=first.name,
                               example_ask=first.description.strip() or f"Use {first.name}.")


def call_text(name: str, arguments: str, fmt: CallFormat = PROMPTED_CALL) -> str:
    """One call as the grammar makes the model write it."""
    return fmt.text(name, arguments)


def spoken_result(output: str) -> str:
    """A tool's output as plain words: a JSON object becomes ``key: value`` pairs,
    which the small model repeats far more often than JSON."""
    try:
        obj = json.loads(output)
    except ValueError:
        return output.strip()
    if isinstance(obj, dict):
        return ", ".join(f"{str(k).replace('_', ' ')}: {v}" for k, v in obj.items())
    return obj if isinstance(obj, str) else output.strip()


def result_prompt(outputs: Sequence[str]) -> str:
    """What follows the user's question once the tools answered.

    Measured on SmolLM2-135M (6 questions x 4 seeds, the reply must contain
    the fact): this wording 15/24; the result as a ``tool`` turn, as a user
    turn naming the tool, as a system-prompt fact or as JSON 0-14/24.
    """
    return f"The answer is: {'; '.join(spoken_result(o) for o in outputs)}. Say the answer in one sentence."


def plain_messages(messages: Sequence[Message], tools: Tools) -> list[Message]:
    """The conversation as role/content messages the GGUF's chat template renders.

    The tools are listed in the system prompt when the reply may call one.  A
    call and its results are folded into the user turn that asked for them
    (question, then :func:`result_prompt`): shown the call in the call format,
    the model calls again instead of answering.
    """
    out: list[Message] = []
    results: list[str] = []
    for m in messages:
        if m["role"] == "tool":
            results.append(m["content"])
            continue
        if results:
            _add_results(out, results)
            results = []
        if m.get("tool_calls"):
            if m["content"].strip():
                out.append({"role": "assistant", "content": m["content"]})
            continue
        out.append({"role": m["role"], "content": m["content"]})
    if results:
        _add_results(out, results)
    callable_ = tools.callable_tools()
    if callable_:
        intro = tools_prompt(callable_)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{intro}"}
        else:
            out.insert(0, {"role": "system", "content": intro})
    return out


def _add_results(out: list[Message], results: list[str]) -> None:
    if out and out[-1]["role"] == "user":
        out[-1] = {"role": "user", "content": f"{out[-1]['content']}\n\n{result_prompt(results)}"}
    else:
        out.append({"role": "user", "content": result_prompt(results)})


def _literal(text: str) -> str:
    return json.dumps(text)  # a GBNF literal escapes like a JSON string


# A JSON string character: anything but a quote, a backslash or a control
# character, or an escape.  llama-cpp-python 0.3's converter lets raw control
# characters (newlines) into strings, which is not JSON; this rule replaces its own.
JSON_CHAR_RULE = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})'
_STRING_BOUNDS = ("maxLength", "enum", "const", "pattern", "format")


def capped_strings(schema: Any, max_chars: int) -> Any:
    """``schema`` with ``maxLength: max_chars`` on every string that has no bound.

    Every string the capped schema admits is valid for the original; what it
    buys is an end: a small model can run on inside a string ("99999...")
    until the token budget cuts the call, which then never completes.
    """
    if isinstance(schema, list):
        return [capped_strings(s, max_chars) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: capped_strings(v, max_chars) if k in _SUBSCHEMA_KEYS else v for k, v in schema.items()}
    for k in ("properties", "$defs", "definitions"):
        if isinstance(schema.get(k), dict):
            out[k] = {name: capped_strings(sub, max_chars) for name, sub in schema[k].items()}
    if schema.get("type") == "string" and not any(b in schema for b in _STRING_BOUNDS):
        out["maxLength"] = max_chars
    return out


_SUBSCHEMA_KEYS = ("items", "anyOf", "oneOf", "allOf", "additionalProperties", "prefixItems")


def call_grammar(tools: Sequence[Tool], max_calls: int, max_string_chars: int = 100,
                 fmt: CallFormat = PROMPTED_CALL) -> str:
    """GBNF for one to ``max_calls`` calls of ``tools``, arguments valid for each schema
    (strings without a bound capped at ``max_string_chars``, see :func:`capped_strings`)."""
    from llama_cpp.llama_grammar import SchemaConverter

    conv = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    alts = []
    for i, tool in enumerate(tools):
        try:
            schema = conv.resolve_refs(capped_strings(tool.parameters, max_string_chars), f"tool-{i}")
            args_rule = conv.visit(schema, f"args-{i}")
        except Exception as e:  # the converter raises on schema features it cannot express
            raise StageError(ErrorCode.BAD_INPUT, f"tool {tool.name!r}: its parameters schema cannot be "
                                                  f"turned into a grammar ({type(e).__name__}: {e})") from None
        alts.append(f"{_literal(tool.name + fmt.args_head)} {args_rule}")
    conv._add_rule("call-name", " | ".join(f"( {a} )" for a in alts))
    conv._add_rule("call", f"{_literal(fmt.head)} call-name {_literal(fmt.tail)}")
    sep = _literal(fmt.separator)
    more = " ".join([f"( {sep} call"] * (max_calls - 1)) + " )?" * (max_calls - 1) if max_calls > 1 else ""
    conv._add_rule("root", f"call {more}".strip())
    if "char" in conv._rules:
        conv._rules["char"] = JSON_CHAR_RULE
    return conv.format_grammar()


class JsonStrings:
    """Where a stream of JSON text is: inside a string or not, one character at
    a time (a string's quotes count as inside)."""

    def __init__(self) -> None:
        self.in_string = False   # inside a string
        self.escaped = False     # ... right after its backslash

    def inside(self, ch: str) -> bool:
        """Advance by ``ch``; True when ``ch`` belongs to a string."""
        if self.in_string:
            if self.escaped:
                self.escaped = False
            elif ch == "\\":
                self.escaped = True
            elif ch == '"':
                self.in_string = False
            return True
        self.in_string = ch == '"'
        return self.in_string


class CallStream:
    """Turns the text a grammar-constrained reply streams into tool-call events.

    The grammar fixes the frame, so this only tracks where it is: before a
    name, in a name, in the arguments (a JSON value whose end is found by
    counting brackets outside strings), or after the arguments.  ``done`` is
    emitted the moment the arguments' last character arrives, not when the
    frame closes.
    """

    def __init__(self, fmt: CallFormat = PROMPTED_CALL) -> None:
        self.fmt = fmt                  # the frame the grammar writes around each call
        self.calls: list[dict] = []     # {"call_id", "name", "arguments"} of every call started
        self._state = "frame"           # frame | name | args
        self._frame = ""                # frame text seen since the last call ended
        self._name = ""
        self._depth = 0
        self._strings = JsonStrings()
        self._args_started = False

    @property
    def open_call(self) -> bool:
        """A call has started and its arguments are not complete."""
        return self._state in ("name", "args")

    def feed(self, text: str) -> list[ThinkEvent]:
        events: list[ThinkEvent] = []
        piece = ""  # argument characters of this feed, flushed as one delta
        for ch in text:
            if self._state == "frame":
                self._frame += ch
                if self._frame.endswith(self.fmt.head):
                    self._state, self._name, self._frame = "name", "", ""
            elif self._state == "name":
                self._name += ch
                if self._name.endswith(self.fmt.args_head):
                    name = self._name[: -len(self.fmt.args_head)]
                    self.calls.append({"call_id": new_call_id(), "name": name, "arguments": ""})
                    events.append(tool_call_delta_event(len(self.calls) - 1, "", self.calls[-1]["call_id"],
                                                        name))
                    self._state = "args"
                    self._depth, self._strings = 0, JsonStrings()
                    self._args_started = False
            else:
                piece += ch
                if self._args_value_ends(ch):
                    events.extend(self._flush(piece))
                    piece = ""
                    call = self.calls[-1]
                    events.append(tool_call_done_event(len(self.calls) - 1, call["call_id"], call["name"],
                                                       call["arguments"]))
                    self._state = "frame"
        if piece:
            events.extend(self._flush(piece))
        return events

    def _flush(self, piece: str) -> list[ThinkEvent]:
        if not piece:
            return []
        self.calls[-1]["arguments"] += piece
        return [tool_call_delta_event(len(self.calls) - 1, piece)]

    def _args_value_ends(self, ch: str) -> bool:
        """Advance the bracket counter by one character; True at the value's last one."""
        if ch.isspace() and not self._args_started and not self._strings.in_string:
            return False
        self._args_started = True
        if self._strings.inside(ch):
            return False
        if ch in "{[":
            self._depth += 1
        elif ch in "}]":
            self._depth -= 1
            return self._depth == 0
        return False
