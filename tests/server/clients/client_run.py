"""What the client scripts share: their command line, a microphone, a bounded
wait and the report (stdlib only: it runs in the clients' virtualenv, beside
pipecat_client.py and livekit_client.py).

The report is one JSON object on stdout, ``{"log": [[kind, ...], ...],
"failure": null | "what did not happen"}``; the test judges it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable, Coroutine
from typing import TypeVar

RATE = 24000
FRAME_BYTES = RATE * 20 // 1000 * 2  # 20 ms of int16 mono
T = TypeVar("T")


def arguments(url_help: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True, help=url_help)
    ap.add_argument("--key", required=True)
    ap.add_argument("--say", default="Hi.", help="the text turn")
    ap.add_argument("--tool", default="get_weather")
    ap.add_argument("--result", default="Sunny, 23 degrees.", help="what the function returns")
    ap.add_argument("--instructions",
                    default="You are a voice assistant. Repeat the tool result to the user.")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds for each step")
    ap.add_argument("--speech", required=True, help="int16 mono 24 kHz PCM file: the spoken turn")
    return ap


async def microphone(send: Callable[[bytes], Awaitable[None]], pcm: bytes) -> None:
    """20 ms frames at the pace of real time: the speech, then silence until
    cancelled, as a live microphone keeps sending while the agent answers."""
    while True:
        for i in range(0, len(pcm), FRAME_BYTES):
            await send(pcm[i:i + FRAME_BYTES])
            await asyncio.sleep(0.02)
        pcm = bytes(FRAME_BYTES * 10)


async def within(aw: Awaitable[T], what: str, timeout: float) -> T:
    """``aw``, or a TimeoutError that says what did not happen."""
    try:
        return await asyncio.wait_for(aw, timeout)
    except asyncio.TimeoutError:
        raise TimeoutError(what) from None


def report(run: Coroutine, log: list[list],
           failures: tuple[type[BaseException], ...] = ()) -> int:
    """Run the client; print what it saw and, if it did not get through, why."""
    failure = None
    try:
        asyncio.run(run)
    except TimeoutError as e:
        failure = f"timed out waiting for: {e}"
    except failures as e:
        failure = f"{type(e).__name__}: {e}"
    print(json.dumps({"log": log, "failure": failure}))
    return 0 if failure is None else 1
