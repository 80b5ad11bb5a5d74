"""Observability and shutdown: /metrics, the admin endpoints, JSON logs, and
the graceful drain on SIGTERM (a separate server process)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest
import websockets
from prometheus_client.parser import text_string_to_metric_families

from voice_server.admin import check_admin
from voice_server.logs import (JsonFormatter, TextFormatter, bind_ids, configure_logging,
                               reset_ids)
from voice_server.settings import ServerSettings

from voice_server.testing.audio import flite_pcm, silence, stream_realtime
from voice_server.testing.realtime_client import RTClient
from .conftest import API_KEY, ROOT
from voice_server.testing.response_status import answered

pytestmark = pytest.mark.timeout(120)


def _http(server) -> str:
    return f"http://127.0.0.1:{server.port}"


async def scrape(server) -> dict:
    """{(name, frozenset(labels)): value} of every sample."""
    async with httpx.AsyncClient() as h:
        r = await h.get(_http(server) + "/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    out = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def val(m: dict, name: str, **labels) -> float:
    return m.get((name, frozenset(labels.items())), 0.0)


def total(m: dict, name: str, **labels) -> float:
    """Sum over every label set that includes ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in m.items() if n == name and want <= ls)


# --------------------------------------------------------------------------- /metrics
async def test_metrics_stage_gauges_and_turn_histograms(server):
    before = await scrape(server)
    for stage in ("listen", "think", "speak"):
        key = ("voice_stage_held_requests", frozenset({"stage": stage, "group": stage,
                                                       "replica": "0"}.items()))
        assert key in before, f"no held gauge for {stage}"
        assert ("voice_stage_batch_size_bucket", frozenset({"stage": stage, "group": stage, "replica": "0",
                                                            "le": "+Inf"}.items())) in before, stage
    for t in ("websocket", "webrtc", "twilio"):
        assert ("voice_active_sessions", frozenset({"transport": t}.items())) in before
    assert ("voice_shm_lent_bytes", frozenset({"owner": "coordinator"}.items())) in before
    assert ("voice_request_errors_total", frozenset({"code": "timeout"}.items())) in before
    assert ("voice_process_restarts_total", frozenset({"group": "think",
                                                       "replica": "0"}.items())) in before

    c = await RTClient.connect(server.url)
    try:
        await c.wait("session.created")
        during = await scrape(server)
        assert val(during, "voice_active_sessions", transport="websocket") >= 1
        assert val(during, "voice_max_sessions") == 8
        assert val(during, "voice_session_places") >= 1
        assert val(during, "voice_load") >= val(during, "voice_session_places") / 8
        for reading in ("transcript", "early"):
            assert ("voice_recognition_queue", frozenset({"reading": reading}.items())) in during
        assert ("voice_recognition_busy_fraction", frozenset()) in during
        assert ("voice_think_queue", frozenset({"state": "waiting"}.items())) in during
        assert ("voice_stage_busy_fraction", frozenset({"stage": "think", "group": "think",
                                                        "replica": "0"}.items())) in during
        # a spoken turn: end of utterance, first token, first audio (from end of speech)
        n = len(c.events)
        await stream_realtime(c.send, np.concatenate([silence(200),
                                                      flite_pcm("what is the capital of france"),
                                                      silence(900)]))
        feeder = asyncio.ensure_future(_silence_forever(c))
        try:
            done = await c.wait("response.done", timeout=60, start=n)
        finally:
            feeder.cancel()
            with contextlib.suppress(BaseException):
                await feeder
        assert answered(done["response"]), done
        # a text turn created by the client, with audio out
        n = len(c.events)
        await c.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "Say hello."}]}})
        await c.send({"type": "response.create", "response": {"output_modalities": ["audio"]}})
        done = await c.wait("response.done", timeout=60, start=n)
        assert answered(done["response"]), done
    finally:
        await c.close()
    deadline = time.monotonic() + 5  # stage stats arrive five times a second
    while True:
        after = await scrape(server)
        if all(total(after, "voice_stage_steps_total", stage=s) > total(before, "voice_stage_steps_total", stage=s)
               for s in ("listen", "think", "speak")) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)

    def grew(name, **labels):
        return val(after, name, **labels) - val(before, name, **labels)

    assert grew("voice_turn_end_of_utterance_seconds_count") >= 1
    assert grew("voice_turn_first_token_seconds_count") >= 2
    assert grew("voice_turn_first_audio_seconds_count", trigger="speech") >= 1
    assert grew("voice_turn_first_audio_seconds_count", trigger="client") >= 1
    assert grew("voice_responses_total", status="completed") + \
        grew("voice_responses_total", status="incomplete") >= 2   # incomplete: the budget cut it
    assert grew("voice_sessions_total", transport="websocket") >= 1
    assert val(after, "voice_turn_first_token_seconds_sum") > 0
    for stage in ("listen", "think", "speak"):
        assert total(after, "voice_stage_steps_total", stage=stage) > \
            total(before, "voice_stage_steps_total", stage=stage), stage
        assert total(after, "voice_stage_batch_size_count", stage=stage) > 0
        assert total(after, "voice_stage_step_seconds_total", stage=stage) > 0
    assert grew("voice_requests_total", outcome="completed") >= 2


