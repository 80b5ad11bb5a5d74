"""What the voice server reads of a think stage before asking it
(context_window.py): its system prompt and one conversation's room, from the
stage's args with the thinkers' defaults; and the server settings built from a
pipeline YAML (ServerSettings.think_context_of)."""

from pathlib import Path

from runtime.config import load_config
from runtime.models.think.context_window import context_window
from runtime.models.think.thinker_request import DEFAULT_SYSTEM_PROMPT
from voice_server.settings import ServerSettings

ROOT = Path(__file__).resolve().parents[3]
LLAMA = "runtime.models.think.llama_cpp_thinker:LlamaCppThinker"
OPENAI = "runtime.models.think.openai_thinker:OpenAICompatThinker"


def test_llama_cpp_defaults_and_args():
    w = context_window(LLAMA, {})
    assert (w.system_prompt, w.tokens, w.prompt_chars) == (DEFAULT_SYSTEM_PROMPT, 1024, None)
    assert (w.reply_tokens, w.tool_reply_tokens) == (64, 256)
    w = context_window(LLAMA, {"n_ctx": 4096, "max_sequences": 2, "max_tokens": 100,
                               "system_prompt": "Be brief."})
    assert (w.system_prompt, w.tokens, w.reply_tokens) == ("Be brief.", 2048, 100)
    assert context_window(LLAMA, {"n_ctx": 4096, "max_context_per_seq": 1500}).tokens == 1500
    # a reply never takes more than half of the window (the thinker's own cap)
    assert context_window(LLAMA, {"n_ctx": 2048, "max_sequences": 8}).tool_reply_tokens == 128


def test_engines_that_count_characters():
    w = context_window(OPENAI, {"max_prompt_chars": 9000})
    assert (w.tokens, w.prompt_chars) == (None, 9000)
    assert context_window("some.module:OtherThinker", {}).prompt_chars is None


def test_the_shipped_config_reaches_every_new_session():
    cfg = load_config(ROOT / "configs" / "voice-cpu.yaml")
    [think] = [s for s in cfg.stages if s.name == "think"]
    settings = ServerSettings()
    settings.think_context = settings.think_context_of(cfg)
    ctx = settings.session_defaults().context
    assert ctx.system_prompt == think.args["system_prompt"] and ctx.tokens == 1024
    # extra.server.context_tokens overrides the size; 0: unknown
    ctx = ServerSettings(context_tokens=4096).think_context_of(cfg)
    assert ctx.tokens == 4096 and ctx.system_prompt == think.args["system_prompt"]
    assert ServerSettings(context_tokens=0).think_context_of(cfg).tokens is None
    assert ServerSettings().think_context_of(None).tokens is None
