"""The OpenAI-shaped SIP control plane on the real server, driven by the
official ``openai`` SDK: the signed ``realtime.call.incoming`` webhook
(``client.webhooks.unwrap`` verifies it), ``client.realtime.calls.accept /
reject / refer / hangup`` and ``client.realtime.connect(call_id=...)``.

The SIP transport itself is another branch's: the calls here are registered
by :class:`LinelessCall`, a call whose media side is absent (a unit test of
the API layer: its session and runner are real, on the server's pipeline;
its line only records what it was asked to do)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest

from voice_server.call_control import END_CALL, TRANSFER, TransferOutcome
from voice_server.call_registry import CallState
from voice_server.call_webhook import CallWebhook
from voice_server.runner import SessionRunner
from voice_server.session import Session
from voice_server.session.config import apply_session_update
from voice_server.webhook_signing import new_secret
from .conftest import API_KEY

pytestmark = pytest.mark.timeout(90)


class LinelessCall:
    """A registered SIP call with no media side (module docstring)."""

    def __init__(self, server, headers=(("From", "<sip:alice@example.test>"),)) -> None:
        self.server = server
        self.call_id = "rtc_" + secrets.token_hex(8)
        self.sip_headers = list(headers)
        self.state = CallState.PENDING
        self.runner = None
        self.call_control = None
        self.rejected: int | None = None
        self.transfers: list[str] = []
        self.hung_up: str | None = None

    async def accept(self, session_config: dict) -> None:
        s = self.server.app.state.settings
        config = apply_session_update(s.session_defaults(), session_config, s.limits)
        session = Session("sess_" + secrets.token_hex(8), config, limits=s.limits)

        async def nowhere(ev: dict) -> None:   # no line: the sideband is the only client
            return None
        self.runner = SessionRunner(session, self.server.pipeline, nowhere, transport="sip")
        await self.runner.start()
        self.call_control = self
        self.state = CallState.LIVE

    async def reject(self, status_code: int) -> None:
        self.rejected = status_code
        self.state = CallState.ENDED

    # CallControl
    def actions(self) -> frozenset[str]:
        return frozenset({END_CALL, TRANSFER})

    async def hang_up(self, reason: str) -> None:
        self.hung_up = reason
        self.state = CallState.ENDED
        await self.runner.close()

    async def transfer(self, target_uri: str) -> TransferOutcome:
        self.transfers.append(target_uri)
        return TransferOutcome("failed", 486, "busy") if "busy" in target_uri \
            else TransferOutcome("completed", 200)

    async def send_dtmf(self, digits: str) -> bool:
        return False


class Receiver:
    """The operator's webhook URL: a plain HTTP server on 127.0.0.1."""

    def __init__(self) -> None:
        self.got: list[tuple[bytes, dict]] = []
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                got.append((body, {k.lower(): v for k, v in self.headers.items()}))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _client(server) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key=API_KEY, base_url=f"http://127.0.0.1:{server.port}/v1",
                              max_retries=0)


