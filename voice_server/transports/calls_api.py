"""Call records over HTTP (:mod:`voice_server.records`), with the access rule
of every HTTP endpoint (:func:`voice_server.transports.access.http_refusal`:
the Origin policy, then the API key)::

    GET    /v1/calls?limit=50&before=T   newest first: {"object": "list", "data": [summary]}
    GET    /v1/calls/{id}                summary + "items" (the transcript, in order) +
                                         "turns" (status, reason, timings in ms, usage)
    GET    /v1/calls/{id}/recording.wav  16 kHz stereo WAV, caller left, agent right
    DELETE /v1/calls/{id}                the call, its transcript and its recording

With records off every path answers 404 ``records_disabled``.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from ..session_registry import registry_for
from .access import http_refusal

MAX_LIST = 500
# Said to whoever asks while records are off (the default), with how to turn them on.
RECORDS_OFF = ("call records are off on this server; turn them on with extra.server.records: "
               "{enabled: true} in the config, or VOICE_AGENT_RECORDS_DIR=<folder> in the environment")


def _error(status: int, code: str, message: str, type_: str = "invalid_request_error",
           headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"type": type_, "code": code, "message": message, "param": None}},
                        status_code=status, headers=headers)


class CallsApi:
    def __init__(self, pipeline: Any, settings: Any) -> None:
        self.pipeline = pipeline
        self.settings = settings

    def _store_or_refusal(self, request: Request):
        """(store, None) when the caller may read records, else (None, the error)."""
        refusal = http_refusal(request.headers, self.settings.allowed_origins, self.settings.api_keys)
        if refusal is not None:
            return None, _error(refusal.status, refusal.code, refusal.message, refusal.type,
                                refusal.headers)
        store = registry_for(self.pipeline).records
        if store is None:
            return None, _error(404, "records_disabled", RECORDS_OFF)
        return store, None

    async def list(self, request: Request) -> Response:
        store, err = self._store_or_refusal(request)
        if err is not None:
            return err
        try:
            limit = min(max(int(request.query_params.get("limit", 50)), 1), MAX_LIST)
            before = request.query_params.get("before")
            before = float(before) if before is not None else None
        except ValueError:
            return _error(400, "invalid_value", "limit must be an integer, before a number "
                          "(unix seconds)")
        calls = await store.run(store.list_calls, limit, before)
        return JSONResponse({"object": "list", "data": calls})

    async def get(self, request: Request) -> Response:
        store, err = self._store_or_refusal(request)
        if err is not None:
            return err
        call = await store.run(store.get_call, request.path_params["call_id"])
        return JSONResponse(call) if call is not None else _not_found(request)

    async def recording(self, request: Request) -> Response:
        store, err = self._store_or_refusal(request)
        if err is not None:
            return err
        path = await store.run(store.recording_file, request.path_params["call_id"])
        if path is None:
            return _error(404, "recording_not_found", "no finished recording for this call "
                          "(not recorded, unknown, or still live)", "not_found_error")
        return FileResponse(path, media_type="audio/wav")

    async def delete(self, request: Request) -> Response:
        store, err = self._store_or_refusal(request)
        if err is not None:
            return err
        call_id = request.path_params["call_id"]
        outcome = await store.run(store.delete_call, call_id)
        if outcome == "unknown":
            return _not_found(request)
        if outcome == "live":
            return _error(409, "call_live", "the call is still going; delete it once it ended")
        return JSONResponse({"id": call_id, "object": "voice_agent.call.deleted", "deleted": True})


def _not_found(request: Request) -> JSONResponse:
    return _error(404, "call_not_found", f"no call {request.path_params['call_id']!r}",
                  "not_found_error")


def calls_routes(pipeline: Any, settings: Any) -> list[Route]:
    api = CallsApi(pipeline, settings)
    return [Route("/v1/calls", api.list, methods=["GET"]),
            Route("/v1/calls/{call_id}", api.get, methods=["GET"]),
            Route("/v1/calls/{call_id}", api.delete, methods=["DELETE"]),
            Route("/v1/calls/{call_id}/recording.wav", api.recording, methods=["GET"])]


__all__ = ["calls_routes", "CallsApi"]
