"""Function tools and tool_choice on a think request, checked once for every thinker.

A bad tool must fail the request that carries it with ``bad_input`` before any
engine sees it: an engine would either reject it later with another code, or
(worse) build a grammar from a broken schema, or silently ignore it.  So the
shapes of ``tools`` and ``tool_choice`` (the OpenAI chat-completions shape,
see ``voice_contract``) are validated here and normalised: every tool ends up
with a ``parameters`` object schema, and ``tool_choice`` with one of four
modes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from runtime.errors import ErrorCode, StageError

# The tool_choice words of the Realtime and chat-completions APIs; a named function is the fourth form.
TOOL_CHOICES = ("auto", "none", "required")

NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
EMPTY_PARAMETERS = {"type": "object", "properties": {}}

AUTO, NONE, REQUIRED, FUNCTION = "auto", "none", "required", "function"


def _bad(message: str) -> StageError:
    return StageError(ErrorCode.BAD_INPUT, message)


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict

    def spec(self) -> dict:
        """The OpenAI chat-completions shape, as engines take it."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


@dataclass(frozen=True)
class ToolChoice:
    """``mode`` is auto | none | required | function (then ``name`` is the function)."""

    mode: str = AUTO
    name: str | None = None

    def spec(self) -> Any:
        """The OpenAI chat-completions shape, as engines take it."""
        if self.mode == FUNCTION:
            return {"type": "function", "function": {"name": self.name}}
        return self.mode

    @property
    def forces_call(self) -> bool:
        return self.mode in (REQUIRED, FUNCTION)


@dataclass(frozen=True)
class Tools:
    """The tools a request offers and how the model may use them (empty: none offered)."""

    tools: tuple[Tool, ...] = ()
    choice: ToolChoice = field(default_factory=lambda: ToolChoice(NONE))

    @property
    def active(self) -> bool:
        """True when the model may (or must) call a tool in this reply."""
        return bool(self.tools) and self.choice.mode != NONE

    def callable_tools(self) -> tuple[Tool, ...]:
        """The tools the reply may call: all of them, or the one tool_choice names."""
        if not self.active:
            return ()
        if self.choice.mode == FUNCTION:
            return tuple(t for t in self.tools if t.name == self.choice.name)
        return self.tools

    def by_name(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)


NO_TOOLS = Tools()


class ToolSpecError(ValueError):
    """What makes a tool's ``parameters`` unusable, said without saying where:
    each boundary names the field the way its callers know it (a Realtime
    client's ``session.tools[0].parameters``, a think request's tool name)."""


def object_schema(params: Any) -> dict:
    """``parameters`` as the thinkers take it: a valid JSON Schema (of the draft
    its ``$schema`` names, else the latest) of an object; ``null`` or ``{}``
    take no parameters, and a schema without ``type`` is an object's.  The one
    check for both the session (a client's ``session.update``) and the think
    stage (any caller's request), so they can never disagree on a tool."""
    if params is None or params == {}:
        return dict(EMPTY_PARAMETERS)
    if not isinstance(params, dict):
        raise ToolSpecError(f"must be a JSON Schema object, got {type(params).__name__}")
    import jsonschema  # on first use: jsonschema loads only with tools

    try:
        jsonschema.validators.validator_for(params).check_schema(params)
    except jsonschema.SchemaError as e:
        where = "/".join(str(p) for p in e.path)
        raise ToolSpecError(f"is not a valid JSON Schema: {e.message[:200]}"
                            f"{' at ' + where if where else ''}") from None
    except RecursionError:
        raise ToolSpecError("is nested too deeply") from None
    kind = params.get("type", "object")
    if kind != "object":
        raise ToolSpecError(f"must describe an object (type 'object'), got type {str(kind)[:40]!r}")
    return params if "type" in params else {"type": "object", **params}


def parse_tool(spec: Any, i: int) -> Tool:
    """One tool in the chat-completions shape; the flat Realtime shape
    (``{"type": "function", "name", ...}``) is accepted too."""
    if not isinstance(spec, dict):
        raise _bad(f"tools[{i}] must be an object, got {type(spec).__name__}")
    if spec.get("type", "function") != "function":
        raise _bad(f"tools[{i}]: only type 'function' is supported, got {spec.get('type')!r}")
    fn = spec.get("function", spec)
    if not isinstance(fn, dict):
        raise _bad(f"tools[{i}].function must be an object")
    name = fn.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise _bad(f"tools[{i}]: name {name!r} must match {NAME_RE.pattern}")
    desc = fn.get("description") or ""
    if not isinstance(desc, str):
        raise _bad(f"tool {name!r}: 'description' must be a string")
    try:
        params = object_schema(fn.get("parameters"))
    except ToolSpecError as e:
        raise _bad(f"tool {name!r}: 'parameters' {e}") from None
    return Tool(name, desc, params)


def parse_tool_choice(choice: Any, tools: tuple[Tool, ...]) -> ToolChoice:
    if choice is None:
        return ToolChoice(AUTO if tools else NONE)
    if not tools:
        raise _bad("tool_choice was given but the request offers no tools")
    if isinstance(choice, str):
        if choice not in TOOL_CHOICES:
            raise _bad(f"tool_choice {choice!r} must be one of {TOOL_CHOICES} or a named function")
        return ToolChoice(choice)
    if isinstance(choice, dict) and choice.get("type") == "function":
        fn = choice.get("function", choice)  # chat-completions nests the name, Realtime does not
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str):
            raise _bad("tool_choice {'type': 'function'} needs function.name")
        if not any(t.name == name for t in tools):
            raise _bad(f"tool_choice names the function {name!r}, which is not among the tools "
                       f"({', '.join(t.name for t in tools)})")
        return ToolChoice(FUNCTION, name)
    raise _bad(f"tool_choice {choice!r} must be one of {TOOL_CHOICES} or "
               "{'type': 'function', 'function': {'name': ...}}")


def parse_tools(tools: Any, tool_choice: Any = None) -> Tools:
    """Validated, normalised ``tools`` and ``tool_choice`` of a think request."""
    if tools is None:
        tools = []
    if not isinstance(tools, (list, tuple)):
        raise _bad(f"'tools' must be a list, got {type(tools).__name__}")
    parsed = tuple(parse_tool(spec, i) for i, spec in enumerate(tools))
    seen: set[str] = set()
    for t in parsed:
        if t.name in seen:
            raise _bad(f"two tools are named {t.name!r}; tool names must be unique")
        seen.add(t.name)
    return Tools(parsed, parse_tool_choice(tool_choice, parsed))


def tools_of(payload: Any) -> Tools:
    """The tools of a think payload (a bare transcript or message list offers none)."""
    if not isinstance(payload, dict):
        return NO_TOOLS
    return parse_tools(payload.get("tools"), payload.get("tool_choice"))
