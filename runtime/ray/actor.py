"""The Ray actor that hosts one replica of one placement group.

It does not run the stage loop itself: it starts ``python -m runtime.stage_process``
as its child with the same JSON spec on stdin that the local supervisor
writes.  So there is one implementation of a stage, and on Ray it keeps what
it has locally: its own main thread for signals, parent-death cleanup, no
share of the GIL with Ray's core-worker threads, and a native crash that
takes down the stage but leaves the actor to report the exit code.  The
child inherits what Ray set for the actor (``CUDA_VISIBLE_DEVICES``).

Only JSON-able data crosses Ray's RPC: the spec goes in as a string, and
``where``/``wait`` return plain dicts.  Our sockets are made in the child.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections import deque

import ray


class StageLauncher:
    """One stage process on whichever node Ray placed this actor."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.tail: deque[str] = deque(maxlen=40)
        self.port_hold: socket.socket | None = None

    def where(self) -> dict:
        """This node's id and address, and a free port there for the stage's control socket.

        The port stays bound (not listening, SO_REUSEADDR) for the actor's life:
        no other process on the node is handed it, and the stage's ZMQ socket,
        which also sets SO_REUSEADDR, can still bind and listen on it.
        """
        ip = ray.util.get_node_ip_address()
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((ip, 0))
        port = s.getsockname()[1]
        self.port_hold = s
        return {"node": ray.get_runtime_context().get_node_id(), "ip": ip, "port": port,
                "actor_pid": os.getpid()}

    def prepare(self) -> int:
        """Start the stage process ahead of its spec (a standby: runtime/ray/standby.py).

        It imports the runtime and then waits on stdin, so a launch later skips
        the interpreter's start and those imports (about a second on a busy
        machine); the model is loaded only once the spec has come.
        """
        if self.proc is None:
            self.proc = self._spawn()
        return self.proc.pid

    def launch(self, spec_json: str) -> int:
        """Hand the stage process its spec (starting one unless a prepared one waits)."""
        if self.proc is None or self.proc.poll() is not None or self.proc.stdin.closed:
            self.proc = self._spawn()
        self.proc.stdin.write(spec_json.encode())
        self.proc.stdin.close()
        return self.proc.pid

    def _spawn(self) -> subprocess.Popen:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([x for x in sys.path if x] + [env.get("PYTHONPATH", "")])
        proc = subprocess.Popen([sys.executable, "-m", "runtime.stage_process"],
                                stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        threading.Thread(target=self._pump, args=(proc,), daemon=True).start()
        return proc

    def _pump(self, proc: subprocess.Popen) -> None:
        for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            self.tail.append(line)
            print(line, file=sys.stderr, flush=True)  # lands in this actor's Ray log

    def wait(self) -> dict:
        """Returns when the stage process exits: its code and last stderr lines."""
        code = self.proc.wait() if self.proc is not None else -1
        return {"code": code, "tail": list(self.tail)[-8:]}

    def stop(self, grace_s: float = 5.0) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        try:
            return proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


# wait() blocks for the life of the stage while where/stop must still answer.
RayStageLauncher = ray.remote(max_concurrency=4, max_restarts=0)(StageLauncher)
