"""Aggregate decode throughput of LlamaCppThinker vs llama-cpp-python's own loop.

Why: the thinker batches every running request into one llama_decode per step;
this checks that N concurrent voice turns really cost less than N single
sequences (target: 8 sequences >= 2.5x the single-sequence baseline).

Every measurement runs ``--rounds`` times interleaved and the best round is
kept, because the 2-vCPU test machines are shared and a neighbour's burst
would otherwise decide the result.  Usage::

    .venv/bin/python benchmarks/thinker_bench.py [--rounds 3] [--max-tokens 96]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from voice_server.testing.report import write_json
from runtime.executor import WorkItem
from runtime.models.think.chat import render_template
from runtime.models.think.gguf_requant import requantized
from runtime.models.think.llama_cpp_thinker import LlamaCppThinker
from runtime.models.model_files import smollm2_gguf
from runtime.models.think.thinker_request import DEFAULT_SYSTEM_PROMPT

SAMPLING = dict(temperature=0.25, top_p=0.9, repeat_penalty=1.2)


def question(i: int) -> str:
    return f"Write a long, detailed story about a dragon called Ember number {i}."


def baseline_tok_s(llm, max_tokens: int, i: int) -> tuple[float, float]:
    """llama-cpp-python's single-sequence loop: (end-to-end, decode-only) tokens/s.

    ``reset()`` first, so that llama-cpp-python cannot reuse the previous
    round's prompt from its KV cache: the thinker gets no such discount either.
    """
    prompt = render_template(None, [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
                                    {"role": "user", "content": question(i)}])
    llm.reset()
    t0 = time.perf_counter()
    first = None
    n = 0
    for _ in llm.create_completion(prompt, max_tokens=max_tokens, stream=True, **SAMPLING):
        n += 1
        if first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    return n / (end - t0), (n - 1) / max(end - first, 1e-9)


def thinker_tok_s(thinker: LlamaCppThinker, k: int, max_tokens: int, base: int) -> tuple[float, float]:
    """k requests admitted at once and stepped together until all finish.

    Returns (end-to-end incl. the batched prefill, decode-only after the first step).
    """
    rids = [base + i for i in range(k)]
    t0 = time.perf_counter()
    for i, rid in enumerate(rids):
        thinker.prefill(WorkItem(rid, {"messages": [{"role": "user", "content": question(base + i)}]},
                                 params={"max_tokens": max_tokens}))
    live, generated, after_first, t1 = list(rids), 0, 0, None
    while live:
        for rid, res in thinker.step(live).items():
            if isinstance(res, Exception):
                raise res
            generated += 1
            if t1 is not None:
                after_first += 1
            if res.finished:
                thinker.release(rid)
                live.remove(rid)
        if t1 is None:
            t1 = time.perf_counter()
    end = time.perf_counter()
    return generated / (end - t0), after_first / max(end - t1, 1e-9)


def sampling_cost_ms(thinker: LlamaCppThinker) -> dict:
    """One sampler-chain draw vs the numpy sampler on the same 49k-logit row."""
    import numpy as np

    from runtime.models.think.sampling import LogitSampler, Sampling

    lc = thinker._lc
    thinker.prefill(WorkItem(1, "Hello", params={"max_tokens": 8}))
    thinker.step([1])
    n_vocab = thinker._vocab.n_tokens
    row = np.ctypeslib.as_array(lc.llama_get_logits_ith(thinker._ctx, -1), shape=(n_vocab,)).copy()
    chain = thinker._samplers.chain(Sampling(seed=1), index=0)
    t0 = time.perf_counter()
    for _ in range(200):
        lc.llama_sampler_sample(chain, thinker._ctx, -1)
    chain_ms = (time.perf_counter() - t0) / 200 * 1000
    lc.llama_sampler_free(chain)
    ns = LogitSampler(Sampling(seed=1))
    t0 = time.perf_counter()
    for _ in range(200):
        ns.sample(row, [1, 2, 3])
    numpy_ms = (time.perf_counter() - t0) / 200 * 1000
    thinker.release(1)
    return {"llama_sampler_chain": round(chain_ms, 3), "numpy": round(numpy_ms, 3)}


def measure(model_path: str, args: argparse.Namespace) -> tuple[dict, dict]:
    """Best of ``rounds`` for each column: (end-to-end, decode-only) tokens/s."""
    from llama_cpp import Llama

    keys = ("single_seq_baseline", "s1", "s4", "s8")
    e2e = dict.fromkeys(keys, 0.0)
    dec = dict.fromkeys(keys, 0.0)
    llm = Llama(model_path=model_path, n_threads=args.threads, n_threads_batch=args.threads,
                n_ctx=2048, verbose=False, seed=1)
    th = LlamaCppThinker(model_path=model_path, n_threads=args.threads, max_sequences=8,
                         seed=1, **SAMPLING)
    th.load()
    thinker_tok_s(th, 1, 8, 10_000)  # warm-up
    base = 0
    for _ in range(args.rounds):
        base += 100
        a, b = baseline_tok_s(llm, args.max_tokens, base)
        e2e["single_seq_baseline"] = max(e2e["single_seq_baseline"], a)
        dec["single_seq_baseline"] = max(dec["single_seq_baseline"], b)
        for k in (1, 4, 8):
            base += 10
            a, b = thinker_tok_s(th, k, args.max_tokens, base)
            e2e[f"s{k}"] = max(e2e[f"s{k}"], a)
            dec[f"s{k}"] = max(dec[f"s{k}"], b)
    llm.close()
    e2e = {k: round(v, 1) for k, v in e2e.items()}
    dec = {k: round(v, 1) for k, v in dec.items()}
    e2e["sampling_ms"] = sampling_cost_ms(th)
    th.close()
    return e2e, dec


def _print_rows(title: str, rows: list[tuple[str, dict]]) -> None:
    print(f"\n{title}")
    print(f"{'weights':<18}{'baseline 1 seq':>16}{'s1':>9}{'s4':>9}{'s8':>9}{'s8/baseline':>13}")
    for name, r in rows:
        ratio = r["s8"] / r["single_seq_baseline"] if r["single_seq_baseline"] else 0.0
        r["s8_over_baseline"] = round(ratio, 2)
        print(f"{name:<18}{r['single_seq_baseline']:>16.1f}{r['s1']:>9.1f}{r['s4']:>9.1f}"
              f"{r['s8']:>9.1f}{ratio:>12.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-requantized", action="store_true",
                    help="skip the Q4_0-requantized variant")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "thinker.json"))
    args = ap.parse_args()

    shipped = smollm2_gguf()
    results: dict = {"model": os.path.basename(shipped), "threads": args.threads,
                     "max_tokens": args.max_tokens, "rounds": args.rounds,
                     "note": "thinker_tok_s: end-to-end incl. prefill; *_decode_tok_s: after the first token"}
    e2e, dec = measure(shipped, args)
    results["sampling_ms"] = e2e.pop("sampling_ms")
    results["thinker_tok_s"] = e2e
    results["thinker_decode_tok_s"] = dec
    rows_e2e, rows_dec = [("shipped Q4_1", e2e)], [("shipped Q4_1", dec)]
    if not args.no_requantized:
        import llama_cpp

        q40 = requantized(llama_cpp, shipped, "q4_0")
        q_e2e, q_dec = measure(q40, args)
        q_e2e.pop("sampling_ms")
        results["requantized_q4_0_tok_s"] = q_e2e
        results["requantized_q4_0_decode_tok_s"] = q_dec
        rows_e2e.append(("requantize=q4_0", q_e2e))
        rows_dec.append(("requantize=q4_0", q_dec))
    head = f"(best of {args.rounds}, {args.max_tokens} tokens/request, {args.threads} threads)"
    _print_rows(f"aggregate tokens/s, end-to-end incl. prefill {head}", rows_e2e)
    _print_rows(f"aggregate tokens/s, decode only (after first token) {head}", rows_dec)
    if not args.no_requantized:
        for label, q, b in (("end-to-end", q_e2e, e2e), ("decode", q_dec, dec)):
            ratio = q["s8"] / b["single_seq_baseline"]
            results[f"requantized_s8_over_shipped_baseline_{label}"] = round(ratio, 2)
            print(f"requantize=q4_0 s8 vs shipped Q4_1 baseline ({label}): {ratio:.2f}x")
    print(f"sampling per token (ms): {results['sampling_ms']}")
    write_json(args.out, results)


if __name__ == "__main__":
    main()