async def _silence_forever(c: RTClient) -> None:
    while True:
        await stream_realtime(c.send, silence(200))


def test_the_load_figure_is_the_fullest_part():
    """voice_server.load reads a snapshot: the busiest replica counts, queues add up."""
    from voice_server.load import load_of

    def proc(stages):
        return {"stages": stages}

    snap = {"processes": {
        "listen/0": proc({"listen": {"executor": {"asr": {
            "queued": 2, "queued_early": 1, "busy_fraction": 0.9, "early_late": 3}}}}),
        "listen/1": proc({"listen": {"executor": {"asr": {"busy_fraction": 0.2, "early_busy": 1}}}}),
        "think/0": proc({"think": {"waiting": 3, "running": 4, "busy_fraction": 0.5}})}}
    load = load_of(snap, places=4, max_sessions=8)
    assert (load.recognition_queued, load.recognition_queued_early, load.early_dropped) == (2, 1, 4)
    assert (load.think_waiting, load.think_running) == (3, 4)
    assert load.figure == 0.9
    assert load_of(snap, places=8, max_sessions=8).figure == 1.0
    assert load_of({}, places=2, max_sessions=8).to_dict()["figure"] == 0.25


def test_turn_timer_barge_in_and_end_of_utterance():
    from voice_server import metrics as m

    def count(name, **labels):
        return m.REGISTRY.get_sample_value(name + "_count", labels) or 0.0

    barge, eou, audio = ("voice_turn_barge_in_seconds", "voice_turn_end_of_utterance_seconds",
                         "voice_turn_first_audio_seconds")
    b0, e0, a0 = count(barge), count(eou), count(audio, trigger="speech")
    t = m.TurnTimer()
    t.listen_event({"type": "speech_started"})
    t.listen_event({"type": "speech_stopped"})
    t.listen_event({"type": "final", "text": "hi"})
    t.response_started("resp_1")
    t.chunk("resp_1", "think")
    t.event_sent({"type": "response.output_audio.delta", "response_id": "resp_1"})
    t.event_sent({"type": "response.output_audio.delta", "response_id": "resp_1"})  # not again
    t.listen_event({"type": "speech_started"})  # the user talks over the reply
    t.event_sent({"type": "response.done", "response": {
        "id": "resp_1", "status": "cancelled",
        "status_details": {"type": "cancelled", "reason": "turn_detected"}}})
    assert count(barge) == b0 + 1
    assert count(eou) == e0 + 1
    assert count(audio, trigger="speech") == a0 + 1
    assert not t.responses
    # a cancel that is not a barge-in is not counted as one
    t.response_started("resp_2")
    t.event_sent({"type": "response.done", "response": {
        "id": "resp_2", "status": "cancelled",
        "status_details": {"type": "cancelled", "reason": "client_cancelled"}}})
    assert count(barge) == b0 + 1


