"""One real voice server (configs/voice-cpu.yaml) for the whole tests/server run:
a :class:`voice_server.testing.ServerThread` (uvicorn on a background thread,
127.0.0.1, a free port; the models load once).  Tests talk to it over real
sockets from their own loops; ``server.call(fn)`` runs on the server's loop.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from voice_server.settings import ServerSettings
from voice_server.testing import TEST_API_KEY, ServerThread

ROOT = Path(__file__).resolve().parents[2]
API_KEY = TEST_API_KEY


@pytest.fixture(scope="session")
def server():
    settings = ServerSettings(api_keys=[API_KEY], max_sessions=8, max_output_tokens=24,
                              limits={"max_append_b64_bytes": 256 * 1024})
    srv = ServerThread(str(ROOT / "configs" / "voice-cpu.yaml"), settings).start()
    yield srv
    srv.stop()


def loopback_server(max_output_tokens: int, config: Path = ROOT / "configs" / "voice-cpu.yaml"
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


@pytest.fixture(scope="module")
def fault_server():
    srv = ServerThread(str(ROOT / "tests" / "server" / "fault-pipeline.yaml"),
                       ServerSettings(api_keys=[API_KEY])).start()
    yield srv
    srv.stop()
