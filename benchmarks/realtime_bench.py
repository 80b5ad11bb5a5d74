"""Realtime benchmark: simulated callers over real WebSockets.

Each caller streams pre-synthesised flite speech in real time (20 ms frames,
continuous silence between turns, as real clients do) and measures:

* first_audio_ms - end of the user's speech + the server-VAD silence window
  (reported separately as silence_window_ms) -> first response.output_audio.delta;
* barge_in_ms - first frame of interrupting speech sent -> response.done
  (cancelled) received; barge_in_last_audio_ms - same start -> last audio delta
  of the interrupted response;
* late_audio_deltas - audio deltas of a response after its response.done (must be 0).

At 1, 4, 8, 16 concurrent sessions (``--quick``: 1 and 4, fewer turns).
Prints a table; writes benchmarks/results/realtime.json.

    python benchmarks/realtime_bench.py --quick
    python benchmarks/realtime_bench.py --url ws://127.0.0.1:8000/v1/realtime --key K

The caller talks through a :class:`CallerTransport`: ``ws`` (OpenAI Realtime
WebSocket), ``twilio`` (Media Streams, benchmarks/callers_twilio.py);
``--transport ws,twilio`` runs them side by side (interleaved per level).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.caller_transport import CallerTransport  # noqa: E402
from benchmarks.report import pct, write_json  # noqa: E402
from voice_server.audio_codec import resample  # noqa: E402

RATE = 24000
FRAME_MS = 20
SILENCE_WINDOW_MS = 500  # the session's default server-VAD silence_duration_ms

QUESTIONS = ["what is the capital of france", "what is two plus two",
             "what color is the sky", "how are you today"]
STORY = "tell me a long story about a dragon"
INTERRUPT = "stop and tell me the time"


def flite_pcm(text: str) -> np.ndarray:
    import subprocess
    import tempfile
    import wave
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.wav")
        subprocess.run(["flite", "-voice", "slt", "-t", text, "-o", path], check=True,
                       capture_output=True, timeout=60)
        with wave.open(path, "rb") as w:
            sr = w.getframerate()
            pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
    return resample(pcm, sr, RATE)


def zeros(ms: float) -> np.ndarray:
    return np.zeros(int(RATE * ms / 1000), dtype=np.int16)


# ---------------------------------------------------------------- transports

class RealtimeWSTransport(CallerTransport):
    def __init__(self, url: str, key: str | None) -> None:
        self.url, self.key = url, key
        self.q: asyncio.Queue = asyncio.Queue()

    async def connect(self) -> None:
        import websockets
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        self.ws = await websockets.connect(self.url + "?model=bench", additional_headers=headers,
                                           max_size=None)
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            async for m in self.ws:
                ev = json.loads(m)
                ev["_t"] = time.monotonic()
                self.q.put_nowait(ev)

    async def send_audio(self, pcm24k: np.ndarray) -> None:
        await self.ws.send(json.dumps({"type": "input_audio_buffer.append",
                                       "audio": base64.b64encode(pcm24k.tobytes()).decode()}))

    async def send_event(self, ev: dict) -> None:
        await self.ws.send(json.dumps(ev))

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close()
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader


TRANSPORTS = {"ws": RealtimeWSTransport}
from benchmarks.callers_twilio import RealtimeWSPcmuTransport, TwilioCallerTransport  # noqa
TRANSPORTS.update({"twilio": TwilioCallerTransport, "ws-pcmu": RealtimeWSPcmuTransport})


from benchmarks.callers_webrtc import WebRTCTransport  # noqa: E402  (aiortc loaded lazily)
TRANSPORTS["webrtc"] = WebRTCTransport

# ------------------------------------------------------------------- caller

def _settle(f: asyncio.Future, t: float) -> None:
    if not f.done():  # a waiter that gave up (wait_for timeout) cancelled it
        f.set_result(t)


class Caller:
    """One simulated caller: a mic task streaming in real time, and an event reader."""

    def __init__(self, transport: CallerTransport, speech: dict) -> None:
        self.t = transport
        self.speech = speech
        self.mic_queue: asyncio.Queue = asyncio.Queue()
        self.events: list[dict] = []
        self.new = asyncio.Event()
        self.late = 0
        self.done_ids: set[str] = set()

    async def mic(self) -> None:
        """Real-time pacing: one 20 ms frame per tick, silence when nothing queued.

        If sending fails, every start/end mark still pending gets the exception:
        a caller awaiting the end of its utterance must not wait forever."""
        marks: list = []
        try:
            await self._mic(marks)
        except BaseException as exc:
            pending = [f for _, f in marks]
            while not self.mic_queue.empty():
                pending += [f for _, f in self.mic_queue.get_nowait()[1]]
            err = exc if isinstance(exc, Exception) else ConnectionError("mic stopped")
            for f in pending:
                if not f.done():
                    f.set_exception(err)
            raise

    async def _mic(self, marks: list) -> None:
        n = RATE * FRAME_MS // 1000
        t0 = time.monotonic()
        k = 0
        cur = np.zeros(0, np.int16)
        while True:
            if cur.size == 0 and not self.mic_queue.empty():
                cur, queued = self.mic_queue.get_nowait()
                marks[:] = queued
            if cur.size:
                frame, cur = cur[:n], cur[n:]
                if marks and marks[0][0] == "start":
                    _settle(marks.pop(0)[1], time.monotonic())
            else:
                frame = np.zeros(n, np.int16)
            await self.t.send_audio(frame)
            if cur.size == 0 and marks and marks[0][0] == "end":
                _settle(marks.pop(0)[1], time.monotonic())
            k += 1
            delay = t0 + k * FRAME_MS / 1000 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -1.0:  # fell far behind (overloaded client): resync
                t0, k = time.monotonic(), 0

    def say(self, pcm: np.ndarray) -> tuple[asyncio.Future, asyncio.Future]:
        loop = asyncio.get_running_loop()
        start, end = loop.create_future(), loop.create_future()
        self.mic_queue.put_nowait((pcm, [("start", start), ("end", end)]))
        return start, end

    async def reader(self) -> None:
        while True:
            ev = await self.t.next_event(3600)
            if ev is None:
                continue
            self.events.append(ev)
            if ev["type"] == "response.done":
                self.done_ids.add(ev["response"]["id"])
            elif ev["type"] == "response.output_audio.delta" and \
                    ev.get("_late", ev["response_id"] in self.done_ids):  # _late: played audio
                self.late += 1
            self.new.set()

    async def wait(self, pred, start: int, timeout: float = 60.0) -> tuple[int, dict]:
        end = time.monotonic() + timeout
        i = start
        while True:
            while i < len(self.events):
                if pred(self.events[i]):
                    return i, self.events[i]
                i += 1
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"caller: no matching event; last "
                                   f"{[e['type'] for e in self.events[-8:]]}")
            self.new.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.new.wait(), left)


async def run_caller(make_transport, speech: dict, turns: int, barge: bool, res: dict) -> None:
    t = make_transport()
    await t.connect()
    c = Caller(t, speech)
    tasks = [asyncio.ensure_future(c.reader()), asyncio.ensure_future(c.mic())]
    try:
        await c.wait(lambda e: e["type"] == "session.created", 0, 20)
        await t.send_event({"type": "session.update",
                            "session": {"type": "realtime", "max_output_tokens": 24}})
        for k in range(turns):
            n = len(c.events)
            _, end = c.say(speech["q"][k % len(speech["q"])])
            t_end = await asyncio.wait_for(end, 60)
            _, d = await c.wait(lambda e: e["type"] in ("response.output_audio.delta",
                                                        "response.done"), n)
            if d["type"] == "response.output_audio.delta":
                res["first_audio_ms"].append((d["_t"] - t_end) * 1000 - SILENCE_WINDOW_MS)
            else:
                res["errors"] += 1
            await c.wait(lambda e: e["type"] == "response.done", n)
            await asyncio.sleep(0.3)
        if barge:
            await t.send_event({"type": "session.update", "session": {
                "type": "realtime", "max_output_tokens": 200,
                "instructions": "You tell long, detailed stories of many sentences."}})
            n = len(c.events)
            c.say(speech["story"])
            i, first = await c.wait(lambda e: e["type"] == "response.output_audio.delta", n)
            rid = first["response_id"]
            start, _ = c.say(speech["interrupt"])
            t0 = await start
            j, done = await c.wait(lambda e: e["type"] == "response.done"
                                   and e["response"]["id"] == rid, i)
            if done["response"]["status"] == "cancelled":
                res["barge_in_ms"].append((done["_t"] - t0) * 1000)
            else:
                res["barge_not_cancelled"] += 1  # reply finished before the user spoke
            await c.wait(lambda e: e["type"] == "response.done"
                         and e["response"]["id"] != rid, j)
            if done["response"]["status"] == "cancelled":  # audio may trail response.done
                last = [e["_t"] for e in c.events[i:]
                        if e["type"] == "response.output_audio.delta" and e["response_id"] == rid]
                res["barge_in_last_audio_ms"].append((max(last) - t0) * 1000)
            await asyncio.sleep(0.5)
    except Exception as exc:  # noqa: BLE001
        res["errors"] += 1
        res.setdefault("error_samples", []).append(repr(exc)[:200])
    finally:
        res["late_audio_deltas"] += c.late
        for x in tasks:
            x.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await t.close()


async def run_level(make_transport, speech: dict, sessions: int, turns: int) -> dict:
    res = {"first_audio_ms": [], "barge_in_ms": [], "barge_in_last_audio_ms": [],
           "late_audio_deltas": 0, "errors": 0, "barge_not_cancelled": 0}
    t0 = time.monotonic()

    async def staggered(i):
        await asyncio.sleep(i * 0.25)  # callers do not all start speaking in the same frame
        await run_caller(make_transport, speech, turns, True, res)

    await asyncio.gather(*(staggered(i) for i in range(sessions)))
    out = {"first_audio_ms": {"p50": pct(res["first_audio_ms"], 50),
                              "p95": pct(res["first_audio_ms"], 95),
                              "n": len(res["first_audio_ms"])},
           "barge_in_ms": {"p50": pct(res["barge_in_ms"], 50), "p95": pct(res["barge_in_ms"], 95),
                           "n": len(res["barge_in_ms"])},
           "barge_in_last_audio_ms": {"p50": pct(res["barge_in_last_audio_ms"], 50),
                                      "p95": pct(res["barge_in_last_audio_ms"], 95)},
           "late_audio_deltas": res["late_audio_deltas"], "errors": res["errors"],
           "barge_not_cancelled": res["barge_not_cancelled"],
           "wall_s": round(time.monotonic() - t0, 1)}
    if res.get("error_samples"):
        out["error_samples"] = res["error_samples"][:3]
    return out


# ------------------------------------------------------------------- server

class _Server:
    """The voice server in-process (uvicorn on a thread), bound to 127.0.0.1."""

    def __init__(self, config: str, key: str, max_sessions: int) -> None:
        from voice_server.settings import ServerSettings
        self.config = config
        self.settings = ServerSettings(api_keys=[key], max_sessions=max_sessions,
                                       ice_hosts=["127.0.0.1"])  # WebRTC over loopback
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.ready = threading.Event()
        self.err: BaseException | None = None
        self.server = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001
            self.err = exc
            self.ready.set()

    async def _main(self) -> None:
        import uvicorn
        from runtime.pipeline import Pipeline
        from voice_server.app import build_app, uvicorn_config
        p = await Pipeline.start(self.config)
        try:
            app = build_app(p, self.settings)
            self.server = uvicorn.Server(uvicorn_config(app, self.settings, "127.0.0.1",
                                                        self.port))
            self.server.install_signal_handlers = lambda: None
            task = asyncio.ensure_future(self.server.serve(sockets=[self.sock]))
            while not self.server.started and not task.done():
                await asyncio.sleep(0.02)
            self.ready.set()
            await task
        finally:
            await p.close()

    def __enter__(self):
        self.thread.start()
        self.ready.wait(180)
        if self.err or not self.ready.is_set():
            raise RuntimeError(f"server did not start: {self.err!r}")
        return self

    def __exit__(self, *a):
        if self.server is not None:
            self.server.should_exit = True
        self.thread.join(60)
        self.sock.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 and 4 sessions, 2 turns each")
    ap.add_argument("--sessions", default=None, help="comma list, default 1,4,8,16")
    ap.add_argument("--turns", type=int, default=None)
    ap.add_argument("--transport", default="ws",
                    help=f"one or a comma list of {sorted(TRANSPORTS)}: run side by side")
    ap.add_argument("--config", default=str(ROOT / "configs" / "voice-cpu.yaml"))
    ap.add_argument("--url", default=None, help="use a running server instead of starting one")
    ap.add_argument("--key", default=os.environ.get("VOICE_AGENT_API_KEY"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "realtime.json"))
    a = ap.parse_args(argv)
    names = [t.strip() for t in a.transport.split(",") if t.strip()]
    if not names or any(t not in TRANSPORTS for t in names):
        ap.error(f"--transport: choose from {sorted(TRANSPORTS)}")
    levels = [int(x) for x in a.sessions.split(",")] if a.sessions else \
        ([1, 4] if a.quick else [1, 4, 8, 16])
    turns = a.turns or (2 if a.quick else 3)

    speech = {"q": [flite_pcm(q) for q in QUESTIONS], "story": flite_pcm(STORY),
              "interrupt": flite_pcm(INTERRUPT)}
    key = a.key or "bench-key"
    with contextlib.ExitStack() as stack:
        if a.url:
            url = a.url
        else:
            srv = stack.enter_context(_Server(a.config, key, max(levels) + 2))
            url = f"ws://127.0.0.1:{srv.port}/v1/realtime"
        by = {t: {"transport": t, "silence_window_ms": SILENCE_WINDOW_MS,
                  "turns_per_session": turns, "sessions": {}} for t in names}
        for n in levels:  # transports interleaved per level: same conditions for each
            for t in names:
                cls = TRANSPORTS[t]
                r = asyncio.run(run_level(lambda: cls(url, key), speech, n, turns))
                by[t]["sessions"][str(n)] = r
                print(f"  {t}: {n} sessions done in {r['wall_s']} s", file=sys.stderr,
                      flush=True)
    # The stable keys (sessions.<n>..., silence_window_ms) hold the WebSocket
    # figures when it ran, else the first transport's; every transport is under
    # transports.<name> so runs can be compared from one to the next.
    main_name = "ws" if "ws" in by else names[0]
    results = dict(by[main_name])
    results["transports"] = by

    hdr = (f"{'transport':>9} {'sessions':>8} {'first_audio p50':>15} {'p95':>7} "
           f"{'barge_in p50':>12} {'p95':>7} {'last_audio p50':>14} {'late':>5} {'err':>4}")
    print(f"realtime bench ({','.join(names)}); first_audio excludes the {SILENCE_WINDOW_MS} ms "
          "VAD silence window; ms")
    print(hdr)
    for n in levels:
        for t in names:
            r = by[t]["sessions"][str(n)]
            fa, bi, la = r["first_audio_ms"], r["barge_in_ms"], r["barge_in_last_audio_ms"]
            print(f"{t:>9} {n:>8} {fa['p50']!s:>15} {fa['p95']!s:>7} {bi['p50']!s:>12} "
                  f"{bi['p95']!s:>7} {la['p50']!s:>14} {r['late_audio_deltas']:>5} "
                  f"{r['errors']:>4}")
        base = by[names[0]]["sessions"][str(n)]
        for t in names[1:]:  # added latency of each transport over the first one
            r = by[t]["sessions"][str(n)]
            d = {k: round(r[k]["p50"] - base[k]["p50"], 1) if None not in (r[k]["p50"], base[k]["p50"])
                 else None for k in ("first_audio_ms", "barge_in_ms")}
            print(f"{t + '-' + names[0]:>18}: first_audio p50 {d['first_audio_ms']!s} ms, "
                  f"barge_in p50 {d['barge_in_ms']!s} ms")
    write_json(a.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
