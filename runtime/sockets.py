"""ZMQ sockets as the control plane uses them.

No high-water marks (a send never blocks: credits bound the data instead) and
no linger (a closing process must not hang on undeliverable messages).
"""

from __future__ import annotations

import zmq

from runtime import messages
from runtime.curve import CurveKeys


def make_socket(ctx: zmq.Context, kind: int, *, bind: str | None = None, connect: str | None = None,
                subscribe: bool = False, curve: CurveKeys | None = None) -> zmq.Socket:
    sock = ctx.socket(kind)
    if curve is not None:
        curve.apply(sock, server=bind is not None)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    if subscribe:
        sock.setsockopt(zmq.SUBSCRIBE, b"")
    if bind:
        sock.bind(bind)
    if connect:
        sock.connect(connect)
    return sock


class Peers:
    """Lazily connected PUSH sockets, one per destination endpoint."""

    def __init__(self, ctx: zmq.Context, curve: CurveKeys | None = None) -> None:
        self.ctx = ctx
        self.curve = curve
        self.socks: dict[str, zmq.Socket] = {}

    def get(self, endpoint: str) -> zmq.Socket:
        s = self.socks.get(endpoint)
        if s is None:
            s = self.socks[endpoint] = make_socket(self.ctx, zmq.PUSH, connect=endpoint, curve=self.curve)
        return s

    def send(self, endpoint: str, msg: messages.Message, frames: list | None = None) -> None:
        sock = self.get(endpoint)
        if frames:
            sock.send_multipart([messages.encode(msg), *frames], copy=False)
        else:
            sock.send(messages.encode(msg), copy=False)

    def close(self) -> None:
        for s in self.socks.values():
            s.close(0)
        self.socks.clear()
