"""Written text turned into the words a person would say, before any voice reads it.

An LLM writes for a screen: "$1,250.75", "5:30 pm", "555-0142", "Dr. Nguyen",
"3rd", "20 km", "help@acme.com".  Each voice's front end guesses at these
differently (flite and hibari both read "Acme Corp." wrong, flite spells
"km"), so one rule set here gives every engine the same words, and the
words are testable (tests/models/speak/test_spoken_form.py).

Numbers become words through ``inflect`` (MIT); the patterns that find money,
times, dates, phone numbers and the rest are this module's.  Order matters:
the most specific patterns (e-mail, URL, phone, money, time, date) run before
plain numbers would eat their digits.  Emoji and other symbols are left for
:func:`runtime.models.speak.tts_base.speakable`, which drops them.
"""

from __future__ import annotations

import re
from functools import lru_cache

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")
_MONTH_ABBR = {m[:3].lower(): m for m in MONTHS} | {"sept": "September"}

# Abbreviations whose reading does not depend on context ("St." does: see _saint_or_street).
ABBREVIATIONS = {
    "dr": "Doctor", "mr": "Mister", "mrs": "Missus", "ms": "Miz", "prof": "Professor",
    "jr": "Junior", "sr": "Senior", "corp": "Corporation", "inc": "Incorporated",
    "ltd": "Limited", "co": "Company", "ave": "Avenue", "blvd": "Boulevard", "rd": "Road",
    "mt": "Mount", "dept": "Department", "approx": "approximately", "vs": "versus",
    "etc": "et cetera", "apt": "apartment",
}
_ABBR = re.compile(r"\b(" + "|".join(ABBREVIATIONS) + r")\.(?=\s|$|[,;:!?])", re.IGNORECASE)
_LATIN = [(re.compile(r"\be\.g\.(?=\s|,|$)", re.I), "for example"),
          (re.compile(r"\bi\.e\.(?=\s|,|$)", re.I), "that is")]
_NUMBER_SIGN = re.compile(r"\bNo\.\s*(?=\d)", re.I)     # "No. 5", not "the answer is No."
_ST = re.compile(r"\bSt\.(\s+)(?=(\S?))")

UNITS = {  # symbol -> (singular, plural)
    "km": ("kilometer", "kilometers"), "m": ("meter", "meters"), "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"), "mi": ("mile", "miles"), "ft": ("foot", "feet"),
    "kg": ("kilogram", "kilograms"), "lb": ("pound", "pounds"),
    "lbs": ("pound", "pounds"), "oz": ("ounce", "ounces"), "mph": ("mile per hour", "miles per hour"),
    "km/h": ("kilometer per hour", "kilometers per hour"), "kph": ("kilometer per hour", "kilometers per hour"),
    "ml": ("milliliter", "milliliters"), "gb": ("gigabyte", "gigabytes"),
    "mb": ("megabyte", "megabytes"), "tb": ("terabyte", "terabytes"), "kb": ("kilobyte", "kilobytes"),
    "hz": ("hertz", "hertz"), "khz": ("kilohertz", "kilohertz"), "ghz": ("gigahertz", "gigahertz"),
    "kw": ("kilowatt", "kilowatts"), "kwh": ("kilowatt hour", "kilowatt hours"),
    "hr": ("hour", "hours"), "hrs": ("hour", "hours"), "min": ("minute", "minutes"),
    "mins": ("minute", "minutes"), "sec": ("second", "seconds"), "ms": ("millisecond", "milliseconds"),
    "°c": ("degree Celsius", "degrees Celsius"), "°f": ("degree Fahrenheit", "degrees Fahrenheit"),
    "°": ("degree", "degrees"),
}
CURRENCIES = {"$": ("dollar", "dollars", "cent", "cents"), "€": ("euro", "euros", "cent", "cents"),
              "£": ("pound", "pounds", "penny", "pence"), "¥": ("yen", "yen", "", "")}
SCALES = ("thousand", "million", "billion", "trillion")
SYMBOLS = {"&": " and ", "+": " plus ", "=": " equals ", "@": " at ", "#": " number "}
DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

_NUM = r"\d{1,3}(?:,\d{3})+|\d+"
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_URL = re.compile(r"\b(?:https?://|www\.)[^\s<>\"]+|\b[\w-]+(?:\.[\w-]+)*\.(?:com|org|net|io|ai|dev|edu|gov)"
                  r"(?:/[^\s<>\"]*)?(?!\w|\.\w)", re.I)
