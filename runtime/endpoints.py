"""Where each process listens on the control plane.

ipc:// endpoints live in a private directory (mode 0700) so that no other
user on the host can connect a socket to a stage; tcp:// endpoints bind only
the address the config names.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from dataclasses import dataclass, field

from runtime.config import PipelineConfig


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class Endpoints:
    coordinator: str
    control_pub: str
    groups: dict[str, list[str]] = field(default_factory=dict)
    run_dir: str | None = None

    def of(self, group: str, replica: int) -> str:
        return self.groups[group][replica]

    def to_wire(self) -> dict:
        return {"coordinator": self.coordinator, "control_pub": self.control_pub, "groups": self.groups}

    @classmethod
    def from_wire(cls, d: dict) -> "Endpoints":
        return cls(d["coordinator"], d["control_pub"], {k: list(v) for k, v in d["groups"].items()})

    def cleanup(self) -> None:
        if self.run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)


def allocate(cfg: PipelineConfig, run_token: str) -> Endpoints:
    ctl = cfg.control
    if ctl.transport == "tcp":
        host = ctl.tcp_host

        def ep(_: str) -> str:
            return f"tcp://{host}:{_free_port(host)}"
        run_dir = None
    else:
        base = ctl.run_dir or tempfile.gettempdir()
        os.makedirs(base, exist_ok=True)
        run_dir = tempfile.mkdtemp(prefix=f"va-{run_token}-", dir=base)
        os.chmod(run_dir, 0o700)

        def ep(name: str) -> str:
            return f"ipc://{os.path.join(run_dir, name)}.sock"
    eps = Endpoints(ep("coord"), ep("control"), run_dir=run_dir)
    for g in cfg.placement.groups:
        eps.groups[g.name] = [ep(f"{g.name}-{r}") for r in range(g.replicas)]
    return eps
