"""Think's thread counts under load: prompt and decode steps with 1 and 2
threads while the rest of the pipeline runs beside them.

Alone, a one-token decode step is fastest on one thread of a 2-core machine
(two wait on each other) and a prompt on two; under load the other core is
busy with recognition, voice activity and speech, so the choice is measured
where it matters: N callers on the served pipeline (capacity_bench's
callers), one server per variant of ``n_threads`` (one-token steps) and
``n_threads_batch`` (steps of several tokens), the variants alternated round
by round in one run.  Per variant: first audio p50/p95 from the true end of
speech, and the think stage's own step figures (steps holding prompt tokens:
ms per prompt token; decode steps: ms per step, tokens per step), with the
cores each kind kept busy (its CPU over its wall time).

    .venv/bin/python -m benchmarks.think_threads_bench                  # 1/1, 1/2, 2/2 at 4 callers
    .venv/bin/python -m benchmarks.think_threads_bench --variants 1/2,2/2 --rounds 3
    .venv/bin/python -m benchmarks.think_threads_bench --callers 1 \\
        --variants "base=,kv8=think.kv_type:q8_0,w1=speak.first_clause_words:1"

Any other stage arg is a variant too (``label=stage.arg:value+stage.arg:value``).

Writes benchmarks/results/think_threads.json.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import yaml

from benchmarks.capacity_bench import level, trim
from voice_server.testing.callers.caller import load_speech
from voice_server.testing.report import pct, write_json
from voice_server.testing.server_process import served


def parse_variant(spec: str) -> tuple[str, dict[str, dict]]:
    """``T/B`` (think's n_threads / n_threads_batch), or ``label=stage.arg:value+...``
    for any stage arg (``kv8=think.kv_type:q8_0``, ``w1=speak.first_clause_words:1``;
    ``base=`` changes nothing): the label and {stage: {arg: value}}."""
    if "=" not in spec:
        t, b = (int(x) for x in spec.split("/"))
        return spec, {"think": {"n_threads": t, "n_threads_batch": b}}
    label, _, sets = spec.partition("=")
    changes: dict[str, dict] = {}
    for item in filter(None, sets.split("+")):
        key, _, value = item.partition(":")
        stage, _, arg = key.partition(".")
        changes.setdefault(stage, {})[arg] = yaml.safe_load(value)
    return label, changes


def variant_config(base: str, label: str, changes: dict[str, dict], folder: Path) -> Path:
    data = yaml.safe_load(Path(base).read_text())
    for st in data["stages"]:
        st["args"].update(changes.get(st["name"], {}))
    path = folder / f"{Path(base).stem}-{label.replace('/', '-')}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def think_steps(rt: dict) -> dict:
    out: dict = {}
    for p in rt.get("processes", {}).values():
        ex = p.get("stages", {}).get("think", {}).get("executor") or {}
        for kind, c in (ex.get("steps") or {}).items():
            acc = out.setdefault(kind, {"steps": 0, "tokens": 0, "cpu_s": 0.0, "wall_s": 0.0})
            for k in acc:
                acc[k] += c.get(k, 0)
    return out


async def one(config: Path, callers: int, turns: int, seed: int, speech: dict) -> dict:
    async with served(str(config)) as server:
        before = think_steps(await server.runtime())
        r = await level(server, server.url, None, callers, speech, turns, seed)
        after = think_steps(await server.runtime())
    steps = {k: {f: after[k][f] - before.get(k, {}).get(f, 0) for f in after[k]} for k in after}
    return {"first_audio_samples_ms": r["first_audio_samples_ms"], "errors": r["errors"],
            "steps": steps}


def summary(runs: list[dict]) -> dict:
    fa = [x for r in runs for x in r["first_audio_samples_ms"]]
    steps: dict = {}
    for r in runs:
        for kind, c in r["steps"].items():
            acc = steps.setdefault(kind, {"steps": 0, "tokens": 0, "cpu_s": 0.0, "wall_s": 0.0})
            for k in acc:
                acc[k] += c[k]
    out = {"turns": len(fa), "first_audio_ms": {"p50": pct(fa, 50), "p95": pct(fa, 95)},
           "errors": sum(r["errors"] for r in runs)}
    p, d = steps.get("prompt"), steps.get("decode")
    if p and p["tokens"]:
        out["prompt_ms_per_token"] = round(p["wall_s"] * 1000 / p["tokens"], 2)
        out["prompt_cores"] = round(p["cpu_s"] / p["wall_s"], 2) if p["wall_s"] else None
    if d and d["steps"]:
        out["decode_ms_per_step"] = round(d["wall_s"] * 1000 / d["steps"], 2)
        out["decode_tokens_per_step"] = round(d["tokens"] / d["steps"], 2)
        out["decode_ms_per_token"] = round(d["wall_s"] * 1000 / d["tokens"], 2)
        out["decode_cores"] = round(d["cpu_s"] / d["wall_s"], 2) if d["wall_s"] else None
    out["steps"] = steps
    return out


async def main_async(a) -> dict:
    speech = load_speech()
    speech = {k: [trim(p) for p in v] if isinstance(v, list) else trim(v) for k, v in speech.items()}
    variants = [parse_variant(v) for v in a.variants.split(",")]
    runs: dict[str, list[dict]] = {label: [] for label, _ in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.rounds):
            order = variants if rnd % 2 == 0 else variants[::-1]
            for label, changes in order:
                cfg = variant_config(a.config, label, changes, Path(tmp))
                r = await one(cfg, a.callers, a.turns, a.seed + rnd, speech)
                runs[label].append(r)
                print(f"round {rnd + 1} {label}: first audio "
                      f"p50 {pct(r['first_audio_samples_ms'], 50)} ms, errors {r['errors']}", flush=True)
    return {k: summary(v) for k, v in runs.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/voice-cpu.yaml")
    ap.add_argument("--variants", default="1/1,1/2,2/2",
                    help="comma-separated: n_threads/n_threads_batch, or label=stage.arg:value+...")
    ap.add_argument("--callers", type=int, default=4)
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--out", default="benchmarks/results/think_threads.json")
    a = ap.parse_args()
    res = asyncio.run(main_async(a))
    print(f"\n{a.callers} callers, {a.config}")
    print(f"{'variant':>22} {'turns':>6} {'first audio p50/p95 ms':>23} "
          f"{'prompt ms/token':>16} {'cores':>6} {'decode ms/step':>15} {'tokens/step':>12} {'cores':>6}")
    for k, r in res.items():
        fa = r["first_audio_ms"]
        print(f"{k:>22} {r['turns']:>6} {str(fa['p50']) + ' / ' + str(fa['p95']):>23} "
              f"{str(r.get('prompt_ms_per_token')):>16} {str(r.get('prompt_cores')):>6} "
              f"{str(r.get('decode_ms_per_step')):>15} {str(r.get('decode_tokens_per_step')):>12} "
              f"{str(r.get('decode_cores')):>6}")
    write_json(a.out, {"config": a.config, "callers": a.callers, "turns": a.turns,
                       "rounds": a.rounds, "variants": res})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
