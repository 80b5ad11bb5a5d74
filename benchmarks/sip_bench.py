"""SIP benchmark: real SIP calls (SIPp signalling, RTP from a simulated phone on
127.0.0.1) against the real server, and the same turn over the Realtime
WebSocket in the same run.

* ``first_voice_ms_p50`` - the true end of the caller's speech in the RTP
  they send -> the first RTP packet carrying the agent's voice (one call at a
  time); ``ws_first_voice_ms_p50`` - the same question over ``/v1/realtime``:
  its last audio frame sent -> the first ``response.output_audio.delta``;
* ``rtp_send_interval_ms_p99`` - the gaps between the agent's RTP packets as
  the server sends them, at 4 concurrent calls while each caller talks and
  the agent answers (also p50 / max); ``rtp_arrival_interval_ms_*`` - the same
  gaps as the simulated phones receive them (they run in this process, beside
  the server's event loop, so their own delays are in it too);
* each single-call turn and each 4-call round runs twice, with the RTP in
  its own process (the default, ``sip.media_process``) and in the server's
  event loop: the ``*_in_loop`` keys are the latter, measured in the same run;
* ``barge_in_silence_ms_p95`` - the first voiced packet of speech over the
  agent's reply -> the agent's RTP falls silent (five silent packets in a row);
* ``calls``, ``errors``.

``--quick`` (under 3 minutes): 2 turns each way, one 4-call round each way,
2 barge-ins.  ``--load N`` runs N busy loops beside the server (both cores
loaded by more than the calls themselves).

    python -m benchmarks.sip_bench --quick --out /tmp/sip.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import sys
import time
from pathlib import Path

import numpy as np

from voice_server.settings import ServerSettings
from voice_server.testing import ServerThread
from voice_server.testing.callers import Caller, RealtimeWSTransport, load_speech
from voice_server.testing.report import pct, write_json
from voice_server.testing.rtp_peer import VOICED_LEVEL, RtpPeer
from voice_server.testing.sipp import OFFER_PCMU, SippCall, free_port, sipp_available
from voice_server.transports.sip.settings import SipSettings

ROOT = Path(__file__).resolve().parent.parent
RATE = 24000  # load_speech's rate


def first_voiced_s(pcm, rate: int = RATE, level: int = VOICED_LEVEL) -> float:
    """Where the first voiced 20 ms frame of ``pcm`` starts (flite leads with silence)."""
    n = rate // 50
    frames = np.abs(np.asarray(pcm[:pcm.size // n * n], np.int32)).reshape(-1, n).mean(1)
    voiced = np.nonzero(frames > level)[0]
    return float(voiced[0]) * 0.02 if voiced.size else 0.0


def _spin(stop_at: float) -> None:
    while time.time() < stop_at:
        pass


class SipCaller:
    """One phone: SIPp dials, an RtpPeer talks and listens; the agent hangs up at the end."""

    def __init__(self, srv: ServerThread) -> None:
        self.srv = srv
        self.ep = srv.app.state.sip
        self.peer: RtpPeer | None = None
        self.sipp: asyncio.Future | None = None
        self.mic: asyncio.Task | None = None
        self.call = None

    async def __aenter__(self) -> "SipCaller":
        self.peer = await RtpPeer.open()
        self.sipp = asyncio.ensure_future(SippCall(self.ep.sip.port, self.peer.port,
                                                   offer=OFFER_PCMU).invite()
                                          .await_bye(300_000).arun(320))
        deadline = time.monotonic() + 30
        while self.call is None:
            self.call = next((c for c in list(self.ep.calls.values())
                              if c.plan and c.plan.remote[1] == self.peer.port), None)
            if time.monotonic() > deadline:
                raise RuntimeError("the call was not answered")
            await asyncio.sleep(0.02)
        self.peer.remote = ("127.0.0.1", self.call.port)
        self.mic = asyncio.ensure_future(self.peer.mic())
        return self

    async def __aexit__(self, *exc) -> None:
        if self.call is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.srv.acall(self.call.control.hang_up,
                                                      "benchmark done"), 10)
        if self.sipp is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self.sipp, 20)  # its BYE answered; else killed
        if self.mic is not None:
            self.mic.cancel()
        self.peer.close()

    async def turn(self, pcm, timeout: float = 60) -> float:
        """Ask; the ms from the end of the question to the agent's first voiced packet."""
        _, ended = self.peer.say(pcm, RATE)
        t_end = await asyncio.wait_for(ended, timeout)
        deadline = time.monotonic() + timeout
        while (t := self.peer.first_voice_after(t_end)) is None:
            if time.monotonic() > deadline:
                raise TimeoutError("no answer")
            await asyncio.sleep(0.01)
        await self.reply_over(t)
        return (t - t_end) * 1000

    async def reply_over(self, since: float, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.peer.silent_from(since, run=40) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)


