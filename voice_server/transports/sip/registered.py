"""A SIP call as the OpenAI-shaped control plane sees it: the bridge between the
SIP endpoint's incoming-call hook (:mod:`.incoming`) and the server's call
registry (:mod:`voice_server.call_registry`).

Every call that rings goes through the registry, webhook or not, so that
``/v1/realtime/calls/{call_id}/refer`` and ``/hangup`` and the sideband
``WS /v1/realtime?call_id=`` work on every SIP call:

* the hook registers a :class:`RegisteredSipCall` and waits for its
  decision; the registry accepts it at once with ``{}`` (no webhook), or
  the operator's ``POST .../accept`` or ``.../reject`` decides (a webhook),
  or nobody does and the registry rejects it (480);
* ``accept(config)`` answers with the INVITE's ``X-Voice-Agent-*`` settings
  under the operator's ``config``, and returns once the call is live (its
  runner started), so that an operator who accepts and at once attaches the
  sideband finds the session;
* once live, ``runner`` and ``call_control`` are the SIP call's; when the
  call ends the endpoint tells the registry (:func:`registry_hook`'s
  ``forget``), which then holds nothing of it.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Optional

from ...call_control import CallControl
from ...call_registry import CallGone, CallRegistry, CallState
from .incoming import Accept, Decision, IncomingCall, IncomingHook, Reject, session_from_headers

LIVE_WAIT_S = 10.0  # accept() waits this long at most for the answered call's runner
# never shown to the operator: credentials
HIDDEN_HEADERS = frozenset({"authorization", "proxy-authorization"})


class RegisteredSipCall:
    """One ringing (then live) SIP call in the registry (module docstring);
    ``lookup(call_id)`` finds the endpoint's answered call."""

    def __init__(self, info: IncomingCall, lookup: Callable[[str], object]) -> None:
        self.info = info
        self.call_id = info.call_id
        self.sip_headers = [(h["name"], h["value"]) for h in info.headers
                            if h["name"].lower() not in HIDDEN_HEADERS]
        self.state = CallState.PENDING
        self.decision: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        self._lookup = lookup

    @property
    def _call(self):
        return self._lookup(self.call_id)

    @property
    def runner(self):
        call = self._call
        return getattr(call, "runner", None) if self.state is CallState.LIVE else None

    @property
    def call_control(self) -> Optional[CallControl]:
        call = self._call
        return getattr(call, "control", None) if self.state is CallState.LIVE else None

    async def accept(self, session_config: dict) -> None:
        if self.state is not CallState.PENDING or self.decision.done():
            raise CallGone()
        self.decision.set_result(Accept({**session_from_headers(self.info), **session_config}))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LIVE_WAIT_S
        while loop.time() < deadline:
            call = self._call
            if call is not None and getattr(call, "runner", None) is not None \
                    and not call.finished:
                self.state = CallState.LIVE
                return
            if self.state is CallState.ENDED:
                break
            await asyncio.sleep(0.02)
        self.state = CallState.ENDED
        raise CallGone()

    async def reject(self, status_code: int) -> None:
        if self.state is not CallState.PENDING or self.decision.done():
            raise CallGone()
        self.state = CallState.ENDED
        self.decision.set_result(Reject(status_code))

    def ended(self) -> None:
        """The SIP call is over (or never rang to an answer)."""
        self.state = CallState.ENDED
        if not self.decision.done():
            self.decision.cancel()


def registry_hook(registry: CallRegistry, lookup: Callable[[str], object]
                  ) -> tuple[IncomingHook, Callable[[str], None]]:
    """The endpoint's ``on_incoming`` hook that puts every call through
    ``registry``, and the ``forget(call_id)`` the endpoint calls when a call ends."""
    async def on_incoming(info: IncomingCall) -> Decision:
        call = RegisteredSipCall(info, lookup)
        registry.incoming(call)
        try:
            decision = await asyncio.shield(call.decision)
        except BaseException:
            forget(info.call_id)   # a CANCEL, or the endpoint's own answer timeout
            raise
        if isinstance(decision, Reject):
            registry.remove(info.call_id)
        return decision

    def forget(call_id: str) -> None:
        call = registry.get(call_id)
        if isinstance(call, RegisteredSipCall):
            call.ended()
        registry.remove(call_id)
    return on_incoming, forget


__all__ = ["RegisteredSipCall", "registry_hook"]
