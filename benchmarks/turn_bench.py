"""Turn-taking benchmark: each turn-detection mode side by side, in one run.

Spoken test sets are built here with flite voices (slt, rms, awb, kal16),
varied in voice and speaking rate, with pause lengths drawn from a fixed seed:

* ``complete``: whole questions, then silence;
* ``paused``: a sentence with a 400-900 ms pause in the middle ("i would like
  to book a table ... for two people at seven").

For ``server_vad`` (a fixed 500 ms silence window, today's default) and
``semantic_vad`` at each eagerness (the Smart Turn model decides how long to
wait), over a real served ``voice-agent serve`` (its own process) and the
Realtime WebSocket, in real time:

* ``latency_ms``: TRUE end of the user's speech (last speech frame sent) ->
  first ``response.output_audio.delta`` at the client (p50/p95, ``complete``),
  and (``heard``) to when its voice sounds there (the reply's leading silence
  played: :mod:`voice_server.testing.callers.heard`);
* ``latency_human_ms``: the same on recordings of people (``--human``: the
  LibriVox sentences and spoken commands of ``voice_server.testing.speech_corpus``,
  cut to the span above 5% of their peak: the true speech bounds);
* ``premature_rate``: share of ``paused`` sentences whose turn was ended in the
  pause (the server committed the first half, or answered, before the
  second half was spoken);
* ``verdicts``: the end-of-turn model's complete/incomplete counts.

* ``wasted_think_ratio``: think tokens of replies prepared during a pause and
  then dropped (the speaker went on), over all think tokens (from ``/metrics``).
* ``think``: the think stage's KV cells (used, kept by finished sequences) at
  the start of the mode and at its end (its own session's cells still in:
  they are forgotten once it has closed), and its mean step time over the
  mode: modes run one after another on one server, and cells a mode left
  would make every later step attend over more of the cache.

And during a long reply (paced: the client holds at most ``output_lead_ms``):

* ``stop_ms``: real interruptions ("wait, stop, what about tomorrow", and one-word
  commands said quickly, "stop", "wait", "no") -> when a
  client that plays each delta on arrival and stops at
  ``voice_agent.output_audio.paused`` or ``speech_started`` (the web demo)
  stops hearing the reply, from the first interrupting frame sent (p50/p95);
  ``stop_ms_standard``: the same for a client that knows no extension event
  (it stops at ``speech_started``, or when it runs out of audio: at most
  ``output_lead_ms`` after the pause);
* ``false_cancel_rate`` / ``resumed_rate``: of coughs and a door knock (noise
  bursts made here), backchannels ("mm hmm", "yeah", "okay", "right", "uh
  huh", "sure", flite) and the reply's own voice in the caller's mic (a
  speakerphone: what the client plays comes back at -20 dB, 150 ms late,
  for the whole reply), the share that cancelled the reply, and of those
  that paused it the share resumed (a trial that never paused it, as the
  echo should not, counts as resumed: the reply went on).
* ``underruns``: gaps (> 2 ms) where a client that plays each delta end to
  end, on arrival, ran out of audio in the middle of the reply (before the
  trial's sound, or through the whole echo trial): ``healthy`` as the deltas
  arrived (loopback), ``jitter`` with each delta reaching the client a random
  20-50 ms later (``--jitter-ms``, seeded; in order, as over TCP); and
  ``standard_gap_ms``: the silence a standard client hears in a reply that
  went on after a backchannel or a noise (the pause outlasted its lead).

Over a phone line (``--phone``: a Twilio Media Streams caller through
``/v1/telephony/twilio``, a new call for each trial, ``server_vad``):

* ``phone.stop_ms``: the same interruptions -> when the caller stops
  hearing the reply; the provider plays what it was sent in real time, end to
  end, and a ``clear`` drops what it had not played (:func:`phone_heard`); a
  trial where the caller heard nothing at the interruption (generation had
  fallen behind) is counted in ``silent_at_interruption``, not timed;
* ``phone.false_cancel_rate`` / ``resumed_rate`` for the noises and the
  backchannels, and ``phone.underruns`` (healthy line, before the trial sound).

    .venv/bin/python -m benchmarks.turn_bench
    .venv/bin/python -m benchmarks.turn_bench --modes server_vad,semantic_vad:auto --repeat 2
    .venv/bin/python -m benchmarks.turn_bench --modes server_vad --no-latency --phone   # stop only

Prints a table; writes benchmarks/results/turn.json with keys
``modes.<mode>.{latency_ms.{p50,p95}, premature_rate, stop_ms.{p50,p95},
false_cancel_rate, resumed_rate, wasted_think_ratio}``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import random
from dataclasses import dataclass, field

import numpy as np

from voice_server.audio_codec import resample
from voice_server.testing.audio import flite_pcm
from voice_server.testing.callers.base import RealtimeWSTransport
from voice_server.testing.callers.caller import Caller, connected
from voice_server.testing.callers.heard import first_heard
from voice_server.testing.callers.twilio import TwilioCallerTransport
from voice_server.testing.echo import PlayoutEcho
from voice_server.testing.report import pct, write_json
from voice_server.testing.server_process import add_server_arguments, served

RATE = 24000
VOICES = [("slt", 1.0), ("rms", 1.0), ("awb", 1.1), ("kal16", 0.95), ("slt", 1.15), ("rms", 0.9)]
COMPLETE = ["what is the capital of france", "can you recommend a good book",
            "how far away is the moon", "what time does the store open tomorrow",
            "tell me a fun fact about cats", "what is the weather like today",
            "how do i reset my password", "please turn off the lights in the kitchen",
            "who wrote the lord of the rings", "i need a taxi to the airport",
            "set a timer for ten minutes", "thanks, that is all for now"]
# Where people pause mid-sentence: mostly after a function word ("to", "the",
# "is"), sometimes at a clause boundary that could end the sentence.
PAUSED = [("i would like to book a table", "for two people at seven"),
          ("can you tell me how", "to get to the train station"),
          ("my order number is", "four five six seven"),
          ("i was wondering if", "you could help me with my account"),
          ("what i really need is", "a cheaper phone plan"),
          ("please remind me to", "call my mother this evening"),
          ("i want to send a package to", "my sister in boston"),
          ("could you check the", "balance on my savings account"),
          ("the problem is that", "my internet keeps dropping"),
          ("i need to change my flight", "because my meeting moved to friday")]
MODES = ["server_vad", "semantic_vad:low", "semantic_vad:auto", "semantic_vad:high"]
# the interruption trials do not depend on how the end of a turn is found: run them
# for today's default and for the semantic default
INTERRUPTION_MODES = ["server_vad", "semantic_vad:auto"]
BACKCHANNELS = ["mm hmm", "yeah", "okay", "right", "uh huh", "sure"]
INTERRUPTIONS = ["wait, stop, what about tomorrow", "actually tell me the time instead",
                 "no no, i meant the other one", "hold on, can you repeat that"]
# one-word commands said quickly ("Stop."): shorter than speech must be, an
# interruption all the same (the listen stage reads such a sound; issue 30)
COMMANDS = ["stop", "wait", "no"]
COMMAND_STRETCH = 0.8
STORY = "tell me a long story about a dragon who learns to fly"
STORY_INSTRUCTIONS = "You tell long, detailed stories of many sentences."
JITTER_MS = (20.0, 50.0)   # network jitter for the client's underrun count
GAP_S = 0.002              # a gap in playback shorter than this is no stutter


def speak(text: str, voice: str, stretch: float) -> np.ndarray:
    """int16 at 24 kHz, the synthesiser's leading/trailing quiet cut (the true speech bounds)."""
    pcm = flite_pcm(text, RATE, voice, stretch)
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 300)
    return pcm[loud[0]:loud[-1] + 1] if loud.size else pcm


