"""The agent's call actions as the session sees them: the operator's setting,
the function tools they become, and the checking of a call's arguments.

An operator turns actions on per session with the extension field
``session.voice_agent.call_actions`` (``session.update``, a SIP call's
accept body, or the server's ``call_actions`` setting for phone calls)::

    {"end_call": {},
     "transfer_call": {"targets": [{"name": "sales", "uri": "tel:+15550100"}],
                       "announcement": "Please hold while I transfer you."},
     "send_dtmf": {"max_digits": 16}}

(``true`` stands for ``{}``; ``false``/``null`` turns one off.)  Each action
is offered to the model as an ordinary function tool (:data:`END_CALL_TOOL`
and the two built per setting) only while the call's transport can do it
(``CallControl.actions()``); the server runs the call itself.  A client tool
of the same name as an action the operator turned on is refused (one name,
one meaning: the model could not tell them apart).

Nothing here does I/O; :mod:`.agent_actions` runs the calls.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..call_control import END_CALL, SEND_DTMF, TRANSFER
from .errors import ClientError, from_validation_error

# the function names the model sees -> the CallControl action each needs
END_CALL_FN = "end_call"
TRANSFER_FN = "transfer_call"
SEND_DTMF_FN = "send_dtmf"
NEEDS = {END_CALL_FN: END_CALL, TRANSFER_FN: TRANSFER, SEND_DTMF_FN: SEND_DTMF}

DTMF_RE = re.compile(r"^[0-9*#A-D]+$")
TARGET_URI_RE = re.compile(r"^(tel:\+?[0-9*#().\- ]{1,32}|sips?:[^\s<>\"]{1,250})$")
MAX_TARGETS = 32
DEFAULT_ANNOUNCEMENT = "Tell the caller in one short sentence that you are transferring the call now."


class TransferTarget(BaseModel):
    """One place the agent may hand the caller to (``uri``: ``tel:`` or ``sip:``);
    ``name`` is what the model picks (default: the URI itself)."""
    model_config = ConfigDict(frozen=True, extra="forbid")
    uri: str
    name: Optional[str] = Field(None, min_length=1, max_length=64)
    description: Optional[str] = Field(None, max_length=300)

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        if not TARGET_URI_RE.match(v):
            raise ValueError("must be a tel: or sip: URI")
        return v

    @property
    def key(self) -> str:
        return self.name or self.uri


class EndCallSetting(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TransferSetting(BaseModel):
    """``announcement``: what the caller hears before the transfer when the
    model said nothing with its call (an instruction to the model; None: the
    default one)."""
    model_config = ConfigDict(frozen=True, extra="forbid")
    targets: tuple[TransferTarget, ...] = Field(min_length=1, max_length=MAX_TARGETS)
    announcement: Optional[str] = Field(None, max_length=1000)

    @field_validator("targets")
    @classmethod
    def _unique(cls, v: tuple[TransferTarget, ...]) -> tuple[TransferTarget, ...]:
        keys = [t.key for t in v]
        if len(set(keys)) != len(keys):
            raise ValueError("two targets have one name")
        return v

    def target(self, key: str) -> Optional[TransferTarget]:
        return next((t for t in self.targets if t.key == key), None)


class DtmfSetting(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    max_digits: int = Field(32, ge=1, le=64)


class CallActionsSetting(BaseModel):
    """The operator's ``voice_agent.call_actions`` (module docstring); None: off."""
    model_config = ConfigDict(frozen=True, extra="forbid")
    end_call: Optional[EndCallSetting] = None
    transfer_call: Optional[TransferSetting] = None
    send_dtmf: Optional[DtmfSetting] = None

    @field_validator("end_call", "transfer_call", "send_dtmf", mode="before")
    @classmethod
    def _switch(cls, v: Any) -> Any:
        if v is True:
            return {}
        return None if v is False else v

    @property
    def names(self) -> frozenset[str]:
        """The function names turned on."""
        return frozenset(n for n in NEEDS if getattr(self, n) is not None)

    def wire(self) -> dict:
        return self.model_dump(mode="json", exclude_none=True)


