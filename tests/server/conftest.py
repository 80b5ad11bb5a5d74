"""One real voice server (configs/voice-cpu-fast.yaml) for the whole tests/server run:
a :class:`voice_server.testing.ServerThread` (uvicorn on a background thread,
127.0.0.1, a free port; the models load once).  Tests talk to it over real
sockets from their own loops; ``server.call(fn)`` runs on the server's loop.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from voice_server.settings import ServerSettings
from voice_server.testing import TEST_API_KEY, ServerThread

ROOT = Path(__file__).resolve().parents[2]
API_KEY = TEST_API_KEY


@pytest.fixture(scope="session")
def server():
    """Also the WebRTC tests' server: its ICE hosts come from the environment, as
    an operator sets them (127.0.0.1 alone; see test_webrtc.py)."""
    settings = ServerSettings.from_sources(
        env={"VOICE_AGENT_ICE_HOSTS": "127.0.0.1"}, api_keys=[API_KEY], max_sessions=8,
        max_output_tokens=24, limits={"max_append_b64_bytes": 256 * 1024})
    assert settings.ice_hosts == ["127.0.0.1"] and settings.ice_servers == []
    srv = ServerThread(str(ROOT / "configs" / "voice-cpu-fast.yaml"), settings).start()
    yield srv
    srv.stop()


@contextlib.contextmanager
def unpaced_ws(srv: ServerThread):
    """Realtime WebSocket sessions of ``srv`` opened inside get each reply's audio
    as soon as it is made (``output_lead_ms`` 0), for tests that judge what is
    said, not when it plays: paced, every reply costs its own length in real
    time.  Pacing has its tests (test_pacing.py) and barge-in needs it, so those
    never use this."""
    ep = srv.app.state.realtime
    old, ep.settings = ep.settings, ep.settings.model_copy(update={"output_lead_ms": 0.0})
    try:
        yield srv
    finally:
        ep.settings = old


@pytest.fixture
def unpaced(server):
    """:func:`unpaced_ws` on the shared server, for one test."""
    with unpaced_ws(server):
        yield server


def loopback_server(max_output_tokens: int, config: Path = ROOT / "configs" / "voice-cpu-fast.yaml"
                    ) -> ServerThread:
    """A server for WebRTC tests: ICE on 127.0.0.1 only, no STUN (see
    test_webrtc.py); ``srv.base`` is its http:// root."""
    settings = ServerSettings.from_sources(
        env={"VOICE_AGENT_ICE_HOSTS": "127.0.0.1"}, api_keys=[API_KEY], max_sessions=8,
        max_output_tokens=max_output_tokens)
    assert settings.ice_hosts == ["127.0.0.1"] and settings.ice_servers == []
    srv = ServerThread(str(config), settings).start()
    srv.base = f"http://127.0.0.1:{srv.port}"
    return srv


# What a paced client holds at most (test_pacing.py and test_interruptions.py)
LEAD_MS = 300


@pytest.fixture(scope="session")
def paced_server():
    """tests/server/pacing-pipeline.yaml (real listen, a scripted reply of seconds,
    real flite speech), paced with ``output_lead_ms`` LEAD_MS; ICE on 127.0.0.1."""
    srv = ServerThread(str(ROOT / "tests" / "server" / "pacing-pipeline.yaml"),
                       ServerSettings(api_keys=[API_KEY], output_lead_ms=LEAD_MS,
                                      ice_hosts=["127.0.0.1"])).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def fault_server():
    srv = ServerThread(str(ROOT / "tests" / "server" / "fault-pipeline.yaml"),
                       ServerSettings(api_keys=[API_KEY])).start()
    yield srv
    srv.stop()
