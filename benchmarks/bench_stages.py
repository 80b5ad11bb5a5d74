"""Executors for the GPU check (benchmarks/gpu_check.py): CUDA tensors across
processes.  The runtime benchmark's stand-ins are in voice_server.testing.stages."""

from __future__ import annotations

import time

from runtime.executor import BatchExecutor, WorkItem


class CudaMaker(BatchExecutor):
    """GPU check: puts the payload (a length) on the GPU as float32 0, 1, ..., n-1."""

    def execute(self, items: list[WorkItem]) -> list:
        import torch

        return [torch.arange(int(it.payload), dtype=torch.float32, device="cuda") for it in items]


def _check_received(t, stage: str):
    """The tensor must have arrived on the GPU holding 0..n-1, read in this (receiving) process."""
    import torch

    from runtime.errors import ErrorCode, StageError

    if not isinstance(t, torch.Tensor) or not t.is_cuda:
        raise StageError(ErrorCode.INTERNAL, f"{stage}: expected a CUDA tensor, got {type(t).__name__}")
    if not torch.equal(t, torch.arange(t.numel(), dtype=t.dtype, device=t.device)):
        raise StageError(ErrorCode.INTERNAL, f"{stage}: received tensor contents differ from what was sent")


class CudaForward(BatchExecutor):
    """GPU check: checks the received tensor and sends the very same tensor on.

    Torch refuses to re-share storage that arrived over CUDA IPC; forwarding it
    must still work (the data plane copies it into a fresh tensor).
    """

    def execute(self, items: list[WorkItem]) -> list:
        for it in items:
            _check_received(it.payload, "forward")
        return [it.payload for it in items]


class CudaSum(BatchExecutor):
    """GPU check: checks the received tensor; holds it for params['hold_ms'] (to abort mid-way)."""

    def execute(self, items: list[WorkItem]) -> list:
        out = []
        for it in items:
            t = it.payload
            _check_received(t, "sum")
            hold = float((it.params or {}).get("hold_ms", 0))
            if hold:
                time.sleep(hold / 1000)
            out.append({"is_cuda": bool(t.is_cuda), "sum": float(t.sum().item()), "n": int(t.numel())})
        return out
