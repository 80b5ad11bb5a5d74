"""Joining a Ray cluster, and what that settles in a pipeline config.

``RAY_ADDRESS`` (``voice-agent serve --ray-address`` sets it) names a cluster
to join: ``auto`` for the one ``ray start`` made on this machine, or
``HOST:PORT`` of a head node.  Without one, a private single-node cluster is
started on 127.0.0.1 and stopped with the pipeline.  Ray's dashboard and
usage reporting stay off either way.

Once connected, the coordinator's control sockets bind the driver node's
address, and CURVE is on whenever any node's address is not loopback.
"""

from __future__ import annotations

import math
import os
import sys

from runtime.config import ConfigError, PipelineConfig
from runtime.curve import is_loopback

_owned = False  # this process started the Ray instance it is connected to
_users = 0      # pipelines of this process using that instance


def connect(cfg: PipelineConfig) -> None:
    """Connect this process to Ray unless it already is (a test or an embedding app did it)."""
    global _owned, _users
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    address = os.environ.get("RAY_ADDRESS") or None
    host = address.rsplit(":", 1)[0] if address and ":" in address else None
    if (not address or (host and is_loopback(host))) and "ray" not in sys.modules:
        # Single-machine mode: Ray's idea of "this node" is 127.0.0.1 (read when ray is imported),
        # so a private cluster never binds or advertises the host's routable address, and a
        # loopback head address is not rewritten into the host's address.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    if address and "RAY_AUTH_MODE" not in os.environ and (
            os.environ.get("RAY_AUTH_TOKEN") or os.path.exists(os.path.expanduser("~/.ray/auth_token"))):
        # A cluster started by `ray start` with a token (Ray 2.60 does so once ~/.ray/auth_token
        # exists) answers only callers in token mode, which Ray reads when it is imported.
        os.environ["RAY_AUTH_MODE"] = "token"
    import ray

    if ray.is_initialized():
        _users += _owned
        return
    if address:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
        return
    # A private cluster sized for this pipeline: Ray's CPUs are logical shares.
    want = sum(g.num_cpus * g.replicas for g in cfg.placement.groups)
    ray.init(address="local", num_cpus=max(os.cpu_count() or 1, math.ceil(want)), include_dashboard=False,
             log_to_driver=False, _node_ip_address="127.0.0.1")
    _owned, _users = True, 1


def disconnect() -> None:
    """Stop the Ray instance when the last pipeline that started it closes; leave a joined cluster alone."""
    global _owned, _users
    if _owned:
        _users -= 1
        if _users <= 0:
            import ray

            ray.shutdown()
            _owned, _users = False, 0


def node_addresses() -> dict[str, str]:
    """Alive node id -> its address."""
    import ray

    return {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")}


def settle(cfg: PipelineConfig) -> PipelineConfig:
    """``cfg`` fitted to the cluster this process is connected to."""
    import ray

    return fit_control_plane(cfg, ray.util.get_node_ip_address(), set(node_addresses().values()))


def fit_control_plane(cfg: PipelineConfig, driver_ip: str, node_ips: set[str]) -> PipelineConfig:
    """A copy of ``cfg``: control plane on tcp at the driver's address, CURVE on when any node is routable."""
    out = cfg.model_copy(deep=True)
    addresses = node_ips | {driver_ip}
    routable = sorted(a for a in addresses if not is_loopback(a))
    ctl = out.control
    ctl.transport = "tcp"
    ctl.tcp_host = driver_ip
    if ctl.curve is None:
        ctl.curve = bool(routable)
    elif ctl.curve is False and routable:
        raise ConfigError(f"control.curve: false, but Ray nodes have routable addresses {routable}; "
                          "a control plane between nodes must use CURVE keys")
    return out
