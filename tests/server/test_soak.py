"""A short soak (benchmarks/soak.py; the server in its own process): 4 callers for 12 s (after 4 s of warm-up) with random
barge-ins, response.cancel and disconnects (close frame or TCP reset) +
reconnects against a real server on the real voice-cpu-fast pipeline.

Marked ``slow`` for selection (``-m slow``); it is NOT skipped by default:
``make test`` runs it (~35 s; the 30-minute soak is the benchmark).
"""

from __future__ import annotations

import pytest

from benchmarks.soak import EXPECTED_ERROR_CODES, ROOT, RSS_GROWTH_TARGET, run_soak

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_soak_four_callers_for_twelve_seconds():
    # the fast profile, as the rest of the suite: the default's 1.5B only slows
    # each turn here, and leaks do not depend on the brain's size
    r = run_soak(minutes=0.2, callers=4, seed=7, warmup_s=4.0,
                 config=str(ROOT / "configs" / "voice-cpu-fast.yaml"))
    assert r["left"]["live_requests"] == 0, r["left"]
    assert not r["left"]["held"], r["left"]
    assert r["left"]["lent"] == 0, r["left"]
    assert r["left"]["sessions"] == 0, r["left"]
    assert r["shm_segments"]["end"] <= r["shm_segments"]["start"] + 2, r["shm_segments"]
    unexpected = {k: v for k, v in r["errors_by_code"].items() if k not in EXPECTED_ERROR_CODES}
    assert not unexpected, r["errors_by_code"]
    assert r["caller_exceptions"] == 0, r["exception_samples"]
    assert r["turns_completed"] >= 4, r
    assert r["turns_failed"] == 0, r
    for name, p in r["processes"].items():
        assert p["same_pid"], f"{name} was restarted during the soak: {p}"
        assert p["growth"] is not None and p["growth"] <= RSS_GROWTH_TARGET, (name, r["processes"])
    assert r["server_exit_code"] == 0, r["server_exit_code"]
