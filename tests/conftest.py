"""How `make test` shares the suite between pytest-xdist workers.

Most of the suite's time is spent waiting on real-time audio, so two workers
get through it in much less time, even on two cores. Each test file stays on
one worker (``--dist loadfile``), because its module fixtures start servers.
The files in :data:`ONE_AT_A_TIME` also share one worker between them, so
they never overlap: each of them builds a Ray cluster on this machine, and
two clusters at once would compete for its ports and cores.

Every llama.cpp thinker the suite starts (in a test, or a server's think stage:
stage processes inherit the environment) runs on one thread.  ggml's threads
spin at a barrier after every layer, so two of them on cores the other worker
also needs cost about twice the CPU, and the suite keeps both cores busy.
The thread counts themselves have their own tests, which lift the cap.
"""

from __future__ import annotations

import os

import pytest

from runtime.models.think.llama_options import MAX_THREADS_ENV

ONE_AT_A_TIME = frozenset({
    "tests/runtime/test_ray.py",
    "tests/runtime/test_ray_node_loss.py",
})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return "ray clusters" if path in ONE_AT_A_TIME else path

    return FilesTogether(config, log)


def pytest_configure(config):
    os.environ.setdefault(MAX_THREADS_ENV, "1")
