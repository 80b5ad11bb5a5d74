"""What a front end may know of a think stage's context before asking it: the
system prompt it puts first, and how much one conversation may hold.

The voice server keeps a long session's history within the context itself
(the Realtime ``truncation`` setting) and puts a client's instructions after
the stage's own system prompt; both need these numbers, read here from the
stage's args with the thinkers' own defaults, so that the server never loads a
model to learn them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from runtime.models.think.thinker_request import DEFAULT_SYSTEM_PROMPT

# LlamaCppThinker's defaults (llama_cpp_thinker.py)
_MAX_SEQUENCES = 8
_CELLS_PER_SEQUENCE = 1024
_MAX_TOKENS = 64
_MAX_TOOL_CALL_TOKENS = 256
# ChatML (Qwen, SmolLM2) around each message: <|im_start|>, the role, a newline,
# <|im_end|> and a newline.  Spoken turns are short, so this is a good part of them.
_CHATML_MESSAGE_TOKENS = 5
# the prompt budget of the thinkers that send text to an engine (async_stream_thinker.py)
_MAX_PROMPT_CHARS = 6000
_PROMPT_CHARS_THINKERS = (":OpenAICompatThinker", ":SGLangThinker")


@dataclass(frozen=True)
class ContextWindow:
    """``tokens``: the prompt and the reply of one conversation (llama.cpp's
    cells per sequence), or None; ``prompt_chars``: a prompt budget in
    characters (thinkers that send text to another engine), or None; the
    reply's tokens, as text and as a tool call (the thinker reserves them)."""
    system_prompt: str
    tokens: int | None
    prompt_chars: int | None
    reply_tokens: int
    tool_reply_tokens: int
    message_tokens: int = 0   # what the chat template adds around each message, in tokens


def context_window(executor: str, args: Mapping[str, Any]) -> ContextWindow:
    """The window of a think stage built from ``executor`` ('module:Class')
    with ``args``."""
    system_prompt = str(args.get("system_prompt", DEFAULT_SYSTEM_PROMPT) or "")
    reply = int(args.get("max_tokens", _MAX_TOKENS))
    if "llama_cpp_thinker" in executor:
        seqs = max(int(args.get("max_sequences", _MAX_SEQUENCES)), 1)
        n_ctx = int(args.get("n_ctx", _CELLS_PER_SEQUENCE * seqs))
        if args.get("prefix_cache", True) or args.get("kv_unified", False):
            # one pool of cells: the thinker bounds what one sequence may take
            tokens = min(n_ctx, int(args.get("max_context_per_seq", max(n_ctx // seqs, 256))))
        else:
            tokens = n_ctx // seqs
        tool_reply = int(args.get("max_tool_call_tokens", _MAX_TOOL_CALL_TOKENS))
        return ContextWindow(system_prompt, tokens, None, min(reply, tokens // 2),
                             min(max(reply, tool_reply), tokens // 2), _CHATML_MESSAGE_TOKENS)
    if executor.endswith(_PROMPT_CHARS_THINKERS):
        return ContextWindow(system_prompt, None,
                             int(args.get("max_prompt_chars", _MAX_PROMPT_CHARS)), reply, reply)
    return ContextWindow(system_prompt, None, None, reply, reply)
