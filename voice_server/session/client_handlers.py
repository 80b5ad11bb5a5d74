"""The session's answers to Realtime client events (``session.update``,
``input_audio_buffer.*``, ``conversation.item.*``, ``response.create`` /
``.cancel``): parse, check, and turn each into events and commands.  Part of
:class:`voice_server.session.Session` (core.py), split out by section; it
shares the session's state and never runs on its own."""

from __future__ import annotations

from pydantic import ValidationError

from runtime.models.voice_contract import LISTEN_RATE_HZ

from ..audio_codec import PCM, decode_wire_audio, resample
from .client_events import ItemIn, decode_base64_audio, parse_client_event
from .commands import Command, SendEvent, TranscribeBuffer
from .errors import ClientError, field_errors, from_validation_error
from .config import _max_tokens, _modalities, merge_session_update
from .items import (FUNCTION_CALL, FUNCTION_CALL_OUTPUT, Content, Item, chat_messages,
                    function_call_item, function_call_output_item)
from .call_actions import reserved_clash
from .tools import parse_tool_choice, parse_tools


class ClientEventHandlers:
    def client_event(self, raw, now_ms: float) -> list[Command]:
        if self.closed:
            return []
        out = self._client_traffic(now_ms)
        if not self._bucket.take(now_ms):
            eid = raw.get("event_id") if isinstance(raw, dict) else None
            out.append(self._rate_limited(eid if isinstance(eid, str) else None))
            return out
        try:
            ev = parse_client_event(raw)
        except ClientError as err:
            out.append(self._client_error(err))
            return out
        handler = getattr(self, "_on_" + ev.type.replace(".", "_"))
        try:
            out += handler(ev, now_ms)
        except ClientError as err:
            err.event_id = ev.event_id
            out.append(self._client_error(err))
        return out

    def reject_client_frame(self, code: str, message: str, now_ms: float) -> list[Command]:
        """A client frame the transport could not even hand over as an event
        (a binary WebSocket frame, a data-channel message that is not UTF-8 or
        is too large): an ``error`` (``invalid_request_error``, ``code``) and
        the session stays open.

        It goes through the same accounting as :meth:`client_event` - it is
        client traffic for the idle timeout and takes a rate token, so a flood
        of rejected frames gets ``rate_limit_exceeded`` like a flood of events
        - which a transport calling ``send_error`` itself would bypass."""
        if self.closed:
            return []
        out = self._client_traffic(now_ms)
        if not self._bucket.take(now_ms):
            out.append(self._rate_limited(None))
        else:
            out.append(self._error("invalid_request_error", code, message))
        return out

    def _rate_limited(self, cause: str | None) -> SendEvent:
        return self._error("invalid_request_error", "rate_limit_exceeded",
                           f"Too many client events: at most "
                           f"{self.limits.max_client_events_per_s:g} per second (bursts "
                           f"of {self.limits.client_events_burst}); this event was "
                           "dropped.", None, cause)

    def _on_session_update(self, ev, now_ms) -> list[Command]:
        """The valid fields apply even when others are bad: one ``error``
        names the bad ones, then ``session.updated`` says what is in force (a
        client whose first update carries one field this server refuses keeps
        its audio format and turn detection)."""
        old = self.settings
        self.settings, errors = merge_session_update(old, ev.session, self.limits)
        out: list[Command] = []
        if errors:
            err = field_errors(errors)
            err.event_id = ev.event_id
            out.append(self._client_error(err))
        out.append(self._send("session.updated", session=self._session_wire()))
        if old.turn_detection is not None and self.settings.turn_detection is None:
            self._buffer.clear(keep_report=True)  # the PTT buffer starts empty
        out += self._sync_listen(old)
        return out

    def _on_input_audio_buffer_append(self, ev, now_ms) -> list[Command]:
        data = decode_base64_audio(ev.audio, "audio", self.limits.max_append_b64_bytes)
        fmt = self.settings.input_format
        if fmt.type == PCM and len(data) % 2:
            raise ClientError("invalid_audio_length", "Invalid 'audio': PCM16 audio must have an "
                              "even number of bytes.", "audio")
        if not data:
            return []
        pcm = decode_wire_audio(data, fmt.type)
        return self._ingest(pcm, fmt.sample_rate, now_ms)

    def _on_input_audio_buffer_commit(self, ev, now_ms) -> list[Command]:
        ms = self._buffer.duration_ms
        if ms < self.limits.min_commit_ms:
            raise ClientError("input_audio_buffer_commit_empty",
                              f"Error committing input audio buffer: buffer too small. Expected "
                              f"at least {self.limits.min_commit_ms:g}ms of audio, but buffer "
                              f"only has {ms:.2f}ms of audio.")
        pcm = self._buffer.take_all()
        item = Item(self.ids.new("item"), "user", [Content("input_audio")], status="in_progress")
        prev = self.conversation.add(item)
        self._turn.pending_transcripts[item.id] = 0
        return [self._send("input_audio_buffer.committed", previous_item_id=prev, item_id=item.id),
                self._send("conversation.item.added", previous_item_id=prev, item=item.wire()),
                TranscribeBuffer(item.id, pcm)]

    def _on_input_audio_buffer_clear(self, ev, now_ms) -> list[Command]:
        self._buffer.clear()
        return [self._send("input_audio_buffer.cleared")]

    def _build_item(self, it: ItemIn, allow_transcribe: bool, param: str = "item"):
        """ItemIn -> (Item, (content_index, pcm16k) | None).  No side effects."""
        if it.type in (FUNCTION_CALL, FUNCTION_CALL_OUTPUT):
            return self._build_function_item(it, param), None
        if it.type != "message":
            raise ClientError("invalid_value", f"Invalid value for '{param}.type': "
                              f"{it.type[:64]!r}. Supported values are: 'message', "
                              "'function_call', 'function_call_output'.", f"{param}.type")
        if it.role not in ("user", "assistant", "system"):
            raise ClientError("invalid_value" if it.role is not None else
                              "missing_required_parameter",
                              f"Invalid value for '{param}.role': {it.role!r}. Supported values "
                              "are: 'user', 'assistant', 'system'.", f"{param}.role")
        allowed = {"user": {"input_text": "input_text", "text": "input_text",
                            "input_audio": "input_audio"},
                   "assistant": {"output_text": "output_text", "text": "output_text",
                                 "output_audio": "output_audio", "audio": "output_audio"},
                   "system": {"input_text": "input_text", "text": "input_text"}}[it.role]
        content: list[Content] = []
        transcribe = None
        for i, c in enumerate(it.content):
            p = f"{param}.content[{i}]"
            kind = allowed.get(c.type)
            if kind is None:
                raise ClientError("invalid_value", f"Invalid value for '{p}.type': {c.type!r} "
                                  f"for role {it.role!r}. Supported values are: "
                                  f"{', '.join(repr(k) for k in allowed)}.", f"{p}.type")
            if kind in ("input_text", "output_text"):
                if c.text is None:
                    raise ClientError("missing_required_parameter",
                                      f"Missing required parameter: '{p}.text'.", f"{p}.text")
                if len(c.text) > self.limits.max_item_text_chars:
                    raise ClientError("string_above_max_length", f"Invalid '{p}.text': string "
                                      "too long.", f"{p}.text")
                content.append(Content(kind, text=c.text))
                continue
            if c.transcript is not None and len(c.transcript) > self.limits.max_item_text_chars:
                raise ClientError("string_above_max_length", f"Invalid '{p}.transcript': "
                                  "string too long.", f"{p}.transcript")
            if kind == "input_audio" and c.transcript is None and c.audio:
                if not allow_transcribe or transcribe is not None:
                    raise ClientError("invalid_value", f"Invalid '{p}': input_audio needs a "
                                      "transcript here.", f"{p}.transcript")
                data = decode_base64_audio(c.audio, f"{p}.audio",
                                           self.limits.max_append_b64_bytes)
                fmt = self.settings.input_format
                if fmt.type == PCM and len(data) % 2:
                    raise ClientError("invalid_audio_length", f"Invalid '{p}.audio': PCM16 "
                                      "audio must have an even number of bytes.", f"{p}.audio")
                pcm = resample(decode_wire_audio(data, fmt.type), fmt.sample_rate, LISTEN_RATE_HZ)
                transcribe = (i, pcm)
                content.append(Content(kind, transcript=None))
                continue
            content.append(Content(kind, transcript=c.transcript or ""))
        item_id = it.id or self.ids.new("item")
        status = "in_progress" if transcribe else "completed"
        return Item(item_id, it.role, content, status=status), transcribe

    def _build_function_item(self, it: ItemIn, param: str) -> Item:
        needed = ("call_id", "name") if it.type == FUNCTION_CALL else ("call_id", "output")
        for key in needed:
            if getattr(it, key) is None:
                raise ClientError("missing_required_parameter", f"Missing required parameter: "
                                  f"'{param}.{key}'.", f"{param}.{key}")
        for key in ("name", "arguments", "output"):
            value = getattr(it, key)
            if value is not None and len(value) > self.limits.max_item_text_chars:
                raise ClientError("string_above_max_length", f"Invalid '{param}.{key}': string "
                                  "too long.", f"{param}.{key}")
        item_id = it.id or self.ids.new("item")
        if it.type == FUNCTION_CALL:
            return function_call_item(item_id, it.call_id, it.name, it.arguments or "")
        return function_call_output_item(item_id, it.call_id, it.output)

    def _on_conversation_item_create(self, ev, now_ms) -> list[Command]:
        if ev.item.id is not None and ev.item.id in self.conversation:
            raise ClientError("invalid_value", f"Invalid 'item.id': an item with id "
                              f"'{ev.item.id}' already exists.", "item.id")
        if not self.conversation.has_position(ev.previous_item_id):
            raise ClientError("invalid_value", f"Invalid 'previous_item_id': no item with id "
                              f"'{ev.previous_item_id}'.", "previous_item_id")
        item, transcribe = self._build_item(ev.item, allow_transcribe=True)
        if item.type == FUNCTION_CALL_OUTPUT:
            self._check_function_output(item)
        elif item.type == FUNCTION_CALL:
            self._claim_call_id(item)
        prev = self.conversation.add(item, ev.previous_item_id)
        out: list[Command] = [self._send("conversation.item.added", previous_item_id=prev,
                                         item=item.wire())]
        if transcribe is not None:
            self._turn.pending_transcripts[item.id] = transcribe[0]
            out.append(TranscribeBuffer(item.id, transcribe[1]))
        else:
            out.append(self._send("conversation.item.done", previous_item_id=prev,
                                  item=item.wire()))
        return out

    def _item_or_error(self, item_id: str) -> Item:
        item = self.conversation.get(item_id)
        if item is None:
            raise ClientError("invalid_value", f"Invalid 'item_id': no item with id "
                              f"'{item_id}'.", "item_id")
        return item

    def _find_item(self, item_id: str) -> Item | None:
        item = self.conversation.get(item_id)
        r = self._responses.active
        if item is None and r and r.item and r.item.id == item_id:
            item = r.item
        return item

    def _on_conversation_item_truncate(self, ev, now_ms) -> list[Command]:
        item = self._item_or_error(ev.item_id)
        if item.role != "assistant" or ev.content_index >= len(item.content) or \
                item.content[ev.content_index].type != "output_audio":
            raise ClientError("invalid_value", "Invalid 'content_index': only assistant audio "
                              "content can be truncated.", "content_index")
        if ev.audio_end_ms > item.max_truncate_ms():
            raise ClientError("invalid_value", f"Invalid 'audio_end_ms': audio content of "
                              f"{item.max_truncate_ms()}ms is shorter than {ev.audio_end_ms}ms.",
                              "audio_end_ms")
        out: list[Command] = []
        r = self._responses.active
        if r is not None and r.item is item:
            # the client stopped playing this item: stop producing it
            out += self._cancel_active("client_cancelled", now_ms, flush=False,
                                       reason_cmd="item_truncated")
        item.truncate(ev.audio_end_ms, ev.content_index)
        out.append(self._send("conversation.item.truncated", item_id=item.id,
                              content_index=ev.content_index, audio_end_ms=ev.audio_end_ms))
        return out

    def _on_conversation_item_delete(self, ev, now_ms) -> list[Command]:
        item = self._item_or_error(ev.item_id)
        r = self._responses.active
        if r is not None and item.response_id == r.id:
            raise ClientError("invalid_value", "Invalid 'item_id': the item belongs to the "
                              "response in progress; cancel it first.", "item_id")
        self.conversation.delete(item.id)
        out: list[Command] = [self._send("conversation.item.deleted", item_id=item.id)]
        if item.id in self._turn.awaiting_final:
            self._turn.awaiting_final.remove(item.id)
        if self._turn.pending_transcripts.pop(item.id, None) is not None:
            out += self._maybe_start_waiting()
        return out

    def _on_conversation_item_retrieve(self, ev, now_ms) -> list[Command]:
        item = self._item_or_error(ev.item_id)
        return [self._send("conversation.item.retrieved", item=item.wire(self.extension_events))]

    def _on_response_create(self, ev, now_ms) -> list[Command]:
        active = self._responses.active
        if active is not None:
            raise ClientError("conversation_already_has_active_response",
                              f"Conversation already has an active response in progress: "
                              f"{active.id}. Wait until the response is finished before "
                              "creating a new one.")
        p = ev.response
        s = self.settings
        modalities = s.output_modalities
        max_tokens = s.max_output_tokens
        instructions = s.instructions
        metadata = None
        in_conv = True
        input_messages = None
        tools = tool_choice = None
        if p is not None:
            if p.modalities is not None:
                modalities = _modalities(p.modalities, "response.modalities")
            if p.output_modalities is not None:
                modalities = _modalities(p.output_modalities, "response.output_modalities")
            for key in ("max_response_output_tokens", "max_output_tokens"):
                v = getattr(p, key)
                if v is not None:
                    max_tokens = _max_tokens(v, f"response.{key}", self.limits)
            if p.instructions is not None:
                if len(p.instructions) > self.limits.max_instructions_chars:
                    raise ClientError("string_above_max_length", "Invalid "
                                      "'response.instructions': string too long. Expected at "
                                      f"most {self.limits.max_instructions_chars} characters.",
                                      "response.instructions")
                instructions = p.instructions
            if p.metadata is not None:
                metadata = self._check_metadata(p.metadata)
            if p.conversation not in (None, "auto", "none"):
                raise ClientError("invalid_value", "Invalid 'response.conversation': supported "
                                  "values are 'auto' and 'none'.", "response.conversation")
            in_conv = p.conversation != "none"
            if p.input is not None:
                input_messages = self._input_messages(p.input)
            if "tools" in p.model_fields_set:
                tools = parse_tools(p.tools, "response.tools", self.limits.max_tools,
                                    self.limits.max_tools_chars)
                clash = reserved_clash(tools, s.call_actions, "response.tools")
                if clash is not None:
                    raise clash
            if p.tool_choice is not None:
                tool_choice = parse_tool_choice(p.tool_choice, (s.tools if tools is None
                                                                else tools) + self._action_tools(),
                                                "response.tool_choice")
        return self._create_response(now_ms, cause=ev.event_id, modalities=modalities,
                                     max_tokens=max_tokens, instructions=instructions or None,
                                     metadata=metadata, in_conv=in_conv,
                                     input_messages=input_messages, tools=tools,
                                     tool_choice=tool_choice)

    def _check_metadata(self, md: dict) -> dict:
        lim = self.limits
        if len(md) > lim.max_metadata_keys:
            raise ClientError("invalid_value", f"Invalid 'response.metadata': at most "
                              f"{lim.max_metadata_keys} keys.", "response.metadata")
        for k, v in md.items():
            if len(k) > lim.max_metadata_key_chars or len(v) > lim.max_metadata_value_chars:
                raise ClientError("string_above_max_length", f"Invalid 'response.metadata': "
                                  f"key or value too long ({k[:64]!r}).", "response.metadata")
        return dict(md)

    def _input_messages(self, items: list) -> list[dict]:
        built: list[Item] = []
        for i, raw in enumerate(items):
            param = f"response.input[{i}]"
            if raw.get("type") == "item_reference":
                ref = self.conversation.get(raw.get("id")) if isinstance(raw.get("id"), str) \
                    else None
                if ref is None:
                    raise ClientError("invalid_value", f"Invalid '{param}.id': no such item.",
                                      f"{param}.id")
                item = ref
            else:
                try:
                    it = ItemIn.model_validate(raw)
                except ValidationError as exc:
                    raise from_validation_error(exc, param) from None
                item, _ = self._build_item(it, allow_transcribe=False, param=param)
            built.append(item)
        return chat_messages(built)

    def _on_response_cancel(self, ev, now_ms) -> list[Command]:
        r = self._responses.active
        if r is None or (ev.response_id is not None and ev.response_id != r.id):
            raise ClientError("response_cancel_not_active",
                              "Cancellation failed: no active response found.")
        return self._cancel_active("client_cancelled", now_ms, flush=False)