def human_set() -> list[dict]:
    """People's recordings, not synthetic voices, at the benchmark's rate."""
    from voice_server.testing.speech_corpus import human_clips

    out = []
    for clip in human_clips():
        if clip.group == "cards":       # one speaker reading card names: not questions
            continue
        pcm = resample((np.clip(clip.audio, -1, 1) * 32767).astype(np.int16), 16000, RATE)
        loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 0.05 * np.abs(pcm).max())
        out.append({"text": clip.text, "pcm": pcm[loud[0]:loud[-1] + 1]})
    return out


def build_sets(seed: int, repeat: int = 1) -> dict:
    """Each sentence ``repeat`` times, in a voice and at a rate drawn from ``seed``."""
    rng = random.Random(seed)
    complete = []
    for text in COMPLETE * repeat:
        voice, stretch = rng.choice(VOICES)
        complete.append({"text": text, "pcm": speak(text, voice, stretch)})
    paused = []
    for a, b in PAUSED * repeat:
        voice, stretch = rng.choice(VOICES)
        gap_ms = rng.uniform(400, 900)
        paused.append({"text": f"{a} {b}", "first": speak(a, voice, stretch),
                       "second": speak(b, voice, stretch), "gap_ms": round(gap_ms)})
    nrng = np.random.default_rng(seed)
    noises = []
    for dur_ms in (120, 160, 200):           # coughs: shaped bursts of noise
        n = int(RATE * dur_ms / 1000)
        env = np.hanning(n) * 9000
        noises.append({"kind": "cough", "pcm": (nrng.normal(0, 1, n) * env).astype(np.int16)})
    knock = np.zeros(int(RATE * 0.35), np.int16)  # a door: two short knocks
    for at in (0, int(RATE * 0.2)):
        k = int(RATE * 0.03)
        knock[at:at + k] = (nrng.normal(0, 1, k) * np.hanning(k) * 14000).astype(np.int16)
    noises.append({"kind": "knock", "pcm": knock})
    backchannels = [{"kind": "backchannel", "text": t,
                     "pcm": speak(t, *VOICES[i % len(VOICES)])} for i, t in enumerate(BACKCHANNELS)]
    interruptions = [{"kind": "interruption", "text": t, "pcm": speak(t, *VOICES[(i + 1) % len(VOICES)])}
                     for i, t in enumerate(INTERRUPTIONS)]
    interruptions += [{"kind": "interruption", "text": t,
                       "pcm": speak(t, VOICES[i % len(VOICES)][0], COMMAND_STRETCH)}
                      for i, t in enumerate(COMMANDS)]
    story = speak(STORY, "slt", 1.0)
    return {"complete": complete, "paused": paused, "noise": noises, "backchannel": backchannels,
            "interruption": interruptions, "story": story}


