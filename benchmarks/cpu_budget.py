"""The CPU budget per role: what one caller-minute costs each part of the
pipeline, and which part runs out first as callers are added.

Read from two snapshots of ``GET /v1/runtime`` (before and after a load) and
the processes' CPU clocks in /proc:

* CPU by role: the listen stage splits its process by thread (voice activity
  on the loop thread, the end-of-turn model and the chat model reading the
  words on theirs, recognition on the rest: its engine computes on worker
  threads of its own) and recognition by what was read (transcripts or early
  readings, by the recognition thread's busy time); the think stage by step
  (steps holding prompt tokens, and one-token decode steps, on the process's
  clock so that llama.cpp's worker threads count); speak and the server as
  whole processes.
* Busy time of each serial resource: a role whose work runs one job at a
  time saturates when that resource is busy all the time, whatever the other
  core is doing.  Recognition (its thread's busy time) and think (its step
  loop's wall time) are measured as wall time; voice activity, the
  end-of-turn models, speak and the server are single-threaded and compute
  bound, so their CPU time is their busy time.

Callers per core for a role is 60 s over its CPU seconds per caller-minute;
callers at saturation for a resource is 60 s over its busy seconds per
caller-minute; for the whole box it is 60 s times its cores over the total.
"""

from __future__ import annotations

import os

CLK = os.sysconf("SC_CLK_TCK")

# roles measured as whole processes (their CPU is their busy time)
PROCESS_ROLES = ("speak", "server")
# listen roles on a thread of their own, whose CPU is their busy time
LISTEN_THREADS = ("vad", "end_of_turn", "turn_text")


def process_cpu_s(pid: int) -> float | None:
    """utime + stime of a process, all its threads, from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK
    except (OSError, IndexError, ValueError):
        return None


def _executors(rt: dict):
    for p in rt.get("processes", {}).values():
        for stage, st in p.get("stages", {}).items():
            yield stage, st.get("executor") or {}


def snapshot(rt: dict) -> dict[str, float]:
    """Cumulative seconds by key: ``cpu.<role>`` and ``busy.<resource>``."""
    out: dict[str, float] = {}

    def add(key: str, v: float | None) -> None:
        if v is not None:
            out[key] = out.get(key, 0.0) + float(v)

    pids = {"server": rt.get("pid")}
    for name, p in rt.get("processes", {}).items():
        for stage in p.get("stages", {}):
            pids.setdefault(stage, p.get("pid"))
    for stage, ex in _executors(rt):
        for role, s in (ex.get("cpu_s") or {}).items():
            if role != "process":
                add(f"cpu.{stage}.{role}", s)
        if "asr" in ex:
            add(f"busy.{stage}.recognition", ex["asr"].get("busy_s"))
        for kind, c in (ex.get("steps") or {}).items():
            add(f"cpu.{stage}.{kind}", c.get("cpu_s"))
            add(f"busy.{stage}", c.get("wall_s"))
    for role in PROCESS_ROLES:
        if pids.get(role):
            add(f"cpu.{role}", process_cpu_s(pids[role]))
    for stage, ex in _executors(rt):
        for role in LISTEN_THREADS:
            add(f"busy.{stage}.{role}", (ex.get("cpu_s") or {}).get(role))
    for role in PROCESS_ROLES:
        if f"cpu.{role}" in out:
            add(f"busy.{role}", out[f"cpu.{role}"])
    return out


def per_caller_minute(before: dict[str, float], after: dict[str, float],
                      caller_s: float) -> dict[str, float]:
    """Seconds per caller-minute of every key, between two snapshots."""
    if caller_s <= 0:
        return {}
    return {k: round((after[k] - before.get(k, 0.0)) * 60.0 / caller_s, 3)
            for k in after if after[k] - before.get(k, 0.0) >= 0}


def model(budget: dict[str, float], cores: int) -> dict:
    """Callers per core by role, callers at saturation by resource, the first to saturate."""
    cpu = {k[4:]: v for k, v in budget.items() if k.startswith("cpu.")}
    busy = {k[5:]: v for k, v in budget.items() if k.startswith("busy.")}
    total = sum(cpu.values())
    ceilings = {k: round(60.0 / v, 1) for k, v in busy.items() if v > 0}
    if total > 0:
        ceilings["box"] = round(60.0 * cores / total, 1)
    first = min(ceilings, key=ceilings.get) if ceilings else None
    return {"cpu_s_per_caller_min": cpu, "total_cpu_s_per_caller_min": round(total, 3),
            "callers_per_core": {k: round(60.0 / v, 1) for k, v in cpu.items() if v > 0},
            "busy_s_per_caller_min": busy, "callers_at_saturation": ceilings,
            "saturates_first": first}
