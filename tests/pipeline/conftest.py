"""One real voice pipeline (configs/voice-cpu-fast.yaml) shared by the module's tests.

Starting the three stage processes costs a few seconds and ~400 MB, so the
tests of a module share one pipeline on one event loop (``loop_scope=module``).
A pipeline that cannot start, or a missing Debian tool, fails the tests with
the reason: `make test` installs everything they need.
"""

from __future__ import annotations

import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from runtime.pipeline import Pipeline
from voice_server.testing.wer import wer  # noqa: F401  (the tests' one WER)
from tests.requirements import missing

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "voice-cpu-fast.yaml"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pipeline():
    p = await Pipeline.start(CONFIG)  # a stage that cannot start raises, naming it and why
    yield p
    await p.close()


@pytest.fixture(scope="module")
def flite_wav(tmp_path_factory):
    """flite_wav(text) -> (int16 mono samples, rate): flite's slt voice, made at test time."""
    if shutil.which("flite") is None:
        missing("Debian flite is not installed (apt-get install flite)")
    d = tmp_path_factory.mktemp("flite")
    cache: dict[str, tuple[np.ndarray, int]] = {}

    def make(text: str) -> tuple[np.ndarray, int]:
        if text not in cache:
            path = d / f"{len(cache)}.wav"
            subprocess.run(["flite", "-voice", "slt", "-t", text, "-o", str(path)], check=True)
            with wave.open(str(path)) as w:
                cache[text] = (np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").copy(),
                               w.getframerate())
        return cache[text]

    return make


