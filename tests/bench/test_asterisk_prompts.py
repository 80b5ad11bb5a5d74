"""The reader of people's Spanish, French and Italian recordings
(voice_server/testing/asterisk_prompts.py) on the packages ``make bench-data``
installs: skipped where they are not installed (``make setup`` leaves them out)."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest

from voice_server.testing.asterisk_prompts import (
    NOT_SPEECH,
    SPEAKERS,
    missing_packages,
    prompt_paths,
    speaker_clips,
)

MISSING = missing_packages()
pytestmark = pytest.mark.skipif(
    bool(MISSING), reason="people's es/fr/it recordings not installed (make bench-data): "
                          + " ".join(MISSING))
GSM_FRAME_BYTES, GSM_FRAME_SAMPLES = 33, 160


def samples_at_8k(path: Path) -> int:
    """The prompt's length as recorded (8 kHz), read from the file itself."""
    if path.suffix == ".gsm":
        return path.stat().st_size // GSM_FRAME_BYTES * GSM_FRAME_SAMPLES
    with wave.open(str(path)) as w:
        return w.getnframes()


@pytest.mark.parametrize("speaker", SPEAKERS, ids=[s.name for s in SPEAKERS])
def test_a_speakers_first_prompts_load_at_16k(speaker) -> None:
    clips = speaker_clips(speaker, limit=3)
    assert len(clips) == 3
    for clip, path in zip(clips, prompt_paths(speaker)):
        assert clip.audio.size == 2 * samples_at_8k(Path(path))     # 8 kHz -> 16 kHz
        assert (clip.language, clip.speaker) == (speaker.language, speaker.name)
        assert clip.name.startswith(speaker.folder + "/")
        assert clip.audio.dtype == np.float32 and clip.audio.ndim == 1
        # a prompt of a phrase or more, read aloud: not silence, not clipped noise
        assert 0.3 < clip.seconds < 30
        assert 0.005 < float(np.sqrt(np.mean(clip.audio ** 2))) < 0.5


@pytest.mark.parametrize("speaker", SPEAKERS, ids=[s.name for s in SPEAKERS])
def test_only_sentence_level_prompts_are_listed(speaker) -> None:
    paths = prompt_paths(speaker)
    assert len(paths) > 150      # each person reads 169 to 375 of them
    for p in paths:
        assert p.stem not in NOT_SPEECH
        assert not {"digits", "letters", "phonetic", "silence"} & set(p.parts)
        assert p.suffix == speaker.suffix
