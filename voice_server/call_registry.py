"""The calls that the OpenAI-shaped SIP control plane acts on: a registry of
pending and live calls, and the protocol a call transport (the SIP endpoint)
gives each of them.

How a transport plugs in::

    registry = app.state.sip_calls              # one CallRegistry per app
    call = MySipCall(call_id, sip_headers)      # implements RegisteredCall below
    registry.incoming(call)                     # the call rings: webhook or auto-accept
    ...                                         # later, on the call's own end:
    registry.remove(call.call_id)

* :meth:`CallRegistry.incoming` registers the call.  With a webhook
  configured (``sip_webhook_url``) it posts a signed
  ``realtime.call.incoming`` event (:mod:`voice_server.call_webhook`) and
  the operator answers over HTTP (:mod:`voice_server.transports.sip_calls_api`);
  a call not accepted within ``sip_accept_timeout_s`` is rejected (480).
  Without a webhook the call is accepted at once with ``{}``: the server's
  session defaults (the transport adds what its SIP headers say).
* ``accept(session_config)`` gets the body of ``POST .../accept``: a
  Realtime session object (``{"type": "realtime", "instructions": ...}``),
  already checked by the API layer; the transport answers the call (200 OK),
  makes its session with that config applied like a first
  ``session.update``, and sets ``runner`` and ``call_control`` (the call is
  then live).  It raises :class:`CallGone` when the call ended meanwhile.
* ``reject(status_code)``: a final SIP response (400-699) to the INVITE.
* Live: ``runner`` is the call's :class:`~voice_server.runner.SessionRunner`
  (the sideband ``WS /v1/realtime?call_id=`` attaches to it) and
  ``call_control`` its :class:`~voice_server.call_control.CallControl`
  (``/refer`` -> ``transfer``, ``/hangup`` -> ``hang_up``).

Every method runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from enum import Enum
from typing import Any, Awaitable, Callable, Optional, Protocol, runtime_checkable

from .call_control import CallControl

log = logging.getLogger("voice_server.call_registry")

DEFAULT_REJECT_STATUS = 603   # Decline, as OpenAI's reject defaults to
TIMEOUT_REJECT_STATUS = 480   # Temporarily Unavailable: nobody accepted in time


class CallState(Enum):
    PENDING = "pending"   # ringing: accept or reject
    LIVE = "live"         # accepted: runner and call_control are set
    ENDED = "ended"


class CallGone(Exception):
    """The call ended (caller hung up, CANCEL) before the action reached it."""


@runtime_checkable
class RegisteredCall(Protocol):
    """One SIP call as the control plane sees it (module docstring)."""

    call_id: str
    sip_headers: list[tuple[str, str]]   # the INVITE's headers, in order, no auth headers
    state: CallState
    runner: Any                          # SessionRunner once live, else None
    call_control: Optional[CallControl]  # once live, else None

    async def accept(self, session_config: dict) -> None:
        ...

    async def reject(self, status_code: int) -> None:
        ...


Notify = Callable[[RegisteredCall], Awaitable[None]]


class CallRegistry:
    """Pending and live calls by ``call_id`` (module docstring).  ``notify``:
    posts the incoming-call webhook (None: calls are accepted at once)."""

    def __init__(self, notify: Optional[Notify] = None, accept_timeout_s: float = 30.0) -> None:
        self.calls: dict[str, RegisteredCall] = {}
        self.notify = notify
        self.accept_timeout_s = accept_timeout_s
        self._tasks: set[asyncio.Task] = set()

    def get(self, call_id: str) -> Optional[RegisteredCall]:
        return self.calls.get(call_id)

    def remove(self, call_id: str) -> None:
        """The transport's call ended (whatever ended it)."""
        self.calls.pop(call_id, None)

    def incoming(self, call: RegisteredCall) -> None:
        """A new call rings: the operator is told, or it is answered with the defaults."""
        self.calls[call.call_id] = call
        if self.notify is None:
            self._spawn(self._accept_defaults(call))
        else:
            self._spawn(self._announce(call))

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # ------------------------------------------------------------ internals
    def _spawn(self, coro) -> None:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _accept_defaults(self, call: RegisteredCall) -> None:
        try:
            await call.accept({})
        except CallGone:
            self.remove(call.call_id)
        except Exception as exc:  # noqa: BLE001 - the call fails, the server goes on
            log.warning("call %s: accept with the defaults failed: %r", call.call_id, exc)
            with contextlib.suppress(Exception):
                await call.reject(500)
            self.remove(call.call_id)

    async def _announce(self, call: RegisteredCall) -> None:
        try:
            await self.notify(call)
        except Exception as exc:  # noqa: BLE001 - an unreachable webhook: the timeout rejects
            log.warning("call %s: incoming-call webhook failed: %r", call.call_id, exc)
        await asyncio.sleep(self.accept_timeout_s)
        if call.state is CallState.PENDING and self.calls.get(call.call_id) is call:
            log.info("call %s: not accepted within %.0f s; rejected", call.call_id,
                     self.accept_timeout_s)
            with contextlib.suppress(Exception):
                await call.reject(TIMEOUT_REJECT_STATUS)
            self.remove(call.call_id)


__all__ = ["CallRegistry", "RegisteredCall", "CallState", "CallGone",
           "DEFAULT_REJECT_STATUS", "TIMEOUT_REJECT_STATUS"]
