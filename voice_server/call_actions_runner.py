"""Carrying out one of the agent's call actions against the call's
:class:`~voice_server.call_control.CallControl`, and what the model is told.

The session asks (``HangUpCall``, ``TransferCall``, ``SendDtmf``:
voice_server/session/agent_actions.py); :class:`voice_server.runner.SessionRunner`
runs :func:`run_call_action` as a task of the session and hands the
:class:`ActionResult` back to ``Session.call_action_done``.  A transport
that fails (raises) fails the action, never the session: the model hears
that it did not work, and a hang-up that could not be done closes the
session instead.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from .call_control import CallControl, TransferOutcome
from .session import CallAction, HangUpCall, SendDtmf, TransferCall

log = logging.getLogger("voice_server.call_actions")


@dataclass(frozen=True)
class ActionResult:
    """``output``: the function's result (the ``function_call_output``);
    ``reply``: the model answers it; ``close``: end the session (a hang-up)."""
    output: dict = field(default_factory=dict)
    reply: bool = False
    close: bool = False


def transfer_output(outcome: TransferOutcome) -> dict:
    out: dict = {"status": outcome.status}
    if outcome.sip_status is not None:
        out["sip_status"] = outcome.sip_status
    if outcome.detail:
        out["detail"] = outcome.detail
    return out


async def run_call_action(control: CallControl | None, cmd: CallAction,
                          session_id: str) -> ActionResult:
    """Do ``cmd`` on the call; never raises (but for cancellation)."""
    try:
        if isinstance(cmd, HangUpCall):
            if control is not None:
                await control.hang_up(cmd.reason)
            return ActionResult(close=True)
        if control is None:
            return ActionResult({"status": "failed", "error": "this call cannot do that"},
                                reply=True)
        if isinstance(cmd, TransferCall):
            outcome = await control.transfer(cmd.target_uri)
            log.info("session %s: transfer to %s: %s", session_id, cmd.target_uri, outcome)
            return ActionResult(transfer_output(outcome), reply=outcome.status != "completed")
        assert isinstance(cmd, SendDtmf)
        sent = await control.send_dtmf(cmd.digits)
        return ActionResult({"status": "sent", "digits": cmd.digits} if sent else
                            {"status": "failed", "error": "the line could not send the tones"},
                            reply=True)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - a transport's failure fails the action only
        log.warning("session %s: call action %s failed: %r", session_id, type(cmd).__name__,
                    exc)
        if isinstance(cmd, HangUpCall):
            return ActionResult(close=True)
        return ActionResult({"status": "failed", "error": "the call could not do it"},
                            reply=True)


__all__ = ["run_call_action", "ActionResult", "transfer_output"]
