"""Capacity benchmark: how many callers one server keeps up with, measured as a caller feels it.

N simulated callers talk to a served ``voice-agent serve`` (its own process,
or ``--url``) over the Realtime WebSocket, in real time (20 ms frames,
continuous silence between turns).  Unlike a lock-step load, each caller
starts after a random delay and pauses a random 1-3 s between turns (fixed
seed), so turns overlap the way real calls do.  Per level N (1, 2, 4, 6, 8):

* ``first_audio_ms``: the TRUE end of the caller's speech (its last speech
  frame sent) -> first ``response.output_audio.delta``; the server's silence
  window is included, because the caller waits through it too;
* ``heard_ms``: the same end -> when the reply's voice sounds at the caller
  (its leading silence played: :mod:`voice_server.testing.callers.heard`);
* ``barge_in_ms``: first frame of interrupting speech sent -> ``response.done``
  (cancelled) of the interrupted reply: the server's decision that it is an
  interruption (it waits for the words: a backchannel must not cancel);
* ``paused_ms``: the same frame -> ``voice_agent.output_audio.paused`` of that
  reply: when the agent falls silent (its paced audio stops at the onset);
* ``cpu_cores.<process>``: CPU seconds / wall seconds of the server process
  and each stage process during the level (from /proc);
* ``vad_decision_ms``: the listen stage's own figure, chunk arrival ->
  speech_started/stopped emitted (p50/p99 of its last 4096 decisions, read at
  the end of the level);
* ``rss_mb.<process>``: resident memory at the end of the level;
* ``budget``: the CPU budget per role (benchmarks/cpu_budget.py): CPU
  seconds per caller-minute of voice activity, recognition (transcripts and
  early readings), the end-of-turn models, think (prompt and decode steps),
  speak and the server; callers per core for each; the busy seconds per
  caller-minute of each serial resource, the callers at which it would be
  busy all the time, and which saturates first;
* ``errors``: caller exceptions, failed responses and error events;
* ``refused``: callers turned away at connect with the documented refusal
  (HTTP 503 ``server_busy``, past ``max_sessions``: docs/CLIENTS.md), which
  is a clean answer, not an error; ``load``: the server's ``/v1/runtime``
  load at the end of the level (voice_server/load.py).

    .venv/bin/python -m benchmarks.capacity_bench                 # N = 1, 2, 4, 6, 8
    .venv/bin/python -m benchmarks.capacity_bench --levels 1,4 --turns 2
    .venv/bin/python -m benchmarks.capacity_bench --url http://127.0.0.1:8000
    .venv/bin/python -m benchmarks.capacity_bench --caller-voice heart   # hibari's voice calls

Prints a table and the budget; writes benchmarks/results/capacity.json with keys
``levels.<N>.{first_audio_ms.{p50,p95}, heard_ms.{p50,p95}, barge_in_ms.{p50,p95}, paused_ms.{p50,p95},
cpu_cores.<process>, budget, errors}``.  The targets printed are issue 31's, set
for the capacity-first profile (``--config configs/voice-cpu-fast.yaml``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time

import numpy as np
import websockets

from benchmarks import cpu_budget
from benchmarks.cpu_budget import process_cpu_s
from voice_server.testing.callers.base import RealtimeWSTransport
from voice_server.testing.callers.caller import Caller, connected, load_speech
from voice_server.testing.callers.heard import first_heard
from voice_server.testing.report import pct, write_json
from voice_server.testing.server_process import RunningServer, add_server_arguments, served


def trim(pcm: np.ndarray, level: int = 300) -> np.ndarray:
    """Cut the synthesiser's leading/trailing quiet, so "end of speech" is the last spoken frame."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > level)
    return pcm[loud[0]:loud[-1] + 1] if loud.size else pcm


def rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def process_pids(rt: dict) -> dict[str, int]:
    pids = {"server": rt["pid"]}
    for name, p in rt.get("processes", {}).items():
        pids[name.split("/")[0] if name.endswith("/0") else name] = p["pid"]
    return pids


def stage_stats(rt: dict, stage: str = "listen") -> dict:
    """The first replica's executor stats of ``stage`` in a /v1/runtime answer."""
    for name, p in rt.get("processes", {}).items():
        ex = p.get("stages", {}).get(stage, {}).get("executor")
        if ex:
            return ex
    return {}


async def one_caller(url: str, key: str | None, speech: dict, turns: int, rng: random.Random,
                     res: dict) -> None:
    c = None
    try:
        async with connected(RealtimeWSTransport(url, key), speech,
                             {"max_output_tokens": 24}) as c:
            t0 = time.monotonic()
            try:
                await _talk(c, speech, turns, rng, res)
            finally:
                res["caller_s"] += time.monotonic() - t0     # the budget's caller-minutes
    except websockets.InvalidStatus as exc:
        if exc.response.status_code == 503 and b"server_busy" in exc.response.body:
            res["refused"] += 1          # past max_sessions: the documented refusal
        else:
            res["errors"] += 1
            res["exceptions"].append(f"{type(exc).__name__}: {exc}"[:200])
    except Exception as exc:  # noqa: BLE001 - counted, reported, never hangs the run
        res["errors"] += 1
        res["exceptions"].append(f"{type(exc).__name__}: {exc}"[:200])
    finally:
        events = c.events if c is not None else []
        res["error_events"] += sum(1 for e in events if e["type"] == "error")
        res["failed"] += sum(1 for e in events if e["type"] == "response.done"
                             and e["response"]["status"] == "failed")


async def _talk(c: Caller, speech: dict, turns: int, rng: random.Random, res: dict) -> None:
    t = c.t
    await asyncio.sleep(rng.uniform(0.0, 3.0))             # callers do not start together
    for k in range(turns):
        n = len(c.events)
        _, end = c.say(speech["q"][rng.randrange(len(speech["q"]))])
        t_end = await asyncio.wait_for(end, 90)
        d, heard_t = await first_heard(c, n, 90)
        if d["type"] == "response.output_audio.delta":
            res["first_audio_ms"].append((d["_t"] - t_end) * 1000)
            if heard_t is not None:
                res["heard_ms"].append((heard_t - t_end) * 1000)
        else:
            res["errors"] += 1
        await c.wait(lambda e: e["type"] == "response.done", n, 90)
        await asyncio.sleep(rng.uniform(1.0, 3.0))
    # one interruption per caller: a long story, cut short
    await t.send_event({"type": "session.update", "session": {
        "type": "realtime", "max_output_tokens": 200,
        "instructions": "You tell long, detailed stories of many sentences."}})
    n = len(c.events)
    c.say(speech["story"])
    i, first = await c.wait(lambda e: e["type"] == "response.output_audio.delta", n, 90)
    rid = first["response_id"]
    await asyncio.sleep(rng.uniform(0.3, 1.0))
    start, _ = c.say(speech["interrupt"])
    t0 = await asyncio.wait_for(start, 30)
    _, done = await c.wait(lambda e: e["type"] == "response.done"
                           and e["response"]["id"] == rid, i, 90)
    if done["response"]["status"] == "cancelled":
        res["barge_in_ms"].append((done["_t"] - t0) * 1000)
    else:
        res["barge_not_cancelled"] += 1
    paused = [e for e in c.events[i:] if e["type"] == "voice_agent.output_audio.paused"
              and e["response_id"] == rid and e["_t"] >= t0]
    if paused:
        res["paused_ms"].append((paused[0]["_t"] - t0) * 1000)
    await c.wait(lambda e: e["type"] == "response.done" and e["response"]["id"] != rid, i, 90)


