"""Function tools on the Realtime protocol: checking the ``tools`` and
``tool_choice`` a client sends (``session.update``, ``response.create``) and
turning them into the chat-completions shape the think stage takes.

The Realtime API writes a tool flat, ``{"type": "function", "name",
"description", "parameters"}``, and a forced choice as ``{"type": "function",
"name": N}``; the thinkers take the chat-completions shape (the one every
OpenAI-compatible engine accepts), ``{"type": "function", "function": {...}}``
and ``{"type": "function", "function": {"name": N}}``
(:mod:`runtime.models.voice_contract`).  The session keeps the Realtime shape,
echoes it in ``session.updated``, and converts when it starts a response.

A tool is refused when the model could not be made to honour it: a name
outside ``[A-Za-z0-9_-]{1,64}`` (the pattern the OpenAI APIs use), two tools
of one name, ``parameters`` that is not a JSON Schema of an object (the
think stage's own check, :func:`runtime.models.think.tools.object_schema`), or a
type other than ``function`` (MCP tools need a server the agent does not
reach).  The error names the offending field; the session's previous tools
stay in force.

A session's ``tool_choice`` is checked for its shape only when it is set:
clients set it before the tools it names (LiveKit Agents sends a named
function in its first ``session.update`` and the tools in the next; Pipecat
sends ``required`` before its tools).  It is checked against the tools when a
response starts (:func:`choice_misfit`); a ``response.create``'s own choice
must fit at once.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema  # noqa: F401 - loaded with the server, not on the event loop at a client's first tools

from runtime.models.think.tools import NAME_RE, ToolSpecError, object_schema
from runtime.models.voice_contract import TOOL_CHOICES

from .errors import ClientError


def parse_tools(value: Any, param: str, max_tools: int, max_chars: int) -> list[dict]:
    """A client's ``tools`` list, checked, in the Realtime shape; ``null`` is
    no tools."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ClientError("invalid_type", f"Invalid type for '{param}': expected an array of "
                          "tools.", param)
    if len(value) > max_tools:
        raise ClientError("invalid_tool", f"Invalid '{param}': at most {max_tools} tools.",
                          param)
    try:
        size = len(json.dumps(value))
    except (TypeError, ValueError, RecursionError):
        size = max_chars + 1
    if size > max_chars:
        raise ClientError("invalid_tool", f"Invalid '{param}': the tools take {size} "
                          f"characters of JSON, more than the limit of {max_chars}.", param)
    tools: list[dict] = []
    for i, tool in enumerate(value):
        tools.append(_parse_tool(tool, f"{param}[{i}]"))
    names = [t["name"] for t in tools]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ClientError("invalid_tool", f"Invalid '{param}[{i}].name': another tool is "
                              f"already called {name!r}.", f"{param}[{i}].name")
    return tools


def _parse_tool(tool: Any, param: str) -> dict:
    if not isinstance(tool, dict):
        raise ClientError("invalid_type", f"Invalid type for '{param}': expected a tool "
                          "object.", param)
    ttype = tool.get("type", "function")
    if ttype != "function":
        raise ClientError("unsupported_tool_type", f"Invalid value for '{param}.type': "
                          f"{str(ttype)[:64]!r}. Only 'function' tools are supported.",
                          f"{param}.type")
    name = tool.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ClientError("invalid_tool", f"Invalid '{param}.name': {str(name)[:80]!r}. A "
                          "function name is 1 to 64 characters among a-z, A-Z, 0-9, '_' "
                          "and '-'.", f"{param}.name")
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise ClientError("invalid_type", f"Invalid type for '{param}.description': expected "
                          "a string.", f"{param}.description")
    out = {"type": "function", "name": name}
    if description is not None:
        out["description"] = description
    try:
        out["parameters"] = object_schema(tool.get("parameters"))
    except ToolSpecError as e:
        raise ClientError("invalid_tool_parameters", f"Invalid '{param}.parameters': the schema "
                          f"{e}.", f"{param}.parameters") from None
    return out


def check_tool_choice(value: Any, param: str) -> str | dict:
    """The shape of a choice: ``auto`` | ``none`` | ``required`` |
    ``{"type": "function", "name": N}``, whatever the tools are now."""
    if isinstance(value, str):
        if value not in TOOL_CHOICES:
            raise ClientError("invalid_tool_choice", f"Invalid value for '{param}': "
                              f"{value[:64]!r}. Supported values are: 'auto', 'none', "
                              "'required', or {'type': 'function', 'name': NAME}.", param)
        return value
    if not isinstance(value, dict) or value.get("type") != "function":
        raise ClientError("invalid_tool_choice", f"Invalid '{param}': expected 'auto', 'none', "
                          "'required', or {'type': 'function', 'name': NAME}.", param)
    name = value.get("name")
    if not isinstance(name, str):
        raise ClientError("invalid_tool_choice", f"Missing '{param}.name': the function to "
                          "call.", f"{param}.name")
    if not NAME_RE.match(name):
        raise ClientError("invalid_tool_choice", f"Invalid '{param}.name': {name[:80]!r} is not "
                          "a function name.", f"{param}.name")
    return {"type": "function", "name": name}


def choice_misfit(choice: str | dict, tools: list[dict], param: str) -> ClientError | None:
    """Why a well-formed choice cannot apply to ``tools`` (``required`` with
    none, a function that is not among them), or None when it can."""
    if choice == "required" and not tools:
        return ClientError("invalid_tool_choice", f"Invalid '{param}': 'required' needs at "
                           "least one tool.", param)
    if isinstance(choice, dict) and choice["name"] not in {t["name"] for t in tools}:
        return ClientError("invalid_tool_choice", f"Invalid '{param}.name': no tool is called "
                           f"{choice['name'][:64]!r}.", f"{param}.name")
    return None


def parse_tool_choice(value: Any, tools: list[dict], param: str) -> str | dict:
    """A choice that must apply to ``tools`` now (a ``response.create``'s)."""
    choice = check_tool_choice(value, param)
    err = choice_misfit(choice, tools, param)
    if err is not None:
        raise err
    return choice


def choice_still_valid(choice: str | dict, tools: list[dict]) -> bool:
    """Whether a choice made earlier fits a tools list."""
    return choice_misfit(choice, tools, "") is None


def chat_tools(tools: list[dict]) -> list[dict]:
    """Realtime tools in the chat-completions shape."""
    out = []
    for t in tools:
        fn = {"name": t["name"], "parameters": t["parameters"]}
        if "description" in t:
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def chat_tool_choice(choice: str | dict) -> str | dict:
    """A Realtime tool choice in the chat-completions shape."""
    if isinstance(choice, dict):
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice
