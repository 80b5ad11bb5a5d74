"""The CMake switches that build llama.cpp (llama-cpp-python) for this CPU's
vector units, printed for the Makefile.

Why not the portable default: on the 2-vCPU Xeon the service is measured on,
the same source built with AVX-512 (and its VNNI, VBMI and BF16 extensions)
decodes prompts ~35% faster and replies ~20% faster than the AVX2-only build,
which took 60 ms off the first audio of a turn (docs/PERFORMANCE.md, "Built
for this CPU").  Why not ``GGML_NATIVE`` (``-march=native``): it also turns on
llama.cpp's AMX kernels, which crashed (SIGSEGV in ``ggml_backend_amx_mul_mat``)
on that VM although its CPU lists ``amx_tile``.  So each extension is switched
on by name, only when ``/proc/cpuinfo`` lists every flag it needs, and the
AVX2 generation is switched off where the CPU lacks it.

Runs with the system Python before the venv exists: standard library only,
no import of this package.  ``python3 runtime/models/think/llama_simd.py``
prints the switches (nothing on a CPU that is not x86-64).
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

# ggml's option -> the /proc/cpuinfo flags it compiles for (ggml's CMake adds the
# matching -m flags); AVX512 means the Skylake-X set its kernels use together.
EXTENSIONS = (
    ("GGML_AVX512", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
    ("GGML_AVX512_VBMI", ("avx512f", "avx512vbmi")),
    ("GGML_AVX512_VNNI", ("avx512f", "avx512_vnni")),
    ("GGML_AVX512_BF16", ("avx512f", "avx512_bf16")),
    ("GGML_AVX_VNNI", ("avx_vnni",)),
)
# on by default in ggml's portable build: switched off where the CPU lacks them
BASELINE = (("GGML_AVX", "avx"), ("GGML_AVX2", "avx2"), ("GGML_FMA", "fma"),
            ("GGML_F16C", "f16c"), ("GGML_BMI2", "bmi2"))


def cmake_args(flags: set[str]) -> list[str]:
    """The ``-D`` switches for a CPU with these /proc/cpuinfo flags."""
    args = ["-DGGML_NATIVE=OFF"]
    args += [f"-D{opt}=OFF" for opt, flag in BASELINE if flag not in flags]
    args += [f"-D{opt}=ON" for opt, needs in EXTENSIONS if set(needs) <= flags]
    return args


def cpu_flags(cpuinfo: str) -> set[str]:
    """The flags of the first processor listed."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


def main() -> None:
    machine = platform.machine().lower()
    info = Path("/proc/cpuinfo")
    if machine not in ("x86_64", "amd64") or not info.exists():
        return  # llama.cpp's own defaults (ARM builds pick theirs)
    sys.stdout.write(" ".join(cmake_args(cpu_flags(info.read_text()))) + "\n")


if __name__ == "__main__":
    main()
