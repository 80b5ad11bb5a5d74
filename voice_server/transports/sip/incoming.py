"""The incoming-call hook: what an operator's code sees of a call that rings,
and what it decides.

The endpoint answers 100 Trying and 180 Ringing, then awaits
``on_incoming(call)`` (at most ``sip.answer_timeout_s``; past it: 480) and
answers what it returns:

* :class:`Accept` - 200 OK; ``session`` (a Realtime ``session`` object:
  instructions, voice, tools...) is applied as a ``session.update`` on top of
  the server's session defaults;
* :class:`Reject` - that final status (403, 486, 603...).

The default, :func:`accept_with_headers`, accepts every call with the
server's defaults and the per-call settings a PBX put in the INVITE's
``X-Voice-Agent-Instructions``, ``X-Voice-Agent-Voice`` and
``X-Voice-Agent-Max-Output-Tokens`` headers.  An OpenAI-style call-control
API (webhook, accept / reject) plugs in here: it holds the call at ringing
until its accept or reject arrives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Awaitable, Callable, Optional, Union


@dataclass(frozen=True)
class IncomingCall:
    """A ringing call, as the hook sees it."""
    call_id: str  # the server's id for the call (``sip_...``); the SIP Call-ID is below
    sip_call_id: str
    from_uri: str
    to_uri: str
    source: tuple[str, int]  # the address the INVITE came from
    transport: str  # udp | tcp | tls
    headers: tuple[dict, ...]  # every INVITE header, in order: {"name", "value"}

    def header(self, name: str) -> Optional[str]:
        """The first value of header ``name`` (case-insensitive), or None."""
        low = name.lower()
        return next((h["value"] for h in self.headers if h["name"].lower() == low), None)


@dataclass(frozen=True)
class Accept:
    """Answer the call; ``session`` goes to the session as a ``session.update``."""
    session: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Reject:
    """Refuse the call with a final status (4xx, 5xx or 6xx)."""
    status: int = 603
    reason: str = ""


Decision = Union[Accept, Reject]
IncomingHook = Callable[[IncomingCall], Awaitable[Decision]]

HEADER_PREFIX = "x-voice-agent-"
HEADER_KEYS = {"instructions": "instructions", "voice": "voice",
               "max-output-tokens": "max_output_tokens"}


def session_from_headers(call: IncomingCall) -> dict:
    """The ``session`` settings the INVITE's ``X-Voice-Agent-*`` headers carry."""
    out: dict = {}
    for h in call.headers:
        key = HEADER_KEYS.get(h["name"].lower().removeprefix(HEADER_PREFIX)) \
            if h["name"].lower().startswith(HEADER_PREFIX) else None
        if key is None:
            continue
        value = h["value"].strip()
        out[key] = int(value) if key == "max_output_tokens" and value.isdigit() else value
    return out


async def accept_with_headers(call: IncomingCall) -> Decision:
    """The default hook (module docstring)."""
    return Accept(session_from_headers(call))


__all__ = ["IncomingCall", "Accept", "Reject", "Decision", "IncomingHook",
           "accept_with_headers", "session_from_headers"]
