"""A listen request's turn-detection settings, checked once at the edge.

A caller's params (sample rate, VAD threshold, silence window, turn mode,
eagerness, noise reduction) override the stage's YAML defaults; ``VadParams``
is the one place they are merged and validated, so a bad value fails the
request (or, for a YAML default, the stage's start) naming it, and nothing
downstream checks again.  In semantic mode ``wait_ms`` reads the end-of-turn
wait from turn_wait.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from runtime.errors import ErrorCode, StageError
from runtime.models.listen.denoise import ENGINES as DENOISE_ENGINES
from runtime.models.listen.denoise import NOISE_REDUCTION_TYPES
from runtime.models.listen.language import check_language
from runtime.models.listen.turn_wait import EAGERNESS_WAIT_MS, Pause, semantic_wait_ms
from runtime.models.voice_contract import LISTEN_RATE_HZ

MIN_RATE, MAX_RATE = 4000, 384000
TURN_MODES = ("silence", "semantic")

DEFAULTS: dict[str, Any] = {
    "sample_rate": LISTEN_RATE_HZ,
    "threshold": 0.5,
    "silence_duration_ms": 500,
    "prefix_padding_ms": 300,
    "min_speech_ms": 250,
    "max_utterance_s": 30.0,
}


@dataclass(frozen=True)
class VadParams:
    """Validated per-request turn-detection settings (ms unless named otherwise)."""

    sample_rate: int
    threshold: float
    silence_duration_ms: float
    prefix_padding_ms: float
    min_speech_ms: float
    max_utterance_s: float
    turn_mode: str = "silence"      # "semantic": the end-of-turn model sets the wait
    eagerness: str = "auto"
    noise_reduction: str | None = None  # denoise.py: near_field | far_field | an engine | None
    voice_lock: bool = False        # voice_lock.py: only the enrolled caller's speech opens turns
    language: str | None = None     # language.py: the client's pin (None: detect)
    language_start: str | None = None   # a language detected earlier in the session (a hint)

    @property
    def semantic(self) -> bool:
        return self.turn_mode == "semantic"

    def wait_ms(self, pause: Pause) -> float:
        """Silence needed to end the turn: the fixed window, or in semantic mode
        what the evidence gathered at the pause allows (turn_wait.py)."""
        return semantic_wait_ms(pause, self.eagerness) if self.semantic else self.silence_duration_ms

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
        merged_str = {**{k: v for k, v in defaults.items() if k in ("turn_mode", "eagerness")},
                      **{k: v for k, v in (params or {}).items()
                         if k in ("turn_mode", "eagerness") and v is not None}}
        noise = (params or {}).get("noise_reduction", defaults.get("noise_reduction"))
        if noise is not None and noise not in NOISE_REDUCTION_TYPES + DENOISE_ENGINES:
            raise StageError(ErrorCode.BAD_INPUT, "listen: noise_reduction must be one of "
                             f"{NOISE_REDUCTION_TYPES + DENOISE_ENGINES} or null, got {noise!r}")
        lock = (params or {}).get("voice_lock")
        lock = defaults.get("voice_lock", False) if lock is None else lock
        if not isinstance(lock, bool):
            raise StageError(ErrorCode.BAD_INPUT, f"listen: voice_lock must be true, false or "
                             f"null, got {lock!r}")
        langs = {}
        for k in ("language", "language_start"):
            v = (params or {}).get(k)
            try:
                langs[k] = check_language(defaults.get(k) if v is None else v, f"listen: {k}")
            except ValueError as exc:
                raise StageError(ErrorCode.BAD_INPUT, str(exc)) from None
        mode = str(merged_str.get("turn_mode", "silence"))
        eagerness = str(merged_str.get("eagerness", "auto"))
        if mode not in TURN_MODES:
            raise StageError(ErrorCode.BAD_INPUT, f"listen: turn_mode must be one of {TURN_MODES}, "
                             f"got {mode!r}")
        if eagerness not in EAGERNESS_WAIT_MS:
            raise StageError(ErrorCode.BAD_INPUT, "listen: eagerness must be one of "
                             f"{tuple(EAGERNESS_WAIT_MS)}, got {eagerness!r}")
        return cls(sample_rate=int(rate_f), turn_mode=mode, eagerness=eagerness,
                   noise_reduction=noise, voice_lock=lock, **langs, **vals)
