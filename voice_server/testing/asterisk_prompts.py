"""Recordings of people speaking Spanish, French and Italian: Asterisk's
telephone prompts, from Debian packages.

Language detection was judged on synthetic voices only (espeak-ng, Kokoro,
hibari), and a voice decides more than a language does there.  These are
people: six speakers, each reading 169 to 375 telephone prompts of a phrase
or a sentence ("Press 2 to call the person who sent this message"),
recorded at 8 kHz.  That is the telephone band a phone caller arrives in,
but read clearly by voice talents in a studio, not spoken as callers speak
on a noisy line.

- ``asterisk-core-sounds-es-wav``: es (Mexico), Allison Smith (f), CC-BY-SA-3.0
- ``asterisk-prompt-es-co``: es (Colombia), July E. Jiménez (f), GPL-2
- ``asterisk-core-sounds-fr-wav``: fr (Canada), June Wallack (f), CC-BY-SA-3.0
- ``asterisk-prompt-fr-armelle``: fr, Armelle Desjardins (f), GPL-2+
- ``asterisk-core-sounds-it-wav``: it, Carlo Flora (m), CC-BY-3.0
- ``asterisk-prompt-it-menardi-wav``: it, Paola Dal Zot (f), CC-BY-SA-3.0

They are for benchmarks only: ``make bench-data`` installs them (``make
setup`` does not).  Only the prompts of a sentence or a phrase are read: the
single-word folders (``digits/``, ``letters/``, ``phonetic/``) and the tones
are left out.  A package's files are taken from its own file list
(``dpkg-query -L``), since ``asterisk-prompt-es-co`` and
``asterisk-prompt-fr-armelle`` write into the shared ``sounds/es`` and
``sounds/fr`` folders.  The two GSM packages hold raw GSM 6.10 frames,
decoded with ``sox`` (one of ``make setup``'s Debian packages).
"""

from __future__ import annotations

import shutil
import subprocess
import wave
from dataclasses import dataclass
from pathlib import PurePosixPath

import numpy as np
import soxr

from runtime.models.voice_contract import LISTEN_RATE_HZ

SOUNDS = PurePosixPath("/usr/share/asterisk/sounds")
# Tones and beeps, not speech, in the same folders as the prompts.
NOT_SPEECH = frozenset({"beep", "beeperr", "ascending-2tone", "descending-2tone"})
PROMPT_RATE_HZ = 8000


class RecordingsUnavailable(RuntimeError):
    """A speaker's package is not installed here (``make bench-data``), or
    ``sox`` is missing for its GSM files."""


@dataclass(frozen=True)
class Speaker:
    """One person's prompts: which package holds them and where."""

    name: str                      # short and unique: "allison"
    language: str                  # ISO 639-1, as Whisper names it
    package: str                   # the Debian package
    folder: str                    # under SOUNDS
    subfolders: tuple[str, ...]    # sentence-level folders below it ("" is the folder itself)
    suffix: str                    # ".wav" (16-bit PCM) or ".gsm" (raw GSM 6.10)


SPEAKERS = (
    Speaker("allison", "es", "asterisk-core-sounds-es-wav", "es_MX_f_Allison",
            ("", "dictate", "followme"), ".wav"),
    Speaker("july", "es", "asterisk-prompt-es-co", "es", ("",), ".gsm"),
    Speaker("june", "fr", "asterisk-core-sounds-fr-wav", "fr_CA_f_June",
            ("", "dictate", "followme"), ".wav"),
    Speaker("armelle", "fr", "asterisk-prompt-fr-armelle", "fr", ("",), ".gsm"),
    Speaker("carlo", "it", "asterisk-core-sounds-it-wav", "it_IT_m_Carlo",
            ("", "dictate", "followme"), ".wav"),
    Speaker("menardi", "it", "asterisk-prompt-it-menardi-wav", "it_IT_f_Menardi",
            ("", "dictate", "followme"), ".wav"),
)
LANGUAGES = tuple(sorted({s.language for s in SPEAKERS}))
PACKAGES = tuple(s.package for s in SPEAKERS)


@dataclass(frozen=True)
class Clip:
    """One prompt: 16 kHz mono float32 samples, its language and its speaker."""

    name: str          # its path under SOUNDS, no suffix: "es_MX_f_Allison/dictate/forhelp"
    language: str
    speaker: str
    audio: np.ndarray

    @property
    def seconds(self) -> float:
        return self.audio.size / LISTEN_RATE_HZ


def speakers_of(language: str) -> list[Speaker]:
    """The speakers of ``language`` (none for a language no package has)."""
    return [s for s in SPEAKERS if s.language == language]


def missing_packages(speakers: tuple[Speaker, ...] | list[Speaker] = SPEAKERS) -> list[str]:
    """Which of these speakers' packages are not installed here."""
    return [s.package for s in speakers if not _installed(s.package)]


def _installed(package: str) -> bool:
    if shutil.which("dpkg-query") is None:
        return False
    got = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True,
                         text=True, timeout=30)
    return got.returncode == 0 and "install ok installed" in got.stdout


def prompt_paths(speaker: Speaker) -> list[PurePosixPath]:
    """The speaker's sentence-level prompts, sorted; raises
    :class:`RecordingsUnavailable` when the package is not installed."""
    if not _installed(speaker.package):
        raise RecordingsUnavailable(f"{speaker.package} is not installed (make bench-data)")
    listed = subprocess.run(["dpkg-query", "-L", speaker.package], capture_output=True,
                            text=True, timeout=30, check=True).stdout.split("\n")
    folders = {SOUNDS / speaker.folder / sub if sub else SOUNDS / speaker.folder
               for sub in speaker.subfolders}
    paths = [PurePosixPath(line) for line in listed if line.endswith(speaker.suffix)]
    return sorted(p for p in paths if p.parent in folders and p.stem not in NOT_SPEECH)


def speaker_clips(speaker: Speaker, limit: int | None = None) -> list[Clip]:
    """The speaker's prompts (the first ``limit`` of :func:`prompt_paths`), at 16 kHz."""
    if speaker.suffix == ".gsm" and shutil.which("sox") is None:
        raise RecordingsUnavailable(f"{speaker.package}'s GSM prompts need sox (make setup)")
    return [Clip(str(p.relative_to(SOUNDS).with_suffix("")), speaker.language, speaker.name,
                 _read(p)) for p in prompt_paths(speaker)[:limit]]


def _read(path: PurePosixPath) -> np.ndarray:
    pcm = _read_gsm(path) if path.suffix == ".gsm" else _read_wav(path)
    x = pcm.astype(np.float32) / 32768.0
    return np.ascontiguousarray(soxr.resample(x, PROMPT_RATE_HZ, LISTEN_RATE_HZ), np.float32)


def _read_wav(path: PurePosixPath) -> np.ndarray:
    with wave.open(str(path)) as w:
        if (w.getsampwidth(), w.getnchannels(), w.getframerate()) != (2, 1, PROMPT_RATE_HZ):
            raise ValueError(f"{path}: expected 16-bit mono {PROMPT_RATE_HZ} Hz PCM")
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")


def _read_gsm(path: PurePosixPath) -> np.ndarray:
    # raw GSM 6.10 has no header: sox is told the rate; libsndfile could read it
    # too, but soundfile is no dependency of the project and sox is
    out = subprocess.run(["sox", "-t", "gsm", "-r", str(PROMPT_RATE_HZ), "-c", "1", str(path),
                          "-t", "raw", "-e", "signed", "-b", "16", "-L", "-"],
                         capture_output=True, timeout=60, check=True).stdout
    return np.frombuffer(out, dtype="<i2")
