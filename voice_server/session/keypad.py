"""The caller's phone keypad: key presses become one conversation entry.

Each key press is announced at once (``input_audio_buffer.dtmf_event_received``,
in order), but the model gets the keys as ONE user text item per entry -
``"[pressed 1 2 3 4]"`` - so that "enter your PIN" gets one answer, not four.
An entry ends when the caller presses ``#`` (kept in the text: IVR menus
use it as "done") or stops pressing for :data:`ENTRY_GAP_MS`.
"""

from __future__ import annotations

from typing import Optional

KEYS = frozenset("0123456789*#ABCD")  # the keys of a phone keypad (DTMF)
ENTRY_GAP_MS = 1500.0  # keys further apart than this are separate entries
END_KEY = "#"
MAX_ENTRY_KEYS = 32  # a longer entry is ended there (nobody types more on a call)


def entry_text(keys: str) -> str:
    """The user item's text for an entry: what the model reads."""
    return "[pressed " + " ".join(keys) + "]"


class Keypad:
    """The entry being typed (sans-I/O: the session passes its clock)."""

    def __init__(self) -> None:
        self.keys = ""  # keys of the entry in progress
        self.deadline_ms: Optional[float] = None  # when the entry ends by itself

    def press(self, key: str, now_ms: float) -> Optional[str]:
        """Add a key; returns the finished entry when this key ends it."""
        self.keys += key
        if key == END_KEY or len(self.keys) >= MAX_ENTRY_KEYS:
            return self.take()
        self.deadline_ms = now_ms + ENTRY_GAP_MS
        return None

    def due(self, now_ms: float) -> Optional[str]:
        """The entry, once the caller stopped pressing for the gap."""
        if self.deadline_ms is None or now_ms < self.deadline_ms:
            return None
        return self.take()

    def take(self) -> str:
        keys, self.keys, self.deadline_ms = self.keys, "", None
        return keys


__all__ = ["Keypad", "entry_text", "KEYS", "ENTRY_GAP_MS", "END_KEY"]
