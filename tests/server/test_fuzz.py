"""A bounded, seeded fuzzer against every transport of the shared real server.

Each test draws from ``random.Random(SEED)``: ``FUZZ_SEED=<int>`` reproduces a
run, ``FUZZ_SEED=random`` draws a fresh seed; a failure names the seed.

Passing means: the server never dies; every bad Realtime client event gets an
``error`` event of type ``invalid_request_error`` with the code predicted for
its class (matched by ``event_id`` when it can be read, else counted by code);
well-formed events get none; a text turn on a second session completes while
the fuzzing runs; the WebRTC and HTTP endpoints answer 4xx (never 5xx, never a
dropped connection); a Twilio stream ignores bad messages and still works;
afterwards the pipeline holds nothing (no live request, nothing held, no
shared memory lent) and the RSS of the server process and of each stage
process is back within ~10% of where it started.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import json
import os
import random
import time

import httpx
import psutil
import pytest
import websockets

from voice_server.testing.phone_clients import WIRES
from voice_server.testing.realtime_client import RTClient
from .conftest import API_KEY
from .test_realtime_ws import text_turn
from voice_server.testing.response_status import answered

pytestmark = pytest.mark.timeout(120)

_env = os.environ.get("FUZZ_SEED", "")
SEED = random.SystemRandom().randrange(2**31) if _env == "random" else int(_env or 1234567)
N_WS = 320          # Realtime events (bad and good) per run
N_RTC = 60          # WebRTC signalling requests
N_HTTP = 80         # HTTP API requests
N_TWILIO = 150      # Twilio Media Streams messages
N_PHONE = 40        # messages to each other phone provider (Telnyx, Plivo, Exotel, Vonage)
EVENTS_PER_S = 120  # under the default rate limit (200/s): no rate_limit_exceeded here
RSS_TOLERANCE = 0.10


@contextlib.contextmanager
def seeded(name: str):
    try:
        yield random.Random(f"{SEED}:{name}")
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise AssertionError(f"fuzz {name} failed; reproduce with FUZZ_SEED={SEED}: "
                             f"{type(exc).__name__}: {exc}") from exc


def junk(rng: random.Random, n: int | None = None) -> str:
    n = rng.randint(1, 40) if n is None else n
    return "".join(rng.choice("abcXYZ019 {}[]\":,\\\u00e9\u4e2d\n\t") for _ in range(n))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# ---------------------------------------------------------------- Realtime WS
def ws_case(rng: random.Random, i: int, max_append: int):
    """-> (frame: str | bytes, expected code | "" (any error) | None (no error), has_id)."""
    eid = f"fz{i}"
    k = rng.randrange(22)
    if k == 0:  # not JSON
        return rng.choice(["not json", "{", "{\"type\":", junk(rng), "\u0000\u0001",
                           "{'type': 'x'}", "[" * 5000]), "invalid_json", False
    if k == 1:  # JSON, not an object
        return json.dumps(rng.choice([[1, 2], 5, "str", None, True, [{"type": "x"}]])), \
            "invalid_event", False
    if k == 2:
        return b"\x00\x01" + rng.randbytes(rng.randint(0, 64)), "binary_frames_not_supported", \
            False
    if k == 3:
        return {"event_id": eid}, "missing_required_parameter", True
    if k == 4:
        return {"type": rng.choice([5, None and 1, [], {}, 1.5, True]) or 7, "event_id": eid}, \
            "invalid_type", True
    if k == 5:  # unknown type, sometimes huge
        t = rng.choice(["no.such.event", "response.creat", "", "x" * rng.randint(1, 200_000),
                        "session.created", junk(rng)])
        return {"type": t, "event_id": eid}, "invalid_value", True
    if k == 6:  # required field missing
        t = rng.choice(["input_audio_buffer.append", "conversation.item.create",
                        "conversation.item.truncate", "conversation.item.delete",
                        "conversation.item.retrieve", "session.update"])
        return {"type": t, "event_id": eid}, "missing_required_parameter", True
    if k == 7:  # wrong field types
        bad = rng.choice([123, [], None, 1.5, True])
        t, field = rng.choice([("input_audio_buffer.append", "audio"),
                               ("session.update", "session"),
                               ("conversation.item.create", "item"),
                               ("conversation.item.delete", "item_id")])
        return {"type": t, field: bad, "event_id": eid}, "invalid_type", True
    if k == 8:  # invalid base64
        s = rng.choice(["@@@", "abc", "A===", "####", junk(rng, 9) + "!"])
        return {"type": "input_audio_buffer.append", "audio": s, "event_id": eid}, \
            "invalid_base64", True
    if k == 9:  # odd PCM16 byte count
        n = 2 * rng.randint(0, 200) + 1
        return {"type": "input_audio_buffer.append", "audio": b64(bytes(n)), "event_id": eid}, \
            "invalid_audio_length", True
    if k == 10:  # append above the limit
        return {"type": "input_audio_buffer.append", "audio": "A" * (max_append + 4),
                "event_id": eid}, "input_audio_too_large", True
    if k == 11:  # instructions too long
        return {"type": "session.update", "event_id": eid,
                "session": {"instructions": "x" * rng.randint(32769, 100_000)}}, \
            "string_above_max_length", True
    if k == 12:  # out of order / unknown ids
        t = rng.choice(["conversation.item.truncate", "conversation.item.delete",
                        "conversation.item.retrieve"])
        ev = {"type": t, "item_id": "item_" + junk(rng, 6), "event_id": eid}
        if t.endswith("truncate"):
            ev.update(content_index=0, audio_end_ms=rng.randint(0, 10_000))
        return ev, "invalid_value", True
    if k == 13:
        return {"type": "response.cancel", "event_id": eid}, "response_cancel_not_active", True
    if k == 14:  # out-of-range values
        ev = rng.choice([
            {"type": "session.update", "session": {"turn_detection": {"threshold": 7.0}}},
            {"type": "session.update", "session": {"audio": {"input": {"format": "mp3"}}}},
            {"type": "session.update", "session": {"output_modalities": ["smell"]}},
            {"type": "session.update", "session": {"type": "transcription"}},
            {"type": "conversation.item.truncate", "item_id": "x", "content_index": -1,
             "audio_end_ms": 0},
        ])
        return {**ev, "event_id": eid}, "invalid_value", True
    if k == 15:  # strict types inside session
        return {"type": "session.update", "event_id": eid,
                "session": {rng.choice(["instructions", "output_modalities", "model"]):
                            rng.choice([5, {"a": 1}, 1.5])}}, "invalid_type", True
    if k == 16:  # mutated response.create: bad params
        return {"type": "response.create", "event_id": eid,
                "response": rng.choice([{"max_output_tokens": 0},
                                        {"output_modalities": ["x"]},
                                        {"metadata": {"k": "v" * 600}}])}, "", True
    if k == 17:  # item with bad content
        return {"type": "conversation.item.create", "event_id": eid,
                "item": {"type": "message", "role": "user",
                         "content": [{"type": "input_audio", "audio": "@@"}]}}, "", True
    if k == 18:  # well-formed: small silent append
        n = 2 * rng.randint(1, 480)
        return {"type": "input_audio_buffer.append", "audio": b64(bytes(n)),
                "event_id": eid}, None, True
    if k == 19:
        return {"type": "input_audio_buffer.clear", "event_id": eid}, None, True
    if k == 20:  # unknown extra fields are ignored
        return {"type": "input_audio_buffer.clear", "event_id": eid, junk(rng, 5): junk(rng)}, \
            None, True
    # huge event_id / deep nesting inside a field
    return {"type": "conversation.item.delete", "item_id": [[[[[]]]]], "event_id": eid}, \
        "invalid_type", True


async def fuzz_realtime(server, rng: random.Random, n: int) -> None:
    c = await RTClient.connect(server.url)
    try:
        await c.wait("session.created")
        max_append = server.settings.limits.max_append_b64_bytes
        by_id: dict[str, str | None] = {}
        anon: dict[str, int] = {}
        t0 = time.monotonic()
        for i in range(n):
            frame, code, has_id = ws_case(rng, i, max_append)
            if has_id:
                by_id[f"fz{i}"] = code
            else:
                anon[code] = anon.get(code, 0) + 1
            if isinstance(frame, bytes):
                await c.ws.send(frame)
            else:
                await c.send(frame)
            delay = t0 + (i + 1) / EVENTS_PER_S - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        await c.send({"type": "conversation.item.retrieve", "item_id": "end", "event_id": "end"})
        await c.wait("error", lambda e: e["error"].get("event_id") == "end", timeout=20)
        assert c.closed is None, c.closed
        errs = [e["error"] for e in c.of_type("error")]
        assert all(e["type"] == "invalid_request_error" for e in errs), \
            [e for e in errs if e["type"] != "invalid_request_error"][:3]
        got: dict[str, list] = {}
        got_anon: dict[str, int] = {}
        for e in errs:
            if e.get("event_id"):
                got.setdefault(e["event_id"], []).append(e["code"])
            else:
                got_anon[e["code"]] = got_anon.get(e["code"], 0) + 1
        for eid, code in by_id.items():
            codes = got.get(eid, [])
            if code is None:
                assert codes == [], (eid, codes)
            else:
                assert len(codes) == 1, (eid, code, codes)
                if code:
                    assert codes[0] == code, (eid, code, codes)
        assert got_anon == anon, (got_anon, anon)
    finally:
        await c.close()


# ---------------------------------------------------------------- WebRTC / HTTP
async def fuzz_webrtc(server, rng: random.Random, n: int) -> None:
    base = f"http://127.0.0.1:{server.port}"
    auth = {"Authorization": f"Bearer {API_KEY}"}
    async with httpx.AsyncClient(timeout=20) as h:
        for _ in range(n):
            k = rng.randrange(7)
            headers = dict(auth)
            ctype = rng.choice(["application/sdp", "text/plain", "application/json",
                                "multipart/form-data; boundary=x", ""])
            if ctype:
                headers["Content-Type"] = ctype
            if k == 0:
                body = ("v=0\r\n" + junk(rng, rng.randint(0, 400))).encode()
            elif k == 1:
                body = rng.randbytes(rng.randint(0, 2000))
            elif k == 2:
                body = b"v=0\r\n" + b"a=x\r\n" * (70_000 // 5)  # above MAX_SDP_BYTES
            elif k == 3:
                body = ("v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 9 "
                        f"UDP/TLS/RTP/SAVPF {rng.randint(0, 200)}\r\n"
                        f"a={junk(rng, 20)}\r\n").encode()
            elif k == 4:
                headers.pop("Authorization")
                body = b"v=0\r\n"
            elif k == 5:
                headers["Authorization"] = "Bearer ek_" + "".join(rng.choice("aZ09_-") for _ in range(12))
                body = b"v=0\r\nbogus"
            else:
                body = json.dumps({"sdp": junk(rng)}).encode()
            r = await h.post(base + "/v1/realtime/calls", content=body, headers=headers)
            if r.status_code == 201:  # garbage that aiortc accepts: hang up
                await h.delete(base + r.headers["location"], headers=auth)
                continue
            assert 400 <= r.status_code < 500, (r.status_code, r.text[:200])
            err = r.json()["error"]
            assert err["type"] == "invalid_request_error" and err["code"], err
        r = await h.delete(base + "/v1/realtime/calls/rtc_nope", headers=auth)
        assert r.status_code == 404


async def fuzz_http(server, rng: random.Random, n: int) -> None:
    base = f"http://127.0.0.1:{server.port}"
    auth = {"Authorization": f"Bearer {API_KEY}"}
    paths = ["/v1/chat/completions", "/v1/audio/speech", "/v1/realtime/client_secrets"]
    async with httpx.AsyncClient(timeout=20) as h:
        for _ in range(n):
            path = rng.choice(paths)
            k = rng.randrange(6)
            if k == 0:
                body = junk(rng).encode()
            elif k == 1:
                body = rng.randbytes(rng.randint(1, 300))
            elif k == 2:
                body = json.dumps(rng.choice([[1], 5, "s", None, True])).encode()
            elif k == 3:  # objects with wrong types
                body = json.dumps(rng.choice([
                    {"messages": "hi"}, {"messages": [{"role": 5}]}, {"messages": 5},
                    {"input": 5}, {"input": ["x"]}, {"voice": [], "input": None},
                    {"session": "x"}, {"session": {"turn_detection": 5}},
                    {"expires_after": {"seconds": "x"}}, {"expires_after": 5}])).encode()
            elif k == 4:
                body = b"{" * rng.randint(1, 5000)
            else:
                body = json.dumps({"messages": [{"role": "user", "content": 1}],
                                   "stream": rng.choice([True, "yes"])}).encode()
            r = await h.post(base + path, content=body, headers={
                **auth, "Content-Type": rng.choice(["application/json", "text/plain"])})
            if path == "/v1/realtime/client_secrets" and r.status_code == 200:
                continue  # e.g. an empty/whitespace body is a valid request
            assert 400 <= r.status_code < 500, (path, body[:80], r.status_code, r.text[:200])
            err = r.json()["error"]
            assert err["type"] == "invalid_request_error", (path, err)
        assert (await h.get(base + "/health")).status_code == 200


# ---------------------------------------------------------------- Twilio
async def fuzz_twilio(server, rng: random.Random, n: int) -> None:
    url = f"ws://127.0.0.1:{server.port}/v1/telephony/twilio"
    ep = server.app.state.twilio
    ws = await websockets.connect(url, additional_headers={"Authorization": f"Bearer {API_KEY}"})
    sid = "MZfuzz" + str(rng.randrange(10**6))

    def bad(after_start: bool):
        k = rng.randrange(9)
        if k == 0:
            return junk(rng)
        if k == 1:
            return json.dumps(rng.choice([[1], 5, None, "x"]))
        if k == 2:
            return json.dumps({"event": rng.choice(["nope", 5, None, "", "x" * 500])})
        if k == 3:
            return json.dumps({"event": "media", "media": rng.choice([None, 5, "x", []])})
        if k == 4:
            return json.dumps({"event": "media", "media": {"payload": rng.choice(
                ["@@@", 5, None, "A" * 70_000, "abc"])}})
        if k == 5:
            return json.dumps({"event": "start", "start": rng.choice([None, {}, 5,
                                                                      {"streamSid": 5}])})
        if k == 6:
            return rng.randbytes(rng.randint(1, 50))
        if k == 7 and after_start:
            return json.dumps({"event": "start", "start": {"streamSid": "again"}})
        return json.dumps({"event": "media", "media": {"payload": b64(rng.randbytes(160)),
                                                       "track": "outbound"}})  # ignored

    try:
        for _ in range(n // 3):  # before start: media before start, bad start...
            await ws.send(bad(False))
        await ws.send(json.dumps({"event": "connected", "protocol": "Call"}))
        await ws.send(json.dumps({"event": "start", "streamSid": sid, "start": {
            "streamSid": sid, "callSid": "CAfuzz", "mediaFormat": {
                "encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}))
        end = time.monotonic() + 5
        while not ep.calls and time.monotonic() < end:
            await asyncio.sleep(0.02)
        assert len(ep.calls) == 1
        call = next(iter(ep.calls.values()))
        for i in range(n - n // 3):
            if i % 3 == 0:  # real (silent) media keeps flowing
                await ws.send(json.dumps({"event": "media", "streamSid": sid, "media": {
                    "track": "inbound", "payload": b64(b"\xff" * 160)}}))
            else:
                await ws.send(bad(True))
            await asyncio.sleep(1 / EVENTS_PER_S)
        await ws.send(json.dumps({"event": "mark", "mark": {"name": "nope"}}))
        await asyncio.sleep(0.3)
        assert ws.close_code is None  # still connected
        assert call.stats["media_in"] >= (n - n // 3) // 3
        assert call.bad_messages > 0
        await ws.send(json.dumps({"event": "stop", "streamSid": sid}))
        end = time.monotonic() + 10
        while ep.calls and time.monotonic() < end:
            await asyncio.sleep(0.05)
        assert not ep.calls
    finally:
        await ws.close()


# ---------------------------------------------------------------- other phone providers
async def fuzz_phone(server, rng: random.Random, n: int, provider: str) -> None:
    """Junk in each provider's framing around a started call with real (silent)
    media; the call stays up, then the socket closes and the call ends."""
    url = f"ws://127.0.0.1:{server.port}/v1/telephony/{provider}"
    ep = server.app.state.phone[provider]
    wire = WIRES[provider]()
    ws = await websockets.connect(url, additional_headers={"Authorization": f"Bearer {API_KEY}"})

    def send(m):
        return ws.send(m if isinstance(m, (str, bytes)) else json.dumps(m))

    def bad():
        k = rng.randrange(6)
        if k == 0:
            return junk(rng)
        if k == 1:
            return rng.randbytes(rng.randint(1, 51))  # binary: Vonage's odd-length audio too
        if k == 2:
            return {"event": rng.choice(["nope", 5, None, "", "x" * 500, "start", "media"])}
        if k == 3:
            return {"event": "media", "media": {"payload": rng.choice(
                ["@@@", 5, None, "A" * 70_000, "abc"])}}
        if k == 4:
            return {"event": rng.choice(["dtmf", "websocket:dtmf"]),
                    "dtmf": {"digit": rng.choice(["x", "", 5, "12"])}, "digit": "zz"}
        return wire.opening({})[-1]  # a second start

    try:
        for _ in range(n // 4):  # before the start
            await send(bad())
        for m in wire.opening({}):
            await send(m)
        end = time.monotonic() + 5
        while not ep.calls and time.monotonic() < end:
            await asyncio.sleep(0.02)
        assert len(ep.calls) == 1, provider
        call = next(iter(ep.calls.values()))
        for i in range(n - n // 4):
            await send(wire.media(wire.silence_frame()) if i % 3 == 0 else bad())
            await asyncio.sleep(1 / EVENTS_PER_S)
        await asyncio.sleep(0.3)
        assert ws.close_code is None, (provider, ws.close_code)  # still connected
        assert call.stats["media_in"] >= 1 and call.bad_messages > 0, call.stats
    finally:
        await ws.close()
    end = time.monotonic() + 10
    while ep.calls and time.monotonic() < end:
        await asyncio.sleep(0.05)
    assert not ep.calls, provider


# ---------------------------------------------------------------- memory
def rss_now(server) -> dict[str, int]:
    out = {"server": psutil.Process().memory_info().rss}
    for name, p in server.pipeline.snapshot()["processes"].items():
        with contextlib.suppress(psutil.Error):
            out[name] = psutil.Process(p["pid"]).memory_info().rss
    return out


def noisy_model_loaded(server) -> set[str]:
    """Processes whose listen stage has loaded its noisy-line recogniser: it
    loads when a line first sounds noisy (noisy_line_asr.py), which fuzzed
    audio may do at any point; that is a model, not a leak."""
    return {name for name, p in server.pipeline.snapshot()["processes"].items()
            if any(st.get("executor", {}).get("asr", {}).get("noisy_model_loaded")
                   for st in p.get("stages", {}).values())}


async def settled_rss(server, settle_s: float = 1.0) -> dict[str, int]:
    gc.collect()
    await server.acall(gc.collect)
    await asyncio.sleep(settle_s)
    return await server.acall(rss_now, server)


async def quiet(server) -> dict:
    end = time.monotonic() + 15
    while (server.app.state.realtime.runners or server.app.state.webrtc.calls
           or any(ep.calls for ep in server.app.state.phone.values())) \
            and time.monotonic() < end:
        await asyncio.sleep(0.05)
    snap = await server.settled(15)
    assert snap["live_requests"] == 0, snap
    assert all(not p["held"] for p in snap["processes"].values()), snap["processes"]
    assert snap["coordinator_pool"]["lent"] == 0, snap["coordinator_pool"]
    assert all(p["pool"].get("lent", 0) == 0 for p in snap["processes"].values()), \
        {k: p["pool"] for k, p in snap["processes"].items()}
    return snap


# ---------------------------------------------------------------- the test
async def test_fuzz_every_transport_server_survives_and_returns_to_baseline(server):
    print(f"fuzz: FUZZ_SEED={SEED}")
    # warm-up: one of each, so lazily allocated buffers are in the baseline
    with seeded("warmup") as rng:
        c = await RTClient.connect(server.url)
        try:
            assert answered((await text_turn(c, "Say yes."))["response"])
        finally:
            await c.close()
        await fuzz_realtime(server, rng, 40)
        await fuzz_webrtc(server, rng, 8)
        await fuzz_http(server, rng, 10)
        await fuzz_twilio(server, rng, 30)
        for provider in ("telnyx", "plivo", "exotel", "vonage"):
            await fuzz_phone(server, rng, 12, provider)
        await quiet(server)
    base = await settled_rss(server)
    loaded_before = await server.acall(noisy_model_loaded, server)

    async def good_traffic() -> int:
        c = await RTClient.connect(server.url)
        turns = 0
        try:
            await c.wait("session.created")
            while not stop.is_set():
                done = await text_turn(c, rng_good.choice(["Say yes.", "Say hello.", "Count."]))
                assert answered(done["response"]), done
                turns += 1
        finally:
            await c.close()
        return turns

    stop = asyncio.Event()
    rng_good = random.Random(SEED)
    good = asyncio.ensure_future(good_traffic())
    t0 = time.monotonic()
    try:
        with seeded("realtime") as rng:
            await fuzz_realtime(server, rng, N_WS)
        with seeded("webrtc") as rng:
            await fuzz_webrtc(server, rng, N_RTC)
        with seeded("http") as rng:
            await fuzz_http(server, rng, N_HTTP)
        with seeded("twilio") as rng:
            await fuzz_twilio(server, rng, N_TWILIO)
        for provider in ("telnyx", "plivo", "exotel", "vonage"):
            with seeded(provider) as rng:
                await fuzz_phone(server, rng, N_PHONE, provider)
    finally:
        stop.set()
        with seeded("good-traffic"):
            turns = await asyncio.wait_for(good, 60)
    assert turns >= 1, "no text turn completed during the fuzzing"
    assert time.monotonic() - t0 < 60
    with seeded("after"):
        assert server.thread.is_alive()
        c = await RTClient.connect(server.url)
        try:
            assert answered((await text_turn(c, "Say yes."))["response"])
        finally:
            await c.close()
        await quiet(server)
        # a stage that loaded its noisy-line model meanwhile is not compared
        loaded = await server.acall(noisy_model_loaded, server) - loaded_before
        after = await settled_rss(server)
        grown = {k: (base[k], after.get(k)) for k in base if k not in loaded
                 and (after.get(k) is None or after[k] > base[k] * (1 + RSS_TOLERANCE))}
        if grown:  # give allocators one more chance to hand memory back
            after = await settled_rss(server, 3.0)
            grown = {k: (base[k], after.get(k)) for k in base if k not in loaded
                     and (after.get(k) is None or after[k] > base[k] * (1 + RSS_TOLERANCE))}
        assert not grown, f"RSS above baseline +{RSS_TOLERANCE:.0%}: {grown}"