async def level(server: RunningServer, url: str, key: str | None, n: int, speech: dict,
                turns: int, seed: int) -> dict:
    rt = await server.runtime()
    pids = process_pids(rt)
    spent0 = cpu_budget.snapshot(rt)
    cpu0 = {k: process_cpu_s(p) for k, p in pids.items()}
    w0 = time.monotonic()
    res = {"first_audio_ms": [], "heard_ms": [], "barge_in_ms": [], "paused_ms": [], "barge_not_cancelled": 0,
           "errors": 0, "refused": 0, "caller_s": 0.0,
           "error_events": 0, "failed": 0, "exceptions": []}
    rng = random.Random(seed * 1000 + n)
    await asyncio.wait_for(asyncio.gather(*[
        one_caller(url, key, speech, turns, random.Random(rng.random()), res) for _ in range(n)]),
        timeout=120 + 60 * turns)
    wall = time.monotonic() - w0
    cores = {}
    for k, p in pids.items():
        c1 = process_cpu_s(p)
        if c1 is not None and cpu0.get(k) is not None:
            cores[k] = round((c1 - cpu0[k]) / wall, 2)
    rss = {k: rss_mb(p) for k, p in pids.items()}
    rt = await server.runtime()
    listen = stage_stats(rt)
    budget = cpu_budget.per_caller_minute(spent0, cpu_budget.snapshot(rt), res["caller_s"])
    fa, bi = res["first_audio_ms"], res["barge_in_ms"]
    return {"callers": n, "turns": len(fa), "wall_s": round(wall, 1),
            "first_audio_ms": {"p50": pct(fa, 50), "p95": pct(fa, 95)},
            "heard_ms": {"p50": pct(res["heard_ms"], 50), "p95": pct(res["heard_ms"], 95)},
            "barge_in_ms": {"p50": pct(bi, 50), "p95": pct(bi, 95)},
            "paused_ms": {"p50": pct(res["paused_ms"], 50), "p95": pct(res["paused_ms"], 95)},
            "barge_not_cancelled": res["barge_not_cancelled"],
            "cpu_cores": cores, "rss_mb": rss, "vad_decision_ms": listen.get("vad_decision_ms"),
            "asr": listen.get("asr"), "speculative": {k: listen.get(k) for k in
                                                       ("speculative", "speculative_used",
                                                        "speculative_wasted")},
            "errors": res["errors"] + res["failed"] + res["error_events"],
            "refused": res["refused"], "load": rt.get("load"),
            "caller_minutes": round(res["caller_s"] / 60, 2),
            "budget": cpu_budget.model(budget, os.cpu_count() or 1),
            "exceptions": res["exceptions"][:5],
            # every sample, so that runs can be pooled (benchmarks/records_cost_bench.py)
            "first_audio_samples_ms": [round(x, 1) for x in fa],
            "barge_in_samples_ms": [round(x, 1) for x in bi]}


async def main_async(a) -> dict:
    speech = load_speech(a.caller_voice)
    speech = {k: [trim(p) for p in v] if isinstance(v, list) else trim(v) for k, v in speech.items()}
    levels: dict = {}
    async with served(a.config, a.url) as server:
        for n in [int(x) for x in a.levels.split(",")]:
            levels[str(n)] = r = await level(server, server.url, a.key, n, speech, a.turns, a.seed)
            print(f"N={n}: first audio p50/p95 {r['first_audio_ms']['p50']}/{r['first_audio_ms']['p95']} ms "
                  f"(voice heard {r['heard_ms']['p50']}/{r['heard_ms']['p95']}), "
                  f"barge-in p50/p95 {r['barge_in_ms']['p50']}/{r['barge_in_ms']['p95']} ms, "
                  f"errors {r['errors']}, cores {r['cpu_cores']}", flush=True)
            await asyncio.sleep(2)
    return levels


