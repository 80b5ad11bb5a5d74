"""The command line and the report the client scripts share (stdlib only: it
runs in the clients' virtualenv, beside pipecat_client.py and livekit_client.py).

The report is one JSON object on stdout, ``{"log": [[kind, ...], ...],
"failure": null | "what did not happen"}``; the test judges it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Coroutine


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
    return ap


def report(run: Coroutine, log: list[list],
           failures: tuple[type[BaseException], ...] = ()) -> int:
    """Run the client; print what it saw and, if it did not get through, why."""
    failure = None
    try:
        asyncio.run(run)
    except TimeoutError as e:
        failure = f"timed out waiting for: {e or 'a step'}"
    except failures as e:
        failure = f"{type(e).__name__}: {e}"
    print(json.dumps({"log": log, "failure": failure}))
    return 0 if failure is None else 1