def parse_call_actions(value: Any, param: str) -> Optional[CallActionsSetting]:
    """A client's ``voice_agent.call_actions``, checked; null or ``{}``: off."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ClientError("invalid_type", f"Invalid type for '{param}': expected an object "
                          "(end_call, transfer_call, send_dtmf).", param)
    try:
        setting = CallActionsSetting.model_validate(value)
    except ValidationError as exc:
        raise from_validation_error(exc, param) from None
    return setting if setting.names else None


def reserved_clash(tools: list[dict], setting: Optional[CallActionsSetting],
                   param: str) -> Optional[ClientError]:
    """A client tool named like an action the operator turned on."""
    names = setting.names if setting is not None else frozenset()
    for i, t in enumerate(tools):
        if t.get("name") in names:
            return ClientError("tool_name_reserved", f"Invalid '{param}[{i}].name': "
                               f"{t['name']!r} is a call action the server runs itself "
                               "(voice_agent.call_actions); name the client's tool otherwise "
                               "or turn the action off.", f"{param}[{i}].name")
    return None


# ------------------------------------------------------------------ the tools
END_CALL_TOOL = {
    "type": "function", "name": END_CALL_FN,
    "description": "End the phone call. Say goodbye first: the call ends once the caller "
                   "has heard everything you said.",
    "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}


def transfer_tool(s: TransferSetting) -> dict:
    lines = [f"{t.key}: {t.description}" for t in s.targets if t.description]
    return {"type": "function", "name": TRANSFER_FN,
            "description": "Transfer the caller to a person or department."
                           + (" Targets: " + "; ".join(lines) + "." if lines else ""),
            "parameters": {"type": "object", "additionalProperties": False,
                           "required": ["target"],
                           "properties": {"target": {"type": "string",
                                                     "enum": [t.key for t in s.targets]}}}}


def dtmf_tool(s: DtmfSetting) -> dict:
    return {"type": "function", "name": SEND_DTMF_FN,
            "description": "Press keys on the phone line (DTMF tones), e.g. to answer an "
                           "automated menu.",
            "parameters": {"type": "object", "additionalProperties": False,
                           "required": ["digits"],
                           "properties": {"digits": {
                               "type": "string", "minLength": 1, "maxLength": s.max_digits,
                               "pattern": "^[0-9*#A-D]+$",
                               "description": "The keys, among 0-9, *, # and A-D."}}}}


def offered_tools(setting: Optional[CallActionsSetting], available: frozenset[str]) -> list[dict]:
    """The action tools the model may call now (Realtime shape): turned on by
    the operator and possible on this call's transport."""
    if setting is None:
        return []
    out = []
    if setting.end_call is not None and END_CALL in available:
        out.append(END_CALL_TOOL)
    if setting.transfer_call is not None and TRANSFER in available:
        out.append(transfer_tool(setting.transfer_call))
    if setting.send_dtmf is not None and SEND_DTMF in available:
        out.append(dtmf_tool(setting.send_dtmf))
    return out


# ------------------------------------------------------------------ one call
@dataclass(frozen=True)
class EndCall:
    pass


@dataclass(frozen=True)
class Transfer:
    target: TransferTarget
    announcement: str


@dataclass(frozen=True)
class PressKeys:
    digits: str


@dataclass(frozen=True)
class BadArguments:
    """The model's arguments do not fit: said back to it as the call's output."""
    message: str


ActionRequest = Union[EndCall, Transfer, PressKeys, BadArguments]


def action_request(name: str, arguments: str, setting: CallActionsSetting) -> ActionRequest:
    """What the model's call of action ``name`` asks for, or why it cannot be done."""
    try:
        args = json.loads(arguments or "{}")
    except (ValueError, RecursionError):
        return BadArguments("the arguments are not JSON")
    if not isinstance(args, dict):
        return BadArguments("the arguments are not a JSON object")
    if name == END_CALL_FN:
        return EndCall()
    if name == TRANSFER_FN:
        s = setting.transfer_call
        key = args.get("target")
        target = s.target(key) if isinstance(key, str) else None
        if target is None:
            return BadArguments("unknown target; the allowed targets are: "
                                + ", ".join(t.key for t in s.targets))
        return Transfer(target, s.announcement or DEFAULT_ANNOUNCEMENT)
    s = setting.send_dtmf
    digits = args.get("digits")
    if not isinstance(digits, str) or not DTMF_RE.match(digits) or len(digits) > s.max_digits:
        return BadArguments(f"digits must be 1 to {s.max_digits} of 0-9, *, # and A-D")
    return PressKeys(digits)


__all__ = ["CallActionsSetting", "TransferSetting", "TransferTarget", "DtmfSetting",
           "EndCallSetting", "parse_call_actions", "reserved_clash", "offered_tools",
           "action_request", "ActionRequest", "EndCall", "Transfer", "PressKeys",
           "BadArguments", "END_CALL_FN", "TRANSFER_FN", "SEND_DTMF_FN", "NEEDS",
           "END_CALL_TOOL", "DEFAULT_ANNOUNCEMENT"]
