import asyncio
import os

import pytest

from runtime.pipeline import Pipeline


def linear(*stages: dict, kind: str = "stream", **extra) -> dict:
    edges = [{"from": a["name"], "to": b["name"], "kind": kind} for a, b in zip(stages, stages[1:])]
    return {"stages": list(stages), "edges": edges, **extra}


@pytest.fixture
async def start():
    """start(cfg) -> running Pipeline; every pipeline is closed after the test."""
    made: list[Pipeline] = []

    async def _start(cfg):
        p = await Pipeline.start(cfg)
        made.append(p)
        return p

    yield _start
    for p in made:
        await p.close()


async def fresh_snapshot(p: Pipeline, timeout: float = 5.0) -> dict:
    """The snapshot once every ready stage process sent two stats reports since the call.

    Stats are pushed every 0.2 s; the first report to arrive may have been made
    before the call, the second was made after it, so it shows everything that
    happened before the call.
    """
    loop = asyncio.get_running_loop()
    seen = {k: pr["stats_reports"] for k, pr in p.snapshot()["processes"].items()}
    deadline = loop.time() + timeout
    while True:
        snap = p.snapshot()
        if all(pr["stats_reports"] >= seen.get(k, 0) + 2
               for k, pr in snap["processes"].items() if pr["ready"]):
            return snap
        assert loop.time() < deadline, f"no fresh stats report within {timeout:g} s"
        await asyncio.sleep(0.02)


async def settle(p: Pipeline, timeout: float = 15.0) -> dict:
    """Wait until no process holds a request and no buffer is lent; return the snapshot
    (a loaded machine can take seconds to return a buffer: the wait ends when it is idle)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        snap = p.snapshot()
        busy = snap["live_requests"] or snap["coordinator_pool"]["lent"] or any(
            pr["held"] or pr["pool"].get("lent") for pr in snap["processes"].values())
        if not busy:
            return snap
        if asyncio.get_running_loop().time() > deadline:
            return snap
        await asyncio.sleep(0.05)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
