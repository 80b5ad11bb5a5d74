"""A profile's think stage as its YAML configures it (model, prompt, sampling),
for the tests of that profile's brain; and what they check replies against."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from benchmarks.answer_bench import TOOLS as BENCH_TOOLS
from runtime.models.model_files import thinker_gguf
from runtime.models.think.llama_cpp_thinker import LlamaCppThinker

ROOT = Path(__file__).resolve().parents[3]
# the tools answer_bench offers (weather, timer, lights, messages)
TOOLS = [{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in BENCH_TOOLS]
MARKUP = re.compile(r'[{}\[\]<>`]|"\w+"\s*:')


def profile_thinker(config: str, model: str, **overrides) -> LlamaCppThinker:
    """The loaded thinker of configs/``config``, which must name ``model``; a
    fixed seed and two sequences unless ``overrides`` say otherwise."""
    thinker_gguf(model)  # a missing model fails here with how to get it, it does not skip
    data = yaml.safe_load((ROOT / "configs" / config).read_text())
    [think] = [s for s in data["stages"] if s["name"] == "think"]
    args = {**think["args"], "seed": 7, "max_sequences": 2, **overrides}
    assert args["model"] == model
    t = LlamaCppThinker(**args)
    t.load()
    return t
