"""One caller's utterance stream: audio frames and their VAD scores in, turn events out.

A conversation's state on the listen stage lives in one ``UtteranceStream``:
its resampler and denoiser, its VAD recurrence, and the utterance state
machine (``StreamState``: idle, pending onset, speech) with what the current
pause has gathered (words, verdicts, readings; turn_wait.py) and when early
readings are due.  It starts no thread and loads no model: it is handed its
VAD state, its recogniser (utterance_asr.py) and the hooks that submit
end-of-turn jobs, and the stage executor (executor.py) scores every stream's
frames in one batch and feeds results back.  Kept apart from the executor so
that the turn-taking rules read alone and unit tests drive them without
models (tests/models/listen/test_peek_policy.py, test_text_turn_end.py).
"""

from __future__ import annotations

import enum
import math
from collections import deque

import numpy as np
import soxr

from runtime.models.listen.denoise import make_denoiser
from runtime.models.listen.language import ENGLISH
from runtime.models.listen.line_noise import LineNoise
from runtime.models.listen.silero_vad import FRAME_SAMPLES, SileroVAD
from runtime.models.listen.turn_text import asks_the_agent, looks_unfinished
from runtime.models.listen.turn_wait import TEXT_CUT_P, TEXT_END_P, Pause
from runtime.models.listen.utterance_asr import SpeculativeSegments, StreamingDecoder
from runtime.models.listen.vad_params import VadParams
from runtime.models.listen.voice_lock import (AFTER_OTHER_S, HOP_S, WINDOW_S, Verdict, VoiceAsk,
                                             VoiceLock, is_last)
from runtime.models.voice_contract import (INTERIM, LISTEN_RATE_HZ, PARTIAL, TURN_LIKELY_OVER,
                                           onset_dropped_event, onset_event, partial_event,
                                           speech_paused_event, speech_resumed_event,
                                           speech_started_event, speech_stopped_event,
                                           turn_continues_event)

# A pending onset survives short dips (plosives, pauses between syllables) but
# not a real pause: a click followed by silence must not later be glued to
# the start of genuine speech.
PENDING_GAP_MS = 160
# A dropped sound this long may be one word ("Stop.", "No."): it is read, and
# onset_dropped carries its words (a server decides if they interrupt a reply).
BLIP_WORD_MS = 150
# silero's authors recommend ending speech on a lower threshold than the one
# that starts it, so one word's energy dip does not split an utterance.
HYSTERESIS = 0.15
SMART_TURN_WINDOW_S = 8.0      # the model looks at the last 8 s of the turn
# Smart Turn needs a little silence after the words to hear a finished turn
# (flite's "what is the capital of france": 0.25 at 0 ms, 0.71 at 100 ms, 0.89
# at 150 ms); asked later, cut speech starts to sound finished too.
TURN_ASK_MS = 128.0
# Where the chat model reads the words (turn_text_model), Smart Turn is asked
# once the reading says it matters (UtteranceStream._verdict_matters), or after
# this much silence if the words or their reading are not in by then.
VERDICT_LATE_MS = 300.0
SEMANTIC_PAUSE_MS = 32.0       # recognition starts at the first silent frame: the wait may be 150-250 ms
PAUSE_EVENT_MS = 64.0          # speech_paused after this much silence (a server deciding an interruption)
# With a voice enrolled, an utterance is judged after this much of it (from its
# onset, lead-in excluded): the first 0.7 s of a person's speech tells them
# apart (voice_lock.py); a shorter one is judged when it pauses.  An utterance
# judged someone else's is judged again on sliding windows while it goes on
# (the caller talking over another voice: voice_lock.py).
VOICE_CHECK_MS = 700.0
NARROWBAND_HZ = 8000           # a stream at this rate or under is a telephone line (voice_lock.py)


class StreamState(enum.Enum):
    """Where a stream is in an utterance; each has its per-frame method in
    ``UtteranceStream`` (``_idle_frame``, ``_pending_frame``, ``_speech_frame``)."""

    IDLE = "idle"          # no utterance: waiting for an onset
    PENDING = "pending"    # an onset, not yet min_speech_ms of speech
    SPEECH = "speech"      # a confirmed utterance, until the wait after it ends it
    CHECKING = "checking"  # speech by the VAD, waiting for the voice lock's verdict (no event yet)
    FOREIGN = "foreign"    # someone else's speech (or a noisy room's): ignored until a pause


