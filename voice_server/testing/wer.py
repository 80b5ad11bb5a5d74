"""Word error rate with a transcript normaliser, shared by tests and benchmarks.

Engines differ in surface form rather than in what they heard ("10" or "ten",
"Mr." or "mister", "cold-hearted" or "cold hearted"); counting those as errors
would rank engines by punctuation style, so both sides are normalised first.
"""

from __future__ import annotations

import re

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
         "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_ABBREVIATIONS = {"mr": "mister", "mrs": "missus", "dr": "doctor", "st": "saint", "ok": "okay"}


def _number_words(n: int) -> str:
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return _ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + _number_words(rest))
    return " ".join(_ONES[int(d)] for d in str(n))  # long numbers read digit by digit


def normalize(text: str) -> list[str]:
    """Lower-case words with punctuation, numerals and common abbreviations folded."""
    text = text.lower().replace("-", " ")
    text = re.sub(r"\d+", lambda m: " " + _number_words(int(m.group())) + " ", text)
    text = re.sub(r"[^a-z' ]+", " ", text)
    words = [w.strip("'") for w in text.split()]
    return [_ABBREVIATIONS.get(w, w) for w in words if w]


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    """Levenshtein distance over words (substitutions, insertions, deletions)."""
    d = list(range(len(hyp) + 1))
    for i in range(1, len(ref) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(hyp) + 1):
            cur = min(d[j] + 1, d[j - 1] + 1, prev + (ref[i - 1] != hyp[j - 1]))
            prev, d[j] = d[j], cur
    return d[len(hyp)]


def wer(ref: str, hyp: str) -> float:
    """Word error rate of one hypothesis (0.0 is perfect; can exceed 1.0)."""
    r = normalize(ref)
    return edit_distance(r, normalize(hyp)) / max(1, len(r))


def corpus_wer(pairs: list[tuple[str, str]]) -> float:
    """Errors over reference words for a whole set: long clips weigh by their length."""
    errors = sum(edit_distance(normalize(r), normalize(h)) for r, h in pairs)
    return errors / max(1, sum(len(normalize(r)) for r, _ in pairs))
