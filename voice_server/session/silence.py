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


def no_answer_note(idle_ms: float) -> str:
    """The note of an outbound call where nobody has said anything yet: the
    agent speaks first.  Told "[the caller said nothing for 6 s]" with nothing
    before it, the default brain read the note aloud ("The caller said nothing
    for six seconds.") in 3 of 3 calls; asked to greet, it greeted and said why
    it called or how it could help in 3 of 3 (docs/PERFORMANCE.md, "The message
    an answering machine records")."""
    return (f"[nobody has spoken yet, {idle_ms / 1000:g} s after the call connected: "
            "greet the caller and say why you called or how you can help]")


class SilenceWatch:
    """When the caller's silence runs out, the check-ins since they last spoke,
    and the goodbye in progress.

    The deadline counts only while nobody speaks: a reply that starts, a sound
    from the caller or a key stops it, and a reply heard to its end sets it
    again.  A sound that turns out to be noise (an empty transcript) is not an
    answer, so the deadline it stopped is held and put back."""

    def __init__(self, hang_up_after: Optional[int] = None) -> None:
        self.hang_up_after = hang_up_after  # None or 0: never hang up
        self.check_ins = 0  # idle timeouts answered since the caller last spoke
        self.goodbye_id: Optional[str] = None  # the goodbye response, once asked for
        self.deadline: Optional[float] = None  # session ms when the silence runs out; None: not counting
        self._held: Optional[float] = None     # the deadline a sound stopped, until it proves words

    def caller_spoke(self) -> None:
        """Words or keys: the caller is there, the count starts again."""
        self.check_ins = 0
        self.goodbye_id = None
        self._held = None

    def count_until(self, at_ms: Optional[float]) -> None:
        """Start (or, with None, stop) counting the silence toward ``at_ms``."""
        self.deadline = at_ms

    def postpone(self, at_ms: float) -> None:
        """Move a running deadline (the reply plays longer than first thought)."""
        if self.deadline is not None:
            self.deadline = at_ms

    def hold(self) -> None:
        """The caller made a sound: stop counting, keeping the deadline in case it is noise."""
        self._held, self.deadline = self.deadline, None

    def noise(self, reply_active: bool) -> None:
        """The sound had no words: the silence goes on counting from where it
        was, unless a reply started meanwhile (it sets its own deadline)."""
        if self._held is not None and not reply_active:
            self.deadline = self._held
        self._held = None

    def due(self, now_ms: float) -> bool:
        return self.deadline is not None and now_ms >= self.deadline

    def timed_out(self) -> bool:
        """Count one more silence; True when this one gets the goodbye."""
        self.check_ins += 1
        return bool(self.hang_up_after) and self.check_ins > self.hang_up_after


__all__ = ["SilenceWatch", "silence_note", "no_answer_note", "GOODBYE_GRACE_MS"]
