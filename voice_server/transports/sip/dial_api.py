"""The calls the agent places, over HTTP (:mod:`.outbound`), with the access
rule of every HTTP endpoint (the Origin policy, then the API key)::

    POST /v1/sip/calls               {"to": "sip:bob@pbx.example" | "tel:+15550100",
                                      "session": {...}, "ring_timeout_s": 30,
                                      "answering_machine": false, "from_user": "agent"}
                                     -> 201 the placed call (status "dialing")
    GET  /v1/sip/calls/{id}          -> the placed call: status (dialing, ringing,
                                     answered, ended, busy, no_answer, failed,
                                     cancelled), sip_status, reason, session_id, times
    POST /v1/sip/calls/{id}/hangup   CANCEL while it rings, BYE once answered
                                     (409 call_ended when it is over already)

A ``session`` is checked as ``accept``'s is (a bad field: 400 naming it);
with SIP off every path answers 404 ``sip_disabled``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...session.config import apply_session_update
from ...session.errors import ClientError
from ..sip_calls_api import BadBody, api_error, json_body, top_param
from ..access import http_refusal
from .outbound import DialRequest

SIP_OFF = ("SIP is off on this server; turn it on with extra.server.sip: {enabled: true} "
           "(docs/SIP.md)")


class DialApi:
    def __init__(self, endpoint: Callable[[], Any], settings: Any) -> None:
        self.endpoint = endpoint   # the SipEndpoint, or None while SIP is off
        self.settings = settings

    def _gate(self, request: Request) -> tuple[Any, Optional[JSONResponse]]:
        r = http_refusal(request.headers, self.settings.allowed_origins, self.settings.api_keys)
        if r is not None:
            return None, api_error(r.status, r.code, r.message, type_=r.type, headers=r.headers)
        ep = self.endpoint()
        if ep is None:
            return None, api_error(404, "sip_disabled", SIP_OFF, type_="not_found_error")
        return ep, None

    async def create(self, request: Request) -> Response:
        ep, err = self._gate(request)
        if err is not None:
            return err
        try:
            req = DialRequest.model_validate(await json_body(request))
            apply_session_update(self.settings.session_defaults(), req.session,
                                 self.settings.limits)
        except BadBody as e:
            return api_error(400, e.code, e.message, e.param)
        except ValidationError as e:
            first = e.errors()[0]
            return api_error(400, "invalid_value", f"{'.'.join(map(str, first['loc']))}: "
                             f"{first['msg']}", ".".join(map(str, first["loc"])) or None)
        except ClientError as e:
            return api_error(400, e.code, e.message, "session." + (top_param(e.param) or ""))
        return JSONResponse(ep.dial(req).as_json(), status_code=201)

    def _placed(self, request: Request):
        ep, err = self._gate(request)
        if err is not None:
            return None, None, err
        placed = ep.placed_call(request.path_params["call_id"])
        if placed is None:
            return ep, None, api_error(404, "call_not_found",
                                       f"No placed call {request.path_params['call_id'][:64]!r}.",
                                       type_="not_found_error")
        return ep, placed, None

    async def get(self, request: Request) -> Response:
        _, placed, err = self._placed(request)
        return err or JSONResponse(placed.as_json())

    async def hangup(self, request: Request) -> Response:
        ep, placed, err = self._placed(request)
        if err is not None:
            return err
        if not ep.hang_up_placed(placed):
            return api_error(409, "call_ended", f"The call is over ({placed.status}).")
        return JSONResponse(placed.as_json())


def dial_routes(endpoint: Callable[[], Any], settings: Any) -> list[Route]:
    api = DialApi(endpoint, settings)
    return [Route("/v1/sip/calls", api.create, methods=["POST"]),
            Route("/v1/sip/calls/{call_id}", api.get, methods=["GET"]),
            Route("/v1/sip/calls/{call_id}/hangup", api.hangup, methods=["POST"])]


__all__ = ["dial_routes", "DialApi"]
