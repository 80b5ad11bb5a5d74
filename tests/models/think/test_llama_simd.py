"""The build switches for llama.cpp follow the CPU's flags (runtime/models/think/llama_simd.py)."""

from runtime.models.think.llama_simd import cmake_args, cpu_flags

SAPPHIRE_RAPIDS = ("fpu sse2 avx avx2 fma f16c bmi2 avx512f avx512dq avx512cd avx512bw avx512vl "
                   "avx_vnni avx512_bf16 avx512vbmi avx512_vnni amx_bf16 amx_tile amx_int8")


def test_an_avx512_cpu_gets_its_extensions_and_never_native_or_amx():
    args = cmake_args(cpu_flags(f"processor\t: 0\nflags\t\t: {SAPPHIRE_RAPIDS}\n"))
    assert args[0] == "-DGGML_NATIVE=OFF"
    assert {"-DGGML_AVX512=ON", "-DGGML_AVX512_VBMI=ON", "-DGGML_AVX512_VNNI=ON",
            "-DGGML_AVX512_BF16=ON", "-DGGML_AVX_VNNI=ON"} <= set(args)
    assert not [a for a in args if "AMX" in a or a.endswith("=OFF") and a != "-DGGML_NATIVE=OFF"]


def test_an_avx2_cpu_keeps_the_portable_build():
    assert cmake_args({"avx", "avx2", "fma", "f16c", "bmi2", "avx512_vnni"}) == ["-DGGML_NATIVE=OFF"]


def test_a_cpu_without_avx2_switches_the_default_off():
    args = cmake_args({"avx", "sse4_2"})
    assert "-DGGML_AVX2=OFF" in args and "-DGGML_FMA=OFF" in args and "-DGGML_AVX=OFF" not in args


def test_no_flags_line_means_no_flags():
    assert cpu_flags("processor\t: 0\n") == set()
