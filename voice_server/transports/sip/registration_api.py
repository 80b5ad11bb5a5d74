"""``GET /v1/sip/registration``: is the agent registered with its PBX or
trunk (``sip.register``, :mod:`.registration`), and if not, why.

The same access rule as every HTTP endpoint (the Origin policy, then the
API key).  The body is the keeper's status: ``state`` (``registered``,
``registering``, ``failed``, ``expired``, ``unregistered``), the interval
the registrar granted, when it last accepted us, ``last_error`` (the
registrar's status and a message naming what to check) and when the next
try is due.  With SIP off: 404 ``sip_disabled``; with SIP on but no
``sip.register``: 404 ``registration_off``.
"""

from __future__ import annotations

from typing import Any, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..access import http_refusal
from ..sip_calls_api import api_error
from .dial_api import SIP_OFF


def registration_routes(endpoint: Callable[[], Any], settings: Any) -> list[Route]:
    """``endpoint()`` is the SipEndpoint, or None while SIP is off."""

    async def status(request: Request) -> Response:
        r = http_refusal(request.headers, settings.allowed_origins, settings.api_keys)
        if r is not None:
            return api_error(r.status, r.code, r.message, type_=r.type, headers=r.headers)
        ep = endpoint()
        if ep is None:
            return api_error(404, "sip_disabled", SIP_OFF, type_="not_found_error")
        if ep.registration is None:
            return api_error(404, "registration_off", "This server does not register anywhere; "
                             "set extra.server.sip.register (docs/SIP.md).",
                             type_="not_found_error")
        return JSONResponse(ep.registration.status())

    return [Route("/v1/sip/registration", status, methods=["GET"])]


__all__ = ["registration_routes"]
