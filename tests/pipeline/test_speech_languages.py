"""/v1/audio/speech on the real pipeline (the speak stage in its own process)
speaks other languages: ``language`` (an extension) picks the language's voice,
a named voice of another engine is spoken by that engine, bad values are 400s.

The speech is synthetic (espeak-ng, Kokoro); Whisper base reads it back.
"""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest
import soxr
from starlette.applications import Starlette

from runtime.models.listen.whisper_asr import WhisperASR
from voice_server.testing.language_wer import language_wer
from voice_server.transports.http.routes import http_routes

# the pipeline fixture (conftest.py) lives in the module's event loop
pytestmark = pytest.mark.asyncio(loop_scope="module")

SPANISH = "Gracias por llamar. El paquete llega el jueves por la mañana."
JAPANESE = "今日はとてもいい天気ですね。"


@pytest.fixture
def client(pipeline):
    app = Starlette(routes=http_routes(pipeline))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test", timeout=60)


def heard(r: httpx.Response, language: str) -> str:
    rate = int(r.headers["x-sample-rate"])
    x = np.frombuffer(r.content, dtype="<i2").astype(np.float32) / 32768
    return WhisperASR(model="base", language=language).transcribe([soxr.resample(x, rate, 16000)])[0]


async def test_language_and_voices_of_other_engines(client):
    async with client:
        r = await client.post("/v1/audio/speech", json={"input": SPANISH, "language": "es",
                                                         "response_format": "pcm"})
        assert r.status_code == 200, r.text
        text = await asyncio.to_thread(heard, r, "es")   # off the loop: the pipeline's heartbeats live there
        assert language_wer([(SPANISH, text)], "es") <= 0.2, text       # Kokoro's kumo-es
        r = await client.post("/v1/audio/speech", json={"input": SPANISH, "voice": "es",
                                                         "response_format": "pcm"})
        assert r.status_code == 200 and len(r.content) > 24000, r.text     # espeak-ng's own
        r = await client.post("/v1/audio/speech", json={"input": JAPANESE, "voice": "jf_alpha",
                                                         "response_format": "pcm"})
        assert r.status_code == 200, r.text
        text = await asyncio.to_thread(heard, r, "ja")
        assert language_wer([(JAPANESE, text)], "ja") <= 0.35, text


async def test_bad_language_or_voice_is_a_400(client):
    async with client:
        r = await client.post("/v1/audio/speech", json={"input": "Hola.", "language": "not a language"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "language", r.text
        r = await client.post("/v1/audio/speech", json={"input": "Hola.", "language": "es",
                                                         "voice": "nobody"})
        assert r.status_code == 400 and "nobody" in r.json()["error"]["message"], r.text
