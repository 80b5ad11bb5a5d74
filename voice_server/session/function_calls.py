"""Function calls: the thinker's tool-call events become Realtime
``function_call`` output items, and the client's ``function_call_output``
items are checked against the calls they answer.  Part of
:class:`voice_server.session.Session` (core.py), split out by section.

A call is announced like any output item (``response.output_item.added``,
``conversation.item.added``), its arguments stream as
``response.function_call_arguments.delta`` and end with ``.done``, then
``response.output_item.done`` and ``conversation.item.done``; all of it goes
out at once, not behind the reply's paced audio, so a client can start the
function while the agent still speaks.  A response that ends (cancelled,
failed, or a thinker that never finished the call) before a call's
arguments are complete sends no ``.done`` of any kind for that call - some
clients (LiveKit Agents) run a call on its ``response.output_item.done``,
whatever its status, and would run it with half its arguments - so the item
ends ``incomplete`` only in ``response.done``'s ``output`` (and in the
conversation); an output for it is refused, because the client never had
arguments to run it with.

In an audio response the thinker's text reaches the speaker before the call
but comes back as audio after it; the spoken message item is opened first
when text came before the call, so ``output_index`` follows what the agent
said.
"""

from __future__ import annotations

from runtime.models.voice_contract import TOOL_CALL_DELTA, TOOL_CALL_DONE

from .commands import Command
from .errors import ClientError
from .items import FUNCTION_CALL, Item, function_call_item


class FunctionCalls:
    def _tool_call_event(self, r, ev: dict) -> list[Command]:
        kind = ev.get("type")
        index = ev.get("index")
        if kind not in (TOOL_CALL_DELTA, TOOL_CALL_DONE) or not isinstance(index, int):
            return []
        out: list[Command] = []
        item = r.calls.get(index)
        if item is None:
            out += self._open_call(r, index, ev.get("call_id"), ev.get("name"))
            item = r.calls[index]
        if item.status != "in_progress":
            return out  # a second done for one call
        if not item.name and isinstance(ev.get("name"), str):
            item.name = ev["name"]
        common = dict(response_id=r.id, item_id=item.id, output_index=r.outputs.index(item),
                      call_id=item.call_id)
        args = ev.get("arguments") if isinstance(ev.get("arguments"), str) else ""
        if kind == TOOL_CALL_DELTA:
            if args:
                item.arguments += args
                out.append(self._send("response.function_call_arguments.delta", delta=args,
                                      **common))
            return out
        if args.startswith(item.arguments) and len(args) > len(item.arguments):
            # the deltas fell short of the whole: stream the rest first
            out.append(self._send("response.function_call_arguments.delta",
                                  delta=args[len(item.arguments):], **common))
        item.arguments = args
        item.status = "completed"
        out.append(self._send("response.function_call_arguments.done", name=item.name or "",
                              arguments=args, **common))
        self._action_called(r, item)   # a call action: the server runs it (agent_actions.py)
        return out + self._item_done_events(r, item)

    def _open_call(self, r, index: int, call_id, name) -> list[Command]:
        out: list[Command] = []
        if r.audio and r.item is None and r.think_text.strip():
            out += self._ensure_item(r)  # what the agent says before the call comes first
        if not isinstance(call_id, str) or not call_id or call_id in self._call_ids:
            call_id = self.ids.new("call")
        self._call_ids.add(call_id)
        item = function_call_item(self.ids.new("item"), call_id,
                                  name if isinstance(name, str) else "", "",
                                  status="in_progress", response_id=r.id)
        r.calls[index] = item
        return out + self._add_output_item(r, item)

    def _add_output_item(self, r, item: Item) -> list[Command]:
        """``item`` becomes the response's next output (and the conversation's
        next item when the response is in it)."""
        r.outputs.append(item)
        out: list[Command] = [self._send("response.output_item.added", response_id=r.id,
                                         output_index=len(r.outputs) - 1, item=item.wire())]
        if r.in_conversation:
            prev = self.conversation.add(item)
            out.append(self._send("conversation.item.added", previous_item_id=prev,
                                  item=item.wire()))
        return out

    def _item_done_events(self, r, item: Item) -> list[Command]:
        out: list[Command] = [self._send("response.output_item.done", response_id=r.id,
                                         output_index=r.outputs.index(item), item=item.wire())]
        if r.in_conversation and item.id in self.conversation:
            out.append(self._send("conversation.item.done",
                                  previous_item_id=self.conversation.previous_of(item.id),
                                  item=item.wire()))
        return out

    def _close_unfinished_call(self, item: Item) -> None:
        """The response ends before this call's arguments did: no event (the
        module docstring says why); ``response.done`` lists it incomplete."""
        if item.type == FUNCTION_CALL and item.status == "in_progress":
            item.status = "incomplete"

    # -------------------------------------------------------- client side
    def _check_function_output(self, item: Item, param: str = "item") -> None:
        """A ``function_call_output`` must answer a call of this conversation
        whose arguments were complete, and only once."""
        call = self.conversation.function_call(item.call_id)
        cid = (item.call_id or "")[:64]
        if call is None:
            raise ClientError("function_call_not_found", f"Invalid '{param}.call_id': no "
                              f"function_call item with call_id '{cid}' in the conversation.",
                              f"{param}.call_id")
        if call.status == "in_progress":
            raise ClientError("function_call_in_progress", f"Invalid '{param}.call_id': the "
                              f"arguments of call '{cid}' are still streaming; answer after "
                              "response.function_call_arguments.done.", f"{param}.call_id")
        if call.status == "incomplete":
            raise ClientError("function_call_incomplete", f"Invalid '{param}.call_id': call "
                              f"'{cid}' was cancelled before its arguments were complete, so "
                              "it takes no output.", f"{param}.call_id")
        self._check_not_action(item.call_id, f"{param}.call_id")
        if self.conversation.function_output(item.call_id) is not None:
            raise ClientError("function_call_output_duplicate", f"Invalid '{param}.call_id': "
                              f"call '{cid}' already has an output.", f"{param}.call_id")

    def _claim_call_id(self, item: Item, param: str = "item") -> None:
        """A client's ``function_call``: its call_id must be new, and is taken
        from now on (by the client's call and the server's alike)."""
        if item.call_id in self._call_ids:
            raise ClientError("invalid_value", f"Invalid '{param}.call_id': a function call "
                              f"with call_id '{item.call_id[:64]}' already exists.",
                              f"{param}.call_id")
        self._call_ids.add(item.call_id)
