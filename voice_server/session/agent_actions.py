"""Running the agent's call actions (call_actions.py) inside the session: part
of :class:`voice_server.session.Session` (core.py), split out by section.

The model's call of an action is an ordinary ``function_call`` item (the
client sees it stream and end as any other); the server then runs it, once
the response that made it has ended:

* ``end_call``: once everything the agent said has been heard (the played
  position, or the reply's length plus a grace where nothing reports it),
  a ``function_call_output`` ``{"status": "ended"}`` and ``HangUpCall``.
* ``transfer_call``: the caller hears a line first - the words the model
  said with its call, or else a short reply asked for with the operator's
  ``announcement`` - and once it was heard, ``TransferCall``; the runner
  answers with :meth:`call_action_done` and the outcome becomes the call's
  output; a transfer that did not complete is answered by the model (the
  caller is told, the call goes on).
* ``send_dtmf``: ``SendDtmf`` at once (a phone line plays the tones after
  the audio already queued); the output says whether they went, and the
  model answers it.
* arguments that do not fit: an output ``{"error": ...}``, answered by the
  model.  A response cancelled or failed after the call: the output says
  ``cancelled`` and nothing runs.

The work is done from ``tick`` (each 100 ms): every step waits for the
moment it needs (the response over, the line heard, the caller not
speaking) and a reply the model owes waits for a free turn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum

from .call_actions import (NEEDS, ActionRequest, BadArguments, CallActionsSetting, EndCall,
                           PressKeys, Transfer, action_request, offered_tools)
from .commands import Command, HangUpCall, SendDtmf, StopListen, TransferCall
from .errors import ClientError
from .items import function_call_output_item
from .silence import GOODBYE_GRACE_MS


class Step(Enum):
    """Where one action call stands."""
    AFTER_RESPONSE = "after_response"   # its response is still being made
    ANNOUNCING = "announcing"           # transfer: the line before it is being said
    WHEN_HEARD = "when_heard"           # waiting for the agent's words to be heard
    RUNNING = "running"                 # the command is out; the runner answers


@dataclass
class ActionCall:
    call_id: str
    response_id: str
    request: ActionRequest
    step: Step = Step.AFTER_RESPONSE
    spoke: bool = False                 # its response said words with the call
    announce_id: str | None = None      # transfer: the response saying the line


@dataclass
class ActionState:
    """What the session knows of its call actions (one owner: this section)."""
    # what this call's transport can do (CallControl.actions(); nothing: no call control)
    available: frozenset[str] = frozenset()
    calls: list[ActionCall] = field(default_factory=list)   # in the order made
    reply_due: bool = False     # an output the model should answer is in the conversation
    hanging_up: bool = False    # HangUpCall went out: nothing more starts


class AgentActions:
    # ------------------------------------------------------------ inputs
    def set_call_actions_available(self, actions: frozenset[str]) -> list[Command]:
        """What the call's transport can do now (``CallControl.actions()``); the
        model is offered the operator's actions among these from the next
        response on."""
        self._actions.available = frozenset(actions)
        return []

    def call_action_done(self, call_id: str, output: dict, now_ms: float, *,
                         reply: bool) -> list[Command]:
        """The runner's answer to a ``TransferCall`` / ``SendDtmf`` (``output``:
        the function's result); ``reply``: the model answers it."""
        a = self._actions
        call = next((c for c in a.calls if c.call_id == call_id and c.step is Step.RUNNING),
                    None)
        if self.closed or call is None:
            return []
        a.calls.remove(call)
        out = self._action_output(call_id, output)
        a.reply_due = a.reply_due or reply
        return out + self._actions_reply(now_ms)

    # ------------------------------------------------------------ the tools
    @property
    def _action_setting(self) -> CallActionsSetting | None:
        return self.settings.call_actions

    def _action_tools(self) -> list[dict]:
        """The actions offered to the model now (Realtime shape)."""
        if self._actions.hanging_up:
            return []
        return offered_tools(self._action_setting, self._actions.available)

    def _is_action(self, name: str | None) -> bool:
        s = self._action_setting
        return s is not None and name in s.names and NEEDS[name] in self._actions.available

    def _check_not_action(self, call_id: str | None, param: str) -> None:
        """A client's output for a call the server runs: refused."""
        if any(c.call_id == call_id for c in self._actions.calls):
            raise ClientError("function_call_run_by_server", f"Invalid '{param}': call "
                              f"'{(call_id or '')[:64]}' is a call action the server runs "
                              "itself; its output comes from the server.", param)

    # ------------------------------------------------------------ the model called one
    def _action_called(self, r, item) -> None:
        """A completed ``function_call`` item of ``r`` that names an action."""
        if not self._is_action(item.name):
            return
        req = action_request(item.name, item.arguments, self._action_setting)
        self._actions.calls.append(ActionCall(item.call_id, r.id, req))

    def _action_response_done(self, r, status: str) -> None:
        """``r`` ended (``_done_events``): its calls may go on, or are called off."""
        spoke = r.item is not None and bool((r.transcript or r.text).strip())
        for c in self._actions.calls:
            if c.response_id == r.id and c.step is Step.AFTER_RESPONSE:
                c.spoke = spoke
                c.step = Step.WHEN_HEARD if status == "completed" else None
            elif c.announce_id == r.id and c.step is Step.ANNOUNCING:
                c.step, c.spoke = Step.WHEN_HEARD, True   # said, or tried: it goes on

    # ------------------------------------------------------------ the timer
    def _run_actions(self, now_ms: float) -> list[Command]:
        a = self._actions
        out: list[Command] = []
        for c in list(a.calls):
            if c.step is None:   # its response was cancelled or failed
                a.calls.remove(c)
                out += self._action_output(c.call_id, {
                    "status": "cancelled",
                    "detail": "the response was interrupted before the action ran"})
            elif c.step is Step.WHEN_HEARD:
                out += self._action_due(c, now_ms)
            if a.hanging_up:
                return out
        return out + self._actions_reply(now_ms)

    def _action_due(self, c: ActionCall, now_ms: float) -> list[Command]:
        a = self._actions
        req = c.request
        if isinstance(req, BadArguments):
            a.calls.remove(c)
            a.reply_due = True
            return self._action_output(c.call_id, {"status": "failed", "error": req.message})
        if isinstance(req, PressKeys):
            c.step = Step.RUNNING
            return [SendDtmf(c.call_id, req.digits)]
        if self._responses.active is not None or not self._all_heard(now_ms):
            return []
        if isinstance(req, Transfer) and not c.spoke:
            return self._announce(c, req, now_ms)
        if isinstance(req, Transfer):
            c.step = Step.RUNNING
            return [TransferCall(c.call_id, req.target.uri)]
        assert isinstance(req, EndCall)
        a.calls.remove(c)
        a.hanging_up = True
        out = self._action_output(c.call_id, {"status": "ended"})
        if self._listening is not None:
            self._listening = None
            out.append(StopListen())
        return out + [HangUpCall(c.call_id, "end_call")]

    def _announce(self, c: ActionCall, req: Transfer, now_ms: float) -> list[Command]:
        """The model said nothing with its transfer: a short reply says the line."""
        if self._turn.speech_item is not None:
            return []   # the caller speaks: the line waits for their turn to end
        s = self.settings
        c.step = Step.ANNOUNCING
        out = self._create_response(now_ms, cause=None, modalities=s.output_modalities,
                                    max_tokens=s.max_output_tokens,
                                    instructions="\n\n".join(x for x in (s.instructions,
                                                                         req.announcement) if x),
                                    metadata=None, in_conv=True, input_messages=None, tools=[],
                                    actions=False)
        c.announce_id = self._responses.active.id if self._responses.active else None
        if c.announce_id is None:   # it failed at once: transfer without the line
            c.step = Step.WHEN_HEARD
            c.spoke = True
        return out

    def _actions_reply(self, now_ms: float) -> list[Command]:
        """The model answers the outputs it owes, on a free turn."""
        a = self._actions
        if not a.reply_due or a.hanging_up or self._responses.active is not None or \
                self._turn.speech_item is not None or self._turn.awaiting_final or \
                any(c.step is Step.ANNOUNCING for c in a.calls):
            return []
        a.reply_due = False
        return self._auto_response(now_ms)

    # ------------------------------------------------------------ helpers
    def _action_output(self, call_id: str, output: dict) -> list[Command]:
        """The server's ``function_call_output`` for an action call."""
        item = function_call_output_item(self.ids.new("item"), call_id,
                                         json.dumps(output, separators=(",", ":")))
        prev = self.conversation.add(item)
        return [self._send("conversation.item.added", previous_item_id=prev, item=item.wire()),
                self._send("conversation.item.done", previous_item_id=prev, item=item.wire())]

    def _all_heard(self, now_ms: float) -> bool:
        """Everything the agent said has been played to the caller (or its
        playback report is overdue by GOODBYE_GRACE_MS)."""
        r = self._responses.last_audio
        if r is None or r.item is None:
            return True
        item = r.item
        if item.played_ms is not None and item.played_ms + 1.0 >= item.audio_ms:
            return True
        start = r.first_audio_ms if r.first_audio_ms is not None else now_ms
        return now_ms >= start + item.audio_ms + GOODBYE_GRACE_MS


__all__ = ["AgentActions", "ActionState", "ActionCall", "Step"]
