"""One admitted thinker request, read the same way by every backend.

Keeping the payload/params reading in one place means a YAML switch from
llama.cpp to an OpenAI server or SGLang changes nothing for the stages around
the thinker: same payload, same overrides, same errors for bad input.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.errors import ErrorCode, StageError
from runtime.executor import WorkItem
from runtime.models.think.chat import Message, parse_messages, with_system_prompt
from runtime.models.think.sampling import Sampling
from runtime.models.think.tools import NO_TOOLS, Tools, tools_of


@dataclass
class ThinkerRequest:
    messages: list[Message]
    sampling: Sampling
    tools: Tools = field(default_factory=lambda: NO_TOOLS)
    parallel_tool_calls: bool = True
    include_usage: bool = False     # a usage event in the last chunk


def read_request(item: WorkItem, system_prompt: str | None, defaults: Sampling,
                 supports_tools: bool = True, engine: str = "this thinker") -> ThinkerRequest:
    """Messages, tools and sampling; ``item.params`` overrides the payload, which overrides args.

    A backend that cannot carry tools (``supports_tools=False``) refuses a
    request that offers them or whose history holds tool calls, as
    ``bad_input``: ignoring them would answer a different question.
    """
    messages = with_system_prompt(parse_messages(item.payload), system_prompt)
    payload = item.payload if isinstance(item.payload, dict) else None
    tools = tools_of(payload)
    if not supports_tools and (tools.tools or any(m["role"] == "tool" or m.get("tool_calls")
                                                  for m in messages)):
        raise StageError(ErrorCode.BAD_INPUT, f"{engine} does not support tools (function calling); "
                                              "use the llama.cpp or OpenAI-compatible thinker")
    parallel = payload.get("parallel_tool_calls", True) if payload else True
    if not isinstance(parallel, bool):
        raise StageError(ErrorCode.BAD_INPUT, "parallel_tool_calls must be a boolean")
    usage = payload.get("include_usage", False) if payload else False
    if not isinstance(usage, bool):
        raise StageError(ErrorCode.BAD_INPUT, "include_usage must be a boolean")
    return ThinkerRequest(messages, defaults.override(payload, item.params or {}), tools, parallel,
                          usage)


DEFAULT_SYSTEM_PROMPT = (
    "You are a friendly voice assistant. Answer in one or two short sentences."
)
