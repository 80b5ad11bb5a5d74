"""Fault harness: faults injected while simulated callers talk to a real server.

The server runs in-process (uvicorn on 127.0.0.1,
:class:`voice_server.testing.ServerThread`) on the real voice-cpu pipeline, with each executor wrapped by a
one-shot trigger (voice_server/testing/fault_stages.py: real models, a fault only when
the harness drops a trigger file).  The only config change is the think
stage's ``deadline_s`` (8 s instead of 120 s) so a stall ends in seconds.
Callers are :class:`voice_server.testing.callers.Sess`: real WebSockets, flite speech in
20 ms frames in real time, silence between turns.

Faults, one scenario each, with 3 fresh sessions (A, B, C):

* kill-listen / kill-think / kill-speak - SIGKILL of the stage process while A
  and B are mid-response (first audio heard). Affected sessions must get an
  in-band ``error`` (+ ``response.done`` failed for a response) within 1 s of
  the kill; the stage must be restarted and ready; then C and A each complete
  a new spoken turn.
* oom-think (MemoryError in prefill), oom-speak (torch.OutOfMemoryError
  mid-stream) - one request (A's) fails with ``resource_exhausted`` within
  1 s of the exception; B and C, mid-response at the time, complete; A's
  next turn completes; no restart.
* stall-think - A's request stops producing tokens; the stage deadline
  (8 s) ends it with ``timeout`` (bound: deadline + 1 s); B, C complete.
* client-reset - A's TCP connection is reset (SO_LINGER 0 + abort: no close
  frame) mid-response; all its requests must leave the coordinator table
  within 1 s; B's turn completes and C's new turn completes.
* slow-start - the listen stage sleeps 4 s before loading; the server must
  come up (measured: start to ready) and serve the warm-up turn.

After every scenario, with all sessions closed: live requests 0, nothing
held by any stage, no shared memory lent, fds of the server and of every
stage process (a restarted one against its predecessor) within +-3 of the
baseline, server asyncio tasks within +2, /dev/shm segments of the run not
growing.

    python benchmarks/faults.py          # ~2-3 minutes; writes benchmarks/results/faults.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

from voice_server.testing.audio import flite_pcm, silence
from voice_server.testing.callers import QUESTIONS, STORY, Sess
from voice_server.testing.report import write_json
from voice_server.testing.response_status import answered

ROOT = Path(__file__).resolve().parent.parent

KEY = "faults-key"
THINK_DEADLINE_S = 8.0
KILL_BOUND_MS = 1000.0
OOM_BOUND_MS = 1000.0
RESET_BOUND_MS = 1000.0
SLOW_START_S = 4.0
FD_SLACK = 3
TASK_SLACK = 2


def fault_config() -> dict:
    cfg = yaml.safe_load((ROOT / "configs" / "voice-cpu.yaml").read_text())
    wrap = {"listen": "voice_server.testing.fault_stages:FaultListen",
            "think": "voice_server.testing.fault_stages:FaultThinker",
            "speak": "voice_server.testing.fault_stages:FaultSpeak"}
    for st in cfg["stages"]:
        st["executor"] = wrap[st["name"]]
        if st["name"] == "think":
            st["deadline_s"] = THINK_DEADLINE_S
    cfg["name"] = "voice-cpu-faults"
    return cfg


class Harness:
    def __init__(self, srv, speech: dict, fault_dir: str) -> None:
        self.srv = srv
        self.p = srv.pipeline
        self.speech = speech
        self.dir = fault_dir
        self.url = srv.url
        self.base: dict | None = None
        self.off = time.time() - time.monotonic()

    # ---- probes --------------------------------------------------------------------------
    async def snap(self) -> dict:
        return await self.srv.acall(self.p.snapshot)

    async def ntasks(self) -> int:
        return await self.srv.acall(lambda: len(asyncio.all_tasks()))

    @staticmethod
    def fds(pid: int) -> int | None:
        try:
            return len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            return None

    @staticmethod
    def fd_kinds(pid: int) -> dict:
        """fd targets by kind (socket, pipe, anon_inode:[eventfd], /dev/shm/..., a path)."""
        out: dict = {}
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    t = os.readlink(f"/proc/{pid}/fd/{fd}")
                    t = t.split(":[")[0] if t.startswith(("socket:", "pipe:")) else t
                    out[t] = out.get(t, 0) + 1
        return out

    async def probe(self) -> dict:
        s = await self.snap()
        procs = {k: {"pid": v["pid"], "fds": self.fds(v["pid"]), "restarts": v["restarts"],
                     "ready": v["ready"], "kinds": self.fd_kinds(v["pid"])}
                 for k, v in s["processes"].items()}
        return {"server_fds": self.fds(os.getpid()), "procs": procs, "tasks": await self.ntasks(),
                "segments": len(await self.srv.acall(self.p.segments))}

    async def settle(self, timeout: float = 15.0) -> dict:
        end = time.monotonic() + timeout
        while True:
            s = await self.snap()
            lent = s["coordinator_pool"]["lent"] + sum(p["pool"].get("lent", 0)
                                                       for p in s["processes"].values())
            held = {k: p["held"] for k, p in s["processes"].items() if p["held"]}
            if (not s["live_requests"] and not held and not lent) or time.monotonic() > end:
                return {"live_requests": s["live_requests"], "held": held, "lent": lent}
            await asyncio.sleep(0.1)

    async def leaks(self) -> dict:
        st = await self.settle()
        await asyncio.sleep(0.6)  # stage stats (fd users, pools) settle; stats come ~2/s
        now = await self.probe()
        b = self.base
        fd_delta = {"server": now["server_fds"] - b["server_fds"]}
        grew = {}
        for k, v in now["procs"].items():
            if v["fds"] is not None and b["procs"][k]["fds"] is not None:
                fd_delta[k] = v["fds"] - b["procs"][k]["fds"]
                if abs(fd_delta[k]) > FD_SLACK:
                    bk = b["procs"][k]["kinds"]
                    grew[k] = {t: n - bk.get(t, 0) for t, n in v["kinds"].items()
                               if n != bk.get(t, 0)}
        out = dict(st, fd_delta=fd_delta, fd_changed=grew, task_delta=now["tasks"] - b["tasks"],
                   segment_delta=now["segments"] - b["segments"])
        out["ok"] = (not st["live_requests"] and not st["held"] and not st["lent"]
                     and all(abs(d) <= FD_SLACK for d in fd_delta.values())
                     and out["task_delta"] <= TASK_SLACK and out["segment_delta"] <= 0)
        return out

    async def wait_ready(self, key: str, restarts_before: int, timeout: float = 60) -> float | None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            p = (await self.snap())["processes"][key]
            if p["ready"] and p["restarts"] > restarts_before:
                return time.monotonic() - t0
            await asyncio.sleep(0.05)
        return None

    def trigger(self, name: str, content: str = "") -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.dir, name + ".fired"))
        Path(self.dir, name).write_text(content)

    def fired_at(self, name: str) -> float | None:
        """Monotonic time at which the stage raised / claimed the trigger."""
        try:
            wall = float(Path(self.dir, name + ".fired").read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None
        return wall - self.off

    async def sessions(self, tokens: list[int]) -> list[Sess]:
        out = []
        for i, n in enumerate(tokens):
            out.append(await Sess(self.url, self.speech, "ABC"[i], KEY).open(n))
        return out

    async def start_long(self, ss: list[Sess]) -> dict:
        """Each session asks for a story; returns {name: response_id} once each heard audio."""
        rids, marks = {}, {}
        for s in ss:
            marks[s.name] = s.mark()
            s.c.say(self.speech["story"])
            await asyncio.sleep(0.3)
        for s in ss:
            rids[s.name] = (await s.first_audio(marks[s.name]))["response_id"]
        return rids

    # ---- scenarios -----------------------------------------------------------------------
    async def warmup(self) -> None:
        """One turn (proves the slow-started server serves), then the scenarios' load
        shape once (3 sessions, 2 long replies) so pools and lazily opened files
        reach their steady state before the baseline is taken."""
        A, B, C = await self.sessions([24, 64, 64])
        d = await A.turn(self.speech["q"][0])
        marks = {s.name: s.mark() for s in (B, C)}
        rids = await self.start_long([B, C])
        for s in (B, C):
            await s.done_of(rids[s.name], marks[s.name])
        for s in (A, B, C):
            await s.close()
        await self.settle()
        await asyncio.sleep(0.6)
        self.base = await self.probe()
        self.warm_status = d["response"]["status"]
        self.warm_answered = answered(d["response"])

    async def kill(self, stage: str) -> dict:
        key = f"{stage}/0"
        A, B, C = await self.sessions([64, 64, 24])
        rids = await self.start_long([A, B])
        marks = {s.name: s.mark() for s in (A, B, C)}
        restarts0 = (await self.snap())["processes"][key]["restarts"]
        t_kill = time.monotonic()
        await self.srv.acall(self.p.kill_stage, stage)
        measured, affected, unaffected_ok, notes = [], [], [], []
        if stage == "listen":
            for s in (A, B, C):
                _, e = await s.c.wait(lambda e: e["type"] == "error", marks[s.name], 10)
                affected.append(s.name)
                measured.append((e["_t"] - t_kill) * 1000)
                if e["error"].get("code") != "stage_unavailable":
                    notes.append(f"{s.name}: error code {e['error'].get('code')}")
            for s in (A, B):  # responses do not go through listen: they finish
                d = await s.done_of(rids[s.name], marks[s.name])
                unaffected_ok.append(answered(d["response"]))
        else:
            for s in (A, B):
                d = await s.done_of(rids[s.name], marks[s.name])
                st = d["response"]["status"]
                if st == "failed":
                    affected.append(s.name)
                    e = s.error_after(marks[s.name], "stage_unavailable")
                    code = d["response"].get("status_details", {}).get("error", {}).get("code")
                    if e is None or code != "stage_unavailable":
                        notes.append(f"{s.name}: failed without stage_unavailable error ({code})")
                        measured.append(float("inf"))
                    else:
                        measured.append((max(e["_t"], d["_t"]) - t_kill) * 1000)
                else:  # its part in the killed stage had already finished
                    unaffected_ok.append(answered(d["response"]))
                    notes.append(f"{s.name}: {st} (not in {stage} at the kill)")
        restart_s = await self.wait_ready(key, restarts0)
        # the service works again: C (idle during the kill) and A take new turns
        dc, da = await asyncio.gather(C.turn(self.speech["q"][1]), A.turn(self.speech["q"][2]))
        unaffected_ok += [answered(dc["response"]),
                          answered(da["response"])]
        for s in (A, B, C):
            await s.close()
        m = max(measured) if measured else None
        return {"fault": f"kill-{stage}", "bound_ms": KILL_BOUND_MS,
                "measured_ms": round(m, 1) if m is not None else None,
                "affected": affected, "unaffected_ok": all(unaffected_ok),
                "restarted": restart_s is not None,
                "restart_s": round(restart_s, 2) if restart_s is not None else None,
                "ok_inband": bool(affected) and m is not None and m <= KILL_BOUND_MS,
                "notes": notes, "leaks": await self.leaks()}

    async def one_request(self, fault: str, trigger: str, code: str, bound_ms: float) -> dict:
        A, B, C = await self.sessions([24, 64, 64])
        rids = await self.start_long([B, C])
        marks = {s.name: s.mark() for s in (A, B, C)}
        restarts0 = {k: v["restarts"] for k, v in (await self.snap())["processes"].items()}
        self.trigger(trigger)
        dA = await A.turn(self.speech["q"][0], timeout=THINK_DEADLINE_S + 30)
        notes = []
        t_fired = self.fired_at(trigger)
        e = A.error_after(marks["A"], code)
        got = dA["response"].get("status_details", {}).get("error", {}).get("code")
        measured = None
        if dA["response"]["status"] != "failed" or got != code or e is None or t_fired is None:
            notes.append(f"A: {dA['response']['status']} {got}, error event {bool(e)}, "
                         f"fired {t_fired is not None}")
        else:
            measured = (max(e["_t"], dA["_t"]) - t_fired) * 1000
        ok = []
        for s in (B, C):
            d = await s.done_of(rids[s.name], marks[s.name])
            ok.append(answered(d["response"]))
            if not answered(d["response"]):
                notes.append(f"{s.name}: {d['response']['status']}")
            if s.error_after(marks[s.name]) is not None:
                ok.append(False)
                notes.append(f"{s.name}: got an error event")
        dA2 = await A.turn(self.speech["q"][3])
        ok.append(answered(dA2["response"]))
        snap = await self.snap()
        same = all(v["restarts"] == restarts0[k] and v["ready"] for k, v in snap["processes"].items())
        for s in (A, B, C):
            await s.close()
        return {"fault": fault, "bound_ms": bound_ms,
                "measured_ms": round(measured, 1) if measured is not None else None,
                "affected": ["A"], "unaffected_ok": all(ok),
                "restarted": same,  # nothing died: every stage ready, no restart
                "ok_inband": measured is not None and measured <= bound_ms,
                "notes": notes, "leaks": await self.leaks()}

    async def client_reset(self) -> dict:
        A, B, C = await self.sessions([64, 64, 24])
        rids = await self.start_long([A, B])
        mB = B.mark()
        runner_rids = await self.srv.acall(lambda: self.srv.runner(A.sid).live_request_ids)
        t0 = time.monotonic()
        A.reset()
        measured = None
        while time.monotonic() - t0 < 10:
            gone = await self.srv.acall(
                lambda: self.srv.runner(A.sid) is None
                and not any(r in self.p.coordinator.live for r in runner_rids))
            if gone:
                measured = (time.monotonic() - t0) * 1000
                break
            await asyncio.sleep(0.01)
        await A.close(graceful=False)
        dB = await B.done_of(rids["B"], mB)
        dC = await C.turn(self.speech["q"][1])
        ok = answered(dB["response"]) and answered(dC["response"])
        for s in (B, C):
            await s.close()
        return {"fault": "client-reset", "bound_ms": RESET_BOUND_MS,
                "measured_ms": round(measured, 1) if measured is not None else None,
                "affected": ["A"], "unaffected_ok": ok, "restarted": True,
                "ok_inband": measured is not None and measured <= RESET_BOUND_MS,
                "notes": [f"A's requests {len(runner_rids)} (listen + response) left the table; "
                          "measured = reset -> session unregistered and requests gone"],
                "leaks": await self.leaks()}


async def run_all(srv, speech, fault_dir, startup_s, only: list[str] | None) -> list[dict]:
    h = Harness(srv, speech, fault_dir)
    await h.warmup()
    fired = h.fired_at("listen.slow_start") is not None
    rows = [{"fault": "slow-start", "bound_ms": None, "measured_ms": round(startup_s * 1000, 1),
             "affected": [], "unaffected_ok": h.warm_answered, "restarted": fired,
             "ok_inband": fired and h.warm_answered,
             "notes": [f"listen slept {SLOW_START_S:g} s before loading; measured = server start "
                       "-> serving; then the warm-up turn " + h.warm_status],
             "leaks": {"ok": True, "baseline": "taken after this"}}]
    plan = [("kill-listen", lambda: h.kill("listen")), ("kill-think", lambda: h.kill("think")),
            ("kill-speak", lambda: h.kill("speak")),
            ("oom-think", lambda: h.one_request("oom-think (MemoryError)", "think.oom",
                                                "resource_exhausted", OOM_BOUND_MS)),
            ("oom-speak", lambda: h.one_request("oom-speak (torch.OutOfMemoryError)",
                                                "speak.torch_oom", "resource_exhausted",
                                                OOM_BOUND_MS)),
            ("stall-think", lambda: h.one_request("stall-think", "think.stall", "timeout",
                                                  THINK_DEADLINE_S * 1000 + 1000)),
            ("client-reset", h.client_reset)]
    for name, fn in plan:
        if only and name not in only:
            continue
        t0 = time.monotonic()
        try:
            r = await asyncio.wait_for(fn(), 90)
        except Exception as exc:  # noqa: BLE001 - a scenario that breaks is a finding
            r = {"fault": name, "bound_ms": None, "measured_ms": None, "affected": [],
                 "unaffected_ok": False, "restarted": False, "ok_inband": False,
                 "notes": [f"scenario raised {exc!r}"[:300]], "leaks": await h.leaks()}
        r["wall_s"] = round(time.monotonic() - t0, 1)
        r["ok"] = bool(r["ok_inband"] and r["unaffected_ok"] and r["restarted"]
                       and r["leaks"].get("ok"))
        print(f"  {r['fault']}: {'ok' if r['ok'] else 'FAILED'} in {r['wall_s']} s", file=sys.stderr,
              flush=True)
        rows.append(r)
    rows[0]["ok"] = rows[0]["ok_inband"]
    return rows


def fmt_leaks(lk: dict) -> str:
    if "fd_delta" not in lk:
        return "-"
    fd = ",".join(f"{k.split('/')[0]}{v:+d}" for k, v in lk["fd_delta"].items())
    return (f"live {lk['live_requests']} held {len(lk['held'])} lent {lk['lent']} "
            f"fd {fd} tasks {lk['task_delta']:+d} shm {lk['segment_delta']:+d}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=None, help="comma list of scenario names")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "faults.json"))
    a = ap.parse_args(argv)
    from voice_server.testing import ServerThread
    from voice_server.settings import ServerSettings

    t_all = time.monotonic()
    speech = {"q": [flite_pcm(q) for q in QUESTIONS], "story": flite_pcm(STORY)}
    speech["interrupt"] = silence(100)
    with tempfile.TemporaryDirectory(prefix="va-faults-") as d:
        os.environ["VA_FAULT_DIR"] = d  # inherited by the stage processes
        Path(d, "listen.slow_start").write_text(str(SLOW_START_S))
        t0 = time.monotonic()
        srv = ServerThread(fault_config(), ServerSettings(api_keys=[KEY], max_sessions=8)).start(180)
        startup_s = time.monotonic() - t0
        try:
            rows = asyncio.run(run_all(srv, speech, d, startup_s,
                                       a.only.split(",") if a.only else None))
        finally:
            srv.stop()
    hdr = f"{'fault':<36} {'bound ms':>8} {'measured':>9} {'affected':>8} {'others ok':>9} " \
          f"{'stage ok':>8} {'ok':>4}  leaks (after, vs baseline)"
    print("fault injection (real voice-cpu models behind trigger wrappers; 3 sessions each)")
    print(hdr)
    for r in rows:
        print(f"{r['fault']:<36} {r['bound_ms'] if r['bound_ms'] is not None else '-'!s:>8} "
              f"{r['measured_ms']!s:>9} {','.join(r['affected']) or '-':>8} "
              f"{str(r['unaffected_ok']):>9} {str(r['restarted']):>8} "
              f"{'yes' if r['ok'] else 'NO':>4}  {fmt_leaks(r['leaks'])}")
        for n in r.get("notes", []):
            print(f"{'':<38}{n}")
    out = {"faults": rows, "wall_s": round(time.monotonic() - t_all, 1),
           "think_deadline_s": THINK_DEADLINE_S, "all_ok": all(r["ok"] for r in rows)}
    print(f"total {out['wall_s']} s")
    write_json(a.out, out)
    return 0 if out["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
