"""Re-quantizing a GGUF once, for a weight type llama.cpp batches well on CPU.

Measured on the 2-vCPU test machines with SmolLM2-135M: the shipped Q4_1 file
uses llama.cpp's generic dot-product kernels, so decoding 8 sequences together
costs ~4.5x one sequence and batching gains little.  The same weights as Q4_0
are repacked at load into llama.cpp's CPU GEMM layout: 8 sequences then cost
~3.5x one, and one sequence is also faster.  The price is a second 4-bit
rounding (Q4_1 -> Q4_0), so it is an opt-in (``requantize: q4_0``), and the
converted file is cached next to nothing the user owns: a cache directory.
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
    fd, tmp = tempfile.mkstemp(dir=out_dir, suffix=".part")
    os.close(fd)
    try:
        params = lc.llama_model_quantize_default_params()
        params.ftype = FTYPES[kind]
        params.allow_requantize = True
        params.nthread = n_threads
        rc = lc.llama_model_quantize(src.encode(), tmp.encode(), params)
        if rc != 0:
            raise RuntimeError(f"llama_model_quantize({src!r} -> {kind}) returned {rc}")
        os.replace(tmp, out)  # atomic: concurrent stage processes never read a half file
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return str(out)
