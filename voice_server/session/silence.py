"""A caller who went quiet: what the model is told, and when to give up.

When ``turn_detection.idle_timeout_ms`` passes after a reply was heard, the
session commits an empty user turn (``input_audio_buffer.timeout_triggered``,
as the Realtime API does) and answers it.  So that the answer is a sensible
check-in rather than a repeat of the last reply, that turn's transcript is a
note the model reads: ``"[the caller said nothing for 8 s]"``.  A session
made with ``hang_up_after=N`` (the phone bridges) counts the check-ins the
caller let pass; after the Nth, the next timeout's note asks for a short
goodbye and, once that has been heard, the session closes (``idle_hangup``):
the bridge ends the call.  Anything the caller says (words, not noise) or
types on the keypad starts the count again.
"""

from __future__ import annotations

from typing import Optional

GOODBYE_GRACE_MS = 3000.0  # a goodbye whose playback is never reported closes this much after its audio


def silence_note(idle_ms: float, goodbye: bool) -> str:
    """The idle turn's transcript: what the model learns about the silence."""
    note = f"[the caller said nothing for {idle_ms / 1000:g} s"
    if goodbye:
        return note + " and did not answer the check-ins; say a short goodbye, the call ends]"
    return note + "]"


class SilenceWatch:
    """The check-ins since the caller last spoke, and the goodbye in progress."""

    def __init__(self, hang_up_after: Optional[int] = None) -> None:
        self.hang_up_after = hang_up_after  # None or 0: never hang up
        self.check_ins = 0  # idle timeouts answered since the caller last spoke
        self.goodbye_id: Optional[str] = None  # the goodbye response, once asked for

    def caller_spoke(self) -> None:
        self.check_ins = 0
        self.goodbye_id = None

    def timed_out(self) -> bool:
        """Count one more silence; True when this one gets the goodbye."""
        self.check_ins += 1
        return bool(self.hang_up_after) and self.check_ins > self.hang_up_after


__all__ = ["SilenceWatch", "silence_note", "GOODBYE_GRACE_MS"]
