"""eSpeak NG speech synthesis, and its phonemes, in-process through ctypes.

eSpeak is tiny and fast but its engine is a process-wide singleton (one
voice, one callback, no re-entrancy), so this module owns that singleton and
serialises every call; samples are collected from the synchronous-mode
callback instead of going to a sound device.

:func:`phonemes` is eSpeak NG's front end alone (text -> IPA, in 100+
languages): the Kokoro voices that speak languages other than Japanese read
it (tts_kokoro.py).
"""

from __future__ import annotations

import ctypes
import re
import threading

import numpy as np

from runtime.models.model_files import load_system_library
from runtime.models.speak.tts_base import Synthesizer

AUDIO_OUTPUT_SYNCHRONOUS = 2       # espeak_AUDIO_OUTPUT in speak_lib.h
POS_CHARACTER = 1                  # espeak_POSITION_TYPE
ESPEAK_CHARS_UTF8 = 1              # espeakCHARS_UTF8
ESPEAK_RATE = 1                    # espeak_PARAMETER: words per minute
DEFAULT_WPM = 175                  # espeakRATE_NORMAL in speak_lib.h
EE_OK = 0
IPA = 0x02                         # espeak_TextToPhonemes phonememode bit 1: IPA, UTF-8
TIE = 0x80                         # ... bit 7: bits 8-23 hold a tie inside multi-letter phonemes

_PARTIAL_WORD = re.compile(r"\w+$")
_CALLBACK_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int,
                               ctypes.c_void_p)

_LOCK = threading.Lock()
_LIB: ctypes.CDLL | None = None
_RATE = 0
_CURRENT_VOICE: str | None = None
_SINK: list[np.ndarray] = []


def _collect(wav, numsamples, events):  # noqa: ANN001 - called from C
    if wav and numsamples > 0:
        _SINK.append(np.ctypeslib.as_array(wav, shape=(numsamples,)).copy())
    return 0                           # 0 = keep synthesising


# Must outlive every call into the library, or C calls a freed trampoline.
_CALLBACK = _CALLBACK_T(_collect)


def _lib() -> tuple[ctypes.CDLL, int]:
    global _LIB, _RATE
    if _LIB is None:
        lib = load_system_library("libespeak-ng.so.1", "espeak-ng libespeak-ng1")
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        rate = lib.espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, None, 0)
        if rate <= 0:
            raise RuntimeError("espeak_Initialize failed (is espeak-ng-data installed?)")
        lib.espeak_SetSynthCallback.restype = None
        lib.espeak_SetSynthCallback.argtypes = [_CALLBACK_T]
        lib.espeak_SetSynthCallback(_CALLBACK)
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetParameter.restype = ctypes.c_int
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
        lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                                              ctypes.c_int]
        lib.espeak_Synth.restype = ctypes.c_int
        lib.espeak_Synth.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
                                     ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        _LIB, _RATE = lib, rate
    return _LIB, _RATE


def _select(voice: str, wpm: int = DEFAULT_WPM) -> None:
    """Make ``voice`` at ``wpm`` the engine's current one (call under _LOCK)."""
    global _CURRENT_VOICE
    lib, _ = _lib()
    key = f"{voice}|{wpm}"
    if _CURRENT_VOICE == key:
        return
    if lib.espeak_SetVoiceByName(voice.encode()) != EE_OK:
        raise ValueError(f"unknown espeak-ng voice {voice!r}")
    lib.espeak_SetParameter(ESPEAK_RATE, wpm, 0)
    _CURRENT_VOICE = key


def phonemes(text: str, voice: str, tie: str = "^") -> list[tuple[str, str]]:
    """``text`` as eSpeak NG's ``voice`` would say it, in IPA with stress marks:
    one (phonemes, punctuation) pair per clause, the punctuation that ended it
    ("" for none), since the front end drops it and a voice's prosody wants it.
    ``tie`` joins the letters of one phoneme (t^s, a^ɪ)."""
    lib, _ = _lib()
    data = text.encode("utf-8") + b"\0"
    buf = ctypes.create_string_buffer(data, len(data))
    start = ctypes.addressof(buf)
    ptr = ctypes.c_void_p(start)
    mode = IPA | TIE | (ord(tie) << 8)
    out: list[tuple[str, str]] = []
    with _LOCK:
        _select(voice)
        while ptr.value:
            before = ptr.value - start
            ipa = (lib.espeak_TextToPhonemes(ctypes.byref(ptr), ESPEAK_CHARS_UTF8, mode)
                   or b"").decode("utf-8", "replace")
            # the pointer stops after the clause's punctuation and a letter or so beyond
            used = data[before:(ptr.value - start) if ptr.value else len(data) - 1]
            ended = _PARTIAL_WORD.sub("", used.decode("utf-8", "replace")).rstrip()
            out.append((ipa.strip(), ended[-1] if ended and not ended[-1].isalnum() else ""))
    return [(ipa, mark) for ipa, mark in out if ipa]


class EspeakSynthesizer(Synthesizer):
    """eSpeak NG voice (default ``en-us``, 22050 Hz; a language voice such as ``es``, whose
    ``language`` says what text it keeps); ``rate_wpm`` sets speaking speed."""

    name = "espeak"

    def __init__(self, voice: str | None = None, rate_wpm: int | None = None,
                 language: str = "en") -> None:
        self.voice = voice or "en-us"
        self.rate_wpm = rate_wpm
        self.language = language
        with _LOCK:
            _, self.sample_rate = _lib()
            self._select()

    def _select(self, speed: float = 1.0) -> None:
        """Re-apply this instance's voice and rate: the engine has one current voice per process."""
        _select(self.voice, int(round((self.rate_wpm or DEFAULT_WPM) * speed)))

    def _synthesize(self, text: str, speed: float) -> np.ndarray:
        lib, _ = _lib()
        data = text.encode("utf-8") + b"\0"
        buf = ctypes.create_string_buffer(data, len(data))
        with _LOCK:
            self._select(speed)
            _SINK.clear()
            try:
                err = lib.espeak_Synth(buf, len(data), 0, POS_CHARACTER, 0, ESPEAK_CHARS_UTF8,
                                       None, None)
                chunks = list(_SINK)
            finally:
                _SINK.clear()
        if err != EE_OK:
            raise RuntimeError(f"espeak_Synth failed with code {err}")
        return np.concatenate(chunks).astype(np.int16, copy=False) if chunks \
            else np.zeros(0, dtype=np.int16)
