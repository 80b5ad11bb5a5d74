"""Pipeline topology and placement, declared in YAML and validated here.

The same file runs a laptop CPU demo or a GPU box: stages say what runs,
edges say how data flows, placement says which stages share a process, how
many replicas, and on which device.  Every mistake is reported with the file
and the field, because a misconfigured pipeline otherwise fails minutes later
in some child process.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class ConfigError(ValueError):
    """A pipeline file that cannot run; the message names file and field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StageConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*$")
    executor: str = Field(description="'package.module:Class'")
    args: dict[str, Any] = {}
    scheduler: Literal["batch", "ar", "chunk"] = "batch"
    max_batch: int = Field(8, ge=1, le=4096)
    max_wait_ms: float = Field(0.0, ge=0)
    deadline_s: float | None = Field(None, gt=0)
    first_chunk: int | None = Field(None, ge=1, description="chunk scheduler: rows in the first slice")
    chunk_size: int | None = Field(None, ge=1, description="chunk scheduler: rows in later slices")
    output: bool = Field(False, description="also send this stage's chunks to the client")

    @field_validator("executor")
    @classmethod
    def _executor_shape(cls, v: str) -> str:
        if ":" not in v or not all(v.split(":", 1)):
            raise ValueError("must look like 'package.module:ClassName'")
        return v


class EdgeConfig(_Strict):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    src: str = Field(alias="from")
    dst: str = Field(alias="to")
    kind: Literal["stream", "final"] = "stream"


class GroupConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*$")
    stages: list[str] = Field(min_length=1)
    replicas: int = Field(1, ge=1, le=64)
    device: str = "cpu"
    host: str | None = None
    env: dict[str, str] = {}
    # placement.backend 'ray': what one replica asks of a Ray node.  Custom
    # resources double as node labels (`ray start --resources '{"tts": 1}'`).
    num_cpus: float = Field(1.0, ge=0)
    num_gpus: float = Field(0.0, ge=0)
    resources: dict[str, float] = {}
    # placement.backend 'ray': keep a started launcher for each replica on another node,
    # holding one more bundle, so a lost replica is re-created without waiting for Ray to
    # start a worker (runtime/ray/standby.py).
    standby: bool = False

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if v != "cpu" and not (v.startswith("cuda") and (v == "cuda" or v[5:].isdigit())):
            raise ValueError("must be 'cpu', 'cuda' or 'cuda:N'")
        return v


class PlacementConfig(_Strict):
    # 'local': one OS process per group replica on this host (the supervisor).
    # 'ray': one Ray actor per group replica, placed across the cluster's nodes.
    backend: Literal["local", "ray"] = "local"
    # Ray placement-group strategy of each group's replicas: SPREAD puts them
    # on different nodes while nodes last, then shares nodes.
    ray_strategy: Literal["SPREAD", "STRICT_SPREAD", "PACK", "STRICT_PACK"] = "SPREAD"
    groups: list[GroupConfig] = []


class ControlPlaneConfig(_Strict):
    transport: Literal["ipc", "tcp"] = "ipc"
    run_dir: str | None = None
    tcp_host: str = "127.0.0.1"
    # ZMQ CURVE on tcp:// endpoints; None = on exactly when tcp_host is not loopback.
    # Turning it off for a routable address is refused.
    curve: bool | None = None
    heartbeat_ms: float = Field(100, gt=0)
    # A stage silent this long is hung.  Its heartbeat thread needs the GIL:
    # a stage's first torch tensor imports torch, which holds the GIL for up
    # to ~0.8 s on 2 busy cores (model loading for ~0.5 s), so 1 s killed
    # healthy stages in the test suite.  Ray pipelines with cores to spare set 1000.
    dead_after_ms: float = Field(3000, gt=0)
    ready_timeout_s: float = Field(120, gt=0)
    restart: bool = True
    max_restarts: int = Field(20, ge=0)


class DataPlaneConfig(_Strict):
    inline_max_bytes: int = Field(64 << 10, ge=0)
    max_lent_mb: int = Field(1024, ge=1)
    max_cached_mb: int = Field(512, ge=0)


class TombstoneConfig(_Strict):
    max_entries: int = Field(16384, ge=16)
    ttl_s: float = Field(120, gt=0)


