"""Soak: simulated callers with random barge-ins, cancels and reconnects for N minutes.

A real server (``voice-agent serve`` in its own process on 127.0.0.1, the real
configs/voice-cpu.yaml pipeline; voice_server.testing.server_process) and C
callers (default 8; voice_server.testing.callers.Sess: flite speech in 20 ms
frames in real time over real WebSockets).  Each caller
loops over random actions: a spoken turn (weight 5), a barge-in (speech over
a long reply, 2), ``response.cancel`` mid-reply (2), a disconnect mid-reply
(1; half with a close frame, half a TCP reset) followed by a reconnect.

Reports turns completed, barge-ins, cancels, reconnects, errors by code,
first-audio latency p50/p95 per minute (end of speech + 500 ms VAD window ->
first audio delta), RSS and open fds of the server process and of every
stage process at start (after a warm-up: one turn per caller, then
``--warmup-s`` of the same activity, not counted) (after a warm-up in which every
caller's session took one turn) and end, /dev/shm entries with the run prefix and
requests left in the coordinator table once every caller is gone (must be 0),
all read from outside through the admin endpoint ``GET /v1/runtime``.

    python benchmarks/soak.py --minutes 2            # writes benchmarks/results/soak.json
    python benchmarks/soak.py --minutes 30           # the record run
    python benchmarks/soak.py --config configs/voice-cpu-fast.yaml   # another pipeline

``run_soak(minutes, callers)`` is the same thing as a function.  The exit status is 1
when requests, shared memory or unexpected errors were left or a process grew more
than the target; a soak is a benchmark, not a test (``make test`` has the churn
of many sessions and of calls that leave mid-reply: tests/server/test_session_churn.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
import time
from pathlib import Path

from voice_server.testing.callers import SILENCE_WINDOW_MS, Sess, audio_delta, load_speech
from voice_server.testing.report import pct, write_json
from voice_server.testing.response_status import answered

ROOT = Path(__file__).resolve().parent.parent

KEY = "soak-key"
ACTION_TIMEOUT_S = 150.0  # an action's own waits are 60 s each; this is the backstop
RSS_GROWTH_TARGET = 0.10
# Error codes a well-behaved soak may see: a cancel that races the reply's own end.
EXPECTED_ERROR_CODES = {"response_cancel_not_active"}


def proc_stats(pid: int) -> dict:
    import psutil
    try:
        p = psutil.Process(pid)
        return {"pid": pid, "rss_mb": round(p.memory_info().rss / 2**20, 1),
                "fds": p.num_fds()}
    except psutil.Error:
        return {"pid": pid, "rss_mb": None, "fds": None}


class Soak:
    def __init__(self, srv, speech: dict, minutes: float, callers: int, seed: int,
                 warmup_s: float = 60.0) -> None:
        self.srv, self.speech = srv, speech
        self.minutes, self.callers, self.seed = minutes, callers, seed
        self.warmup_s = warmup_s
        self.warmup_counts: dict = {}
        self.t0 = 0.0
        self.end = 0.0
        self._reset_counts()

    def _reset_counts(self) -> None:
        self.c = {"turns_completed": 0, "turns_failed": 0, "barge_ins": 0,
                  "barge_not_cancelled": 0, "cancels": 0, "disconnects": 0, "resets": 0,
                  "reconnects": 0, "caller_exceptions": 0}
        self.errors: dict[str, int] = {}
        self.first_audio: list[tuple[float, float]] = []  # (t since start, ms)
        # every response's prompt as the think stage reports it: (t since start,
        # input tokens, of them cached): a turn that re-read its conversation
        self.prompts: list[tuple[float, int, int]] = []
        self.samples: list[str] = []
        self.rss_over_time: list[dict] = []  # {"minute", process: MB}: leak or plateau?

    async def procs(self) -> dict:
        s = await self.srv.runtime()
        out = {"server": proc_stats(s["pid"])}
        for k, v in s["processes"].items():
            out[k] = dict(proc_stats(v["pid"]), restarts=v["restarts"])
        return out

    def _count_errors(self, s: Sess) -> None:
        for e in s.c.events:
            if e["type"] == "response.done" and e["response"].get("usage"):
                u = e["response"]["usage"]
                self.prompts.append((e["_t"] - self.t0, int(u.get("input_tokens") or 0),
                                     int((u.get("input_token_details") or {})
                                         .get("cached_tokens") or 0)))
            if e["type"] == "error":
                code = e["error"].get("code") or "none"
                self.errors[code] = self.errors.get(code, 0) + 1
            elif e["type"] == "response.done" and e["response"]["status"] == "failed":
                code = (e["response"].get("status_details") or {}).get("error", {}).get("code")
                self.errors[f"response_failed:{code}"] = \
                    self.errors.get(f"response_failed:{code}", 0) + 1

    async def long_reply(self, s: Sess) -> tuple[str, int]:
        await s.set_tokens(64)
        n = s.mark()
        s.c.say(self.speech["story"])
        first = await s.first_audio(n)
        return first["response_id"], n

    async def act(self, s: Sess, act: str, rng: random.Random) -> bool:
        """One random action on an open session; False when the caller hung up."""
        if act == "turn":
            await s.set_tokens(24)
            n = s.mark()
            _, end = s.c.say(self.speech["q"][rng.randrange(len(self.speech["q"]))])
            t_end = await asyncio.wait_for(end, 60)
            _, ev = await s.c.wait(lambda e: e["type"] in (
                "response.output_audio.delta", "response.done"), n, 60)
            if audio_delta(ev):
                self.first_audio.append((t_end - self.t0, (ev["_t"] - t_end) * 1000
                                         - SILENCE_WINDOW_MS))
            d = await s.next_done(n, 60)
            ok = answered(d["response"])   # incomplete: the 24-token budget cut it
            self.c["turns_completed" if ok else "turns_failed"] += 1
        elif act == "barge":
            rid, n = await self.long_reply(s)
            await asyncio.sleep(rng.uniform(0, 0.8))
            s.c.say(self.speech["interrupt"])
            d = await s.done_of(rid, n, 60)
            if d["response"]["status"] == "cancelled":
                self.c["barge_ins"] += 1
            else:
                self.c["barge_not_cancelled"] += 1
            # the interruption is a turn of its own
            d2 = await s.c.wait(lambda e: e["type"] == "response.done"
                                and e["response"]["id"] != rid, n, 60)
            ok = answered(d2[1]["response"])
            self.c["turns_completed" if ok else "turns_failed"] += 1
        elif act == "cancel":
            rid, n = await self.long_reply(s)
            await asyncio.sleep(rng.uniform(0, 0.8))
            await s.t.send_event({"type": "response.cancel"})
            d = await s.done_of(rid, n, 60)
            if d["response"]["status"] == "cancelled":
                self.c["cancels"] += 1
        else:
            await self.long_reply(s)
            await asyncio.sleep(rng.uniform(0, 0.5))
            if rng.random() < 0.5:
                s.reset()
                self.c["resets"] += 1
            else:
                self.c["disconnects"] += 1
            return False
        return True

    async def one_caller(self, i: int) -> None:
        rng = random.Random(self.seed * 100 + i)
        await asyncio.sleep(i * 0.4)
        first = True
        while time.monotonic() < self.end:
            act = "open"
            s = Sess(self.srv.url, self.speech, f"c{i}", KEY)
            try:
                await asyncio.wait_for(s.open(24), 60)
                if not first:
                    self.c["reconnects"] += 1
                first = False
                while time.monotonic() < self.end:
                    act = rng.choices(["turn", "barge", "cancel", "leave"], [5, 2, 2, 1])[0]
                    # no action may hang a caller (and with it the whole run) for ever
                    if not await asyncio.wait_for(self.act(s, act, rng), ACTION_TIMEOUT_S):
                        break
                    await asyncio.sleep(rng.uniform(0.2, 1.0))
            except Exception as exc:  # noqa: BLE001
                self.c["caller_exceptions"] += 1
                if len(self.samples) < 5:
                    self.samples.append(f"c{i} {act}: {exc!r}"[:200])
            finally:
                self._count_errors(s)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(
                        s.close(graceful=not s.t.ws.transport.is_closing()), 30)

    async def settle(self, timeout: float = 20.0) -> dict:
        end = time.monotonic() + timeout
        while True:
            s = await self.srv.runtime()
            lent = s["coordinator_pool"]["lent"] + sum(p["pool"].get("lent", 0)
                                                       for p in s["processes"].values())
            held = {k: p["held"] for k, p in s["processes"].items() if p["held"]}
            sessions = s["sessions"]
            if (not s["live_requests"] and not held and not lent and not sessions) \
                    or time.monotonic() > end:
                return {"live_requests": s["live_requests"], "held": held, "lent": lent,
                        "sessions": sessions, "counters": s["counters"]}
            await asyncio.sleep(0.1)

    async def sample_rss(self, every_s: float = 60.0) -> None:
        """RSS of every process each minute while the callers talk (under load, so
        the values are higher than the settled start/end figures)."""
        minute = 0
        while True:
            await asyncio.sleep(every_s)
            minute += 1
            try:
                procs = await self.procs()
            except Exception:  # noqa: BLE001 - a busy server: skip this sample
                continue
            self.rss_over_time.append({"minute": minute, **{k: v["rss_mb"]
                                                             for k, v in procs.items()}})

    async def warmup(self) -> None:
        """Every caller's session opened once with one turn, then ``warmup_s`` of the
        same random activity as the soak, not counted: the start RSS is the
        working set of `callers` busy sessions (listen keeps a decoder per
        stream; allocators reach their steady state), so that growth after it
        is what the soak is for: memory that time, not load, adds."""
        async def one(i):
            await asyncio.sleep(i * 0.3)
            s = Sess(self.srv.url, self.speech, f"warm{i}", KEY)
            await s.open(24)
            await s.turn(self.speech["q"][i % len(self.speech["q"])], 90)
            await s.close()
        await asyncio.gather(*(one(i) for i in range(self.callers)))
        await self.settle()
        if self.warmup_s > 0:
            self.t0 = time.monotonic()
            self.end = self.t0 + self.warmup_s
            await asyncio.gather(*(self.one_caller(i) for i in range(self.callers)))
            self.seed += 1000  # the measured run does not replay the warm-up's choices
            await self.settle()
        self.warmup_counts = {**self.c, "errors_by_code": dict(self.errors)}
        self._reset_counts()

    async def run(self) -> dict:
        await self.warmup()
        await asyncio.sleep(0.6)
        start = await self.procs()
        seg0 = (await self.srv.runtime())["shm_segments"]
        self.t0 = time.monotonic()
        self.end = self.t0 + self.minutes * 60
        sampler = asyncio.ensure_future(self.sample_rss())
        await asyncio.gather(*(self.one_caller(i) for i in range(self.callers)))
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
        wall = time.monotonic() - self.t0
        left = await self.settle()
        await asyncio.sleep(0.6)
        end = await self.procs()
        rt = await self.srv.runtime()
        seg1 = rt["shm_segments"]
        per_min = []
        for m in range(int(self.minutes + 0.999) + 1):
            xs = [ms for t, ms in self.first_audio if m * 60 <= t < (m + 1) * 60]
            read = [n - c for t, n, c in self.prompts if m * 60 <= t < (m + 1) * 60]
            if xs:
                per_min.append({"minute": m + 1, "n": len(xs), "p50": pct(xs, 50),
                                "p95": pct(xs, 95),
                                # the most prompt tokens one response decoded anew
                                "prompt_read_max": max(read, default=None),
                                "prompt_max": max((n for t, n, c in self.prompts
                                                   if m * 60 <= t < (m + 1) * 60), default=None)})
        rss = {}
        for k in start:
            a, b = start[k], end.get(k, {})
            g = None
            if a.get("rss_mb") and b.get("rss_mb") and a["pid"] == b["pid"]:
                g = round(b["rss_mb"] / a["rss_mb"] - 1, 4)
            rss[k] = {"start_mb": a.get("rss_mb"), "end_mb": b.get("rss_mb"), "growth": g,
                      "fds_start": a.get("fds"), "fds_end": b.get("fds"),
                      "same_pid": a["pid"] == b.get("pid")}
        allfa = [ms for _, ms in self.first_audio]
        unexpected = {k: v for k, v in self.errors.items() if k not in EXPECTED_ERROR_CODES}
        return {"minutes": self.minutes, "callers": self.callers, "wall_s": round(wall, 1),
                "warmup_s": self.warmup_s, "warmup": self.warmup_counts,
                **self.c, "errors_by_code": self.errors, "unexpected_errors": unexpected,
                "first_audio_ms": {"p50": pct(allfa, 50), "p95": pct(allfa, 95), "n": len(allfa)},
                "first_audio_per_minute": per_min, "processes": rss,
                "rss_mb_over_time": self.rss_over_time,
                "rss_growth_target": RSS_GROWTH_TARGET,
                "rss_growth_ok": all(r["growth"] is not None and r["growth"] <= RSS_GROWTH_TARGET
                                     for r in rss.values()),
                "shm_segments": {"start": seg0, "end": seg1, "prefix": rt["shm_prefix"]},
                "left": {"live_requests": left["live_requests"], "held": left["held"],
                         "lent": left["lent"], "sessions": left["sessions"]},
                "coordinator_counters": left["counters"], "exception_samples": self.samples}


def run_soak(minutes: float, callers: int = 8, seed: int = 1, config: str | None = None,
             url: str | None = None, warmup_s: float = 60.0) -> dict:
    """Start a server (or use the one at ``url``, http://host:port, started with
    VOICE_AGENT_API_KEYS=soak-key), soak it, stop it; returns the report."""
    from voice_server.testing.server_process import RunningServer, run_on_own_server
    speech = load_speech()
    if url:
        srv = RunningServer(url)

        async def remote() -> dict:
            try:
                return await Soak(srv, speech, minutes, callers, seed, warmup_s).run()
            finally:
                await srv.aclose()
        return asyncio.run(remote())
    cfg = config or str(ROOT / "configs" / "voice-cpu.yaml")
    env = {"VOICE_AGENT_API_KEYS": KEY, "VOICE_AGENT_MAX_SESSIONS": str(callers + 4),
           "VOICE_AGENT_DRAIN_GRACE_S": "1", "VOICE_AGENT_ADMIN_KEYS": None}
    return run_on_own_server(cfg, env, lambda srv: Soak(srv, speech, minutes, callers, seed,
                                                         warmup_s).run())


def print_report(r: dict) -> None:
    print(f"soak: {r['callers']} callers, {r['minutes']} min ({r['wall_s']} s) after a "
          f"{r['warmup_s']:g} s warm-up")
    print(f"  turns completed {r['turns_completed']}, failed {r['turns_failed']}, barge-ins "
          f"{r['barge_ins']} (+{r['barge_not_cancelled']} reply already over), cancels "
          f"{r['cancels']}, disconnects {r['disconnects']} + resets {r['resets']}, reconnects "
          f"{r['reconnects']}, caller exceptions {r['caller_exceptions']}")
    print(f"  errors by code: {r['errors_by_code'] or '{}'}")
    print("  first audio ms:  minute    n    p50    p95   (prompt tokens: longest, most read anew)")
    for m in r["first_audio_per_minute"]:
        print(f"                  {m['minute']:>6} {m['n']:>4} {m['p50']!s:>6} {m['p95']!s:>6}"
              f"   {m.get('prompt_max')!s:>5} {m.get('prompt_read_max')!s:>5}")
    print(f"  {'process':<10} {'RSS start MB':>12} {'end MB':>8} {'growth':>7} {'fds start':>9} "
          f"{'end':>5}")
    for k, v in r["processes"].items():
        g = f"{v['growth'] * 100:+.1f}%" if v["growth"] is not None else "-"
        print(f"  {k:<10} {v['start_mb']!s:>12} {v['end_mb']!s:>8} {g:>7} {v['fds_start']!s:>9} "
              f"{v['fds_end']!s:>5}")
    if r["rss_mb_over_time"]:
        names = [k for k in r["rss_mb_over_time"][0] if k != "minute"]
        print("  RSS MB under load: minute " + " ".join(f"{n:>9}" for n in names))
        for row in r["rss_mb_over_time"]:
            print(f"                    {row['minute']:>6} "
                  + " ".join(f"{row.get(n)!s:>9}" for n in names))
    sh, left = r["shm_segments"], r["left"]
    print(f"  /dev/shm {sh['prefix']}*: {sh['start']} -> {sh['end']}; left in coordinator: "
          f"{left['live_requests']} requests, held {left['held'] or 0}, lent {left['lent']}, "
          f"sessions {left['sessions']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--callers", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "soak.json"))
    ap.add_argument("--url", help="soak a running server (http://host:port, API key "
                    f"{KEY!r}) instead of starting one")
    ap.add_argument("--warmup-s", type=float, default=60.0,
                    help="seconds of uncounted soak activity before the start figures")
    ap.add_argument("--config", help="the pipeline of the server it starts (default "
                    "configs/voice-cpu.yaml)")
    a = ap.parse_args(argv)
    r = run_soak(a.minutes, a.callers, a.seed, url=a.url, warmup_s=a.warmup_s, config=a.config)
    print_report(r)
    write_json(a.out, r)
    ok = (r["left"]["live_requests"] == 0 and not r["left"]["lent"] and not r["unexpected_errors"]
          and r["rss_growth_ok"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
