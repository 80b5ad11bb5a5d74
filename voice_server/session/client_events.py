"""Parsing and validation of client events.

:func:`parse_client_event` turns one raw frame (str/bytes/dict) into a typed
pydantic model, or raises :class:`ClientError` (see errors.py for the codes)
with the client's ``event_id`` attached when it could be read.  Unknown
fields are ignored; types are strict (``"1"`` is not an int).  ``event_id``
is optional everywhere.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, List, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ClientError, from_validation_error

_STRICT = ConfigDict(strict=True, extra="ignore")


class _Event(BaseModel):
    model_config = _STRICT
    type: str
    event_id: Optional[str] = None


class SessionUpdate(_Event):
    session: dict


class InputAudioBufferAppend(_Event):
    audio: str


class InputAudioBufferCommit(_Event):
    pass


class InputAudioBufferClear(_Event):
    pass


class ContentIn(BaseModel):
    model_config = _STRICT
    type: str
    text: Optional[str] = None
    audio: Optional[str] = None
    transcript: Optional[str] = None


class ItemIn(BaseModel):
    model_config = _STRICT
    id: Optional[str] = Field(default=None, min_length=1, max_length=64)
    type: str = "message"
    role: Optional[str] = None
    content: List[ContentIn] = Field(default_factory=list)
    # function_call / function_call_output
    call_id: Optional[str] = Field(default=None, min_length=1, max_length=64)
    name: Optional[str] = None
    arguments: Optional[str] = None
    output: Optional[str] = None


class ConversationItemCreate(_Event):
    previous_item_id: Optional[str] = None
    item: ItemIn


class ConversationItemTruncate(_Event):
    item_id: str
    content_index: int = Field(ge=0)
    audio_end_ms: int = Field(ge=0)


class ConversationItemDelete(_Event):
    item_id: str


class ConversationItemRetrieve(_Event):
    item_id: str


class ResponseParamsIn(BaseModel):
    model_config = _STRICT
    instructions: Optional[str] = None
    metadata: Optional[dict[str, str]] = None
    output_modalities: Optional[List[str]] = None
    modalities: Optional[List[str]] = None  # beta
    max_output_tokens: Union[int, str, None] = None
    max_response_output_tokens: Union[int, str, None] = None  # beta
    conversation: Optional[str] = None
    input: Optional[List[dict]] = None
    tools: Any = None  # checked by tools.py
    tool_choice: Any = None
    # accepted and ignored: temperature, voice, audio, prompt ...


class ResponseCreate(_Event):
    response: Optional[ResponseParamsIn] = None


class ResponseCancel(_Event):
    response_id: Optional[str] = None


class OutputAudioBufferClear(_Event):
    pass


EVENT_TYPES: dict[str, type[_Event]] = {
    "session.update": SessionUpdate,
    "input_audio_buffer.append": InputAudioBufferAppend,
    "input_audio_buffer.commit": InputAudioBufferCommit,
    "input_audio_buffer.clear": InputAudioBufferClear,
    "conversation.item.create": ConversationItemCreate,
    "conversation.item.truncate": ConversationItemTruncate,
    "conversation.item.delete": ConversationItemDelete,
    "conversation.item.retrieve": ConversationItemRetrieve,
    "response.create": ResponseCreate,
    "response.cancel": ResponseCancel,
    "output_audio_buffer.clear": OutputAudioBufferClear,
}


def parse_client_event(raw: Union[str, bytes, bytearray, memoryview, dict]) -> _Event:
    if isinstance(raw, (bytes, bytearray, memoryview)):
        raise ClientError("binary_frame_not_supported",
                          "Binary frames are not supported; send JSON events as text frames.")
    if isinstance(raw, str):
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ClientError("invalid_json", f"Invalid JSON: {exc}") from None
    else:
        data = raw
    if not isinstance(data, dict):
        raise ClientError("invalid_event", "Client events must be JSON objects.")
    event_id = data.get("event_id") if isinstance(data.get("event_id"), str) else None
    try:
        etype = data.get("type")
        if etype is None:
            raise ClientError("missing_required_parameter",
                              "Missing required parameter: 'type'.", "type")
        if not isinstance(etype, str):
            raise ClientError("invalid_type", "Invalid type for 'type': expected a string.",
                              "type")
        cls = EVENT_TYPES.get(etype)
        if cls is None:
            raise ClientError("invalid_value", f"Invalid value: '{etype[:64]}'. Supported values "
                              f"are: {', '.join(repr(t) for t in EVENT_TYPES)}.", "type")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise from_validation_error(exc) from None
    except ClientError as err:
        err.event_id = event_id
        raise


def decode_base64_audio(b64: str, param: str, max_b64_bytes: int) -> bytes:
    """Decode base64 audio with a size cap (checked before decoding)."""
    if len(b64) > max_b64_bytes:
        raise ClientError("input_audio_too_large",
                          f"Audio payload of {len(b64)} base64 bytes exceeds the limit of "
                          f"{max_b64_bytes}.", param)
    try:
        return base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise ClientError("invalid_base64", f"Invalid '{param}': not valid base64.", param) \
            from None
