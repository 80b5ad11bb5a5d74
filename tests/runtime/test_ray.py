"""Stages as Ray actors on a real multi-node Ray cluster on this machine.

One cluster for the module (a head and two workers, each a raylet with its
own resources, all on 127.0.0.1); the node-loss test adds nodes and removes
them again.  The stages are the runtime's test executors (voice_server/testing/stages.py).
"""

from __future__ import annotations

import asyncio
import os
import time

import numpy as np
import pytest

from runtime.pipeline import Pipeline  # noqa: E402
from runtime.ray.local_cluster import LocalCluster  # noqa: E402
from tests.runtime.conftest import pid_alive, settle  # noqa: E402

# Ray's own word on a dead node comes quickly here; heartbeats are the other, faster path.
HEAD_SYSTEM_CONFIG = {"health_check_period_ms": 300, "health_check_failure_threshold": 3,
                      "health_check_initial_delay_ms": 0, "health_check_timeout_ms": 300}


@pytest.fixture(scope="module")
def cluster():
    c = LocalCluster(num_cpus=2, resources={"node_a": 1}, _system_config=HEAD_SYSTEM_CONFIG)
    c.named = {"a": c.head_node,
               "b": c.add_node(num_cpus=2, resources={"node_b": 1}),
               "c": c.add_node(num_cpus=2, resources={"node_c": 1, "spare": 1})}
    with c:
        yield c


def stage(name: str, executor: str = "voice_server.testing.stages:Echo", **kw) -> dict:
    return {"name": name, "executor": executor, **kw}


def ray_config(stages: list[dict], edges: list[tuple[str, str]], groups: list[dict], **control) -> dict:
    return {"name": "ray-test", "stages": stages,
            "edges": [{"from": a, "to": b} for a, b in edges],
            "placement": {"backend": "ray", "groups": groups},
            "control": {"heartbeat_ms": 100, "dead_after_ms": 600, "ready_timeout_s": 60, **control}}


@pytest.fixture
def start(cluster, start):
    """conftest's start(cfg), with the cluster up first."""
    return start


THREE_NODES = ray_config(
    [stage("a"), stage("count", "voice_server.testing.stages:Counter", scheduler="ar", args={"step_ms": 20}),
     stage("c", "voice_server.testing.stages:Doubler", scheduler="chunk")],
    [("a", "count"), ("count", "c")],
    [{"name": "a", "stages": ["a"], "resources": {"node_a": 1}},
     {"name": "count", "stages": ["count"], "resources": {"node_b": 1}},
     {"name": "c", "stages": ["c"], "resources": {"node_c": 1}}],
    curve=True)


ECHO_THREE_NODES = ray_config(
    [stage("a"), stage("b"), stage("c")], [("a", "b"), ("b", "c")],
    [{"name": "a", "stages": ["a"], "resources": {"node_a": 1}},
     {"name": "b", "stages": ["b"], "resources": {"node_b": 1}},
     {"name": "c", "stages": ["c"], "resources": {"node_c": 1}}],
    curve=True)


async def test_three_stages_on_three_nodes_pick_transports_from_real_placement(start, cluster):
    p = await start(ECHO_THREE_NODES)
    snap = p.snapshot()["processes"]
    ids = {k: cluster.named[k].node_id for k in "abc"}
    assert {g: snap[f"{g}/0"]["node"] for g in "abc"} == ids
    assert p.coordinator.supervisor.nodes.coordinator == ids["a"]  # the driver joined the head node
    assert p.cfg.uses_curve() and p.coordinator.auth is not None
    # the coordinator shares a node with a only: shm in, frames everywhere else
    assert p.coordinator._entry_transport == {"a": ["shm"], "b": ["frame"], "c": ["frame"]}

    big = np.arange(1 << 18, dtype=np.float32)  # 1 MB: above the inline limit
    for small in (False, True):
        x = big[:1024] if small else big
        h = await p.submit(x)
        term, chunks = await h.result()
        assert term.kind == "done" and chunks[0].stage == "c" and np.array_equal(chunks[0].payload, x)
    del chunks
    snap = await settle(p)
    # coordinator -> a is on one node: shared memory; a -> b -> c -> coordinator cross nodes: frames.
    assert snap["coordinator_pool"]["segments"] >= 1, snap["coordinator_pool"]
    for key in ("a/0", "b/0", "c/0"):
        assert snap["processes"][key]["pool"].get("segments", 0) == 0, \
            f"{key} sends only across nodes, so it must never lend shared memory: {snap['processes'][key]}"


