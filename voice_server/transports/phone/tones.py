"""``POST /v1/telephony/calls/{session_id}/dtmf``: the application plays DTMF
tones into a phone call: Plivo's ``sendDTMF`` where the stream has it, the
tones themselves as audio on Twilio, Telnyx, Exotel and Vonage streams
(:mod:`.dtmf_tones`); 409 ``call_not_started`` before the stream's start.

Body ``{"digits": "12#"}`` (1-32 of ``0-9 * # A-D``); answers 202 when the
tones are queued behind the audio already sent.  Access as on the HTTP API:
the Origin policy and, when API keys are configured, ``Authorization:
Bearer KEY``.
"""

from __future__ import annotations

import json
from typing import Mapping

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ...settings import ServerSettings
from ..access import bearer_token, key_matches, origin_allowed
from .bridge import PhoneEndpoint
from .codec import DTMF_DIGITS

TONES_PATH = "/v1/telephony/calls/{session_id}/dtmf"
MAX_BODY = 1024
MAX_DIGITS = 32


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"type": "invalid_request_error", "code": code,
                                   "message": message, "param": None}}, status_code=status)


def tones_route(endpoints: Mapping[str, PhoneEndpoint], settings: ServerSettings) -> Route:
    async def tones(request: Request) -> JSONResponse:
        if not origin_allowed(request.headers.get("origin"), request.headers.get("host"),
                              settings.allowed_origins):
            return _error(403, "origin_not_allowed", "This Origin may not use the server.")
        if settings.auth_required and not key_matches(bearer_token(request.headers),
                                                      settings.api_keys):
            return _error(401, "invalid_api_key", "Send 'Authorization: Bearer <key>'.")
        body = await request.body()
        try:
            digits = json.loads(body)["digits"] if len(body) <= MAX_BODY else None
        except (ValueError, TypeError, KeyError):
            digits = None
        if not isinstance(digits, str) or not 0 < len(digits) <= MAX_DIGITS \
                or any(d not in DTMF_DIGITS for d in digits):
            return _error(400, "invalid_digits", f'Send {{"digits": "..."}}: 1-{MAX_DIGITS} '
                          "of 0-9 * # A-D.")
        sid = request.path_params["session_id"]
        call = next((ep.calls[sid] for ep in endpoints.values() if sid in ep.calls), None)
        if call is None:
            return _error(404, "call_not_found", f"No phone call with session id {sid[:64]!r}.")
        if not call.send_digits(digits):
            return _error(409, "call_not_started",
                          "The call's stream has not started; send the keys once it has.")
        return JSONResponse({"session_id": sid, "digits": digits, "status": "queued"},
                            status_code=202)
    return Route(TONES_PATH, tones, methods=["POST"])


__all__ = ["tones_route", "TONES_PATH"]
