"""The server's transports: each converts one wire format into session events
and back, and nothing else.

* :mod:`.realtime_ws` - ``/v1/realtime``, the OpenAI Realtime WebSocket.
* :mod:`.webrtc` (+ :mod:`.webrtc_audio`, :mod:`.webrtc_ice`) -
  ``/v1/realtime/calls``, OpenAI-style WebRTC on aiortc, and
  ``/v1/realtime/client_secrets``.
* :mod:`.phone` - ``/v1/telephony/<provider>``: phone calls from Twilio,
  Telnyx, Plivo, Exotel and Vonage on one bridge with a small codec per
  provider, and Twilio's TwiML webhook.
* :mod:`.http` - ``/health``, ``/health/ready``, ``/health/live``,
  ``/v1/models``, ``/v1/audio/speech``, ``/v1/chat/completions``.

Every transport lets callers in through :mod:`.access` (keys, Origin policy,
loopback, client secrets, the one ``max_sessions`` counter).  The session
transports hand what they read to a :class:`voice_server.runner.SessionRunner`;
:mod:`.ws_reader` is the receive loop of the two WebSocket ones.  No transport
imports another.
"""
