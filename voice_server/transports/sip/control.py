"""A SIP call's :class:`~voice_server.call_control.CallControl`: hang up
(BYE), transfer (REFER, RFC 3515; the outcome from the NOTIFY's sipfrag) and
DTMF out (RFC 4733 events on the call's RTP).  Thin: the call does the SIP."""

from __future__ import annotations

from typing import Optional, Protocol

from ...call_control import END_CALL, SEND_DTMF, TRANSFER, TransferOutcome
from .dtmf import valid_digits
from .sdp import MediaPlan


class SipCallActions(Protocol):
    """What the control needs of its call (:class:`.call.SipCall`)."""
    plan: Optional[MediaPlan]

    @property
    def finished(self) -> bool: ...
    def hang_up(self, reason: str) -> None: ...
    async def refer(self, target: str) -> TransferOutcome: ...
    def send_digits(self, digits: str) -> bool: ...


class SipCallControl:
    """What the agent (or the call-control API) can do to one SIP call."""

    def __init__(self, call: SipCallActions) -> None:
        self.call = call

    def actions(self) -> frozenset[str]:
        if self.call.finished:
            return frozenset()
        out = {END_CALL, TRANSFER}
        if self.call.plan is not None and self.call.plan.dtmf_pt is not None:
            out.add(SEND_DTMF)
        return frozenset(out)

    async def hang_up(self, reason: str) -> None:
        self.call.hang_up(reason)

    async def transfer(self, target_uri: str) -> TransferOutcome:
        if not target_uri.startswith(("sip:", "sips:", "tel:")):
            return TransferOutcome("failed", None, "target must be a sip:, sips: or tel: URI")
        return await self.call.refer(target_uri)

    async def send_dtmf(self, digits: str) -> bool:
        if not valid_digits(digits) or SEND_DTMF not in self.actions():
            return False
        return self.call.send_digits(digits)


__all__ = ["SipCallControl"]
