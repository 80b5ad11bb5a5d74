"""The call records page (web_demo/calls.html) in a real browser: a call
made with the demo page shows up in the list, its transcript and turn
timeline render, and its recording plays in the page."""

from __future__ import annotations

import math
import time

import httpx
import pytest

from voice_server.settings import ServerSettings
from voice_server.testing import ServerThread

from .conftest import API_KEY, ROOT, screenshot_dir, silence, speech
from .test_demo import LEAD_MS, Q1, start_talking, wait_reply_played

pytestmark = pytest.mark.timeout(150)


@pytest.fixture(scope="module")
def records_server(browser_ok, tmp_path_factory):
    settings = ServerSettings.from_sources(
        {}, env={}, api_keys=[API_KEY], max_sessions=4, max_output_tokens=40,
        records={"enabled": True, "folder": str(tmp_path_factory.mktemp("records")),
                 "recording": True})
    srv = ServerThread(str(ROOT / "configs" / "voice-cpu-fast.yaml"), settings).start()
    srv.base_url = f"http://127.0.0.1:{srv.port}"
    yield srv
    srv.stop()


def wait_ended(base_url: str, timeout_s: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        calls = httpx.get(f"{base_url}/v1/calls", headers={"Authorization": f"Bearer {API_KEY}"},
                          timeout=10).json()["data"]
        if calls and calls[0]["state"] == "ended" and calls[0]["recorded"]:
            return calls[0]
        assert time.monotonic() < deadline, calls
        time.sleep(0.2)


def test_a_demo_call_shows_on_the_calls_page(records_server, launch):
    base = records_server.base_url
    b = launch([silence(LEAD_MS), speech(Q1), silence(6000)])
    start_talking(b, base)
    wait_reply_played(b)
    said = b.demo()["agent"][0]["text"]
    b.page.click("#talk")          # hang up: the session closes, the record ends
    call = wait_ended(base)

    b.page.goto(base + "/calls.html")
    b.page.wait_for_function("window.callsPage && window.callsPage.ready", timeout=10000)
    b.page.fill("#api-key", API_KEY)
    b.page.click("#load")
    b.page.wait_for_function("window.callsPage.calls.length >= 1", timeout=10000)
    assert b.page.inner_text("#calls tbody tr:first-child").split("\t")[1] == "websocket"
    b.page.click(f"#calls tbody tr[data-id='{call['id']}']")
    b.page.wait_for_function("window.callsPage.call && window.callsPage.audioDuration > 1",
                             timeout=10000)
    # the transcript: the question and the reply, as the demo showed them
    assert "capital" in b.page.inner_text("#transcript .bubble.user .text").lower()
    agent = b.page.inner_text("#transcript .bubble.agent .text")
    assert agent.strip().startswith(said.strip()[:20]), (agent, said)
    # the turn as a timeline: its segments and the end of speech -> first audio figure
    row = b.page.locator("#timeline .turn-row").first
    kinds = row.locator(".seg").evaluate_all("els => els.map(e => e.classList[1])")
    assert kinds == ["asr", "decide", "think", "speak", "play"], kinds
    first_ms = int(row.locator(".first-audio").inner_text().split()[0])
    timings = b.page.evaluate("window.callsPage.call.turns[0].timings")
    # JavaScript's Math.round takes halves up; Python's round() takes them to even
    assert first_ms == math.floor(timings["first_audio_ms"] - timings["speech_stopped_ms"] + 0.5)
    # the recording plays in the page
    b.page.evaluate("document.getElementById('recording').play()")
    b.page.wait_for_function("document.getElementById('recording').currentTime > 0.3",
                             timeout=10000)
    assert b.page.evaluate("window.callsPage.errors") == []
    b.page.screenshot(path=str(screenshot_dir() / "calls-page.png"), full_page=True)


def test_the_calls_page_says_records_are_off_and_how_to_turn_them_on(demo_fault_server, launch):
    # A server with records off (the default) and an API key: the page opens on its form
    # (the key is needed to ask), then says that records are off instead of an empty table.
    b = launch([silence(100)])
    b.page.goto(demo_fault_server.base_url + "/calls.html")
    b.page.wait_for_function("window.callsPage && window.callsPage.ready", timeout=10000)
    assert b.page.is_visible("#access") and not b.page.is_visible("#records-off")
    b.page.fill("#api-key", API_KEY)
    b.page.click("#load")
    b.page.wait_for_function("window.callsPage.recordsOff", timeout=10000)
    notice = b.page.inner_text("#records-off")
    assert "records: {enabled: true" in notice and "VOICE_AGENT_RECORDS_DIR" in notice
    assert not b.page.is_visible("#calls-box") and not b.page.is_visible("#access")
    assert b.page.evaluate("window.callsPage.errors") == []
    b.page.screenshot(path=str(screenshot_dir() / "calls-page-records-off.png"), full_page=True)
