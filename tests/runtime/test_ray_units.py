"""Ray placement without a cluster: config rules, transports from a node map, the control plane's fit."""

from __future__ import annotations

import pytest

from runtime.config import ConfigError, parse_config
from runtime.placement import COORDINATOR, NodeMap, edge_transport, transports_to
from runtime.ray.cluster import fit_control_plane


def cfg(placement: dict, control: dict | None = None):
    data = {"stages": [{"name": n, "executor": "voice_server.testing.stages:Echo"} for n in ("a", "b", "c")],
            "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "c"}],
            "placement": placement}
    if control is not None:
        data["control"] = control
    return parse_config(data)


def test_ray_backend_defaults_and_resources():
    c = cfg({"backend": "ray", "groups": [{"name": "b", "stages": ["b"], "replicas": 2, "num_cpus": 2,
                                           "num_gpus": 0.5, "resources": {"tts": 1}}]})
    assert c.control.transport == "tcp" and c.placement.ray_strategy == "SPREAD"
    b = c.group_of("b")
    assert (b.num_cpus, b.num_gpus, b.resources) == (2, 0.5, {"tts": 1})
    assert cfg({}).placement.backend == "local" and cfg({}).control.transport == "ipc"


def test_ray_backend_refuses_host_and_ipc():
    with pytest.raises(ConfigError, match="'host' is for backend 'local'"):
        cfg({"backend": "ray", "groups": [{"name": "b", "stages": ["b"], "host": "gpu-box"}]})
    with pytest.raises(ConfigError, match="control plane is tcp"):
        cfg({"backend": "ray"}, {"transport": "ipc"})
    with pytest.raises(ConfigError, match="backend"):
        cfg({"backend": "kubernetes"})


def test_transports_follow_the_nodes_not_the_host_field():
    c = cfg({"backend": "ray", "groups": [{"name": "b", "stages": ["b"], "replicas": 2, "device": "cuda:0"},
                                          {"name": "c", "stages": ["c"], "device": "cuda:0"}]})
    nodes = NodeMap("n1", {"a": ["n1"], "b": ["n2", "n1"], "c": ["n1"]})
    assert transports_to(c, COORDINATOR, "a", nodes) == ["shm"]
    assert transports_to(c, "a", "b", nodes) == ["frame", "shm"]          # per replica of b
    # same node and both on "cuda:0", but Ray gives each actor its own GPUs: through host memory
    assert edge_transport(c, "b", "c", nodes, src_replica=1) == "shm"
    assert edge_transport(c, "b", "c", nodes, src_replica=0) == "frame"
    assert edge_transport(c, "c", COORDINATOR, nodes) == "shm"
    # a replica not placed yet (lost with its node) is never assumed local
    nodes.groups["c"] = [None]
    assert edge_transport(c, "b", "c", nodes, src_replica=1) == "frame"
    # without a node map the host field decides, as before
    local = cfg({"groups": [{"name": "b", "stages": ["b"], "host": "other"}]})
    assert edge_transport(local, "a", "b") == "frame" and edge_transport(local, COORDINATOR, "a") == "shm"


def test_control_plane_fits_the_cluster_addresses():
    c = cfg({"backend": "ray"})
    lo = fit_control_plane(c, "127.0.0.1", {"127.0.0.1"})
    assert (lo.control.tcp_host, lo.control.curve, lo.uses_curve()) == ("127.0.0.1", False, False)
    wide = fit_control_plane(c, "10.1.0.1", {"10.1.0.1", "10.1.0.2"})
    assert (wide.control.tcp_host, wide.uses_curve()) == ("10.1.0.1", True)
    assert c.control.curve is None  # the original is left alone
    with pytest.raises(ConfigError, match="must use CURVE"):
        fit_control_plane(cfg({"backend": "ray"}, {"curve": False}), "127.0.0.1", {"127.0.0.1", "10.1.0.2"})
    forced = fit_control_plane(cfg({"backend": "ray"}, {"curve": True}), "127.0.0.1", {"127.0.0.1"})
    assert forced.uses_curve()


def test_metrics_label_every_replica_with_its_node():
    from voice_server.metrics import _families

    snap = {"processes": {"think/0": {"ready": True, "node": "ab12", "node_ip": "10.0.0.2", "stages": {}},
                          "think/1": {"ready": True, "node": "cd34", "node_ip": "10.0.0.3", "stages": {}}}}
    fam = next(f for f in _families(snap) if f.name == "voice_process_node")
    got = {(s.labels["replica"], s.labels["node"], s.labels["node_ip"]) for s in fam.samples}
    assert got == {("0", "ab12", "10.0.0.2"), ("1", "cd34", "10.0.0.3")}


def test_placing_a_replica_again_backs_off():
    """A replica whose node is gone is retried while the pipeline runs, but
    ever less often: 0.5 s, doubling, at most 15 s between tries."""
    from runtime.ray.supervisor import RETRY_PLACE_MAX_S, retry_wait_s

    waits = [retry_wait_s(a) for a in range(1, 10)]
    assert waits[:5] == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert waits[5:] == [RETRY_PLACE_MAX_S] * 4 and retry_wait_s(10**6) == RETRY_PLACE_MAX_S


def test_standby_is_a_ray_setting():
    c = cfg({"backend": "ray", "groups": [{"name": "b", "stages": ["b"], "standby": True}]})
    assert c.group_of("b").standby and not c.group_of("a").standby
    with pytest.raises(ConfigError, match="'standby' is for backend 'ray'"):
        cfg({"groups": [{"name": "b", "stages": ["b"], "standby": True}]})


def test_node_label_selectors():
    from runtime.ray.nodes import avoiding, pinned_to

    assert avoiding(set()) is None
    assert avoiding({"bb", "aa"}) == [{"ray.io/node-id": "!in(aa,bb)"}]
    assert pinned_to("aa") == [{"ray.io/node-id": "aa"}]


async def test_a_raylet_that_goes_away_is_seen_at_once():
    """raylet_hangs_up returns when the far end closes; raylet_answers tells a speaking raylet
    from a closed port and from one that accepts but says nothing (a frozen process)."""
    import asyncio
    import time

    from runtime.ray.nodes import raylet_answers, raylet_hangs_up

    conns = []

    def accept(reader, writer, greet: bool = True):
        if greet:
            writer.write(b"\x00")  # a gRPC server's settings frame comes first
        conns.append(writer)

    mute = await asyncio.start_server(lambda r, w: accept(r, w, greet=False), "127.0.0.1", 0)
    assert not await raylet_answers(mute.sockets[0].getsockname()[:2], timeout_s=0.2)  # frozen
    mute.close()
    conns.clear()
    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    address = server.sockets[0].getsockname()[:2]
    assert await raylet_answers(address)
    watch = asyncio.ensure_future(raylet_hangs_up(address))
    while len(conns) < 2:
        await asyncio.sleep(0.01)
    assert not watch.done()  # an idle connection stays open
    t0 = time.monotonic()
    server.close()
    for w in conns:
        w.close()
    await asyncio.wait_for(watch, 5)
    print(f"hang-up seen after {(time.monotonic() - t0) * 1000:.1f} ms")
    await server.wait_closed()
    assert not await raylet_answers(address)
    await asyncio.wait_for(raylet_hangs_up(address), 5)  # nothing to connect to: at once
