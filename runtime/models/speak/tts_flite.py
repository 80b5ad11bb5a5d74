"""Flite speech synthesis in-process through ctypes.

Spawning the ``flite`` CLI per sentence pays process start-up and voice
loading every time (see benchmarks/tts_engines.py); calling libflite keeps the
voice loaded and hands back samples without a WAV file in between.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from runtime.models.model_files import load_system_library
from runtime.models.speak.tts_base import Synthesizer

VOICES = ("slt", "kal", "kal16", "awb", "rms")


class _CstWave(ctypes.Structure):
    # Mirrors cst_wave in flite/cst_wave.h.
    _fields_ = [("type", ctypes.c_char_p),
                ("sample_rate", ctypes.c_int),
                ("num_samples", ctypes.c_int),
                ("num_channels", ctypes.c_int),
                ("samples", ctypes.POINTER(ctypes.c_short))]


# libflite keeps global state (feature registries, lexicon caches) and is not
# documented as thread-safe, so all calls in a process go through one lock.
_LOCK = threading.Lock()
_LIB: ctypes.CDLL | None = None
_VOICES: dict[str, int] = {}


def _lib() -> ctypes.CDLL:
    global _LIB
    if _LIB is None:
        mode = ctypes.RTLD_GLOBAL          # voice libraries resolve symbols from these
        lib = load_system_library("libflite.so.1", "flite libflite1", mode)
        load_system_library("libflite_usenglish.so.1", "flite libflite1", mode)
        load_system_library("libflite_cmulex.so.1", "flite libflite1", mode)
        lib.flite_init.restype = ctypes.c_int
        lib.flite_init()
        lib.flite_text_to_wave.restype = ctypes.POINTER(_CstWave)
        lib.flite_text_to_wave.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        lib.delete_wave.restype = None
        lib.delete_wave.argtypes = [ctypes.POINTER(_CstWave)]
        lib.feat_set_float.restype = None
        lib.feat_set_float.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_float]
        _LIB = lib
    return _LIB


def _voice(name: str) -> int:
    if name not in _VOICES:
        if name not in VOICES:
            raise ValueError(f"unknown flite voice {name!r}; choose one of {', '.join(VOICES)}")
        vlib = load_system_library(f"libflite_cmu_us_{name}.so.1", "flite libflite1", ctypes.RTLD_GLOBAL)
        register = getattr(vlib, f"register_cmu_us_{name}")
        register.restype = ctypes.c_void_p
        register.argtypes = [ctypes.c_char_p]
        ptr = register(None)
        if not ptr:
            raise RuntimeError(f"flite failed to register voice {name!r}")
        _VOICES[name] = ptr
    return _VOICES[name]


class FliteSynthesizer(Synthesizer):
    """CMU Flite voice (default ``slt``, 16 kHz) loaded once per process."""

    name = "flite"

    def __init__(self, voice: str | None = None) -> None:
        self.voice = voice or "slt"
        with _LOCK:
            _lib()
            self._voice = _voice(self.voice)
        # The rate is a property of the voice; asking the engine avoids a table
        # that could drift from the installed voices (kal is 8 kHz, slt 16 kHz).
        _, self.sample_rate = self._render("a")

    def _synthesize(self, text: str, speed: float) -> np.ndarray:
        return self._render(text, speed)[0]

    def _render(self, text: str, speed: float = 1.0) -> tuple[np.ndarray, int]:
        lib = _lib()
        with _LOCK:
            # cst_voice starts {name, features, ...}; the voice's "duration_stretch"
            # feature scales every segment's duration (1 / speed), pitch untouched.
            features = ctypes.cast(self._voice, ctypes.POINTER(ctypes.c_void_p))[1]
            lib.feat_set_float(features, b"duration_stretch", 1.0 / max(0.1, speed))
            wav = lib.flite_text_to_wave(text.encode("ascii", "ignore"), self._voice)
            if not wav:
                return np.zeros(0, dtype=np.int16), self.sample_rate
            try:
                w = wav.contents
                channels = max(1, int(w.num_channels))
                n = int(w.num_samples) * channels
                pcm = (np.ctypeslib.as_array(w.samples, shape=(n,)).copy()
                       if n > 0 and w.samples else np.zeros(0, dtype=np.int16))
                rate = int(w.sample_rate)
            finally:
                lib.delete_wave(wav)
        if channels > 1:
            pcm = pcm.reshape(-1, channels).mean(axis=1).astype(np.int16)
        return pcm.astype(np.int16, copy=False), rate
