"""GET /v1/models lists every shipped voice (engine, language, gender) and the
voice each language gets, on the speech models (the ``voice_agent`` extension);
a session may choose any of them and nothing else."""

from __future__ import annotations

from pathlib import Path

import httpx
from starlette.applications import Starlette

from runtime.config import load_config
from voice_server.app import with_speak_voices
from voice_server.session import SessionSettings
from voice_server.session.config import apply_session_update
from voice_server.session.errors import ClientError
from voice_server.settings import ServerSettings
from voice_server.transports.http.routes import http_routes
from voice_server.transports.http.models import voice_listing

ROOT = Path(__file__).resolve().parents[2]


class _Configured:
    """What the routes read of a pipeline: its config (no stage is started here)."""

    def __init__(self, path: Path) -> None:
        self.cfg = load_config(path)


async def test_speech_models_list_voices_and_languages():
    app = Starlette(routes=http_routes(_Configured(ROOT / "configs" / "voice-cpu.yaml")))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        r = await c.get("/v1/models/tts-1")
    assert r.status_code == 200, r.text
    ext = r.json()["voice_agent"]
    by_name = {v["name"]: v for v in ext["voices"]}
    assert by_name["heart"] == {"name": "heart", "engine": "hibari", "language": "en", "gender": "female"}
    assert by_name["jm_kumo"]["engine"] == "kokoro" and by_name["es"]["language"] == "es"
    assert ext["languages"]["en"] == "heart" and ext["languages"]["ja"] == "jf_alpha"
    assert ext["languages"]["es"] == "kumo-es" and "alloy" in ext["openai_voices"]
    assert by_name["kumo-es"] == {"name": "kumo-es", "engine": "kokoro", "language": "es",
                                  "gender": "male"}


def test_a_session_may_choose_any_shipped_voice_and_no_other():
    """The session's voice check takes the speak stage's list (app.with_speak_voices):
    every shipped voice of every engine is accepted, an unknown name is an error event."""
    limits = with_speak_voices(ServerSettings(), _Configured(ROOT / "configs" / "voice-cpu.yaml")).limits
    st = SessionSettings()
    for name in ("jf_nezumi", "es", "heart", "cedar"):
        st = apply_session_update(st, {"audio": {"output": {"voice": name}}}, limits)
        assert st.voice == name
    try:
        apply_session_update(st, {"audio": {"output": {"voice": "nobody"}}}, limits)
    except ClientError as err:
        assert err.param == "session.audio.output.voice" and "jf_alpha" in str(err)
    else:
        raise AssertionError("an unknown voice was accepted")


def test_the_listing_says_what_an_operators_language_voices_give():
    listing = voice_listing("hibari", "heart", {"es": "es"})
    assert listing["languages"]["es"] == "es" and listing["languages"]["fr"] == "kumo-fr"
