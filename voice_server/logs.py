"""Logging for the server: plain text by default, JSON lines on request.

    configure_logging("info", json_lines=True)     # voice-agent serve --log-json
                                                   # (or env VOICE_AGENT_LOG_JSON=1)

JSON lines carry ``ts`` (ISO 8601, UTC), ``level``, ``logger``, ``msg``, and,
where known, ``session_id`` and ``request_id`` (plus ``exc`` for exceptions
and any ``extra={...}`` fields a call passes).  The ids come from context
variables: :class:`voice_server.runner.SessionRunner` sets ``session_id`` in
the context its tasks are created from and ``request_id`` inside a response's
task, so every log call made on behalf of a session carries them without
passing them around.  Code elsewhere can do the same::

    from voice_server.logs import bind_ids
    token = bind_ids(session_id="sess_...", request_id=17)   # returns a reset token
    ...
    reset_ids(token)

Plain text lines get the same ids appended as ``[session=... request=...]``.
"""

from __future__ import annotations

import contextvars
import datetime as _dt
import json
import logging
import os
import sys
from typing import Any

session_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "voice_session_id", default=None)
request_id_var: contextvars.ContextVar[int | str | None] = contextvars.ContextVar(
    "voice_request_id", default=None)

# attributes every LogRecord has; anything else came in through ``extra=``
_STD = set(vars(logging.LogRecord("x", 0, "x", 0, "x", None, None))) | {"message", "asctime"}


def bind_ids(session_id: str | None = None, request_id: int | str | None = None) -> tuple:
    """Set the ids for the current context; returns a token for :func:`reset_ids`."""
    s = session_id_var.set(session_id) if session_id is not None else None
    r = request_id_var.set(request_id) if request_id is not None else None
    return (s, r)


def reset_ids(token: tuple) -> None:
    s, r = token
    if r is not None:
        request_id_var.reset(r)
    if s is not None:
        session_id_var.reset(s)


def _ids(record: logging.LogRecord) -> tuple[Any, Any]:
    sid = getattr(record, "session_id", None) or session_id_var.get()
    rid = getattr(record, "request_id", None)
    if rid is None:
        rid = request_id_var.get()
    return sid, rid


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _dt.datetime.fromtimestamp(record.created, _dt.timezone.utc)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        sid, rid = _ids(record)
        if sid is not None:
            out["session_id"] = sid
        if rid is not None:
            out["request_id"] = rid
        for k, v in vars(record).items():
            if k not in _STD and k not in out and not k.startswith("_") and k != "color_message":
                out[k] = v
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = record.stack_info
        return json.dumps(out, default=str, ensure_ascii=False, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """``LEVEL logger: message [session=... request=...]``."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        s = super().format(record)
        sid, rid = _ids(record)
        tags = []
        if sid is not None:
            tags.append(f"session={sid}")
        if rid is not None:
            tags.append(f"request={rid}")
        if not tags:
            return s
        first, nl, rest = s.partition("\n")
        return f"{first} [{' '.join(tags)}]{nl}{rest}"


def json_from_env(env=None) -> bool:
    v = (os.environ if env is None else env).get("VOICE_AGENT_LOG_JSON", "")
    return v.strip().lower() in ("1", "true", "yes", "on")


def configure_logging(level: str | int = "warning", json_lines: bool | None = None,
                      stream=None) -> logging.Handler:
    """Replace the root logger's handlers with one (JSON or text) handler on stderr.

    ``json_lines=None`` reads env ``VOICE_AGENT_LOG_JSON``.  uvicorn's loggers are
    made to propagate to the root so they share the format.
    """
    if json_lines is None:
        json_lines = json_from_env()
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        for h in list(lg.handlers):
            lg.removeHandler(h)
        lg.propagate = True
    return handler


__all__ = ["configure_logging", "JsonFormatter", "TextFormatter", "bind_ids", "reset_ids",
           "session_id_var", "request_id_var", "json_from_env"]
