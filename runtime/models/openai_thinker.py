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
from runtime.models.async_stream_thinker import AsyncStreamThinker, code_for_status
from runtime.models.thinker_request import ThinkerRequest
from runtime.models.sse import sse_events


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
    seed, max_prompt_chars).
    """

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        self.base_url = str(args.get("base_url", "http://127.0.0.1:8080/v1")).rstrip("/")
        self.model = args.get("model", "default")
        self.api_key = args.get("api_key")
        self.extra_body = dict(args.get("extra_body") or {})
        self.penalty_field = args.get("penalty_field", "repetition_penalty")
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
        body.update(self.extra_body)
        return body

    async def _generate(self, request_id: int, req: ThinkerRequest) -> AsyncIterator[str]:
        httpx = self._httpx
        try:
            async with self._client.stream("POST", "/chat/completions", json=self._body(req)) as resp:
                if resp.status_code >= 400:
                    body = (await resp.aread()).decode("utf-8", "replace")
                    raise status_code_error(resp.status_code, body)
                async for ev in sse_events(resp.aiter_lines()):
                    if ev.data.strip() == "[DONE]":
                        return
                    delta, finished = self._parse_chunk(ev.data)
                    if delta:
                        yield delta
                    if finished:
                        return
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

    @staticmethod
    def _parse_chunk(data: str) -> tuple[str | None, bool]:
        """One event's text delta and whether the stream is finished.

        An ``error`` event carries the server's HTTP status in ``code`` (SGLang,
        vLLM): that status picks the error code.  ``finish_reason: "abort"``
        means the server gave up on the request (SGLang on an abort without an
        error status): the reply is incomplete, so it is ``cancelled``, never a
        normal completion.
        """
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
        choices = obj.get("choices") or []
        if not choices:
            return None, False
        ch = choices[0]
        delta = (ch.get("delta") or {}).get("content")
        if delta is None and "text" in ch:  # completions-style servers
            delta = ch.get("text")
        reason = ch.get("finish_reason")
        if reason == "abort":
            raise StageError(ErrorCode.CANCELLED, "chat server aborted the request before it finished")
        return delta, reason is not None