def heard_until(events: list[dict], response_id: str, after: float,
                extensions: bool = True) -> float | None:
    """When a client that plays each delta as it arrives, end to end, stops
    hearing this reply after ``after``: at ``speech_started`` (as standard
    clients do), at ``voice_agent.output_audio.paused`` too with
    ``extensions``, or when it runs out of audio."""
    stops = ("input_audio_buffer.speech_started",) + \
        (("voice_agent.output_audio.paused",) if extensions else ())
    end, stopped = None, None
    for e in events:
        if e["type"] == "response.output_audio.delta" and e["response_id"] == response_id:
            start = e["_t"] if end is None else max(end, e["_t"])
            end = start + len(base64.b64decode(e["delta"])) / 2 / RATE
        elif e["type"] in stops and e["_t"] >= after and end is not None:
            stopped = e["_t"]
            break
    if end is None:
        return None
    return min(end, stopped) if stopped is not None else end


def delta_ms(e: dict) -> float:
    """Audio in a delta: a phone caller's carries ``_ms``, the WebSocket's its pcm16."""
    if "_ms" in e:
        return e["_ms"]
    return len(base64.b64decode(e["delta"])) / 2 / RATE * 1000


def playback_gaps(events: list[dict], response_id: str, until: float,
                  jitter_ms: tuple[float, float] | None = None,
                  rng: random.Random | None = None,
                  after: float | None = None) -> tuple[int, float, list]:
    """A client plays each delta of the reply end to end from its arrival,
    each arriving ``jitter_ms`` (uniform) late with ``jitter_ms`` and in order
    (TCP): the gaps where it ran out of audio between deltas that arrived in
    [``after``, ``until``) (one after the first delta at least), as (count,
    total ms, [(ms after the first delta, gap ms)])."""
    end, arrived, n, total, first, where = None, None, 0, 0.0, None, []
    for e in events:
        if e["type"] != "response.output_audio.delta" or e["response_id"] != response_id:
            continue
        if e["_t"] >= until:
            break
        t = e["_t"] + ((rng or random).uniform(*jitter_ms) / 1000 if jitter_ms else 0.0)
        arrived = t if arrived is None else max(arrived, t)
        if end is not None and arrived > end + GAP_S and (after is None or e["_t"] >= after):
            n += 1
            total += (arrived - end) * 1000
            where.append((round((e["_t"] - first) * 1000), round((arrived - end) * 1000)))
        first = e["_t"] if first is None else first
        start = arrived if end is None else max(end, arrived)
        end = start + delta_ms(e) / 1000
    return n, total, where


