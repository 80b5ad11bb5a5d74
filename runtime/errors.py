"""The closed set of error codes every failure is mapped to (docs/CONCEPTS.md, "Errors").

A client must be able to tell a retryable overload from a bad input without
parsing messages, so every failure anywhere in the runtime ends up as an
:class:`ErrorInfo` with one of these codes and a retryable flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class ErrorCode(str, Enum):
    BAD_INPUT = "bad_input"
    UNSUPPORTED = "unsupported"
    RESOURCE_EXHAUSTED = "resource_exhausted"
    TIMEOUT = "timeout"
    STAGE_UNAVAILABLE = "stage_unavailable"
    CANCELLED = "cancelled"
    INTERNAL = "internal"


RETRYABLE = {
    ErrorCode.RESOURCE_EXHAUSTED: True,
    ErrorCode.TIMEOUT: True,
    ErrorCode.STAGE_UNAVAILABLE: True,
    ErrorCode.BAD_INPUT: False,
    ErrorCode.UNSUPPORTED: False,
    ErrorCode.CANCELLED: False,
    ErrorCode.INTERNAL: False,
}


@dataclass(frozen=True)
class ErrorInfo:
    code: ErrorCode
    message: str
    stage: str | None = None
    retryable: bool = False

    def to_wire(self) -> dict:
        return {"code": self.code.value, "message": self.message, "stage": self.stage,
                "retryable": self.retryable}

    @classmethod
    def from_wire(cls, d: dict) -> "ErrorInfo":
        return cls(ErrorCode(d["code"]), d["message"], d.get("stage"), bool(d.get("retryable")))

    @classmethod
    def make(cls, code: ErrorCode, message: str, stage: str | None = None) -> "ErrorInfo":
        return cls(code, message, stage, RETRYABLE[code])


class StageError(Exception):
    """Raised by executors to fail one request with a specific code."""

    def __init__(self, code: ErrorCode | str, message: str) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)


class PipelineClosed(RuntimeError):
    """``submit`` on a pipeline that has been closed (server shutting down):
    callers map it to ``stage_unavailable`` by class, not by message text."""


def classify(exc: BaseException, stage: str | None = None) -> ErrorInfo:
    """Map an exception raised by model code to the closed set."""
    if isinstance(exc, StageError):
        return ErrorInfo.make(exc.code, str(exc), stage)
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return ErrorInfo.make(ErrorCode.RESOURCE_EXHAUSTED,
                              f"{type(exc).__name__}: {exc}".rstrip(": "), stage)
    if isinstance(exc, (ValueError, TypeError, UnicodeError)):
        return ErrorInfo.make(ErrorCode.BAD_INPUT, f"{type(exc).__name__}: {exc}", stage)
    if isinstance(exc, NotImplementedError):
        return ErrorInfo.make(ErrorCode.UNSUPPORTED, f"{type(exc).__name__}: {exc}", stage)
    if isinstance(exc, TimeoutError):
        return ErrorInfo.make(ErrorCode.TIMEOUT, f"{type(exc).__name__}: {exc}", stage)
    return ErrorInfo.make(ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}", stage)
