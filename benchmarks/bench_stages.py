"""Executors for the GPU check (benchmarks/gpu_check.py): CUDA tensors across
processes.  The runtime benchmark's stand-ins are in voice_server.testing.stages."""

from __future__ import annotations

from runtime.executor import BatchExecutor, WorkItem


class CudaMaker(BatchExecutor):
    """GPU check: puts the payload (a length) on the GPU as a float32 tensor."""

    def execute(self, items: list[WorkItem]) -> list:
        import torch

        return [torch.arange(int(it.payload), dtype=torch.float32, device="cuda") for it in items]


class CudaSum(BatchExecutor):
    """GPU check: must receive a CUDA tensor (cuda_ipc), returns its sum and device."""

    def execute(self, items: list[WorkItem]) -> list:
        out = []
        for it in items:
            t = it.payload
            out.append({"is_cuda": bool(t.is_cuda), "sum": float(t.sum().item()), "n": int(t.numel())})
        return out
