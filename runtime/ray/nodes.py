"""Is a Ray node still there?  Asked when one of our replicas on it is lost.

Ray's own answer comes from the GCS health check: a node is declared dead
after ``health_check_failure_threshold`` failed checks ``health_check_period_ms``
apart (5 x 3 s, so about 15 s, with a plain ``ray start``).  Until then Ray
still schedules onto the node, and a replacement aimed at the node's
placement-group bundle waits for the verdict.  The node's raylet answers
sooner: a live raylet accepts a TCP connection on its port and at once sends
the first bytes of its gRPC server's HTTP/2 settings; on a node whose raylet
died (the machine, its network, or the process) the connect is refused or
times out, and a frozen one sends nothing -- every driver must reach that
port anyway to lease workers there.

So a node is *lost* when Ray lists it as not alive, or no longer lists it, or
its raylet does not speak within :data:`PROBE_TIMEOUT_S` of a connect.  The
supervisor keeps one idle connection open to the raylet of every node that
hosts a replica (:func:`raylet_hangs_up`): a raylet that dies closes it, and
the node is known lost within milliseconds, before the stage processes there
even notice.  A host that vanishes closes nothing; then late heartbeats ask.
"""

from __future__ import annotations

import asyncio

# A raylet on a live node accepts in well under a millisecond on a LAN; a
# host that vanished never answers, so this is what a lost host costs.
PROBE_TIMEOUT_S = 0.5
# The label every Ray node carries with its own id; a placement-group bundle
# selects on it to avoid (``!in(a,b)``) or to pin (``<id>``) nodes.
NODE_LABEL = "ray.io/node-id"


def raylets() -> dict[str, tuple[str, int] | None]:
    """Node id -> the raylet's (address, port), or None for a node Ray calls dead.  A GCS call."""
    import ray

    return {n["NodeID"]: (n["NodeManagerAddress"], n["NodeManagerPort"]) if n.get("Alive") else None
            for n in ray.nodes()}


async def raylet_answers(address: tuple[str, int], timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the raylet at ``address`` speaks within ``timeout_s`` of a TCP connect.

    The raylet's gRPC server sends its HTTP/2 settings frame as soon as it
    accepts (under a millisecond here), so the first byte is asked for, not
    just the connection: the kernel of a host whose raylet is frozen (or
    swapped out, or stopped) still completes the handshake."""
    writer = None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(*address)
            return bool(await reader.read(1))
    except (OSError, TimeoutError):
        return False
    finally:
        if writer is not None:
            writer.close()


async def raylet_hangs_up(address: tuple[str, int]) -> None:
    """Returns when a TCP connection to the raylet at ``address`` is closed by the far
    end, or cannot be made.  A raylet that dies closes it at once (its kernel sends
    the FIN); a live one may also close an idle connection after a while, so the
    caller asks :func:`raylet_answers` before it believes the node gone."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(*address), PROBE_TIMEOUT_S)
    except (OSError, asyncio.TimeoutError):
        return
    try:
        await reader.read()  # we never write: the only thing to read is the end
    except OSError:
        pass
    finally:
        writer.close()


async def node_lost(node_id: str) -> bool:
    """True when the node is gone (see the module docstring); False while its raylet answers."""
    known = await asyncio.get_running_loop().run_in_executor(None, raylets)
    address = known.get(node_id)
    if address is None:
        return True
    return not await raylet_answers(address)


def avoiding(nodes: set[str]) -> list[dict[str, str]] | None:
    """A one-bundle label selector that keeps a placement group off ``nodes`` (None: no constraint)."""
    if not nodes:
        return None
    return [{NODE_LABEL: f"!in({','.join(sorted(nodes))})"}]


def pinned_to(node: str) -> list[dict[str, str]]:
    """A one-bundle label selector that puts a placement group on ``node``."""
    return [{NODE_LABEL: node}]
