"""What the llama.cpp thinker's stage args mean, read and checked once.

The thinker used to read some args in ``__init__`` and others in ``load``, so a
typo in ``n_ubatch`` surfaced only when the stage process loaded the model, and
``prefix_cache`` did not exist before it.  Here every arg is parsed at
construction: a wrong type or range fails the stage's start with a message
naming the arg, and each derived default (``n_threads_batch``, ``n_ctx``) is
written in one place.  Args that belong to others (sampling defaults, see
``Sampling.from_args``) pass through untouched.
"""

from __future__ import annotations

import os
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from runtime.errors import ErrorCode, StageError
from runtime.models.think.thinker_request import DEFAULT_SYSTEM_PROMPT

# An upper bound on both thread counts, for a machine shared with other work.
# ggml's threads spin at a barrier after every layer: with more threads than
# free cores, a thread preempted by another process holds the others spinning,
# and a step costs about twice the CPU (the test suite's two workers on two
# cores: a file of llama.cpp tests took 72 CPU s on two threads, 32 on one).
MAX_THREADS_ENV = "VOICE_AGENT_LLAMA_MAX_THREADS"


class LlamaOptions(BaseModel):
    """The thinker's engine settings (the sampling ones live in ``Sampling``)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    # which weights: a GGUF path, else a model name from model_files, else SmolLM2
    model_path: str | None = None
    model: str | None = None
    # rewrite the weights to this llama.cpp type once, cached under cache_dir (gguf_requant)
    requantize: str | None = None
    cache_dir: str | None = None
    verbose: bool = False
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT   # None: no system message

    # concurrency and memory: one llama.cpp sequence per running request
    max_sequences: int = Field(8, ge=1, le=256)
    n_threads: int = Field(2, ge=1)
    n_threads_batch: int = Field(ge=1)          # prompt steps; defaults to n_threads
    n_ctx: int = Field(ge=16)                   # KV cells in all; defaults to 1024 per sequence
    n_batch: int = Field(512, ge=1)
    n_ubatch: int = Field(512, ge=1)
    kv_unified: bool = False                    # forced on by prefix_cache (one shared pool)
    max_context_per_seq: int | None = Field(None, ge=16)
    # the KV cache's element type (q8_0 holds a cell in about half the memory of
    # f16) and llama.cpp's fused attention, which a quantised V cache needs
    kv_type: Literal["f16", "q8_0", "q4_0"] = "f16"
    flash_attn: Literal["auto", "on", "off"] = "auto"

    # sampling an engine setting fixes (a request cannot change it)
    top_k: int = Field(40, ge=0)
    seed: int | None = Field(None, ge=0, le=2**32 - 1)

    # what decoded cells are kept for: the system prompt, a caller's conversation
    prefix_cache: bool = True
    conversation_cache: bool = True
    # decode one batch of n_ubatch tokens at load and forget it (llama_cpp_thinker._warm)
    warm_batch: bool = False
    # a one-token step slower than this at load logs a warning (llama_cpp_thinker._time_step):
    # on such a CPU every reply starts late, and the operator should hear it at start
    slow_step_ms: float | None = Field(None, gt=0)

    # tools: None thresholds take the model's or the dialect's measured ones at load
    tool_format: str = "auto"
    tool_call_threshold: float | None = Field(None, ge=0.0, le=1.0)
    tool_name_threshold: float | None = Field(None, ge=0.0, le=1.0)
    max_tool_calls: int = Field(1, ge=1)
    max_tool_call_tokens: int = Field(256, ge=1)
    max_tool_string_chars: int = Field(100, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _derived_defaults(cls, data: Any) -> Any:
        """The defaults that follow other args (a bad one is reported by its own field)."""
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        data.setdefault("n_threads_batch", data.get("n_threads", 2))
        cap = os.environ.get(MAX_THREADS_ENV, "").strip()
        if cap:
            if not cap.isdigit() or int(cap) < 1:
                raise ValueError(f"{MAX_THREADS_ENV} must be a whole number >= 1, got {cap!r}")
            for key in ("n_threads", "n_threads_batch"):
                if isinstance(data.get(key, 2), int):
                    data[key] = min(data.get(key, 2), int(cap))
        try:
            data.setdefault("n_ctx", 1024 * int(data.get("max_sequences", 8)))
        except (TypeError, ValueError):
            data.setdefault("n_ctx", 1024)
        return data

    @model_validator(mode="after")
    def _quantised_v_needs_flash_attn(self) -> "LlamaOptions":
        if self.kv_type != "f16" and self.flash_attn == "off":
            raise ValueError(f"kv_type {self.kv_type} needs flash_attn auto or on")
        return self

    @property
    def ggml_kv_type(self) -> int:
        """llama.cpp's number for ``kv_type`` (ggml_type)."""
        return {"f16": 1, "q4_0": 2, "q8_0": 8}[self.kv_type]

    @property
    def flash_attn_type(self) -> int:
        """llama.cpp's number for ``flash_attn`` (llama_flash_attn_type)."""
        return {"auto": -1, "off": 0, "on": 1}[self.flash_attn]

    @property
    def uses_unified_kv(self) -> bool:
        return self.kv_unified or self.prefix_cache

    @property
    def per_sequence_cap(self) -> int:
        """With one shared pool of cells, what one request may take of it."""
        if self.max_context_per_seq is not None:
            return self.max_context_per_seq
        return max(self.n_ctx // self.max_sequences, 256)

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> "LlamaOptions":
        """Parse the stage args; a bad one is a ``bad_input`` error naming it."""
        try:
            return cls.model_validate(dict(args))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'args'}: {e['msg']}"
                                 for e in exc.errors())
            raise StageError(ErrorCode.BAD_INPUT, f"llama.cpp thinker args: {problems}") from None