_PHONE = re.compile(r"(?<![\d.,$])(?:\+?1[\s.-])?(?:\(\d{3}\)\s?|\d{3}[\s.-])?\d{3}-\d{4}(?![\d])")
_MONEY = re.compile(r"([$€£¥])\s?(" + _NUM + r")(\.\d+)?(?:\s?(" + "|".join(SCALES) + r"|[kKmMbB])\b)?")
# 5pm, 5:30 p.m., 9.30 am, 930am; or 17:05
_TIME = re.compile(r"\b(\d{1,2})(?:[:.]?(\d{2}))?\s?([ap])\.?\s?m\b\.?|\b(\d{1,2}):(\d{2})\b", re.I)
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_US_DATE = re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})\b")
_MONTH_DAY = re.compile(r"\b(" + "|".join(MONTHS) + r"|(?:" + "|".join(_MONTH_ABBR) + r")\.?)\s+(\d{1,2})"
                        r"(?:st|nd|rd|th)?\b(?!:)(,?\s+\d{4}\b)?", re.I)
_ORDINAL = re.compile(r"\b(\d+)(st|nd|rd|th)\b", re.I)
_PERCENT = re.compile(r"(-?\d+(?:\.\d+)?)\s?%")
_UNIT = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)\s?(" + "|".join(
    re.escape(u) for u in sorted(UNITS, key=len, reverse=True)) + r")(?![\w/])", re.I)
_FRACTION = re.compile(r"(?<![\d/])(\d)/(\d{1,2})(?![\d/])")
_RANGE = re.compile(r"(?<![\w.-])(\d+)\s?[-–](\d+)(?![\w-]|\.\d)")
_YEAR = re.compile(r"(?<![\d,.$])(1[1-9]\d\d|20\d\d)(?![\d,]|\.\d)(s?)")
# A four-digit number is read as a year after these words ("in 1999"), or as a decade ("1990s").
YEAR_CUES = {"in", "since", "from", "until", "till", "by", "of", "year", "before", "after",
             "around", "circa", "and", "to", "early", "late", "mid", "during", "between"}
_NUMBER = re.compile(r"(?<![\w.])(-?)(" + _NUM + r")(\.\d+)?(?![\w])")
_SYMBOL = re.compile(r"[&+=@#]")


@lru_cache(maxsize=1)
def _inflect():
    import inflect
    return inflect.engine()


def cardinal(n: int | str) -> str:
    """12 -> "twelve", "1,250" -> "one thousand two hundred fifty" (no "and", no commas)."""
    return _inflect().number_to_words(str(n).replace(",", ""), andword="", comma="")


def ordinal(n: int | str) -> str:
    """3 -> "third"."""
    return _inflect().number_to_words(_inflect().ordinal(int(str(n).replace(",", ""))),
                                      andword="", comma="")


def decimal(whole: str, frac: str) -> str:
    """("3", "14") -> "three point one four": decimals are read digit by digit."""
    return f"{cardinal(whole)} point {' '.join(DIGIT_WORDS[int(d)] for d in frac)}"


def year(n: int) -> str:
    """1999 -> "nineteen ninety-nine", 2005 -> "two thousand five", 1900 -> "nineteen hundred"."""
    if 2000 <= n <= 2009 or n % 1000 == 0:
        return cardinal(n)
    hi, lo = divmod(n, 100)
    if lo == 0:
        return f"{cardinal(hi)} hundred"
    return f"{cardinal(hi)} {'oh ' + cardinal(lo) if lo < 10 else cardinal(lo)}"


def digits(text: str) -> str:
    """"555-0142" -> "five five five, zero one four two": groups kept as pauses."""
    groups = re.findall(r"\d+", text)
    return ", ".join(" ".join(DIGIT_WORDS[int(d)] for d in g) for g in groups)


def _plural(value: str, one: str, many: str) -> str:
    return one if value in ("1", "1.0", "-1") else many


def _number(value: str) -> str:
    """"-3.5" -> "minus three point five"."""
    sign = "minus " if value.startswith("-") else ""
    whole, _, frac = value.lstrip("-").partition(".")
    return sign + (decimal(whole, frac) if frac else cardinal(whole))


def _money(m: re.Match) -> str:
    one, many, sub_one, sub_many = CURRENCIES[m.group(1)]
    whole, frac, scale = m.group(2), m.group(3) or "", (m.group(4) or "")
    scale = {"k": "thousand", "m": "million", "b": "billion"}.get(scale.lower(), scale.lower())
    if scale:  # "$3.2 billion" -> "three point two billion dollars"
        return f"{_number(whole + frac)} {scale} {many}"
    words = f"{cardinal(whole)} {_plural(whole, one, many)}"
    cents = int(round(float("0" + frac) * 100)) if frac else 0
    if cents and sub_one:
        words += f" and {cardinal(cents)} {sub_one if cents == 1 else sub_many}"
    return words


def _time(m: re.Match) -> str:
    if m.group(1) is not None:   # 5pm, 5:30 p.m.
        hour, minute, half = int(m.group(1)), m.group(2), m.group(3).lower()
        suffix = f" {half} m"
    else:                        # 17:05, 9:30
        hour, minute, suffix = int(m.group(4)), m.group(5), ""
    if hour > 24 or (minute is not None and int(minute) > 59):
        return m.group(0)
    words = cardinal(hour)
    # "5 p.m." ends with a dot that may also end the sentence: keep one
    suffix += "." if m.group(0).endswith(".") else ""
    if minute is None or int(minute) == 0:
        return words + (suffix or " o'clock")
    mins = int(minute)
    return f"{words} {'oh ' if mins < 10 else ''}{cardinal(mins)}{suffix}"


