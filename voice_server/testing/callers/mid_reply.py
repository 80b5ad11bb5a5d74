"""One short call that ends a long spoken reply the way a caller does: talking
over it, ``response.cancel``, hanging up with a close frame or vanishing (TCP
reset) - or a plain spoken turn.

Why: plain sessions (connect, a text turn, close) take the server's cleanest
path; the soak's callers (benchmarks/soak.py) leave through every other one,
each with requests in flight in every stage.  benchmarks/session_churn.py
(``--actions``) and tests/server/test_session_churn_actions.py open many of
these to see what such calls leave behind.
"""

from __future__ import annotations

import asyncio
import contextlib

from .caller import Sess

ACTIONS = ("turn", "barge", "cancel", "close", "reset")


async def long_reply(s: Sess, speech: dict, tokens: int) -> tuple[str, int]:
    """Ask for the story and wait for its first audio: (response id, event mark)."""
    await s.set_tokens(tokens)
    n = s.mark()
    s.c.say(speech["story"])
    first = await s.first_audio(n, 60)
    return first["response_id"], n


async def mid_reply_call(url: str, key: str | None, speech: dict, action: str, *,
                         tokens: int = 64, pause_s: float = 0.3, timeout: float = 60.0) -> str:
    """Open a session, do ``action`` (one of :data:`ACTIONS`) and leave; returns
    the session id.  ``turn``: one spoken question, its reply heard out."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}: one of {ACTIONS}")
    s = Sess(url, speech, f"mid-{action}", key)
    graceful = True
    try:
        await asyncio.wait_for(s.open(24), timeout)
        if action == "turn":
            await s.turn(speech["q"][0], timeout)
        else:
            rid, n = await long_reply(s, speech, tokens)
            await asyncio.sleep(pause_s)
            if action == "barge":
                s.c.say(speech["interrupt"])
                await s.done_of(rid, n, timeout)
                # the interruption is a turn of its own: heard out before leaving
                await s.c.wait(lambda e: e["type"] == "response.done"
                               and e["response"]["id"] != rid, n, timeout)
            elif action == "cancel":
                await s.t.send_event({"type": "response.cancel"})
                await s.done_of(rid, n, timeout)
            elif action == "reset":
                s.reset()
                graceful = False
            # "close": the close frame goes while the reply still streams
        return s.sid
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(s.close(graceful=graceful), 30)


__all__ = ["ACTIONS", "long_reply", "mid_reply_call"]
