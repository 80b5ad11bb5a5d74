"""The llama.cpp thinker's args are read once, at construction, with clear errors."""

import pytest

from runtime.errors import ErrorCode, StageError
from runtime.models.think.llama_cpp_thinker import LlamaCppThinker
from runtime.models.think.llama_options import MAX_THREADS_ENV, LlamaOptions


@pytest.fixture(autouse=True)
def no_thread_cap(monkeypatch):
    """The suite caps llama.cpp's threads (tests/conftest.py); these tests read the args as given."""
    monkeypatch.delenv(MAX_THREADS_ENV, raising=False)


def test_the_environment_caps_both_thread_counts_and_a_bad_cap_is_named(monkeypatch):
    monkeypatch.setenv(MAX_THREADS_ENV, "1")
    o = LlamaOptions.from_args({"n_threads": 2, "n_threads_batch": 4})
    assert (o.n_threads, o.n_threads_batch) == (1, 1)
    monkeypatch.setenv(MAX_THREADS_ENV, "3")
    assert LlamaOptions.from_args({"n_threads": 2}).n_threads_batch == 2
    monkeypatch.setenv(MAX_THREADS_ENV, "0")
    with pytest.raises(StageError) as e:
        LlamaOptions.from_args({})
    assert e.value.code == ErrorCode.BAD_INPUT and MAX_THREADS_ENV in str(e.value)


def test_derived_defaults_follow_the_args_they_depend_on():
    o = LlamaOptions.from_args({"max_sequences": 3, "n_threads": 4})
    assert (o.n_threads_batch, o.n_ctx) == (4, 3 * 1024)
    assert o.per_sequence_cap == 1024 and o.uses_unified_kv
    o = LlamaOptions.from_args({"n_threads_batch": 1, "n_ctx": 512, "prefix_cache": False})
    assert (o.n_threads, o.n_threads_batch, o.n_ctx, o.per_sequence_cap) == (2, 1, 512, 256)
    assert not o.uses_unified_kv


def test_args_of_others_pass_through_and_null_system_prompt_is_kept():
    o = LlamaOptions.from_args({"temperature": 0.7, "max_tokens": 12, "system_prompt": None})
    assert o.system_prompt is None and o.max_sequences == 8


@pytest.mark.parametrize("args, named", [
    ({"n_ubatch": "lots"}, "n_ubatch"),
    ({"max_sequences": 0}, "max_sequences"),
    ({"tool_call_threshold": 2}, "tool_call_threshold"),
    ({"seed": -1}, "seed"),
    ({"kv_type": "q5_1"}, "kv_type"),
    ({"kv_type": "q8_0", "flash_attn": "off"}, "flash_attn"),
    ({"slow_step_ms": 0}, "slow_step_ms"),
])
def test_a_bad_arg_fails_construction_naming_it(args, named):
    with pytest.raises(StageError) as e:
        LlamaCppThinker(**args)   # before any model is loaded
    assert e.value.code == ErrorCode.BAD_INPUT and named in str(e.value)


def test_the_thinker_holds_every_setting_before_load():
    t = LlamaCppThinker(n_threads=1, prefix_cache=False, tool_name_threshold=0.4)
    assert t.opts.prefix_cache is False and t.opts.n_threads_batch == 1
    assert (t.tool_call_threshold, t.tool_name_threshold) == (None, 0.4)


def test_kv_type_and_flash_attn_map_to_llama_cpps_numbers():
    o = LlamaOptions.from_args({})
    assert (o.kv_type, o.ggml_kv_type, o.flash_attn_type) == ("f16", 1, -1)
    o = LlamaOptions.from_args({"kv_type": "q8_0", "flash_attn": "on"})
    assert (o.ggml_kv_type, o.flash_attn_type) == (8, 1)
