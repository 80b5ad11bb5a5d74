"""Short-lived client secrets (``ek_...``) for browsers that must not hold the
real API key, as OpenAI's ``POST /v1/realtime/client_secrets``.

A server (or a page that was given the key on purpose) mints a secret with the
real key; the browser then authenticates ONE realtime session with it
(``Authorization: Bearer ek_...``).  A secret is single-use and expires
(default 60 s).  The session configuration given at mint time travels with
it and is applied to the session that consumes it.

Only a SHA-256 of each secret is kept, so the lookup does not compare secret
bytes in variable time and a memory dump does not reveal live secrets.

    store = ClientSecretStore(default_ttl_s=60)
    s = store.mint({"instructions": "..."})     # s.value, s.expires_at, s.session
    store.consume(s.value)                      # -> ClientSecret; None afterwards
    store.consume("ek_unknown")                 # -> None (unknown, used or expired)

Transports share one store (``app.state.client_secrets``): WebRTC uses it
now; the WebSocket endpoint can accept the same secrets.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

PREFIX = "ek_"


@dataclass
class ClientSecret:
    value: str
    expires_at: int  # epoch seconds
    session: dict = field(default_factory=dict)
    created_at: int = 0

    def wire(self) -> dict:
        return {"value": self.value, "expires_at": self.expires_at, "session": self.session}


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest()


class ClientSecretStore:
    def __init__(self, default_ttl_s: float = 60.0, max_ttl_s: float = 7200.0,
                 min_ttl_s: float = 10.0, max_live: int = 10000,
                 clock: Callable[[], float] = time.time) -> None:
        self.default_ttl_s = float(default_ttl_s)
        self.max_ttl_s = float(max_ttl_s)
        self.min_ttl_s = float(min_ttl_s)
        self.max_live = int(max_live)
        self.clock = clock
        self._live: dict[bytes, tuple[float, ClientSecret]] = {}  # digest -> (expiry, secret)
        self._lock = threading.Lock()  # consume may run on any thread/loop

    def clamp_ttl(self, ttl_s: float | None) -> float:
        if ttl_s is None:
            return self.default_ttl_s
        return min(max(float(ttl_s), self.min_ttl_s), self.max_ttl_s)

    def mint(self, session: dict | None = None, ttl_s: float | None = None) -> ClientSecret:
        now = self.clock()
        expiry = now + self.clamp_ttl(ttl_s)
        value = PREFIX + secrets.token_urlsafe(24)
        s = ClientSecret(value, int(expiry), dict(session or {}), int(now))
        with self._lock:
            self._purge(now)
            if len(self._live) >= self.max_live:
                raise OverflowError("too many live client secrets")
            self._live[_digest(value)] = (expiry, s)
        return s

    def consume(self, value: str | None) -> ClientSecret | None:
        """The secret if it is live (and burn it), else None."""
        if not value or not value.startswith(PREFIX):
            return None
        now = self.clock()
        with self._lock:
            entry = self._live.pop(_digest(value), None)
        if entry is None or entry[0] <= now:
            return None
        return entry[1]

    def _purge(self, now: float) -> None:
        dead = [k for k, (exp, _) in self._live.items() if exp <= now]
        for k in dead:
            del self._live[k]

    def __len__(self) -> int:
        with self._lock:
            self._purge(self.clock())
            return len(self._live)


def is_client_secret(value: str | None) -> bool:
    return bool(value) and value.startswith(PREFIX)


__all__ = ["ClientSecret", "ClientSecretStore", "is_client_secret", "PREFIX"]
