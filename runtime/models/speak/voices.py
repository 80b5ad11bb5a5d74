"""Which voice a request gets: the engine's installed voices and the OpenAI voice names.

Realtime clients ask for OpenAI's voices by name (``alloy``, ``marin``...);
none of them exists here, so each maps to an installed voice of the configured
engine, of the same gender where the engine has one installed, else to the
configured default voice.  A name that is neither an OpenAI voice nor an
installed voice is refused: by the session (an ``error`` event, the session
lives) and by the speak stage (``BAD_INPUT``), never by trying to fetch it.

The table below is documented for clients in docs/CLIENTS.md.
"""

from __future__ import annotations

# OpenAI's Realtime voices and the gender they are heard as (OpenAI calls alloy neutral).
OPENAI_VOICES: dict[str, str] = {
    "alloy": "female", "ash": "male", "ballad": "male", "coral": "female", "echo": "male",
    "sage": "female", "shimmer": "female", "verse": "male", "marin": "female", "cedar": "male",
}

FLITE_VOICES = {"slt": "female", "kal": "male", "kal16": "male", "awb": "male", "rms": "male"}
ESPEAK_VOICES = {"en-us": "male", "en": "male", "en-gb": "male"}
DEFAULT_VOICE = {"hibari": "heart", "flite": "slt", "espeak": "en-us"}


def installed_voices(engine: str) -> dict[str, str]:
    """Voice name -> gender, for the voices ``engine`` can speak with no network."""
    if engine == "hibari":
        from runtime.models.speak import tts_hibari
        return tts_hibari.installed_voices()
    if engine == "flite":
        return dict(FLITE_VOICES)
    if engine == "espeak":
        return dict(ESPEAK_VOICES)
    raise ValueError(f"unknown TTS engine {engine!r}")


def voice_names(engine: str) -> list[str]:
    """Every name a client may ask for with ``engine``: the OpenAI names, then its own voices."""
    return [*OPENAI_VOICES, *(v for v in installed_voices(engine) if v not in OPENAI_VOICES)]


def resolve_voice(requested: str | None, engine: str, default: str | None = None) -> str:
    """The engine voice for ``requested`` (None: ``default``); ValueError for an unknown name."""
    installed = installed_voices(engine)
    default = default or DEFAULT_VOICE[engine]
    if not requested:
        return default
    if requested in installed:
        return requested
    gender = OPENAI_VOICES.get(requested)
    if gender is None:
        if engine == "hibari":
            from runtime.models.speak import tts_hibari
            if requested in tts_hibari.known_voices():
                tts_hibari.voice_model_path(requested)   # known, not on disk: says so
        raise ValueError(f"unknown voice {requested!r}; choose one of "
                         f"{', '.join(voice_names(engine))}")
    if installed.get(default) == gender:
        return default
    return next((name for name, g in installed.items() if g == gender), default)
