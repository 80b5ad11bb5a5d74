"""The interruptible lead (lead_sizer.py): at its floor on a steady line,
raised by the pacer's lateness and the input's arrival jitter, never past
the full lead, and down again once the line is steady."""

from __future__ import annotations

import random

from voice_server.session import Session, SessionSettings
from voice_server.session.lead_sizer import HALF_LIFE_MS, LeadSizer


def test_a_steady_line_keeps_the_floor():
    ls = LeadSizer(80, 300, 20)
    for k in range(500):                  # 20 ms frames arriving exactly on time
        ls.arrival(k * 20.0 + 20, k * 20.0 + 25)
    assert ls.lead_ms(10_000) == 80


def test_lateness_raises_the_lead_up_to_the_full_one_and_it_comes_down():
    ls = LeadSizer(80, 300, 20)
    ls.late(90, 1000)
    raised = ls.lead_ms(1000)
    assert raised >= 20 + 90          # a slice beyond the lateness seen
    ls.late(5000, 1000)
    assert ls.lead_ms(1000) == 300
    assert ls.lead_ms(1000 + 10 * HALF_LIFE_MS) == 80


def test_arrival_jitter_raises_the_lead():
    rng = random.Random(1)
    ls = LeadSizer(80, 300, 20)
    for k in range(500):                  # each frame 0-40 ms late
        ls.arrival(k * 20.0 + 20, k * 20.0 + 20 + rng.uniform(0, 40))
    assert 80 < ls.lead_ms(10_000) <= 300


def test_the_session_uses_it_only_while_the_caller_can_interrupt():
    s = Session("sess_lead", SessionSettings(), output_lead_ms=300, interruptible_lead_ms=80)
    s.start(0)
    assert s._pacer.lead_ms == 80
    s.pump_output(0)
    s._lead.late(100, 10)
    s._resize_lead(10)
    assert s._pacer.lead_ms > 80
    s.client_event({"type": "session.update", "session": {
        "type": "realtime", "audio": {"input": {"turn_detection": None}}}}, 20)
    assert s._lead is None and s._pacer.lead_ms == 300
