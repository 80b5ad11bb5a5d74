"""CUDA IPC export logic that runs without a GPU.

torch refuses to share storage that arrived over CUDA IPC; a stage forwarding
such a tensor must lend a fresh copy instead.  A CPU tensor posing as a CUDA
one at the ``_share_cuda_`` boundary (the only call that needs a device) shows
which tensor is lent and kept alive; the real path runs in benchmarks/gpu_check.py.
"""

from __future__ import annotations

import pytest
import torch

from runtime import cuda_ipc
from runtime.cuda_ipc import KeepAlive

TORCH_REFUSAL = ("Attempted to send CUDA tensor received from another process; this is not currently "
                 "supported. Consider cloning before sending.")


class _Storage:
    def __init__(self, tensor: "_PosingTensor") -> None:
        self.tensor = tensor

    def _share_cuda_(self):
        if self.tensor.received:
            raise RuntimeError(TORCH_REFUSAL)
        return (0, b"handle", self.nbytes(), 0, b"ref", 0, b"", False)

    def nbytes(self) -> int:
        return self.tensor.t.untyped_storage().nbytes()


class _PosingTensor:
    """A CPU tensor that answers like a CUDA tensor at the IPC boundary."""

    def __init__(self, t, received: bool) -> None:
        self.t, self.received = t, received
        self.dtype, self.shape = t.dtype, t.shape

    def untyped_storage(self) -> _Storage:
        return _Storage(self)

    def clone(self) -> "_PosingTensor":
        return _PosingTensor(self.t.clone(), received=False)

    def stride(self):
        return self.t.stride()

    def storage_offset(self) -> int:
        return self.t.storage_offset()

    def numel(self) -> int:
        return self.t.numel()

    def element_size(self) -> int:
        return self.t.element_size()


def _held(ka: KeepAlive, lid: int):
    return ka._held[lid][1]


def test_own_tensor_is_lent_as_is():
    ka = KeepAlive()
    own = _PosingTensor(torch.arange(6, dtype=torch.float32), received=False)
    desc = cuda_ipc.export(own, 1, ka, "me")
    assert _held(ka, desc["lid"]) is own
    assert desc["sh"] == [6] and desc["dt"] == "float32" and desc["n"] == 24


def test_received_tensor_is_copied_before_it_is_lent():
    ka = KeepAlive()
    view = torch.arange(12, dtype=torch.float32)[2:8]
    got = _PosingTensor(view, received=True)
    desc = cuda_ipc.export(got, 7, ka, "me")
    lent = _held(ka, desc["lid"])
    assert lent is not got and not lent.received
    assert torch.equal(lent.t, view) and desc["sh"] == [6] and desc["so"] == 0
    assert ka.reclaim(7) == (1, 24)  # an abort frees the copy
    assert len(ka) == 0


def test_other_share_errors_are_not_hidden():
    with pytest.raises(RuntimeError) as e:
        cuda_ipc.share(torch.zeros(4))  # a real CPU tensor: torch says CUDA only
    assert not cuda_ipc.is_received_storage_error(e.value)
    assert cuda_ipc.is_received_storage_error(RuntimeError(TORCH_REFUSAL))