async def test_a_group_no_node_can_host_fails_the_start_naming_what_it_asked_for(cluster):
    from runtime.supervisor import StageStartError

    cfg = ray_config([stage("a"), stage("b")], [("a", "b")],
                     [{"name": "a", "stages": ["a"], "resources": {"node_a": 1}},
                      {"name": "b", "stages": ["b"], "num_gpus": 1, "resources": {"tts_box": 1}}],
                     ready_timeout_s=2)
    with pytest.raises(StageStartError, match=r"stage group 'b'.*no room for 1 x .*GPU.*tts_box"):
        await Pipeline.start(cfg)
    # nothing of it is left behind: its placement groups are gone, the head's slot is free again
    await _wait_for(lambda: LocalCluster.available("node_a") == 1, 10, "node_a's slot back")


async def test_barge_in_abort_is_acked_by_every_stage_on_every_node(start, cluster):
    p = await start(THREE_NODES)
    h = await p.submit({"start": 0, "n": 100_000})
    first = await h.next_event(timeout=20)
    assert first.kind == "chunk"
    ticket = p.abort(h.request_id, "turn_detected")
    await asyncio.wait_for(ticket.acked, 10)
    assert ticket.expected == set() and ticket.ack_ms is not None
    assert "count" in ticket.held_by  # the generating stage on node b dropped it
    term, _ = await h.result()
    assert term.kind == "cancelled"
    # every stage on every node keeps the tombstone, holds nothing and has lent nothing
    keys = ("a/0", "count/0", "c/0")
    snap = await _wait_for(lambda: (lambda s: all(s["processes"][k]["tombstones"] >= 1 for k in keys) and s)(
        p.snapshot()), 10, "tombstones on every node")
    snap = await settle(p)
    assert not snap["live_requests"]
    for key in keys:
        proc = snap["processes"][key]
        assert not proc["held"] and not proc["pool"].get("lent"), (key, proc)
    # the pipeline still serves
    h = await p.submit({"start": 2, "n": 3})
    term, chunks = await h.result()
    assert term.kind == "done" and [c.payload for c in chunks] == [4, 6, 8]


async def _first_chunk(p: Pipeline, h, timeout: float = 20):
    ev = await h.next_event(timeout=timeout)
    assert ev.kind == "chunk", ev
    return ev


async def _submit_on_replica(p: Pipeline, replica: int, payload, replicas: int = 2):
    """Request ids decide the replica (rid % replicas): submit until one lands where wanted."""
    for _ in range(50):
        h = await p.submit(payload)
        if h.request_id % replicas == replica:
            return h
        await h.abort("not this replica")
    raise AssertionError("no request id landed on the wanted replica")


