"""session.update merging, beta aliases, unsupported fields, effective values."""

import pytest

from session_helpers import events, new_session, of, one, types
from voice_server.session import ConfigureListen, Session, SessionSettings, StopListen
from voice_server.session.config import ServerLimits, apply_session_update
from voice_server.session.errors import ClientError


def _updated(cmds):
    return one(cmds, "session.updated")["session"]


def test_session_update_before_session_created_is_accepted():
    s = Session("sess_early")
    cmds = s.client_event({"type": "session.update", "session": {
        "type": "realtime", "instructions": "be nice"}}, 0)
    assert types(cmds) == ["session.created", "session.updated"]
    assert _updated(cmds)["instructions"] == "be nice"
    assert s.start(1) == []


def test_ga_update_with_unsupported_fields_is_applied_and_reported():
    s = new_session()
    cmds = s.client_event({"type": "session.update", "session": {
        "type": "realtime", "model": "gpt-realtime", "instructions": "short answers",
        "output_modalities": ["text"],
        "audio": {"input": {"format": {"type": "audio/pcmu"},
                            "transcription": {"model": "gpt-4o-transcribe"},
                            "noise_reduction": {"type": "near_field"},
                            "turn_detection": {"type": "semantic_vad", "eagerness": "high"}},
                  "output": {"format": {"type": "audio/pcma"}, "voice": "marin", "speed": 1.2}},
        "tools": [{"type": "function", "name": "f", "parameters": {}}],
        "tool_choice": "auto", "tracing": "auto", "max_output_tokens": 300,
        "truncation": "auto", "include": ["item.input_audio_transcription.logprobs"]}}, 0)
    sess = _updated(cmds)
    assert sess["instructions"] == "short answers"
    assert sess["output_modalities"] == ["text"]
    assert sess["audio"]["input"]["format"] == {"type": "audio/pcmu"}
    assert sess["audio"]["output"]["format"] == {"type": "audio/pcma"}
    assert sess["audio"]["input"]["turn_detection"] == {
        "type": "semantic_vad", "eagerness": "high", "create_response": True,
        "interrupt_response": True}
    assert sess["audio"]["input"]["transcription"] == {"model": "gpt-4o-transcribe"}
    assert sess["audio"]["input"]["noise_reduction"] == {"type": "near_field"}  # applied
    assert sess["audio"]["output"]["voice"] == "marin"
    assert sess["audio"]["output"]["speed"] == 1.2
    assert sess["tools"] == [{"type": "function", "name": "f",     # kept: function calling
                              "parameters": {"type": "object", "properties": {}}}]
    assert sess["tool_choice"] == "auto" and sess["tracing"] is None
    assert sess["max_output_tokens"] == 300
    assert s.settings.input_format.sample_rate == 8000
    [listen] = of(cmds, ConfigureListen)   # semantic end of turn goes to the listen stage
    assert listen.params["turn_mode"] == "semantic" and listen.params["eagerness"] == "high"
    assert listen.params["noise_reduction"] == "near_field"  # denoised before VAD and ASR