async def during_reply(c: Caller, story: np.ndarray, trial: dict, echo: bool = False,
                       jitter_rng: random.Random | None = None) -> dict:
    """Ask for a long reply; about a second into its audio, play the trial sound
    (for ``echo``: the client's speaker comes back into its mic, -20 dB, 150 ms
    late, from the start of the reply); report whether the reply was
    cancelled, paused, resumed, and for real interruptions when the client
    stopped hearing it."""
    await forget_conversation(c)     # every trial the same request, the same long story
    n = len(c.events)
    c.say(story)
    i, first = await c.wait(lambda e: e["type"] == "response.output_audio.delta", n, 60)
    rid = first["response_id"]
    if echo:
        c.echo = PlayoutEcho(RATE, gain=0.1, delay_ms=150.0)   # from the reply's first audio
        for e in c.events[i:]:
            if e["type"] == "response.output_audio.delta" and e["response_id"] == rid:
                c.echo.heard_delta(e, e["_t"])
        await asyncio.sleep(3.5)
        t0 = None
    else:
        await asyncio.sleep(1.0)
        start, end = c.say(trial["pcm"])
        t0 = await asyncio.wait_for(start, 30)
        await asyncio.wait_for(end, 30)
        await asyncio.sleep(1.5)
    c.echo = None
    evs = c.events[i:]
    window_end = evs[-1]["_t"] + 1 if evs else 0.0
    until = t0 if t0 is not None else window_end
    healthy = playback_gaps(evs, rid, until)
    underruns = {"healthy": healthy[0], "where": healthy[2],
                 "jitter": playback_gaps(evs, rid, until, JITTER_MS, jitter_rng)[0]}
    cancelled = any(e["type"] == "response.done" and e["response"]["id"] == rid
                    and e["response"]["status"] == "cancelled" for e in evs)
    paused = any(e["type"] == "voice_agent.output_audio.paused" and e["response_id"] == rid
                 for e in evs)
    resumed = any(e["type"] == "voice_agent.output_audio.resumed" and e["response_id"] == rid
                  for e in evs)
    stops = {}
    if cancelled and t0 is not None:
        for key, ext in (("stop_ms", True), ("stop_ms_standard", False)):
            stop = heard_until(evs, rid, t0, ext)
            stops[key] = None if stop is None else (stop - t0) * 1000
    await settle(c, n, cancel=True)   # the reply, and one to an interruption, are not needed
    ended_before = t0 is not None and any(   # (an echo starts with the reply)
        e["type"] == "response.done" and e["response"]["id"] == rid and e["_t"] < t0 for e in evs)
    heard = [e["transcript"] for e in evs
             if e["type"] == "conversation.item.input_audio_transcription.completed"]
    gap_ms = playback_gaps(evs, rid, window_end, after=t0)[1] \
        if t0 is not None and not cancelled else None
    return {"cancelled": cancelled, "paused": paused, "resumed": resumed, "heard": heard,
            "valid": not ended_before, "underruns": underruns, "standard_gap_ms": gap_ms,
            **stops}


async def forget_conversation(c: Caller) -> None:
    """Delete every item so far (the next reply does not depend on the trials before)."""
    added = [e["item"]["id"] for e in c.events if e["type"] == "conversation.item.added"]
    gone = {e["item_id"] for e in c.events if e["type"] == "conversation.item.deleted"}
    for item_id in dict.fromkeys(added):
        if item_id not in gone:
            await c.t.send_event({"type": "conversation.item.delete", "item_id": item_id})


async def interruption_trials(c: Caller, sets: dict, seed: int = 11) -> dict:
    await c.t.send_event({"type": "session.update", "session": {
        "type": "realtime", "max_output_tokens": 120, "instructions": STORY_INSTRUCTIONS}})
    stops, standard, false_cancel, resumed, total_false, invalid = [], [], 0, 0, 0, 0
    by_kind: dict = {}
    jitter_rng = random.Random(seed)
    underruns = {"healthy": 0, "jitter": 0, "trials": 0, "where": []}
    gaps: list[float] = []

    def count(r: dict) -> None:
        underruns["trials"] += 1
        underruns["healthy"] += r["underruns"]["healthy"]
        underruns["jitter"] += r["underruns"]["jitter"]
        underruns["where"] += r["underruns"]["where"]   # (ms into the reply, gap ms)

    missed = []
    for trial in sets["interruption"]:
        r = await during_reply(c, sets["story"], trial, jitter_rng=jitter_rng)
        count(r)
        invalid += not r["valid"]
        if r.get("stop_ms") is not None:
            stops.append(r["stop_ms"])
        else:
            missed.append(trial["text"] + " -> " + " / ".join(r["heard"]))
        if r.get("stop_ms_standard") is not None:
            standard.append(r["stop_ms_standard"])
    for trial in sets["noise"] + sets["backchannel"] + [{"kind": "echo"}] * 2:
        r = await during_reply(c, sets["story"], trial, echo=trial["kind"] == "echo",
                               jitter_rng=jitter_rng)
        count(r)
        if r["standard_gap_ms"] is not None:
            gaps.append(r["standard_gap_ms"])
        if not r["valid"]:          # the reply had ended: there was nothing to interrupt
            invalid += 1
            continue
        total_false += 1
        false_cancel += r["cancelled"]
        went_on = not r["cancelled"] and (r["resumed"] or not r["paused"])
        resumed += went_on
        k = by_kind.setdefault(trial["kind"], {"n": 0, "cancelled": 0, "paused": 0, "went_on": 0,
                                               "cancelled_by": []})
        if r["cancelled"]:
            k["cancelled_by"].append(trial.get("text", trial["kind"]) + " -> " + " / ".join(r["heard"]))
        k["n"] += 1
        k["cancelled"] += r["cancelled"]
        k["paused"] += r["paused"]
        k["went_on"] += went_on
    return {"stop_ms": {"p50": pct(stops, 50), "p95": pct(stops, 95), "n": len(stops),
                        "not_stopped": len(sets["interruption"]) - len(stops),
                        "not_stopped_by": missed},
            "stop_ms_standard": {"p50": pct(standard, 50), "p95": pct(standard, 95)},
            "false_cancel_rate": round(false_cancel / total_false, 3),
            "resumed_rate": round(resumed / total_false, 3), "false_trials": total_false,
            "invalid_trials": invalid,
            "false_by_kind": by_kind, "underruns": underruns,
            "standard_gap_ms": {"p50": pct(gaps, 50), "max": round(max(gaps)) if gaps else None,
                                "n": len(gaps)}}


