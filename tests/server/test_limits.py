"""Operator limits, CORS, Origin allow-list and client secrets on the WebSocket,
against the shared real server (conftest ``server``).  Limits that a test
needs small are set by swapping the Realtime endpoint's settings for the
duration of the test (every new session reads them at connect time)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time

import httpx
import numpy as np
import pytest
import websockets

from voice_server.app import build_app
from voice_server.session_registry import registry_for
from voice_server.settings import ServerSettings

from voice_server.testing.realtime_client import RTClient
from .conftest import API_KEY
from .test_realtime_ws import text_turn
from voice_server.testing.response_status import answered
from voice_server.testing.waiting import until

pytestmark = pytest.mark.timeout(60)


@contextlib.contextmanager
def limited(server, limits: dict | None = None, **settings):
    """The settings of the session transports (WebSocket, WebRTC, Twilio)
    changed for the duration; yields the WebSocket's."""
    eps = [server.app.state.realtime, server.app.state.webrtc, server.app.state.twilio]
    olds = [ep.settings for ep in eps]
    for ep, old in zip(eps, olds):
        upd = dict(settings)
        if limits:
            upd["limits"] = old.limits.model_copy(update=limits)
        ep.settings = old.model_copy(update=upd)
    try:
        yield eps[0].settings
    finally:
        for ep, old in zip(eps, olds):
            ep.settings = old


def http_base(server) -> str:
    return f"http://127.0.0.1:{server.port}"


async def wait_closed(c: RTClient, timeout: float = 10.0):
    end = time.monotonic() + timeout
    while c.closed is None and time.monotonic() < end:
        await asyncio.sleep(0.05)
    assert c.closed is not None, c.types()
    return c.ws.close_code, c.ws.close_reason


@pytest.mark.parametrize("fragmented", [False, True])
async def test_ws_message_too_big_closes_1009(server, fragmented):
    """An oversized message (one frame, or fragments that add up): an
    ``error`` event says why, then the 1009 close."""
    limit = server.settings.ws_max_message_bytes
    c = await RTClient.connect(server.url)
    try:
        await c.wait("session.created")
        n = len(c.events)
        part = limit // 3 + 1
        big = iter(["x" * part] * 3) if fragmented else "x" * (limit + 1)
        with contextlib.suppress(websockets.exceptions.ConnectionClosed):
            await c.ws.send(big)
        code, reason = await wait_closed(c)
        assert code == 1009 and reason
        # the error event arrived before the close frame (the client read it first)
        errs = c.of_type("error", n)
        assert len(errs) == 1, c.types(n)
        err = errs[0]
        assert err["event_id"].startswith("event_")
        assert err["error"]["type"] == "invalid_request_error"
        assert err["error"]["code"] == "message_too_large"
        assert str(limit) in err["error"]["message"]
        assert err["error"]["param"] is None and err["error"]["event_id"] is None
    finally:
        await c.close()
    c = await RTClient.connect(server.url)  # the server is fine
    try:
        assert answered((await text_turn(c, "Say yes."))["response"])
    finally:
        await c.close()


