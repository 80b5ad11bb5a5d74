"""A stage process exits when its parent dies, and the run leaves nothing behind."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from runtime.shm import list_segments
from tests.runtime.conftest import pid_alive

ROOT = Path(__file__).resolve().parents[2]


def test_stage_processes_exit_and_clean_up_when_the_parent_is_killed():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    parent = subprocess.Popen([sys.executable, "-m", "tests.runtime.orphan_parent"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(parent.stdout.readline())
        assert all(pid_alive(p) for p in info["pids"])
        assert list_segments(info["prefix"])
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(pid_alive(p) for p in info["pids"]):
            time.sleep(0.05)
        assert not any(pid_alive(p) for p in info["pids"]), "orphaned stage processes"
        assert list_segments(info["prefix"]) == []
        assert not os.path.exists(info["run_dir"])
    finally:
        if parent.poll() is None:
            parent.kill()
