"""The CPU budget model of benchmarks/cpu_budget.py on hand-made runtime
snapshots: what is read from where, per caller-minute, and which resource
saturates first."""

import os

from benchmarks import cpu_budget


def _runtime(listen_cpu: dict, asr_busy: float, steps: dict) -> dict:
    return {"pid": os.getpid(), "processes": {
        "listen/0": {"pid": os.getpid(), "stages": {"listen": {"executor": {
            "cpu_s": {**listen_cpu, "process": 99.0}, "asr": {"busy_s": asr_busy}}}}},
        "think/0": {"pid": os.getpid(), "stages": {"think": {"executor": {"steps": steps}}}}}}


def test_snapshot_reads_roles_and_serial_resources():
    snap = cpu_budget.snapshot(_runtime(
        {"vad": 1.0, "end_of_turn": 0.5, "recognition_transcripts": 3.0, "recognition_early": 1.0},
        asr_busy=4.5, steps={"prompt": {"cpu_s": 2.0, "wall_s": 1.2},
                             "decode": {"cpu_s": 1.0, "wall_s": 0.9}}))
    assert snap["cpu.listen.vad"] == 1.0 and snap["cpu.listen.recognition_early"] == 1.0
    assert "cpu.listen.process" not in snap            # the whole, not a role
    assert snap["busy.listen.recognition"] == 4.5 and snap["busy.listen.vad"] == 1.0
    assert snap["cpu.think.prompt"] == 2.0 and abs(snap["busy.think"] - 2.1) < 1e-9
    assert snap["cpu.server"] > 0 and snap["busy.server"] == snap["cpu.server"]


def test_per_caller_minute_and_the_first_to_saturate():
    before = {"cpu.listen.vad": 1.0, "busy.listen.recognition": 10.0, "cpu.think.decode": 5.0,
              "busy.think": 5.0}
    after = {"cpu.listen.vad": 2.0, "busy.listen.recognition": 40.0, "cpu.think.decode": 25.0,
             "busy.think": 20.0}
    # 2 callers for 60 s: 2 caller-minutes
    budget = cpu_budget.per_caller_minute(before, after, caller_s=120.0)
    assert budget == {"cpu.listen.vad": 0.5, "busy.listen.recognition": 15.0,
                      "cpu.think.decode": 10.0, "busy.think": 7.5}
    m = cpu_budget.model(budget, cores=2)
    assert m["callers_per_core"] == {"listen.vad": 120.0, "think.decode": 6.0}
    assert m["callers_at_saturation"]["listen.recognition"] == 4.0
    assert m["callers_at_saturation"]["box"] == round(120 / 10.5, 1)
    assert m["saturates_first"] == "listen.recognition"
    assert cpu_budget.per_caller_minute(before, after, caller_s=0) == {}
