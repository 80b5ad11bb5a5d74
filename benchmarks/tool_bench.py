"""Function calling, embedded llama.cpp thinker vs the OpenAI-compatible thinker
against llama.cpp's server, side by side, through the served chat path.

Why: a voice agent's tool call must have arguments the tool can take, must
come when the user asked for something a tool does (and not otherwise), and
must be ready fast.  Each thinker runs as the think stage of a real voice
server and is asked over ``POST /v1/chat/completions`` (streamed), the same
think stage a Realtime session uses:

* (a) ``LlamaCppThinker`` (SmolLM2-135M GGUF, grammar-constrained calls);
* (b) ``OpenAICompatThinker`` -> ``python -m llama_cpp.server --chat_format
  chatml-function-calling`` (same GGUF), with ``stream_tool_calls: false``
  because that server cannot stream a call it chose itself.

A fixed set of 40 text requests, 20 that need one of three tools and 20 that
need none:

* ``auto`` on all 40: schema-valid argument rate (every call made is checked
  with jsonschema), right-tool rate (tool requests whose call names the
  expected tool), missed-call rate, false-call rate (no-tool requests that
  called);
* ``required`` and the expected function by name on the 20 tool requests: a
  call every time?  plus validity and right tool;
* time from the request being sent (the end of the user's turn) to the
  arguments being complete: p50 / p95 over every call made.

Then the same 40 requests SPOKEN (flite, in real time) to the whole default
voice pipeline (``configs/voice-cpu.yaml``: listen -> embedded thinker) over
the Realtime WebSocket with ``tool_choice: auto``, as a caller would: the
transcript now comes from speech recognition, and the time is from the TRUE
end of the user's speech (last speech frame sent; server VAD's 500 ms silence
window included) to ``response.function_call_arguments.done`` at the client.
Each request is asked in a new session (like the HTTP run), and the 20 tool
requests once more in one session whose history grows, as in a real call (the
small model calls far less with a conversation behind it).

Usage::

    .venv/bin/python benchmarks/tool_bench.py [--only embedded|openai|spoken] [--no-spoken] [--max-tokens 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import httpx
import jsonschema
import yaml

from voice_server.settings import ServerSettings
from voice_server.testing import TEST_API_KEY, ServerThread
from voice_server.testing.audio import flite_pcm
from voice_server.testing.callers.base import RealtimeWSTransport
from voice_server.testing.callers.caller import connected
from voice_server.testing.llama_server import LlamaServer
from voice_server.testing.server_process import served as served_process
from voice_server.testing.report import pct, write_json

RESULTS = Path(__file__).resolve().parent / "results" / "tool_bench.json"

SCHEMAS = {
    "get_weather": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "get_order_status": {"type": "object", "properties": {"order_id": {"type": "string"}},
                         "required": ["order_id"]},
    "book_appointment": {"type": "object", "properties": {
        "day": {"type": "string", "enum": ["monday", "tuesday", "wednesday", "thursday", "friday",
                                           "saturday", "sunday"]},
        "time": {"type": "string"}}, "required": ["day", "time"]},
}
DESCRIPTIONS = {"get_weather": "Get the current weather in a city.",
                "get_order_status": "Look up the delivery status of an order.",
                "book_appointment": "Book an appointment on a day at a time."}
TOOLS = [{"type": "function", "function": {"name": n, "description": DESCRIPTIONS[n], "parameters": s}}
         for n, s in SCHEMAS.items()]

REQUESTS: list[tuple[str, str | None]] = [
    ("What's the weather like in Paris?", "get_weather"),
    ("Is it raining in London right now?", "get_weather"),
    ("How hot is it in Madrid today?", "get_weather"),
    ("Tell me the weather in Tokyo.", "get_weather"),
    ("Do I need an umbrella in Berlin?", "get_weather"),
    ("What's the temperature in Oslo?", "get_weather"),
    ("Is it sunny in Rome?", "get_weather"),
    ("Where is my order A1234?", "get_order_status"),
    ("Can you check order 5521 for me?", "get_order_status"),
    ("Has order B-778 shipped yet?", "get_order_status"),
    ("What's the status of my order 90210?", "get_order_status"),
    ("When will order X42 arrive?", "get_order_status"),
    ("Track my package, order number 3141.", "get_order_status"),
    ("Is order Q9 delayed?", "get_order_status"),
    ("Book me an appointment on Monday at 10am.", "book_appointment"),
    ("Can I get a slot on Friday at 3pm?", "book_appointment"),
    ("Schedule a visit for Tuesday at nine.", "book_appointment"),
    ("I'd like to book Wednesday at 2:30 pm.", "book_appointment"),
    ("Make an appointment for Thursday morning at 8.", "book_appointment"),
    ("Reserve Saturday at noon for me.", "book_appointment"),
    ("Tell me a joke.", None),
    ("What is the capital of France?", None),
    ("How are you today?", None),
    ("What's two plus two?", None),
    ("Say hello to my friend Anna.", None),
    ("Who wrote Romeo and Juliet?", None),
    ("Give me a fun fact about cats.", None),
    ("What does a bee make?", None),
    ("Thank you, that's all.", None),
    ("Can you spell the word cat?", None),
    ("What colour is the sky?", None),
    ("Recommend a good book.", None),
    ("How many days are in a week?", None),
    ("What is your name?", None),
    ("Translate hello into Spanish.", None),
    ("Tell me something nice.", None),
    ("What is the largest planet?", None),
    ("Good morning!", None),
    ("How do I boil an egg?", None),
    ("What language is spoken in Brazil?", None),
]
assert len(REQUESTS) == 40 and sum(1 for _, t in REQUESTS if t) == 20


def think_only_config(executor: str, args: dict) -> dict:
    return {"name": "tool-bench", "stages": [{"name": "think", "executor": executor, "scheduler": "ar",
                                              "max_batch": 4, "output": True, "args": args}],
            "edges": [], "request_deadline_s": 120}


def ask(client: httpx.Client, text: str, tool_choice, max_tokens: int) -> dict:
    """One streamed chat completion: its text, calls, and when the arguments were complete."""
    body = {"messages": [{"role": "user", "content": text}], "tools": TOOLS, "tool_choice": tool_choice,
            "stream": True, "max_tokens": max_tokens, "seed": 1}
    t0 = time.perf_counter()
    calls: dict[int, dict] = {}
    text_out, finish, error, complete_at = "", None, None, []
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            return {"error": f"HTTP {r.status_code}: {r.read().decode()[:200]}", "calls": [], "text": "",
                    "complete_s": []}
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                if line.startswith("event: error"):
                    error = "in-band error"
                continue
            obj = json.loads(line[6:])
            if "error" in obj:
                error = obj["error"].get("message")
                continue
            ch = obj["choices"][0]
            d = ch.get("delta") or {}
            text_out += d.get("content") or ""
            for piece in d.get("tool_calls") or []:
                i = piece["index"]
                if i not in calls:
                    if calls:  # a new call completes the previous one
                        complete_at.append(time.perf_counter() - t0)
                    calls[i] = {"name": piece["function"]["name"], "arguments": ""}
                calls[i]["arguments"] += piece["function"].get("arguments") or ""
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
                if calls:
                    complete_at.append(time.perf_counter() - t0)
    return {"text": text_out, "calls": list(calls.values()), "finish": finish, "error": error,
            "complete_s": complete_at}


def valid(call: dict) -> bool:
    schema = SCHEMAS.get(call["name"])
    if schema is None:
        return False
    try:
        jsonschema.validate(json.loads(call["arguments"]), schema)
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


def rate(n: int, d: int) -> float | None:
    return round(100.0 * n / d, 1) if d else None


def run_thinker(base: str, max_tokens: int) -> dict:
    client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TEST_API_KEY}"}, timeout=180)
    ask(client, "Hello.", "none", 4)  # warm-up: first-request costs are not what is measured
    out: dict = {}
    all_calls, times, errors = [], [], 0
    auto = []
    for text, want in REQUESTS:
        r = ask(client, text, "auto", max_tokens)
        auto.append((want, r))
    tool_reqs = [(t, w) for t, w in REQUESTS if w]
    forced = {"required": [], "named": []}
    for text, want in tool_reqs:
        forced["required"].append((want, ask(client, text, "required", max_tokens)))
        forced["named"].append((want, ask(client, text, {"type": "function", "function": {"name": want}},
                                          max_tokens)))
    for _, r in auto + forced["required"] + forced["named"]:
        all_calls += r["calls"]
        times += r["complete_s"]
        errors += 1 if r["error"] else 0
    need = [r for w, r in auto if w]
    none_ = [r for w, r in auto if not w]
    out["auto"] = {
        "calls_made": sum(len(r["calls"]) for _, r in auto),
        "right_tool_pct": rate(sum(1 for w, r in auto if w and r["calls"] and r["calls"][0]["name"] == w), len(need)),
        "missed_call_pct": rate(sum(1 for r in need if not r["calls"]), len(need)),
        "false_call_pct": rate(sum(1 for r in none_ if r["calls"]), len(none_)),
        "errors": sum(1 for _, r in auto if r["error"]),
    }
    for mode, rs in forced.items():
        out[mode] = {
            "call_every_time": all(r["calls"] for _, r in rs),
            "called_pct": rate(sum(1 for _, r in rs if r["calls"]), len(rs)),
            "right_tool_pct": rate(sum(1 for w, r in rs if r["calls"] and r["calls"][0]["name"] == w), len(rs)),
            "errors": sum(1 for _, r in rs if r["error"]),
            "first_error": next((r["error"] for _, r in rs if r["error"]), None),
        }
    out["calls_total"] = len(all_calls)
    out["schema_valid_pct"] = rate(sum(1 for c in all_calls if valid(c)), len(all_calls))
    out["invalid_examples"] = [c for c in all_calls if not valid(c)][:3]
    out["args_complete_ms"] = {"p50": pct([t * 1000 for t in times], 50, 0),
                               "p95": pct([t * 1000 for t in times], 95, 0), "n": len(times)}
    out["errors_total"] = errors
    out["auto_examples"] = [{"request": t, "want": w, "calls": r["calls"], "text": r["text"][:60]}
                            for (t, _), (w, r) in list(zip(REQUESTS, auto))[::8]]
    client.close()
    return out


def served(config: dict, settings: ServerSettings, max_tokens: int) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(config, f)
    try:
        with ServerThread(f.name, settings) as srv:
            return run_thinker(srv.base, max_tokens)
    finally:
        Path(f.name).unlink(missing_ok=True)


def trimmed(pcm):
    """flite's audio without its trailing silence, so that the mic's end mark is
    the true end of speech."""
    loud = (abs(pcm.astype("int32")) > 300).nonzero()[0]
    return pcm[:loud[-1] + 1] if loud.size else pcm


async def spoken_turn(c, text: str, want: str | None, pcm) -> dict:
    n = len(c.events)
    _, end = c.say(pcm)
    t_end = await asyncio.wait_for(end, 60)
    k, _ = await c.wait(lambda e: e["type"] in ("response.done", "error"), n, 90)
    evs = c.events[n:k + 1]
    heard = next((e.get("transcript", "") for e in evs if e["type"] ==
                  "conversation.item.input_audio_transcription.completed"), "")
    calls = [{"name": e["name"], "arguments": e["arguments"], "at": e["_t"]}
             for e in evs if e["type"] == "response.function_call_arguments.done"]
    await asyncio.sleep(0.3)  # the reply's tail plays out before the next question
    return {"request": text, "want": want, "heard": heard, "calls": calls,
            "error": next((e["error"].get("code") for e in evs if e["type"] == "error"), None),
            "args_done_ms": round((calls[0]["at"] - t_end) * 1000) if calls else None}


async def spoken_run(config: str, max_tokens: int) -> dict:
    """The 40 requests spoken to the served voice pipeline, ``tool_choice: auto``:
    each in a new session (as the HTTP run asks them), then the 20 tool requests
    in ONE session whose history grows, as in a real call."""
    session = {"tools": [{"type": "function", **t["function"]} for t in TOOLS], "tool_choice": "auto",
               "max_output_tokens": max_tokens}
    speech = [(text, want, trimmed(flite_pcm(text))) for text, want in REQUESTS]
    fresh, history = [], []
    async with served_process(config) as server:
        def call():
            return connected(RealtimeWSTransport(server.url, TEST_API_KEY), session=session)
        for text, want, pcm in speech:
            async with call() as c:
                await c.wait(lambda e: e["type"] == "session.updated", 0, 30)
                fresh.append(await spoken_turn(c, text, want, pcm))
        async with call() as c:
            await c.wait(lambda e: e["type"] == "session.updated", 0, 30)
            for text, want, pcm in speech:
                if want:
                    history.append(await spoken_turn(c, text, want, pcm))
    out = spoken_figures(fresh)
    out["one_session"] = {k: v for k, v in spoken_figures(history).items()
                          if k not in ("false_call_pct", "examples")}
    return out


def spoken_figures(rows: list[dict]) -> dict:
    need = [r for r in rows if r["want"]]
    none_ = [r for r in rows if not r["want"]]
    times = [r["args_done_ms"] for r in rows if r["args_done_ms"] is not None]
    calls = [c for r in rows for c in r["calls"]]
    return {
        "requests": len(rows),
        "calls_total": len(calls),
        "schema_valid_pct": rate(sum(1 for c in calls if valid(c)), len(calls)),
        "right_tool_pct": rate(sum(1 for r in need if r["calls"] and r["calls"][0]["name"] == r["want"]),
                               len(need)),
        "missed_call_pct": rate(sum(1 for r in need if not r["calls"]), len(need)),
        "false_call_pct": rate(sum(1 for r in none_ if r["calls"]), len(none_)),
        "errors": sum(1 for r in rows if r["error"]),
        "end_of_speech_to_args_done_ms": {"p50": pct(times, 50, 0), "p95": pct(times, 95, 0),
                                          "n": len(times)},
        "examples": [{k: r[k] for k in ("request", "heard", "want")} | {"called": [c["name"] for c in r["calls"]]}
                     for r in rows[::8]],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("embedded", "openai", "spoken"))
    ap.add_argument("--max-tokens", type=int, default=32, help="text reply budget (calls get their own)")
    ap.add_argument("--no-spoken", action="store_true", help="skip the spoken Realtime run")
    ap.add_argument("--config", default="configs/voice-cpu.yaml", help="pipeline of the spoken run")
    a = ap.parse_args()
    settings = ServerSettings(api_keys=[TEST_API_KEY])
    sampling = {"temperature": 0.25, "top_p": 0.9, "repeat_penalty": 1.2, "max_tokens": a.max_tokens}
    results: dict = {"requests": len(REQUESTS), "tool_requests": 20, "tools": list(SCHEMAS), "thinkers": {}}
    t0 = time.perf_counter()
    if a.only in (None, "embedded"):
        results["thinkers"]["embedded llama.cpp"] = served(think_only_config(
            "runtime.models.think.llama_cpp_thinker:LlamaCppThinker",
            {"n_threads": 2, "max_sequences": 2, "n_ctx": 4096, **sampling}), settings, a.max_tokens)
    if a.only in (None, "openai"):
        with LlamaServer("--chat_format", "chatml-function-calling") as llama:
            results["thinkers"]["openai -> llama_cpp.server"] = served(think_only_config(
                "runtime.models.think.openai_thinker:OpenAICompatThinker",
                {"base_url": llama.url + "/v1", "model": "smollm2", "penalty_field": "repeat_penalty",
                 "stream_tool_calls": False, **sampling}), settings, a.max_tokens)
    if not a.no_spoken and a.only in (None, "spoken"):
        results["spoken_realtime"] = sp = asyncio.run(spoken_run(a.config, a.max_tokens))
        for label, r in (("each request in a new session", sp), ("20 tool requests in one session",
                                                                    sp["one_session"])):
            lat = r["end_of_speech_to_args_done_ms"]
            print(f"spoken over the Realtime WebSocket ({a.config}, auto), {label}: "
                  f"{r['calls_total']} calls, schema-valid {r['schema_valid_pct']}%, "
                  f"right tool {r['right_tool_pct']}%, missed {r['missed_call_pct']}%, "
                  f"false calls {r.get('false_call_pct', '-')}%, end of speech -> arguments done "
                  f"p50/p95 {lat['p50']}/{lat['p95']} ms, errors {r['errors']}", flush=True)
    results["wall_s"] = round(time.perf_counter() - t0, 1)
    names = list(results["thinkers"])
    rows = [
        ("schema-valid arguments %", lambda r: r["schema_valid_pct"]),
        ("calls checked", lambda r: r["calls_total"]),
        ("auto: right tool % (20 need one)", lambda r: r["auto"]["right_tool_pct"]),
        ("auto: missed call %", lambda r: r["auto"]["missed_call_pct"]),
        ("auto: false call % (20 need none)", lambda r: r["auto"]["false_call_pct"]),
        ("required: call every time", lambda r: r["required"]["call_every_time"]),
        ("required: right tool %", lambda r: r["required"]["right_tool_pct"]),
        ("named: call every time", lambda r: r["named"]["call_every_time"]),
        ("args complete p50 ms", lambda r: r["args_complete_ms"]["p50"]),
        ("args complete p95 ms", lambda r: r["args_complete_ms"]["p95"]),
        ("requests that failed", lambda r: r["errors_total"]),
    ]
    print(f"\n{'':36}" + "".join(f"{n:>30}" for n in names))
    for label, get in rows:
        print(f"{label:36}" + "".join(f"{str(get(results['thinkers'][n])):>30}" for n in names))
    for n in names:
        err = results["thinkers"][n]["required"]["first_error"]
        if err:
            print(f"{n}: required failed with: {err[:160]}")
    write_json(RESULTS, results, f" ({results['wall_s']} s)")


if __name__ == "__main__":
    main()