async def _wait_for(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def test_node_lost_mid_reply_fails_only_its_requests_and_the_group_comes_back(start, cluster):
    doomed = cluster.add_node(num_cpus=2, resources={"spare": 1})
    cluster.wait_for_nodes()
    added = [doomed]
    try:
        cfg = ray_config(
            [stage("a"), stage("gen", "voice_server.testing.stages:Counter", scheduler="ar", args={"step_ms": 20})],
            [("a", "gen")],
            [{"name": "a", "stages": ["a"], "resources": {"node_a": 1}},
             # two replicas, each needs the one 'spare' of a node: node c and the doomed node
             {"name": "gen", "stages": ["gen"], "replicas": 2, "resources": {"spare": 1}}],
            # a stage of the nodes that stay must not be taken for hung while a busy
            # 2-core CI machine runs another test file beside this one (1.2 s seen)
            dead_after_ms=2000)
        p = await start(cfg)
        procs = p.snapshot()["processes"]
        lost = next(r for r in (0, 1) if procs[f"gen/{r}"]["node"] == doomed.node_id)
        kept = 1 - lost
        assert procs[f"gen/{kept}"]["node"] == cluster.named["c"].node_id

        on_lost = await _submit_on_replica(p, lost, {"start": 0, "n": 100_000})
        on_kept = await _submit_on_replica(p, kept, {"start": 0, "n": 150})
        await _first_chunk(p, on_lost)
        await _first_chunk(p, on_kept)

        t0 = time.monotonic()
        cluster.remove_node(doomed, graceful=False)
        added.remove(doomed)
        term = None
        async for ev in on_lost:  # chunks sent before the loss may still arrive first
            if ev.kind != "chunk":
                term = ev
                break
        error_s = time.monotonic() - t0
        print(f"in-band error {error_s * 1000:.0f} ms after the node was killed")
        assert term.kind == "error" and term.error.code.value == "stage_unavailable", term
        assert "gen" in term.error.message

        # The session on the other node never noticed.
        term_kept, chunks = await on_kept.result()
        assert term_kept.kind == "done"

        # No node has a free 'spare' now: a request that needs the lost replica fails at once, clearly.
        h = await _submit_on_replica(p, lost, {"start": 0, "n": 2})
        term, _ = await h.result()
        assert term.kind == "error" and term.error.code.value == "stage_unavailable"
        assert "re-created on a Ray node with" in term.error.message and "spare" in term.error.message
        h = await _submit_on_replica(p, kept, {"start": 0, "n": 2})
        term, _ = await h.result()
        assert term.kind == "done"

        # Capacity arrives: the replica comes back there, and the next turn on it works.
        fresh = cluster.add_node(num_cpus=2, resources={"spare": 1})
        added.append(fresh)
        back = await _wait_for(lambda: (lambda pr: pr["ready"] and pr["node"] == fresh.node_id and pr)(
            p.snapshot()["processes"][f"gen/{lost}"]), 60, "the lost replica on the new node")
        assert back["restarts"] == 1
        h = await _submit_on_replica(p, lost, {"start": 5, "n": 3})
        term, chunks = await h.result()
        assert term.kind == "done" and [c.payload for c in chunks] == [5, 6, 7]
        await p.close()
    finally:
        for n in added:
            cluster.remove_node(n)


async def test_killed_actor_fails_its_requests_and_is_recreated(start, cluster):
    p = await start(THREE_NODES)
    h = await p.submit({"start": 0, "n": 100_000})
    await _first_chunk(p, h)
    old_pid = p.snapshot()["processes"]["count/0"]["pid"]
    p.kill_stage("count", 0)
    term, _ = await h.result()
    assert term.kind == "error" and term.error.code.value == "stage_unavailable"
    await _wait_for(lambda: (lambda pr: pr["ready"] and pr["pid"] != old_pid)(
        p.snapshot()["processes"]["count/0"]), 60, "count/0 back")
    h = await p.submit({"start": 1, "n": 2})
    term, chunks = await h.result()
    assert term.kind == "done" and [c.payload for c in chunks] == [2, 4]


async def test_spoken_turn_with_listen_think_speak_on_three_nodes(start, cluster, tmp_path):
    """configs/voice-cpu-ray.yaml with its groups pinned to the three nodes: a flite question in,
    the transcript, a reply, and reply audio out."""
    import shutil
    import subprocess
    from pathlib import Path

    import yaml

    from voice_server.cli import read_wav, reply, to_16k, transcribe

    assert shutil.which("flite"), "Debian flite is needed (the Makefile installs it)"
    data = yaml.safe_load((Path(__file__).parents[2] / "configs" / "voice-cpu-ray.yaml").read_text())
    pin = {"listen": "node_a", "think": "node_b", "speak": "node_c"}
    [think] = [s for s in data["stages"] if s["name"] == "think"]
    think["args"]["model"] = "qwen2.5-coder-0.5b"   # placement is checked here, not the brain: the quick one
    think["args"]["warm_batch"] = False             # nor its memory
    for g in data["placement"]["groups"]:
        g.update(num_cpus=1, resources={pin[g["name"]]: 1})
    data["control"].update(ready_timeout_s=120, dead_after_ms=3000)  # 2 busy cores, as voice-cpu.yaml
    p = await start(data)
    snap = p.snapshot()["processes"]
    assert {g: snap[f"{g}/0"]["node"] for g in pin} == {g: cluster.named[n[-1]].node_id for g, n in pin.items()}
    assert p.coordinator._entry_transport == {"listen": ["shm"], "think": ["frame"], "speak": ["frame"]}

    wav = tmp_path / "q.wav"
    subprocess.run(["flite", "-voice", "slt", "-t", "what is the capital of france", "-o", str(wav)], check=True)
    audio, rate = read_wav(str(wav))
    text, _, _ = await transcribe(p, to_16k(audio, rate))
    assert "capital" in text.lower() and "france" in text.lower(), text
    r = await reply(p, text, max_tokens=24)
    assert r["terminal"].kind == "done", r["terminal"]
    assert r["reply"] and len(r["audio"]) > r["sample_rate"] // 4  # some words, and speech for them


async def test_hung_stage_is_found_by_heartbeats_and_replaced(start, cluster):
    """A stage that stops answering (SIGSTOP) is not dead to Ray: heartbeats decide."""
    import signal

    p = await start(THREE_NODES)
    h = await p.submit({"start": 0, "n": 100_000})
    await _first_chunk(p, h)
    pid = p.snapshot()["processes"]["count/0"]["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        term, _ = await h.result()
        assert term.kind == "error" and term.error.code.value == "stage_unavailable"
        assert "no heartbeat" in term.error.message
        await _wait_for(lambda: (lambda pr: pr["ready"] and pr["pid"] != pid)(
            p.snapshot()["processes"]["count/0"]), 60, "count/0 replaced")
        h = await p.submit({"start": 3, "n": 2})
        term, chunks = await h.result()
        assert term.kind == "done" and [c.payload for c in chunks] == [6, 8]
        # killing its actor took the stopped process (same process group) with it
        await _wait_for(lambda: not pid_alive(pid), 10, "the hung process gone")
    finally:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_nodes_on_routable_addresses_get_curve_and_their_own_endpoints():
    """Two Ray nodes on 10.77.0.1 / 10.77.0.2, inside a network namespace made for this test
    (loopback only, the two addresses on it: nothing outside can reach them)."""
    import json
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    setup = "ip link set lo up && ip addr add 10.77.0.1/32 dev lo && ip addr add 10.77.0.2/32 dev lo"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    run = subprocess.run(["unshare", "--net", "sh", "-c", f"{setup} && exec {sys.executable} -m tests.runtime.ray_netns_check"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=root)
    assert run.returncode == 0, f"network namespace run failed (needs root, unshare, ip):\n{run.stderr[-3000:]}"
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["curve"] and got["curve_server"], got  # routable node addresses: CURVE on by itself
    assert got["tcp_host"] == "10.77.0.1" and got["coordinator"].startswith("tcp://10.77.0.1:")
    assert got["node_ips"] == {"a/0": "10.77.0.1", "b/0": "10.77.0.2"}
    assert got["groups"]["b"][0].startswith("tcp://10.77.0.2:")  # the stage binds its own node's address
    assert got["entry"] == {"a": ["shm"], "b": ["frame"]}
    assert got["reply"] == "done" and got["same"]
