"""The web demo in a real browser: headless Chromium, a fake microphone playing
flite speech, the real server in-process (see conftest.py).

What happens inside the page is read from ``window.voiceDemo`` (counters,
marks in page time, transcripts, errors).  Timelines: the fake microphone
plays the WAV once from the moment capture starts; ``marks.micStartAt`` is
the page time of its first sample, so a WAV offset ``x`` ms is page time
``micStartAt + x``.  The server's ``audio_start_ms`` is on the same input
timeline (the page sends the microphone from its first sample), which the
tests check before they rely on it.
"""

from __future__ import annotations


import numpy as np
import pytest

from .conftest import API_KEY, MIC_RATE, screenshot_dir, silence, speech
from voice_server.testing.response_status import ANSWERED

pytestmark = pytest.mark.timeout(150)

Q1 = "what is the capital of france"
STORY = "tell me a long story about a cat"
MOON = "tell me about the moon"
LEAD_MS = 500
# How far the server's onset may be from the WAV's: the VAD's 32 ms frames and
# its onset rule, plus the fake microphone's start on a loaded machine (one CI
# run put it 160 ms late while the other worker loaded both cores).  A page that
# streamed from the wrong sample is off by its silence lead or more (500 ms).
ALIGN_MS = 250


def onset_ms(pcm: np.ndarray, threshold: float = 0.01) -> float:
    """First 10 ms window of ``pcm`` (48 kHz int16) whose RMS is above threshold."""
    x = pcm.astype(np.float64) / 32768.0
    w = MIC_RATE // 100
    r = np.sqrt(np.convolve(x * x, np.ones(w) / w, "valid"))
    return float(np.argmax(r > threshold)) * 1000.0 / MIC_RATE


def start_talking(b, base_url: str, transport: str = "websocket") -> None:
    q = "aec=0" + ("&transport=webrtc" if transport == "webrtc" else "")
    b.open(base_url, q)
    b.page.fill("#api-key", API_KEY)
    b.page.click("#talk")
    b.wait("window.voiceDemo.state === 'connected'", 20, "session.created")


def wait_reply_played(b, n: int = 1, timeout_s: float = 40.0) -> None:
    """n responses done and all received audio played (or playback idle)."""
    b.wait(f"""(() => {{
        const d = window.voiceDemo;
        const done = d.agent.filter(a => a.status !== 'in_progress').length;
        return done >= {n} && d.counters.playedMs >= d.counters.receivedMs - 30
               && d.counters.lastLevel < 0.001;
    }})()""", timeout_s, f"{n} replies done and played")


def assert_timeline_aligned(d: dict, wav_onset_ms: float) -> None:
    """The server's onset of the first utterance (input timeline) matches the
    WAV: the page streamed the microphone from its first sample."""
    ss = d["marks"]["speechStarted"][0]
    assert abs(ss["audioStartMs"] - wav_onset_ms) < ALIGN_MS, (ss, wav_onset_ms)


# ------------------------------------------------------------------ (1) WebSocket

def test_websocket_turn(demo_server, launch):
    q = speech(Q1)
    b = launch([silence(LEAD_MS), q, silence(9000)])
    start_talking(b, demo_server.base_url)
    wait_reply_played(b)
    d = b.demo()
    assert d["transport"] == "websocket"
    assert d["errors"] == [], d["errors"]
    assert_timeline_aligned(d, LEAD_MS + onset_ms(q))
    # the question, transcribed, is on the page
    assert d["user"] and d["user"][0]["final"], d["user"]
    heard = d["user"][0]["text"].lower()
    assert "capital" in heard and "france" in heard, d["user"]
    assert "capital" in b.page.inner_text(".bubble.user .text")
    # the reply streamed as text and played as audio in the page
    a = d["agent"][0]
    assert a["status"] in ANSWERED, a   # incomplete: max_output_tokens cut the reply
    assert len(a["text"].split()) >= 2, a
    assert b.page.inner_text(".bubble.agent .text").strip().startswith(a["text"][:20])
    c = d["counters"]
    assert c["receivedMs"] > 500, c
    assert c["playedMs"] >= c["receivedMs"] - 30, c  # all of it, at the context rate
    assert c["loudMs"] > 300 and c["maxLevel"] > 0.05, c
    assert c["micChunks"] > 100 and c["micMs"] > 4000, c
    # latency readout: end of speech (speech_stopped) -> first audio played
    assert len(d["latencies"]) == 1 and 0 < d["latencies"][0] < 5000, d["latencies"]
    shown = b.page.inner_text("#latency")
    assert shown == f"{d['latencies'][0]} ms", shown
    assert b.page.inner_text("#state").startswith("connected")
    b.page.screenshot(path=str(screenshot_dir() / "demo-ws.png"))


