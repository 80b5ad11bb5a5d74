"""Written numbers, money, percentages, units, dates and times as words, in languages other than English.

:mod:`runtime.models.speak.spoken_form` does this for English with its own
rules; other languages take their words from libraries instead of tables
written here: ``num2words`` (LGPL) for numbers, years and money, and
Babel's CLDR data (BSD-3-Clause) for each locale's number symbols ("1.250,75"
in Spanish and German, "3,5" for three and a half), its unit and percent
phrases and its long date form.  Only the unit symbols an LLM writes are
listed here, mapped to CLDR's language-neutral unit ids.

Japanese is left as written: its voice's front end (OpenJTalk) reads numerals
with their counters (3時, 5人), which num2words cannot.
"""

from __future__ import annotations

import datetime
import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache

# The languages whose numbers become words here (num2words and CLDR both cover them).
LANGUAGES = ("es", "de", "fr", "it", "pt", "nl", "pl", "ru", "uk", "tr", "sv", "da", "fi",
             "cs", "hu", "ro", "ca", "id", "vi")
# Left to the voice's own front end (module docstring).
FRONT_END_READS = ("ja", "zh", "ko")

UNIT_IDS = {"km": "length-kilometer", "m": "length-meter", "cm": "length-centimeter",
            "mm": "length-millimeter", "kg": "mass-kilogram", "g": "mass-gram",
            "l": "volume-liter", "ml": "volume-milliliter", "km/h": "speed-kilometer-per-hour",
            "h": "duration-hour", "min": "duration-minute", "s": "duration-second",
            "°C": "temperature-celsius", "GB": "digital-gigabyte", "MB": "digital-megabyte"}
CURRENCY_CODES = {"€": "EUR", "$": "USD", "£": "GBP", "¥": "JPY"}

# digits with the separators of any locale between them ("1.250,75", "1\u202f250", "3,5")
_DIGITS = r"\d+(?:[.,\u00a0\u202f]\d+)*"
_AMOUNT = rf"-?(?:{_DIGITS})"
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_TIME = re.compile(r"\b([01]?\d|2[0-3]):([0-5]\d)\b")
_MONEY = re.compile(rf"([€$£¥])\s?({_AMOUNT})|({_AMOUNT})\s?([€$£¥])")
_PERCENT = re.compile(rf"({_AMOUNT})\s?%")
_UNIT = re.compile(rf"({_AMOUNT})\s?(" + "|".join(
    re.escape(u) for u in sorted(UNIT_IDS, key=len, reverse=True)) + r")(?![\w/])")
_NUMBER = re.compile(rf"(?<![\w]){_AMOUNT}(?![\w])")


@lru_cache(maxsize=None)
def _symbols(language: str) -> tuple[str, str]:
    """The locale's (decimal, group) symbols, from CLDR."""
    from babel.numbers import get_decimal_symbol, get_group_symbol
    return get_decimal_symbol(language), get_group_symbol(language)


def parse_amount(text: str, language: str) -> Decimal | None:
    """"1.250,75" in Spanish -> 1250.75, "3.5" -> 3.5 (an LLM writes either
    notation; a dot before exactly three digits is a thousands group); None
    when it is not one number (a run like "1.2.3" is left as written)."""
    decimal_sym, group_sym = _symbols(language)
    s = re.sub(r"[\u00a0\u202f ]", "", text.strip())
    if group_sym not in (".", ","):
        group_sym = "," if decimal_sym == "." else "."
    other = "," if decimal_sym == "." else "."
    if decimal_sym not in s and s.count(other) == 1 and not re.search(rf"\{other}\d{{3}}$", s):
        s = s.replace(other, decimal_sym)          # "3.5" in a comma locale: a decimal
    s = s.replace(group_sym, "").replace(decimal_sym, ".")
    try:
        value = Decimal(s)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def _words(value: Decimal, language: str, **kw) -> str:
    from num2words import num2words
    return num2words(int(value) if value == value.to_integral_value() else value,
                     lang=language, **kw)


def _say_numbers(text: str, language: str) -> str:
    def one(m: re.Match) -> str:
        value = parse_amount(m.group(0), language)
        return m.group(0) if value is None else _words(value, language)
    return _NUMBER.sub(one, text)


def _money(m: re.Match, language: str) -> str:
    symbol, amount = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
    value = parse_amount(amount, language)
    if value is None:
        return m.group(0)
    code = CURRENCY_CODES[symbol]
    if value == value.to_integral_value():       # "20 €": no "zero cents"
        return _named_amount(value, code, language)
    try:
        from num2words import num2words
        # a float: num2words reads an int amount as cents
        return num2words(float(value), lang=language, to="currency", currency=code)
    except (NotImplementedError, KeyError, ValueError):
        return _named_amount(value, code, language)


def _named_amount(value: Decimal, code: str, language: str) -> str:
    """The number, then CLDR's name of the currency ("veinte euros")."""
    from babel.numbers import get_currency_name
    return f"{_words(value, language)} {get_currency_name(code, int(value), language)}"


def _unit_phrase(value_text: str, unit_id: str, language: str) -> str:
    """CLDR's long phrase ("20 kilómetros", "25 por ciento"), its number then read as words."""
    from babel.units import format_unit
    value = parse_amount(value_text, language)
    if value is None:
        return value_text
    try:
        phrase = format_unit(value, unit_id, locale=language, length="long")
    except Exception:        # noqa: BLE001 - CLDR lacks this unit in this locale: the number alone
        return _words(value, language)
    return _say_numbers(phrase, language)


def _date(m: re.Match, language: str) -> str:
    from babel.dates import format_date
    try:
        day = datetime.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return m.group(0)
    long_form = format_date(day, "long", locale=language)
    year_words = _words(Decimal(day.year), language, to="year")
    return _say_numbers(long_form.replace(str(day.year), year_words), language)


def _time(m: re.Match, language: str) -> str:
    hour, minute = int(m.group(1)), int(m.group(2))
    words = _words(Decimal(hour), language)
    return words if minute == 0 else f"{words} {_words(Decimal(minute), language)}"


def spoken_form_in(text: str, language: str) -> str:
    """``text`` with its numbers, money, percentages, units, ISO dates and
    times as words of ``language``; unchanged for a language not covered here."""
    if language not in LANGUAGES or not any(ch.isdigit() for ch in text):
        return text
    text = _ISO_DATE.sub(lambda m: _date(m, language), text)
    text = _TIME.sub(lambda m: _time(m, language), text)
    text = _MONEY.sub(lambda m: _money(m, language), text)
    text = _PERCENT.sub(lambda m: _unit_phrase(m.group(1), "concentr-percent", language), text)
    text = _UNIT.sub(lambda m: _unit_phrase(m.group(1), UNIT_IDS[m.group(2)], language), text)
    text = _say_numbers(text, language)
    return " ".join(text.split())
