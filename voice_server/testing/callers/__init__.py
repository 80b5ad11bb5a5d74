"""Simulated callers for benchmarks and tests: one :class:`Caller` (real-time
microphone, event reader) over a transport - the Realtime WebSocket
(:class:`RealtimeWSTransport`), Twilio Media Streams
(:mod:`.twilio`) or WebRTC (:mod:`.webrtc`, aiortc loaded on first use)."""

from .base import CallerTransport, RealtimeWSTransport
from .caller import (FRAME_MS, INTERRUPT, QUESTIONS, SILENCE_WINDOW_MS, STORY, Caller, Sess,
                     audio_delta, load_speech)

__all__ = ["CallerTransport", "RealtimeWSTransport", "Caller", "Sess", "audio_delta",
           "load_speech", "QUESTIONS", "STORY", "INTERRUPT", "SILENCE_WINDOW_MS", "FRAME_MS"]
