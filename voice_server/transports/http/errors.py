"""The HTTP API's one error vocabulary, shared by every endpoint family.

Before the first byte an error is a real HTTP status with an OpenAI-style body
``{"error": {"message", "type", "code", "param"}}`` (docs/CONCEPTS.md,
"Errors"): an endpoint raises :class:`ApiError` and the route table
(:mod:`.routes`) turns it into the response.  A runtime failure maps onto a
status through ``STATUS_OF`` (:func:`runtime_error`); after the first byte an
SSE stream carries the same body in band (:func:`error_body`,
:func:`cancelled_body`, see :mod:`.streaming`).  Kept in one module so chat,
speech and the model list cannot drift apart on what a failure looks like.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from runtime.errors import ErrorCode

# runtime error code -> (HTTP status, OpenAI error type)
STATUS_OF = {
    ErrorCode.BAD_INPUT.value: (400, "invalid_request_error"),
    ErrorCode.UNSUPPORTED.value: (400, "invalid_request_error"),
    ErrorCode.RESOURCE_EXHAUSTED.value: (503, "server_overloaded"),
    ErrorCode.TIMEOUT.value: (504, "timeout_error"),
    ErrorCode.STAGE_UNAVAILABLE.value: (503, "service_unavailable"),
    ErrorCode.CANCELLED.value: (503, "service_unavailable"),
    ErrorCode.INTERNAL.value: (500, "server_error"),
}


class ApiError(Exception):
    """A request refused before the first byte: its HTTP status, OpenAI-style body
    and headers.  Raise it from an endpoint; :mod:`.routes` sends ``response()``."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error",
                 code: str | None = None, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": type_, "code": code, "param": param}}
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body, status_code=self.status, headers=self.headers)


def error_body(info: Any) -> dict:
    """The OpenAI-style body for a runtime ErrorInfo."""
    code = info.code.value if info is not None else ErrorCode.INTERNAL.value
    _, type_ = STATUS_OF.get(code, (500, "server_error"))
    msg = info.message if info is not None else "the request failed"
    err = {"message": msg, "type": type_, "code": code, "param": None}
    if info is not None:
        err["stage"] = info.stage
        err["retryable"] = info.retryable
    return {"error": err}


def cancelled_body(reason: Any) -> dict:
    """The body for a stream the runtime cancelled without an ErrorInfo."""
    return {"error": {"message": f"the request was cancelled ({reason})", "type": "service_unavailable",
                      "code": ErrorCode.CANCELLED.value, "param": None}}


def runtime_error(ev: Any) -> ApiError:
    """A terminal non-'done' event before the first byte -> a proper HTTP status."""
    if ev.kind == "cancelled":
        info = ev.error
        code = ErrorCode.CANCELLED.value
        msg = info.message if info else f"the request was cancelled ({ev.reason})"
        return ApiError(503, msg, "service_unavailable", code)
    info = ev.error
    code = info.code.value if info is not None else ErrorCode.INTERNAL.value
    status, type_ = STATUS_OF.get(code, (500, "server_error"))
    headers = {"Retry-After": "1"} if status in (429, 503) else None
    return ApiError(status, info.message if info else "the request failed", type_, code, headers=headers)


__all__ = ["STATUS_OF", "ApiError", "error_body", "cancelled_body", "runtime_error"]
