"""Builders of schema-complete server events.

:class:`EventFactory` stamps every event with a unique ``event_id`` and, for
``dialect="beta"``, renames the GA event types to their beta names
(``response.output_audio.delta`` -> ``response.audio.delta``, ...).  The
module-level functions build the payloads that have nested objects
(errors, responses, usage) so that every required field is always present.
Field names follow openai/types/realtime/ (GA).
"""

from __future__ import annotations

import itertools
import secrets

BETA_NAMES = {
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
    "conversation.item.added": "conversation.item.created",
}


class IdFactory:
    """Unique ids: random per-session prefix + counter (cheap, never reused)."""

    def __init__(self) -> None:
        self._prefix = secrets.token_hex(6)
        self._n = itertools.count(1)

    def new(self, kind: str) -> str:
        return f"{kind}_{self._prefix}{next(self._n):06x}"


class EventFactory:
    def __init__(self, ids: IdFactory, dialect: str = "ga") -> None:
        if dialect not in ("ga", "beta"):
            raise ValueError("dialect must be 'ga' or 'beta'")
        self.ids = ids
        self.dialect = dialect

    def make(self, type_: str, **fields) -> dict:
        if self.dialect == "beta":
            type_ = BETA_NAMES.get(type_, type_)
        ev = {"type": type_, "event_id": self.ids.new("event")}
        ev.update(fields)
        return ev


def error_body(type_: str, code: str | None, message: str, param: str | None = None,
               cause_event_id: str | None = None) -> dict:
    return {"type": type_, "code": code, "message": message, "param": param,
            "event_id": cause_event_id}


def zero_usage() -> dict:
    return token_usage(0, 0, 0)


def token_usage(input_tokens: int, cached_tokens: int, output_tokens: int) -> dict:
    """response.done's ``usage``: the thinker's text tokens (audio goes through
    speech recognition and synthesis, so no audio tokens are counted)."""
    return {"total_tokens": input_tokens + output_tokens, "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "input_token_details": {"text_tokens": input_tokens, "audio_tokens": 0,
                                    "image_tokens": 0, "cached_tokens": cached_tokens,
                                    "cached_tokens_details": {"text_tokens": cached_tokens,
                                                              "audio_tokens": 0,
                                                              "image_tokens": 0}},
            "output_token_details": {"text_tokens": output_tokens, "audio_tokens": 0}}


def response_object(response_id: str, status: str, *, status_details: dict | None,
                    output: list[dict], conversation_id: str | None, modalities: list[str],
                    max_output_tokens: int | None, output_format: dict, voice: str,
                    usage: dict | None, metadata: dict | None) -> dict:
    return {
        "id": response_id,
        "object": "realtime.response",
        "status": status,
        "status_details": status_details,
        "output": output,
        "conversation_id": conversation_id,
        "output_modalities": list(modalities),
        "max_output_tokens": "inf" if max_output_tokens is None else max_output_tokens,
        "audio": {"output": {"format": output_format, "voice": voice}},
        "usage": usage,
        "metadata": metadata,
    }


def content_part(modality: str, text: str) -> dict:
    """``part`` of response.content_part.added/done: type "audio" or "text"."""
    if modality == "audio":
        return {"type": "audio", "transcript": text}
    return {"type": "text", "text": text}