def phone_heard(events: list[dict], response_id: str, t0: float) -> dict:
    """What a phone caller heard of the reply: the provider plays what it is
    sent end to end, in real time, and a ``clear`` drops what it had not
    played.  ``stop``: when the last audio it played ended; cancelled: cleared
    after ``t0`` and nothing sent after the clear; resumed: sent again after a
    clear that came after ``t0``; ``playing_at_t0``: the caller heard the reply
    when the interruption began (not a gap where generation fell behind)."""
    end, last_delta, clears, playing = None, None, [], None
    for e in events:
        if playing is None and e["_t"] >= t0:
            playing = end is not None and end > t0
        if e["type"] == "response.output_audio.delta" and e["response_id"] == response_id:
            end = e["_t"] + e["_ms"] / 1000 if end is None else max(end, e["_t"]) + e["_ms"] / 1000
            last_delta = e["_t"]
        elif e["type"] == "twilio.clear" and e.get("item_id") == response_id:
            if end is not None and end > e["_t"]:
                end = e["_t"]
            if e["_t"] >= t0:
                clears.append(e["_t"])
    if playing is None:
        playing = end is not None and end > t0
    cancelled = bool(clears) and (last_delta is None or last_delta < clears[-1])
    resumed = bool(clears) and last_delta is not None and last_delta > clears[0]
    return {"stop": end, "cancelled": cancelled, "paused": bool(clears), "resumed": resumed,
            "playing_at_t0": bool(playing)}


def decided(events: list[dict], response_id: str, t0: float) -> bool:
    """Over a line: the reply was not cleared after ``t0``, or it went on after
    the clear, or another reply began (the answer to the interruption)."""
    cleared = next((e["_t"] for e in events if e["type"] == "twilio.clear"
                    and e.get("item_id") == response_id and e["_t"] >= t0), None)
    if cleared is None:
        return True
    return any(e["type"] == "response.output_audio.delta" and e["_t"] > cleared
               for e in events)


async def phone_trial(url: str, key: str | None, story: np.ndarray, trial: dict) -> dict:
    """One call: ask for the long story, play the trial's sound about a second
    into its audio, hang up 1.5 s after it (up to 5 s while a reply cleared
    at the sound has neither gone on nor been answered: :func:`decided`)."""
    async with connected(TwilioCallerTransport(url, key), session={
            "max_output_tokens": 120, "instructions": STORY_INSTRUCTIONS}) as c:
        _, asked = c.say(story)
        t_asked = await asyncio.wait_for(asked, 30)
        i, first = await c.wait(lambda e: e["type"] == "response.output_audio.delta"
                                and e["_t"] >= t_asked, 0, 60)
        rid = first["response_id"]
        await asyncio.sleep(1.0)
        start, end = c.say(trial["pcm"])
        t0 = await asyncio.wait_for(start, 30)
        t_end = await asyncio.wait_for(end, 30)
        await asyncio.sleep(1.5)
        # a line has no events: a reply paused (cleared) at the sound is
        # cancelled only once it never comes back; wait up to 5 s after the
        # sound for it to go on, or for the answer to the interruption
        loop = asyncio.get_running_loop()
        while loop.time() < t_end + 5.0 and not decided(c.events[i:], rid, t0):
            await asyncio.sleep(0.1)
        evs = list(c.events[i:])
    heard = phone_heard(evs, rid, t0)
    ended_before = any(e["type"] == "response.done" and e["response"]["id"] == rid
                       and e["response"]["status"] == "completed" and e["_t"] < t0 for e in evs)
    stop = (heard["stop"] - t0) * 1000 \
        if heard["cancelled"] and heard["stop"] and heard["playing_at_t0"] else None
    return {**heard, "stop_ms": stop, "valid": not ended_before,
            "underruns": playback_gaps(evs, rid, t0)[2]}


