"""The real voice server on a background thread of this process.

uvicorn runs with its own event loop on a thread, bound to 127.0.0.1 on a free
port; the pipeline (stage processes, models) starts once.  Callers talk to it
over real sockets from their own loops; ``call`` / ``acall`` run a function on
the server's loop to read the pipeline or a session::

    with ServerThread("configs/voice-cpu-fast.yaml", ServerSettings(api_keys=["k"])) as srv:
        ...  # srv.url (ws://.../v1/realtime), srv.base (http://...), srv.app, srv.pipeline

For a server in a process of its own (what a soak measures) see
:mod:`voice_server.testing.server_process`.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importing the harness package stays light (stage processes import
    from voice_server.settings import ServerSettings  # voice_server.testing.stages)


class ServerThread:
    def __init__(self, config: str, settings: ServerSettings) -> None:
        self.config = config
        self.settings = settings
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"ws://127.0.0.1:{self.port}/v1/realtime"
        self.loop: asyncio.AbstractEventLoop | None = None
        self.app = None
        self.pipeline = None
        self.server = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="voice-server", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        import uvicorn
        from runtime.pipeline import Pipeline
        from voice_server.app import build_app, uvicorn_config

        self.loop = asyncio.get_running_loop()
        self.pipeline = await Pipeline.start(self.config)
        try:
            self.app = build_app(self.pipeline, self.settings)
            self.server = uvicorn.Server(uvicorn_config(self.app, self.settings, "127.0.0.1",
                                                        self.port))
            self.server.install_signal_handlers = lambda: None  # not the main thread
            task = asyncio.ensure_future(self.server.serve(sockets=[self.sock]))
            while not self.server.started and not task.done():
                await asyncio.sleep(0.02)
            self._ready.set()
            await task
        finally:
            await self.pipeline.close()

    def start(self, timeout: float = 120.0) -> "ServerThread":
        self.thread.start()
        if not self._ready.wait(timeout) or self._error is not None:
            raise RuntimeError(f"server did not start: {self._error!r}")
        return self

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.server is not None:
            self.server.should_exit = True
        self.thread.join(60)
        self.sock.close()

    def call(self, fn, *args, timeout: float = 30.0):
        """Run ``fn(*args)`` (a coroutine function or plain function) on the server loop."""
        async def run():
            r = fn(*args)
            if asyncio.iscoroutine(r):
                r = await r
            return r
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    async def acall(self, fn, *args, timeout: float = 30.0):
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(
            _wrap(fn, *args), self.loop))

    def runner(self, session_id: str):
        """The live SessionRunner of a session, whatever its transport."""
        from voice_server.session_registry import registry_for
        return registry_for(self.pipeline).get(session_id)

    async def settled(self, timeout: float = 10.0) -> dict:
        """Wait until the pipeline holds no request anywhere; return the last snapshot."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            snap = await self.acall(self.pipeline.snapshot)
            busy = snap["live_requests"] or any(p["held"] for p in snap["processes"].values())
            if not busy or asyncio.get_running_loop().time() > deadline:
                return snap
            await asyncio.sleep(0.1)


async def _wrap(fn, *args):
    r = fn(*args)
    if asyncio.iscoroutine(r):
        r = await r
    return r


__all__ = ["ServerThread"]
