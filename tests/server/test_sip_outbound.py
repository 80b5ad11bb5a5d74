"""Calls the agent places (``POST /v1/sip/calls``): SIPp is the callee on
127.0.0.1, a real RTP peer its media.  Answered (the session starts, the
agent's voice reaches the callee; the agent hangs up through the API, the
callee gets the BYE), answered then hung up by the callee, busy (486),
nobody answering in time (CANCEL, 487), the operator hanging up while it
rings, and bad requests; nothing is left behind (sessions, ports, UAC calls).
Every attempt, answered or not, is in the call records (``GET /v1/calls``)
with its outcome, SIP status and target.

The endpoint is the one ``build_app`` makes when SIP is on, on the shared
test server's pipeline, with call records kept in a folder of the module's
own; the HTTP API is the real one (the dial routes and the records routes)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from starlette.applications import Starlette

from voice_server.records.settings import RecordSettings
from voice_server.records.store import CallStore
from voice_server.session_registry import registry_for
from voice_server.transports.calls_api import calls_routes

from voice_server.transports.sip.endpoint import SipEndpoint
from voice_server.transports.sip.dial_api import dial_routes
from voice_server.transports.sip.settings import SipSettings
from voice_server.testing.rtp_peer import RtpPeer
from voice_server.testing.sipp import SippCallee, free_port, sipp_available, udp_port_taken
from .conftest import API_KEY
from .test_sip import nothing_left, until

# `make setup` installs SIPp: missing is a failure, not a skip
assert sipp_available(), "SIPp (sip-tester) missing: run `make setup`"
pytestmark = [pytest.mark.timeout(180)]


@contextlib.contextmanager
def dial_endpoint(server, rtp_ports: tuple[int, int], records: Path) -> Iterator[tuple]:
    """A started SipEndpoint on the shared server, the call records kept in
    ``records`` while it runs, and an ASGI app of the dial API and the
    records API bound to it (the app's own routes)."""
    settings = server.app.state.settings.model_copy(update={
        "sip": SipSettings(enabled=True, port=free_port(), rtp_ports=rtp_ports)})
    reg = registry_for(server.pipeline)
    assert reg.records is None, "another test left call records on"
    store = CallStore(RecordSettings(enabled=True, folder=str(records)))
    server.call(setattr, reg, "records", store)
    ep = SipEndpoint(server.pipeline, settings)
    try:
        server.call(ep.start)
        yield ep, Starlette(routes=dial_routes(lambda: ep, settings)
                            + calls_routes(server.pipeline, settings))
    finally:
        server.call(ep.close)
        server.call(setattr, reg, "records", None)
        store.close()


@pytest.fixture(scope="module")
def dialer(server, tmp_path_factory):
    with dial_endpoint(server, (34300, 34338), tmp_path_factory.mktemp("records")) as made:
        yield made


def api(server, app) -> httpx.AsyncClient:
    """The dial API, run on the server's own loop (where the endpoint lives)."""
    class OnServerLoop(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request):
            inner = httpx.ASGITransport(app=app)
            return await server.acall(inner.handle_async_request, request, timeout=60)
    return httpx.AsyncClient(transport=OnServerLoop(), base_url="http://sip.test",
                             headers={"Authorization": f"Bearer {API_KEY}"})


async def placed(client, call_id: str) -> dict:
    return (await client.get(f"/v1/sip/calls/{call_id}")).json()


async def record_of(client, call_id: str, status: str, timeout: float = 20.0) -> dict:
    """The call record of placed call ``call_id`` (``GET /v1/calls/{id}``)
    once it shows ``status`` (the store writes on its own thread)."""
    deadline = time.monotonic() + timeout
    while True:
        r = await client.get(f"/v1/calls/{call_id}")
        if r.status_code == 200 and (r.json()["outbound"] or {}).get("status") == status:
            return r.json()
        assert time.monotonic() < deadline, (status, r.status_code, r.text[:500])
        await asyncio.sleep(0.1)


async def test_answered_spoken_to_and_hung_up_by_the_agent(server, dialer):
    ep, app = dialer
    peer = await RtpPeer.open()
    callee_port = free_port()
    callee = asyncio.ensure_future(SippCallee(callee_port, peer.port).arun(90))
    await until(lambda: udp_port_taken(callee_port), 10, "SIPp listening")
    async with api(server, app) as client:
        try:
            r = await client.post("/v1/sip/calls", json={
                "to": f"sip:bob@127.0.0.1:{callee_port}", "session": {
                    "instructions": "Greet the person who answers in one short sentence."}})
            assert r.status_code == 201, r.text
            call_id = r.json()["id"]
            assert r.json()["status"] in ("dialing", "ringing")
            await until(lambda: ep.call(call_id) is not None, 20, "the answer")
            info = await placed(client, call_id)
            assert info["status"] == "answered" and info["sip_status"] == 200, info
            assert info["session_id"]
            call = ep.call(call_id)
            assert call.session.settings.instructions.startswith("Greet")
            # the agent speaks first: its voice reaches the callee's RTP
            await server.acall(call.runner.client_event, {"type": "response.create"})
            await until(lambda: peer.voiced_frames() > 10, 30, "the agent's voice")
            r = await client.post(f"/v1/sip/calls/{call_id}/hangup")
            assert r.status_code == 200, r.text
            result = await callee
            assert result.ok, result.errors or result.stderr     # it got our BYE
            await until(lambda: ep.placed_call(call_id).status == "ended", 10, "ended")
            assert (await client.post(f"/v1/sip/calls/{call_id}/hangup")).status_code == 409
            # the record: the session's, with the placed call's outcome
            rec = await record_of(client, call_id, "ended")
            assert rec["id"] == info["session_id"] and rec["transport"] == "sip", rec
            out = rec["outbound"]
            assert (out["id"], out["to"], out["sip_status"]) == (
                call_id, f"sip:bob@127.0.0.1:{callee_port}", 200), out
            assert out["answered_at"] and out["ended_at"] >= out["answered_at"]
            assert any(i.get("role") == "assistant" for i in rec["items"]), rec["items"]
            await nothing_left(server, ep)
            assert not ep.uac._calls
        finally:
            callee.cancel()
            peer.close()


@pytest.mark.parametrize("behaviour, outcome, sip_status", [
    ("busy", "busy", 486), ("ring", "no_answer", None)])
async def test_busy_and_no_answer(server, dialer, behaviour, outcome, sip_status):
    ep, app = dialer
    peer = await RtpPeer.open()
    callee_port = free_port()
    callee = asyncio.ensure_future(SippCallee(callee_port, peer.port, behaviour).arun(60))
    await until(lambda: udp_port_taken(callee_port), 10, "SIPp listening")
    async with api(server, app) as client:
        try:
            r = await client.post("/v1/sip/calls", json={
                "to": f"sip:bob@127.0.0.1:{callee_port}", "ring_timeout_s": 2})
            call_id = r.json()["id"]
            await until(lambda: ep.placed_call(call_id).finished, 30, "an outcome")
            info = await placed(client, call_id)
            assert info["status"] == outcome and info["sip_status"] == sip_status, info
            assert info["session_id"] is None
            # never a session, still a call record: its own, ended, with the outcome
            rec = await record_of(client, call_id, outcome)
            assert (rec["id"], rec["transport"], rec["state"], rec["item_count"]) == (
                call_id, "sip", "ended", 0), rec
            assert rec["outbound"]["sip_status"] == sip_status, rec
            assert rec["outbound"]["to"] == f"sip:bob@127.0.0.1:{callee_port}"
            listed = (await client.get("/v1/calls")).json()["data"]
            assert any(c["id"] == call_id and c["outbound"]["status"] == outcome for c in listed)
            result = await callee
            assert result.ok, result.errors or result.stderr
            await nothing_left(server, ep)
            assert not ep.uac._calls
        finally:
            callee.cancel()
            peer.close()


async def test_the_callee_hangs_up_and_the_operator_hangs_up_while_it_rings(server, dialer):
    ep, app = dialer
    peer = await RtpPeer.open()
    async with api(server, app) as client:
        try:
            port = free_port()
            callee = asyncio.ensure_future(SippCallee(port, peer.port, hang_up_ms=1500).arun(60))
            await until(lambda: udp_port_taken(port), 10, "SIPp listening")
            call_id = (await client.post("/v1/sip/calls", json={
                "to": f"sip:bob@127.0.0.1:{port}"})).json()["id"]
            result = await callee
            assert result.ok, result.errors or result.stderr
            await until(lambda: ep.placed_call(call_id).status == "ended", 20, "ended")
            await nothing_left(server, ep)
            port = free_port()
            callee = asyncio.ensure_future(SippCallee(port, peer.port, "ring").arun(60))
            await until(lambda: udp_port_taken(port), 10, "SIPp listening")
            call_id = (await client.post("/v1/sip/calls", json={
                "to": f"sip:bob@127.0.0.1:{port}", "ring_timeout_s": 60})).json()["id"]
            await until(lambda: ep.placed_call(call_id).status == "ringing", 20, "ringing")
            rec = await record_of(client, call_id, "ringing")   # kept as it goes
            assert rec["state"] == "live" and rec["outbound"]["ended_at"] is None, rec
            r = await client.post(f"/v1/sip/calls/{call_id}/hangup")
            assert r.status_code == 200, r.text
            result = await callee
            assert result.ok, result.errors or result.stderr   # CANCEL, 487
            assert (await placed(client, call_id))["status"] == "cancelled"
            rec = await record_of(client, call_id, "cancelled")
            assert rec["outbound"]["reason"] == "hung up before the answer", rec
            await nothing_left(server, ep)
        finally:
            peer.close()


async def test_bad_requests_get_clear_answers(server, dialer):
    _, app = dialer
    async with api(server, app) as client:
        for body, param in (({"to": "mailto:bob@example"}, "to"), ({}, "to"),
                            ({"to": "sip:bob@127.0.0.1", "ring_timeout_s": 0}, "ring_timeout_s"),
                            ({"to": "sip:bob@127.0.0.1", "session": {"instructions": 5}},
                             "session.instructions"),
                            ({"to": "sip:bob@127.0.0.1", "colour": "red"}, "colour")):
            r = await client.post("/v1/sip/calls", json=body)
            assert r.status_code == 400 and r.json()["error"]["param"] == param, (body, r.text)
        r = await client.post("/v1/sip/calls", content=b"{")
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
        assert (await client.get("/v1/sip/calls/sipout_nope")).status_code == 404
        # a tel: URI with no trunk to route it: the call fails with the reason
        call_id = (await client.post("/v1/sip/calls", json={"to": "tel:+15550100"})).json()["id"]
        await until(lambda: True, 1)
        info = await placed(client, call_id)
        assert info["status"] == "failed" and "outbound_proxy" in info["reason"], info
        rec = await record_of(client, call_id, "failed")
        assert "outbound_proxy" in rec["outbound"]["reason"] and rec["outbound"]["to"] == \
            "tel:+15550100", rec
        r = await client.post("/v1/sip/calls", json={"to": "sip:bob@127.0.0.1"},
                              headers={"Authorization": "Bearer nope"})
        assert r.status_code == 401


async def test_the_callee_holds_and_resumes(server, dialer):
    """The callee's re-INVITEs on a call we placed are answered as on a call
    we answered: ``sendonly`` -> ``recvonly`` (our RTP stops), ``inactive``
    -> ``inactive``, ``sendrecv`` resumes; the agent's voice reaches the
    callee again after the resume (SIPp checks each answer's direction)."""
    ep, app = dialer
    peer = await RtpPeer.open()
    port = free_port()
    callee = asyncio.ensure_future(SippCallee(port, peer.port, reinvites=(
        ("sendonly", "recvonly", 1500), ("sendrecv", "sendrecv", 300),
        ("inactive", "inactive", 1500), ("sendrecv", "sendrecv", 300))).arun(90))
    await until(lambda: udp_port_taken(port), 10, "SIPp listening")
    async with api(server, app) as client:
        try:
            call_id = (await client.post("/v1/sip/calls", json={
                "to": f"sip:bob@127.0.0.1:{port}"})).json()["id"]
            call = await until(lambda: ep.call(call_id), 20, "the answer")
            for _ in range(2):   # sendonly, then inactive
                await until(lambda: call.held, 20, "the hold")
                assert not call.media.sending and not call.finished
                await until(lambda: call.finished or (not call.held and call.media.sending),
                            20, "the resume")
            assert not call.finished, call.end_reason
            await server.acall(call.runner.client_event, {"type": "response.create"})
            await until(lambda: peer.voiced_frames() > 10, 30, "the agent's voice")
            assert (await client.post(f"/v1/sip/calls/{call_id}/hangup")).status_code == 200
            result = await callee
            assert result.ok, result.errors or result.stderr
            await until(lambda: ep.placed_call(call_id).status == "ended", 10, "ended")
            await nothing_left(server, ep)
        finally:
            callee.cancel()
            peer.close()