class UtteranceStream:
    """All per-conversation state: resampler, VAD recurrence, utterance state machine.

    Per chunk the caller passes on the server's ``AGENT_SPEAKING`` (``hear_agent``),
    cuts the audio into VAD frames (``frames``), scores them with this stream's
    ``vad`` (batched with other streams: ``SileroVAD.probs``) and runs the state
    machine over them (``advance``), which returns the chunk's events.  What the
    jobs the stream submitted (recognition through ``utt``, verdicts through
    ``judge``, readings through ``reader``) return goes back in through
    ``on_result``, which returns the events it makes.
    """

    def __init__(self, p: VadParams, vad: SileroVAD, utt: SpeculativeSegments | StreamingDecoder,
                 pause_ms: float = 0.0, judge=None, peek_ms: float = 0.0, reader=None,
                 peek_every_ms: float = 0.0, voice=None) -> None:
        self.p = p
        # voice lock (p.voice_lock): ``voice(tag, audio)`` submits a speaker
        # embedding job; what the vectors mean is the lock's (voice_lock.py)
        self.voice = voice
        self.lock = VoiceLock() if voice is not None else None
        self.other_end: int | None = None              # where the last utterance judged someone else's ended
        self.voice_asked = False                       # this utterance's verdict was asked
        self.voice_gen = 0                             # numbers the verdicts asked (a late one is stale)
        self.voice_next_ms = VOICE_CHECK_MS            # this utterance's next window is asked then
        self.voice_windows = 0                         # windows of this utterance asked so far
        self.voice_counts = {"voice_caller": 0, "voice_other": 0, "voice_enrolled": 0,
                             "voice_errors": 0, "voice_narrowband": 0}
        self.peek_ms = peek_ms        # early transcript after this much speech (0: none)
        self.peek_every_ms = peek_every_ms   # and again this often while it goes on (0: once)
        self.next_peek_ms = peek_ms
        self.agent_speaking: bool | None = None   # the server's AGENT_SPEAKING param (None: unsaid)
        self.spoken_over = False      # the agent spoke since this utterance's onset
        # peeks run, and peeks that could change nothing (_peek_matters) and were not
        self.peeks = {"peeks_asked": 0, "peeks_skipped": 0}
        self.last_partial = ""
        self.pause = Pause()          # what this silence run has gathered (turn_wait.py)
        self.judge = judge            # submits an end-of-turn verdict job (semantic mode)
        self.reader = reader          # submits a text end-of-turn job (semantic mode, optional)
        self.vad = vad
        self.utt = utt
        self.resampler = (soxr.ResampleStream(p.sample_rate, LISTEN_RATE_HZ, 1, dtype="float32")
                          if p.sample_rate != LISTEN_RATE_HZ else None)
        self.denoiser = make_denoiser(p.noise_reduction)  # before VAD and ASR (None: off)
        self.line = LineNoise()                        # how noisy the line sounds (line_noise.py)
        self.pad_samples = int(p.prefix_padding_ms * LISTEN_RATE_HZ / 1000)
        self.neg_threshold = max(0.01, p.threshold - HYSTERESIS)
        self.pending = np.zeros(0, dtype=np.float32)   # 16 kHz samples short of a frame
        self.preroll = np.zeros(0, dtype=np.float32)   # recent audio before a possible onset
        self.pos = 0                                   # 16 kHz samples already framed
        self.state = StreamState.IDLE
        self.onset = 0                                 # sample index of the utterance's onset
        self.speech_frames = 0
        self.silence_start: int | None = None          # first sample of the current silent run
        self.held_partial: str | None = None           # partial seen before speech was confirmed
        self.utterances = 0
        # silence before recognition starts (sooner in semantic mode: the wait is short)
        self.pause_ms = min(pause_ms, SEMANTIC_PAUSE_MS) if p.semantic else pause_ms
        self.paused = False                            # recognition started for this silence
        self.pause_said = False                        # speech_paused sent for this silence
        self.turn_audio: deque[np.ndarray] = deque(maxlen=int(SMART_TURN_WINDOW_S * LISTEN_RATE_HZ
                                                              // FRAME_SAMPLES))
        # the utterance's speech frames alone (no lead-in, no pauses): what the
        # voice lock embeds, since silence embeds alike for everyone and lifts
        # another person's score toward the caller's (voice_lock.py)
        self.voiced_audio: deque[np.ndarray] = deque(maxlen=self.turn_audio.maxlen)
        self.verdicts = {"complete": 0, "incomplete": 0, "text_end": 0, "text_goes_on": 0,
                         "text_cut": 0}
        self.likely_over = False                       # turn_likely_over sent for this pause
        self.hear_line(p.sample_rate)                  # audio sent at a telephone line's rate

    @staticmethod
    def _ms(samples: int) -> int:
        return int(round(samples * 1000 / LISTEN_RATE_HZ))

    def _end_utterance(self, end_sample: int, out: list) -> None:
        """Close a confirmed utterance: stopped first, so the client can react before the text is in."""
        end_ms = max(self._ms(end_sample), self._ms(self.onset))
        out.append(speech_stopped_event(end_ms))
        out += self.utt.end(self._ms(self.onset), end_ms)
        self._offer_voice()
        self.utterances += 1
        self._to_idle()

    def _to_idle(self) -> None:
        self.utt.drop()            # a blip's words are not wanted (no-op after end())
        self.state = StreamState.IDLE
        self.silence_start = None
        self.likely_over = False
        self._forget_verdict()
        self.turn_audio.clear()
        self.voiced_audio.clear()
        self.paused = False
        self.pause_said = False
        self.next_peek_ms = self.peek_ms
        self.spoken_over = False
        self.last_partial = ""
        self.speech_frames = 0
        self.held_partial = None

    # -- per frame -------------------------------------------------------
    def _frame(self, frame: np.ndarray, prob: float, out: list) -> None:
        self.line.hear(frame)
        start = self.pos
        end = start + FRAME_SAMPLES
        self.pos = end
        if self.state is StreamState.IDLE:
            self._idle_frame(frame, prob, start, out)
            return
        if self.state is StreamState.FOREIGN:
            self._foreign_frame(prob, start, end)
            return
        self.utt.feed(frame)
        self.turn_audio.append(frame)
        if prob >= self.neg_threshold:
            self.voiced_audio.append(frame)
            self._voiced_frame(out)
        elif self.silence_start is None:
            self.silence_start = start
        silent_ms = 0.0 if self.silence_start is None else (end - self.silence_start) * 1000 / LISTEN_RATE_HZ
        if self.state is StreamState.PENDING:
            self._pending_frame(silent_ms, out)
        elif self.state is StreamState.CHECKING:
            self._checking_frame(end, silent_ms)
        else:
            self._speech_frame(end, silent_ms, out)

    def _idle_frame(self, frame: np.ndarray, prob: float, start: int, out: list) -> None:
        """No utterance: a frame over the threshold is an onset; the rest is kept
        as the next onset's lead-in."""
        if prob < self.p.threshold:
            keep = self.pad_samples
            if keep:
                self.preroll = np.concatenate([self.preroll, frame])[-keep:]
            return
        self.state = StreamState.PENDING
        self.onset = start
        self.spoken_over = bool(self.agent_speaking)
        self.speech_frames = 1
        self.silence_start = None
        self.held_partial = None
        # Said at once, before min_speech_ms confirms it: a server playing a
        # reply can pause it within a frame of the caller starting to talk.
        out.append(onset_event(self._ms(self.onset)))
        # Prefix padding gives the recogniser the quiet lead-in it was trained on
        # and the soft consonant silero scores low.
        self.utt.begin(np.concatenate([self.preroll, frame]) if self.preroll.size else frame)
        if self.preroll.size:
            self.turn_audio.append(self.preroll)
        self.turn_audio.append(frame)
        self.voiced_audio.append(frame)
        self.preroll = np.zeros(0, dtype=np.float32)
        self._maybe_confirm(out)

    def _voiced_frame(self, out: list) -> None:
        """A frame of speech inside an utterance: a pause it ends is taken back."""
        self.speech_frames += 1
        if self.silence_start is None:
            return
        self.silence_start = None
        self._forget_verdict()
        if self.likely_over:
            self.likely_over = False
            out.append(turn_continues_event())
        if self.paused:
            self.paused = False
            self.utt.resume()
        if self.pause_said:
            self.pause_said = False
            out.append(speech_resumed_event())

    def _pending_frame(self, silent_ms: float, out: list) -> None:
        """An onset not yet confirmed: min_speech_ms of speech makes it an
        utterance, a gap before that drops it."""
        if silent_ms >= min(PENDING_GAP_MS, max(self.p.silence_duration_ms, 1.0)):
            # too short to be speech (a click, a cough): no turn; but a sound
            # as long as a word is read first ("Stop." said over a reply)
            sound_ms = (self.silence_start - self.onset) * 1000 / LISTEN_RATE_HZ
            if sound_ms >= BLIP_WORD_MS:
                out += self.utt.blip(self._ms(self.onset), self._ms(self.silence_start))
            else:
                out.append(onset_dropped_event())
            self._to_idle()
            return
        self._maybe_confirm(out)

    def _speech_frame(self, end: int, silent_ms: float, out: list) -> None:
        """A confirmed utterance: during a pause the verdicts are asked and
        recognition starts; while it goes on, early readings; the wait the
        evidence allows ends it."""
        p = self.p
        silent = self.silence_start is not None
        if silent:
            self._maybe_ask(silent_ms)
            if not self.paused and silent_ms >= self.pause_ms:
                self.paused = True
                self.utt.pause()     # recognise now; the silence window may confirm the turn
                if not isinstance(self.utt, SpeculativeSegments) and self.last_partial:
                    self._heard_words(self.last_partial)
            if not self.pause_said and silent_ms >= PAUSE_EVENT_MS:
                self.pause_said = True
                out.append(speech_paused_event(self._ms(self.silence_start)))
        spoken_ms = (end - self.onset) * 1000 / LISTEN_RATE_HZ
        if self.peek_ms and not silent and spoken_ms >= self.next_peek_ms:
            self._peek(spoken_ms)
        if silent and silent_ms >= p.wait_ms(self.pause):
            self._end_utterance(self.silence_start, out)
        elif (end - self.onset) >= p.max_utterance_s * LISTEN_RATE_HZ:
            # A monologue (or endless noise) still has to yield transcripts periodically.
            self._end_utterance(end, out)
            self.preroll = np.zeros(0, dtype=np.float32)
            if self.line.judge():
                # max_utterance_s of sound without one pause, on a line that
                # sounds noisy, is the room's talk (people breathe): no new
                # turn opens, and none barges in on the reply to this one,
                # until it stops.  A clean line opens the next turn at once.
                self.state = StreamState.FOREIGN

    def _maybe_confirm(self, out: list) -> None:
        if self.speech_frames * FRAME_SAMPLES * 1000 / LISTEN_RATE_HZ >= self.p.min_speech_ms:
            if self.lock is not None and self.lock.enrolled:
                self.state = StreamState.CHECKING    # speech_started waits for the verdict
                self.voice_asked = False
                self.voice_next_ms = VOICE_CHECK_MS
                self.voice_windows = 0
                return
            self._confirm(out)

    def _confirm(self, out: list) -> None:
        """The utterance is the caller's speech: a turn opens."""
        self.state = StreamState.SPEECH
        out.append(speech_started_event(self._ms(self.onset)))
        if self.held_partial:
            out.append(partial_event(self.held_partial))
        self.held_partial = None

    # -- voice lock ----------------------------------------------------------
    @property
    def voiced_s(self) -> float:
        return self.speech_frames * FRAME_SAMPLES / LISTEN_RATE_HZ

    def _checking_frame(self, end: int, silent_ms: float) -> None:
        """Speech the VAD confirmed, not yet known to be the caller's: the verdict
        is asked once enough of it is heard, or when it pauses (a short word);
        while windows are judged someone else's and it goes on, the latest
        window again every hop (voice_lock.py)."""
        if self.voice_asked:
            return
        spoken_ms = (end - self.onset) * 1000 / LISTEN_RATE_HZ
        paused = silent_ms >= PENDING_GAP_MS
        if spoken_ms >= self.voice_next_ms or paused:
            self.voice_windows += 1
            self.voice_asked = True
            self.voice_gen += 1
            self.voice_next_ms = spoken_ms + HOP_S * 1000
            audio = np.concatenate(list(self.voiced_audio))
            if self.voice_windows > 1:     # the first hears all the speech there is
                audio = audio[-int(WINDOW_S * LISTEN_RATE_HZ):]
            after_other = self.other_end is not None and \
                (self.onset - self.other_end) / LISTEN_RATE_HZ < AFTER_OTHER_S
            self.voice(VoiceAsk(self.voice_gen, self.voiced_s, is_last(spoken_ms / 1000, paused),
                                self.voice_windows > 1, after_other), audio)

    def _foreign_frame(self, prob: float, start: int, end: int) -> None:
        """Someone else's utterance: nothing is read or said until it pauses."""
        if prob >= self.neg_threshold:
            self.silence_start = None
            return
        if self.silence_start is None:
            self.silence_start = start
        if (end - self.silence_start) * 1000 / LISTEN_RATE_HZ >= PENDING_GAP_MS:
            self.other_end = self.silence_start
            self._to_idle()

    def _on_voice(self, ask: VoiceAsk, value) -> list:
        """The verdict on the utterance being checked (a stale one is ignored)."""
        if self.state is not StreamState.CHECKING or ask.gen != self.voice_gen:
            return []
        try:
            if isinstance(value, BaseException):
                raise ValueError(str(value))
            verdict = self.lock.verdict(value, float(ask.voiced_s), later_window=ask.later_window,
                                        after_other=ask.after_other)
        except ValueError:
            self.voice_counts["voice_errors"] += 1     # fail open: a caller is never locked out
            verdict = Verdict.CALLER
        out: list = []
        if verdict is Verdict.CALLER:
            self.voice_counts["voice_caller"] += 1
            self._confirm(out)
        elif not ask.last:
            self.voice_asked = False        # not this window: the next one, while it goes on
        else:
            self.voice_counts["voice_other"] += 1
            out.append(onset_dropped_event())     # a paused reply resumes; no turn opened
            self._to_idle()
            self.state = StreamState.FOREIGN
        return out

    def _offer_voice(self) -> None:
        """While no voice is enrolled, each finished utterance is a candidate."""
        if self.lock is not None and not self.lock.enrolled and self.voiced_audio:
            self.voice(("enrol", 0, self.voiced_s), np.concatenate(list(self.voiced_audio)))

    def _on_enrol(self, tag: tuple, value) -> None:
        try:
            if isinstance(value, BaseException):
                raise ValueError(str(value))
            if self.lock.offer(value, float(tag[2])):
                self.voice_counts["voice_enrolled"] += 1
        except ValueError:
            self.voice_counts["voice_errors"] += 1

    def hear_line(self, rate) -> None:
        """The caller's line (``LINE_RATE``, or the stream's own rate): voices on a
        telephone line's 8 kHz audio score closer together, so the lock has
        higher bars there (voice_lock.py); the counters say so."""
        if self.lock is None or not isinstance(rate, (int, float)) or rate > NARROWBAND_HZ:
            return
        self.lock.narrowband = True
        self.voice_counts["voice_narrowband"] = 1

    def hear_agent(self, speaking: bool | None) -> None:
        """The server's word (``AGENT_SPEAKING``) on whether the caller hears a reply now."""
        self.agent_speaking = None if speaking is None else bool(speaking)
        if speaking and self.state is not StreamState.IDLE:
            self.spoken_over = True

    def _peek(self, spoken_ms: float) -> None:
        """An early reading is due: the words so far, while they go on.  A
        server deciding an interruption uses the first; the think stage and the
        chat model reading the words decode the later ones ahead of the pause
        (only the last words are left then).  The later ones wait for a
        recogniser with nothing else to do for anyone, so they never delay a
        pause's transcript (theirs or another caller's); the first is queued
        at once, behind every transcript (asr_thread.Reading)."""
        first = self.next_peek_ms == self.peek_ms
        if not first:
            thread = getattr(self.utt, "thread", None)
            if thread is None or not thread.idle:
                return                 # asked again at the next frame
        self.next_peek_ms = spoken_ms + self.peek_every_ms if self.peek_every_ms else math.inf
        if self._peek_matters(first):
            self.peeks["peeks_asked"] += 1
            self.utt.peek()
        else:
            self.peeks["peeks_skipped"] += 1

    def _peek_matters(self, first: bool) -> bool:
        """Where the server says whether a reply plays, a reading runs only
        where it can change something: the first when the agent spoke since
        the onset (backchannel or interruption?), the later ones while it does
        not speak (the session readies the next reply's prompt with them only
        while no reply is active; an interruption cancels the reply, and the
        later readings come back)."""
        if self.agent_speaking is None:
            return True
        return self.spoken_over if first else not self.agent_speaking

    # -- end-of-turn model ----------------------------------------------------
    def _maybe_ask(self, silent_ms: float) -> None:
        if self.p.semantic and self.judge is not None and not self.pause.asked \
                and silent_ms >= TURN_ASK_MS and self._verdict_matters(silent_ms):
            self.pause.asked = True
            self._ask_verdict()

    def _verdict_matters(self, silent_ms: float) -> bool:
        """Smart Turn only where its verdict can change the wait: on 2 cores its
        ~60 ms slow the prepared reply's prompt, which the caller waits for.
        Words that read unfinished or cut wait ``incomplete`` whatever it
        hears, and words the chat model reads as a whole message end halfway
        from ``complete`` to ``likely`` without it (with it, after ``complete``:
        on a slow CPU the reply is not ready sooner).  Until the reading is in
        it waits for it, up to ``VERDICT_LATE_MS`` of silence (a busy stage:
        the words are late); words with nothing to read (none) do not wait."""
        if self.reader is None or not self._english():
            return True
        heard = self.pause
        if heard.words is False:
            return False
        if heard.text_p is None:
            return silent_ms >= VERDICT_LATE_MS or (heard.words is not None and not heard.read)
        return not (heard.words and (heard.text_p < TEXT_CUT_P or heard.text_p >= TEXT_END_P))

    def _ask_verdict(self) -> None:
        # tagged with this silence run's number, as the reading is: what comes
        # back after the speaker went on is for a silence that ended
        self.judge(("turn", self.pause.gen), np.concatenate(list(self.turn_audio)))

    def _forget_verdict(self) -> None:
        self.pause = Pause(gen=self.pause.gen + 1)    # a new silence run

    def _english(self) -> bool:
        """The words are English, or their language is not said (an English-only
        recogniser, pocketsphinx): the English rules (turn_text.py) and the
        English chat model read them.  Words in another language are not
        judged: Smart Turn, which hears 23 languages, decides alone."""
        return getattr(self.utt, "heard_language", None) in (None, ENGLISH)

    def _heard_words(self, text: str) -> None:
        self.pause.text = text
        if not self._english():
            self.pause.words, self.pause.question = None, False
            return
        self.pause.words = not looks_unfinished(text)
        self.pause.question = asks_the_agent(text)   # read once a pause, not every frame of it
        self._maybe_read()

    def _maybe_read(self) -> None:
        """Wherever the words read finished, as soon as they are in: a reading
        of "cut" overrules any verdict, and Smart Turn's comes ~30 ms after
        the words, too late to wait for (the reading would miss a sure
        verdict's short wait)."""
        if self.reader is not None and not self.pause.read and self.pause.words and self.pause.text:
            self.pause.read = True
            self.reader(("words", self.pause.gen), self.pause.text)

    # -- recognition results ------------------------------------------------
    def on_result(self, tag, value) -> list:
        if isinstance(tag, VoiceAsk):
            return self._on_voice(tag, value)
        if isinstance(tag, tuple) and tag[0] == "enrol":
            self._on_enrol(tag, value)
            return []
        if isinstance(tag, tuple) and tag[0] == "turn":
            if tag[1] == self.pause.gen and not isinstance(value, BaseException):
                self.pause.verdict, self.pause.verdict_p = value >= 0.5, float(value)
                self.verdicts["complete" if self.pause.verdict else "incomplete"] += 1
            return []
        if isinstance(tag, tuple) and tag[0] == "ahead":
            return []     # a reading of the words so far: it only readied the model's cache
        if isinstance(tag, tuple) and tag[0] == "words":
            if tag[1] == self.pause.gen and not isinstance(value, BaseException):
                # nan: no words to read, neither whole nor cut (``unsure``)
                self.pause.text_p = math.nan if value is None else float(value)
                self.verdicts["text_end" if self.pause.text_p >= TEXT_END_P else
                              "text_cut" if self.pause.text_p < TEXT_CUT_P else "text_goes_on"] += 1
                if self.state is StreamState.SPEECH and self.silence_start is not None:
                    self._maybe_ask((self.pos - self.silence_start) * 1000 / LISTEN_RATE_HZ)
            return []
        out = []
        in_pause = self.state is StreamState.SPEECH and self.silence_start is not None and self.paused
        for ev in self.utt.result(tag, value):
            if ev["type"] == PARTIAL:
                self.last_partial = ev["text"]
                if self.state is not StreamState.SPEECH:
                    self.held_partial = ev["text"]    # not speech yet: say it once confirmed
                    continue
                if in_pause:
                    self._heard_words(ev["text"])
                out.append(ev)
            elif ev["type"] == INTERIM:
                if ev["paused"] and in_pause:
                    self._heard_words(ev["text"])
                elif ev["paused"] or self.state is not StreamState.SPEECH:
                    continue     # the pause it was for is over, or the utterance is
                elif self.reader is not None and self.silence_start is None and self._english():
                    self.reader(("ahead", self.pause.gen), ev["text"])
                out.append(ev)
            elif ev["type"] == TURN_LIKELY_OVER:
                # Prepared even when the model heard "unfinished": the words read
                # finished, so the turn ends after the ``unsure`` wait at the latest.
                if in_pause and self.pause.words is not False:
                    self.likely_over = True
                    out.append(ev)
            else:
                out.append(ev)
        return out

    # -- per chunk -------------------------------------------------------
    def frames(self, audio: np.ndarray, final: bool) -> list[np.ndarray]:
        """Resample and cut into whole VAD frames; the remainder waits for the next chunk."""
        if self.resampler is not None and (audio.size or final):
            audio = self.resampler.resample_chunk(audio, last=final)
        if self.denoiser is not None and audio.size:
            audio = self.denoiser.process(audio)
        if not audio.size:
            return []
        buf = np.concatenate([self.pending, audio]) if self.pending.size else audio
        n = (buf.shape[0] // FRAME_SAMPLES) * FRAME_SAMPLES
        self.pending = buf[n:].copy()
        return [buf[i:i + FRAME_SAMPLES].copy() for i in range(0, n, FRAME_SAMPLES)]

    def advance(self, frames: list[np.ndarray], probs, final: bool) -> list:
        """Run the utterance state machine over frames whose VAD probabilities are known."""
        out: list = []
        for frame, prob in zip(frames, probs):
            self._frame(frame, float(prob), out)
        if final:
            self._flush(out)
        return out

    def _flush(self, out: list) -> None:
        tail = self.pending
        self.pending = np.zeros(0, dtype=np.float32)
        if self.state is StreamState.IDLE:
            return
        if self.state is StreamState.FOREIGN:
            self._to_idle()
            return
        if tail.size:
            self.utt.feed(tail)
        if self.state is StreamState.SPEECH:
            end = self.silence_start if self.silence_start is not None else self.pos + tail.size
            self._end_utterance(end, out)
        else:
            self._to_idle()
            out.append(onset_dropped_event())
