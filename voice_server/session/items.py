"""Conversation items, their wire form, and audio truncation.

An :class:`Item` is a ``message`` (user / assistant / system) with content
parts.  Assistant audio items also carry the exact accounting needed for
truncation: ``audio_ms`` (ms of audio actually sent to the client) and
``segments`` (one per spoken clause: [start_ms, end_ms) and its text), so a
cut at ``audio_end_ms`` keeps whole clauses before it and, inside the clause
being spoken, a proportional share of its words.

:class:`Conversation` is the ordered item list; :meth:`Conversation.messages`
renders it as ``[{"role", "content"}]`` for the thinker.
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

    def wire(self) -> dict:
        return {"id": self.id, "object": "realtime.item", "type": self.type,
                "status": self.status, "role": self.role,
                "content": [c.wire() for c in self.content]}

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

    def messages(self, exclude: set[str] | None = None) -> list[dict]:
        out = []
        for it in self.items:
            if exclude and it.id in exclude:
                continue
            text = it.text()
            if text:
                out.append({"role": it.role, "content": text})
        return out
