"""A ``voice-agent serve`` in a process of its own, for benchmarks (and the soak
test) that load it.

Why not in-process: a soak measures the server's memory and file descriptors;
callers running in the same process (holding every event they received) would
be counted as the server's growth.  Out here the server is exactly what
``make serve`` runs, and the benchmark reads the runtime through the admin
endpoint ``GET /v1/runtime`` like an operator would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]  # the checkout (configs/ lives there)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RunningServer:
    """A server someone else started (``--url``): read through the admin endpoint."""

    def __init__(self, http: str) -> None:
        self.http = http.rstrip("/")
        self.url = self.http.replace("http", "ws", 1) + "/v1/realtime"
        self._client: httpx.AsyncClient | None = None

    async def runtime(self) -> dict:
        """The admin endpoint's view (voice_server/admin.py ``/v1/runtime``)."""
        if self._client is None:
            self._client = httpx.AsyncClient(base_url=self.http, timeout=30)
        r = await self._client.get("/v1/runtime")
        r.raise_for_status()
        return r.json()

    async def metric(self, name: str, **labels: str) -> float:
        """One sample of ``GET /metrics`` (Prometheus text), 0.0 when absent."""
        if self._client is None:
            self._client = httpx.AsyncClient(base_url=self.http, timeout=30)
        r = await self._client.get("/metrics")
        r.raise_for_status()
        want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
                       if labels else "")
        for line in r.text.splitlines():
            key, _, value = line.rpartition(" ")
            if key == want:
                return float(value)
        return 0.0

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


class ServerProcess(RunningServer):
    """Start with :meth:`start`, read with :meth:`runtime`, stop with :meth:`stop`."""

    def __init__(self, config: str, env: dict[str, str | None] | None = None,
                 log_path: str | None = None) -> None:
        self.config = config
        self.port = free_port()
        super().__init__(f"http://127.0.0.1:{self.port}")
        merged = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        self.env = {k: v for k, v in merged.items() if v is not None}  # None: unset it
        self.log_path = log_path or tempfile.mktemp(prefix="voice-server-", suffix=".log")
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 180.0) -> "ServerProcess":
        log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "voice_server.cli", "serve", "--config", self.config,
             "--port", str(self.port)],
            cwd=str(ROOT), env=self.env, stdout=subprocess.PIPE, stderr=log, text=True)
        log.close()
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(timeout)
        if not line or "voice-agent ready" not in line[0]:
            self.stop()
            tail = Path(self.log_path).read_text()[-2000:]
            raise RuntimeError(f"server did not start in {timeout:.0f} s: {line!r}\n{tail}")
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM (the graceful drain) and wait; SIGKILL if it does not exit in time."""
        p = self.proc
        if p is None:
            return None
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if p.stdout is not None:
            p.stdout.close()
        return p.returncode


@contextlib.asynccontextmanager
async def served(config: str, url: str | None = None):
    """The server a benchmark loads: a running one at ``url`` (an operator's), or
    ``voice-agent serve --config config`` started here and drained at the end."""
    proc = None
    if url:
        server: RunningServer = RunningServer(url)
    else:
        proc = ServerProcess(config)
        await asyncio.to_thread(proc.start)
        server = proc
    try:
        yield server
    finally:
        await server.aclose()
        if proc is not None:
            await asyncio.to_thread(proc.stop)


def run_on_own_server(config: str, env: dict[str, str | None], work) -> dict:
    """``voice-agent serve --config config`` with ``env`` in its own process, ``await
    work(server)`` against it, then the server closed and stopped; the work's result
    dict with the server's ``server_exit_code`` (a soak or churn benchmark's shape)."""
    srv = ServerProcess(config, env).start(180)

    async def main() -> dict:
        try:
            return await work(srv)
        finally:
            await srv.aclose()
    try:
        result = asyncio.run(main())
    finally:
        code = srv.stop()
    result["server_exit_code"] = code
    return result


def add_server_arguments(ap, out: str) -> None:
    """The options every served benchmark takes: which server, which key, where to write."""
    ap.add_argument("--url", help="a running server's http://HOST:PORT (admin endpoint reachable); "
                    "default: start voice-agent serve --config CONFIG")
    ap.add_argument("--key", default=os.environ.get("VOICE_AGENT_API_KEY"))
    ap.add_argument("--config", default="configs/voice-cpu.yaml")
    ap.add_argument("--out", default=out)