async def ws_turn(srv: ServerThread, speech: dict, k: int) -> float:
    t = RealtimeWSTransport(srv.url, None)
    await t.connect()
    c = Caller(t, speech)
    tasks = [asyncio.ensure_future(c.reader()), asyncio.ensure_future(c.mic())]
    try:
        await c.wait(lambda e: e["type"] == "session.created", 0, 20)
        n = len(c.events)
        _, end = c.say(speech["q"][k % len(speech["q"])])
        t_end = await asyncio.wait_for(end, 60)
        _, d = await c.wait(lambda e: e["type"] == "response.output_audio.delta", n, 60)
        # let the reply finish: the caller's reader, cancelled while deltas stream in,
        # can swallow the cancel (asyncio.wait_for on 3.11) and never end
        with contextlib.suppress(TimeoutError):
            await c.wait(lambda e: e["type"] == "response.done", n, 60)
        return (d["_t"] - t_end) * 1000
    finally:
        for x in tasks:
            x.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await t.close()


async def run(srv: ServerThread, turns: int, barges: int, rounds: int) -> dict:
    speech = load_speech()
    res = {"first_voice_ms": [], "first_voice_ms_in_loop": [], "ws_first_voice_ms": [],
           "barge_in_silence_ms": [],
           "send_process": [], "send_loop": [], "arrival_process": [], "arrival_loop": [],
           "calls": 0, "errors": 0, "error_samples": []}

    def failed(exc: BaseException) -> None:
        log("  error:", repr(exc)[:200])
        res["errors"] += 1
        res["error_samples"].append(repr(exc)[:200])

    log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731
    ep, own_process = srv.app.state.sip, srv.app.state.sip.media_process

    def rtp_in(mode: str) -> None:
        # the endpoint reads this for each new call: None keeps the RTP in the loop
        ep.media_process = own_process if mode == "process" else None

    log("single calls")
    for k in range(turns):  # one call at a time, each way, and the same turn over the WebSocket
        q = speech["q"][k % len(speech["q"])]
        try:
            for mode, key in (("process", "first_voice_ms"), ("loop", "first_voice_ms_in_loop")):
                rtp_in(mode)
                async with SipCaller(srv) as c:
                    res["calls"] += 1
                    res[key].append(await c.turn(q))
                log(f"  sip turn {k}, RTP in the {mode}: {res[key][-1]:.0f} ms")
            res["ws_first_voice_ms"].append(await asyncio.wait_for(ws_turn(srv, speech, k), 90))
            log(f"  ws turn {k}: {res['ws_first_voice_ms'][-1]:.0f} ms")
        except Exception as exc:  # noqa: BLE001
            failed(exc)
    rtp_in("process")

    async def talker(k: int, mode: str) -> None:  # 4 calls at once: the rhythm they get
        try:
            async with SipCaller(srv) as c:
                res["calls"] += 1
                t0 = time.monotonic()
                await c.turn(speech["q"][k % len(speech["q"])])
                arrivals = [at for at, p in c.peer.received if at >= t0]
                res["arrival_" + mode] += [(b - a) * 1000 for a, b in zip(arrivals, arrivals[1:])]
                call = c.call
            # the sender's own gaps: the RTP process hands them over once the call is closed
            deadline = time.monotonic() + 20
            while call.call_id in ep.calls and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            res["send_" + mode] += list(call.media.intervals_ms)
        except Exception as exc:  # noqa: BLE001
            failed(exc)

    for r in range(rounds):
        for mode in ("process", "loop"):
            log(f"4 calls at once, RTP in {'its own process' if mode == 'process' else 'the loop'}")
            rtp_in(mode)
            await asyncio.gather(*(talker(k, mode) for k in range(4)))
    rtp_in("process")
    log("barge-ins")

    for k in range(barges):  # talk over a long reply
        try:
            async with SipCaller(srv) as c:
                res["calls"] += 1
                await srv.acall(c.call.runner.client_event, {
                    "type": "session.update", "session": {
                        "type": "realtime", "max_output_tokens": 200,
                        "instructions": "You tell long, detailed stories of many sentences."}})
                _, ended = c.peer.say(speech["story"], RATE)
                t_end = await asyncio.wait_for(ended, 60)
                deadline = time.monotonic() + 60
                while c.peer.first_voice_after(t_end) is None:
                    if time.monotonic() > deadline:
                        raise TimeoutError("no reply to talk over")
                    await asyncio.sleep(0.01)
                await asyncio.sleep(1.0)  # well into the reply
                started, _ = c.peer.say(speech["interrupt"], RATE)
                t0 = await started + first_voiced_s(speech["interrupt"])
                await asyncio.sleep(3.0)
                quiet = c.peer.silent_from(t0)
                if quiet is None:
                    raise RuntimeError("the agent did not fall silent")
                res["barge_in_silence_ms"].append((quiet - t0) * 1000)
        except Exception as exc:  # noqa: BLE001
            failed(exc)
    return res


