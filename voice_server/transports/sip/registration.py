"""Keeping the endpoint registered with a registrar (``sip.register``).

A PBX or a trunk's proxy routes calls for an address-of-record to whoever
registered it last; registered, the agent needs no static route there.
aiosipua's :class:`~aiosipua.Registration` does the protocol (REGISTER,
digest challenges, 423, refreshing at 90% of the granted interval); this
module runs it on the endpoint's UAC (its UDP listener, which hands the
UAC the registrar's answers), says in the log when the state changes, and
unregisters (``Expires: 0``) when the server stops.  A registrar that
refuses or does not answer is retried every :data:`RETRY_S`, so a PBX that
restarts finds the agent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Optional

from aiosipua import SipUAC
from aiosipua.auth import SipDigestAuth
from aiosipua.registration import Registration, RegistrationState

from .settings import RegisterSettings

log = logging.getLogger("voice_server.transports.sip")

RETRY_S = 30.0       # a refused or unanswered REGISTER is tried again this often
ANSWER_S = 8.0       # no final answer by then: not registered (Timer F is 32 s)
UNREGISTER_WAIT_S = 2.0  # at shutdown, for the registrar's answer to Expires: 0


class RegistrationKeeper:
    """One registration (module docstring); ``start`` after the listener is up."""

    def __init__(self, settings: RegisterSettings, uac: SipUAC, user_agent: str) -> None:
        self.settings = settings
        self.uac = uac  # the endpoint's, on its UDP listener: it hands us our responses
        auth = SipDigestAuth(settings.user, settings.password) if settings.user else None
        self.reg = Registration(self.uac, settings.aor, settings.registrar_addr,
                                expires=settings.expires, auth=auth, user_agent=user_agent)
        self.reg.on_registered = lambda r: log.info(
            "sip: registered %s at %s for %d s", settings.aor, settings.registrar,
            r.granted_expires)
        self.reg.on_failed = lambda r, status, reason: log.warning(
            "sip: registration of %s at %s failed: %s %s", settings.aor, settings.registrar,
            status, reason)
        self.reg.on_expired = lambda r: log.warning("sip: registration of %s expired",
                                                    settings.aor)
        self._task: Optional[asyncio.Task] = None

    @property
    def state(self) -> RegistrationState:
        return self.reg.state

    @property
    def call_id(self) -> str:
        return self.reg.call_id

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._keep())

    async def _keep(self) -> None:
        """Register; while not registered, try again every RETRY_S (aiosipua
        refreshes a registration that holds by itself)."""
        while True:
            if self.reg.state not in (RegistrationState.REGISTERED,
                                      RegistrationState.REGISTERING):
                self.reg.register()
                await asyncio.sleep(ANSWER_S)
                if self.reg.state is RegistrationState.REGISTERING:
                    log.warning("sip: no answer from registrar %s", self.settings.registrar)
                    self.reg.state = RegistrationState.FAILED
                if self.reg.state is not RegistrationState.REGISTERED:
                    await asyncio.sleep(RETRY_S - ANSWER_S)
                continue
            await asyncio.sleep(RETRY_S)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.reg.state is RegistrationState.REGISTERED:
            with contextlib.suppress(Exception):
                self.reg.unregister()
            # the answer comes back through the listener, still open: wait for it a little
            deadline = asyncio.get_running_loop().time() + UNREGISTER_WAIT_S
            while self.reg.state is RegistrationState.REGISTERED and \
                    asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.02)


__all__ = ["RegistrationKeeper"]
