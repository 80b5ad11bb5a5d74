"""Started by test_orphans: runs a pipeline, prints its stage pids, then waits to be killed."""

import asyncio
import json
import sys

import numpy as np

from runtime.pipeline import Pipeline
from tests.runtime.conftest import linear


async def main() -> None:
    p = await Pipeline.start(linear({"name": "a", "executor": "voice_server.testing.stages:Echo"},
                                    {"name": "b", "executor": "voice_server.testing.stages:Echo"}))
    h = await p.submit(np.ones(1 << 18, np.float32))  # leave shared memory in the pools
    await h.result()
    pids = [pr["pid"] for pr in p.snapshot()["processes"].values()]
    print(json.dumps({"pids": pids, "prefix": p.shm_prefix, "run_dir": p.endpoints.run_dir}), flush=True)
    await asyncio.sleep(3600)


asyncio.run(main())
sys.exit(0)
