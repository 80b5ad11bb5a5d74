"""Call control over HTTP in the shape of OpenAI's Realtime SIP API, on the
calls of :class:`voice_server.call_registry.CallRegistry`::

    POST /v1/realtime/calls/{call_id}/accept   body: a Realtime session object
                                               ({"type": "realtime", "instructions", ...})
    POST /v1/realtime/calls/{call_id}/reject   body: {"status_code": 486} (optional; 603)
    POST /v1/realtime/calls/{call_id}/refer    body: {"target_uri": "tel:+1..." | "sip:..."}
    POST /v1/realtime/calls/{call_id}/hangup

Each answers 200 with an empty JSON object once done (``refer``: the
transfer's outcome, ``{"status", "sip_status"?, "detail"?}``); errors are
the OpenAI error JSON: 400 (a bad body: the first bad field is ``param``),
401/403 (the access rule of every HTTP endpoint), 404 ``call_not_found``,
409 ``call_not_pending`` / ``call_not_live`` / ``refer_not_supported``.
``/hangup`` of a call id that is not a SIP call falls through to the WebRTC
calls (``POST /v1/realtime/calls`` made them), with their own access rule,
so one path hangs up both.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Awaitable, Callable, Optional

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..call_actions_runner import transfer_output
from ..call_control import TRANSFER
from ..call_registry import DEFAULT_REJECT_STATUS, CallGone, CallRegistry, CallState
from ..session.call_actions import TARGET_URI_RE
from ..session.config import apply_session_update
from ..session.errors import ClientError
from .access import http_refusal

log = logging.getLogger("voice_server.transports.sip_calls_api")

MAX_BODY = 256 * 1024
Handler = Callable[[Request], Awaitable[Response]]


def api_error(status: int, code: str, message: str, param: str | None = None,
              type_: str = "invalid_request_error", headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"type": type_, "code": code, "message": message,
                                   "param": param}}, status_code=status, headers=headers)


class BadBody(Exception):
    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.param = code, message, param


async def json_body(request: Request) -> dict:
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise BadBody("request_too_large", f"The body is over {MAX_BODY} bytes.")
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadBody("invalid_json", "The body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise BadBody("invalid_type", "The body must be a JSON object.")
    return body


class SipCallsApi:
    def __init__(self, registry: CallRegistry, settings: Any,
                 other_hangup: Optional[Handler] = None) -> None:
        self.registry = registry
        self.settings = settings
        self.other_hangup = other_hangup   # the WebRTC calls' hangup

    def _refused(self, request: Request) -> Optional[JSONResponse]:
        r = http_refusal(request.headers, self.settings.allowed_origins, self.settings.api_keys)
        if r is None:
            return None
        return api_error(r.status, r.code, r.message, type_=r.type, headers=r.headers)

    def _call(self, request: Request):
        call_id = request.path_params["call_id"]
        call = self.registry.get(call_id)
        if call is None or call.state is CallState.ENDED:
            return None, api_error(404, "call_not_found", f"No call {call_id[:64]!r}.",
                                   type_="not_found_error")
        return call, None

    async def _acting(self, request: Request):
        """The access rule, the call, and the JSON body: ``(call, body, None)``,
        or ``(None, None, the error response)``."""
        refused = self._refused(request)
        if refused is not None:
            return None, None, refused
        call, err = self._call(request)
        if err is not None:
            return None, None, err
        try:
            return call, await json_body(request), None
        except BadBody as e:
            return None, None, api_error(400, e.code, e.message, e.param)

    async def accept(self, request: Request) -> Response:
        call, body, err = await self._acting(request)
        if err is not None:
            return err
        try:
            if body.get("type", "realtime") != "realtime":
                raise BadBody("invalid_value", "Invalid value for 'type': supported values are: "
                              "'realtime'.", "type")
            # checked whole here, so a bad field is this request's 400, not a call's error
            apply_session_update(self.settings.session_defaults(), body, self.settings.limits)
        except BadBody as e:
            return api_error(400, e.code, e.message, e.param)
        except ClientError as e:
            return api_error(400, e.code, e.message, top_param(e.param))
        if call.state is not CallState.PENDING:
            return api_error(409, "call_not_pending", "The call was already accepted or rejected.")
        try:
            await call.accept(body)
        except CallGone:
            return api_error(404, "call_not_found", "The call ended before it was accepted.",
                             type_="not_found_error")
        return JSONResponse({})

    async def reject(self, request: Request) -> Response:
        call, body, err = await self._acting(request)
        if err is not None:
            return err
        status = body.get("status_code", DEFAULT_REJECT_STATUS)
        if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 699:
            return api_error(400, "invalid_value", "Invalid 'status_code': a SIP final status, "
                             "400 to 699.", "status_code")
        if call.state is not CallState.PENDING:
            return api_error(409, "call_not_pending", "Only a ringing call can be rejected; "
                             "hang up a live one.")
        try:
            await call.reject(status)
        except CallGone:
            pass   # gone anyway
        self.registry.remove(call.call_id)
        return JSONResponse({})

    async def refer(self, request: Request) -> Response:
        call, body, err = await self._acting(request)
        if err is not None:
            return err
        target = body.get("target_uri")
        if not isinstance(target, str):
            return api_error(400, "missing_required_parameter", "Missing required parameter: "
                             "'target_uri'.", "target_uri")
        if not TARGET_URI_RE.match(target):
            return api_error(400, "invalid_value", "Invalid 'target_uri': a tel: or sip: URI.",
                             "target_uri")
        control = call.call_control
        if call.state is not CallState.LIVE or control is None:
            return api_error(409, "call_not_live", "Only an accepted call can be transferred.")
        if TRANSFER not in control.actions():
            return api_error(409, "refer_not_supported", "This call cannot be transferred now.")
        return JSONResponse(transfer_output(await control.transfer(target)))

    async def hangup(self, request: Request) -> Response:
        if self.registry.get(request.path_params["call_id"]) is None and \
                self.other_hangup is not None:
            # a WebRTC call: its own rule (the unguessable call id suffices there)
            return await self.other_hangup(request)
        refused = self._refused(request)
        if refused is not None:
            return refused
        call, err = self._call(request)
        if err is not None:
            return err
        if call.state is CallState.PENDING:
            await call.reject(DEFAULT_REJECT_STATUS)
            self.registry.remove(call.call_id)
        elif call.call_control is not None:
            await call.call_control.hang_up("hangup requested")
        elif call.runner is not None:
            await call.runner.close()
        return JSONResponse({})


def top_param(param: str | None) -> str | None:
    """A session field's param as the body names it (``session.x`` -> ``x``)."""
    if param and param.startswith("session."):
        return param[len("session."):]
    return param


def sip_calls_routes(registry: CallRegistry, settings: Any,
                     other_hangup: Optional[Handler] = None) -> list[Route]:
    """The routes; put them before the WebRTC ones (``/hangup`` is shared)."""
    api = SipCallsApi(registry, settings, other_hangup)
    base = "/v1/realtime/calls/{call_id}"
    return [Route(base + "/accept", api.accept, methods=["POST"]),
            Route(base + "/reject", api.reject, methods=["POST"]),
            Route(base + "/refer", api.refer, methods=["POST"]),
            Route(base + "/hangup", api.hangup, methods=["POST"])]


__all__ = ["sip_calls_routes", "SipCallsApi", "api_error", "json_body", "top_param", "BadBody"]