def print_budget(levels: dict) -> None:
    """CPU seconds per caller-minute by role at each level, then the saturation
    model of the busiest level (benchmarks/cpu_budget.py)."""
    ns = [n for n, r in levels.items() if r.get("budget", {}).get("cpu_s_per_caller_min")]
    if not ns:
        return
    roles = sorted({k for n in ns for k in levels[n]["budget"]["cpu_s_per_caller_min"]})
    print(f"\n{'CPU s per caller-minute':<34}" + "".join(f"{'N=' + n:>9}" for n in ns))
    for role in roles + ["total"]:
        vals = [levels[n]["budget"]["total_cpu_s_per_caller_min"] if role == "total"
                else levels[n]["budget"]["cpu_s_per_caller_min"].get(role) for n in ns]
        print(f"{role:<34}" + "".join(f"{'-' if v is None else f'{v:.2f}':>9}" for v in vals))
    top = levels[ns[-1]]["budget"]
    print(f"\nbusy s per caller-minute at N={ns[-1]}, and callers when that resource is busy all the time:")
    for res, v in sorted(top["busy_s_per_caller_min"].items(), key=lambda kv: -kv[1]):
        print(f"  {res:<32} {v:7.2f} s  -> {top['callers_at_saturation'].get(res, '-')}")
    print(f"  {'box (all cores)':<32} {top['total_cpu_s_per_caller_min']:7.2f} s  -> "
          f"{top['callers_at_saturation'].get('box', '-')}")
    print(f"saturates first: {top['saturates_first']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="1,2,4,6,8")
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--caller-voice", default="flite",
                    help="who speaks the callers' lines: flite (default) or a hibari voice such as "
                         "heart; both synthetic (voice_server.testing.audio.caller_pcm)")
    add_server_arguments(ap, "benchmarks/results/capacity.json")
    a = ap.parse_args()
    levels = asyncio.run(main_async(a))
    print(f"\n{'N':>3} {'turns':>6} {'first audio p50/p95 ms':>24} {'barge-in p50/p95 ms':>22} "
          f"{'paused p50/p95 ms':>20} {'VAD p99 ms':>11} {'errors':>7} {'refused':>8}  cores")
    for n, r in levels.items():
        fa, bi, pa = r["first_audio_ms"], r["barge_in_ms"], r["paused_ms"]
        vad = (r.get("vad_decision_ms") or {}).get("p99")
        print(f"{n:>3} {r['turns']:>6} {str(fa['p50']) + ' / ' + str(fa['p95']):>24} "
              f"{str(bi['p50']) + ' / ' + str(bi['p95']):>22} "
              f"{str(pa['p50']) + ' / ' + str(pa['p95']):>20} {str(vad):>11} {r['errors']:>7} "
              f"{r['refused']:>8}  "
              f"{r['cpu_cores']}")
    print_budget(levels)
    verdict = {}
    if "4" in levels:
        four = levels["4"]
        verdict["first_audio_p95_ms_at_4<=1200"] = (four["first_audio_ms"]["p95"] or 1e9) <= 1200
        verdict["paused_p95_ms_at_4<=250"] = (four["paused_ms"]["p95"] or 1e9) <= 250
    if "8" in levels:
        eight = levels["8"]
        verdict["first_audio_p95_ms_at_8<=2500_or_refused"] = (
            (eight["first_audio_ms"]["p95"] or 1e9) <= 2500 or eight["refused"] > 0)
        if eight.get("vad_decision_ms"):
            verdict["vad_decision_p99_ms_at_8<=40"] = eight["vad_decision_ms"]["p99"] <= 40
    admitted = [r["first_audio_ms"]["p95"] for r in levels.values() if r["first_audio_ms"]["p95"]]
    if admitted:
        verdict["admitted_first_audio_p95_ms<=3000"] = max(admitted) <= 3000
    print("targets:", ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in verdict.items()))
    write_json(a.out, {"levels": levels, "targets_met": verdict, "config": a.config,
                       "seed": a.seed, "turns": a.turns})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
