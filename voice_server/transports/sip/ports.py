"""The RTP ports: one even port a call from ``sip.rtp_ports`` (RFC 3550
section 11: RTP on even ports, RTCP on the next), handed back when the call
ends.  The pool walks the range round robin, so a port just freed is not
the next one given (late packets of the old call find nobody)."""

from __future__ import annotations

from typing import Iterator


class PortsExhausted(RuntimeError):
    """Every port of the range is in use (the endpoint answers 503)."""


class PortPool:
    def __init__(self, low: int, high: int) -> None:
        self.ports = list(range(low + (low % 2), high + 1, 2))  # even ports only
        self.in_use: set[int] = set()
        self._next = 0

    def candidates(self) -> Iterator[int]:
        """Free ports to try, in turn (the caller binds one and :meth:`take` s it)."""
        n = len(self.ports)
        for k in range(n):
            port = self.ports[(self._next + k) % n]
            if port not in self.in_use:
                yield port
        raise PortsExhausted(f"all {n} RTP ports are in use")

    def take(self, port: int) -> None:
        self.in_use.add(port)
        self._next = (self.ports.index(port) + 1) % len(self.ports)

    def give_back(self, port: int) -> None:
        self.in_use.discard(port)


__all__ = ["PortPool", "PortsExhausted"]
