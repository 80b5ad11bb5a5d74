"""ICE configuration for aiortc peer connections (the server, and Python clients
such as the tests and the benchmark caller).

Two things aiortc does by default are wrong for this service, so both are
configuration here:

* STUN/TURN: ``RTCConfiguration()`` without servers means Google's public STUN
  server.  :func:`rtc_configuration` always passes the configured list
  (``ServerSettings.ice_servers``, default ``[]``: host candidates only).
* Host addresses: aioice lists the machine's interface addresses and always
  leaves out ``127.0.0.1``, so a loopback-only host (a CI container, a network
  namespace) offers no candidate at all.  ``ServerSettings.ice_hosts`` (env
  ``VOICE_AGENT_ICE_HOSTS=127.0.0.1``) names exactly the addresses to offer.

aioice has no per-connection option for the host addresses, so
:func:`install` wraps ``aioice.ice.get_host_addresses`` ONCE with a function
that consults a context variable.  Outside :func:`offered_hosts` it returns
exactly what aioice would (the wrapper is inert); inside it (the server sets
it around ``setLocalDescription`` of its own peer connections only) it
returns the configured addresses.  Other peer connections in the process,
other threads and other event loops are unaffected.

    with offered_hosts(["127.0.0.1"]):
        await pc.setLocalDescription(answer)   # candidates: 127.0.0.1 only
"""

from __future__ import annotations

import contextlib
import contextvars
import ipaddress
import logging
from typing import Any, Iterable, Iterator

log = logging.getLogger("voice_server.webrtc_ice")

_HOSTS: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "voice_agent_ice_hosts", default=None)
_installed = False


def parse_hosts(hosts: Iterable[str] | str | None) -> list[str]:
    """Validated IP literals (comma-separated string or list)."""
    if hosts is None:
        return []
    if isinstance(hosts, str):
        hosts = hosts.split(",")
    out = []
    for h in hosts:
        h = str(h).strip()
        if not h:
            continue
        out.append(str(ipaddress.ip_address(h)))  # ValueError for names/garbage
    return out


def install() -> None:
    """Wrap aioice's host-address lister with the context-variable override (idempotent)."""
    global _installed
    if _installed:
        return
    import aioice.ice as ice

    original = ice.get_host_addresses

    def get_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        hosts = _HOSTS.get()
        if hosts is None:
            return original(use_ipv4, use_ipv6)
        return [h for h in hosts if (use_ipv6 if ":" in h else use_ipv4)]

    get_host_addresses.__wrapped__ = original  # type: ignore[attr-defined]
    ice.get_host_addresses = get_host_addresses
    _installed = True


@contextlib.contextmanager
def offered_hosts(hosts: Iterable[str] | None) -> Iterator[None]:
    """Inside: ICE gathering (in this context and tasks created from it) offers
    exactly ``hosts``.  ``None`` or empty: aioice's own choice."""
    hosts = parse_hosts(hosts) if hosts else []
    if not hosts:
        yield
        return
    install()
    token = _HOSTS.set(tuple(hosts))
    try:
        yield
    finally:
        _HOSTS.reset(token)


def ice_server(entry: Any):
    """``"stun:host:port"`` or ``{"urls": str|list, "username", "credential"}``."""
    from aiortc import RTCIceServer
    if isinstance(entry, str):
        return RTCIceServer(urls=entry)
    if isinstance(entry, dict):
        urls = entry.get("urls") or entry.get("url")
        if not urls:
            raise ValueError(f"ICE server without urls: {entry!r}")
        return RTCIceServer(urls=urls, username=entry.get("username"),
                            credential=entry.get("credential"))
    raise ValueError(f"ICE server must be a URL or a mapping, not {entry!r}")


def rtc_configuration(ice_servers: Iterable[Any] | None = None):
    """An RTCConfiguration with exactly these ICE servers (never aiortc's default STUN)."""
    from aiortc import RTCConfiguration
    return RTCConfiguration(iceServers=[ice_server(e) for e in (ice_servers or [])])


def low_latency_audio_receiver(receiver) -> bool:
    """Cut aiortc's audio receive delay from 4 packets (80 ms) to 1 (20 ms).

    aiortc's RTCRtpReceiver holds audio in a jitter buffer that releases a
    frame only after four later packets arrived (``prefetch=4``), 80 ms of
    constant extra latency on every frame - for the server that means end of
    speech is seen 80 ms late.  On loopback/LAN there is little jitter to
    absorb; the receiver's buffer is swapped for one with ``prefetch=1``
    (reordering within 16 packets is still handled).  aiortc exposes no option
    for this, so it touches a private attribute: returns False (and changes
    nothing) when this aiortc version lays it out differently.
    """
    try:
        from aiortc.jitterbuffer import JitterBuffer
        attr = "_RTCRtpReceiver__jitter_buffer"
        old = getattr(receiver, attr, None)
        if old is None or getattr(receiver, "_RTCRtpReceiver__kind", None) != "audio":
            return False
        setattr(receiver, attr, JitterBuffer(capacity=old.capacity, prefetch=1))
        return True
    except Exception as exc:  # noqa: BLE001 - an optimisation, never a failure
        log.debug("low-latency jitter buffer not applied: %r", exc)
        return False


__all__ = ["install", "offered_hosts", "parse_hosts", "rtc_configuration", "ice_server",
           "low_latency_audio_receiver"]
