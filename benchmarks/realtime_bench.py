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

    python -m benchmarks.realtime_bench --quick
    python benchmarks/realtime_bench.py --url ws://127.0.0.1:8000/v1/realtime --key K

The caller (:class:`voice_server.testing.callers.Caller`) talks through a
transport: ``ws`` (OpenAI Realtime WebSocket), ``twilio`` (Media Streams),
``webrtc``, ``ws-pcmu``; ``--transport ws,twilio`` runs them side by side
(interleaved per level).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path

from voice_server.settings import ServerSettings
from voice_server.testing import ServerThread
from voice_server.testing.callers import (SILENCE_WINDOW_MS, Caller, RealtimeWSTransport,
                                          load_speech)
from voice_server.testing.callers.twilio import RealtimeWSPcmuTransport, TwilioCallerTransport
from voice_server.testing.callers.webrtc import WebRTCTransport  # aiortc loaded lazily
from voice_server.testing.report import pct, write_json

ROOT = Path(__file__).resolve().parent.parent

TRANSPORTS = {"ws": RealtimeWSTransport, "twilio": TwilioCallerTransport,
              "ws-pcmu": RealtimeWSPcmuTransport, "webrtc": WebRTCTransport}


# ------------------------------------------------------------------- caller

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

    speech = load_speech()
    key = a.key or "bench-key"
    with contextlib.ExitStack() as stack:
        if a.url:
            url = a.url
        else:
            settings = ServerSettings(api_keys=[key], max_sessions=max(levels) + 2,
                                      ice_hosts=["127.0.0.1"])  # WebRTC over loopback
            srv = stack.enter_context(ServerThread(a.config, settings))
            url = srv.url
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