class PipelineConfig(_Strict):
    name: str = "pipeline"
    stages: list[StageConfig] = Field(min_length=1)
    edges: list[EdgeConfig] = []
    placement: PlacementConfig = PlacementConfig()
    control: ControlPlaneConfig = ControlPlaneConfig()
    data: DataPlaneConfig = DataPlaneConfig()
    tombstones: TombstoneConfig = TombstoneConfig()
    request_deadline_s: float = Field(300, gt=0)
    # While a stage process has requests (and 5 s after), it asks Linux to keep
    # the CPUs out of idle states slower to leave than this many microseconds
    # (0: idle CPUs poll, never halt).  None: power management is left alone.
    # Needs root to write /dev/cpu_dma_latency (runtime/cpu_wakeup.py).
    cpu_wakeup_latency_us: float | None = Field(None, ge=0, le=1_000_000)
    # Anything a front end wants to read from the same file (session defaults).
    extra: dict[str, Any] = {}

    @model_validator(mode="after")
    def _topology(self) -> "PipelineConfig":
        names = [s.name for s in self.stages]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate stage names: {sorted(dup)}")
        known = set(names)
        for i, e in enumerate(self.edges):
            for end, n in (("from", e.src), ("to", e.dst)):
                if n not in known:
                    raise ValueError(f"edges[{i}].{end}: unknown stage {n!r} (known: {sorted(known)})")
            if e.src == e.dst:
                raise ValueError(f"edges[{i}]: a stage cannot feed itself ({e.src!r})")
        cycle = _find_cycle(names, [(e.src, e.dst) for e in self.edges])
        if cycle:
            raise ValueError("edges form a cycle: " + " -> ".join(cycle))
        seen: dict[str, str] = {}
        gnames = [g.name for g in self.placement.groups]
        if len(set(gnames)) != len(gnames):
            raise ValueError("placement.groups: duplicate group names")
        for gi, g in enumerate(self.placement.groups):
            for s in g.stages:
                if s not in known:
                    raise ValueError(f"placement.groups[{gi}].stages: unknown stage {s!r}")
                if s in seen:
                    raise ValueError(f"placement.groups[{gi}].stages: stage {s!r} already placed in group {seen[s]!r}")
                seen[s] = g.name
        for s in self.stages:
            if s.name not in seen:
                self.placement.groups.append(GroupConfig(name=s.name, stages=[s.name]))
        ctl = self.control
        standby = [g.name for g in self.placement.groups if g.standby]
        if standby and self.placement.backend != "ray":
            raise ValueError(f"placement.groups {standby}: 'standby' is for backend 'ray' "
                             "(a local stage process is started again at once)")
        if self.placement.backend == "ray":
            hosted = [g.name for g in self.placement.groups if g.host]
            if hosted:
                raise ValueError(f"placement.groups {hosted}: 'host' is for backend 'local'; "
                                 "on Ray the node comes from the group's resources")
            if ctl.transport == "ipc" and "transport" in ctl.model_fields_set:
                raise ValueError("control.transport: a Ray pipeline spans nodes; its control plane is tcp")
            ctl.transport = "tcp"  # tcp_host becomes the driver node's address at start
        if ctl.transport == "tcp" and ctl.curve is False:
            from runtime.curve import is_loopback

            if not is_loopback(ctl.tcp_host):
                raise ValueError(f"control.curve: a tcp control plane on {ctl.tcp_host} (not loopback) "
                                 "must use CURVE keys; remove 'curve: false' or bind 127.0.0.1")
        for s in self.stages:
            if s.scheduler == "chunk" and len(self.inputs(s.name)) > 1:
                raise ValueError(f"stage {s.name!r}: a chunk stage takes one input edge")
        return self

    # ---- topology queries --------------------------------------------------------------
    def uses_curve(self) -> bool:
        ctl = self.control
        if ctl.transport != "tcp":
            return False
        if ctl.curve is not None:
            return ctl.curve
        from runtime.curve import is_loopback

        return not is_loopback(ctl.tcp_host)

    def stage(self, name: str) -> StageConfig:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)

    def inputs(self, name: str) -> list[EdgeConfig]:
        return [e for e in self.edges if e.dst == name]

    def outputs(self, name: str) -> list[EdgeConfig]:
        return [e for e in self.edges if e.src == name]

    def group_of(self, stage: str) -> GroupConfig:
        for g in self.placement.groups:
            if stage in g.stages:
                return g
        raise KeyError(stage)

    def roots(self) -> list[str]:
        return [s.name for s in self.stages if not self.inputs(s.name)]

    def route_from(self, entry: str, within: list[str] | None = None) -> list[str]:
        """Stages a request entering at ``entry`` visits (restricted to ``within``)."""
        allowed = set(within) if within else {s.name for s in self.stages}
        if entry not in allowed:
            raise ValueError(f"entry stage {entry!r} is not in the route {sorted(allowed)}")
        order: list[str] = []
        todo = [entry]
        while todo:
            n = todo.pop(0)
            if n in order:
                continue
            order.append(n)
            todo.extend(e.dst for e in self.outputs(n) if e.dst in allowed)
        return order


def _find_cycle(nodes: list[str], edges: list[tuple[str, str]]) -> list[str] | None:
    adj: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        adj[a].append(b)
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in adj[n]:
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        path.pop()
        state[n] = 2
        return None

    for n in nodes:
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def _loc(err: dict) -> str:
    parts: list[str] = []
    for p in err.get("loc", ()):
        if isinstance(p, int):
            parts[-1:] = [f"{parts[-1]}[{p}]"] if parts else [f"[{p}]"]
        else:
            parts.append(str(p))
    return ".".join(parts) or "(top level)"


def parse_config(data: Any, source: str = "<config>", check_imports: bool = True) -> PipelineConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping, got {type(data).__name__}")
    try:
        cfg = PipelineConfig.model_validate(data)
    except ValidationError as exc:
        lines = [f"{source}: {_loc(e)}: {e['msg']}" for e in exc.errors()]
        raise ConfigError("invalid pipeline config\n  " + "\n  ".join(lines)) from None
    if check_imports:
        for i, s in enumerate(cfg.stages):
            module = s.executor.split(":", 1)[0]
            try:
                found = importlib.util.find_spec(module)
            except (ImportError, ValueError):
                found = None
            if found is None:
                raise ConfigError(f"{source}: stages[{i}].executor: module {module!r} of stage "
                                  f"{s.name!r} cannot be found")
    return cfg


def load_config(path: str | Path, check_imports: bool = True) -> PipelineConfig:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_config(data, str(path), check_imports)
