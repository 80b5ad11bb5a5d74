"""SGLangThinker needs a GPU and sglang: here only its import-time promises are checked."""

from __future__ import annotations

import importlib.util

import pytest

from runtime.errors import ErrorCode, StageError


def test_module_imports_without_sglang():
    from runtime.models.sglang_thinker import SGLangThinker

    SGLangThinker(model_path="x")  # construction is cheap and touches no engine


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="sglang is installed")
def test_load_without_sglang_names_the_fix():
    from runtime.models.sglang_thinker import SGLangThinker

    with pytest.raises(StageError) as e:
        SGLangThinker(model_path="x").load()
    assert e.value.code == ErrorCode.STAGE_UNAVAILABLE
    assert "pip install 'voice-agent[gpu]'" in str(e.value)
    assert "\n" not in str(e.value)