def _rhythm(gaps: list[float], key: str) -> dict:
    return {f"{key}_p99": pct(gaps, 99), f"{key}_p50": pct(gaps, 50),
            f"{key}_max": round(max(gaps), 1) if gaps else None}


def summary(res: dict) -> dict:
    out = {"first_voice_ms_p50": pct(res["first_voice_ms"], 50),
           "first_voice_ms_in_loop_p50": pct(res["first_voice_ms_in_loop"], 50),
           "ws_first_voice_ms_p50": pct(res["ws_first_voice_ms"], 50)}
    for mode, tail in (("process", ""), ("loop", "_in_loop")):
        out.update(_rhythm(res["send_" + mode], "rtp_send_interval_ms" + tail))
        out.update(_rhythm(res["arrival_" + mode], "rtp_arrival_interval_ms" + tail))
    out.update({
        "barge_in_silence_ms_p95": pct(res["barge_in_silence_ms"], 95),
        "calls": res["calls"], "errors": res["errors"], "error_samples": res["error_samples"],
        "samples": {k: [round(x, 1) for x in res[k]] for k in
                    ("first_voice_ms", "first_voice_ms_in_loop", "ws_first_voice_ms",
                     "barge_in_silence_ms")},
    })
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--config", default=str(ROOT / "configs" / "voice-cpu-fast.yaml"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sip.json"))
    ap.add_argument("--load", type=int, default=0, help="busy loops beside the server")
    ap.add_argument("--rounds", type=int, default=None,
                    help="4-call rounds each way (default: 1 with --quick, else 3)")
    a = ap.parse_args(argv)
    if not sipp_available():
        raise SystemExit("SIPp is not installed (Debian sip-tester; make setup)")
    turns, barges, rounds = (2, 2, 1) if a.quick else (8, 8, 3)
    rounds = a.rounds or rounds
    settings = ServerSettings(max_sessions=8, sip=SipSettings(
        enabled=True, port=free_port(), rtp_ports=(35000, 35200)))
    spinners = []
    with ServerThread(a.config, settings) as srv:
        if a.load:
            stop_at = time.time() + 3600
            spinners = [multiprocessing.Process(target=_spin, args=(stop_at,), daemon=True)
                        for _ in range(a.load)]
            for p in spinners:
                p.start()
        try:
            res = asyncio.run(run(srv, turns, barges, rounds))
        finally:
            for p in spinners:
                p.terminate()
    out = summary(res)
    out["load_processes"] = a.load
    out["quick"] = a.quick
    write_json(a.out, out, note="python -m benchmarks.sip_bench" +
                      (" --quick" if a.quick else "") + (f" --load {a.load}" if a.load else "")
                      + (f" --rounds {a.rounds}" if a.rounds else ""))
    for k, v in out.items():
        if k != "samples":
            print(f"{k}: {v}")
    return 0 if out["errors"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
