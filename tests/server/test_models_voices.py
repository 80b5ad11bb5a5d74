"""GET /v1/models lists every shipped voice (engine, language, gender) and the
voice each language gets, on the speech models (the ``voice_agent`` extension)."""

from __future__ import annotations

from pathlib import Path

import httpx
from starlette.applications import Starlette

from runtime.config import load_config
from voice_server.transports.http.routes import http_routes

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
    assert ext["languages"]["es"] == "es" and "alloy" in ext["openai_voices"]