async def test_append_too_large_and_buffered_input_full(server):
    with limited(server, {"max_buffered_input_s": 1.0}):
        c = await RTClient.connect(server.url)
    try:
        await c.wait("session.created")
        n = len(c.events)
        big = base64.b64encode(b"\0" * (server.settings.limits.max_append_b64_bytes)).decode()
        await c.send({"type": "input_audio_buffer.append", "audio": big, "event_id": "big"})
        err = await c.wait("error", start=n)
        assert err["error"]["code"] == "input_audio_too_large"
        assert err["error"]["event_id"] == "big"
        await c.send({"type": "session.update", "session": {"turn_detection": None}})
        await c.wait("session.updated")
        n = len(c.events)
        chunk = base64.b64encode(np.zeros(24000 // 2, "<i2").tobytes()).decode()  # 0.5 s
        for _ in range(3):
            await c.send({"type": "input_audio_buffer.append", "audio": chunk})
        err = await c.wait("error", start=n)
        assert err["error"]["code"] == "input_audio_buffer_full"
        await c.send({"type": "input_audio_buffer.clear"})
        await c.wait("input_audio_buffer.cleared")
        assert c.closed is None
    finally:
        await c.close()


async def test_idle_timeout_closes_session(server):
    with limited(server, {"idle_timeout_s": 0.6}):
        c = await RTClient.connect(server.url)
    try:
        await c.wait("session.created")
        err = await c.wait("error", timeout=5)
        assert err["error"]["code"] == "idle_timeout"
        code, reason = await wait_closed(c)
        assert code == 1000 and reason == "idle_timeout"
    finally:
        await c.close()


async def test_max_session_duration(server):
    with limited(server, {"max_session_s": 0.8}):
        c = await RTClient.connect(server.url)
    try:
        err = await c.wait("error", timeout=5)
        assert err["error"]["code"] == "session_expired"
        code, reason = await wait_closed(c)
        assert code == 1000 and reason == "session_expired"
    finally:
        await c.close()


async def test_rate_limit_error_and_session_stays_open(server):
    with limited(server, {"max_client_events_per_s": 5.0, "client_events_burst": 5}):
        c = await RTClient.connect(server.url)
    try:
        await c.wait("session.created")
        for i in range(12):
            await c.send({"type": "input_audio_buffer.clear", "event_id": f"e{i}"})
        await c.wait("error", lambda e: e["error"]["code"] == "rate_limit_exceeded")
        await asyncio.sleep(0.3)
        errs = [e["error"] for e in c.of_type("error")]
        assert errs and all(e["code"] == "rate_limit_exceeded" and
                            e["type"] == "invalid_request_error" for e in errs), errs
        assert 5 <= len(errs) <= 7  # 5 pass at once (+ refill while sending)
        assert len(c.of_type("input_audio_buffer.cleared")) == 12 - len(errs)
        await asyncio.sleep(1.0)  # tokens come back; the session is still open
        done = await text_turn(c, "Say yes.")
        assert answered(done["response"]) and c.closed is None
    finally:
        await c.close()


async def test_binary_frame_flood_is_rate_limited(server):
    """Binary frames are rejected by the transport but counted by the session
    core: a flood of them hits the same client-event rate limit."""
    with limited(server, {"max_client_events_per_s": 5.0, "client_events_burst": 5}):
        c = await RTClient.connect(server.url)
    try:
        await c.wait("session.created")
        n = len(c.events)
        for _ in range(12):
            await c.ws.send(b"\x00\x01binary")
        await c.wait("error", lambda e: e["error"]["code"] == "rate_limit_exceeded", start=n)
        await asyncio.sleep(0.3)
        codes = [e["error"]["code"] for e in c.of_type("error")]
        assert set(codes) == {"binary_frames_not_supported", "rate_limit_exceeded"}, codes
        assert len(codes) == 12
        assert 5 <= codes.count("rate_limit_exceeded") <= 7  # 5 pass at once (+ refill)
        assert codes[:5] == ["binary_frames_not_supported"] * 5
        await asyncio.sleep(1.0)  # tokens come back; the session is still open
        done = await text_turn(c, "Say yes.")
        assert answered(done["response"]) and c.closed is None
    finally:
        await c.close()


async def test_max_sessions_503_on_the_websocket_keeps_the_client_secret(server):
    """(Every transport together: test_webrtc.py.)"""
    keep = []
    # an earlier test's session may still be closing on a loaded machine: it
    # would take one of the two places (failed CI once)
    await until(lambda: registry_for(server.app.state.pipeline).places == 0, 15,
                "the earlier tests' sessions to close")
    try:
        with limited(server, max_sessions=2):
            for _ in range(2):
                keep.append(await RTClient.connect(server.url))
                await keep[-1].wait("session.created")
            with pytest.raises(websockets.exceptions.InvalidStatus) as ei:
                await RTClient.connect(server.url)
            assert ei.value.response.status_code == 503
            assert b"server_busy" in ei.value.response.body
            # a client secret is not burnt by the refusal
            async with httpx.AsyncClient(timeout=10) as h:
                r = await h.post(http_base(server) + "/v1/realtime/client_secrets",
                                 headers={"Authorization": f"Bearer {API_KEY}"}, json={})
            secret = r.json()["value"]
            with pytest.raises(websockets.exceptions.InvalidStatus) as ei:
                await RTClient.connect(server.url, key=secret)
            assert ei.value.response.status_code == 503
            await keep.pop().close()
            end = time.monotonic() + 5
            while len(server.app.state.realtime.runners) > 1 and time.monotonic() < end:
                await asyncio.sleep(0.05)
            c = await RTClient.connect(server.url, key=secret)
            keep.append(c)
            await c.wait("session.created")
    finally:
        for c in keep:
            await c.close()


async def test_ws_client_secret_single_use_expiring(server):
    url = http_base(server) + "/v1/realtime/client_secrets"
    auth = {"Authorization": f"Bearer {API_KEY}"}
    async with httpx.AsyncClient(timeout=10) as h:
        body = (await h.post(url, headers=auth, json={"session": {
            "type": "realtime", "instructions": "Be brief."}})).json()
        secret = body["value"]
        sub = (await h.post(url, headers=auth, json={})).json()["value"]
        old = (await h.post(url, headers=auth, json={})).json()["value"]
    c = await RTClient.connect(server.url, key=secret)  # Bearer ek_...
    try:
        created = await c.wait("session.created")
        assert created["session"]["id"] == body["session"]["id"]
        assert created["session"]["instructions"] == "Be brief."
    finally:
        await c.close()
    with pytest.raises(websockets.exceptions.InvalidStatus) as ei:  # second use
        await RTClient.connect(server.url, key=secret)
    assert ei.value.response.status_code == 401
    assert b"invalid_client_secret" in ei.value.response.body
    # browser form: subprotocol openai-insecure-api-key.ek_...
    ws = await websockets.connect(server.url, subprotocols=[
        "realtime", f"openai-insecure-api-key.{sub}"])
    try:
        assert ws.subprotocol == "realtime"
        import json
        assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "session.created"
    finally:
        await ws.close()
    store = server.app.state.client_secrets
    real = store.clock
    store.clock = lambda: real() + 61  # expired
    try:
        with pytest.raises(websockets.exceptions.InvalidStatus) as ei:
            await RTClient.connect(server.url, key=old)
        assert ei.value.response.status_code == 401
    finally:
        store.clock = real
    with pytest.raises(websockets.exceptions.InvalidStatus) as ei:  # made-up secret
        await RTClient.connect(server.url, key="ek_" + "A" * 32)
    assert ei.value.response.status_code == 401


async def test_ws_origin_allow_list(server):
    with limited(server, allowed_origins=["https://good.example"]):
        c = await RTClient.connect(server.url, origin="https://good.example")
        try:
            await c.wait("session.created")
        finally:
            await c.close()
        for origin in ("https://evil.example", f"http://127.0.0.1:{server.port}"):
            with pytest.raises(websockets.exceptions.InvalidStatus) as ei:  # key or not
                await RTClient.connect(server.url, origin=origin)
            assert ei.value.response.status_code == 403


async def test_origin_policy_holds_with_a_key_on_every_transport(server):
    """No allow-list configured: a browser page on another site is refused
    even when it holds a valid API key, on every transport; a page served by
    this server, and a client that sends no Origin, are let in."""
    evil = {"Origin": "https://evil.example", "Authorization": f"Bearer {API_KEY}"}
    base = http_base(server)
    with pytest.raises(websockets.exceptions.InvalidStatus) as ei:
        await RTClient.connect(server.url, origin="https://evil.example")
    assert ei.value.response.status_code == 403
    with pytest.raises(websockets.exceptions.InvalidStatus) as ei:
        await websockets.connect(f"ws://127.0.0.1:{server.port}/v1/telephony/twilio",
                                 additional_headers=evil)
    assert ei.value.response.status_code == 403
    async with httpx.AsyncClient(timeout=10) as h:
        r = await h.post(base + "/v1/realtime/calls", content="v=0\r\n",
                         headers={**evil, "Content-Type": "application/sdp"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
        r = await h.post(base + "/v1/realtime/client_secrets", headers=evil, json={})
        assert r.status_code == 403
        r = await h.get(base + "/v1/models", headers=evil)
        assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
        same = {"Origin": base, "Authorization": f"Bearer {API_KEY}"}
        assert (await h.get(base + "/v1/models", headers=same)).status_code == 200
        r = await h.post(base + "/v1/realtime/client_secrets", headers=same, json={})
        assert r.status_code == 200
    for origin in (base, f"http://localhost:{server.port}", None):
        c = await RTClient.connect(server.url, origin=origin)
        try:
            await c.wait("session.created")
        finally:
            await c.close()


async def test_cors_default_none_and_configured(server):
    base = http_base(server)
    async with httpx.AsyncClient(timeout=10) as h:
        r = await h.get(base + "/v1/models", headers={"Origin": "https://evil.example",
                                                      "Authorization": f"Bearer {API_KEY}"})
        assert r.status_code == 403  # the Origin policy (test above)
        assert "access-control-allow-origin" not in r.headers  # same-origin only
        r = await h.options(base + "/v1/models", headers={
            "Origin": "https://evil.example", "Access-Control-Request-Method": "GET"})
        assert "access-control-allow-origin" not in r.headers
    settings = ServerSettings(api_keys=[API_KEY], allowed_origins=["https://good.example/"])
    app = build_app(server.pipeline, settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://testserver") as h:
        r = await h.options("/v1/realtime/calls", headers={
            "Origin": "https://good.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "https://good.example"
        assert "POST" in r.headers["access-control-allow-methods"]
        assert "authorization" in r.headers["access-control-allow-headers"].lower()
        r = await h.options("/v1/realtime/calls", headers={
            "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
        assert r.status_code == 400
        assert "access-control-allow-origin" not in r.headers
        r = await h.get("/v1/models", headers={"Origin": "https://good.example",
                                               "Authorization": f"Bearer {API_KEY}"})
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "https://good.example"
        assert "location" in r.headers["access-control-expose-headers"].lower()