def _date(month: int, day: int, yr: str | None) -> str:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        raise ValueError
    words = f"{MONTHS[month - 1]} {ordinal(day)}"
    if yr:
        y = int(yr) + (2000 if len(yr) == 2 else 0)
        words += f", {year(y)}"
    return words


def _iso_date(m: re.Match) -> str:
    try:
        return _date(int(m.group(2)), int(m.group(3)), m.group(1))
    except ValueError:
        return m.group(0)


def _us_date(m: re.Match) -> str:
    try:
        return _date(int(m.group(1)), int(m.group(2)), m.group(3))
    except ValueError:
        return m.group(0)


def _month_day(m: re.Match) -> str:
    name = m.group(1).rstrip(".")
    month = next((x for x in MONTHS if x.lower() == name.lower()), None) or _MONTH_ABBR[name.lower()]
    day = int(m.group(2))
    if not 1 <= day <= 31:
        return m.group(0)
    yr = (m.group(3) or "").strip(", \t")
    return f"{month} {ordinal(day)}" + (f", {year(int(yr))}" if yr else "")


def _year(m: re.Match) -> str:
    before = m.string[:m.start()].split()
    cue = before[-1].lower().strip(",") if before else ""
    if not m.group(2) and cue not in YEAR_CUES and cue.capitalize() not in MONTHS:
        return m.group(0)            # "1250 apples": a number, read below
    words = year(int(m.group(1)))
    if m.group(2):                   # a decade: "nineteen nineties"
        words = words[:-1] + "ies" if words.endswith("y") else words + "s"
    return words


def _unit(m: re.Match) -> str:
    one, many = UNITS[m.group(2).lower()]
    return f"{_number(m.group(1))} {_plural(m.group(1), one, many)}"


def _fraction(m: re.Match) -> str:
    num, den = int(m.group(1)), int(m.group(2))
    if den == 0:
        return m.group(0)
    if den == 2:
        name = "half" if num == 1 else "halves"
    elif den == 4:
        name = "quarter" if num == 1 else "quarters"
    else:
        name = ordinal(den) + ("" if num == 1 else "s")
    return f"{cardinal(num)} {name}"


def _spell_address(text: str) -> str:
    """"help@acme.com" -> "help at acme dot com"; a URL loses its scheme and "www"."""
    text = re.sub(r"^(?:https?://)?(?:www\.)?", "", text).rstrip("/.,")
    for sym, word in (("@", " at "), (".", " dot "), ("/", " slash "), ("-", " dash "),
                      ("_", " underscore "), ("?", " question mark "), ("=", " equals ")):
        text = text.replace(sym, word)
    return " ".join(text.split())


def _saint_or_street(m: re.Match) -> str:
    """"St. Louis" (a name follows) -> "Saint", "Main St. is" -> "Street"."""
    return ("Saint" if m.group(2)[:1].isupper() else "Street") + m.group(1)


def spoken_form(text: str) -> str:
    """``text`` with numbers, money, times, dates, phone numbers, ordinals, units,
    abbreviations, e-mail addresses and URLs written as words."""
    if not any(ch.isdigit() or ch in ".@&+=#%$€£¥°" for ch in text):
        return text
    text = _NUMBER_SIGN.sub("number ", text)
    text = _EMAIL.sub(lambda m: _spell_address(m.group(0)), text)
    text = _URL.sub(lambda m: _spell_address(m.group(0)), text)
    text = _PHONE.sub(lambda m: digits(m.group(0)), text)
    text = _MONEY.sub(_money, text)
    text = _ISO_DATE.sub(_iso_date, text)
    text = _US_DATE.sub(_us_date, text)
    text = _TIME.sub(_time, text)
    text = _MONTH_DAY.sub(_month_day, text)
    text = _ORDINAL.sub(lambda m: ordinal(m.group(1)), text)
    text = _PERCENT.sub(lambda m: f"{_number(m.group(1))} percent", text)
    text = _UNIT.sub(_unit, text)
    text = _FRACTION.sub(_fraction, text)
    text = _RANGE.sub(lambda m: f"{cardinal(m.group(1))} to {cardinal(m.group(2))}", text)
    text = _YEAR.sub(_year, text)
    text = _NUMBER.sub(lambda m: _number(m.group(1) + m.group(2) + (m.group(3) or "")), text)
    for pattern, words in _LATIN:
        text = pattern.sub(words, text)
    text = _ST.sub(_saint_or_street, text)
    # the dot of an abbreviation that ends the clause also ends the sentence
    text = _ABBR.sub(lambda m: ABBREVIATIONS[m.group(1).lower()]
                     + ("." if not m.string[m.end():].strip() else ""), text)
    text = _SYMBOL.sub(lambda m: SYMBOLS[m.group(0)], text)
    return " ".join(text.split())
