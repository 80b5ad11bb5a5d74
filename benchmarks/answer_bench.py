"""Is the brain worth asking?  Everyday answers and tool calls, every thinker
model side by side in one run, scored automatically.

Why: a voice agent that hears well but says that blue and yellow make pink,
or cannot set a timer, is a toy.  This asks each model what people ask a
voice assistant, through the embedded llama.cpp thinker exactly as the think
stage runs it (the profile's own args: system prompt, sampling, tool dialect),
and scores the replies by rule:

* everyday: 44 spoken-style requests (facts, arithmetic, advice, and
  follow-ups that refer to an earlier turn, asked after the model's own
  answer to that turn).  Right when the reply holds one of the expected
  content words; also counted: replies that are not speech (markdown, lists,
  code).  Time to the first token and to the first two words (what the
  speak stage waits for before its first audio, ``first_clause_words: 2``).
* tools, ``tool_choice: auto`` with four everyday tools: 24 requests that
  need a call (right = the expected tool with the expected arguments) and 12
  that need none (a call there is a false call).  Every call's arguments are
  checked against the tool's JSON Schema.  Also counted: replies whose
  spoken text holds markup (a call written as text, JSON, fences, tags).
* tools deep in a session: the same requests in sessions of 10 turns (chat
  and tool turns mixed, each call answered by a result and the model's reply
  kept in the history): right calls on the tool turns, false calls on the rest.

The models: each profile's think stage (configs/voice-cpu.yaml: the 1.5B,
configs/voice-cpu-fast.yaml: the 0.5B), the 1.5B requantised to Q4_0, SmolLM2,
the 0.5B file as published (Q5_0, to show what requantising to Q4_0 buys),
and Qwen's call-start rule swept.  Sampled
as each profile samples, with a fixed seed.

    python -m benchmarks.answer_bench [--only LABEL ...] [--quick]

Prints a table and writes benchmarks/results/answer_bench.json.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import yaml

from runtime.executor import StepResult, WorkItem
from runtime.models.model_files import qwen_gguf
from runtime.models.think.llama_cpp_thinker import LlamaCppThinker
from runtime.models.voice_contract import TOOL_CALL_DONE, think_events

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "answer_bench.json"

# (question, any of these words in the reply).  A tuple of questions is a
# conversation: the last one is scored, after the model answered the others.
EVERYDAY: list[tuple[str | tuple[str, ...], tuple[str, ...]]] = [
    ("What color do you get when you mix blue and yellow?", ("green",)),
    ("What is twelve times twelve?", ("144", "one hundred forty-four", "one hundred and forty-four")),
    ("Which planet is closest to the sun?", ("mercury",)),
    ("At what temperature does water freeze in Fahrenheit?", ("32", "thirty-two")),
    ("What is the capital of France?", ("paris",)),
    ("How many days are there in a week?", ("seven", "7")),
    ("What is seven plus eight?", ("15", "fifteen")),
    ("Who wrote Romeo and Juliet?", ("shakespeare",)),
    ("How many minutes are in an hour?", ("60", "sixty")),
    ("What is the largest ocean on Earth?", ("pacific",)),
    ("What gas do plants take in from the air?", ("carbon dioxide", "co2")),
    ("What is one hundred divided by four?", ("25", "twenty-five", "twenty five")),
    ("What is the capital of Japan?", ("tokyo",)),
    ("How many legs does a spider have?", ("eight", "8")),
    ("What do bees make?", ("honey",)),
    ("What is the opposite of hot?", ("cold",)),
    ("Which animal is known as the king of the jungle?", ("lion",)),
    ("What is the boiling point of water in Celsius?", ("100", "hundred")),
    ("How many months are in a year?", ("twelve", "12")),
    ("What is the square root of eighty-one?", ("nine", "9")),
    ("In which country are the pyramids of Giza?", ("egypt",)),
    ("What is the main language spoken in Brazil?", ("portuguese",)),
    ("What is nine minus four?", ("five", "5")),
    ("What is the freezing point of water in Celsius?", ("zero", "0")),
    ("What color is the sky on a clear day?", ("blue",)),
    ("How many hours are in a day?", ("24", "twenty-four", "twenty four")),
    ("What should I do if I can't fall asleep?", ("relax", "screen", "breath", "read", "routine",
                                                   "caffeine", "bed", "calm", "dark", "meditat")),
    ("How can I stay cool on a hot day?", ("water", "shade", "drink", "fan", "hydrat", "cool",
                                           "air condition")),
    ("What is a good way to remember a phone number?", ("chunk", "group", "repeat", "write",
                                                        "pattern", "practice", "say")),
    ("Any tips for making a good cup of tea?", ("boil", "steep", "water", "minutes", "fresh",
                                                 "hot")),
    ("What should I pack for a day at the beach?", ("sunscreen", "towel", "water", "hat")),
    ("How often should I water a cactus?", ("week", "rarely", "dry", "month", "sparingly",
                                            "little", "not often")),
    ("Is it better to walk or drive a short distance?", ("walk",)),
    ("What can I cook with eggs and cheese?", ("omelet", "omelette", "scrambled", "frittata",
                                               "quiche", "sandwich")),
    (("What is the capital of Italy?", "How many people live there, roughly?"),
     ("million",)),
    (("I'm thinking of getting a dog.", "What should I feed it?"),
     ("food", "kibble", "meat", "protein", "diet")),
    (("What is five times six?", "And if you add ten to that?"), ("40", "forty")),
    (("My favorite color is orange.", "What is my favorite color?"), ("orange",)),
    (("My name is Priya.", "What is my name?"), ("priya",)),
    (("What is the tallest mountain in the world?", "Which country is it in?"),
     ("nepal", "china", "tibet")),
    (("I have a meeting at three.", "What time is my meeting?"), ("three", "3")),
    (("Name a fruit that is yellow.", "What color is it when it's not ripe yet?"), ("green",)),
    (("How many sides does a triangle have?", "And a square?"), ("four", "4")),
    (("I'm going to Paris next week.", "Which famous tower should I visit there?"), ("eiffel",)),
]


def _fn(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "name": name, "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required}}


TOOLS = [
    _fn("get_weather", "Get the current weather for a city.",
        {"city": {"type": "string", "description": "The city name"}}, ["city"]),
    _fn("set_timer", "Start a countdown timer.",
        {"minutes": {"type": "integer", "minimum": 1, "maximum": 600}}, ["minutes"]),
    _fn("turn_on_lights", "Turn on the lights in a room of the house.",
        {"room": {"type": "string"}}, ["room"]),
    _fn("send_message", "Send a text message to a contact.",
        {"contact": {"type": "string"}, "text": {"type": "string"}}, ["contact", "text"]),
]
SCHEMAS = {t["name"]: t["parameters"] for t in TOOLS}

# (request, expected tool or None, {argument: expected value (a string: contained, case-blind)})
TOOL_REQUESTS: list[tuple[str, str | None, dict]] = [
    ("What's the weather like in Paris?", "get_weather", {"city": "paris"}),
    ("Is it raining in London right now?", "get_weather", {"city": "london"}),
    ("How hot is it in Madrid today?", "get_weather", {"city": "madrid"}),
    ("Do I need an umbrella in Seattle today?", "get_weather", {"city": "seattle"}),
    ("Tell me the weather in Tokyo.", "get_weather", {"city": "tokyo"}),
    ("What's the forecast for Berlin?", "get_weather", {"city": "berlin"}),
    ("Set a timer for ten minutes.", "set_timer", {"minutes": 10}),
    ("Start a five minute timer, please.", "set_timer", {"minutes": 5}),
    ("Can you time twenty minutes for me?", "set_timer", {"minutes": 20}),
    ("Remind me in three minutes with a timer.", "set_timer", {"minutes": 3}),
    ("Timer for fifteen minutes.", "set_timer", {"minutes": 15}),
    ("Set a timer for one hour.", "set_timer", {"minutes": 60}),
    ("Turn on the lights in the kitchen.", "turn_on_lights", {"room": "kitchen"}),
    ("Could you switch on the bedroom lights?", "turn_on_lights", {"room": "bedroom"}),
    ("Lights on in the living room, please.", "turn_on_lights", {"room": "living"}),
    ("It's dark in the bathroom, turn the lights on.", "turn_on_lights", {"room": "bathroom"}),
    ("Turn on the garage light.", "turn_on_lights", {"room": "garage"}),
    ("Please light up the office.", "turn_on_lights", {"room": "office"}),
    ("Text Anna that I'm running late.", "send_message", {"contact": "anna", "text": "late"}),
    ("Send a message to Tom saying happy birthday.", "send_message",
     {"contact": "tom", "text": "birthday"}),
    ("Tell Maria by text that dinner is ready.", "send_message", {"contact": "maria", "text": "dinner"}),
    ("Message Ben: see you at noon.", "send_message", {"contact": "ben", "text": "noon"}),
    ("Send my mom a text saying I love her.", "send_message", {"contact": "mom", "text": "love"}),
    ("Can you text Leo that the meeting moved to Friday?", "send_message",
     {"contact": "leo", "text": "friday"}),
    ("What is twelve times twelve?", None, {}),
    ("Tell me a joke.", None, {}),
    ("Who wrote Romeo and Juliet?", None, {}),
    ("What is the capital of Italy?", None, {}),
    ("Thanks, that's all for now.", None, {}),
    ("How do I boil an egg?", None, {}),
    ("What color do blue and yellow make?", None, {}),
    ("Which planet is closest to the sun?", None, {}),
    ("Good morning!", None, {}),
    ("How many days are in a leap year?", None, {}),
    ("What does a thermometer measure?", None, {}),
    ("Can you recommend a good book?", None, {}),
]
RESULT_OF = {"get_weather": '{"temperature_c": 18, "sky": "light rain"}',
             "set_timer": '{"status": "started"}', "turn_on_lights": '{"status": "on"}',
             "send_message": '{"status": "sent"}'}
SESSION_TURNS = 10
UNSPOKEN = re.compile(r"(\*\*|^\s*[-*#] |^\s*\d+\.\s|```|\n\s*\n)", re.M)
# Markup in a reply's spoken text: JSON's brackets, fences, tags, a call's keys
# (issue 43; runtime/models/think/markup_guard.py keeps them from speech).
SPOKEN_MARKUP = re.compile(r'[{}\[\]`]|</?[A-Za-z_][\w-]*>|"(?:name|function|arguments|parameters|tools)"\s*:')


@dataclass(frozen=True)
class Variant:
    label: str
    profile: str                      # the YAML whose think stage args are used
    overrides: dict = field(default_factory=dict)


DEFAULT, FAST = "configs/voice-cpu.yaml", "configs/voice-cpu-fast.yaml"
VARIANTS = [
    Variant("qwen1.5b-q4_k_m (voice-cpu)", DEFAULT),
    Variant("qwen0.5b-q4_0 (voice-cpu-fast)", FAST),
    Variant("qwen1.5b requantised q4_0", DEFAULT, {"requantize": "q4_0"}),
    Variant("smollm2-135m", FAST, {"model": "smollm2"}),
    Variant("qwen0.5b-q5_0 as published", FAST,
            {"model_path": str(qwen_gguf(source=True)), "requantize": None}),
    # the native dialect's call rule: a reply probes a call only when its first token's
    # probability of one reaches this (0: always; see tool_dialect); the 1.5B's is
    # calibrated apart (tool_dialect.CALL_START_BY_MODEL: 0.05)
    Variant("qwen1.5b-q4_k_m call start 0.005", DEFAULT, {"tool_call_threshold": 0.005}),
    Variant("qwen1.5b-q4_k_m call start 0.3", DEFAULT, {"tool_call_threshold": 0.3}),
    Variant("qwen0.5b-q4_0 call start 0.02", FAST, {"tool_call_threshold": 0.02}),
    Variant("qwen0.5b-q4_0 call start 0.005", FAST, {"tool_call_threshold": 0.005}),
    Variant("qwen0.5b-q4_0 call start 0.3", FAST, {"tool_call_threshold": 0.3}),
]


def think_args(v: Variant) -> dict:
    config = yaml.safe_load((ROOT / v.profile).read_text())
    stage = next(s for s in config["stages"] if s["name"] == "think")
    args = {**stage["args"], **v.overrides, "seed": 7, "max_sequences": 2, "n_ctx": 4096}
    return {k: val for k, val in args.items() if val is not None}


@dataclass
class Reply:
    text: str = ""
    calls: list[dict] = field(default_factory=list)
    ttft_s: float | None = None      # first text or call event
    two_words_s: float | None = None


class Asker:
    """One loaded thinker, asked one request at a time as the think stage would."""

    def __init__(self, args: dict) -> None:
        self.thinker = LlamaCppThinker(**args)
        self.thinker.load()
        self.rid = 0

    def ask(self, messages: list[dict], tools: list[dict] | None = None) -> Reply:
        self.rid += 1
        payload: dict = {"messages": messages}
        if tools:
            payload.update(tools=tools, tool_choice="auto")
        t0 = time.perf_counter()
        self.thinker.prefill(WorkItem(self.rid, payload))
        out = Reply()
        while True:
            sr = self.thinker.step([self.rid]).get(self.rid)
            if sr is None:
                continue
            assert isinstance(sr, StepResult), sr
            for ev in think_events(sr.chunk):
                if out.ttft_s is None:
                    out.ttft_s = time.perf_counter() - t0
                if isinstance(ev, str):
                    out.text += ev
                    if out.two_words_s is None and len(out.text.split()) >= 3:
                        out.two_words_s = time.perf_counter() - t0
                elif ev["type"] == TOOL_CALL_DONE:
                    out.calls.append(ev)
            if sr.finished:
                self.thinker.release(self.rid)
                if out.two_words_s is None and out.text.strip():
                    out.two_words_s = time.perf_counter() - t0
                return out

    def close(self) -> None:
        self.thinker.close()


def right_words(text: str, words: tuple[str, ...]) -> bool:
    low = text.lower().replace(",", "")
    return any(w in low for w in words)


def everyday(asker: Asker, items: list) -> dict:
    rows = []
    for question, words in items:
        turns = (question,) if isinstance(question, str) else question
        history: list[dict] = []
        for turn in turns:
            history.append({"role": "user", "content": turn})
            reply = asker.ask(history)
            history.append({"role": "assistant", "content": reply.text})
        rows.append({"q": turns[-1], "reply": reply.text, "right": right_words(reply.text, words),
                     "unspoken": bool(UNSPOKEN.search(reply.text.strip())),
                     "ttft_s": reply.ttft_s, "two_words_s": reply.two_words_s,
                     "follow_up": len(turns) > 1})
    return {"rows": rows, "right": sum(r["right"] for r in rows), "n": len(rows),
            "unspoken": sum(r["unspoken"] for r in rows),
            "ttft_p50_s": _p50(r["ttft_s"] for r in rows),
            "two_words_p50_s": _p50(r["two_words_s"] for r in rows)}


def call_verdict(calls: list[dict], want: str | None, args: dict) -> dict:
    """valid (every call schema-valid), right (the expected call, or none when none is wanted)."""
    valid = True
    for c in calls:
        try:
            jsonschema.validate(json.loads(c["arguments"]), SCHEMAS[c["name"]])
        except (ValueError, jsonschema.ValidationError):
            valid = False
    if want is None:
        return {"valid": valid, "right": not calls, "false_call": bool(calls)}
    ok = bool(calls) and calls[0]["name"] == want and valid
    if ok:
        got = json.loads(calls[0]["arguments"])
        for k, v in args.items():
            have = got.get(k)
            ok = ok and (have == v if isinstance(v, int) else isinstance(have, str) and v in have.lower())
    return {"valid": valid, "right": ok, "false_call": False}


def tools_single(asker: Asker, items: list) -> dict:
    rows = []
    for request, want, args in items:
        reply = asker.ask([{"role": "user", "content": request}], TOOLS)
        rows.append({"q": request, "want": want, "calls": [(c["name"], c["arguments"]) for c in reply.calls],
                     "text": reply.text, "ttft_s": reply.ttft_s, **call_verdict(reply.calls, want, args)})
    return _tool_figures(rows)


def tools_in_sessions(asker: Asker, items: list) -> dict:
    """Tool and no-tool requests interleaved, SESSION_TURNS per session, history kept."""
    wanted = [i for i in items if i[1]]
    chat = [i for i in items if not i[1]]
    order = []
    for i, item in enumerate(wanted):
        order.append(item)
        if i % 2 == 1 and chat:
            order.append(chat[(i // 2) % len(chat)])
    rows = []
    for start in range(0, len(order), SESSION_TURNS):
        history: list[dict] = []
        for turn, (request, want, args) in enumerate(order[start:start + SESSION_TURNS]):
            history.append({"role": "user", "content": request})
            reply = asker.ask(history, TOOLS)
            row = {"q": request, "turn": turn + 1, "want": want, "text": reply.text,
                   "calls": [(c["name"], c["arguments"]) for c in reply.calls],
                   "ttft_s": reply.ttft_s, **call_verdict(reply.calls, want, args)}
            rows.append(row)
            if reply.calls:
                history.append({"role": "assistant", "content": "", "tool_calls": [
                    {"id": c["call_id"], "type": "function",
                     "function": {"name": c["name"], "arguments": c["arguments"]}} for c in reply.calls]})
                history += [{"role": "tool", "tool_call_id": c["call_id"],
                             "content": RESULT_OF.get(c["name"], "{}")} for c in reply.calls]
                reply = asker.ask(history, TOOLS)
                row["text"] += reply.text   # what it said with the result is spoken too
            history.append({"role": "assistant", "content": reply.text})
    return _tool_figures(rows)


def _tool_figures(rows: list[dict]) -> dict:
    need = [r for r in rows if r["want"]]
    none = [r for r in rows if not r["want"]]
    calls = [r for r in rows if r["calls"]]
    return {"rows": rows, "right": sum(r["right"] for r in need), "n_need": len(need),
            "false_calls": sum(r["false_call"] for r in none), "n_none": len(none),
            "invalid": sum(not r["valid"] for r in calls), "n_calls": len(calls),
            "spoken_markup": sum(bool(SPOKEN_MARKUP.search(r["text"])) for r in rows),
            "ttft_p50_s": _p50(r["ttft_s"] for r in rows)}


def _p50(values) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.0f}%)" if b else "-"


def _ms(s: float | None) -> str:
    return f"{s * 1000:.0f}" if s is not None else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="labels (or a prefix) of the variants to run")
    ap.add_argument("--quick", action="store_true", help="every fourth request only (a smoke run)")
    ap.add_argument("--no-sessions", action="store_true", help="skip the 10-turn sessions")
    ap.add_argument("--tools-only", action="store_true", help="skip the everyday questions")
    a = ap.parse_args()
    step = 4 if a.quick else 1
    variants = [v for v in VARIANTS if not a.only or any(v.label.startswith(o) for o in a.only)]
    results = {}
    for v in variants:
        asker = Asker(think_args(v))
        try:
            res = {"everyday": everyday(asker, [] if a.tools_only else EVERYDAY[::step]),
                   "tools": tools_single(asker, TOOL_REQUESTS[::step])}
            if not a.no_sessions:
                res["session"] = tools_in_sessions(asker, TOOL_REQUESTS[::step])
        finally:
            asker.close()
        results[v.label] = res
        print(f"{v.label}: done", flush=True)
    print()
    print("| model | everyday right | not speech | TTFT p50 ms | 2 words p50 ms | tools right (auto) "
          "| false calls | invalid calls | spoken markup | in 10-turn sessions: right / false "
          "/ spoken markup |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, r in results.items():
        e, t, s = r["everyday"], r["tools"], r.get("session")
        sess = (f"{_pct(s['right'], s['n_need'])} / {_pct(s['false_calls'], s['n_none'])} "
                f"/ {s['spoken_markup']}" if s else "-")
        print(f"| {label} | {_pct(e['right'], e['n'])} | {e['unspoken']} | {_ms(e['ttft_p50_s'])} "
              f"| {_ms(e['two_words_p50_s'])} | {_pct(t['right'], t['n_need'])} "
              f"| {_pct(t['false_calls'], t['n_none'])} | {t['invalid']}/{t['n_calls']} "
              f"| {t['spoken_markup']} | {sess} |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1))
    print(f"\nwrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
