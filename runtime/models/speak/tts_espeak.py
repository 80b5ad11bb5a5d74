"""eSpeak NG speech synthesis in-process through ctypes.

eSpeak is tiny and fast but its engine is a process-wide singleton (one
voice, one callback, no re-entrancy), so this module owns that singleton and
serialises every call; samples are collected from the synchronous-mode
callback instead of going to a sound device.
"""

from __future__ import annotations

import ctypes
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
        lib.espeak_Synth.restype = ctypes.c_int
        lib.espeak_Synth.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
                                     ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        _LIB, _RATE = lib, rate
    return _LIB, _RATE


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
        global _CURRENT_VOICE
        lib, _ = _lib()
        wpm = int(round((self.rate_wpm or DEFAULT_WPM) * speed))
        key = f"{self.voice}|{wpm}"
        if _CURRENT_VOICE == key:
            return
        if lib.espeak_SetVoiceByName(self.voice.encode()) != EE_OK:
            raise ValueError(f"unknown espeak-ng voice {self.voice!r}")
        lib.espeak_SetParameter(ESPEAK_RATE, wpm, 0)
        _CURRENT_VOICE = key

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
