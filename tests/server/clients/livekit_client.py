"""LiveKit Agents' OpenAI ``RealtimeModel`` against ``voice-agent serve``: a
text turn, then a turn that must call a ``@function_tool``, the output handed
back through the chat context and the reply that uses it, then the same
question spoken.

The model session is used on its own, as ``AgentSession`` drives it (no
LiveKit room is needed for it).  Runs in the clients' own virtualenv, started
by tests/server/test_clients_pipecat_livekit.py; it records what the
application sees for the test to judge (client_run.py), whose kinds here
are ``response`` (transcript, audio bytes, number of function calls),
``call`` (name, arguments), ``user`` (input transcript), ``error`` (message),
``session`` (what a ``session.updated`` says is in force).

``--flow named-first``: the function named in ``RealtimeModel(tool_choice=...)``,
which LiveKit sends in its first ``session.update``, before the tools.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path

import aiohttp
from client_run import RATE, arguments, microphone, report, within
from livekit import rtc
from livekit.agents import llm
from livekit.plugins.openai.realtime import RealtimeModel
from openai.types.realtime.realtime_audio_input_turn_detection import ServerVad


async def consume(gen: llm.GenerationCreatedEvent, log: list[list]) -> list[llm.FunctionCall]:
    """Read one generation to its end as AgentSession does: every message's
    text and audio streams, and the function stream."""
    text: list[str] = []
    audio = 0
    calls: list[llm.FunctionCall] = []

    async def message(m: llm.MessageGeneration) -> None:
        async def read_text() -> None:
            async for delta in m.text_stream:
                text.append(str(delta))

        async def read_audio() -> None:
            nonlocal audio
            async for frame in m.audio_stream:
                audio += frame.samples_per_channel * 2

        await asyncio.gather(read_text(), read_audio())

    async def messages() -> None:
        await asyncio.gather(*[message(m) async for m in gen.message_stream])

    async def functions() -> None:
        async for fc in gen.function_stream:
            calls.append(fc)
            log.append(["call", fc.name, fc.arguments])

    await asyncio.gather(messages(), functions())
    log.append(["response", "".join(text), audio, len(calls)])
    return calls


def trace(direction: str, ev: dict) -> None:
    if not ev.get("type", "").endswith(("audio.delta", "audio_buffer.append")):
        print(direction, json.dumps(ev)[:600], file=sys.stderr)


def weather_tool(args: argparse.Namespace) -> llm.FunctionTool:
    @llm.function_tool(name=args.tool)
    async def weather(city: str) -> str:
        """Get the current weather in a city.

        Args:
            city: the city
        """
        return args.result

    return weather


def open_session(model: RealtimeModel, args: argparse.Namespace, log: list[list]):
    """The model's session, recording errors (also the server's error events
    the session settles quietly) and what each ``session.updated`` says."""
    sess = model.session()
    sess.on("error", lambda ev: log.append(["error", str(ev.error)]))
    sess.on("openai_server_event_received",
            lambda ev: ev["type"] == "error" and log.append(["error", ev["error"]]))
    sess.on("openai_server_event_received", lambda ev: session_seen(ev, log))
    if args.trace:
        sess.on("openai_client_event_queued", lambda ev: trace(">>", ev))
        sess.on("openai_server_event_received", lambda ev: trace("<<", ev))
    return sess


async def generate(sess, log: list[list], timeout: float, **reply) -> list[llm.FunctionCall]:
    """``generate_reply`` read to its end: the calls it made."""
    gen = await within(sess.generate_reply(**reply), "response.created", timeout)
    return await within(consume(gen, log), "response.done", timeout)


async def hand_back(sess, calls: list[llm.FunctionCall], weather) -> None:
    """Run the calls and put their outputs into the chat context."""
    ctx = sess.chat_ctx.copy()
    for fc in calls:
        result = await weather(**json.loads(fc.arguments))
        ctx.items.append(llm.FunctionCallOutput(
            call_id=fc.call_id, name=fc.name, output=result, is_error=False))
    await sess.update_chat_ctx(ctx)


def session_seen(ev: dict, log: list[list]) -> None:
    """A ``session.updated`` as the record keeps it: what is in force."""
    if ev.get("type") != "session.updated":
        return
    s = ev["session"]
    inp = s.get("audio", {}).get("input", {})
    log.append(["session", {"format": inp.get("format"), "turn_detection": inp.get("turn_detection"),
                            "tool_choice": s.get("tool_choice"),
                            "tools": [t.get("name") for t in s.get("tools") or []]}])


async def run(args: argparse.Namespace, log: list[list]) -> None:
    weather = weather_tool(args)

    async with aiohttp.ClientSession() as http:
        model = RealtimeModel(model="voice-agent", base_url=args.url, api_key=args.key,
                              modalities=["audio"], http_session=http)
        sess = open_session(model, args, log)
        try:
            sess.update_options(max_response_output_tokens=48, tool_choice="none")
            await sess.update_instructions(args.instructions)
            await sess.update_tools([weather])

            async def user_turn(text: str, **reply) -> list[llm.FunctionCall]:
                ctx = sess.chat_ctx.copy()
                ctx.add_message(role="user", content=text)
                await sess.update_chat_ctx(ctx)
                return await reply_to_context(**reply)

            async def reply_to_context(**reply) -> list[llm.FunctionCall]:
                return await generate(sess, log, args.timeout, **reply)

            # 1. text in, audio and transcript out
            await user_turn(args.say)

            # 2. the function forced for the session, so the model must call it
            sess.update_options(tool_choice={"type": "function",
                                             "function": {"name": args.tool}})
            calls = await user_turn(args.ask)
            if not calls:
                raise TimeoutError("a function call")
            await hand_back(sess, calls, weather)
            # the answer: this response may not call again (a response.create override)
            await reply_to_context(tool_choice="none")

            # 3. spoken: the server's turn detection ends the turn and answers by itself
            sess.update_options(tool_choice="none")
            answered: asyncio.Future[llm.GenerationCreatedEvent] = asyncio.Future()
            sess.on("generation_created", lambda ev: ev.user_initiated or answered.done()
                    or answered.set_result(ev))
            sess.on("input_audio_transcription_completed",
                    lambda ev: ev.is_final and log.append(["user", ev.transcript]))

            async def send(pcm: bytes) -> None:
                sess.push_audio(rtc.AudioFrame(data=pcm, sample_rate=RATE, num_channels=1,
                                               samples_per_channel=len(pcm) // 2))

            mic = asyncio.ensure_future(microphone(send, Path(args.speech).read_bytes()))
            try:
                gen = await within(answered, "a response to the spoken turn", args.timeout)
                await within(consume(gen, log), "response.done", args.timeout)
            finally:
                mic.cancel()
        finally:
            await sess.aclose()
            await model.aclose()


async def run_named_first(args: argparse.Namespace, log: list[list]) -> None:
    """``RealtimeModel(tool_choice=<the function>)``: the session's first
    update names the function before any tool is there (the tools follow in
    the next update), with its own turn detection; then a turn that must call
    it, the output handed back, and the answer."""
    weather = weather_tool(args)

    async with aiohttp.ClientSession() as http:
        model = RealtimeModel(model="voice-agent", base_url=args.url, api_key=args.key,
                              modalities=["audio"], http_session=http,
                              tool_choice={"type": "function", "function": {"name": args.tool}},
                              turn_detection=ServerVad(type="server_vad", threshold=0.5,
                                                       silence_duration_ms=SILENCE_MS))
        sess = open_session(model, args, log)
        try:
            sess.update_options(max_response_output_tokens=48)
            await sess.update_instructions(args.instructions)
            await sess.update_tools([weather])

            async def reply_to_context(**reply) -> list[llm.FunctionCall]:
                return await generate(sess, log, args.timeout, **reply)

            ctx = sess.chat_ctx.copy()
            ctx.add_message(role="user", content=args.ask)
            await sess.update_chat_ctx(ctx)
            calls = await reply_to_context()
            if not calls:
                raise TimeoutError("a function call")
            await hand_back(sess, calls, weather)
            await reply_to_context(tool_choice="none")
        finally:
            await sess.aclose()
            await model.aclose()


SILENCE_MS = 450  # not the server's default: the test sees that the first update held


def main() -> int:
    ap = arguments("http://HOST:PORT/v1")
    ap.add_argument("--ask", default="What is the weather like in Paris today?",
                    help="the turn that calls the function")
    ap.add_argument("--trace", action="store_true", help="every event except audio on stderr")
    ap.add_argument("--flow", choices=("turns", "named-first"), default="turns",
                    help="turns: text, tool and spoken turns; named-first: the function "
                    "named in RealtimeModel(tool_choice=...) before the tools arrive")
    args = ap.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    log: list[list] = []
    flow = run_named_first if args.flow == "named-first" else run
    return report(flow(args, log), log, (llm.RealtimeError,))


if __name__ == "__main__":
    sys.exit(main())
