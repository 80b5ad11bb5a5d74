"""Whether a ``response.done`` says the reply was given.

The test servers cap replies at a few dozen tokens (``max_output_tokens``),
so a small model's answer is often cut: the response then ends
``incomplete`` with reason ``max_output_tokens``, as the Realtime API's
does, and the reply was still given, up to its budget.
"""

from __future__ import annotations

from typing import Any

ANSWERED = ("completed", "incomplete")


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def answered(response: Any) -> bool:
    """``response`` (the event's ``response``, a dict or an SDK object) is
    ``completed``, or ``incomplete`` because the token budget cut it."""
    status = _field(response, "status")
    if status == "completed":
        return True
    details = _field(response, "status_details")
    return status == "incomplete" and _field(details, "reason") == "max_output_tokens"


__all__ = ["ANSWERED", "answered"]
