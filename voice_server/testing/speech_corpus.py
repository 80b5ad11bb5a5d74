"""Real human speech with reference transcripts, from Debian packages.

Speech models must be judged on people, not only on synthetic voices (a
recogniser can score 9% on flite and 32% on a person).  The recordings come
from two Debian packages: ``pocketsphinx-testdata`` (LibriVox read speech,
spoken card names, "go forward ten meters") and ``alsa-utils`` (the speaker
test phrases).  They are read where the packages are installed (``make``
installs them); elsewhere they are fetched with ``apt-get download`` and
unpacked with ``dpkg -x`` into a cache folder, without installing anything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soxr

from runtime.models.voice_contract import LISTEN_RATE_HZ

PACKAGES = ("pocketsphinx-testdata", "alsa-utils")
_PS_DATA = Path("usr/share/pocketsphinx/test/data")
_ALSA = Path("usr/share/sounds/alsa")
_ALSA_PHRASES = {"Front_Center": "front center", "Front_Left": "front left",
                 "Front_Right": "front right", "Rear_Center": "rear center",
                 "Rear_Left": "rear left", "Rear_Right": "rear right",
                 "Side_Left": "side left", "Side_Right": "side right"}


class CorpusUnavailable(RuntimeError):
    """The recordings are neither installed nor fetchable here (no apt)."""


@dataclass(frozen=True)
class Clip:
    """One recording: 16 kHz mono float32 samples and what was said."""

    name: str
    group: str          # "librivox" (read sentences, 3-7 s), "commands" (1-3 s), "cards"
    text: str
    audio: np.ndarray

    @property
    def seconds(self) -> float:
        return self.audio.size / LISTEN_RATE_HZ


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "voice-agent" / "speech-corpus"


def _root(cache_dir: Path | None) -> Path:
    """A folder under which both packages' files lie: / when installed, else the cache."""
    if (Path("/") / _PS_DATA).is_dir() and (Path("/") / _ALSA).is_dir():
        return Path("/")
    cache = cache_dir or default_cache_dir()
    if (cache / _PS_DATA).is_dir() and (cache / _ALSA).is_dir():
        return cache
    if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
        raise CorpusUnavailable("human speech clips need the Debian packages "
                                f"{' and '.join(PACKAGES)} (apt-get is not available here)")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        got = subprocess.run(["apt-get", "download", *PACKAGES], cwd=tmp, capture_output=True,
                             text=True, timeout=300)
        debs = sorted(Path(tmp).glob("*.deb"))
        if got.returncode != 0 or len(debs) < len(PACKAGES):
            raise CorpusUnavailable("apt-get download " + " ".join(PACKAGES) + " failed: "
                                    + (got.stderr.strip().splitlines() or ["no output"])[-1])
        for deb in debs:
            subprocess.run(["dpkg", "-x", str(deb), str(cache)], check=True, timeout=120)
    return cache


def _read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path)) as w:
        if w.getsampwidth() != 2:
            raise ValueError(f"{path}: expected 16-bit PCM")
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
        if w.getnchannels() > 1:
            x = x.reshape(-1, w.getnchannels()).mean(axis=1)
        rate = w.getframerate()
    return _to_16k(x, rate)


def _to_16k(x: np.ndarray, rate: int) -> np.ndarray:
    if rate != LISTEN_RATE_HZ:
        x = soxr.resample(x, rate, LISTEN_RATE_HZ)
    return np.ascontiguousarray(x, dtype=np.float32)


def _sphinx_transcripts(path: Path) -> dict[str, str]:
    """``<s> words </s> (id)`` lines -> {id: words}."""
    out = {}
    for line in path.read_text().splitlines():
        if "(" not in line:
            continue
        words, _, rest = line.rpartition("(")
        text = words.replace("<s>", " ").replace("</s>", " ")
        out[rest.rstrip(") \n")] = " ".join(text.split())
    return out


def human_clips(cache_dir: Path | None = None) -> list[Clip]:
    """Every clip with its reference text, in a fixed order."""
    root = _root(cache_dir)
    data = root / _PS_DATA
    clips: list[Clip] = []
    for cid, text in sorted(_sphinx_transcripts(data / "librivox" / "transcription").items()):
        # the reference spells out a stutter ("a more a amiable"): keep it, it was said
        clips.append(Clip(cid, "librivox", text, _read_wav(data / "librivox" / f"{cid}.wav")))
    for cid, text in sorted(_sphinx_transcripts(data / "cards" / "cards.transcription").items()):
        clips.append(Clip(f"cards-{cid}", "cards", text, _read_wav(data / "cards" / f"{cid}.wav")))
    raw = np.fromfile(data / "goforward.raw", dtype="<i2").astype(np.float32) / 32768.0
    clips.append(Clip("goforward", "commands", "go forward ten meters", raw))
    for stem, text in _ALSA_PHRASES.items():
        clips.append(Clip(f"alsa-{stem}", "commands", text, _read_wav(root / _ALSA / f"{stem}.wav")))
    return clips


def speaker_of(clip: Clip) -> str:
    """Who said a clip: the LibriVox sentences are one reader, the card names one
    person, "go forward" another, the alsa phrases a fourth (a voice-lock test's
    "caller" and "someone else" must be different people)."""
    if clip.name.startswith("alsa-"):
        return "alsa"
    return "goforward" if clip.name == "goforward" else clip.group


def phone_line(audio: np.ndarray) -> np.ndarray:
    """What a telephony caller's words sound like here: 8 kHz G.711 mu-law, decoded to int16.

    Twilio Media Streams carry exactly this; the listen stage gets it at 8 kHz
    and resamples, so a benchmark or test can measure recognition on it.
    """
    from voice_server.audio_codec import mulaw_decode, mulaw_encode

    pcm8k = np.clip(soxr.resample(np.asarray(audio, np.float32), LISTEN_RATE_HZ, 8000), -1.0, 1.0)
    return mulaw_decode(mulaw_encode((pcm8k * 32767).astype(np.int16)))
