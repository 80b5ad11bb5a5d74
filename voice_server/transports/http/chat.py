"""``POST /v1/chat/completions``: OpenAI's chat completions on the think stage.

The body is checked once and becomes a think request (:func:`_chat_payload`);
the reply is one ``chat.completion`` or, with ``stream: true``, SSE
``chat.completion.chunk`` events and ``data: [DONE]`` (errors after the first
byte: :mod:`.streaming`).  ``tools`` / ``tool_choice`` /
``parallel_tool_calls`` are taken and answered with ``tool_calls``
(finish_reason ``tool_calls``), streamed as OpenAI's ``delta.tool_calls``
pieces: the think stage's call events (docs/TOOLS.md, :class:`_Calls`),
through the same thinker a Realtime session uses.  Bad tools are a 400 before
anything is submitted.
"""

from __future__ import annotations

import time
import uuid
from typing import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from runtime.models.voice_contract import (LENGTH, TEXT_REPLY_ROUTE, THINK, TOOL_CALL_DELTA, TOOL_CALL_DONE,
                                           USAGE, think_events, think_request, validate_tools)

from .context import ApiContext
from .errors import ApiError, cancelled_body, error_body, runtime_error
from .models import check_model
from .streaming import SSE_DONE, PipelineStream, sse
from .turn import Turn, first_event, first_ok_event

ROLE_MAP = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
            "tool": "tool"}


def _chat_payload(data: dict, max_prompt_chars: int) -> tuple[dict, int | None]:
    """The think request for a chat completions body, and its ``max_tokens`` if
    the client set an integer one; an ApiError for what this server refuses."""
    msgs = data.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ApiError(400, "'messages' must be a non-empty array", param="messages", code="invalid_value")
    out = []
    total = 0
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ROLE_MAP:
            raise ApiError(400, f"messages[{i}] needs a role in {sorted(ROLE_MAP)}",
                           param=f"messages[{i}].role", code="invalid_value")
        content = m.get("content")
        if content is None:
            content = ""
        if isinstance(content, list):
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" or \
                        not isinstance(part.get("text"), str):
                    raise ApiError(400, f"messages[{i}].content: only text parts are supported",
                                   param=f"messages[{i}].content", code="unsupported_value")
                texts.append(part["text"])
            content = "".join(texts)
        if not isinstance(content, str):
            raise ApiError(400, f"messages[{i}].content must be a string",
                           param=f"messages[{i}].content", code="invalid_type")
        total += len(content)
        msg = {"role": ROLE_MAP[m["role"]], "content": content}
        # call shapes are checked by the thinker (a bad one is a 400 before the first byte)
        if m.get("tool_calls") is not None and m["role"] == "assistant":
            msg["tool_calls"] = m["tool_calls"]
        if m["role"] == "tool":
            msg["tool_call_id"] = m.get("tool_call_id")
        out.append(msg)
    if total > max_prompt_chars:
        raise ApiError(413, f"the messages hold {total} characters; the limit is {max_prompt_chars}",
                       param="messages", code="input_too_long")
    n = data.get("n", 1)
    if n not in (1, None):
        raise ApiError(400, "only n=1 is supported", param="n", code="unsupported_value")
    for unsupported in ("functions", "function_call", "stop", "logprobs"):
        if data.get(unsupported):
            raise ApiError(400, f"'{unsupported}' is not supported by this server"
                                + (" (use 'tools')" if unsupported.startswith("function") else ""),
                           param=unsupported, code="unsupported_parameter")
    if "stream" in data and not isinstance(data["stream"], bool) and data["stream"] is not None:
        raise ApiError(400, "'stream' must be a boolean", param="stream", code="invalid_type")
    tools, tool_choice = data.get("tools"), data.get("tool_choice")
    if tools is not None or tool_choice is not None:
        try:
            validate_tools(tools, tool_choice)
        except ValueError as e:
            raise ApiError(400, str(e), param="tool_choice" if "tool_choice" in str(e) else "tools",
                           code="invalid_value") from None
    # usage always: its finish_reason says whether the budget cut the reply
    payload: dict = think_request(out, tools=tools or None, tool_choice=tool_choice,
                                  include_usage=True)
    if data.get("parallel_tool_calls") is not None:
        payload["parallel_tool_calls"] = data["parallel_tool_calls"]
    max_tokens = data.get("max_completion_tokens", data.get("max_tokens"))
    if max_tokens is not None:
        payload["max_tokens"] = max_tokens   # validated by the thinker -> 400 before the first byte
    for k in ("temperature", "top_p", "seed"):
        if data.get(k) is not None:
            payload[k] = data[k]
    return payload, max_tokens if isinstance(max_tokens, int) else None