# ------------------------------------------------------------------ (2) barge-in

def test_barge_in_stops_playback(demo_server, launch):
    """A second utterance starting while the reply plays stops local playback
    at once; the reply's text is shown cut where the audio was cut."""
    story, moon = speech(STORY), speech(MOON)
    # the reply starts 1-2.5 s after the question ends (a loaded 2-core machine;
    # later still while the other test worker loads both cores) and lasts 4-10 s:
    # 4 s in, it is playing (at 3 s a late start had only its first clause out)
    gap_ms = 4000
    b = launch([silence(LEAD_MS), story, silence(gap_ms), moon, silence(4000)])
    start_talking(b, demo_server.base_url)
    b.wait("window.voiceDemo.marks.speechStarted.length >= 2", 40, "the second speech_started")
    b.wait("window.voiceDemo.marks.flushes.length >= 2 && "
           "window.voiceDemo.marks.flushes[1].ackAt !== null", 5, "flush ack")
    b.page.wait_for_timeout(300)  # the truncate round trip
    b.page.screenshot(path=str(screenshot_dir() / "demo-barge-in.png"))
    d = b.demo()
    assert d["errors"] == [], d["errors"]
    assert_timeline_aligned(d, LEAD_MS + onset_ms(story))
    m = d["marks"]
    second = m["speechStarted"][1]
    flush = next(f for f in m["flushes"] if f["reason"] == "speech_started" and f["t"] >= second["t"])
    assert flush["wasPlaying"] and flush["dropped"] > 0, \
        f"the reply was not playing when the user spoke again: {flush} {d['agent']}"
    # onset of the second utterance in page time (WAV timeline), cross-checked
    wav_onset = LEAD_MS + story.size * 1000 / MIC_RATE + gap_ms + onset_ms(moon)
    onset_at = m["micStartAt"] + wav_onset
    assert abs(second["audioStartMs"] - wav_onset) < ALIGN_MS, (second, wav_onset)
    # playback ended where the player dropped its queue (the reply may have been
    # in a pause between clauses then: its last loud block is earlier still)
    stop_at = flush["stoppedAt"]
    assert flush["lastLoudAt"] is not None and flush["lastLoudAt"] <= stop_at + 5, flush
    page_ms = stop_at - flush["t"]  # speech_started received -> playback stopped
    server_ms = flush["t"] - onset_at  # onset -> speech_started received
    total_ms = stop_at - onset_at
    print(f"barge-in: onset->speech_started {server_ms:.0f} ms (server VAD), "
          f"speech_started->silent {page_ms:.0f} ms (page), total {total_ms:.0f} ms")
    # the page drops its queue when speech_started comes (how soon is measured by
    # benchmarks/turn_bench.py, "stop (web demo)": no timing is asserted here)
    assert page_ms > -5, (page_ms, flush)
    # nothing non-silent was played after the flush (in output frames: two page
    # times of one frame, converted at different moments, differ by up to ~10 ms)
    assert m["lastLoudFrame"] is None or m["lastLoudFrame"] <= flush["stoppedFrame"] or \
        any(x["t"] > flush["t"] for x in m["firstAudioAt"]), m
    # the reply is shown cut where it was cut
    cut = [a for a in d["agent"] if a["cut"]]
    assert len(cut) == 1, d["agent"]
    a = cut[0]
    assert 0 < a["cutMs"] < a["receivedMs"], a
    assert a["text"].startswith(a["heardText"]) and len(a["heardText"]) < len(a["text"]), a
    assert d["counters"]["truncates"] == 1
    bubble = b.page.locator(f".bubble.agent[data-id='{a['itemId']}']")
    assert "cut" in bubble.get_attribute("class")
    assert bubble.locator(".heard").inner_text() == a["heardText"]
    assert bubble.locator(".unheard").inner_text().strip()
    assert "interrupted" in bubble.locator(".tag").inner_text()
    ev = [e["type"] for e in d["events"]]
    assert "conversation.item.truncated" in ev, ev[-20:]
    # the interruption becomes the next turn
    b.wait("window.voiceDemo.user.length >= 2 && window.voiceDemo.user[1].final", 20,
           "the second transcript")
    d = b.demo()
    assert "moon" in d["user"][1]["text"], d["user"]
    b.page.set_viewport_size({"width": 390, "height": 844})
    b.page.screenshot(path=str(screenshot_dir() / "demo-barge-in-phone.png"))


