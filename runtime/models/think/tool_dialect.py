"""How one model family is asked for tool calls: the prompt, the call's bytes,
and the first-token rule that decides a call under ``tool_choice: auto``.

Two dialects, picked from the GGUF's own chat template:

- ``native``: the template renders tools itself (Qwen2.5's ``<tools>`` block,
  calls as ``<tool_call>\\n{...}\\n</tool_call>``, results as
  ``<tool_response>``).  The model sees tools, calls and results exactly as it
  was trained.  Measured on Qwen2.5-Coder-0.5B: it puts ~0 probability on
  ``<tool_call>`` as the reply's first token even when it then writes a call
  (its calls start with ``{"`` or ``{``), and a few turns into a conversation
  of spoken answers it puts ~0 on those too, even when asked to set a timer.
  So a reply begins as a call at a low start probability (0.005) and the name
  the model then writes decides (a callable tool's, with probability >= 0.5:
  see ``tool_call_decision``).  Measured in 10-turn sessions
  (``benchmarks/answer_bench.py``, 24 tool and 12 other requests): start 0.3
  called right 3 times, 0.02 9, 0.005 15, 0 (always probe) 18 but with 7
  false calls, against none for the others.
- ``prompted``: the template knows no tools (SmolLM2's ChatML).  This
  project's tool prompt lists them and results are folded into the user turn
  (``tool_call_format.plain_messages``); a call starts with ``<tool_call>``,
  decided at a probability of 0.003 (``benchmarks/tool_bench.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from runtime.models.think.chat import Message
from runtime.models.think.tool_call_format import (CALL_OPEN, PROMPTED_CALL, QWEN_CALL, CallFormat,
                                                   plain_messages)
from runtime.models.think.tools import Tools

# What the template needs from a message list: messages and extra template variables.
Rendering = tuple[list[Message], dict[str, Any]]


@dataclass(frozen=True)
class ToolDialect:
    name: str
    call: CallFormat                 # the bytes the grammar writes around a call
    start_texts: tuple[str, ...]     # a reply whose first token begins one of these is a call
    threshold: float                 # ... when their probabilities sum to at least this
    name_threshold: float | None     # native: then the name the model writes must be a callable
                                     # tool's, this likely (None: no such check, see tool_call_decision)
    unspoken: tuple[str, ...]        # no token of a text reply starts with these while tools
                                     # are shown (the model would write a call as words to speak)
    prepare: Callable[[Sequence[Message], Tools], Rendering]

    def rendering(self, messages: Sequence[Message], tools: Tools) -> Rendering:
        return self.prepare(messages, tools)


def _prompted(messages: Sequence[Message], tools: Tools) -> Rendering:
    return plain_messages(messages, tools), {}


def _arguments(text: str) -> Any:
    """A call's arguments as the template writes them (``tojson`` of an object):
    parsed, so that they are not written as one quoted string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


AFTER_RESULTS = "Tell the user the result in one short spoken sentence."


def native_messages(messages: Sequence[Message], tools: Tools) -> Rendering:
    """Messages in the shape HF chat templates take (calls with their arguments as
    objects, results as ``tool`` messages) and ``tools`` for the template's block.

    The tools are listed whenever the request offers them, also when this reply
    may not call (``none``, or right after results): the prompt then starts as
    the previous turn's did, so the conversation cache still covers it.
    """
    out: list[Message] = []
    for m in messages:
        if m.get("tool_calls"):
            out.append({"role": "assistant", "content": m["content"], "tool_calls": [
                {"type": "function", "function": {"name": c["function"]["name"],
                                                  "arguments": _arguments(c["function"]["arguments"])}}
                for c in m["tool_calls"]]})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    if out and out[-1]["role"] == "tool":
        # Measured on Qwen2.5-Coder-0.5B: after a bare <tool_response> it wrote the
        # call again as a JSON block; with this line it says the result.
        out.append({"role": "system", "content": AFTER_RESULTS})
    specs = [t.spec() for t in tools.tools]
    return out, ({"tools": specs} if specs else {})


PROMPTED = ToolDialect("prompted", PROMPTED_CALL, (CALL_OPEN,), 0.003, None, (), _prompted)
NATIVE = ToolDialect("native", QWEN_CALL, (CALL_OPEN, '{"', "{"), 0.005, 0.5,
                     ("{", "`", "<"), native_messages)
DIALECTS = {d.name: d for d in (PROMPTED, NATIVE)}
# A model whose start rule was calibrated apart from its dialect's default, by
# the config's model name.  Qwen2.5-Coder-1.5B (benchmarks/answer_bench.py):
# at 0.005 it called right 24/24 but falsely 2/12, fresh and in sessions; at
# 0.05 24/24 fresh, 19/24 in 10-turn sessions, no false call; at 0.3 17/24.
CALL_START_BY_MODEL = {"qwen2.5-coder-1.5b": 0.05}


def dialect_for(template: str | None, choice: str = "auto") -> ToolDialect:
    """``choice``: auto (native when the template renders tools and ``<tool_call>``),
    native or prompted."""
    if choice == "auto":
        native = bool(template) and "tools" in template and CALL_OPEN in template
        return NATIVE if native else PROMPTED
    if choice not in DIALECTS:
        raise ValueError(f"tool_format must be auto, native or prompted, got {choice!r}")
    return DIALECTS[choice]
