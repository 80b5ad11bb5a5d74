"""How a streamed answer leaves the server: SSE framing and a response that
hears the client go away.

Every streaming endpoint waits for the runtime's first event before it sends
the status line (:mod:`.turn`), so what is here only runs after the first
byte, where the rules are (docs/CONCEPTS.md, "Errors"):

* SSE streams carry an ``event: error`` with the body of :mod:`.errors` and
  then the terminal ``data: [DONE]``.  A client can always tell completed
  (``[DONE]`` / ``speech.audio.done`` without an error) from failed.
* Raw audio (``stream_format: "audio"``) has no in-band channel.  A failure
  raises :class:`StreamAborted` inside the body: the terminating zero-length
  chunk is never sent and the connection is closed, which HTTP clients report
  as an incomplete body (never a silently short file).  Clients that want the
  reason should ask for ``stream_format: "sse"``.
* A client that disconnects aborts its runtime request: a disconnect listener
  runs beside every stream (:class:`PipelineStream`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Callable

from starlette.responses import Response


def sse(data: Any, event: str | None = None) -> bytes:
    """One SSE message: ``data`` (a string as is, else compact JSON), named ``event`` if given."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


SSE_DONE = b"data: [DONE]\n\n"


class StreamAborted(RuntimeError):
    """Raised inside a raw byte stream after its first byte: the body must not end cleanly."""


class PipelineStream(Response):
    """A streaming response that always listens for the client going away.

    Starlette's StreamingResponse only notices a disconnect on ASGI < 2.4 or
    at the next send; a voice turn can sit between chunks for a while and its
    runtime request must be aborted at once, so the listener runs beside the
    stream whatever the server's ASGI version.
    """

    def __init__(self, body: AsyncIterator[bytes], on_disconnect: Callable[[], None],
                 status_code: int = 200, headers: dict | None = None, media_type: str | None = None) -> None:
        self.body_iterator = body
        self.on_disconnect = on_disconnect
        self.status_code = status_code
        self.media_type = media_type
        self.background = None
        self.init_headers(headers)

    async def __call__(self, scope, receive, send) -> None:
        async def stream() -> None:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def listen() -> None:
            while True:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    return

        st = asyncio.ensure_future(stream())
        ls = asyncio.ensure_future(listen())
        try:
            done, _ = await asyncio.wait({st, ls}, return_when=asyncio.FIRST_COMPLETED)
            if st not in done:
                self.on_disconnect()            # first: the stream's own cleanup must not win the race
                st.cancel()
                try:
                    await st
                except (asyncio.CancelledError, Exception):  # noqa: BLE001
                    pass
                return
            exc = st.exception()
            if isinstance(exc, OSError):       # the send failed: the client went away
                self.on_disconnect()
                return
            if exc is not None:
                raise exc
        finally:
            ls.cancel()
            if not st.done():
                st.cancel()
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except Exception:  # noqa: BLE001
                    pass


__all__ = ["sse", "SSE_DONE", "StreamAborted", "PipelineStream"]
