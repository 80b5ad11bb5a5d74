"""What a live phone call can do besides carrying audio.

The agent's call actions (end the call, transfer the caller, send DTMF) are
function calls the server executes itself, and the operator's call-control
API (accept, reject, refer, hang up a SIP call) acts on calls from outside the
session.  Neither knows which transport carries the call: each transport that
can act on its calls hands its runner a :class:`CallControl`, which says what
this call supports and does it.  A transport that cannot do an action leaves
it out of :meth:`CallControl.actions`; the session then never offers it to
the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

# The names a transport's ``actions()`` may hold.
END_CALL = "end_call"
TRANSFER = "transfer"
SEND_DTMF = "send_dtmf"
ACTIONS = frozenset({END_CALL, TRANSFER, SEND_DTMF})


@dataclass(frozen=True)
class TransferOutcome:
    """How a transfer ended, as the model and the call record are told.

    ``status``: ``completed`` (the target answered; the caller is theirs now),
    ``failed`` (refused, busy, not answered, or the line rejected the REFER;
    the call goes on with the agent) or ``unsupported``.  ``sip_status`` is the
    final SIP status the transfer reported, where there was one."""

    status: str
    sip_status: int | None = None
    detail: str = ""


@runtime_checkable
class CallControl(Protocol):
    """One live call's actions.  Every method may be called from the session's
    event loop; none blocks it."""

    def actions(self) -> frozenset[str]:
        """The actions this call can take now (a subset of :data:`ACTIONS`)."""
        ...

    async def hang_up(self, reason: str) -> None:
        """End the call at once (the caller of this waited for the goodbye to be heard)."""
        ...

    async def transfer(self, target_uri: str) -> TransferOutcome:
        """Hand the caller to ``target_uri`` (``sip:`` or ``tel:``) and wait for the outcome."""
        ...

    async def send_dtmf(self, digits: str) -> bool:
        """Send ``digits`` (0-9, *, #, A-D) to the far end; False: they could not go."""
        ...
