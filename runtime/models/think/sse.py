"""Server-sent events, as OpenAI-compatible servers stream chat completions.

Parsed by hand because the format is tiny, and a client library would bring
its own retry and connection policy where we need ours (abort = close).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator


@dataclass
class SSEEvent:
    event: str
    data: str


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[SSEEvent]:
    """Group ``data:`` lines into events; a blank line ends an event (per the SSE spec)."""
    event, data = "message", []
    async for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield SSEEvent(event, "\n".join(data))
            event, data = "message", []
            continue
        if line.startswith(":"):
            continue  # comment / keep-alive
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
        elif field == "event":
            event = value
    if data:
        yield SSEEvent(event, "\n".join(data))