# ------------------------------------------------------------------ (3) in-band failure

def test_pipeline_failure_shows_error_and_next_turn_works(demo_fault_server, launch):
    """tests/server/fault-pipeline.yaml: the speak stage fails its 1st request
    after the first audio chunk; the 2nd works."""
    b = launch([silence(LEAD_MS), speech("hello there"), silence(4000),
                speech("are you there"), silence(6000)])
    start_talking(b, demo_fault_server.base_url)
    b.wait("window.voiceDemo.agent.length >= 1 && window.voiceDemo.agent[0].status === 'failed'",
           30, "the first reply fails")
    b.wait("window.voiceDemo.errors.length >= 2", 5, "error event + failed response shown")
    d = b.demo()
    codes = {e["code"] for e in d["errors"]}
    assert "resource_exhausted" in codes, d["errors"]
    assert {e["source"] for e in d["errors"]} >= {"server", "response failed"}, d["errors"]
    assert b.page.is_visible("#errors-box")
    assert "resource_exhausted" in b.page.inner_text("#errors")
    assert "failed" in b.page.locator(".bubble.agent").first.get_attribute("class")
    b.page.screenshot(path=str(screenshot_dir() / "demo-error.png"))
    # the next turn works in the same session
    b.wait("window.voiceDemo.agent.length >= 2 && window.voiceDemo.agent[1].status === 'completed'",
           40, "the second reply completes")
    wait_reply_played(b, 2)
    d = b.demo()
    assert d["state"] == "connected"
    assert d["agent"][1]["receivedMs"] > 500 and d["agent"][1]["text"].startswith("Hello"), d["agent"]
    assert len(d["latencies"]) >= 1
    assert len(d["errors"]) == 2, d["errors"]


# ------------------------------------------------------------------ (4) WebRTC

def test_webrtc_turn(demo_server, launch):
    q = speech(Q1)
    b = launch([silence(LEAD_MS), q, silence(9000)])
    start_talking(b, demo_server.base_url, "webrtc")
    b.wait("window.voiceDemo.agent.length >= 1 && "
           "window.voiceDemo.agent[0].status !== 'in_progress'", 40, "the reply")
    b.wait("window.voiceDemo.events.some(e => e.type === 'output_audio_buffer.stopped')", 20,
           "output_audio_buffer.stopped")
    b.page.wait_for_timeout(300)  # the tail of the remote track
    d = b.demo()
    assert d["transport"] == "webrtc"
    assert d["usedClientSecret"], "the page should mint a client secret when given a key"
    assert d["errors"] == [], d["errors"]
    assert d["user"] and "capital" in d["user"][0]["text"], d["user"]
    assert d["agent"][0]["status"] in ANSWERED and d["agent"][0]["text"], d["agent"]
    ev = [e["type"] for e in d["events"]]
    assert ev[0] == "session.created", ev[:5]
    assert "output_audio_buffer.started" in ev, ev
    # the reply's audio came on the remote track and played in the page
    c = d["counters"]
    assert c["loudMs"] > 300 and c["maxLevel"] > 0.05, c
    assert len(d["latencies"]) == 1 and 0 < d["latencies"][0] < 5000, d["latencies"]
    assert b.page.inner_text("#latency") == f"{d['latencies'][0]} ms"
    b.page.screenshot(path=str(screenshot_dir() / "demo-webrtc.png"))


# ------------------------------------------------------------------ phone-sized

def test_phone_layout(demo_server, launch):
    """390x844: nothing overflows sideways; the talk button and the readouts fit."""
    b = launch([silence(1000)])
    b.page.set_viewport_size({"width": 390, "height": 844})
    b.open(demo_server.base_url)
    width = b.page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, width
    for sel in ("#talk", "#state", "#latency", "#mic-meter", "#log"):
        box = b.page.locator(sel).bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390, (sel, box)
    talk = b.page.locator("#talk").bounding_box()
    assert talk["height"] >= 44, talk  # a thumb-sized target
    b.page.screenshot(path=str(screenshot_dir() / "demo-phone.png"), full_page=True)