async def phone_trials(url: str, key: str | None, sets: dict) -> dict:
    """The interruptions, noises and backchannels over a Twilio line (module docstring)."""
    stops, false_cancel, went_on, total_false, invalid, underruns = [], 0, 0, 0, 0, []
    cancelled_by, missed = [], []
    starved = 0
    for trial in sets["interruption"]:
        r = await phone_trial(url, key, sets["story"], trial)
        invalid += not r["valid"]
        underruns += r["underruns"]
        starved += r["cancelled"] and not r["playing_at_t0"]
        if r["stop_ms"] is not None:
            stops.append(r["stop_ms"])
        elif not (r["cancelled"] and not r["playing_at_t0"]):
            missed.append(trial["text"])
    for trial in sets["noise"] + sets["backchannel"]:
        r = await phone_trial(url, key, sets["story"], trial)
        underruns += r["underruns"]
        if not r["valid"]:
            invalid += 1
            continue
        total_false += 1
        false_cancel += r["cancelled"]
        went_on += not r["cancelled"] and (r["resumed"] or not r["paused"])
        if r["cancelled"]:
            cancelled_by.append(trial.get("text", trial["kind"]))
    return {"stop_ms": {"p50": pct(stops, 50), "p95": pct(stops, 95), "n": len(stops),
                        "all": [round(x) for x in stops],
                        "not_stopped": len(sets["interruption"]) - len(stops) - starved,
                        "not_stopped_by": missed,
                        "silent_at_interruption": starved},
            "false_cancel_rate": round(false_cancel / total_false, 3) if total_false else None,
            "resumed_rate": round(went_on / total_false, 3) if total_false else None,
            "false_trials": total_false, "cancelled_by": cancelled_by,
            "invalid_trials": invalid, "underruns": len(underruns), "underruns_where": underruns}


def turn_detection(mode: str) -> dict:
    if mode == "server_vad":
        return {"type": "server_vad"}
    _, eagerness = mode.split(":")
    return {"type": "semantic_vad", "eagerness": eagerness}


async def settle(c: Caller, n: int, quiet_s: float = 1.0, limit_s: float = 30.0,
                 cancel: bool = False) -> None:
    """Wait until every response created since event n is done and the line is
    quiet (``cancel``: cancelling each one still going)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while loop.time() < deadline:
        evs = c.events[n:]
        created = sum(1 for e in evs if e["type"] == "response.created")
        done = sum(1 for e in evs if e["type"] == "response.done")
        if cancel and done < created:
            await c.t.send_event({"type": "response.cancel"})
        await asyncio.sleep(quiet_s)
        evs = c.events[n:]
        created = sum(1 for e in evs if e["type"] == "response.created")
        done = sum(1 for e in evs if e["type"] == "response.done")
        if done >= created and (not evs or loop.time() - evs[-1]["_t"] >= quiet_s):
            return


async def first_audio_then_cancel(c: Caller, n: int) -> tuple[dict, float | None]:
    """The reply's first audio (or its response.done) and when its voice was
    heard (:func:`first_heard`); the rest is not needed: cancel it, so the next
    sentence starts sooner."""
    d, heard_t = await first_heard(c, n, 60)
    if d["type"] == "response.output_audio.delta":
        await c.t.send_event({"type": "response.cancel"})
    return d, heard_t


@dataclass
class Latencies:
    """One sentence set's answers, in ms from the true end of speech."""
    audio: list = field(default_factory=list)     # -> the first audio delta
    heard: list = field(default_factory=list)     # -> its voice sounds (the padding played)
    decide: list = field(default_factory=list)    # -> speech_stopped at the client
    respond: list = field(default_factory=list)   # speech_stopped -> first audio
    early: list = field(default_factory=list)     # answered before the clip ended
    withdrawn: int = 0    # replies begun in a pause inside the clip, cancelled before any audio

    def summary(self) -> dict:
        return {"p50": pct(self.audio, 50), "p95": pct(self.audio, 95), "n": len(self.audio),
                "all": [round(x) for x in self.audio], "answered_early": self.early,
                "withdrawn_before_audio": self.withdrawn,
                "heard": {"p50": pct(self.heard, 50), "p95": pct(self.heard, 95)},
                "end_decided": {"p50": pct(self.decide, 50), "p95": pct(self.decide, 95)},
                "decided_to_audio": {"p50": pct(self.respond, 50), "p95": pct(self.respond, 95)}}


def withdrawn_before_audio(done: dict) -> bool:
    """A ``response.done`` of a reply that the caller's speech cancelled
    before its first audio delta."""
    r = done.get("response") or {}
    return done["type"] == "response.done" and r.get("status") == "cancelled" \
        and (r.get("status_details") or {}).get("reason") == "turn_detected"