# --------------------------------------------------------------------------- admin endpoints
async def test_admin_endpoints(server):
    base = _http(server)
    c = await RTClient.connect(server.url)
    try:
        sid = (await c.wait("session.created"))["session"]["id"]
        async with httpx.AsyncClient(base_url=base) as h:
            # no admin key configured, bound to 127.0.0.1: allowed
            r = await h.get("/v1/sessions")
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["object"] == "list" and body["draining"] is False
            mine = [s for s in body["data"] if s["id"] == sid]
            assert len(mine) == 1
            s = mine[0]
            assert s["transport"] == "websocket" and s["state"] == "idle"
            assert s["active_response_id"] is None
            assert abs(s["started_at"] - time.time()) < 60
            listen = [int(rid) for rid, kind in s["live_requests"].items() if kind == "listen"]
            assert listen, s
            r = await h.get(f"/v1/requests/{listen[0]}")
            assert r.status_code == 200, r.text
            st = r.json()
            assert st["request_id"] == listen[0] and st["state"] == "running"
            assert st["route"] == ["listen"] and "listen" in st["stages"]
            assert isinstance(st["held_by"], list)
            assert (await h.get("/v1/requests/1")).status_code == 404
            rt = (await h.get("/v1/runtime")).json()
            assert rt["sessions"] >= 1 and rt["live_requests"] >= 1, rt
            assert set(rt["processes"]) >= {"listen/0", "think/0", "speak/0"}, rt
            assert all(p["pid"] > 0 and p["ready"] for p in rt["processes"].values()), rt
            assert rt["shm_prefix"] and isinstance(rt["shm_segments"], int), rt
            load = rt["load"]
            assert load["sessions"] >= 1 and load["max_sessions"] == 8, load
            assert 0.0 <= load["recognition_busy"] <= 1.0 and 0.0 <= load["think_busy"] <= 1.0
            assert load["figure"] >= load["sessions"] / 8, load
            assert load["recognition_queued"] >= 0 and load["think_waiting"] >= 0, load
            assert (await h.get("/v1/requests/abc")).status_code == 400

            # a response in flight shows up as the session's active response
            await c.send({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "Count from one to twenty."}]}})
            await c.send({"type": "response.create", "response": {"output_modalities": ["text"]}})
            created = await c.wait("response.created")
            s = next(x for x in (await h.get("/v1/sessions")).json()["data"] if x["id"] == sid)
            if s["active_response_id"] is not None:  # it may already be done on a fast box
                assert s["active_response_id"] == created["response"]["id"]
            await c.wait("response.done", timeout=60)

            # admin keys configured: 401 without / with a wrong key, 403 for an API key
            server.settings.admin_keys = ["adm-secret-1"]
            try:
                r = await h.get("/v1/sessions")
                assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
                r = await h.get("/v1/sessions", headers={"Authorization": "Bearer nope"})
                assert r.status_code == 401
                assert (await h.get("/v1/runtime")).status_code == 401
                r = await h.get(f"/v1/requests/{listen[0]}",
                                headers={"Authorization": f"Bearer {API_KEY}"})
                assert r.status_code == 403
                r = await h.get("/v1/sessions", headers={"Authorization": "Bearer adm-secret-1"})
                assert r.status_code == 200 and any(x["id"] == sid for x in r.json()["data"])
                r = await h.get(f"/v1/requests/{listen[0]}",
                                headers={"Authorization": "Bearer adm-secret-1"})
                assert r.status_code == 200
            finally:
                server.settings.admin_keys = []
    finally:
        await c.close()


