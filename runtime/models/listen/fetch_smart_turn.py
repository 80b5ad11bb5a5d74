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

import argparse
import hashlib
import sys
import tempfile
import zipfile
from pathlib import Path

from runtime.models.model_files import SMART_TURN_ONNX, smart_turn_onnx
from runtime.models.wheel_download import FetchError, write_atomically
from runtime.models.wheel_download import download_wheel as download_pinned

PIPECAT_VERSION = "1.14.0"
ONNX_MEMBER = f"pipecat/audio/turn/smart_turn/data/{SMART_TURN_ONNX}"
LICENSE_MEMBER = f"pipecat_ai-{PIPECAT_VERSION}.dist-info/licenses/LICENSE"
# The graph as published in pipecat-ai 1.14.0 (also listed in the wheel's RECORD).
ONNX_SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"
LICENSE_NAME = "LICENSE"


def download_wheel(into: Path) -> Path:
    """``pip download`` the pinned pipecat-ai wheel (no dependencies) into ``into``."""
    return download_pinned(f"pipecat-ai=={PIPECAT_VERSION}", into)


def extract(wheel: Path, dest: Path, onnx_sha256: str = ONNX_SHA256,
            onnx_member: str = ONNX_MEMBER, license_member: str = LICENSE_MEMBER) -> Path:
    """Copy the graph to ``dest`` and the license beside it; returns ``dest``.

    The license is written first and the graph last, each by rename, so a
    present graph always has its license and is never half written (another
    process may check for it at the same moment).
    """
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = set(zf.namelist())
            for member in (onnx_member, license_member):
                if member not in names:
                    raise FetchError(f"{wheel.name} has no {member}; is it pipecat-ai "
                                     f"{PIPECAT_VERSION}?")
            graph = zf.read(onnx_member)
            license_text = zf.read(license_member)
    except (zipfile.BadZipFile, OSError) as exc:
        raise FetchError(f"cannot read {wheel} as a wheel: {exc}") from None
    digest = hashlib.sha256(graph).hexdigest()
    if digest != onnx_sha256:
        raise FetchError(f"{onnx_member} in {wheel.name} has SHA-256 {digest}, "
                         f"expected {onnx_sha256}; not writing it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(dest.parent / LICENSE_NAME, license_text)
    write_atomically(dest, graph)
    return dest


def fetch(dest: Path | None = None, wheel: Path | None = None, force: bool = False) -> tuple[Path, bool]:
    """Make sure the graph is at ``dest``; returns (path, whether anything was written)."""
    dest = dest or smart_turn_onnx()
    if dest.is_file() and not force:
        return dest, False
    if wheel is not None:
        return extract(wheel, dest), True
    with tempfile.TemporaryDirectory(prefix="smart-turn-") as tmp:
        return extract(download_wheel(Path(tmp)), dest), True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runtime.models.listen.fetch_smart_turn",
        description="Extract Smart Turn v3.2 (BSD-2-Clause) from the pipecat-ai wheel "
                    "into the models folder ($VOICE_AGENT_MODELS_DIR or "
                    "~/.cache/voice-agent/models).")
    parser.add_argument("--wheel", type=Path, help="a pipecat-ai wheel already downloaded "
                        "(otherwise pip downloads it from the package index)")
    parser.add_argument("--force", action="store_true", help="extract even if the file exists")
    args = parser.parse_args(argv)
    try:
        path, wrote = fetch(wheel=args.wheel, force=args.force)
    except (FetchError, OSError) as exc:
        print(f"fetch_smart_turn: error: {exc}", file=sys.stderr)
        return 1
    print(f"Smart Turn v3.2: {'extracted to' if wrote else 'already present at'} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
