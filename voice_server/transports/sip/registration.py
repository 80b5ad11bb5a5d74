"""Keeping the endpoint registered with a registrar (``sip.register``).

A PBX or a trunk's proxy routes calls for an address-of-record to whoever
registered it last; registered, the agent needs no static route there.
aiosipua's :class:`~aiosipua.Registration` does the protocol (REGISTER,
the digest answer to a 401/407 with ``qop=auth``, 423, refreshing at 90%
of the granted interval); :class:`AgentRegistration` corrects two things
in it, and :class:`RegistrationKeeper` runs it on the endpoint's UAC (its
UDP listener, which hands the UAC the registrar's answers), says in the log
what happened (a refused password is an error that names the settings to
check), keeps the state for ``GET /v1/sip/registration``, and unregisters
(``Expires: 0``) when the server stops.  A registrar that refuses or does
not answer is tried again every ``register.retry_s``, so a PBX that
restarts, or a password put right on its side, finds the agent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Optional

from aiosipua import SipUAC
from aiosipua.auth import SipDigestAuth
from aiosipua.headers import parse_auth, parse_uri
from aiosipua.registration import Registration, RegistrationState

from .settings import RegisterSettings

log = logging.getLogger("voice_server.transports.sip")

ANSWER_S = 8.0       # no final answer by then: not registered (Timer F is 32 s)
REFRESH_MARGIN_S = 5.0   # a refresh goes out at least this long before the binding lapses
UNREGISTER_WAIT_S = 2.0  # at shutdown, for the registrar's answer to Expires: 0


def refresh_after(granted: float) -> float:
    """When to refresh a binding granted for ``granted`` seconds: at 90% of
    it, as aiosipua does, but at least REFRESH_MARGIN_S before it lapses
    (the refresh and its digest round trip must be through by then), and
    half way at the soonest for a registrar that grants very little."""
    return max(granted / 2, min(granted * 0.9, granted - REFRESH_MARGIN_S))


class AgentRegistration(Registration):
    """aiosipua's registration, with three corrections:

    * the granted interval is read from OUR binding in the 200.  A registrar
      lists every contact of the address-of-record there (another replica of
      the agent, a desk phone), and aiosipua takes the first one's, so it
      could refresh on someone else's schedule and let ours lapse;
    * a second challenge that says ``stale=true`` is answered once more with
      its fresh nonce (RFC 7616 section 3.3: the password was right, the
      nonce had expired) instead of being taken as a refusal;
    * a short grant is refreshed early enough (:func:`refresh_after`): at
      90% of a 30 s grant only 3 s are left for two round trips.
    """

    _stale_retried = False

    def register(self):
        self._stale_retried = False
        return super().register()

    def _handle_response(self, response) -> None:
        status = response.status_code
        if status in (401, 407) and self.auth is not None and self._auth_attempts >= 1 \
                and not self._stale_retried and _stale(response, status):
            self._stale_retried = True
            self._auth_attempts = 0   # aiosipua answers the fresh challenge once more
        elif 200 <= status < 300:
            self._stale_retried = False
        super()._handle_response(response)

    def _schedule(self, granted: int) -> None:
        granted = granted if granted > 0 else self.expires  # (0 would refresh in a loop)
        self._cancel_timers()
        loop = asyncio.get_running_loop()
        self._refresh_task = loop.create_task(self._refresh_after(refresh_after(granted)))
        self._expiry_task = loop.create_task(self._expire_after(granted))

    def _granted_expires(self, response) -> int:
        ours = parse_uri(self.contact_uri)
        for contact in response.contact:
            uri = contact.uri
            if (uri.user, uri.host, uri.port or 5060) == (ours.user, ours.host, ours.port or 5060):
                value = contact.params.get("expires") or ""
                if value.strip().isdigit():
                    return int(value)
        header = (response.get_header("expires") or "").strip()
        return int(header) if header.isdigit() else self.expires


def _stale(response, status: int) -> bool:
    challenge = response.get_header("www-authenticate" if status == 401 else "proxy-authenticate")
    if not challenge:
        return False
    return (parse_auth(challenge).params.get("stale") or "").lower() == "true"


class RegistrationKeeper:
    """One registration (module docstring); ``start`` after the listener is up."""

    def __init__(self, settings: RegisterSettings, uac: SipUAC, user_agent: str) -> None:
        self.settings = settings
        self.uac = uac  # the endpoint's, on its UDP listener: it hands us our responses
        auth = SipDigestAuth(settings.user, settings.password) if settings.user else None
        self.reg = AgentRegistration(self.uac, settings.aor, settings.registrar_addr,
                                     expires=settings.expires, auth=auth, user_agent=user_agent)
        self.reg.on_registered = self._registered
        self.reg.on_failed = self._failed
        self.reg.on_expired = self._expired
        self.attempts = 0          # registrations begun (not counting refreshes)
        self.refreshes = 0         # refreshes the registrar accepted
        self.registered_at: Optional[float] = None   # wall clock of the last 2xx
        self.last_error: Optional[dict] = None       # {"status", "reason", "message", "at"}
        self.next_attempt_at: Optional[float] = None  # while waiting to try again
        self._changed = asyncio.Event()  # the state moved (answer, failure, expiry)
        self._closing = False
        self._task: Optional[asyncio.Task] = None

    @property
    def state(self) -> RegistrationState:
        return self.reg.state

    @property
    def call_id(self) -> str:
        return self.reg.call_id

    def status(self) -> dict:
        """The registration as ``GET /v1/sip/registration`` shows it."""
        registered = self.reg.state is RegistrationState.REGISTERED
        return {"object": "sip.registration", "aor": self.settings.aor,
                "registrar": self.settings.registrar, "state": self.reg.state.value,
                "expires_s": self.reg.granted_expires if registered else None,
                "registered_at": _rounded(self.registered_at), "refreshes": self.refreshes,
                "attempts": self.attempts, "last_error": self.last_error,
                "next_attempt_at": None if registered else _rounded(self.next_attempt_at)}

    # ------------------------------------------------------------ aiosipua's callbacks
    def _registered(self, reg: Registration) -> None:
        again = self.registered_at is not None and self.last_error is None
        self.registered_at, self.last_error, self.next_attempt_at = time.time(), None, None
        if again:
            self.refreshes += 1
            log.debug("sip: registration of %s refreshed for %d s", self.settings.aor,
                      reg.granted_expires)
        else:
            log.info("sip: registered %s at %s for %d s", self.settings.aor,
                     self.settings.registrar, reg.granted_expires)
        self._changed.set()

    def _failed(self, reg: Registration, status: int, reason: str) -> None:
        s = self.settings
        if status in (401, 407) and s.user is not None:
            message = (f"the registrar refused the credentials of user {s.user!r} "
                       f"({status} {reason}): check sip.register.user and password")
        elif status in (401, 407):
            message = (f"the registrar asks for digest credentials ({status} {reason}): "
                       "set sip.register.user and password")
        elif status == 403:
            message = f"the registrar forbids registering {s.aor} (403 {reason})"
        else:
            message = f"the registrar answered {status} {reason}"
        self._failure(status, reason, message, logging.ERROR if status in (401, 403, 407)
                      else logging.WARNING)

    def _expired(self, reg: Registration) -> None:
        self._failure(None, "", "the registration ran out before a refresh was accepted",
                      logging.WARNING)

    def _failure(self, status: Optional[int], reason: str, message: str, level: int) -> None:
        self.last_error = {"status": status, "reason": reason or None, "message": message,
                           "at": _rounded(time.time())}
        if self._closing:
            log.warning("sip: unregistering %s at %s failed: %s", self.settings.aor,
                        self.settings.registrar, message)
        else:
            log.log(level, "sip: registration of %s at %s failed: %s (retrying every %g s)",
                    self.settings.aor, self.settings.registrar, message, self.settings.retry_s)
        self._changed.set()

    # ------------------------------------------------------------ life
    def start(self) -> None:
        self._task = asyncio.ensure_future(self._keep())

    async def _keep(self) -> None:
        """Register; while not registered, try again every ``retry_s`` (aiosipua
        refreshes a registration that holds by itself, and a refresh that fails
        or runs out wakes this up)."""
        while True:
            if self.reg.state not in (RegistrationState.REGISTERED,
                                      RegistrationState.REGISTERING):
                self.attempts += 1
                self._changed.clear()
                self.reg.register()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._answer(), ANSWER_S)
                if self.reg.state is RegistrationState.REGISTERING:
                    self.reg.state = RegistrationState.FAILED
                    self._failure(None, "", f"no answer from {self.settings.registrar}",
                                  logging.WARNING)
                if self.reg.state is not RegistrationState.REGISTERED:
                    self.next_attempt_at = time.time() + self.settings.retry_s
                    await asyncio.sleep(self.settings.retry_s)
                    continue
            self._changed.clear()
            await self._changed.wait()

    async def _answer(self) -> None:
        while self.reg.state is RegistrationState.REGISTERING:
            await self._changed.wait()
            self._changed.clear()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._closing = True
        if self.reg.state is RegistrationState.REGISTERED:
            with contextlib.suppress(Exception):
                self.reg.unregister()
            # the answer comes back through the listener, still open: wait for it a little
            deadline = asyncio.get_running_loop().time() + UNREGISTER_WAIT_S
            while self.reg.state is RegistrationState.REGISTERED and \
                    asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.02)


def _rounded(t: Optional[float]) -> Optional[float]:
    return None if t is None else round(t, 3)


__all__ = ["RegistrationKeeper", "AgentRegistration", "refresh_after"]