async def test_a_closed_session_leaves_no_cells_in_the_think_stage(server):
    """The think stage keeps a finished reply's cells for the conversation's
    next turn; when the session closes they go (FORGET), so that no later
    session's steps attend over them."""
    async def think() -> dict:
        async with httpx.AsyncClient(base_url=_http(server)) as h:
            rt = (await h.get("/v1/runtime")).json()
        return rt["processes"]["think/0"]["stages"]["think"]["executor"]

    c = await RTClient.connect(server.url)
    try:
        await c.wait("session.created")
        await c.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "Say hello."}]}})
        await c.send({"type": "response.create", "response": {"output_modalities": ["text"]}})
        done = await c.wait("response.done", timeout=60)
        assert answered(done["response"]), done
        # the snapshot comes with the stage's heartbeat: wait for the reply's release
        deadline = time.monotonic() + 15
        while ((before := await think())["active"] or not before["kept_sequences"]) \
                and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert before["active"] == 0 and before["kept_sequences"] >= 1, before
    finally:
        await c.close()
    deadline = time.monotonic() + 15
    while (after := await think())["kept_forgotten"] == before["kept_forgotten"] \
            and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert after["kept_forgotten"] > before["kept_forgotten"], after
    assert after["kv_cells_kept"] < before["kv_cells_kept"], (before, after)


def _request(server_addr: tuple, headers: dict | None = None):
    from starlette.requests import Request
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return Request({"type": "http", "method": "GET", "path": "/v1/sessions", "headers": raw,
                    "server": server_addr, "client": ("203.0.113.9", 5555), "query_string": b""})


def test_admin_refused_off_loopback_without_admin_key():
    s = ServerSettings(api_keys=["k"])
    r = check_admin(_request(("10.1.2.3", 8000)), s)
    assert r is not None and r.status_code == 403
    r = check_admin(_request(("0.0.0.0", 8000), {"Authorization": "Bearer k"}), s)
    assert r is not None and r.status_code == 403
    assert check_admin(_request(("127.0.0.1", 8000)), s) is None
    assert check_admin(_request(("::1", 8000)), s) is None
    s = ServerSettings.from_sources({}, env={"VOICE_AGENT_ADMIN_KEYS": " a1 , a2 "})
    assert s.admin_keys == ["a1", "a2"]
    assert check_admin(_request(("10.1.2.3", 8000), {"Authorization": "Bearer a2"}), s) is None
    assert check_admin(_request(("127.0.0.1", 8000)), s).status_code == 401


# --------------------------------------------------------------------------- logs
def test_json_log_lines_carry_ids():
    rec = logging.LogRecord("voice_server.runner", logging.WARNING, __file__, 1,
                            "send failed: %s", ("boom",), None)
    rec.extra_field = 7
    tok = bind_ids(session_id="sess_abc", request_id=42)
    try:
        line = JsonFormatter().format(rec)
        text = TextFormatter().format(rec)
    finally:
        reset_ids(tok)
    d = json.loads(line)
    assert d["msg"] == "send failed: boom" and d["level"] == "warning"
    assert d["logger"] == "voice_server.runner"
    assert d["session_id"] == "sess_abc" and d["request_id"] == 42
    assert d["extra_field"] == 7 and d["ts"].endswith("Z")
    assert text == "WARNING voice_server.runner: send failed: boom [session=sess_abc request=42]"
    # outside the context: no ids; exceptions ride along
    try:
        raise ValueError("bad")
    except ValueError:
        rec2 = logging.LogRecord("x", logging.ERROR, __file__, 1, "oops", None, sys.exc_info())
    d2 = json.loads(JsonFormatter().format(rec2))
    assert "session_id" not in d2 and "request_id" not in d2
    assert "ValueError: bad" in d2["exc"]
    # configure_logging installs it on the root logger
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    buf = io.StringIO()
    try:
        configure_logging("info", json_lines=True, stream=buf)
        logging.getLogger("voice_server.test").info("hello", extra={"session_id": "sess_x"})
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    d3 = json.loads(buf.getvalue().strip().splitlines()[-1])
    assert d3["msg"] == "hello" and d3["session_id"] == "sess_x"


# --------------------------------------------------------------------------- drain
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_token(proc: psutil.Process) -> str | None:
    """The pipeline's run token, from the ipc socket directory va-<token>-* it listens in."""
    for conn in proc.net_connections(kind="unix"):
        path = conn.laddr or ""
        name = Path(path).parent.name
        if name.startswith("va-"):
            return name.split("-")[1]
    return None