async def answer_latency(c: Caller, pcm: np.ndarray, lat: Latencies) -> int:
    """Say ``pcm``; append true end of speech -> first agent audio, -> its voice
    heard, and the first's two parts (-> speech_stopped, -> audio); 1 when no
    audio came (an error).  An answer that starts before the speaker has
    finished (a pause inside the clip taken for the end of the turn) is no
    latency: it goes to ``early``.  A reply begun in such a pause that the
    speaker's going on cancelled before any of it played (people pause
    mid-sentence) was never heard: it is counted in ``withdrawn`` and the
    latency is that of the answer after the true end."""
    n = len(c.events)
    _, end = c.say(pcm)
    t_end = await asyncio.wait_for(end, 60)
    d, heard_t = await first_audio_then_cancel(c, n)
    while withdrawn_before_audio(d):
        lat.withdrawn += 1
        after = next(i for i in range(len(c.events) - 1, n - 1, -1) if c.events[i] is d) + 1
        try:
            d, heard_t = await first_audio_then_cancel(c, after)
        except TimeoutError:
            return 1
    await settle(c, n, quiet_s=0.5)
    if d["type"] != "response.output_audio.delta":
        return 1
    if d["_t"] < t_end:
        lat.early.append(round((d["_t"] - t_end) * 1000))
        return 0
    lat.audio.append((d["_t"] - t_end) * 1000)
    if heard_t is not None:
        lat.heard.append((heard_t - t_end) * 1000)
    stopped = [e for e in c.events[n:] if e["type"] == "input_audio_buffer.speech_stopped"
               and e["_t"] <= d["_t"]]
    if stopped:
        lat.decide.append((stopped[-1]["_t"] - t_end) * 1000)
        lat.respond.append((d["_t"] - stopped[-1]["_t"]) * 1000)
    return 0


async def run_mode(url: str, key: str | None, mode: str, sets: dict,
                   interrupts: bool = True, seed: int = 11) -> dict:
    premature, errors, missed = [], 0, []
    latency, human = Latencies(), Latencies()
    async with connected(RealtimeWSTransport(url, key), session={
            "max_output_tokens": 16,
            "audio": {"input": {"turn_detection": turn_detection(mode)}}}) as c:
        await c.wait(lambda e: e["type"] == "session.updated", 0, 30)
        for item in sets["complete"]:
            errors += await answer_latency(c, item["pcm"], latency)
        for item in sets.get("human", []):
            errors += await answer_latency(c, item["pcm"], human)
        for item in sets["paused"]:
            n = len(c.events)
            pcm = np.concatenate([item["first"], np.zeros(int(RATE * item["gap_ms"] / 1000),
                                                          np.int16), item["second"]])
            start, _ = c.say(pcm)
            t_start = await asyncio.wait_for(start, 60)
            second_at = t_start + (item["first"].size / RATE) + item["gap_ms"] / 1000
            await first_audio_then_cancel(c, n)
            early = [e for e in c.events[n:] if e["type"] == "input_audio_buffer.committed"
                     and e["_t"] < second_at]
            premature.append(1 if early else 0)
            if early:
                missed.append(item["text"])
            await settle(c, n, quiet_s=0.5)   # a premature turn gets a second reply
        inter = await interruption_trials(c, sets, seed) if interrupts else \
            {"stop_ms": {"p50": None, "p95": None}, "stop_ms_standard": {"p50": None, "p95": None},
             "false_cancel_rate": None, "resumed_rate": None}
    return {"latency_ms": latency.summary(), "latency_human_ms": human.summary(),
            "premature_rate": round(sum(premature) / len(premature), 3) if premature else None,
            "premature_n": len(premature), "premature_sentences": missed, **inter,
            "wasted_think_ratio": None, "errors": errors}


async def think_state(server) -> dict:
    """The think stage's cache and step time so far (``/v1/runtime``), to tell
    a slower mode from one that ran on a cache the modes before it filled."""
    rt = await server.runtime()
    for p in rt.get("processes", {}).values():
        st = p.get("stages", {}).get("think")
        if st:
            ex = st.get("executor") or {}
            return {"steps": st.get("steps", 0), "step_time_s": st.get("step_time_s", 0.0),
                    **{k: ex.get(k) for k in ("kv_cells_used", "kv_cells_kept",
                                              "kept_sequences", "kept_dropped_for_room")}}
    return {}


