"""Test audio: flite speech generated at test time, resampled with soxr, and a
real-time streamer that sends it as ``input_audio_buffer.append`` frames."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import tempfile
import time
import wave

import numpy as np

from voice_server.audio_codec import resample

RATE = 24000
FRAME_MS = 20
_CACHE: dict[tuple, np.ndarray] = {}
_SYNTHS: dict[str, object] = {}


def flite_pcm(text: str, rate: int = RATE, voice: str = "slt", stretch: float = 1.0) -> np.ndarray:
    """int16 mono PCM of flite saying ``text`` at ``rate`` (``stretch`` > 1: slower)."""
    key = (text, rate, voice, stretch)
    if key not in _CACHE:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "q.wav")
            subprocess.run(["flite", "-voice", voice, "--setf", f"duration_stretch={stretch}",
                            "-t", text, "-o", path], check=True, capture_output=True, timeout=60)
            with wave.open(path, "rb") as w:
                sr = w.getframerate()
                pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
                if w.getnchannels() > 1:
                    pcm = pcm.reshape(-1, w.getnchannels())[:, 0]
        _CACHE[key] = resample(pcm, sr, rate)
    return _CACHE[key]


def caller_pcm(text: str, voice: str = "flite", rate: int = RATE) -> np.ndarray:
    """int16 mono PCM of a simulated caller saying ``text``: flite (``"flite"``,
    its default voice) or a hibari voice by name (``"heart"``).

    Both are synthetic.  flite's flat, narrow voice is misheard on short
    questions and its prosody reads unfinished, so the end-of-turn wait runs
    long on it; hibari's neural voice is closer to a person.  A benchmark that
    reports first audio says which one spoke."""
    if voice == "flite":
        return flite_pcm(text, rate)
    key = (text, rate, "hibari", voice)
    if key not in _CACHE:
        from runtime.models.speak.executor import make_synthesizer

        synth = _SYNTHS.get(voice) or _SYNTHS.setdefault(
            voice, make_synthesizer("hibari", voice, threads=2))
        _CACHE[key] = resample(synth.synthesize(text), synth.sample_rate, rate)
    return _CACHE[key]


def silence(ms: float, rate: int = RATE) -> np.ndarray:
    return np.zeros(int(rate * ms / 1000), dtype=np.int16)


def frames(pcm: np.ndarray, rate: int = RATE, frame_ms: int = FRAME_MS):
    n = rate * frame_ms // 1000
    for i in range(0, pcm.size, n):
        yield pcm[i:i + n]


def append_event(chunk: np.ndarray) -> str:
    return json.dumps({"type": "input_audio_buffer.append",
                       "audio": base64.b64encode(chunk.astype("<i2").tobytes()).decode()})


async def stream_realtime(send, pcm: np.ndarray, rate: int = RATE, frame_ms: int = FRAME_MS,
                          speed: float = 1.0) -> float:
    """Send ``pcm`` as append events paced at real time (``speed`` x); returns
    the monotonic time the last frame was sent."""
    t0 = time.monotonic()
    k = 0
    for chunk in frames(pcm, rate, frame_ms):
        await send(append_event(chunk))
        k += 1
        delay = t0 + k * frame_ms / 1000 / speed - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
    return time.monotonic()
