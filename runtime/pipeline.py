"""The runtime's front door: start a pipeline from YAML, submit, abort, close.

    pipeline = await Pipeline.start("configs/voice-cpu.yaml")
    handle = await pipeline.submit(payload, entry="think")
    async for event in handle: ...
    await pipeline.close()

Closing removes every process, socket file and shared-memory segment the
pipeline made, also when start itself failed half-way.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from runtime.config import PipelineConfig, load_config, parse_config
from runtime.coordinator import AbortTicket, Coordinator
from runtime.curve import CurveKeys
from runtime.endpoints import allocate
from runtime.request_lifecycle import RequestHandle
from runtime.shm import list_segments, remove_segments


class Pipeline:
    def __init__(self, cfg: PipelineConfig) -> None:
        self.cfg = cfg
        self.run_token = secrets.token_hex(4)
        self.endpoints = allocate(cfg, self.run_token)
        self.curve = CurveKeys.generate() if cfg.uses_curve() else None
        self.coordinator = Coordinator(cfg, self.endpoints, self.run_token, self.curve)
        self.closed = False

    @classmethod
    async def start(cls, config: str | Path | dict | PipelineConfig) -> "Pipeline":
        if isinstance(config, PipelineConfig):
            cfg = config
        elif isinstance(config, dict):
            cfg = parse_config(config)
        else:
            cfg = load_config(config)
        self = cls(cfg)
        try:
            await self.coordinator.start()
        except BaseException:
            await self.close()
            raise
        return self

    @property
    def shm_prefix(self) -> str:
        return f"va-{self.run_token}-"

    async def submit(self, payload: Any = None, **kw: Any) -> RequestHandle:
        return await self.coordinator.submit(payload, **kw)

    def abort(self, request_id: int, reason: str = "cancelled") -> AbortTicket:
        return self.coordinator.abort(request_id, reason)

    def status(self, request_id: int) -> dict | None:
        return self.coordinator.status(request_id)

    def snapshot(self) -> dict:
        return self.coordinator.snapshot()

    def kill_stage(self, group: str, replica: int = 0) -> int:
        return self.coordinator.supervisor.kill(group, replica)

    def segments(self) -> list[str]:
        return list_segments(self.shm_prefix)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            await self.coordinator.close()
        finally:
            remove_segments(self.shm_prefix)
            self.endpoints.cleanup()

    async def __aenter__(self) -> "Pipeline":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
