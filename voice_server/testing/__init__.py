"""The harness shared by the tests and the benchmarks, shipped with the server
(as ``starlette.testclient`` ships with Starlette) so that both import it the
same way and an integrator can drive a deployment with it.

Servers
    :class:`~voice_server.testing.server_thread.ServerThread` (the real server
    on a thread of this process) and
    :class:`~voice_server.testing.server_process.ServerProcess` (``voice-agent
    serve`` in a process of its own, read through the admin endpoints).
Callers
    :class:`~voice_server.testing.realtime_client.RTClient` (Realtime
    WebSocket, collects events), :class:`~voice_server.testing.rtc_client.RTCClient`
    (WebRTC on aiortc), :mod:`.twilio_client` and :mod:`.phone_clients` (the
    phone providers' side of a call, written from their documentation), and
    the real-time simulated callers of
    :mod:`voice_server.testing.callers` (one ``Caller`` over a WebSocket,
    Twilio Media Streams or WebRTC transport).  :mod:`.audio`: flite speech
    and real-time streaming.
Stand-in stages
    :mod:`.stages` (runtime tests and benchmark), :mod:`.voice_stages`
    (scripted thinkers), :mod:`.fault_stages` (the real models with one-shot
    faults).  Stand-ins replace models, never the runtime.
Reports
    :mod:`.report`: the one percentile and the JSON writer of every benchmark.
Configs
    :mod:`.greedy_config`: a pipeline YAML whose thinker decodes greedily (checks
    of what the model says).

Nothing here is imported by the server itself.
"""

from .server_thread import ServerThread

TEST_API_KEY = "test-key-123"  # the key test servers are configured with

__all__ = ["ServerThread", "TEST_API_KEY"]
