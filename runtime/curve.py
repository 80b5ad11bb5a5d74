"""CURVE security for a control plane that leaves the host.

ipc:// sockets live in a 0700 directory; a tcp:// endpoint on a routable
address would let anyone on the network submit work or read payloads.  So
such a pipeline runs ZMQ CURVE: every binding socket is a CURVE server, every
connecting socket a client, and a ZAP handler in each process admits only the
pipeline's own client key.  Keys are made per run and reach the stage
processes through their stdin spec, never over a socket.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import zmq


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class CurveKeys:
    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes

    @classmethod
    def generate(cls) -> "CurveKeys":
        sp, ss = zmq.curve_keypair()
        cp, cs = zmq.curve_keypair()
        return cls(sp, ss, cp, cs)

    def to_wire(self) -> dict:
        return {k: v.decode() for k, v in vars(self).items()}

    @classmethod
    def from_wire(cls, d: dict | None) -> "CurveKeys | None":
        return cls(**{k: v.encode() for k, v in d.items()}) if d else None

    def apply(self, sock: zmq.Socket, server: bool) -> None:
        if server:
            sock.curve_server = True
            sock.curve_publickey = self.server_public
            sock.curve_secretkey = self.server_secret
        else:
            sock.curve_serverkey = self.server_public
            sock.curve_publickey = self.client_public
            sock.curve_secretkey = self.client_secret


class _OnlyOurClient:
    def __init__(self, key: bytes) -> None:
        self.key = key

    def callback(self, domain: str, key: bytes) -> bool:
        return zmq.utils.z85.encode(key) == self.key or key == self.key


def start_authenticator(ctx: zmq.Context, keys: CurveKeys):
    """ZAP handler for this process: only the pipeline's client key may connect."""
    from zmq.auth.thread import ThreadAuthenticator

    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve_callback("*", credentials_provider=_OnlyOurClient(keys.client_public))
    return auth
