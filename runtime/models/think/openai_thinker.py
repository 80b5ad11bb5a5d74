"""Thinker backed by any OpenAI-compatible ``/v1/chat/completions`` server.

Lets the voice pipeline use a model served elsewhere (vLLM, llama.cpp server,
SGLang server, a hosted API) with the same payload and error codes as the
in-process thinkers.  Aborting a request closes its HTTP stream, which is how
these servers learn that the user barged in.
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator

from runtime.errors import ErrorCode, StageError
from runtime.models.think.async_stream_thinker import AsyncStreamThinker, code_for_status
from runtime.models.think.thinker_request import ThinkerRequest
from runtime.models.think.sse import sse_events
from runtime.models.think.tool_call_format import new_call_id
from runtime.models.voice_contract import (LENGTH, STOP, ThinkEvent, Usage, tool_call_delta_event,
                                           tool_call_done_event, usage_event)


def status_code_error(status: int, body: str) -> StageError:
    """HTTP status -> the closed error set (retryable overload vs caller's fault)."""
    return StageError(code_for_status(status), f"HTTP {status} from chat server: {body[:300]}".strip())


class OpenAICompatThinker(AsyncStreamThinker):
    """Args: base_url (e.g. http://127.0.0.1:8080/v1), api_key, model, timeout_s
    (read timeout, 30), connect_timeout_s (5), penalty_field (the body field
    that carries repeat_penalty: "repetition_penalty" for SGLang and vLLM
    servers, the default, so that both SGLang paths sample alike;
    "repeat_penalty" for llama.cpp servers; null for APIs that refuse unknown
    fields), extra_body (dict merged into each request last), plus the common
    thinker args (system_prompt, max_tokens, temperature, top_p, repeat_penalty,
    seed, max_prompt_chars), stream_tool_calls (True; false asks for the
    whole reply at once when the request offers tools, for servers that cannot
    stream a call they chose themselves: llama-cpp-python's
    ``chatml-function-calling`` with tool_choice auto).
    """

    supports_tools = True
    engine_name = "OpenAI-compatible"

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        self.base_url = str(args.get("base_url", "http://127.0.0.1:8080/v1")).rstrip("/")
        self.model = args.get("model", "default")
        self.api_key = args.get("api_key")
        self.extra_body = dict(args.get("extra_body") or {})
        self.penalty_field = args.get("penalty_field", "repetition_penalty")
        self.stream_tool_calls = bool(args.get("stream_tool_calls", True))
        self._client = None

    async def _start(self) -> None:
        try:
            import httpx
        except ImportError:
            raise StageError(ErrorCode.STAGE_UNAVAILABLE,
                             "httpx is not installed: pip install httpx") from None
        self._httpx = httpx
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        timeout = httpx.Timeout(float(self.args.get("timeout_s", 30.0)),
                                connect=float(self.args.get("connect_timeout_s", 5.0)))
        self._client = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout)

    async def _stop(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    def _body(self, req: ThinkerRequest) -> dict:
        s = req.sampling
        body = {"model": self.model, "messages": req.messages, "stream": True,
                "max_tokens": s.max_tokens, "temperature": s.temperature, "top_p": s.top_p}
        if self.penalty_field:
            body[self.penalty_field] = s.repeat_penalty
        if s.seed is not None:
            body["seed"] = s.seed
        if req.tools.tools:
            body["tools"] = [t.spec() for t in req.tools.tools]
            body["tool_choice"] = req.tools.choice.spec()
            if not req.parallel_tool_calls:
                body["parallel_tool_calls"] = False
            if not self.stream_tool_calls:
                body["stream"] = False
        if req.include_usage and body["stream"]:
            # the token counts come in one more chunk after the last one (a
            # server that does not know the option ignores it and sends none)
            body["stream_options"] = {"include_usage": True}
        body.update(self.extra_body)
        return body

    async def _generate(self, request_id: int, req: ThinkerRequest) -> AsyncIterator[ThinkEvent]:
        httpx = self._httpx
        body = self._body(req)
        calls = ToolCallAssembler()
        try:
            async with self._client.stream("POST", "/chat/completions", json=body) as resp:
                if resp.status_code >= 400:
                    text = (await resp.aread()).decode("utf-8", "replace")
                    raise status_code_error(resp.status_code, text)
                if not body["stream"]:
                    for ev in self._whole_reply((await resp.aread()).decode("utf-8", "replace"),
                                                calls, req.include_usage):
                        yield ev
                    return
                usage, finished, cut = None, False, False
                async for ev in sse_events(resp.aiter_lines()):
                    if ev.data.strip() == "[DONE]":
                        break
                    obj = self._decoded(ev.data)
                    delta, pieces, ended = self._read_event(obj, ev.data)
                    if delta:
                        yield delta
                    for piece in pieces:
                        for out in calls.add(piece):
                            yield out
                    usage = self._usage(obj) or usage
                    finished = finished or ended
                    cut = cut or self._cut_by_length(obj)
                    if finished and (usage is not None or "stream_options" not in body):
                        break
            for out in calls.finish():
                yield out
            if usage is not None:
                yield {**usage, "finish_reason": LENGTH if cut else STOP}
        except StageError:
            raise
        except httpx.TimeoutException as e:
            raise StageError(ErrorCode.TIMEOUT, f"chat server {self.base_url} timed out: {e!r}") from None
        except httpx.ConnectError as e:
            raise StageError(ErrorCode.STAGE_UNAVAILABLE,
                             f"chat server {self.base_url} unreachable: {e}") from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
            raise StageError(ErrorCode.STAGE_UNAVAILABLE,
                             f"chat server {self.base_url} dropped the stream: {e!r}") from None

    def _whole_reply(self, data: str, calls: "ToolCallAssembler",
                     include_usage: bool = False) -> list[ThinkEvent]:
        """A non-streamed completion as the events a stream would have carried."""
        try:
            obj = json.loads(data)
            msg = obj["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise StageError(ErrorCode.INTERNAL, f"chat server sent no completion: {data[:200]!r}") from None
        out: list[ThinkEvent] = [msg["content"]] if msg.get("content") else []
        for i, call in enumerate(msg.get("tool_calls") or []):
            out.extend(calls.add({**call, "index": call.get("index", i)}))
        usage = self._usage(obj) if include_usage else None
        if usage is not None:
            usage["finish_reason"] = LENGTH if self._cut_by_length(obj) else STOP
        return out + calls.finish() + ([usage] if usage is not None else [])

    @staticmethod
    def _cut_by_length(obj: dict) -> bool:
        """The server's ``finish_reason`` is ``length``: max_tokens (or the
        context) cut the reply."""
        choices = obj.get("choices")
        return bool(choices) and isinstance(choices[0], dict) and choices[0].get("finish_reason") == LENGTH

    def _usage(self, obj: dict) -> Usage | None:
        """The server's ``usage`` object as the contract's usage event (and the
        stage's stats); None where the chunk has none."""
        u = obj.get("usage")
        if not isinstance(u, dict) or not isinstance(u.get("prompt_tokens"), int):
            return None
        details = u.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        completion = u.get("completion_tokens")
        completion = completion if isinstance(completion, int) else 0
        self._note_usage(u["prompt_tokens"], completion)
        return usage_event(u["prompt_tokens"], cached if isinstance(cached, int) else 0, completion)

    @classmethod
    def _parse_chunk(cls, data: str) -> tuple[str | None, bool]:
        """One event's text delta and whether the stream is finished."""
        delta, _, finished = cls._parse_event(data)
        return delta, finished

    @classmethod
    def _parse_event(cls, data: str) -> tuple[str | None, list[dict], bool]:
        """One event's text delta, tool-call pieces and whether the stream is finished."""
        return cls._read_event(cls._decoded(data), data)

    @staticmethod
    def _decoded(data: str) -> dict:
        """One event's JSON object.  An ``error`` event raises: it carries the
        server's HTTP status in ``code`` (SGLang, vLLM), and that status picks
        the error code."""
        try:
            obj = json.loads(data)
        except json.JSONDecodeError:
            raise StageError(ErrorCode.INTERNAL, f"chat server sent non-JSON event: {data[:200]!r}") from None
        if not isinstance(obj, dict):
            raise StageError(ErrorCode.INTERNAL, f"chat server sent a non-object event: {data[:200]!r}")
        if "error" in obj:
            err = obj["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            status = err.get("code") if isinstance(err, dict) else None
            if isinstance(status, str) and status.isdigit():
                status = int(status)
            code = code_for_status(status) if isinstance(status, int) else ErrorCode.INTERNAL
            raise StageError(code, f"chat server error{f' {status}' if status else ''}: {msg}")
        return obj

    @staticmethod
    def _read_event(obj: dict, data: str) -> tuple[str | None, list[dict], bool]:
        """A decoded event's text delta, tool-call pieces and whether the reply is
        finished (``data``, the raw event, for error messages).
        ``finish_reason: "abort"`` means the server gave up on the request
        (SGLang on an abort without an error status): the reply is incomplete,
        so it is ``cancelled``, never a normal completion."""
        choices = obj.get("choices") or []
        if not choices:
            return None, [], False
        ch = choices[0]
        d = ch.get("delta") or {}
        delta = d.get("content")
        if delta is None and "text" in ch:  # completions-style servers
            delta = ch.get("text")
        pieces = d.get("tool_calls") or []
        if not isinstance(pieces, list) or not all(isinstance(p, dict) for p in pieces):
            raise StageError(ErrorCode.INTERNAL, f"chat server sent malformed tool_calls: {data[:200]!r}")
        reason = ch.get("finish_reason")
        if reason == "abort":
            raise StageError(ErrorCode.CANCELLED, "chat server aborted the request before it finished")
        return delta, pieces, reason is not None


class ToolCallAssembler:
    """Streamed ``tool_calls`` pieces -> contract events.

    OpenAI-style servers send a call's id and name with its first piece and
    then argument text under the same ``index``; a server that repeats the
    name or id on every piece (llama-cpp-python) is read the same way.  Calls
    come one after another, so a new index completes the previous call.
    """

    def __init__(self) -> None:
        self._calls: dict[int, dict] = {}
        self._open: int | None = None
        self._index_of: dict[int, int] = {}  # the server's index -> ours (0, 1, ... in order)

    def add(self, piece: dict) -> list[ThinkEvent]:
        out: list[ThinkEvent] = []
        server_index = piece.get("index", 0)
        fn = piece.get("function") or {}
        args = fn.get("arguments") or ""
        if server_index not in self._index_of:
            out.extend(self._close())
            index = self._index_of[server_index] = len(self._index_of)
            name = fn.get("name")
            if not isinstance(name, str) or not name:
                raise StageError(ErrorCode.INTERNAL, "chat server started a tool call without a name")
            call = self._calls[index] = {"call_id": piece.get("id") or new_call_id(), "name": name,
                                         "arguments": args}
            self._open = index
            out.append(tool_call_delta_event(index, args, call["call_id"], name))
            return out
        index = self._index_of[server_index]
        if index != self._open:
            raise StageError(ErrorCode.INTERNAL, f"chat server went back to tool call {server_index}")
        if args:
            self._calls[index]["arguments"] += args
            out.append(tool_call_delta_event(index, args))
        return out

    def _close(self) -> list[ThinkEvent]:
        if self._open is None:
            return []
        c, index = self._calls[self._open], self._open
        self._open = None
        return [tool_call_done_event(index, c["call_id"], c["name"], c["arguments"] or "{}")]

    def finish(self) -> list[ThinkEvent]:
        """The stream ended: the call still open is complete."""
        return self._close()
