"""Deciding whether the caller really interrupts the reply.  Part of
:class:`voice_server.session.Session` (core.py), split out by section.

The reply pauses at the caller's first speech frame (listen ``onset``,
turns.py).  When the listen stage confirms speech (``speech_started``) while
the reply is playing, the session does not cancel at once: it keeps the
reply paused, holds back ``input_audio_buffer.speech_started`` and decides:

* **interruption** - the early transcript (listen ``interim`` / ``partial``,
  or the utterance's final) has a word that is not a backchannel (two, in a
  transcript taken while the speech goes on, unless the one is in
  ``interruption_words``: "stop", "wait"), or the
  speech goes on for ``InterruptionSettings.decide_after_ms`` without a
  pause before any early transcript came (``backchannel_max_ms`` when one had only
  backchannel words, one word or none: a drawn-out "mm hmm"); words count
  only from a sound ``min_interruption_ms`` (500 ms) long, as LiveKit's
  ``min_interruption_duration``, unless they start with
  ``interruption_words`` (Whisper reads a 400 ms flat "yeah" as "You had."):
  ``speech_started`` goes out with the utterance's own start, the
  reply is cancelled and truncated where the listener is (as barge-in always
  did), and the utterance becomes the next user turn;
* **backchannel or noise** - the speaker pauses after a sound shorter than
  ``min_interruption_ms``, or the words so far are
  none ("[cough]") or only backchannel phrases ("mm hmm", "yeah"), as
  transcribed or in the listen stage's ``alternative`` reading of a short
  utterance (Whisper may write "uh huh" as "I heard that."): the same
  reply resumes where it paused (``voice_agent.output_audio.resumed``) and
  the utterance is forgotten: no ``speech_started``, no user item, no
  response, as if the caller had said nothing.  Should the same utterance
  go on ("yeah, but ..."), the reply pauses again and the decision starts
  over.

A client therefore sees, for a backchannel, only ``paused`` / ``resumed``,
and for an interruption the usual Realtime sequence, a few hundred ms later
than the plain Realtime behaviour would give it.  The whole decision is off
with ``InterruptionSettings.resume_backchannels: false``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .backchannel import InterruptionSettings, only_backchannel, starts_with, word_count
from .commands import Command

# speech_paused comes after 64 ms of silence plus the trip from the listen
# stage: speech is only "going on" once this much more has passed
PAUSE_NOTICE_MS = 120.0
# the final of an utterance dropped as a backchannel, in the queue of finals
DROPPED = ""


@dataclass
class _Deciding:
    item_id: str
    audio_start_ms: int
    since_ms: float                 # input position the speech runs from
    speaker_paused: bool = False
    paused_end_ms: int | None = None    # where the speech paused (listen speech_paused)
    words: bool = False             # two words or more, not backchannels, heard mid-speech
    backchannel: bool = False       # decided: the reply goes on, the utterance is not a turn
    extended: bool = False          # early words none, backchannels or one: may go on longer
    stopped_end_ms: int | None = None   # the utterance ended before the decision
    peeked: bool = False            # the words so far were heard once already


@dataclass
class InterruptionState:
    """What deciding interruptions works with; the session holds one
    (``Session._interruption``) and this module writes it."""

    # InterruptionSettings' words, parsed once: those that let the reply go on
    # ("mm hmm", "yeah") and those that take the turn even alone ("stop", "wait")
    backchannel_phrases: frozenset[tuple[str, ...]]
    interruption_phrases: frozenset[tuple[str, ...]]
    # the utterance heard over a reply: set at its speech_started (or a word that
    # takes the turn alone), None again once it interrupts or is let go
    deciding: _Deciding | None = None

    @classmethod
    def from_settings(cls, settings: InterruptionSettings) -> InterruptionState:
        return cls(settings.phrases(), settings.interruption_phrases())


class Interruptions:
    @property
    def agent_speaking(self) -> bool:
        """The caller hears a reply now: the runner tells the listen stage
        (voice_contract.AGENT_SPEAKING), which spends early readings by it."""
        return self._agent_speaking()

    def _agent_speaking(self) -> bool:
        """A reply is being heard: its audio started and it is active."""
        r = self._responses.active
        return r is not None and r.audio and (self._pacer.released_ms > 0 or self.output_paused)

    def _start_deciding(self, audio_start_ms: int, now_ms: float) -> list[Command]:
        self._turn.speech_item = self.ids.new("item")
        self._turn.speech_start_ms = audio_start_ms
        self._silence.count_until(None)
        self._interruption.deciding = _Deciding(self._turn.speech_item, audio_start_ms,
                                                float(audio_start_ms))
        out = [] if self.output_paused else self.pause_output(now_ms)
        self._turn.paused_for_onset = False     # onset_dropped no longer resumes: we decide
        return out

    def _takes_turn(self, text: str, alternative: str) -> bool:
        """Either reading starts with ``interruption_words`` (400 ms of a flat
        "stop and ...": "Open." as heard, "Stop and..." read again)."""
        phrases = self._interruption.interruption_phrases
        return starts_with(text, phrases) or starts_with(alternative, phrases)

    def _only_backchannel(self, text: str, alternative: str) -> bool:
        """The words, or the listen stage's other reading of a short sound, are
        only backchannels; words that take the turn ("stop") always count."""
        if self._takes_turn(text, alternative):
            return False
        phrases = self._interruption.backchannel_phrases
        return only_backchannel(text, phrases) or \
            bool(alternative) and only_backchannel(alternative, phrases)

    def _words_heard(self, text: str, paused: bool, now_ms: float,
                     alternative: str = "") -> list[Command]:
        """An early transcript of the deciding utterance (``paused``: the
        speaker is silent after these words)."""
        d = self._interruption.deciding
        if d is None or d.backchannel:
            return []
        if not paused:
            # Only the first: the listen stage's later ones (asr_peek_every_ms,
            # for the reply's prompt) come without the second reading of a
            # short sound, which the first has ("mm hmm" 900 ms in: "MMH and M")
            if d.peeked:
                return []
            d.peeked = True
        if not self._only_backchannel(text, alternative):
            if self._takes_turn(text, alternative):
                return self._interrupt(now_ms)
            if paused or word_count(text) > 1:
                # Words, but a sound shorter than min_interruption_ms is taken
                # for a backchannel misheard ("yeah": "You had."): at a pause the
                # length decides (unknown yet: the final does); while the
                # speech goes on, _check_decision does at that length.
                if paused and d.paused_end_ms is not None:
                    if self._long_enough(d.paused_end_ms):
                        return self._interrupt(now_ms)
                    return self._let_reply_go_on(now_ms)    # going on decides again
                d.words = d.words or not paused
                return []
            # One word of speech cut while it goes on is as often a fragment
            # misheard ("mm hmm" 400 ms in: "NME.") as a word: unless it is one
            # that takes the turn alone ("Stop."), the pause decides.
        # no word yet, only backchannels or one unsure word: the speech may go on longer
        d.extended = True
        if paused and d.speaker_paused:
            return self._let_reply_go_on(now_ms)
        return []

    def _long_enough(self, end_ms: int) -> bool:
        """The deciding utterance, ended (or paused) at ``end_ms``, is long
        enough to take the turn."""
        start_ms = self._interruption.deciding.audio_start_ms
        return end_ms - start_ms >= self.interruptions.min_interruption_ms

    def _speaker_paused(self, paused: bool, now_ms: float,
                        audio_end_ms: int | None = None) -> list[Command]:
        d = self._interruption.deciding
        if d is None:
            return []
        d.speaker_paused = paused
        d.paused_end_ms = audio_end_ms if paused else None
        if paused or not d.backchannel:
            return []
        # "yeah, but ...": the same utterance goes on; decide again
        d.backchannel = d.extended = d.words = False
        d.since_ms = self.input_ms
        return [] if self.output_paused else self.pause_output(now_ms)

    def _check_decision(self, now_ms: float) -> list[Command]:
        """Called as input arrives: speech that went on long enough interrupts;
        a reply that ended meanwhile leaves an ordinary user turn."""
        d = self._interruption.deciding
        if d is None or d.backchannel:
            return []
        if self._responses.active is None:
            return self._interrupt(now_ms)
        if d.speaker_paused or d.stopped_end_ms is not None:
            return []
        s = self.interruptions
        limit = s.min_interruption_ms if d.words else \
            s.backchannel_max_ms if d.extended else s.decide_after_ms
        if self.input_ms - d.since_ms >= limit + PAUSE_NOTICE_MS:
            return self._interrupt(now_ms)
        return []

    def _deciding_stopped(self, audio_end_ms: int) -> list[Command]:
        """speech_stopped of the deciding utterance: a backchannel is dropped;
        otherwise its final decides (it is not committed before)."""
        d = self._interruption.deciding
        if d.backchannel:
            self._forget_utterance(audio_end_ms)
            self._turn.awaiting_final.append(DROPPED)
        else:
            d.stopped_end_ms = audio_end_ms
        return []

    def _deciding_final(self, text: str, start_ms: int, end_ms: int,
                        now_ms: float, alternative: str = "") -> list[Command]:
        d = self._interruption.deciding
        if d.stopped_end_ms is None:       # a final without its stop: take it as both
            d.stopped_end_ms = end_ms
        short = not self._long_enough(d.stopped_end_ms) and not self._takes_turn(text, alternative)
        if self._responses.active is not None and \
                (short or self._only_backchannel(text, alternative)):
            out = self._let_reply_go_on(now_ms)
            self._forget_utterance(d.stopped_end_ms)
            return out
        return self._interrupt(now_ms) + self._final(text, start_ms, end_ms, now_ms)

    def _interrupt(self, now_ms: float) -> list[Command]:
        """A real interruption: what barge-in always did, with the utterance's start."""
        d = self._interruption.deciding
        self._interruption.deciding = None
        started = self._send("input_audio_buffer.speech_started", audio_start_ms=d.audio_start_ms,
                             item_id=d.item_id)
        out = self._cancel_active("turn_detected", now_ms, flush=True, between=[started]) \
            if self._responses.active is not None else [started]
        if d.stopped_end_ms is not None:
            out += self._commit_speech(d.stopped_end_ms)
        return out

    def _let_reply_go_on(self, now_ms: float) -> list[Command]:
        self._interruption.deciding.backchannel = True
        return self.resume_output(now_ms)

    def _forget_utterance(self, audio_end_ms: int) -> None:
        self._turn.partial.pop(self._turn.speech_item, None)
        self._turn.speech_item = None
        self._interruption.deciding = None
        self._buffer.drop_until_ms(audio_end_ms)

    def _dropped_final(self) -> bool:
        """The next final is a backchannel's: swallow it."""
        if self._turn.awaiting_final and self._turn.awaiting_final[0] == DROPPED:
            self._turn.awaiting_final.popleft()
            self._turn.partial.pop(DROPPED, None)
            return True
        return False


__all__ = ["Interruptions"]
