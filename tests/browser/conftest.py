"""Browser tests of the web demo (web_demo/, served at /): headless Chromium
(the Debian binary, driven by Playwright) with a fake microphone that plays a
WAV generated at test time, against the real server in-process.

The servers are voice_server.testing.ServerThread (uvicorn on
127.0.0.1, a free port, the real CPU pipeline).  Fails with the reason when Chromium
or Playwright is missing.
"""

from __future__ import annotations

import os
import tempfile
import time
import wave
from pathlib import Path

import numpy as np
import pytest

from voice_server.testing import ServerThread
from voice_server.testing.audio import flite_pcm
from tests.server.conftest import API_KEY, ROOT
from voice_server.settings import ServerSettings
from tests.requirements import missing

MIC_RATE = 48000  # Chrome's fake capture device reads 16-bit WAV; 48 kHz mono
CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "/usr/bin/chromium",
                       "/usr/bin/chromium-browser", "/usr/bin/google-chrome")


def chromium_path() -> str | None:
    env = os.environ.get("VOICE_DEMO_CHROMIUM")
    if env:
        return env
    for p in CHROMIUM_CANDIDATES:
        if os.path.exists(p) and os.access(p, os.X_OK):
            return p
    return None


def screenshot_dir() -> Path:
    """Screenshots go outside git: $VOICE_DEMO_SCREENSHOTS or $TMPDIR/voice-demo."""
    d = Path(os.environ.get("VOICE_DEMO_SCREENSHOTS")
             or Path(tempfile.gettempdir()) / "voice-demo")
    d.mkdir(parents=True, exist_ok=True)
    return d


# ------------------------------------------------------------------ audio

def silence(ms: float) -> np.ndarray:
    return np.zeros(int(MIC_RATE * ms / 1000), dtype=np.int16)


def speech(text: str) -> np.ndarray:
    return flite_pcm(text, MIC_RATE)


def write_mic_wav(path: Path, parts: list[np.ndarray]) -> dict:
    """Concatenate ``parts`` into a 48 kHz mono 16-bit WAV; returns the
    timeline (start/end ms of each part)."""
    pcm = np.concatenate(parts).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(MIC_RATE)
        w.writeframes(pcm.tobytes())
    spans, t = [], 0.0
    for p in parts:
        d = p.size * 1000.0 / MIC_RATE
        spans.append((t, t + d))
        t += d
    return {"path": str(path), "spans": spans, "duration_ms": t}


# ------------------------------------------------------------------ browser

class Browser:
    """One headless Chromium whose microphone is ``wav`` (played once)."""

    def __init__(self, wav: str, *, extra_args: tuple[str, ...] = ()) -> None:
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        args = ["--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
                f"--use-file-for-fake-audio-capture={wav}%noloop",
                "--autoplay-policy=no-user-gesture-required",
                "--allow-loopback-in-peer-connection", "--disable-dev-shm-usage",
                "--no-sandbox", *extra_args]
        try:
            self.browser = self._pw.chromium.launch(executable_path=chromium_path(),
                                                    headless=True, args=args)
        except Exception:
            self._pw.stop()
            raise
        self.context = self.browser.new_context(permissions=["microphone"],
                                                viewport={"width": 1100, "height": 900})
        self.page = self.context.new_page()
        self.console: list[str] = []
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))

    def open(self, base_url: str, query: str = "") -> None:
        self.page.goto(base_url + "/" + (("?" + query) if query else ""))
        self.page.wait_for_function("window.voiceDemo && window.voiceDemo.ready === true",
                                    timeout=10000)

    def demo(self) -> dict:
        return self.page.evaluate("""() => {
            const d = window.voiceDemo;
            return JSON.parse(JSON.stringify({...d, events: d.events.slice(-400)}));
        }""")

    def wait(self, js: str, timeout_s: float = 30.0, what: str = "") -> None:
        try:
            self.page.wait_for_function(js, timeout=timeout_s * 1000, polling=50)
        except Exception as exc:
            d = self.demo()
            raise AssertionError(
                f"timed out waiting for {what or js}: state={d['state']} "
                f"errors={d['errors']} user={d['user']} agent={d['agent']} "
                f"counters={d['counters']} events={[e['type'] for e in d['events'][-30:]]} "
                f"console={self.console[-10:]}") from exc

    def close(self) -> None:
        for fn in (self.context.close, self.browser.close, self._pw.stop):
            try:
                fn()
            except Exception:  # noqa: BLE001
                pass


@pytest.fixture(scope="session")
def browser_ok():
    if chromium_path() is None:
        missing("Chromium is not installed (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing("Python playwright is not installed (pip install playwright)")
    return chromium_path()


@pytest.fixture
def launch(browser_ok, tmp_path):
    """launch(parts) -> Browser with a fake mic playing the concatenated parts."""
    opened: list[Browser] = []

    def _launch(parts: list[np.ndarray], name: str = "mic.wav"):
        info = write_mic_wav(tmp_path / name, parts)
        b = Browser(info["path"])
        b.timeline = info
        opened.append(b)
        return b

    yield _launch
    for b in opened:
        b.close()


# ------------------------------------------------------------------ servers

@pytest.fixture(scope="session")
def demo_server(browser_ok):
    """The real CPU pipeline behind the demo; WebRTC (when present) offers
    127.0.0.1 as its only ICE host.  Output unpaced (``output_lead_ms`` 0):
    the barge-in test checks how the page shows the part of a reply it
    received but did not play, which paced output keeps to a few hundred ms."""
    settings = ServerSettings.from_sources(
        {}, env={"VOICE_AGENT_ICE_HOSTS": "127.0.0.1"}, api_keys=[API_KEY], max_sessions=8,
        max_output_tokens=40, output_lead_ms=0)
    srv = ServerThread(str(ROOT / "configs" / "voice-cpu-fast.yaml"), settings).start()
    srv.base_url = f"http://127.0.0.1:{srv.port}"
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def demo_fault_server(browser_ok):
    srv = ServerThread(str(ROOT / "tests" / "server" / "fault-pipeline.yaml"),
                       ServerSettings(api_keys=[API_KEY])).start()
    srv.base_url = f"http://127.0.0.1:{srv.port}"
    yield srv
    srv.stop()


__all__ = ["API_KEY", "Browser", "speech", "silence", "screenshot_dir", "time"]
