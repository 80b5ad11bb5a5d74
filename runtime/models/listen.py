"""The "listen" stage: microphone audio in, turn events and transcripts out.

One request is a whole conversation's audio stream; silero VAD cuts it into
utterances and pocketsphinx transcribes each one while it is spoken, so the
final transcript is ready almost as soon as the end of speech is decided.

Output chunks (times in ms on the request's own input timeline)::

    {"type": "speech_started", "audio_start_ms": int}
    {"type": "partial", "text": str}
    {"type": "speech_stopped", "audio_end_ms": int}
    {"type": "final", "text": str, "audio_start_ms": int, "audio_end_ms": int}
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import soxr

from runtime.errors import ErrorCode, StageError
from runtime.executor import ChunkExecutor, WorkItem
from runtime.heap import trim_heap
from runtime.models.pocketsphinx_asr import StreamingRecognizer, make_decoder
from runtime.models.silero_vad import FRAME_SAMPLES, SAMPLE_RATE, SileroVAD, make_session

# A pending onset survives short dips (plosives, pauses between syllables) but
# not a real pause: a click followed by silence must not later be glued to
# the start of genuine speech.
PENDING_GAP_MS = 160
# silero's authors recommend ending speech on a lower threshold than the one
# that starts it, so one word's energy dip does not split an utterance.
HYSTERESIS = 0.15
MAX_CHANNELS = 8
MIN_RATE, MAX_RATE = 4000, 384000

DEFAULTS: dict[str, Any] = {
    "sample_rate": SAMPLE_RATE,
    "threshold": 0.5,
    "silence_duration_ms": 500,
    "prefix_padding_ms": 300,
    "min_speech_ms": 250,
    "max_utterance_s": 30.0,
}


def _trim_heap() -> None:
    import gc

    gc.collect()
    trim_heap()


@dataclass(frozen=True)
class VadParams:
    """Validated per-request turn-detection settings (ms unless named otherwise)."""

    sample_rate: int
    threshold: float
    silence_duration_ms: float
    prefix_padding_ms: float
    min_speech_ms: float
    max_utterance_s: float

    @classmethod
    def from_dicts(cls, defaults: dict, params: dict) -> "VadParams":
        """Per-request params override the stage's YAML defaults; bad values are the client's fault."""
        merged = {**DEFAULTS, **{k: v for k, v in defaults.items() if k in DEFAULTS},
                  **{k: v for k, v in (params or {}).items() if k in DEFAULTS and v is not None}}
        try:
            rate_f = float(merged["sample_rate"])
            vals = {k: float(merged[k]) for k in DEFAULTS if k != "sample_rate"}
        except (TypeError, ValueError) as exc:
            raise StageError(ErrorCode.BAD_INPUT, f"listen: non-numeric parameter: {exc}") from None
        if not rate_f.is_integer() or not MIN_RATE <= rate_f <= MAX_RATE:
            raise StageError(ErrorCode.BAD_INPUT,
                             f"listen: sample_rate must be an integer in {MIN_RATE}..{MAX_RATE}, "
                             f"got {merged['sample_rate']!r}")
        if not all(math.isfinite(v) for v in vals.values()):
            raise StageError(ErrorCode.BAD_INPUT, "listen: parameters must be finite numbers")
        if not 0.0 < vals["threshold"] < 1.0:
            raise StageError(ErrorCode.BAD_INPUT,
                             f"listen: threshold must be in (0, 1), got {vals['threshold']}")
        for k in ("silence_duration_ms", "prefix_padding_ms", "min_speech_ms"):
            if not 0.0 <= vals[k] <= 60_000:
                raise StageError(ErrorCode.BAD_INPUT, f"listen: {k} must be in 0..60000, got {vals[k]}")
        if not 0.5 <= vals["max_utterance_s"] <= 3600:
            raise StageError(ErrorCode.BAD_INPUT,
                             f"listen: max_utterance_s must be in 0.5..3600, got {vals['max_utterance_s']}")
        return cls(sample_rate=int(rate_f), **vals)


def to_mono_float32(payload: Any) -> np.ndarray:
    """Bring whatever a client sent to mono float32 in [-1, 1], or say clearly why not.

    Clients differ (browsers send float32, telephony int16, numpy users
    float64, some stereo); converting the unambiguous cases is friendlier than
    rejecting them, while integer widths we would have to guess the scale of
    are refused.
    """
    if isinstance(payload, (bytes, bytearray, memoryview)):
        raw = bytes(payload)
        if len(raw) % 2:
            raise StageError(ErrorCode.BAD_INPUT,
                             f"listen: byte payload must be int16 PCM (even length), got {len(raw)} bytes")
        payload = np.frombuffer(raw, dtype="<i2")
    elif not isinstance(payload, np.ndarray):
        if isinstance(payload, (list, tuple)):
            try:
                payload = np.asarray(payload, dtype=np.float32)
            except (TypeError, ValueError):
                raise StageError(ErrorCode.BAD_INPUT, "listen: list payload is not numeric audio") from None
        else:
            raise StageError(ErrorCode.BAD_INPUT,
                             f"listen: expected a numpy int16/float32 array, got {type(payload).__name__}")
    a = payload
    if a.size == 0:
        return np.zeros(0, dtype=np.float32)
    if a.ndim == 2:
        rows, cols = a.shape
        if cols <= MAX_CHANNELS and (rows >= cols or rows == 0):
            a = a.mean(axis=1) if cols > 1 else a[:, 0]        # [frames, channels]
        elif rows <= MAX_CHANNELS:
            a = a.mean(axis=0) if rows > 1 else a[0]           # [channels, frames]
        else:
            raise StageError(ErrorCode.BAD_INPUT,
                             f"listen: cannot tell channels from frames in shape {payload.shape}")
    elif a.ndim > 2:
        raise StageError(ErrorCode.BAD_INPUT, f"listen: audio must be 1-D mono, got shape {a.shape}")
    a = a.reshape(-1)
    kind = payload.dtype
    if kind == np.int16:
        out = a.astype(np.float32) / 32768.0
    elif kind in (np.float32, np.float64, np.float16):
        out = a.astype(np.float32)
        if not np.isfinite(out).all():
            out = np.nan_to_num(out, nan=0.0, posinf=1.0, neginf=-1.0)
        np.clip(out, -1.0, 1.0, out=out)
    else:
        raise StageError(ErrorCode.BAD_INPUT,
                         f"listen: unsupported sample type {kind}; send int16 PCM or float32 in [-1, 1]")
    return np.ascontiguousarray(out, dtype=np.float32)


class _Stream:
    """All per-conversation state: resampler, VAD recurrence, utterance state machine."""

    IDLE, PENDING, SPEECH = 0, 1, 2

    def __init__(self, p: VadParams, vad: SileroVAD, asr: StreamingRecognizer) -> None:
        self.p = p
        self.vad = vad
        self.asr = asr
        self.resampler = (soxr.ResampleStream(p.sample_rate, SAMPLE_RATE, 1, dtype="float32")
                          if p.sample_rate != SAMPLE_RATE else None)
        self.pad_samples = int(p.prefix_padding_ms * SAMPLE_RATE / 1000)
        self.neg_threshold = max(0.01, p.threshold - HYSTERESIS)
        self.pending = np.zeros(0, dtype=np.float32)   # 16 kHz samples short of a frame
        self.preroll = np.zeros(0, dtype=np.float32)   # recent audio before a possible onset
        self.pos = 0                                   # 16 kHz samples already framed
        self.state = self.IDLE
        self.onset = 0                                 # sample index of the utterance's onset
        self.speech_frames = 0
        self.silence_start: int | None = None          # first sample of the current silent run
        self.held_partial: str | None = None           # partial seen before speech was confirmed
        self.utterances = 0

    # -- helpers ---------------------------------------------------------
    @staticmethod
    def _ms(samples: int) -> int:
        return int(round(samples * 1000 / SAMPLE_RATE))

    @staticmethod
    def _pcm16(x: np.ndarray) -> np.ndarray:
        return (np.clip(x, -1.0, 1.0) * 32767.0).astype(np.int16)

    def _feed_asr(self, x: np.ndarray, out: list) -> None:
        text = self.asr.feed(self._pcm16(x))
        if text is None:
            return
        if self.state == self.SPEECH:
            out.append({"type": "partial", "text": text})
        else:
            self.held_partial = text

    def _end_utterance(self, end_sample: int, out: list) -> None:
        """Close a confirmed utterance: stopped first, so the client can react before the text is in."""
        end_ms = max(self._ms(end_sample), self._ms(self.onset))
        out.append({"type": "speech_stopped", "audio_end_ms": end_ms})
        text = self.asr.finish()
        out.append({"type": "final", "text": text, "audio_start_ms": self._ms(self.onset),
                    "audio_end_ms": end_ms})
        self.utterances += 1
        self._to_idle()

    def _to_idle(self) -> None:
        if self.asr.active:
            self.asr.finish()      # a dropped blip: its words are not wanted
        self.state = self.IDLE
        self.silence_start = None
        self.speech_frames = 0
        self.held_partial = None

    # -- per frame -------------------------------------------------------
    def _frame(self, frame: np.ndarray, prob: float, out: list) -> None:
        start = self.pos
        end = start + FRAME_SAMPLES
        self.pos = end
        p = self.p

        if self.state == self.IDLE:
            if prob >= p.threshold:
                self.state = self.PENDING
                self.onset = start
                self.speech_frames = 1
                self.silence_start = None
                self.held_partial = None
                self.asr.start()
                # Prefix padding gives the recogniser the quiet lead-in it was trained on
                # and the soft consonant silero scores low.
                if self.preroll.size:
                    self._feed_asr(self.preroll, out)
                self.preroll = np.zeros(0, dtype=np.float32)
                self._feed_asr(frame, out)
                self._maybe_confirm(out)
            else:
                keep = self.pad_samples
                if keep:
                    self.preroll = np.concatenate([self.preroll, frame])[-keep:]
            return

        self._feed_asr(frame, out)
        if prob >= self.neg_threshold:
            self.speech_frames += 1
            self.silence_start = None
        elif self.silence_start is None:
            self.silence_start = start
        silent_ms = 0.0 if self.silence_start is None else (end - self.silence_start) * 1000 / SAMPLE_RATE

        if self.state == self.PENDING:
            if silent_ms >= min(PENDING_GAP_MS, max(p.silence_duration_ms, 1.0)):
                self._to_idle()    # too short to be speech: no events at all
                return
            self._maybe_confirm(out)
            return

        # SPEECH
        if silent_ms >= p.silence_duration_ms and self.silence_start is not None:
            self._end_utterance(self.silence_start, out)
        elif (end - self.onset) >= p.max_utterance_s * SAMPLE_RATE:
            # A monologue (or endless noise) still has to yield transcripts periodically.
            self._end_utterance(end, out)
            self.preroll = np.zeros(0, dtype=np.float32)

    def _maybe_confirm(self, out: list) -> None:
        if self.speech_frames * FRAME_SAMPLES * 1000 / SAMPLE_RATE >= self.p.min_speech_ms:
            self.state = self.SPEECH
            out.append({"type": "speech_started", "audio_start_ms": self._ms(self.onset)})
            if self.held_partial:
                out.append({"type": "partial", "text": self.held_partial})
            self.held_partial = None

    # -- per chunk -------------------------------------------------------
    def push(self, audio: np.ndarray, final: bool) -> list:
        """One chunk of this stream alone (the executor batches VAD across streams instead)."""
        frames = self.frames(audio, final)
        return self.advance(frames, [self.vad.prob(f) for f in frames], final)

    def frames(self, audio: np.ndarray, final: bool) -> list[np.ndarray]:
        """Resample and cut into whole VAD frames; the remainder waits for the next chunk."""
        if self.resampler is not None and (audio.size or final):
            audio = self.resampler.resample_chunk(audio, last=final)
        if not audio.size:
            return []
        buf = np.concatenate([self.pending, audio]) if self.pending.size else audio
        n = (buf.shape[0] // FRAME_SAMPLES) * FRAME_SAMPLES
        self.pending = buf[n:].copy()
        return [buf[i:i + FRAME_SAMPLES] for i in range(0, n, FRAME_SAMPLES)]

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
        if self.state == self.IDLE:
            return
        if tail.size:
            self._feed_asr(tail, out)
        if self.state == self.SPEECH:
            end = self.silence_start if self.silence_start is not None else self.pos + tail.size
            self._end_utterance(end, out)
        else:
            self._to_idle()


class ListenExecutor(ChunkExecutor):
    """Chunk executor: VAD + streaming ASR per request, one long-lived stream per conversation.

    YAML args: ``threads`` (onnxruntime intra-op threads, default 1),
    ``spare_decoders`` (pocketsphinx decoders kept warm, default 1: building
    one takes ~0.4 s and ~90 MB, too slow to do when a call starts), and any
    of the per-request VAD parameters as stage-wide defaults.
    """

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        self.threads = int(args.get("threads", 1))
        self.spare_decoders = max(0, int(args.get("spare_decoders", 1)))
        self.defaults = {k: v for k, v in args.items() if k in DEFAULTS}
        self._session = None
        self._pool: list = []
        self._pool_lock = threading.Lock()
        self._streams: dict[int, _Stream] = {}
        self._counters = {"frames": 0, "utterances": 0, "bad_input": 0}

    def load(self) -> None:
        VadParams.from_dicts(self.defaults, {})        # fail at start-up on a bad YAML default
        self._session = make_session(self.threads)
        self._pool = [make_decoder() for _ in range(self.spare_decoders)]

    def close(self) -> None:
        self._streams.clear()
        self._pool.clear()
        self._session = None

    def stats(self) -> dict:
        return {"streams": len(self._streams), "spare_decoders": len(self._pool),
                "utterances": self._counters["utterances"]
                + sum(s.utterances for s in self._streams.values()),
                "bad_input": self._counters["bad_input"]}

    def _take_decoder(self):
        with self._pool_lock:
            if self._pool:
                return self._pool.pop()
        return make_decoder()

    def open(self, request_id: int, params: dict) -> None:
        if self._session is None:
            self.load()
        p = VadParams.from_dicts(self.defaults, params)
        self._streams[request_id] = _Stream(p, SileroVAD(self._session),
                                            StreamingRecognizer(self._take_decoder()))

    def release(self, request_id: int) -> None:
        s = self._streams.pop(request_id, None)
        if s is None:
            return
        self._counters["utterances"] += s.utterances
        if s.asr.active:
            s.asr.finish()
        with self._pool_lock:
            pooled = len(self._pool) < max(1, self.spare_decoders)
            if pooled:
                self._pool.append(s.asr.decoder)
        if not pooled:
            # A decoder is ~90 MB of small allocations; glibc keeps freed heap
            # pages, so without a trim RSS stays at the peak number of streams.
            del s
            _trim_heap()

    def process(self, items: list[WorkItem]) -> list[list[Any]]:
        # Three passes so that the VAD runs once per frame position for all the
        # streams in the batch (SileroVAD.probs) instead of once per stream.
        results: list[Any] = [None] * len(items)
        plans: list[tuple[int, _Stream, list[np.ndarray], bool]] = []
        for i, item in enumerate(items):
            try:
                s = self._streams.get(item.request_id)
                if s is None:                  # tolerate a missing open(): same params, same effect
                    self.open(item.request_id, item.params)
                    s = self._streams[item.request_id]
                audio = to_mono_float32(item.payload) if item.payload is not None \
                    else np.zeros(0, dtype=np.float32)
                plans.append((i, s, s.frames(audio, bool(item.final)), bool(item.final)))
            except Exception as exc:            # one request's failure must not fail its batch-mates
                results[i] = self._failed(exc)
        probs = self._vad_probs([(s, f) for _, s, f, _ in plans])
        for (i, s, frames, final), pr in zip(plans, probs):
            try:
                results[i] = s.advance(frames, pr, final)
            except Exception as exc:
                results[i] = self._failed(exc)
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
