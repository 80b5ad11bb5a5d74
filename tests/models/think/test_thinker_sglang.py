"""SGLangThinker against a recording stand-in of SGLang's engine boundary.

No GPU here, so the engine is replaced at the one boundary the adapter uses:
``Engine.async_generate(stream=True)`` and ``tokenizer_manager.abort_request``
/ ``rid_to_state``.  The stand-in follows SGLang's own control flow, in the
two shapes it has had:

* ``0.5.19``: cancelling a request's stream only drops its state; an abort for
  a rid that is no longer in ``rid_to_state`` is ignored, and every abort call
  for a known rid is dispatched.
* ``0.5.23`` (also 0.5.21): cancelling a dispatched request aborts it and keeps
  its state until the scheduler answers; a second abort is dropped.

Its "scheduler" keeps generating for a request until it is aborted or reaches
``max_new_tokens``, so a barge-in that never reaches it is visible.  The
tokenizer is a real HF tokenizer built here whose chat template writes its own
BOS, the case that doubles BOS when a rendered prompt is tokenised again.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from runtime.errors import ErrorCode, StageError
from runtime.executor import StepResult, WorkItem
from runtime.models.think.sglang_thinker import SUPPORTED_RELEASES, SGLangThinker, require_sole_parent
from runtime.models.voice_contract import think_events
from tests.models.think.test_thinker_openai import _collect, collect_chunks

BOS = "<s>"
TEMPLATE = ("{{ bos_token }}{% for m in messages %}[ {{ m['role'] }} ] {{ m['content'] }} {% endfor %}"
            "{% if add_generation_prompt %}[ assistant ]{% endif %}")
WORDS = ("[ ] system user assistant you are a friendly voice assistant answer in one or two short "
         "sentences hi hello tell me story about dragon say what is the capital of france").split()


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, BOS: 1, "</s>": 2}
    for w in WORDS:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([BOS, "</s>"])
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token="</s>", unk_token="<unk>")
    fast.chat_template = TEMPLATE
    return fast


# ----------------------------------------------------------------- the stand-in
@dataclass
class _State:
    event: asyncio.Event
    outs: list = field(default_factory=list)
    finished: bool = False
    dispatched: bool = False
    abort_sent: bool = False


class RecordingTokenizerManager:
    """The request path of SGLang's TokenizerManager plus a toy scheduler."""

    def __init__(self, behaviour: str, tokenizer: Any, incremental: bool = False,
                 pieces: tuple[str, ...] = ("Hello", ",", " world", "!"), context_len: int = 256) -> None:
        assert behaviour in ("0.5.19", "0.5.23")
        self.behaviour = behaviour
        self.tokenizer = tokenizer
        self.incremental_streaming_output = incremental
        self.pieces = pieces
        self.context_len = context_len
        self.rid_to_state: dict[str, _State] = {}
        self.aborts_dispatched: list[str] = []
        self.received: dict[str, list[int]] = {}  # what the scheduler got as the prompt
        self.running: set[str] = set()  # the scheduler is generating for these
        self.generated: dict[str, int] = {}
        self.full_text: dict[str, str] = {}
        self.scheduler_finish: dict[str, str] = {}
        self.inject: tuple[str, Any] | None = None  # ("abort", status) or ("raise", exception)
        self._abort_now: set[str] = set()
        self.loops_seen: set[asyncio.AbstractEventLoop] = set()

    def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        state = self.rid_to_state.get(rid)
        if state is None:
            return  # an unknown rid is ignored (one tokenizer worker)
        if self.behaviour != "0.5.19":
            if state.abort_sent:
                return
            state.abort_sent = True
        self.aborts_dispatched.append(rid)
        self._abort_now.add(rid)

    async def generate_request(self, obj: dict):
        rid = obj["rid"]
        self.loops_seen.add(asyncio.get_running_loop())
        state = _State(asyncio.Event())
        self.rid_to_state[rid] = state
        try:
            await asyncio.sleep(0)  # tokenisation awaits in SGLang
            ids = obj["input_ids"]
            if ids is None:
                ids = self.tokenizer.encode(obj["text"])  # special tokens added, as SGLang does
            sp = obj["sampling_params"]
            if len(ids) >= self.context_len:
                raise ValueError(f"The input ({len(ids)} tokens) is longer than the model's context length")
            if len(ids) + sp["max_new_tokens"] > self.context_len:
                raise ValueError("Requested token count exceeds the model's maximum context length")
            if not 0.0 < sp["top_p"] <= 1.0:
                raise ValueError(f"top_p must be in (0, 1], got {sp['top_p']}.")
            if not 0.0 < sp["repetition_penalty"] <= 2.0:
                raise ValueError("repetition_penalty must be in (0, 2]")
            self.received[rid] = list(ids)
            state.dispatched = True
            asyncio.get_running_loop().create_task(self._schedule(rid, len(ids), sp["max_new_tokens"]))
            while True:
                await state.event.wait()
                outs, state.outs = state.outs, []
                state.event.clear()
                for o in outs:
                    if isinstance(o, BaseException):
                        raise o  # SGLang's request path raising mid-stream
                if self.incremental_streaming_output and len(outs) > 1:
                    out = dict(outs[-1], text="".join(o["text"] for o in outs))
                else:
                    out = outs[-1]
                yield out
                if state.finished:
                    return
        except BaseException:
            if self.behaviour == "0.5.19":
                self.rid_to_state.pop(rid, None)
            elif self.rid_to_state.get(rid) is state:
                if state.dispatched:
                    self.abort_request(rid)
                else:
                    del self.rid_to_state[rid]
            raise

    async def _schedule(self, rid: str, n_prompt: int, max_new: int) -> None:
        self.running.add(rid)
        text, reason = "", {"type": "length", "length": max_new}
        inject, self.inject = self.inject, None
        for i in range(max_new):
            await asyncio.sleep(0.002)  # one decode step
            if inject is not None and i == 1:
                if inject[0] == "raise":
                    self.running.discard(rid)
                    state = self.rid_to_state.get(rid)
                    state.outs.append(inject[1])
                    state.event.set()
                    return
                reason = {"type": "abort", "message": "injected"}
                if inject[1] is not None:
                    reason["status_code"] = inject[1]
                break
            if rid in self._abort_now:
                reason = {"type": "abort", "message": "Abort in running batch"}
                break
            piece = self.pieces[i % len(self.pieces)]
            text += piece
            self.generated[rid] = i + 1
            if i + 1 < max_new:
                self._emit(rid, piece, text, None, n_prompt, i + 1)
        self.running.discard(rid)
        self._abort_now.discard(rid)
        self.full_text[rid] = text
        self.scheduler_finish[rid] = reason["type"]
        self._emit(rid, piece if reason["type"] == "length" else "", text, reason, n_prompt,
                   self.generated.get(rid, 0))

    def _emit(self, rid, piece, text, reason, n_prompt, n_out) -> None:
        state = self.rid_to_state.get(rid)
        if state is None:
            return  # outputs for a forgotten rid are dropped
        body = piece if self.incremental_streaming_output else text
        state.outs.append({"text": body, "meta_info": {"id": rid, "finish_reason": reason,
                                                       "prompt_tokens": n_prompt,
                                                       "completion_tokens": n_out,
                                                       "cached_tokens": n_prompt // 2}})
        if reason is not None:
            state.finished = True
            del self.rid_to_state[rid]
        state.event.set()


class RecordingEngine:
    def __init__(self, tm: RecordingTokenizerManager) -> None:
        self.tokenizer_manager = tm
        self.shutdowns = 0

    async def async_generate(self, prompt=None, sampling_params=None, input_ids=None,
                             stream=False, rid=None, **_):
        gen = self.tokenizer_manager.generate_request(
            {"text": prompt, "input_ids": input_ids, "sampling_params": sampling_params, "rid": rid})
        return gen if stream else await gen.__anext__()

    def shutdown(self) -> None:
        self.shutdowns += 1


# ----------------------------------------------------------------- helpers
def _ask(rid, text="tell me a story about a dragon", **params):
    return WorkItem(rid, {"messages": [{"role": "user", "content": text}]}, params=params)


def _wait(pred, what: str, deadline_s: float = 10.0) -> None:
    end = time.monotonic() + deadline_s
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"not within {deadline_s} s: {what}")
        time.sleep(0.005)


@pytest.fixture
def make(tokenizer):
    made = []

    def _make(behaviour="0.5.23", **kw):
        tm = RecordingTokenizerManager(behaviour, tokenizer, **kw)
        t = SGLangThinker(model_path="stand-in", max_tokens=16, system_prompt="you are a friendly voice assistant")
        t.use_engine(RecordingEngine(tm))
        made.append(t)
        return t, tm

    yield _make
    for t in made:
        t.close()


# ----------------------------------------------------------------- tests
@pytest.mark.parametrize("behaviour", ["0.5.19", "0.5.23"])
def test_release_after_first_delta_dispatches_exactly_one_abort(make, behaviour):
    t, tm = make(behaviour)
    t.prefill(_ask(1, max_tokens=200))
    got = ""
    end = time.monotonic() + 10
    while not got and time.monotonic() < end:
        r = t.step([1]).get(1)
        if r is None:
            time.sleep(t.idle_wait_s)
            continue
        assert isinstance(r, StepResult) and not r.finished, r
        got += r.chunk or ""
    assert got
    (rid,) = tm.received
    t.release(1)  # barge-in
    _wait(lambda: rid not in tm.running and rid not in tm.rid_to_state, "the request left SGLang")
    assert tm.aborts_dispatched == [rid]
    assert tm.scheduler_finish[rid] == "abort"
    assert tm.generated[rid] < 200
    assert t.stats()["active"] == 0


def test_close_aborts_what_is_still_running(make):
    t, tm = make("0.5.19")
    t.prefill(_ask(2, max_tokens=200))
    _wait(lambda: tm.generated, "generation started")
    t.close()
    (rid,) = tm.received
    assert tm.aborts_dispatched == [rid]


@pytest.mark.parametrize("incremental", [False, True])
def test_joined_deltas_equal_final_text(make, incremental):
    t, tm = make(incremental=incremental, pieces=("!",))
    t.prefill(_ask(3, max_tokens=20))
    text = _collect(t, 3)
    (rid,) = tm.received
    assert text == tm.full_text[rid] == "!" * 20
    t2, tm2 = make(incremental=incremental)
    t2.prefill(_ask(4, max_tokens=9))
    text = _collect(t2, 4)
    assert text == tm2.full_text[next(iter(tm2.received))] == "Hello, world!Hello, world!Hello"
    assert t.stats()["incremental_streaming"] is incremental


def test_usage_comes_in_the_last_chunk_when_asked(make):
    """include_usage: the finished request's meta_info counts as the usage
    event, after the last words; not asked, no event."""
    t, tm = make()
    t.prefill(WorkItem(6, {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 5,
                           "include_usage": True}))
    events = [e for c in collect_chunks(t, 6, 10.0) for e in think_events(c)]
    (ids,) = tm.received.values()
    assert events[-1] == {"type": "usage", "input_tokens": len(ids), "cached_tokens": len(ids) // 2,
                          "output_tokens": 5, "finish_reason": "length"}   # max_new_tokens cut it
    assert "".join(e for e in events if isinstance(e, str)) == "Hello, world!Hello"
    assert t.stats()["last_usage"] == {"prompt_tokens": len(ids), "completion_tokens": 5}
    t.prefill(_ask(7, max_tokens=3))
    assert all(isinstance(c, str) for c in collect_chunks(t, 7, 10.0))


def test_prompt_is_chat_template_token_ids_with_one_bos(make, tokenizer):
    t, tm = make()
    t.prefill(_ask(5, "hello"))
    _collect(t, 5)
    (ids,) = tm.received.values()
    messages = [{"role": "system", "content": "you are a friendly voice assistant"},
                {"role": "user", "content": "hello"}]
    templated = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    if hasattr(templated, "keys"):
        templated = templated["input_ids"]
    assert ids == list(templated)
    assert ids.count(tokenizer.bos_token_id) == 1
    # What the old path did: render to text, let SGLang tokenise it again.
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tokenizer.encode(rendered).count(tokenizer.bos_token_id) == 2
    assert t.stats()["last_usage"]["prompt_tokens"] == len(ids)


@pytest.mark.parametrize("params, fragment", [
    ({"top_p": 0.0}, "top_p"),
    ({"repeat_penalty": 2.5}, "repeat_penalty"),
    ({"repeat_penalty": 0.0}, "repeat_penalty"),
])
def test_sampling_outside_sglang_ranges_is_bad_input_before_the_engine(make, params, fragment):
    t, tm = make()
    with pytest.raises(StageError) as e:
        t.prefill(_ask(6, **params))
    assert e.value.code == ErrorCode.BAD_INPUT and fragment in str(e.value)
    assert not tm.received and not tm.rid_to_state


@pytest.mark.parametrize("inject, context_len, max_tokens, code", [
    (None, 8, 4, ErrorCode.BAD_INPUT),  # prompt longer than the context
    (None, 40, 30, ErrorCode.BAD_INPUT),  # prompt + max_new_tokens over the context
    (("abort", 400), 256, 16, ErrorCode.BAD_INPUT),
    (("abort", 503), 256, 16, ErrorCode.RESOURCE_EXHAUSTED),
    (("abort", 500), 256, 16, ErrorCode.INTERNAL),
    (("abort", None), 256, 16, ErrorCode.CANCELLED),  # aborted by someone else (abort_all)
    (("raise", asyncio.TimeoutError("stuck")), 256, 16, ErrorCode.TIMEOUT),
    (("raise", RuntimeError("CUDA out of memory")), 256, 16, ErrorCode.RESOURCE_EXHAUSTED),
    (("raise", RuntimeError("boom")), 256, 16, ErrorCode.INTERNAL),
])
def test_engine_failures_map_to_their_codes(make, inject, context_len, max_tokens, code):
    t, tm = make(context_len=context_len)
    tm.inject = inject
    t.prefill(_ask(7, max_tokens=max_tokens))
    with pytest.raises(StageError) as e:
        _collect(t, 7)
    assert e.value.code == code, e.value
    assert "\n" not in str(e.value)
    tm.context_len = 256
    t.prefill(_ask(8, "say hello", max_tokens=4))  # the thinker still serves
    assert _collect(t, 8)


def test_engine_without_tokenizer_is_refused(tokenizer):
    tm = RecordingTokenizerManager("0.5.23", tokenizer)
    tm.tokenizer = None
    with pytest.raises(StageError) as e:
        SGLangThinker(model_path="x").use_engine(RecordingEngine(tm))
    assert e.value.code == ErrorCode.UNSUPPORTED


def test_streams_run_on_the_engines_own_loop(tokenizer):
    tm = RecordingTokenizerManager("0.5.23", tokenizer)
    engine = RecordingEngine(tm)
    engine.loop = asyncio.new_event_loop()  # sglang.Engine makes one for its sync calls
    t = SGLangThinker(model_path="x")
    t.use_engine(engine)
    try:
        t.prefill(_ask(9, "say hello", max_tokens=3))
        assert _collect(t, 9)
    finally:
        t.close()
        engine.loop.close()
    assert tm.loops_seen == {engine.loop}


def test_an_engine_handed_in_is_not_shut_down(make):
    t, _ = make()
    engine = t.engine
    t.close()
    assert engine.shutdowns == 0


def test_process_with_other_children_is_refused():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(StageError) as e:
            require_sole_parent()
        assert e.value.code == ErrorCode.UNSUPPORTED and str(child.pid) in str(e.value)
    finally:
        child.kill()
        child.wait()


def _sleeper(children: int = 0) -> subprocess.Popen:
    """A process standing for an engine child (with ``children`` of its own) or for another stage's."""
    code = ("import subprocess, sys, time\n"
            f"ps = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']) for _ in range({children})]\n"
            "print(' '.join(str(p.pid) for p in ps), flush=True)\n"
            "time.sleep(60)\n")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def test_close_with_another_stages_child_stops_only_the_engines_processes(make):
    import psutil

    t, _ = make()
    engine_child, other = _sleeper(children=1), _sleeper()
    try:
        grandchild = int(engine_child.stdout.readline())
        other.stdout.readline()
        t._owned, t._engine_pids = True, {engine_child.pid}
        assert other.pid in t._foreign_children()
        assert not {engine_child.pid, grandchild} & t._foreign_children()
        engine = t.engine
        t.close()
        assert engine.shutdowns == 0  # Engine.shutdown() would have killed `other` too
        assert engine_child.wait(10) is not None
        _wait(lambda: not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == "zombie",
              "the engine's grandchild is gone")
        assert other.poll() is None
    finally:
        for p in (engine_child, other):
            p.kill()
            p.wait()


class _FailingEngine:
    """Stands for ``sglang.Engine`` failing at start, after its process-wide side effects."""

    error: Exception = RuntimeError("unset")
    spawned: list[subprocess.Popen] = []

    def __init__(self, **kw: Any) -> None:
        import multiprocessing
        import signal

        multiprocessing.set_start_method("spawn", force=True)
        signal.signal(signal.SIGQUIT, lambda *_: None)
        _FailingEngine.spawned.append(_sleeper())  # a scheduler that was already running
        raise _FailingEngine.error


@pytest.mark.parametrize("error, code", [
    (TypeError("__init__() got an unexpected keyword argument 'bogus'"), ErrorCode.BAD_INPUT),
    (OSError("stand-in is not a local folder and is not a valid model identifier"), ErrorCode.STAGE_UNAVAILABLE),
    (ValueError("context_length must be positive"), ErrorCode.BAD_INPUT),
    (RuntimeError("Not enough memory. Please try to increase --mem-fraction-static."),
     ErrorCode.RESOURCE_EXHAUSTED),
    (RuntimeError("Initialization failed. Please see the error messages above."), ErrorCode.STAGE_UNAVAILABLE),
])
def test_engine_that_fails_to_start_is_one_clear_stage_error(monkeypatch, error, code):
    import multiprocessing
    import signal
    import types

    import runtime.models.think.sglang_thinker as adapter

    # Earlier tests in the same pytest process may have children still running
    # (servers they started: killing their stages once wedged a shared server
    # for the rest of a run); the sole-parent rule has its own test above.
    monkeypatch.setattr(adapter, "require_sole_parent", lambda: None)
    bystander = _sleeper()
    monkeypatch.setitem(sys.modules, "sglang", types.SimpleNamespace(Engine=_FailingEngine, __version__="0.5.21"))
    _FailingEngine.error, _FailingEngine.spawned = error, []
    method, handler = multiprocessing.get_start_method(allow_none=True), signal.getsignal(signal.SIGQUIT)
    try:
        with pytest.raises(StageError) as e:
            SGLangThinker(model_path="stand-in", engine_args={"bogus": 1}).load()
        assert e.value.code == code and "\n" not in str(e.value) and "stand-in" in str(e.value)
        (child,) = _FailingEngine.spawned
        assert child.wait(10) is not None  # what the engine had started is stopped
        assert bystander.poll() is None    # what was here before it is not
    finally:
        bystander.kill()
        bystander.wait()
    assert multiprocessing.get_start_method(allow_none=True) == method
    assert signal.getsignal(signal.SIGQUIT) == handler


def test_module_imports_without_sglang():
    SGLangThinker(model_path="x")  # construction is cheap and touches no engine


def test_gpu_extra_pins_the_supported_release():
    import tomllib
    from pathlib import Path

    extra = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())[
        "project"]["optional-dependencies"]["gpu"]
    assert [f"sglang=={v}" for v in SUPPORTED_RELEASES] == [d for d in extra if d.startswith("sglang")]


def test_load_without_sglang_names_the_fix(monkeypatch):
    # as where sglang is not installed, even where it is (None in sys.modules
    # makes the import fail), so this runs on every machine
    monkeypatch.setitem(sys.modules, "sglang", None)
    with pytest.raises(StageError) as e:
        SGLangThinker(model_path="x").load()
    assert e.value.code == ErrorCode.STAGE_UNAVAILABLE
    assert "pip install 'voice-agent[gpu]'" in str(e.value)
    assert "\n" not in str(e.value)