async def chat_completions(ctx: ApiContext, request: Request) -> Response:
    """POST /v1/chat/completions."""
    ctx.check_auth(request)
    data = await ctx.read_json(request)
    model = check_model(ctx, data, THINK)
    payload, max_tokens = _chat_payload(data, int(ctx.setting("max_prompt_chars")))
    stream = bool(data.get("stream"))
    include_usage = bool((data.get("stream_options") or {}).get("include_usage")) \
        if isinstance(data.get("stream_options"), dict) else False
    p = ctx.live_pipeline([THINK])
    if max_tokens is None:
        try:
            max_tokens = int(p.cfg.stage(THINK).args.get("max_tokens", 64))
        except Exception:  # noqa: BLE001
            max_tokens = 64
    h = await p.submit(payload, entry=THINK, route=list(TEXT_REPLY_ROUTE), deadline_s=ctx.deadline())
    turn = Turn(p, h)
    first = await first_ok_event(request, turn)
    cid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    created = int(time.time())
    headers = {"X-Request-Id": str(turn.rid), "Cache-Control": "no-cache"}

    calls = _Calls()
    end: dict = {}   # the thinker's usage event: token counts and why the reply ended

    def finish_reason(n_chunks: int) -> str:
        if calls.done:
            return "tool_calls"
        cut = end["finish_reason"] == LENGTH if "finish_reason" in end else n_chunks >= max_tokens
        return "length" if cut or calls.started else "stop"

    def usage(n_chunks: int) -> dict:
        """The thinker's counts; a thinker that does not count: the chunks only."""
        if "input_tokens" not in end:
            return {"prompt_tokens": None, "completion_tokens": n_chunks, "total_tokens": None}
        return {"prompt_tokens": end["input_tokens"], "completion_tokens": end["output_tokens"],
                "total_tokens": end["input_tokens"] + end["output_tokens"],
                "prompt_tokens_details": {"cached_tokens": end["cached_tokens"]}}

    def note(e: dict) -> dict | None:
        """One think event: the usage kept, a call's piece returned."""
        if e.get("type") == USAGE:
            end.update(e)
            return None
        return calls.add(e)

    if not stream:
        parts: list[str] = []
        n = 0
        ev = first
        try:
            while ev.kind == "chunk":
                n += 1
                for e in think_events(ev.payload):
                    if isinstance(e, str):
                        parts.append(e)
                    else:
                        note(e)
                ev = await first_event(request, turn)
        except BaseException:
            turn.abort("client_disconnected")
            raise
        if ev.kind != "done":
            raise runtime_error(ev)
        message: dict = {"role": "assistant", "content": "".join(parts) or (None if calls.done else "")}
        if calls.done:
            message["tool_calls"] = calls.done
        return JSONResponse({
            "id": cid, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": finish_reason(n), "logprobs": None}],
            "usage": usage(n),
        }, headers=headers)

    def chunk(delta: dict, finish: str | None = None) -> bytes:
        return sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]})

    async def body() -> AsyncIterator[bytes]:
        ev = first
        n = 0
        try:
            yield chunk({"role": "assistant", "content": ""})
            while True:
                if ev.kind == "chunk":
                    n += 1
                    for e in think_events(ev.payload):
                        if isinstance(e, str):
                            yield chunk({"content": e})
                        elif (piece := note(e)) is not None:
                            yield chunk({"tool_calls": [piece]})
                elif ev.kind == "done":
                    yield chunk({}, finish_reason(n))
                    if include_usage:
                        yield sse({"id": cid, "object": "chat.completion.chunk", "created": created,
                                   "model": model, "choices": [], "usage": usage(n)})
                    yield SSE_DONE
                    return
                else:
                    body_ = error_body(ev.error) if ev.error is not None else cancelled_body(ev.reason)
                    yield sse(body_, event="error")
                    yield SSE_DONE
                    return
                ev = await turn.next()
        finally:
            turn.abort("stream_closed")

    return PipelineStream(body(), lambda: turn.abort("client_disconnected"), headers=headers,
                          media_type="text/event-stream")


class _Calls:
    """The tool calls of one chat completion, from the think stage's call events."""

    def __init__(self) -> None:
        self.started: set[int] = set()
        self.done: list[dict] = []

    def add(self, ev: dict) -> dict | None:
        """Record one event; the streamed ``delta.tool_calls`` item it makes, if any."""
        i = ev.get("index", 0)
        if ev.get("type") == TOOL_CALL_DONE:
            self.done.append({"id": ev["call_id"], "type": "function",
                              "function": {"name": ev["name"], "arguments": ev["arguments"]}})
            return None
        if ev.get("type") != TOOL_CALL_DELTA:
            return None
        if i not in self.started:
            self.started.add(i)
            return {"index": i, "id": ev.get("call_id"), "type": "function",
                    "function": {"name": ev.get("name"), "arguments": ev.get("arguments", "")}}
        return {"index": i, "function": {"arguments": ev.get("arguments", "")}} if ev.get("arguments") else None


__all__ = ["chat_completions", "ROLE_MAP"]
