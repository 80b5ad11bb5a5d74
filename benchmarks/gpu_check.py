"""GPU smoke test: CUDA IPC between stage processes, and the in-process SGLang thinker.

    python -m benchmarks.gpu_check [--sglang-model DIR] [--json PATH]

Meant for the first machine with a CUDA device; runs offline in under three
minutes and says what is missing instead of failing obscurely.

1. Versions of what is installed (python, torch and its CUDA, the device,
   sglang, transformers).
2. CUDA IPC, three stages in three processes on cuda:0 (make -> forward ->
   sum): both edges must use the ``cuda_ipc`` transport; each receiver opens
   the tensor and compares its contents in its own process; the middle stage
   forwards the tensor it received (torch refuses to re-share such storage, so
   the data plane copies it); after completion and after an abort while the
   tensor is lent, no process may still hold a CUDA lend (``cuda_held``).
3. The transformers thinker on cuda:0 in bf16 (a tiny random model written
   here): four streams side by side, one released mid-way, memory back after
   close.
4. SGLang (needs ``sglang`` and a small local HF model: ``--sglang-model`` or
   ``VOICE_AGENT_SGLANG_MODEL``): joined deltas equal SGLang's final text;
   ``prompt_tokens`` equals the chat template's token count; a release after
   the first delta dispatches an abort and the rid leaves SGLang's request
   table within 1 s; sampling out of range and a request longer than the
   context are ``bad_input``; after close the GPU memory is back and no child
   process is left.

Exit status: 0 every check that ran passed (skipped ones are listed with the
reason), 1 a check failed, 2 no CUDA device (or no torch).  Results go to
benchmarks/results/gpu_check.json.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable

from voice_server.testing.report import write_json

ROOT = Path(__file__).resolve().parents[1]
MODEL_ENV = "VOICE_AGENT_SGLANG_MODEL"
IPC_SIZES = (1 << 10, 1 << 22)  # 4 KB and 16 MB of float32

IPC_CFG = {"name": "gpu-check",
           "stages": [{"name": "make", "executor": "benchmarks.bench_stages:CudaMaker"},
                      {"name": "forward", "executor": "benchmarks.bench_stages:CudaForward"},
                      {"name": "sum", "executor": "benchmarks.bench_stages:CudaSum"}],
           "edges": [{"from": "make", "to": "forward", "kind": "stream"},
                     {"from": "forward", "to": "sum", "kind": "stream"}],
           "placement": {"groups": [{"name": n, "stages": [n], "device": "cuda:0"}
                                    for n in ("make", "forward", "sum")]}}


class CheckFailed(AssertionError):
    pass


def check(ok: bool, what: str) -> None:
    if not ok:
        raise CheckFailed(what)


def poll(pred: Callable[[], bool], deadline_s: float) -> bool:
    end = time.monotonic() + deadline_s
    while not pred():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions() -> dict:
    out: dict[str, Any] = {"python": platform.python_version()}
    for dist in ("torch", "sglang", "transformers", "flashinfer-python", "sglang-kernel", "psutil"):
        out[dist] = _dist_version(dist) or "not installed"
    try:
        import torch
    except ImportError:
        return out
    out["torch_cuda"] = torch.version.cuda or "none (CPU build)"
    if torch.cuda.is_available():
        out["device"] = torch.cuda.get_device_name(0)
        out["device_count"] = torch.cuda.device_count()
        free, total = torch.cuda.mem_get_info(0)
        out["gpu_memory_gib"] = {"free": round(free / 2**30, 1), "total": round(total / 2**30, 1)}
    return out


def no_cuda_reason() -> str | None:
    """Why this machine cannot run the check, or None when it can."""
    try:
        import torch
    except ImportError as e:
        return f"torch is not installed ({e}); install the project first (pip install -e .)"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build"
    if not torch.cuda.is_available():
        return (f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
    return None


# ------------------------------------------------------------------ CUDA IPC
def _cuda_held(p: Any) -> dict[str, int]:
    return {name: proc.get("cuda_held", 0) for name, proc in p.snapshot()["processes"].items()}


async def _wait_nothing_held(p: Any, deadline_s: float = 5.0) -> dict[str, int]:
    end = time.monotonic() + deadline_s
    while True:
        held = _cuda_held(p)
        if not any(held.values()) or time.monotonic() > end:
            return held
        await asyncio.sleep(0.05)


async def ipc_check() -> dict:
    from runtime.pipeline import Pipeline
    from runtime.placement import edge_transport

    p = await Pipeline.start(IPC_CFG)
    res: dict[str, Any] = {}
    try:
        transports = {f"{a}->{b}": edge_transport(p.cfg, a, b) for a, b in (("make", "forward"), ("forward", "sum"))}
        res["transports"] = transports
        check(set(transports.values()) == {"cuda_ipc"}, f"edges must use cuda_ipc: {transports}")
        for n in IPC_SIZES:
            ts = []
            for _ in range(13):
                t0 = time.perf_counter()
                h = await p.submit(n)
                term, chunks = await h.result()
                ts.append(time.perf_counter() - t0)
                check(term.kind == "done", f"{n} floats: request ended {term.kind}: {term.error}")
                out = chunks[0].payload
                check(out == {"is_cuda": True, "sum": float(n * (n - 1) / 2), "n": n}, f"{n} floats: {out}")
            ts = sorted(ts[3:])
            res[f"e2e_ms_{n * 4 >> 10}KB_p50"] = round(ts[len(ts) // 2] * 1000, 3)
        res["cuda_held_after_done"] = held = await _wait_nothing_held(p)
        check(not any(held.values()), f"CUDA lends still held after completion: {held}")

        h = await p.submit(IPC_SIZES[-1], params={"hold_ms": 1500})
        lent = False
        end = time.monotonic() + 5
        while time.monotonic() < end and not lent:  # the tensor is lent twice while 'sum' holds it
            lent = sum(_cuda_held(p).values()) >= 1
            await asyncio.sleep(0.02)
        res["cuda_held_while_running"] = _cuda_held(p)
        check(lent, "no CUDA lend was seen while the request was in flight (stats not reported?)")
        ticket = p.abort(h.request_id, "gpu check")
        await asyncio.wait_for(ticket.acked, 5)
        term, _ = await h.result()
        res["aborted_request"] = term.kind
        res["cuda_held_after_abort"] = held = await _wait_nothing_held(p)
        check(not any(held.values()), f"CUDA lends still held after abort: {held}")
    finally:
        await p.close()
    return res


# ------------------------------------------------------------------ SGLang
def transformers_cuda_check() -> dict:
    """The transformers thinker on cuda:0 (bf16) through its real loading path,
    on a tiny random model written here: four requests stream to their end
    side by side, one released mid-way frees its cache, and closing gives the
    GPU memory back."""
    import tempfile

    import torch

    from runtime.executor import StepResult, WorkItem
    from runtime.models.think.transformers_thinker import TransformersThinker
    from voice_server.testing.tiny_lm import write_tiny_qwen2

    res: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        write_tiny_qwen2(d)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated(0)
        t = TransformersThinker(model_path=d, local_files_only=True, device="cuda:0", dtype="bfloat16",
                                max_tokens=24, temperature=0.8, seed=1, max_context=256)
        t.load()
        try:
            check(next(t.model.parameters()).device.type == "cuda", "the model is not on the GPU")
            msgs = {"messages": [{"role": "user", "content": "Hello, how are you today?"}]}
            rids = [1, 2, 3, 4]
            for r in rids:
                t.prefill(WorkItem(r, msgs))
            texts = {r: "" for r in rids}
            done: set[int] = set()
            t0 = time.perf_counter()
            steps = 0
            while len(done) < len(rids) and steps < 200:
                live = [r for r in rids if r not in done]
                if steps == 3 and 4 in live:  # a barge-in: released mid-way
                    t.release(4)
                    done.add(4)
                    continue
                steps += 1
                for r, sr in t.step(live).items():
                    check(isinstance(sr, StepResult), f"request {r}: {sr!r}")
                    texts[r] += sr.chunk or ""
                    if sr.finished:
                        done.add(r)
                        t.release(r)
            torch.cuda.synchronize()
            res["steps"] = steps
            res["step_ms"] = round((time.perf_counter() - t0) * 1000 / max(steps, 1), 2)
            check(done == set(rids), f"requests left unfinished: {set(rids) - done}")
            check(all(texts[r] for r in (1, 2, 3)), f"empty replies: {texts}")
            check(t.stats()["active"] == 0, f"sequences left: {t.stats()}")
        finally:
            t.close()
        t.model = None
        import gc
        gc.collect()
        torch.cuda.empty_cache()
        # cuBLAS keeps a workspace per handle in the caching allocator (32 MiB on
        # Hopper): torch's, not the thinker's, so it is reported and then let go.
        res["cublas_workspace_mib"] = round((torch.cuda.memory_allocated(0) - base) / 2**20, 2)
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()
        res["allocated_mib_after_close"] = round((torch.cuda.memory_allocated(0) - base) / 2**20, 2)
        check(torch.cuda.memory_allocated(0) - base < (8 << 20),
              f"{res['allocated_mib_after_close']} MiB still allocated after close")
    return res


def sglang_missing(model: str | None) -> str | None:
    if _dist_version("sglang") is None:
        return "sglang is not installed (pip install -e '.[gpu]')"
    if not model:
        return f"no model: pass --sglang-model DIR or set {MODEL_ENV} to a local HF model directory"
    if not Path(model).is_dir():
        return f"model directory {model!r} does not exist (no network here: it must be local)"
    return None


def _children() -> list[int]:
    import psutil

    return [c.pid for c in psutil.Process().children(recursive=True)]


def _stream(t: Any, rid: int, until_first: bool = False, deadline_s: float = 60.0) -> tuple[str, bool]:
    from runtime.executor import StepResult

    text, end = "", time.monotonic() + deadline_s
    while time.monotonic() < end:
        r = t.step([rid]).get(rid)
        if r is None:
            time.sleep(t.idle_wait_s)
            continue
        if isinstance(r, Exception):
            raise r
        assert isinstance(r, StepResult)
        text += r.chunk or ""
        if r.finished or (until_first and text):
            return text, r.finished
    raise CheckFailed(f"request {rid} produced nothing within {deadline_s} s")


DEFAULT_ENGINE_ARGS = {"mem_fraction_static": 0.3, "context_length": 1024, "disable_cuda_graph": True,
                       "log_level": "error"}


def sglang_check(model: str, engine_args: dict | None = None) -> dict:
    import torch

    from runtime.errors import ErrorCode, StageError
    from runtime.executor import WorkItem
    from runtime.models.think.sglang_thinker import SGLangThinker

    res: dict[str, Any] = {"model": model}
    check(poll(lambda: not _children(), 10.0),
          f"this process still has children {_children()}: SGLang must have it to itself")
    free_before = torch.cuda.mem_get_info(0)[0]
    system = "You are a helpful assistant. Answer briefly."
    t = SGLangThinker(model_path=model, system_prompt=system, max_tokens=48, temperature=0.0,
                      engine_args={**DEFAULT_ENGINE_ARGS, **(engine_args or {})})
    t0 = time.perf_counter()
    t.load()
    res["load_s"] = round(time.perf_counter() - t0, 1)
    tm = t.engine.tokenizer_manager
    finals: dict[str, str] = {}
    generate = t.engine.async_generate

    async def recording_generate(*args: Any, **kw: Any) -> Any:
        gen = await generate(*args, **kw)

        async def tee():
            async for out in gen:
                finals[kw["rid"]] = out.get("text") or ""
                yield out
        return tee()

    aborts: list[str] = []  # rids of AbortReq objects sent to SGLang's scheduler
    calls: list[str] = []  # abort_request calls (SGLang drops repeats from 0.5.21 on)
    abort_request = tm.abort_request
    dispatch = getattr(tm, "_dispatch_to_scheduler", None)  # 0.5.19-0.5.23: every AbortReq goes through it

    def recording_abort(rid: str = "", abort_all: bool = False) -> Any:
        calls.append(rid)
        return abort_request(rid, abort_all)

    def recording_dispatch(obj: Any) -> Any:
        if type(obj).__name__ == "AbortReq":
            aborts.append(getattr(obj, "rid", ""))
        return dispatch(obj)

    t.engine.async_generate = recording_generate
    tm.abort_request = recording_abort
    if dispatch is not None:
        tm._dispatch_to_scheduler = recording_dispatch
    try:
        check(not t.incremental, "the check expects SGLang's default cumulative stream")
        msgs = [{"role": "system", "content": system},
                {"role": "user", "content": "Name three colours of the rainbow."}]
        t.prefill(WorkItem(1, {"messages": msgs}))
        text, _ = _stream(t, 1)
        t.release(1)
        (rid,) = finals
        res["reply"] = text
        check(text == finals[rid], f"joined deltas {text!r} != SGLang's final text {finals[rid]!r}")
        templated = t.tokenizer.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True)
        if hasattr(templated, "keys"):
            templated = templated["input_ids"]
        usage = t.stats()["last_usage"]
        res["prompt_tokens"] = usage.get("prompt_tokens")
        check(usage.get("prompt_tokens") == len(templated),
              f"prompt_tokens {usage.get('prompt_tokens')} != {len(templated)} templated tokens (double BOS?)")

        long_msgs = [{"role": "user", "content": "Tell me a very long story about a dragon."}]
        t.prefill(WorkItem(2, {"messages": long_msgs}, params={"max_tokens": 400}))
        _stream(t, 2, until_first=True)
        rid2 = t.engine_rid(2)
        check(rid2 in tm.rid_to_state, "the running request is not in SGLang's request table")
        t.release(2)
        gone = poll(lambda: rid2 not in tm.rid_to_state, 1.0)
        res["abort_request_calls"] = calls.count(rid2)
        check(calls.count(rid2) >= 1, f"release sent no abort_request for {rid2}")
        if dispatch is not None:
            res["aborts_dispatched"] = aborts.count(rid2)
            check(aborts.count(rid2) == 1, f"{aborts.count(rid2)} AbortReq sent to the scheduler for {rid2}")
        check(gone, f"{rid2} still in SGLang's request table 1 s after the release")

        for name, params in (("top_p=0", {"top_p": 0.0}), ("repeat_penalty=3", {"repeat_penalty": 3.0})):
            try:
                t.prefill(WorkItem(3, {"messages": msgs}, params=params))
                _stream(t, 3)
                raise CheckFailed(f"{name} was accepted")
            except StageError as e:
                check(e.code == ErrorCode.BAD_INPUT, f"{name}: {e.code.value}: {e}")
            finally:
                t.release(3)
        try:  # SGLang's own refusal: input + max_new_tokens over the context
            t.prefill(WorkItem(4, {"messages": msgs}, params={"max_tokens": 5000}))
            _stream(t, 4)
            raise CheckFailed("a request over the context length was accepted")
        except StageError as e:
            check(e.code == ErrorCode.BAD_INPUT, f"over-context request: {e.code.value}: {e}")
            res["over_context_error"] = str(e)[:200]
        finally:
            t.release(4)
    finally:
        t.close()
    res["children_after_close"] = _children()
    check(poll(lambda: not _children(), 10.0), f"child processes left after close: {_children()}")
    freed = poll(lambda: torch.cuda.mem_get_info(0)[0] >= free_before - (512 << 20), 15.0)
    res["gpu_free_gib"] = {"before": round(free_before / 2**30, 2),
                           "after_close": round(torch.cuda.mem_get_info(0)[0] / 2**30, 2)}
    check(freed, f"GPU memory not back after close: {res['gpu_free_gib']}")
    return res


# ------------------------------------------------------------------ main
def run_one(name: str, fn: Callable[[], Any], results: dict) -> bool:
    t0 = time.perf_counter()
    try:
        results[name] = {"status": "ok", **fn()}
        ok = True
    except CheckFailed as e:
        results[name] = {"status": "FAILED", "why": str(e)}
        ok = False
    except Exception as e:  # noqa: BLE001 - report, do not crash: the other checks still run
        results[name] = {"status": "FAILED", "why": f"{type(e).__name__}: {e}"}
        ok = False
    results[name]["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"{name}: {results[name]['status']}" + ("" if ok else f" -- {results[name]['why']}"), flush=True)
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__.split("\n")[0])
    ap.add_argument("--sglang-model", default=os.environ.get(MODEL_ENV),
                    help=f"local HF model directory for the SGLang check (default ${MODEL_ENV})")
    ap.add_argument("--engine-args", type=json.loads, default={},
                    help=f"JSON merged over the SGLang engine args {json.dumps(DEFAULT_ENGINE_ARGS)}, "
                         'e.g. \'{"attention_backend": "triton"}\'')
    ap.add_argument("--json", default=str(ROOT / "benchmarks/results/gpu_check.json"))
    args = ap.parse_args(argv)

    results: dict[str, Any] = {"versions": versions()}
    print(json.dumps(results["versions"], indent=2), flush=True)
    reason = no_cuda_reason()
    if reason:
        print(f"no CUDA device: {reason}", file=sys.stderr)
        return 2
    ok = run_one("cuda_ipc", lambda: asyncio.run(ipc_check()), results)
    ok = run_one("transformers_cuda", transformers_cuda_check, results) and ok
    missing = sglang_missing(args.sglang_model)
    if missing:
        results["sglang"] = {"status": "skipped", "why": missing}
        print(f"sglang: skipped -- {missing}", flush=True)
    else:
        ok = run_one("sglang", lambda: sglang_check(args.sglang_model, args.engine_args), results) and ok
    write_json(args.json, results)
    print("GPU check:", "ok" if ok else "FAILED", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
