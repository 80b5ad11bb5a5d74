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

# The files that took longest (2026-12-06, two workers), longest first.  They are
# handed out first, so that the run does not end with one worker still busy on a
# long file while the other has nothing left; the rest follow in xdist's own
# order (most tests first), which fills the gaps.
LONGEST_FIRST = (
    "tests/runtime/test_ray.py",
    "tests/runtime/test_ray_node_loss.py",
    "tests/server/test_phone_providers.py",
    "tests/browser/test_demo.py",
    "tests/server/test_pacing.py",
    "tests/models/listen/test_listen.py",
    "tests/pipeline/test_voice_pipeline.py",
    "tests/runtime/test_pipeline.py",
    "tests/server/test_caller_language.py",
    "tests/server/test_sip.py",
    "tests/server/test_interruptions.py",
    "tests/server/test_call_records.py",
    "tests/server/test_webrtc.py",
    "tests/server/test_session_churn.py",
    "tests/server/test_clients_pipecat_livekit.py",
)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return "ray clusters" if path in ONE_AT_A_TIME else path

    # the order of pytest_collection_modifyitems below, not the count of tests
    config.option.loadscopereorder = False
    return FilesTogether(config, log)


def pytest_collection_modifyitems(config, items):
    """:data:`LONGEST_FIRST` at the front, then the other files, most tests first
    (what xdist does by default); inside a file the order is kept."""
    counts: dict[str, int] = {}
    for it in items:
        counts[it.nodeid.split("::")[0]] = counts.get(it.nodeid.split("::")[0], 0) + 1

    def rank(it) -> tuple[int, int]:
        path = it.nodeid.split("::")[0]
        if path in LONGEST_FIRST:
            return (LONGEST_FIRST.index(path), 0)
        return (len(LONGEST_FIRST), -counts[path])

    items.sort(key=rank)  # stable: a file's own order stays


def pytest_configure(config):
    os.environ.setdefault(MAX_THREADS_ENV, "1")