async def _until(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def test_webhook_accept_sideband_refer_and_hangup_with_the_openai_sdk(server):
    registry = server.app.state.sip_calls
    secret = new_secret()
    hook = Receiver()
    old = registry.notify
    registry.notify = CallWebhook(hook.url, secret)
    client = _client(server)
    call = LinelessCall(server)
    try:
        server.call(registry.incoming, call)
        await _until(lambda: hook.got, 10, "no webhook")
        body, headers = hook.got[0]
        event = client.webhooks.unwrap(body, headers, secret=secret)   # verifies the signature
        assert event.type == "realtime.call.incoming"
        assert event.data.call_id == call.call_id
        assert [(h.name, h.value) for h in event.data.sip_headers] == call.sip_headers
        with pytest.raises(openai.InvalidWebhookSignatureError):
            client.webhooks.unwrap(body, headers, secret=new_secret())
        # a bad session config is the request's 400, and the call still rings
        with pytest.raises(openai.BadRequestError) as e:
            await client.realtime.calls.accept(call.call_id, type="realtime",
                                               instructions=5)
        assert e.value.body["param"] == "instructions"
        assert call.state is CallState.PENDING
        await client.realtime.calls.accept(call.call_id, type="realtime",
                                           instructions="You answer the phone for Acme.")
        assert call.state is CallState.LIVE
        assert call.runner.session.settings.instructions == "You answer the phone for Acme."
        with pytest.raises(openai.ConflictError):
            await client.realtime.calls.accept(call.call_id, type="realtime")
        # the sideband: the session's events, and session.update reaches the live call
        async with client.realtime.connect(call_id=call.call_id) as conn:
            first = await conn.recv()
            assert first.type == "session.created"
            assert first.session.instructions == "You answer the phone for Acme."
            await conn.session.update(session={"type": "realtime", "instructions": "Be brief."})
            ev = await conn.recv()
            assert ev.type == "session.updated" and ev.session.instructions == "Be brief."
            assert call.runner.session.settings.instructions == "Be brief."
            # refer: the call's CallControl.transfer, its outcome in the answer
            r = await client.realtime.calls.with_raw_response.refer(
                call.call_id, target_uri="sip:busy@pbx.example")
            assert r.status_code == 200 and json.loads(r.content) == {
                "status": "failed", "sip_status": 486, "detail": "busy"}
            await client.realtime.calls.refer(call.call_id, target_uri="tel:+15550100")
            assert call.transfers == ["sip:busy@pbx.example", "tel:+15550100"]
            with pytest.raises(openai.BadRequestError) as e:
                await client.realtime.calls.refer(call.call_id, target_uri="https://x.example")
            assert e.value.body["param"] == "target_uri"
            # hang up: the call ends and so does the sideband
            await client.realtime.calls.hangup(call.call_id)
            assert call.hung_up == "hangup requested"
            await asyncio.wait_for(_drain(conn), 10)
    finally:
        registry.notify = old
        server.call(registry.remove, call.call_id)
        hook.close()
        await client.close()


async def _drain(conn) -> None:
    """Read until the server closes the sideband."""
    with contextlib.suppress(Exception):
        async for _ in conn:
            pass


async def test_without_a_webhook_calls_are_answered_with_the_defaults(server):
    registry = server.app.state.sip_calls
    assert registry.notify is None
    call = LinelessCall(server)
    client = _client(server)
    try:
        server.call(registry.incoming, call)
        await _until(lambda: call.state is CallState.LIVE, 10, "not answered")
        assert call.runner.session.settings.instructions == \
            server.app.state.settings.session_defaults().instructions
        await client.realtime.calls.hangup(call.call_id)
        assert call.hung_up
    finally:
        server.call(registry.remove, call.call_id)
        await client.close()


async def test_reject_and_every_bad_request(server):
    registry = server.app.state.sip_calls
    client = _client(server)
    call = LinelessCall(server)
    old = registry.notify
    registry.notify = _silent
    try:
        server.call(registry.incoming, call)
        with pytest.raises(openai.BadRequestError) as e:
            await client.realtime.calls.reject(call.call_id, status_code=200)
        assert e.value.body["param"] == "status_code"
        with pytest.raises(openai.ConflictError):
            await client.realtime.calls.refer(call.call_id, target_uri="tel:+15550100")
        await client.realtime.calls.reject(call.call_id, status_code=486)
        assert call.rejected == 486
        for action in (lambda: client.realtime.calls.reject(call.call_id),
                       lambda: client.realtime.calls.accept(call.call_id, type="realtime"),
                       lambda: client.realtime.calls.refer("rtc_nope", target_uri="tel:1")):
            with pytest.raises(openai.NotFoundError):
                await action()
        # a wrong key: 401; a sideband to an unknown call: refused before the upgrade
        anon = openai.AsyncOpenAI(api_key="sk-wrong",
                                  base_url=f"http://127.0.0.1:{server.port}/v1", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            await anon.realtime.calls.accept(call.call_id, type="realtime")
        await anon.close()
        # /hangup of an id that is no SIP call is the WebRTC calls' (404 here)
        with pytest.raises(openai.NotFoundError):
            await client.realtime.calls.hangup("rtc_nope")
        with pytest.raises(Exception) as e:
            async with client.realtime.connect(call_id="rtc_nope") as conn:
                await conn.recv()
        assert "404" in str(e.value)
        # a raw body that is not JSON
        import httpx
        async with httpx.AsyncClient() as h:
            r = await h.post(f"http://127.0.0.1:{server.port}/v1/realtime/calls/x/accept",
                             content=b"{", headers={"Authorization": f"Bearer {API_KEY}"})
            assert r.status_code == 404   # unknown call first
    finally:
        registry.notify = old
        server.call(registry.remove, call.call_id)
        await client.close()


async def _silent(call) -> None:
    """A webhook that tells nobody: the call rings until the test acts."""
    return None
