"""Per-request voice and speed, the offline voice guard, and abort within one clause."""

from __future__ import annotations

import urllib.request

import pytest

from runtime.errors import ErrorCode, StageError
from runtime.executor import WorkItem
from runtime.models.speak import tts_hibari
from runtime.models.speak.executor import SpeakExecutor
from runtime.models.speak.voices import OPENAI_VOICES, resolve_voice, voice_names

LONG_REPLY = ("Sure, I can help with that. Your order left our warehouse this morning. "
              "It should arrive on Thursday. The driver will call before delivery. "
              "You can track it on our website. Is there anything else I can do?")


@pytest.fixture(autouse=True)
def no_network(monkeypatch, tmp_path):
    """hibari downloads missing voices with urllib: any attempt fails the test.
    An empty HIBARI_HOME means only the bundled voice is on disk."""
    monkeypatch.setenv("HIBARI_HOME", str(tmp_path))

    def refuse(*a, **k):
        raise AssertionError(f"a voice download was attempted: {a!r}")
    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def test_openai_names_map_to_installed_voices():
    assert tts_hibari.installed_voices() == {"heart": "female"}
    for name in OPENAI_VOICES:            # one voice installed: every name is it
        assert resolve_voice(name, "hibari") == "heart"
    assert resolve_voice(None, "hibari") == "heart"
    assert resolve_voice("heart", "hibari") == "heart"
    # flite has both genders: the male names get a male voice
    assert resolve_voice("marin", "flite") == "slt"
    assert resolve_voice("cedar", "flite") == "kal"
    assert resolve_voice("alloy", "flite", default="awb") == "slt"
    # OpenAI's names, the engine's own voices, then every other shipped voice
    names = voice_names("hibari")
    assert names[len(OPENAI_VOICES)] == "heart" and "alloy" in names and {"es", "slt"} <= set(names)


def test_missing_voice_is_an_error_not_a_download():
    with pytest.raises(ValueError, match="not installed"):
        resolve_voice("emma", "hibari")          # in hibari's registry, not on disk
    with pytest.raises(ValueError, match="never downloaded"):
        tts_hibari.HibariSynthesizer("fenrir")
    with pytest.raises(ValueError, match="unknown voice 'nobody'"):
        resolve_voice("nobody", "hibari")
    with pytest.raises(ValueError, match="not installed"):
        SpeakExecutor(engine="hibari", voice="kore").load()


def test_request_voice_and_speed_are_checked(hibari):
    for params in ({"voice": "nobody"}, {"voice": "emma"}, {"speed": 0.1},
                   {"speed": "fast"}, {"speed": True}, {"speed": 4.5}):
        with pytest.raises(StageError) as err:
            hibari.open(99, params)
        assert err.value.code == ErrorCode.BAD_INPUT
    hibari.open(99, {"voice": "verse", "speed": 1.5})
    hibari.release(99)


@pytest.mark.parametrize("engine", ["hibari", "flite", "espeak"])
def test_speed_changes_the_pace(engine):
    ex = SpeakExecutor(engine=engine)
    ex.load()
    text = "The meeting has moved to Thursday afternoon."
    lengths = {}
    for speed in (0.5, 1.0, 1.5):
        ex.open(1, {"speed": speed})
        [[chunk]] = ex.process([WorkItem(1, text, {}, final=True)])
        ex.release(1)
        lengths[speed] = chunk["audio"].size
    assert lengths[0.5] > lengths[1.0] * 1.3 and lengths[1.5] < lengths[1.0] * 0.85, lengths
    ex.close()


def test_first_clause_before_the_rest_of_the_reply_arrives(hibari):
    """Streamed deltas: the first clause is spoken while most of the reply is unwritten."""
    hibari.open(7, {})
    try:
        first_at = None
        pieces = [LONG_REPLY[i:i + 4] for i in range(0, len(LONG_REPLY), 4)]
        for k, piece in enumerate(pieces):
            [out] = hibari.process([WorkItem(7, piece, {}, final=k == len(pieces) - 1)])
            if out and first_at is None:
                first_at = k
                assert out[0]["sample_rate"] == 24000 and out[0]["audio"].size > 0
        assert first_at is not None and first_at * 4 < len(LONG_REPLY) / 4
    finally:
        hibari.release(7)


def test_abort_stops_a_long_reply_within_one_clause(hibari):
    """A whole reply in one piece: one clause is spoken per call, and once the
    request is released (an abort) nothing more is synthesised."""
    before = hibari.stats()["clauses"]
    hibari.open(8, {})
    [out] = hibari.process([WorkItem(8, LONG_REPLY, {}, final=True)])
    assert len(out) == 1 and out[0]["text"] == "Sure,"
    assert hibari.pending(8) and hibari.has_results()
    [(rid, more)] = hibari.collect()              # the loop's next turn: one more clause
    assert rid == 8 and len(more) == 1
    hibari.release(8)                              # the abort arrives
    assert not hibari.has_results() and not hibari.pending(8)
    assert hibari.collect() == []
    assert hibari.stats()["clauses"] - before == 2
    assert hibari.stats()["queued"] == 0
