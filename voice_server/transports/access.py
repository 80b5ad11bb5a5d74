"""The one door every transport goes through: who may open a session, and whether
there is room for it.

Every rule about access lives here so the four transports (Realtime WebSocket,
WebRTC, Twilio, HTTP API) cannot drift apart:

* API keys: ``Authorization: Bearer KEY`` (:func:`bearer_token`), compared in
  constant time against every configured key (:func:`key_matches`).
* Origin policy (:func:`origin_allowed`).  A request without an ``Origin``
  header is not from a browser and is judged by its key alone.  A browser
  Origin must be on ``VOICE_AGENT_ALLOWED_ORIGINS`` when that list is set
  (``*`` admits any), and otherwise be this server's own host or a loopback
  page.  A key does not widen this: a page on a foreign site that learnt a key
  still cannot drive the server from a visitor's browser.
* Loopback (:func:`is_loopback`): host names and addresses (``localhost``,
  ``127.0.0.0/8``, ``::1``, with or without brackets, ports or zone ids).
* Client secrets (``ek_...``, :mod:`voice_server.transports.client_secrets`):
  spent only once the session has a place (:func:`admit_session`), so a
  refused call leaves the secret usable.
* One admission counter per pipeline for ``max_sessions``
  (:func:`admit`): the live sessions of every transport (the session
  registry) plus the handshakes in flight.  A transport holds its
  :class:`AdmissionTicket` from the moment it decides to accept until its
  runner has registered (or the attempt failed).
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional
from urllib.parse import urlsplit

from starlette.responses import JSONResponse

from ..session_registry import registry_for
from .client_secrets import ClientSecret, ClientSecretStore, is_client_secret

LOOPBACK_NAMES = ("localhost",)
KEY_HELP = ("Missing or incorrect API key. Send 'Authorization: Bearer KEY' (browsers: the "
            "WebSocket subprotocol 'openai-insecure-api-key.KEY', or a client secret ek_...).")


# ------------------------------------------------------------------ keys
def bearer_token(headers: Mapping[str, str]) -> Optional[str]:
    """The token of ``Authorization: Bearer TOKEN``, or None."""
    auth = headers.get("authorization")
    if not auth:
        return None
    scheme, _, value = auth.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return value.strip() or None


def key_matches(key: Optional[str], keys: Iterable[str]) -> bool:
    """True when ``key`` is one of ``keys``.  Every key is compared, each in
    constant time, so the answer's timing says nothing about which key (or
    which prefix) came close."""
    if not key:
        return False
    kb = key.encode("utf-8", "surrogatepass")
    ok = False
    for k in keys:
        ok |= hmac.compare_digest(kb, str(k).encode("utf-8", "surrogatepass"))
    return ok


# ------------------------------------------------------------------ loopback
def host_of(host_header: Optional[str]) -> str:
    """The host name of a ``Host`` header value (no port, no brackets), lower case."""
    return (urlsplit("//" + (host_header or "")).hostname or "").lower()


def is_loopback(host: Optional[str]) -> bool:
    """``localhost``, or an IPv4/IPv6 loopback address (``[::1]``, ``::1%lo``
    and ``127.0.0.2`` included).  A bare host, not a ``Host`` header: use
    :func:`host_of` first for one with a port."""
    if not host:
        return False
    h = host.strip().lower().strip("[]").split("%")[0]
    if h in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


# ------------------------------------------------------------------ origin
def origin_allowed(origin: Optional[str], host_header: Optional[str],
                   allowed_origins: Iterable[str]) -> bool:
    """The Origin policy (module docstring).  ``origin`` None: not a browser."""
    if origin is None:
        return True
    allowed = [o.rstrip("/") for o in allowed_origins]
    if "*" in allowed:
        return True
    if allowed:
        return origin.rstrip("/") in allowed
    host = (urlsplit(origin).hostname or "").lower()
    if is_loopback(host):
        return True
    return bool(host) and host == host_of(host_header)


# ------------------------------------------------------------------ admission
class AdmissionTicket:
    """A place among ``max_sessions`` held for a session being opened.  Release it
    once the session's runner has registered (it then counts itself), or when
    the attempt failed; releasing twice is harmless."""

    def __init__(self, registry) -> None:
        self._registry = registry
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._registry.pending -= 1


def admit(pipeline, max_sessions: int) -> Optional[AdmissionTicket]:
    """A ticket, or None when the live sessions of every transport plus the
    handshakes in flight already reach ``max_sessions``."""
    reg = registry_for(pipeline)
    if reg.places >= max_sessions:
        return None
    reg.pending += 1
    return AdmissionTicket(reg)


@dataclass
class Refusal(Exception):
    """Why a session was not opened: an HTTP status and an OpenAI-style error."""

    status: int
    code: str
    message: str
    type: str = "invalid_request_error"
    headers: dict = field(default_factory=dict)

    def body(self) -> dict:
        return {"error": {"type": self.type, "code": self.code, "message": self.message,
                          "param": None}}


def denial_response(refusal: Refusal) -> JSONResponse:
    """The HTTP answer to a refused session (a WebSocket upgrade's denial
    response, or the WebRTC offer's reply): every transport sends the same."""
    return JSONResponse(refusal.body(), status_code=refusal.status, headers=refusal.headers)


def busy_refusal(max_sessions: int) -> Refusal:
    return Refusal(503, "server_busy", f"Too many sessions ({max_sessions}); try again later.",
                   "server_error", {"Retry-After": "5"})


def origin_refusal() -> Refusal:
    return Refusal(403, "origin_not_allowed", "This Origin may not use the server "
                   "(VOICE_AGENT_ALLOWED_ORIGINS).")


def http_refusal(headers: Mapping[str, str], allowed_origins: Iterable[str],
                 api_keys: Iterable[str]) -> Optional[Refusal]:
    """The HTTP endpoints' rule (``/v1/chat/completions``, ``/v1/calls``...):
    the Origin policy, then the key (``Authorization: Bearer`` or ``api-key``,
    as Azure-style clients send it; none needed when no key is configured).
    None: allowed."""
    if not origin_allowed(headers.get("origin"), headers.get("host"), allowed_origins):
        return Refusal(403, "origin_not_allowed",
                       "this Origin may not use the server (VOICE_AGENT_ALLOWED_ORIGINS)")
    keys = list(api_keys)
    if not keys:
        return None
    token = bearer_token(headers) or headers.get("api-key", "").strip()
    if not token:
        return Refusal(401, "missing_api_key", "missing API key: send 'Authorization: Bearer <key>'",
                       "authentication_error")
    if not key_matches(token, keys):
        return Refusal(401, "invalid_api_key", "invalid API key", "authentication_error")
    return None


@dataclass
class Admitted:
    ticket: AdmissionTicket
    secret: Optional[ClientSecret] = None


def admit_session(pipeline, settings, *, origin: Optional[str], host: Optional[str],
                  key: Optional[str], secrets: Optional[ClientSecretStore]) -> Admitted:
    """Origin, then credentials, then a place; raises :class:`Refusal`.

    A client secret is consumed only after a place was found: a call refused
    for lack of room leaves it usable.  An API key is checked before the
    place, so an unauthenticated caller learns nothing about the load."""
    if not origin_allowed(origin, host, settings.allowed_origins):
        raise origin_refusal()
    if is_client_secret(key):
        ticket = admit(pipeline, settings.max_sessions)
        if ticket is None:
            raise busy_refusal(settings.max_sessions)
        secret = secrets.consume(key) if secrets is not None else None
        if secret is None:
            ticket.release()
            raise Refusal(401, "invalid_client_secret",
                          "The client secret is unknown, expired or already used.",
                          headers={"WWW-Authenticate": "Bearer"})
        return Admitted(ticket, secret)
    if settings.auth_required and not key_matches(key, settings.api_keys):
        raise Refusal(401, "invalid_api_key", KEY_HELP, headers={"WWW-Authenticate": "Bearer"})
    ticket = admit(pipeline, settings.max_sessions)
    if ticket is None:
        raise busy_refusal(settings.max_sessions)
    return Admitted(ticket)


__all__ = ["bearer_token", "key_matches", "host_of", "is_loopback", "origin_allowed",
           "admit", "AdmissionTicket", "Refusal", "Admitted", "admit_session",
           "busy_refusal", "origin_refusal", "denial_response", "http_refusal", "KEY_HELP"]
