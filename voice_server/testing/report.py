"""What every benchmark does at the end: percentiles of its samples and one JSON file.

One definition of a percentile for all of them (linear interpolation between
the closest ranks, numpy's default), so a p95 in one table means the same as
a p95 in another.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence


def pct(xs: Sequence[float], p: float, ndigits: int | None = 1) -> float | None:
    """The p-th percentile of xs (None when there are no samples)."""
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    v = s[lo] + (s[hi] - s[lo]) * (k - lo)
    return v if ndigits is None else round(v, ndigits)


def write_json(path: str | Path, results: Any, note: str = "") -> Path:
    """Write results (creating benchmarks/results/ on a fresh clone) and say where."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"wrote {out}{note}")
    return out


def merge_languages(path: str | Path, rows: dict[str, dict], part: str, about: dict) -> Path:
    """Add one benchmark's per-language ``rows`` and its ``about`` (under
    ``part``) to the results file two benchmarks share (the language bench's
    listen/think side and the voice bench's speak side): the other's keys stay."""
    out_path = Path(path)
    out: dict = {"languages": {}}
    if out_path.exists():
        try:
            out = json.loads(out_path.read_text())
            out.setdefault("languages", {})
        except ValueError:   # a broken file is replaced
            pass
    for lang, row in rows.items():
        out["languages"].setdefault(lang, {}).update(row)
    out[part] = about
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    return out_path
