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
  ``VOICE_AGENT_ICE_HOSTS=127.0.0.1``) names exactly the addresses to offer
  (:func:`parse_hosts` checks them; the override itself is
  :func:`voice_server.third_party_patches.offered_hosts`).
"""

from __future__ import annotations

import ipaddress
from typing import Any, Iterable


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


__all__ = ["parse_hosts", "rtc_configuration", "ice_server"]
