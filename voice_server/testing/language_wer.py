"""Error rates of speech heard back in any language: words where words are
spaced, characters for Japanese and Chinese, which write none.  Japanese is
scored on the katakana reading of both sides (OpenJTalk's, shipped for
Kokoro's front end): Whisper writes 明日 where a reference writes あした, the
same sounds, which a character count took for errors.

:mod:`voice_server.testing.wer` folds English only (its numerals, its
abbreviations, a-z); Whisper writes the digits of other languages as digits
too ("3 gatos"), so both sides have their numbers read as the language's
words first (runtime/models/speak/spoken_form_locale.py), then lose case,
accents' compatibility forms and punctuation.
"""

from __future__ import annotations

import re
import unicodedata

from runtime.models.speak.spoken_form_locale import spoken_form_in
from voice_server.testing.wer import edit_distance, normalize

# Scripts with no spaces between words: scored per character.
UNSPACED = ("ja", "zh")


def tokens(text: str, language: str) -> list[str]:
    """The units an error rate counts in ``language``: words, or characters (UNSPACED)."""
    if language == "en":
        return normalize(text)
    text = unicodedata.normalize("NFKC", spoken_form_in(text, language)).lower()
    if language == "ja":     # Whisper writes 7時, a reference 七時: both as kanji numerals
        from num2words import num2words
        text = re.sub(r"\d+", lambda m: num2words(int(m.group(0)), lang="ja"), text)
        import pyopenjtalk
        text = pyopenjtalk.g2p(re.sub(r"\s+", "", text), kana=True)
    kept = "".join(ch if unicodedata.category(ch)[0] in "LMN" else " " for ch in text)
    if language in UNSPACED:
        return [ch for ch in kept if not ch.isspace()]
    return kept.split()


def language_wer(pairs: list[tuple[str, str]], language: str) -> float:
    """Errors over reference units for (reference, heard) pairs: WER, or CER for UNSPACED."""
    errors = sum(edit_distance(tokens(r, language), tokens(h, language)) for r, h in pairs)
    return errors / max(1, sum(len(tokens(r, language)) for r, _ in pairs))
