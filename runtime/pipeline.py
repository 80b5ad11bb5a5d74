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
import time
from pathlib import Path
from typing import Any

from runtime.config import PipelineConfig, load_config, parse_config
from runtime.coordinator import AbortTicket, Coordinator
from runtime.curve import CurveKeys
from runtime.endpoints import allocate
from runtime.health import Health, assess
from runtime.request_lifecycle import RequestHandle
from runtime.shm import list_segments, remove_segments


class Pipeline:
    def __init__(self, cfg: PipelineConfig) -> None:
        self.cfg = cfg
        self.run_token = secrets.token_hex(4)
        self.endpoints = allocate(cfg, self.run_token)
        if cfg.placement.backend == "ray":  # each replica's endpoint is on the node Ray picks
            self.endpoints.groups = {g.name: [""] * g.replicas for g in cfg.placement.groups}
            # Ray's processes take ports all the time: bind whatever port is free at bind time
            self.endpoints.coordinator = f"tcp://{cfg.control.tcp_host}:*"
            self.endpoints.control_pub = f"tcp://{cfg.control.tcp_host}:*"
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
        if cfg.placement.backend == "ray":
            from runtime.ray import cluster as ray_cluster

            ray_cluster.connect(cfg)
            cfg = ray_cluster.settle(cfg)
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

    def health(self, grace_s: float) -> Health:
        """Readiness and liveness now (runtime/health.py); ``grace_s`` bounds a re-creation."""
        return assess(self.coordinator.supervisor.procs.values(), time.monotonic(), grace_s)

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
            if self.cfg.placement.backend == "ray":
                from runtime.ray import cluster as ray_cluster

                ray_cluster.disconnect()

    async def __aenter__(self) -> "Pipeline":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
