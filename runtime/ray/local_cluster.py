"""Several Ray nodes on this one machine, with this process as their driver.

The Ray backend is tested and benchmarked on one machine: a head and a few
worker nodes, each a raylet with its own resources, all on one address.  The
tests, the benchmarks and a reader trying ``placement.backend: ray`` without a
second machine need the same few moves (start the head, add and remove nodes,
join as the driver, ask Ray what is free or alive, tear it all down), and
this module is where they are written, so that no code outside
``runtime/ray/`` imports ``ray``.

Ray reads ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` when it is imported: set to
``0`` it resolves "this node" to 127.0.0.1 instead of the host's routable
address, which keeps a loopback cluster on loopback.  It is set here, before
Ray's import, and only for processes that import this module; one whose nodes
have routable addresses sets it to ``1`` before importing this module.
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

# Small object stores: our stages move their data on their own sockets, not through Ray.
NODE_ARGS = {"node_ip_address": "127.0.0.1", "object_store_memory": 80 << 20, "include_dashboard": False}


class LocalCluster:
    """A head node and the worker nodes added to it; :meth:`join` makes this process the driver.

    ``head`` and each :meth:`add_node` take Ray's node arguments (``num_cpus``,
    ``resources``, ``node_ip_address``, ``_system_config`` ...) over
    :data:`NODE_ARGS`.  Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, **head: Any) -> None:
        self._cluster = Cluster(initialize_head=True, head_node_args={**NODE_ARGS, **head})
        self.head_node = self._cluster.head_node  # Ray's handle: .node_id, .address
        self.address: str = self._cluster.address

    def add_node(self, **args: Any) -> Any:
        """Start one more node (Ray starts nodes from the main thread only); returns its handle."""
        return self._cluster.add_node(**{**NODE_ARGS, **args})

    def remove_node(self, node: Any, *, graceful: bool = True) -> None:
        """Stop ``node``'s processes; ``graceful=False`` is a node lost, not a node leaving."""
        self._cluster.remove_node(node, graceful)

    def wait_for_nodes(self) -> None:
        self._cluster.wait_for_nodes()

    def join(self) -> "LocalCluster":
        """Wait for every node, then connect this process to the cluster as its driver."""
        self._cluster.wait_for_nodes()
        ray.init(address=self.address, include_dashboard=False, log_to_driver=False)
        return self

    def close(self) -> None:
        """Disconnect the driver (if it joined) and stop every node."""
        if ray.is_initialized():
            ray.shutdown()
        self._cluster.shutdown()

    def __enter__(self) -> "LocalCluster":
        return self.join()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def available(resource: str) -> float:
        """How much of ``resource`` is free across the cluster now (0 when none is)."""
        return ray.available_resources().get(resource, 0)

    @staticmethod
    def node_alive(node_id: str) -> bool:
        """Whether Ray itself lists ``node_id`` as alive (its GCS verdict, not ours)."""
        return any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes())
