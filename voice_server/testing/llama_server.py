"""llama-cpp-python's OpenAI-compatible server as a real process on 127.0.0.1.

What the OpenAI-compatible thinker is tested and benchmarked against: the
SmolLM2 GGUF behind ``python -m llama_cpp.server`` on a free port::

    with LlamaServer("--chat_format", "chatml-function-calling") as srv:
        ...  # srv.url (http://127.0.0.1:PORT), srv.proc
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    def __init__(self, *extra: str, model: str | None = None, n_ctx: int = 2048, n_threads: int = 2,
                 start_timeout_s: float = 60.0) -> None:
        self.extra = extra
        self.model = model
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.start_timeout_s = start_timeout_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "LlamaServer":
        """Start it and wait until it answers ``/v1/models``; RuntimeError with its stderr if it dies."""
        import httpx

        from runtime.models.model_files import smollm2_gguf

        model = self.model or smollm2_gguf()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1",
             "--port", str(self.port), "--n_ctx", str(self.n_ctx), "--n_threads", str(self.n_threads),
             "--verbose", "False", *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("llama_cpp.server exited: " + self.proc.stderr.read().decode()[-2000:])
            try:
                if httpx.get(self.url + "/v1/models", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"llama_cpp.server did not come up within {self.start_timeout_s:.0f} s")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None

    def __enter__(self) -> "LlamaServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