async def test_graceful_drain_on_sigterm(tmp_path):
    port = _free_port()
    grace = 3.0
    env = dict(os.environ, PYTHONPATH=str(ROOT), VOICE_AGENT_DRAIN_GRACE_S=str(grace),
               VOICE_AGENT_LOG_JSON="1")
    env.pop("VOICE_AGENT_API_KEYS", None)
    err = open(tmp_path / "server.err", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "voice_server.cli", "serve", "--config",
                             str(ROOT / "tests" / "server" / "drain-pipeline.yaml"),
                             "--port", str(port), "--log-level", "info"],
                            cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
        assert "voice-agent ready" in line, (line, (tmp_path / "server.err").read_text())
        ps = psutil.Process(proc.pid)
        children = ps.children(recursive=True)
        assert children, "no stage processes"
        token = _run_token(ps)
        assert token, "cannot find the run's socket directory"
        url = f"ws://127.0.0.1:{port}/v1/realtime"

        long_c = await RTClient.connect(url, key=None)   # a turn that outlives the grace
        short_c = await RTClient.connect(url, key=None)  # a turn that ends inside it
        idle_c = await RTClient.connect(url, key=None)   # no turn at all
        for c in (long_c, short_c, idle_c):
            await c.wait("session.created")

        async def start(c, words):
            await c.send({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": f"words={words}"}]}})
            await c.send({"type": "response.create",
                          "response": {"output_modalities": ["text"]}})
            await c.wait("response.output_text.delta", timeout=20)

        await start(long_c, 2000)  # 20 ms a word: 40 s
        await start(short_c, 60)   # about 1.2 s
        t_sig = time.monotonic()
        proc.send_signal(signal.SIGTERM)

        for c in (long_c, short_c, idle_c):
            ev = await c.wait("error", lambda e: e["error"].get("code") == "server_shutting_down",
                              timeout=5)
            assert ev["error"]["type"] == "server_error"
        # no new sessions or requests while draining
        with pytest.raises(websockets.exceptions.InvalidStatus) as info:
            await websockets.connect(url)
        assert info.value.response.status_code == 503
        async with httpx.AsyncClient() as h:
            r = await h.get(f"http://127.0.0.1:{port}/health")
            assert r.status_code == 503 and r.json()["error"]["code"] == "server_shutting_down"
            # a balancer stops sending calls; the orchestrator must not kill it before the drain ends
            assert (await h.get(f"http://127.0.0.1:{port}/health/ready")).status_code == 503
            r = await h.get(f"http://127.0.0.1:{port}/health/live")
            assert r.status_code == 200 and r.json()["status"] == "live", r.text

        short_done = await short_c.wait("response.done", timeout=grace + 2)
        assert answered(short_done["response"])
        assert time.monotonic() - t_sig < grace
        long_done = await long_c.wait("response.done", timeout=grace + 5)
        assert long_done["response"]["status"] == "cancelled"
        assert long_done["response"]["status_details"]["reason"] == "server_shutting_down"
        assert time.monotonic() - t_sig >= grace - 0.5

        for c in (long_c, short_c, idle_c):
            for _ in range(100):
                if c.closed is not None:
                    break
                await asyncio.sleep(0.05)
            assert c.ws.close_code == 1001, (c.ws.close_code, c.types()[-5:])

        code = await asyncio.wait_for(asyncio.to_thread(proc.wait), grace + 10)
        elapsed = time.monotonic() - t_sig
        assert code == 0, (tmp_path / "server.err").read_text()[-3000:]
        assert elapsed < grace + 8, elapsed
        # nothing left: stage processes, shared memory, socket directory
        gone, alive = psutil.wait_procs(children, timeout=3)
        assert not alive, alive
        assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"va-{token}-")]
        import tempfile
        assert not [n for n in os.listdir(tempfile.gettempdir())
                    if n.startswith(f"va-{token}-")]
        # the server logged JSON lines
        err.seek(0)
        lines = [ln for ln in err.read().splitlines() if ln.startswith("{")]
        assert any("draining" in json.loads(ln)["msg"] for ln in lines), lines[-5:]
        for c in (long_c, short_c, idle_c):
            await c.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        err.close()
