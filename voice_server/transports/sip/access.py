"""Who may call: the source networks (trunk-only mode) and, where users are
configured, digest authentication of the INVITE (RFC 3261 section 22,
RFC 2617 / 7616 with MD5, the algorithm every SIP peer speaks).

Nonces are stateless: ``<unix time>.<HMAC of it under a secret made at
start>``, valid :data:`NONCE_TTL_S`, so a challenge costs no memory and a
flood of INVITEs leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from typing import Iterable, Mapping, Optional

from aiosipua import parse_auth

NONCE_TTL_S = 300


def source_allowed(ip: str, networks: Iterable[str]) -> bool:
    """``ip`` is inside one of ``networks`` (CIDRs)."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return False
    return any(addr in ipaddress.ip_network(n, strict=False) for n in networks)


def _md5(text: str) -> str:
    return hashlib.md5(text.encode("utf-8", "surrogatepass")).hexdigest()  # noqa: S324 - RFC


class DigestGuard:
    """Challenges and checks ``Authorization`` on INVITEs for ``users``."""

    def __init__(self, users: Mapping[str, str], realm: str) -> None:
        self.users = dict(users)
        self.realm = realm
        self._secret = secrets.token_bytes(32)

    @property
    def enabled(self) -> bool:
        return bool(self.users)

    def _nonce(self, at: int) -> str:
        mac = hmac.new(self._secret, str(at).encode(), hashlib.sha256).hexdigest()[:32]
        return f"{at}.{mac}"

    def _nonce_fresh(self, nonce: str) -> bool:
        at, _, _mac = nonce.partition(".")
        if not at.isdigit():
            return False
        return hmac.compare_digest(self._nonce(int(at)), nonce) and \
            0 <= time.time() - int(at) <= NONCE_TTL_S

    def challenge(self) -> str:
        """The ``WWW-Authenticate`` value of a 401."""
        return (f'Digest realm="{self.realm}", nonce="{self._nonce(int(time.time()))}", '
                'algorithm=MD5, qop="auth"')

    def verify(self, method: str, authorization: Optional[str]) -> bool:
        """The request's ``Authorization`` answers a fresh challenge of ours."""
        if not authorization:
            return False
        try:
            cred = parse_auth(authorization)
        except Exception:  # noqa: BLE001 - a malformed header is a failed check
            return False
        p = {k.lower(): v for k, v in cred.params.items()}
        user, nonce, uri, given = (p.get("username"), p.get("nonce"), p.get("uri"),
                                   p.get("response"))
        password = self.users.get(user or "")
        if password is None or not nonce or not uri or not given or \
                p.get("realm") != self.realm or not self._nonce_fresh(nonce):
            return False
        ha1 = _md5(f"{user}:{self.realm}:{password}")
        ha2 = _md5(f"{method}:{uri}")
        if p.get("qop"):
            want = _md5(f"{ha1}:{nonce}:{p.get('nc', '')}:{p.get('cnonce', '')}:"
                        f"{p['qop']}:{ha2}")
        else:
            want = _md5(f"{ha1}:{nonce}:{ha2}")
        return hmac.compare_digest(want, given.lower())


__all__ = ["source_allowed", "DigestGuard", "NONCE_TTL_S"]
