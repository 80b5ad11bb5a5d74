"""Sans-I/O session core of the voice server (see core.py for the API)."""

from .commands import (AudioOut, CallAction, CancelResponse, Close, Command, ConfigureListen,
                       DropPreparedReply, FeedListen, FlushAudio, PauseAudio,
                       PrefillConversation, PrepareReply, ResumeAudio, RewindAudio, SendEvent,
                       StartResponse, HangUpCall, TransferCall, SendDtmf,
                       StopListen, TranscribeBuffer)
from .config import ServerLimits, SessionSettings, TurnDetection, AudioFormat
from .core import Session
from .errors import ClientError

__all__ = ["Session", "SessionSettings", "ServerLimits", "TurnDetection", "AudioFormat",
           "ClientError", "Command", "SendEvent", "FeedListen", "ConfigureListen", "StopListen",
           "TranscribeBuffer", "StartResponse", "PrepareReply", "PrefillConversation",
           "DropPreparedReply",
           "CancelResponse", "AudioOut", "FlushAudio", "PauseAudio", "RewindAudio",
           "ResumeAudio", "Close", "CallAction", "HangUpCall", "TransferCall", "SendDtmf"]
