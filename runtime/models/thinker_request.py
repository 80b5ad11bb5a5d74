"""One admitted thinker request, read the same way by every backend.

Keeping the payload/params reading in one place means a YAML switch from
llama.cpp to an OpenAI server or SGLang changes nothing for the stages around
the thinker: same payload, same overrides, same errors for bad input.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.executor import WorkItem
from runtime.models.chat import Message, parse_messages, with_system_prompt
from runtime.models.sampling import Sampling


@dataclass
class ThinkerRequest:
    messages: list[Message]
    sampling: Sampling


def read_request(item: WorkItem, system_prompt: str | None, defaults: Sampling) -> ThinkerRequest:
    """Messages plus sampling; ``item.params`` overrides the payload, which overrides args."""
    messages = with_system_prompt(parse_messages(item.payload), system_prompt)
    payload = item.payload if isinstance(item.payload, dict) else None
    return ThinkerRequest(messages, defaults.override(payload, item.params or {}))


DEFAULT_SYSTEM_PROMPT = (
    "You are a friendly voice assistant. Answer in one or two short sentences."
)
