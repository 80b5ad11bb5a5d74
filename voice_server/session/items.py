"""Conversation items, their wire form, and audio truncation.

An :class:`Item` is a ``message`` (user / assistant / system) with content
parts, a ``function_call`` (``call_id``, ``name``, ``arguments``: the agent
asks the client to run a function) or a ``function_call_output``
(``call_id``, ``output``: the client's answer).  Assistant audio items also
carry the exact accounting needed for truncation: ``audio_ms`` (ms of audio
actually sent to the client) and ``segments`` (one per spoken clause:
[start_ms, end_ms) and its text), so a cut at ``audio_end_ms`` keeps whole
clauses before it and, inside the clause being spoken, a proportional share
of its words.

:class:`Conversation` is the ordered item list; :func:`chat_messages`
renders items as the chat messages the thinker takes (``voice_contract``):
``{"role", "content"}``, calls as an assistant message's ``tool_calls``, each
followed by its ``{"role": "tool", "tool_call_id", "content"}`` result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Content:
    type: str  # input_text | input_audio | output_text | output_audio
    text: str | None = None
    transcript: str | None = None

    def wire(self) -> dict:
        if self.type in ("input_text", "output_text"):
            return {"type": self.type, "text": self.text or ""}
        return {"type": self.type, "transcript": self.transcript}

    def plain(self) -> str:
        return (self.text if self.type in ("input_text", "output_text") else self.transcript) or ""


@dataclass
class Segment:
    start_ms: float
    end_ms: float
    text: str


def cut_transcript(segments: list[Segment], audio_end_ms: float) -> str:
    """Transcript heard up to ``audio_end_ms``: whole segments that ended,
    plus floor(words * fraction played) words of the segment in progress."""
    out = ""
    for seg in segments:
        if seg.end_ms <= audio_end_ms:
            out += seg.text
            continue
        if seg.start_ms < audio_end_ms and seg.end_ms > seg.start_ms:
            words = seg.text.split()
            n = int(len(words) * (audio_end_ms - seg.start_ms) / (seg.end_ms - seg.start_ms))
            if n:
                lead = seg.text[: len(seg.text) - len(seg.text.lstrip())]
                out += lead + " ".join(words[:n])
        break
    return out


FUNCTION_CALL = "function_call"
FUNCTION_CALL_OUTPUT = "function_call_output"


def function_call_item(item_id: str, call_id: str, name: str, arguments: str = "",
                       status: str = "completed", response_id: str | None = None) -> "Item":
    return Item(item_id, "assistant", [], status=status, type=FUNCTION_CALL,
                response_id=response_id, call_id=call_id, name=name, arguments=arguments)


def function_call_output_item(item_id: str, call_id: str, output: str) -> "Item":
    return Item(item_id, "tool", [], type=FUNCTION_CALL_OUTPUT, call_id=call_id,
                output=output)


@dataclass
class Item:
    id: str
    role: str  # user | assistant | system
    content: list[Content]
    status: str = "completed"  # completed | incomplete | in_progress
    type: str = "message"
    # assistant audio accounting
    audio_ms: float = 0.0
    segments: list[Segment] = field(default_factory=list)
    played_ms: float | None = None
    truncated_at_ms: float | None = None
    response_id: str | None = None
    # function_call / function_call_output
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | None = None
    # a user audio message: the language it was heard in (ISO-639-1), an
    # extension on the wire (``voice_agent.language``)
    language: str | None = None

    def wire(self, extensions: bool = True) -> dict:
        head = {"id": self.id, "object": "realtime.item", "type": self.type,
                "status": self.status}
        if self.type == FUNCTION_CALL:
            return {**head, "call_id": self.call_id, "name": self.name,
                    "arguments": self.arguments or ""}
        if self.type == FUNCTION_CALL_OUTPUT:
            return {**head, "call_id": self.call_id, "output": self.output or ""}
        out = {**head, "role": self.role, "content": [c.wire() for c in self.content]}
        if self.language and extensions:
            out["voice_agent"] = {"language": self.language}
        return out

    def text(self) -> str:
        return "".join(c.plain() for c in self.content).strip()

    def truncate(self, audio_end_ms: float, content_index: int = 0) -> None:
        """Keep audio/transcript up to ``audio_end_ms`` (caller validated it)."""
        part = self.content[content_index]
        part.transcript = cut_transcript(self.segments, audio_end_ms)
        self.audio_ms = min(self.audio_ms, float(audio_end_ms))
        self.segments = [s for s in self.segments if s.start_ms < audio_end_ms]
        if self.segments:
            last = self.segments[-1]
            if last.end_ms > audio_end_ms:
                self.segments[-1] = Segment(last.start_ms, float(audio_end_ms),
                                            cut_transcript([last], audio_end_ms))
        self.truncated_at_ms = float(audio_end_ms)
        if self.played_ms is not None:
            self.played_ms = min(self.played_ms, float(audio_end_ms))

    def max_truncate_ms(self) -> int:
        """Largest audio_end_ms a client may send (it counts whole ms)."""
        return int(math.ceil(self.audio_ms - 1e-6))


ROOT = "root"  # previous_item_id meaning "at the beginning of the conversation"


class Conversation:
    def __init__(self) -> None:
        self.items: list[Item] = []
        self._by_id: dict[str, Item] = {}

    def __contains__(self, item_id: str) -> bool:
        return item_id in self._by_id

    def __len__(self) -> int:
        return len(self.items)

    def get(self, item_id: str) -> Item | None:
        return self._by_id.get(item_id)

    def last_id(self) -> str | None:
        return self.items[-1].id if self.items else None

    def has_position(self, previous_item_id: str | None) -> bool:
        """Whether an item can be put after ``previous_item_id``: None (the
        end), ``"root"`` (the beginning, as the Realtime API defines it; LiveKit
        Agents sends it for a first item) or an item of this conversation."""
        return previous_item_id in (None, ROOT) or previous_item_id in self._by_id

    def add(self, item: Item, previous_item_id: str | None = None) -> str | None:
        """Append (or insert after ``previous_item_id``; ``"root"``: first);
        returns the id of the item it now follows (None at the beginning)."""
        if previous_item_id is None:
            prev = self.last_id()
            self.items.append(item)
        elif previous_item_id == ROOT:
            self.items.insert(0, item)
            prev = None
        else:
            idx = next(i for i, it in enumerate(self.items) if it.id == previous_item_id)
            self.items.insert(idx + 1, item)
            prev = previous_item_id
        self._by_id[item.id] = item
        return prev

    def previous_of(self, item_id: str) -> str | None:
        for i, it in enumerate(self.items):
            if it.id == item_id:
                return self.items[i - 1].id if i else None
        return None

    def delete(self, item_id: str) -> Item | None:
        item = self._by_id.pop(item_id, None)
        if item is not None:
            self.items.remove(item)
        return item

    def messages(self) -> list[dict]:
        return chat_messages(self.items)

    def function_call(self, call_id: str) -> Item | None:
        return next((it for it in self.items
                     if it.type == FUNCTION_CALL and it.call_id == call_id), None)

    def function_output(self, call_id: str) -> Item | None:
        return next((it for it in self.items
                     if it.type == FUNCTION_CALL_OUTPUT and it.call_id == call_id), None)


def chat_messages(items: list[Item]) -> list[dict]:
    """Items as chat messages for the thinker.

    A call goes into the ``tool_calls`` of the assistant message just before
    it (the text the agent said first) or of a new empty one, and its result
    comes right after that message, wherever the client put the output item:
    chat templates and OpenAI-compatible servers take a call only when its
    result follows.  A call without an output yet (the client has not
    answered, or it was cut off) and an output without its call are left out
    for the same reason."""
    results = {it.call_id: it for it in items if it.type == FUNCTION_CALL_OUTPUT}
    calls = {it.call_id for it in items if it.type == FUNCTION_CALL}
    out: list[dict] = []
    pending: list[dict] = []   # results of the calls of out[-1]
    for it in items:
        if it.type == FUNCTION_CALL:
            res = results.get(it.call_id)
            if res is None or it.status != "completed":
                continue
            call = {"id": it.call_id, "type": "function",
                    "function": {"name": it.name or "", "arguments": it.arguments or "{}"}}
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out += pending
                pending = []
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
            pending.append({"role": "tool", "tool_call_id": it.call_id,
                            "content": res.output or ""})
            continue
        if it.type == FUNCTION_CALL_OUTPUT and it.call_id in calls:
            continue
        text = it.text()
        if text:
            out += pending
            pending = []
            out.append({"role": it.role, "content": text})
    return out + pending
