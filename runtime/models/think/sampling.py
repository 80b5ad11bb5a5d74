"""Per-request sampling settings, and a sampler for backends that hand us logits.

Small instruct models (SmolLM2-135M) ramble or loop at the usual defaults, so
the executor's args carry conservative defaults and each request may override
them.  Overrides are validated here so a bad value fails that one request with
``bad_input`` instead of reaching an engine.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np

from runtime.errors import ErrorCode, StageError


@dataclass(frozen=True)
class Sampling:
    max_tokens: int = 64
    temperature: float = 0.25
    top_p: float = 0.9
    repeat_penalty: float = 1.2
    repeat_last_n: int = 64
    seed: int | None = None

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> "Sampling":
        """Executor-level defaults from the stage's YAML args."""
        base = cls()
        return base.override(args)

    def override(self, *sources: Mapping[str, Any] | None) -> "Sampling":
        """Later sources win: typically (payload, item.params)."""
        s = self
        for src in sources:
            if not isinstance(src, Mapping):
                continue
            changes: dict[str, Any] = {}
            for name, kind, lo, hi in _FIELDS:
                if name in src and src[name] is not None:
                    changes[name] = _checked(name, src[name], kind, lo, hi)
            if "seed" in src and src["seed"] is not None:
                changes["seed"] = _checked("seed", src["seed"], int, 0, 2**32 - 1)
            s = replace(s, **changes)
        return s


_FIELDS = (
    ("max_tokens", int, 1, 1 << 20),
    ("temperature", float, 0.0, 10.0),
    ("top_p", float, 0.0, 1.0),
    ("repeat_penalty", float, 0.0, 10.0),
    ("repeat_last_n", int, 0, 1 << 16),
)


def _checked(name: str, value: Any, kind: type, lo: float, hi: float) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise StageError(ErrorCode.BAD_INPUT, f"{name} must be a number, got {value!r}")
    if kind is int and int(value) != value:
        raise StageError(ErrorCode.BAD_INPUT, f"{name} must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise StageError(ErrorCode.BAD_INPUT, f"{name}={value!r} outside [{lo}, {hi}]")
    return kind(value)


@dataclass(frozen=True)
class Range:
    """An engine's accepted interval for one sampling field (``lo_open``: lo itself is refused)."""

    lo: float
    hi: float
    lo_open: bool = False

    def admits(self, value: float) -> bool:
        return (self.lo < value if self.lo_open else self.lo <= value) and value <= self.hi

    def __str__(self) -> str:
        return f"{'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}]"


def require_within(s: Sampling, engine: str, limits: Mapping[str, Range]) -> None:
    """Refuse, as ``bad_input``, a value the engine itself would reject.

    The shared ranges above are wide enough for every backend; an engine with
    narrower ones (SGLang: ``top_p`` in (0, 1], repetition penalty in (0, 2])
    names them here so the caller hears which field is wrong instead of an
    engine error surfacing later with another code.
    """
    for name, rng in limits.items():
        value = getattr(s, name)
        if value is not None and not rng.admits(value):
            raise StageError(ErrorCode.BAD_INPUT, f"{name}={value!r} outside {rng} accepted by {engine}")


class LogitSampler:
    """Temperature / top-p / repeat-penalty sampling over one row of logits.

    One instance per request: it owns that request's random stream so that a
    seeded request reproduces regardless of what it was batched with.
    """

    def __init__(self, sampling: Sampling) -> None:
        self.s = sampling
        self.rng = np.random.default_rng(sampling.seed)

    def sample(self, logits: np.ndarray, history: list[int]) -> int:
        x = np.asarray(logits, dtype=np.float32).copy()
        s = self.s
        if s.repeat_penalty != 1.0 and s.repeat_last_n and history:
            recent = np.unique(np.asarray(history[-s.repeat_last_n:], dtype=np.int64))
            recent = recent[recent < x.shape[0]]
            vals = x[recent]
            x[recent] = np.where(vals > 0, vals / s.repeat_penalty, vals * s.repeat_penalty)
        if s.temperature <= 0.0:
            return int(np.argmax(x))
        x /= s.temperature
        x -= x.max()
        p = np.exp(x)
        p /= p.sum()
        if s.top_p < 1.0:
            order = np.argsort(-p)
            cum = np.cumsum(p[order])
            keep = int(np.searchsorted(cum, s.top_p)) + 1
            idx = order[:keep]
            q = p[idx] / p[idx].sum()
            return int(idx[self.rng.choice(keep, p=q)])
        return int(self.rng.choice(x.shape[0], p=p))
