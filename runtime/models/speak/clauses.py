"""Cutting a streamed LLM reply into clauses that can be spoken one by one.

Synthesis needs whole clauses for natural prosody, but waiting for a whole
sentence delays the first audio by the time the LLM takes to write it; so the
first clause breaks eagerly (first comma or a handful of words) and later ones
at real punctuation, with a length cap so a run-on reply still streams.  A
model that writes slower than the voice speaks (the 1.5B on two busy cores)
would leave the listener in silence mid-sentence while the sentence is
finished: the speak stage then sets ``hurry`` and the clause breaks after a
few words, as the first one does.
"""

from __future__ import annotations

import re

STRONG = ".!?;:"
# Full-width (CJK) stops and commas: Japanese and Chinese put no space after
# them and never write "3。5", so they end a clause at once.
CJK_STRONG = "。！？；：．"
CJK_COMMA = "、，"
# After the first clause a CJK comma ends a clause of at least this many
# characters (these scripts have no spaces to count words by).
CJK_COMMA_MIN_CHARS = 8
CLOSERS = "\"')]}\u201d\u2019\u300d\u300f\uff09\u3011"   # with the full-width 」』）】
# "Dr. Smith" is not the end of a sentence; breaking there costs a pause mid-name.
ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "st", "vs", "etc", "e.g", "i.e", "jr", "sr", "prof",
                 "no", "fig", "approx"}
# After the first clause a comma only ends a clause that already carries a few
# words, so "Yes, and, so" does not become three separate blips of audio.
LATER_COMMA_MIN_WORDS = 4

_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_JUNK = re.compile(r"[*#`~_>|]+")
_BULLET = re.compile(r"(^|\n)\s*(?:[-+]|\d+[.)])\s+")


def strip_markdown(text: str) -> str:
    """Remove markup an LLM writes for a screen, which voices would read aloud or choke on."""
    text = _LINK.sub(r"\1", text)
    text = _BULLET.sub(r"\1", text)
    text = _JUNK.sub(" ", text)
    return " ".join(text.split())


class ClauseSegmenter:
    """Accumulates text deltas and releases complete clauses as soon as they are decidable."""

    def __init__(self, max_clause_chars: int = 120, first_clause_words: int = 6,
                 hurry_words: int = 3) -> None:
        self.max_clause_chars = max(20, int(max_clause_chars))
        self.first_clause_words = max(1, int(first_clause_words))
        self.hurry_words = max(1, int(hurry_words))
        self.buf = ""
        self.first = True
        self.hurry = False   # the listener is about to run out of audio: break early

    def push(self, delta: str) -> list[str]:
        """Add a delta; return the clauses it completed (stripped, never empty)."""
        self.buf += delta
        out: list[str] = []
        while True:
            cut = self._find_break()
            if cut is None:
                break
            clause, self.buf = self.buf[:cut].strip(), self.buf[cut:]
            if clause:
                out.append(clause)
                self.first = False
            else:
                self.buf = self.buf.lstrip()
                if not self.buf:
                    break
        return out

    def flush(self) -> list[str]:
        """The end of the reply ends the last clause, whatever it looks like."""
        rest, self.buf = self.buf.strip(), ""
        out = []
        if rest:
            out.append(rest)
            self.first = False
        return out

    # -- boundary rules --------------------------------------------------
    def _find_break(self) -> int | None:
        buf = self.buf
        n = len(buf)
        words_done = 0
        limit = self.first_clause_words if self.first else self.hurry_words if self.hurry else None
        for i, ch in enumerate(buf):
            if ch == "\n":
                return i + 1
            if ch.isspace() and i > 0 and not buf[i - 1].isspace():
                words_done += 1
                if limit is not None and words_done >= limit:
                    return i + 1
            if ch in CJK_STRONG or ch in CJK_COMMA:
                if ch in CJK_COMMA and not self.first and i < CJK_COMMA_MIN_CHARS:
                    continue
                j = i + 1
                while j < n and buf[j] in CLOSERS:
                    j += 1
                return j
            if ch in STRONG or ch == ",":
                j = i + 1
                while j < n and buf[j] in CLOSERS:
                    j += 1
                if j >= n:
                    break                      # undecided until the next delta ("3." vs "3.5")
                if not buf[j].isspace():
                    continue
                if ch == "." and self._is_abbreviation(buf, i):
                    continue
                if ch == "," and not self.first and words_done + 1 < LATER_COMMA_MIN_WORDS:
                    continue
                return j + 1
        if n > self.max_clause_chars:
            # No punctuation in sight: cut at the last word boundary so nothing grows unbounded.
            space = buf.rfind(" ", 0, self.max_clause_chars + 1)
            return space + 1 if space > 0 else self.max_clause_chars
        return None

    @staticmethod
    def _is_abbreviation(buf: str, dot: int) -> bool:
        start = dot
        while start > 0 and not buf[start - 1].isspace():
            start -= 1
        word = buf[start:dot].lower().lstrip("(\"'")
        return word in ABBREVIATIONS or (len(word) == 1 and word.isalpha())
