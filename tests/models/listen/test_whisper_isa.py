"""CTranslate2 is asked for its AVX-512 kernels where the CPU has them."""

import os

from runtime.models.listen.whisper_asr import prefer_avx512


def unset(monkeypatch) -> None:
    """Unset for the test; whatever it was comes back after (the Whisper tests
    that follow must not run AVX-512 on a CPU that lacks it)."""
    monkeypatch.setenv("CT2_FORCE_CPU_ISA", "")
    monkeypatch.delenv("CT2_FORCE_CPU_ISA")


def test_avx512_where_the_cpu_has_it(tmp_path, monkeypatch):
    unset(monkeypatch)
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512dq avx512bw avx512vl\n")
    assert prefer_avx512(str(info)) == "AVX512"
    assert os.environ["CT2_FORCE_CPU_ISA"] == "AVX512"


def test_avx2_cpus_and_operators_choose_for_themselves(tmp_path, monkeypatch):
    unset(monkeypatch)
    info = tmp_path / "cpuinfo"
    info.write_text("flags\t\t: fpu sse avx2 avx512f\n")       # no avx512bw/dq/vl
    assert prefer_avx512(str(info)) is None and "CT2_FORCE_CPU_ISA" not in os.environ
    assert prefer_avx512(str(tmp_path / "missing")) is None
    monkeypatch.setenv("CT2_FORCE_CPU_ISA", "AVX2")
    info.write_text("flags\t\t: avx512f avx512dq avx512bw avx512vl\n")
    assert prefer_avx512(str(info)) is None and os.environ["CT2_FORCE_CPU_ISA"] == "AVX2"
