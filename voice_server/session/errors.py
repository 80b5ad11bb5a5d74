"""Client-facing errors: one exception type and the mapping from pydantic.

Every problem with a client event becomes a :class:`ClientError` (code,
message, param) which the core turns into an ``error`` event of type
``invalid_request_error``; the session stays open.  A ``session.update``
with several bad fields gets one error for all of them (:func:`field_errors`).

Codes used (``param`` is the dotted path of the offending field):

=================================  ==========================================
invalid_json                       text frame is not JSON
binary_frame_not_supported         bytes where a JSON text frame is expected
                                   (``client_event`` given bytes)
binary_frames_not_supported        a binary WebSocket frame (the transports,
                                   via ``Session.reject_client_frame``)
message_too_large                  a WebSocket message above
                                   ServerSettings.ws_max_message_bytes (then
                                   close 1009) or a data-channel message above
                                   datachannel_max_message_bytes (stays open)
invalid_event                      JSON is not an object
missing_required_parameter         a required field is absent
invalid_type                       a field has the wrong JSON type
invalid_value                      unknown event type, out-of-range value,
                                   unknown item id, audio_end_ms too large...
invalid_base64                     append/item audio is not valid base64
invalid_audio_length               PCM16 byte count is odd
input_audio_too_large              append above ServerLimits.max_append_b64_bytes
input_audio_buffer_full            push-to-talk buffer above max_buffered_input_s
input_audio_buffer_commit_empty    commit with less than min_commit_ms buffered
string_above_max_length            instructions / metadata too long
invalid_tool                       a tool's name (pattern, duplicate), too many tools
unsupported_tool_type              a tool of a type other than ``function``
invalid_tool_parameters            ``parameters`` not a JSON Schema of an object
invalid_tool_choice                not auto/none/required/a function name; a response's
                                   choice that does not fit its tools (a session's: when a
                                   response starts, which then goes on under auto)
context_length_exceeded            truncation ``disabled`` and the conversation does not
                                   fit the model's context (the response fails)
function_call_not_found            an output whose call_id matches no function_call item
function_call_in_progress          an output for a call whose arguments still stream
function_call_incomplete           an output for a call cut off by a cancel
function_call_output_duplicate     a second output for one call
response_cancel_not_active         response.cancel with nothing active (benign)
conversation_already_has_active_response  response.create while one is active (benign)
rate_limit_exceeded                more than ServerLimits.max_client_events_per_s
                                   (token bucket, burst client_events_burst); event dropped
idle_timeout                       no client traffic for idle_timeout_s (then close 1000)
session_expired                    max_session_s reached (then close 1000)
=================================  ==========================================
"""

from __future__ import annotations

from pydantic import ValidationError


class ClientError(Exception):
    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param
        self.event_id: str | None = None  # the client event that caused it


_TYPE_SUFFIXES = ("_type", "_parsing")


def _loc_to_param(loc, prefix: str | None) -> str | None:
    parts: list[str] = []
    for p in loc:
        if isinstance(p, int):
            if parts:
                parts[-1] = f"{parts[-1]}[{p}]"
            else:
                parts.append(f"[{p}]")
        else:
            # pydantic adds union member / function tags to loc; skip them
            if p.startswith("function-") or p in ("str", "int", "float", "bool", "list", "dict",
                                                  "none", "literal['inf']", "is-instance"):
                continue
            if "[" in p and p.startswith(("literal", "union", "tagged-union")):
                continue
            parts.append(p)
    path = ".".join(parts)
    if prefix:
        path = f"{prefix}.{path}" if path else prefix
    return path or None


def from_validation_error(exc: ValidationError, prefix: str | None = None) -> ClientError:
    """First pydantic error -> ClientError with an OpenAI-style code and param."""
    err = exc.errors()[0]
    etype = err.get("type", "")
    param = _loc_to_param(err.get("loc", ()), prefix)
    msg = err.get("msg", "invalid value")
    if etype == "missing":
        return ClientError("missing_required_parameter",
                           f"Missing required parameter: '{param}'.", param)
    if etype == "string_too_long":
        return ClientError("string_above_max_length", f"Invalid '{param}': {msg}.", param)
    if etype.endswith(_TYPE_SUFFIXES) or etype in ("model_type", "model_attributes_type",
                                                    "dict_type", "list_type"):
        return ClientError("invalid_type", f"Invalid type for '{param}': {msg}.", param)
    if etype == "value_error" and msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    return ClientError("invalid_value", f"Invalid value for '{param}': {msg}.", param)


def field_errors(errors: list[ClientError]) -> ClientError:
    """The bad fields of one event as one error: the first one's code and
    param, every message (the event's other fields were applied)."""
    if len(errors) == 1:
        first = errors[0]
        return ClientError(first.code, f"{first.message} The rest of the update was applied.",
                           first.param)
    params = ", ".join(f"'{e.param}'" for e in errors if e.param)
    return ClientError(errors[0].code, f"{len(errors)} fields were not applied ({params}): "
                       + " ".join(e.message for e in errors)
                       + " The rest of the update was applied.", errors[0].param)

