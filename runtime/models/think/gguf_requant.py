"""Re-quantizing a GGUF once, for a weight type llama.cpp batches well on CPU.

Measured on the 2-vCPU test machines with SmolLM2-135M (decode steps, 2
threads): the shipped Q4_1 file runs llama.cpp's generic dot-product kernels,
about 13 ms for one sequence and 55-70 ms for a step of 8.  The same weights
as Q4_0 are repacked at load into llama.cpp's CPU GEMM layout: about 9 ms and
35 ms.  The price is a second 4-bit rounding (Q4_1 -> Q4_0, replies of the
135M model get visibly worse), so it is an opt-in (``requantize: q4_0``), and
the converted file is written once to a cache directory, never beside the source.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

FTYPES = {"q4_0": 2, "q8_0": 7, "f16": 1, "bf16": 32}


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "voice-agent" / "gguf"


def requantized(lc: Any, src: str, kind: str, cache_dir: str | os.PathLike | None = None,
                n_threads: int = 2) -> str:
    """Path of ``src`` converted to ``kind``, converting (about 1 s) only on first use."""
    kind = kind.lower()
    if kind not in FTYPES:
        raise ValueError(f"requantize must be one of {sorted(FTYPES)}, got {kind!r}")
    st = os.stat(src)
    out_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    out = out_dir / f"{Path(src).stem}.{st.st_size}-{int(st.st_mtime)}.{kind}.gguf"
    if out.exists():
        return str(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    quantize_file(lc, src, out, kind, n_threads)
    return str(out)


def quantize_file(lc: Any, src: str | os.PathLike, dest: str | os.PathLike, kind: str,
                  n_threads: int = 2) -> None:
    """Write ``src`` converted to ``kind`` at ``dest``, by rename: concurrent stage
    processes (or a second ``make``) never read a half-written file."""
    dest = Path(dest)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, suffix=".part")
    os.close(fd)
    try:
        params = lc.llama_model_quantize_default_params()
        params.ftype = FTYPES[kind]
        params.allow_requantize = True
        params.nthread = n_threads
        rc = lc.llama_model_quantize(str(src).encode(), tmp.encode(), params)
        if rc != 0:
            raise RuntimeError(f"llama_model_quantize({str(src)!r} -> {kind}) returned {rc}")
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the model from other users of a shared folder
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