def test_semantic_vad_eagerness_is_validated_and_server_vad_restores_the_window():
    s = new_session()
    cmds = s.client_event({"type": "session.update", "session": {"type": "realtime", "audio": {
        "input": {"turn_detection": {"type": "semantic_vad", "eagerness": "eager"}}}}}, 0)
    [err] = [c.event for c in cmds if getattr(c, "event", {}).get("type") == "error"]
    assert err["error"]["param"].endswith("turn_detection.eagerness")
    assert s.settings.turn_detection.type == "server_vad"      # the bad update changed nothing
    cmds = s.client_event({"type": "session.update", "session": {"type": "realtime", "audio": {
        "input": {"turn_detection": {"type": "semantic_vad"}}}}}, 1)
    assert of(cmds, ConfigureListen)[0].params["eagerness"] == "auto"
    cmds = s.client_event({"type": "session.update", "session": {"type": "realtime", "audio": {
        "input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 700}}}}}, 2)
    params = of(cmds, ConfigureListen)[0].params
    assert params["turn_mode"] == "silence" and params["silence_duration_ms"] == 700


def test_beta_shape_aliases():
    s = new_session()
    cmds = s.client_event({"type": "session.update", "session": {
        "modalities": ["text", "audio"], "voice": "alloy", "input_audio_format": "g711_alaw",
        "output_audio_format": "pcm16", "max_response_output_tokens": "inf",
        "input_audio_transcription": {"model": "whisper-1"}, "temperature": 0.7,
        "turn_detection": {"type": "server_vad", "silence_duration_ms": 700}}}, 0)
    sess = _updated(cmds)
    assert sess["output_modalities"] == ["audio"]
    assert sess["audio"]["input"]["format"] == {"type": "audio/pcma"}
    assert sess["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert sess["max_output_tokens"] == "inf"
    assert sess["audio"]["input"]["turn_detection"]["silence_duration_ms"] == 700
    cfg = of(cmds, ConfigureListen)[0].params
    assert cfg["silence_duration_ms"] == 700 and cfg["threshold"] == 0.5


def test_turn_detection_merge_null_and_back():
    s = new_session()
    cmds = s.client_event({"type": "session.update", "session": {"audio": {"input": {
        "turn_detection": {"type": "server_vad", "threshold": 0.7, "prefix_padding_ms": 200,
                           "min_speech_ms": 120}}}}}, 0)
    assert of(cmds, ConfigureListen)[0].params == {"threshold": 0.7, "silence_duration_ms": 500,
                                                   "prefix_padding_ms": 200,
                                                   "min_speech_ms": 120, "turn_mode": "silence",
                                                   "eagerness": "auto", "noise_reduction": None,
                                                   "voice_lock": None}
    cmds = s.client_event({"type": "session.update", "session": {"audio": {"input": {
        "turn_detection": {"type": "server_vad", "idle_timeout_ms": 6000}}}}}, 0)
    td = _updated(cmds)["audio"]["input"]["turn_detection"]
    assert td["threshold"] == 0.7 and td["idle_timeout_ms"] == 6000  # merged
    assert not of(cmds, ConfigureListen)  # listen params unchanged
    cmds = s.client_event({"type": "session.update", "session": {"audio": {"input": {
        "turn_detection": None}}}}, 0)
    assert of(cmds, StopListen)
    cmds = s.client_event({"type": "session.update", "session": {"audio": {"input": {
        "turn_detection": {"type": "server_vad"}}}}}, 0)
    assert of(cmds, ConfigureListen)
    # an update that does not mention turn_detection leaves it alone
    cmds = s.client_event({"type": "session.update", "session": {"instructions": "x"}}, 0)
    assert _updated(cmds)["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    assert not of(cmds, ConfigureListen) and not of(cmds, StopListen)


def test_transcription_null_suppresses_transcription_events():
    from session_helpers import spoken_turn
    s = new_session()
    events(s.client_event({"type": "session.update", "session": {"audio": {"input": {
        "transcription": None}}}}, 0))
    t = types(spoken_turn(s, "hello"))
    assert not any(x.startswith("conversation.item.input_audio_transcription") for x in t)
    assert "conversation.item.done" in t and "response.created" in t


def test_pcm_rate_and_voice_object():
    st = apply_session_update(SessionSettings(), {"audio": {
        "input": {"format": {"type": "audio/pcm", "rate": 16000}},
        "output": {"voice": {"id": "marin"}}}})
    assert st.input_format.sample_rate == 16000 and st.voice == "marin"


@pytest.mark.parametrize("update,param", [
    ({"audio": {"output": {"voice": "voice_123"}}}, "session.audio.output.voice"),
    ({"audio": {"output": {"voice": {"id": "emma"}}}}, "session.audio.output.voice"),
    ({"voice": 7}, "session.voice"),
])
def test_unknown_voice_is_refused(update, param):
    """Only OpenAI's names and the speak engine's installed voices (ServerLimits.voices)."""
    with pytest.raises(ClientError) as err:
        apply_session_update(SessionSettings(), update)
    assert err.value.code == "invalid_value" and err.value.param == param
    assert "'alloy'" in err.value.message


def test_voice_and_speed_of_the_engine():
    limits = ServerLimits(voices=("alloy", "marin", "heart"))
    st = apply_session_update(SessionSettings(), {"voice": "heart"}, limits)
    assert st.voice == "heart"
    st = apply_session_update(st, {"audio": {"output": {"voice": "marin", "speed": 1.25}}}, limits)
    assert (st.voice, st.speed) == ("marin", 1.25)
    with pytest.raises(ClientError):
        apply_session_update(st, {"audio": {"output": {"speed": 1.6}}}, limits)


def test_beta_dialect_renames_output_events():
    from session_helpers import speak
    from voice_server.session import SendEvent, StartResponse
    s = Session("s", dialect="beta")
    s.start(0)
    c = s.listen_event({"type": "speech_started", "audio_start_ms": 0}, 0)
    c += s.listen_event({"type": "speech_stopped", "audio_end_ms": 500}, 0)
    c += s.listen_event({"type": "final", "text": "hi", "audio_start_ms": 0,
                         "audio_end_ms": 500}, 0)
    rid = of(c, StartResponse)[0].response_id
    c += s.response_chunk(rid, "speak", speak("Hello", 200), 1)
    c += s.response_finished(rid, "completed", None, 2)
    t = [x.event["type"] for x in c if isinstance(x, SendEvent)]
    assert "response.audio.delta" in t and "response.audio_transcript.delta" in t
    assert "response.audio.done" in t and "conversation.item.created" in t
    assert "response.output_audio.delta" not in t


def test_the_server_default_turn_detection_reaches_every_new_session():
    import pydantic
    import pytest

    from voice_server.settings import ServerSettings

    yaml_semantic = ServerSettings.from_sources(
        {"server": {"turn_detection": {"type": "semantic_vad", "eagerness": "high"}}}, env={})
    td = yaml_semantic.session_defaults().turn_detection
    assert (td.type, td.eagerness) == ("semantic_vad", "high")
    env = ServerSettings.from_sources({}, env={"VOICE_AGENT_TURN_DETECTION": "semantic_vad:low"})
    assert env.session_defaults("m").turn_detection.eagerness == "low"
    assert env.session_defaults("m").model == "m"
    assert ServerSettings.from_sources({}, env={}).session_defaults().turn_detection.type == \
        "server_vad"                                  # the Realtime default
    with pytest.raises(pydantic.ValidationError):
        ServerSettings.from_sources({}, env={"VOICE_AGENT_TURN_DETECTION": "psychic_vad"})
    s = Session("sess_d", yaml_semantic.session_defaults())
    [listen] = of(s.start(0), ConfigureListen)
    assert listen.params["turn_mode"] == "semantic" and listen.params["eagerness"] == "high"


def test_the_shipped_configs_start_sessions_on_semantic_vad():
    """benchmarks/turn_bench.py made semantic_vad (auto) the voice-cpu default."""
    from pathlib import Path

    from runtime.config import load_config
    from voice_server.settings import ServerSettings

    root = Path(__file__).resolve().parents[2] / "configs"
    for name in ("voice-cpu.yaml", "voice-cpu-fast.yaml", "voice-cpu-ray.yaml"):
        cfg = load_config(root / name, check_imports=False)
        td = ServerSettings.from_sources(cfg.extra, env={}).session_defaults().turn_detection
        assert (td.type, td.eagerness) == ("semantic_vad", "auto"), name


def test_the_ray_config_places_the_default_pipelines_own_stages():
    """voice-cpu-ray.yaml is voice-cpu.yaml on Ray: the same models and settings,
    so that a cluster's callers get the brain and voice a single machine's do."""
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2] / "configs"
    one, ray = (yaml.safe_load((root / n).read_text()) for n in ("voice-cpu.yaml", "voice-cpu-ray.yaml"))
    assert (ray["stages"], ray["edges"]) == (one["stages"], one["edges"])
    assert ray["placement"]["backend"] == "ray"


def test_noise_reduction_is_validated_echoed_and_reaches_the_listen_stage():
    s = new_session()
    cmds = s.client_event({"type": "session.update", "session": {"audio": {"input": {
        "noise_reduction": {"type": "far_field"}}}}}, 0)
    assert _updated(cmds)["audio"]["input"]["noise_reduction"] == {"type": "far_field"}
    assert of(cmds, ConfigureListen)[0].params["noise_reduction"] == "far_field"
    cmds = s.client_event({"type": "session.update", "session": {"audio": {"input": {
        "noise_reduction": {"type": "studio"}}}}}, 1)
    [err] = [c.event for c in cmds if getattr(c, "event", {}).get("type") == "error"]
    assert err["error"]["param"] == "session.audio.input.noise_reduction"
    assert s.settings.noise_reduction == "far_field"  # the bad update changed nothing
    cmds = s.client_event({"type": "session.update", "session": {"audio": {"input": {
        "noise_reduction": None}}}}, 2)
    assert _updated(cmds)["audio"]["input"]["noise_reduction"] is None
    assert of(cmds, ConfigureListen)[0].params["noise_reduction"] is None


def test_voice_lock_is_validated_echoed_and_reaches_the_listen_stage():
    s = new_session()
    cmds = s.client_event({"type": "session.update", "session": {
        "voice_agent": {"voice_lock": True}}}, 0)
    assert _updated(cmds)["voice_agent"] == {"voice_lock": True}
    assert of(cmds, ConfigureListen)[0].params["voice_lock"] is True
    cmds = s.client_event({"type": "session.update", "session": {
        "voice_agent": {"voice_lock": "yes"}}}, 1)
    [err] = [c.event for c in cmds if getattr(c, "event", {}).get("type") == "error"]
    assert err["error"]["param"] == "session.voice_agent.voice_lock"
    assert s.settings.voice_lock is True      # the bad update changed nothing
    cmds = s.client_event({"type": "session.update", "session": {
        "voice_agent": {"voice_lock": None}}}, 2)
    assert "voice_agent" not in _updated(cmds)
    assert of(cmds, ConfigureListen)[0].params["voice_lock"] is None


def test_server_defaults_for_noise_reduction_and_phone_silence():
    import pydantic
    import pytest

    from voice_server.settings import ServerSettings

    env = ServerSettings.from_sources({}, env={"VOICE_AGENT_NOISE_REDUCTION": "near_field",
                                               "VOICE_AGENT_PHONE_IDLE_TIMEOUT_MS": "5000",
                                               "VOICE_AGENT_PHONE_IDLE_HANG_UP_AFTER": "3"})
    assert env.session_defaults().noise_reduction == "near_field"
    s = Session("sess_n", env.session_defaults())
    [listen] = of(s.start(0), ConfigureListen)
    assert listen.params["noise_reduction"] == "near_field"
    assert env.phone_session_defaults().turn_detection.idle_timeout_ms == 5000
    assert env.session_defaults().turn_detection.idle_timeout_ms is None  # phone calls only
    assert env.phone_idle_hang_up_after == 3
    off = ServerSettings.from_sources({}, env={"VOICE_AGENT_NOISE_REDUCTION": "none"})
    assert off.noise_reduction is None
    with pytest.raises(pydantic.ValidationError):
        ServerSettings.from_sources({}, env={"VOICE_AGENT_NOISE_REDUCTION": "studio"})


def test_records_and_traces_from_the_environment():
    from voice_server.settings import ServerSettings
    s = ServerSettings.from_sources({"server": {"records": {"max_age_days": 7}}}, env={
        "VOICE_AGENT_RECORDS_DIR": "/tmp/calls", "VOICE_AGENT_RECORDS_AUDIO": "1",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"})
    assert (s.records.enabled, s.records.folder, s.records.recording, s.records.max_age_days) == \
        (True, "/tmp/calls", True, 7)
    assert s.traces.enabled and s.traces.otlp_endpoint.endswith("/v1/traces")
    off = ServerSettings.from_sources({}, env={})
    assert not off.records.enabled and not off.records.recording and not off.traces.enabled


def test_the_multilingual_profile_is_the_default_with_whisper_base():
    """configs/voice-cpu-multilingual.yaml (issue 42) is voice-cpu.yaml but for
    Whisper base, multilingual, and the Japanese voice loaded at start: the
    English default keeps tiny.en and its speed."""
    from pathlib import Path

    import yaml

    from runtime.config import load_config

    root = Path(__file__).resolve().parents[2] / "configs"
    one, multi = (yaml.safe_load((root / n).read_text())
                  for n in ("voice-cpu.yaml", "voice-cpu-multilingual.yaml"))
    load_config(root / "voice-cpu-multilingual.yaml", check_imports=False)
    listen = {s["name"]: s for s in one["stages"]}["listen"]["args"]
    listen_multi = {s["name"]: s for s in multi["stages"]}["listen"]["args"]
    assert (listen["asr_model"], listen_multi["asr_model"]) == ("tiny.en", "base")
    assert "en" in listen_multi.pop("asr_languages")   # what detection picks among
    # the English profile reads a noisy line with base; the multilingual one reads every line so
    assert listen.pop("asr_noisy_model") == "base"
    assert {**listen_multi, "asr_model": "tiny.en"} == listen
    speak_multi = {s["name"]: s for s in multi["stages"]}["speak"]["args"]
    assert "jf_alpha" in speak_multi.pop("preload_voices")   # Kokoro loads at start, not mid-call
    assert speak_multi.pop("language_voices")["es"] == "es"   # espeak-ng's, instant, on 2 cores
    assert [s for s in multi["stages"] if s["name"] not in ("listen", "speak")] == \
        [s for s in one["stages"] if s["name"] not in ("listen", "speak")]
    assert speak_multi == {s["name"]: s for s in one["stages"]}["speak"]["args"]
    assert (multi["edges"], multi["extra"]) == (one["edges"], one["extra"])
