"""Two Ray nodes on routable addresses, run by test_ray.py inside a network namespace it creates
(``python -m tests.runtime.ray_netns_check`` from the checkout).

The namespace has loopback and one dummy interface carrying 10.77.0.1 and
10.77.0.2 (no link leaves it), so the nodes have non-loopback addresses and
nothing can reach them from outside.  Prints one JSON line: what the
pipeline chose, and whether a reply crossed the nodes.
"""

from __future__ import annotations

import asyncio
import json
import os

os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "1"  # the nodes' own routable addresses, not 127.0.0.1

import numpy as np  # noqa: E402

from runtime.pipeline import Pipeline  # noqa: E402
from runtime.ray.local_cluster import LocalCluster  # noqa: E402


async def run() -> dict:
    cfg = {"stages": [{"name": "a", "executor": "voice_server.testing.stages:Echo"}, {"name": "b", "executor": "voice_server.testing.stages:Echo"}],
           "edges": [{"from": "a", "to": "b"}],
           "placement": {"backend": "ray", "groups": [
               {"name": "a", "stages": ["a"], "resources": {"n1": 1}},
               {"name": "b", "stages": ["b"], "resources": {"n2": 1}}]},
           "control": {"ready_timeout_s": 60}}
    p = await Pipeline.start(cfg)
    try:
        x = np.arange(1 << 18, dtype=np.float32)
        h = await p.submit(x)
        term, chunks = await h.result()
        snap = p.snapshot()["processes"]
        return {"curve": p.cfg.uses_curve(), "tcp_host": p.cfg.control.tcp_host,
                "coordinator": p.endpoints.coordinator, "groups": p.endpoints.groups,
                "curve_server": bool(p.coordinator.pull.curve_server),
                "node_ips": {k: v["node_ip"] for k, v in snap.items()},
                "entry": p.coordinator._entry_transport,
                "reply": term.kind, "same": bool(chunks and np.array_equal(chunks[0].payload, x))}
    finally:
        await p.close()


def main() -> None:
    c = LocalCluster(node_ip_address="10.77.0.1", num_cpus=1, resources={"n1": 1})
    c.add_node(node_ip_address="10.77.0.2", num_cpus=1, resources={"n2": 1})
    with c:
        print(json.dumps(asyncio.run(run())), flush=True)


if __name__ == "__main__":
    main()