async def main_async(a) -> dict:
    sets = build_sets(a.seed, a.repeat)
    global JITTER_MS
    JITTER_MS = tuple(float(x) for x in a.jitter_ms.split(","))
    if a.no_latency:
        sets["complete"] = []
    if a.human:
        sets["human"] = human_set()
    inter_modes = a.interruption_modes.split(",") if a.interruption_modes else []
    modes: dict = {}
    async with served(a.config, a.url) as server:
        if a.phone:
            modes["_phone"] = ph = await phone_trials(server.url, a.key, sets)
            print(f"phone: stop p50/p95 {ph['stop_ms']['p50']}/{ph['stop_ms']['p95']} ms "
                  f"(n {ph['stop_ms']['n']}, not stopped {ph['stop_ms']['not_stopped_by']}), "
                  f"false cancel {ph['false_cancel_rate']}, "
                  f"resumed {ph['resumed_rate']}, underruns {ph['underruns']}", flush=True)
        for mode in a.modes.split(","):
            before = [await server.metric("voice_think_tokens_total", outcome=o)
                      for o in ("used", "wasted")]
            think_before = await think_state(server)
            modes[mode] = r = await run_mode(server.url, a.key, mode, sets,
                                             not a.no_interruptions and mode in inter_modes,
                                             a.seed)
            used, wasted = [await server.metric("voice_think_tokens_total", outcome=o) - b
                            for o, b in zip(("used", "wasted"), before)]
            r["wasted_think_ratio"] = round(wasted / (used + wasted), 3) if used + wasted else None
            r["prepared_replies"] = {"think_tokens_used": used, "think_tokens_wasted": wasted}
            think_after = await think_state(server)
            steps = think_after.get("steps", 0) - think_before.get("steps", 0)
            r["think"] = {"at_start": think_before, "at_end": think_after,
                          "mean_step_ms": round(1000 * (think_after.get("step_time_s", 0)
                                                        - think_before.get("step_time_s", 0))
                                                / steps, 2) if steps else None}
            print(f"{mode}: latency p50/p95 {r['latency_ms']['p50']}/{r['latency_ms']['p95']} ms "
                  f"(voice heard {r['latency_ms']['heard']['p50']}/{r['latency_ms']['heard']['p95']}), "
                  f"people {r['latency_human_ms']['p50']}/{r['latency_human_ms']['p95']} ms "
                  f"({len(r['latency_human_ms']['answered_early'])} answered before their end, "
                  f"{r['latency_human_ms']['withdrawn_before_audio']} replies withdrawn in a pause "
                  f"before any audio), "
                  f"premature {r['premature_rate']}", flush=True)
        rt = await server.runtime()
        for p in rt.get("processes", {}).values():
            ex = p.get("stages", {}).get("listen", {}).get("executor")
            if ex:
                modes["_listen_stats"] = {k: v for k, v in ex.items() if k.startswith("verdict")}
    return modes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--repeat", type=int, default=1,
                    help="each sentence this many times (other voices and rates)")
    ap.add_argument("--interruption-modes", default=",".join(INTERRUPTION_MODES),
                    help="modes that also run the interruption trials")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--human", action="store_true",
                    help="also the latency on recordings of people (latency_human_ms)")
    ap.add_argument("--no-interruptions", action="store_true",
                    help="only latency and premature end of turn (faster)")
    ap.add_argument("--no-latency", action="store_true",
                    help="skip the latency sentences (premature and interruptions only)")
    ap.add_argument("--phone", action="store_true",
                    help="also the interruption trials over a Twilio line (phone)")
    ap.add_argument("--jitter-ms", default="20,50",
                    help="network jitter (min,max ms) for the client's underrun count")
    add_server_arguments(ap, "benchmarks/results/turn.json")
    a = ap.parse_args()
    modes = asyncio.run(main_async(a))
    listen = modes.pop("_listen_stats", {})
    phone = modes.pop("_phone", None)
    print(f"\n{'mode':<20}{'latency p50/p95 ms':>20}{'premature':>10}{'wasted think':>13}"
          f"{'stop p50/p95 ms':>18}{'(standard)':>16}{'false cancel':>13}{'resumed':>9}")
    for mode, r in modes.items():
        lat, st, sst = r["latency_ms"], r["stop_ms"], r["stop_ms_standard"]
        print(f"{mode:<20}{str(lat['p50']) + ' / ' + str(lat['p95']):>20}{r['premature_rate']!s:>10}"
              f"{r['wasted_think_ratio']!s:>13}{str(st['p50']) + ' / ' + str(st['p95']):>18}"
              f"{str(sst['p50']) + ' / ' + str(sst['p95']):>16}"
              f"{r['false_cancel_rate']!s:>13}{r['resumed_rate']!s:>9}")
        if r.get("underruns"):
            u = {k: v for k, v in r["underruns"].items() if k != "where"}
            print(f"{'':<20}underruns {u}, standard client's gap in a reply that "
                  f"went on {r['standard_gap_ms']}")
        if st.get("not_stopped_by"):
            print(f"{'':<20}not stopped: {st['not_stopped_by']}")
    print("end-of-turn verdicts:", listen)
    targets = {}
    sem = modes.get("semantic_vad:auto") or modes.get("semantic_vad:medium")
    if sem:
        targets["semantic latency p50<=450"] = (sem["latency_ms"]["p50"] or 1e9) <= 450
        targets["semantic latency p95<=700"] = (sem["latency_ms"]["p95"] or 1e9) <= 700
        targets["premature<=10%"] = (sem["premature_rate"] if sem["premature_rate"] is not None
                                     else 1) <= 0.10
        if sem["stop_ms"]["p50"] is not None:
            targets["stop p50<=250"] = sem["stop_ms"]["p50"] <= 250
        if sem["false_cancel_rate"] is not None:
            targets["false cancels<=5%"] = sem["false_cancel_rate"] <= 0.05
            targets["resumed>=90%"] = sem["resumed_rate"] >= 0.90
    print("targets:", ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in targets.items()))
    write_json(a.out, {"modes": modes, "phone": phone, "verdicts": listen, "targets_met": targets, "seed": a.seed,
                       "repeat": a.repeat})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
