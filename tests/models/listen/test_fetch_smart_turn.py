"""Extracting Smart Turn from a wheel: small wheels built here, no network."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from runtime.models.listen import fetch_smart_turn as fetch
from runtime.models.model_files import SMART_TURN_DIR, SMART_TURN_ONNX, models_dir, smart_turn_onnx

GRAPH = b"stand-in graph bytes"
LICENSE = b"BSD 2-Clause License\n"


def make_wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


@pytest.fixture
def wheel(tmp_path) -> Path:
    return make_wheel(tmp_path / "pipecat_ai-1.14.0-py3-none-any.whl",
                      {fetch.ONNX_MEMBER: GRAPH, fetch.LICENSE_MEMBER: LICENSE,
                       "pipecat/__init__.py": b""})


def test_models_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("VOICE_AGENT_MODELS_DIR", str(tmp_path / "m"))
    assert models_dir() == tmp_path / "m"
    assert smart_turn_onnx() == tmp_path / "m" / SMART_TURN_DIR / SMART_TURN_ONNX
    monkeypatch.delenv("VOICE_AGENT_MODELS_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models_dir() == tmp_path / "xdg" / "voice-agent" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert models_dir() == tmp_path / "home" / ".cache" / "voice-agent" / "models"


def test_extracts_only_the_graph_and_its_license(wheel, tmp_path):
    dest = tmp_path / "models" / SMART_TURN_DIR / SMART_TURN_ONNX
    fetch.extract(wheel, dest, onnx_sha256=hashlib.sha256(GRAPH).hexdigest())
    assert dest.read_bytes() == GRAPH
    assert (dest.parent / "LICENSE").read_bytes() == LICENSE
    assert sorted(p.name for p in dest.parent.iterdir()) == ["LICENSE", SMART_TURN_ONNX]


def test_wrong_hash_writes_nothing(wheel, tmp_path):
    dest = tmp_path / "models" / SMART_TURN_ONNX
    with pytest.raises(fetch.FetchError, match="SHA-256"):
        fetch.extract(wheel, dest)          # the pinned hash of the real graph
    assert not dest.parent.exists()


def test_missing_member_and_non_wheel_are_clear_errors(tmp_path):
    partial = make_wheel(tmp_path / "p.whl", {fetch.LICENSE_MEMBER: LICENSE})
    with pytest.raises(fetch.FetchError, match="has no pipecat/audio/turn"):
        fetch.extract(partial, tmp_path / "out.onnx")
    text = tmp_path / "not-a-wheel.whl"
    text.write_text("hello")
    with pytest.raises(fetch.FetchError, match="cannot read"):
        fetch.extract(text, tmp_path / "out.onnx")


def test_cli_skips_a_present_file_and_reports_errors(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("VOICE_AGENT_MODELS_DIR", str(tmp_path))
    not_a_wheel = tmp_path / "x.whl"
    not_a_wheel.write_text("hello")
    assert fetch.main(["--wheel", str(not_a_wheel)]) == 1
    assert "error: cannot read" in capsys.readouterr().err
    smart_turn_onnx().parent.mkdir(parents=True)
    smart_turn_onnx().write_bytes(b"present")
    # present: no download and no extraction, even from a bad wheel
    assert fetch.main(["--wheel", str(not_a_wheel)]) == 0
    assert "already present" in capsys.readouterr().out
    assert smart_turn_onnx().read_bytes() == b"present"
