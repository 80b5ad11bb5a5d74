"""Pipecat's OpenAI Realtime service against ``voice-agent serve``: a text turn,
then a spoken turn that must call a registered function and the reply that
uses its result, then the same question spoken again.

Runs in the clients' own virtualenv (pipecat pins protobuf and soxr below the
server's), started by tests/server/test_clients_pipecat_livekit.py.  It only
drives the client and records what the application would see; the test
judges the record (client_run.py), whose kinds here are ``response``
(transcript, audio bytes), ``call`` (name, arguments), ``user`` (input
transcript), ``error`` (message), ``session`` (what a ``session.updated`` says
is in force).  ``--flow required-first``: tools in the context and
``tool_choice: "required"`` from the service's first ``session.update``.

The pipeline is the one a Pipecat app builds minus the transport (frames are
queued where its input would be, a tap reads what its output would play), so
the context aggregators turn a function result into the next response as in
an app.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

from client_run import RATE, arguments, microphone, report
from loguru import logger
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (ErrorFrame, Frame, InputAudioRawFrame,
                                   LLMFullResponseEndFrame, LLMRunFrame,
                                   LLMUpdateSettingsFrame, TranscriptionFrame,
                                   TTSAudioRawFrame, TTSTextFrame)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import FunctionCallParams
from pipecat.services.openai.realtime import events
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
from pipecat.workers.runner import WorkerRunner


class Tap(FrameProcessor):
    """Calls ``seen(frame, direction)`` for every frame and passes it on."""

    def __init__(self, seen: Callable[[Frame, FrameDirection], None]) -> None:
        super().__init__()
        self._seen = seen

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        self._seen(frame, direction)
        await self.push_frame(frame, direction)


class Record:
    """What the application saw, in order; waiters poll it with a deadline."""

    def __init__(self) -> None:
        self.log: list[list] = []
        self._transcript: list[str] = []
        self._audio = 0
        self.settings_applied = 0

    def upstream(self, frame: Frame, direction: FrameDirection) -> None:
        if isinstance(frame, TranscriptionFrame):
            self.log.append(["user", frame.text])
        elif isinstance(frame, ErrorFrame):
            self.log.append(["error", str(frame.error)])

    def downstream(self, frame: Frame, direction: FrameDirection) -> None:
        if isinstance(frame, TTSTextFrame):
            self._transcript.append(frame.text)
        elif isinstance(frame, TTSAudioRawFrame):
            self._audio += len(frame.audio)
        elif isinstance(frame, LLMFullResponseEndFrame):
            self.log.append(["response", "".join(self._transcript), self._audio])
            self._transcript, self._audio = [], 0
        elif isinstance(frame, LLMUpdateSettingsFrame):
            self.settings_applied += 1  # the service has sent its session.update

    async def wait(self, what: str, pred: Callable[[], bool], timeout: float) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while not pred():
            if loop.time() > end:
                raise TimeoutError(what)
            await asyncio.sleep(0.05)

    def kinds(self, kind: str) -> list[list]:
        return [e for e in self.log if e[0] == kind]


def session_properties(tool_choice: str, instructions: str,
                       silence_ms: int = 500) -> events.SessionProperties:
    return events.SessionProperties(
        output_modalities=["audio"], instructions=instructions, max_output_tokens=48,
        tool_choice=tool_choice,
        audio=events.AudioConfiguration(input=events.AudioInput(
            transcription=events.InputAudioTranscription(model="whisper-1"),
            turn_detection=events.TurnDetection(silence_duration_ms=silence_ms))))


def record_sessions(llm: OpenAIRealtimeLLMService, rec: Record) -> None:
    """Every ``session.updated`` the service gets, as the record keeps it:
    what is in force."""
    handle = llm._handle_evt_session_updated

    async def seen(evt) -> None:
        s = evt.session.model_dump(mode="json")
        inp = (s.get("audio") or {}).get("input") or {}
        rec.log.append(["session", {"format": inp.get("format"),
                                    "turn_detection": inp.get("turn_detection"),
                                    "tool_choice": s.get("tool_choice"),
                                    "tools": [t.get("name") for t in s.get("tools") or []]}])
        await handle(evt)

    llm._handle_evt_session_updated = seen


SILENCE_MS = 450  # not the server's default: the test sees that the first update held


class App:
    """The Pipecat app both flows run: the service (its first tool_choice and
    turn detection given), a context with one user message and the weather
    tool, the aggregators, and the function's handler, which moves the
    session to ``tool_choice: "none"`` before it hands back the result (a
    forced call stays forced for every response; the app lets the model
    answer)."""

    def __init__(self, args: argparse.Namespace, rec: Record, first: str, tool_choice: str,
                 silence_ms: int = 500) -> None:
        settings = OpenAIRealtimeLLMService.Settings
        self.args, self.rec, self.silence_ms = args, rec, silence_ms
        llm = OpenAIRealtimeLLMService(
            api_key=args.key, base_url=args.url,
            settings=settings(model="voice-agent", system_instruction=args.instructions,
                              session_properties=self.properties(tool_choice)))
        record_sessions(llm, rec)
        tool = FunctionSchema(name=args.tool, description="Get the current weather in a city.",
                              properties={"city": {"type": "string", "description": "the city"}},
                              required=["city"])
        context = LLMContext(messages=[{"role": "user", "content": first}],
                             tools=ToolsSchema(standard_tools=[tool]))
        aggregators = LLMContextAggregatorPair(context)
        pipeline = Pipeline([aggregators.user(), Tap(rec.upstream), llm, Tap(rec.downstream),
                             aggregators.assistant()])
        self.worker = PipelineWorker(pipeline, params=PipelineParams(audio_in_sample_rate=RATE),
                                     idle_timeout_secs=None)
        llm.register_function(args.tool, self.weather)
        self.running: asyncio.Future | None = None

    def properties(self, tool_choice: str) -> events.SessionProperties:
        return session_properties(tool_choice, self.args.instructions, self.silence_ms)

    async def set_tool_choice(self, tool_choice: str) -> None:
        """A ``session.update`` with it, sent and applied."""
        n = self.rec.settings_applied
        await self.worker.queue_frame(LLMUpdateSettingsFrame(
            delta=OpenAIRealtimeLLMService.Settings(
                session_properties=self.properties(tool_choice))))
        await self.rec.wait(f"tool_choice {tool_choice} applied",
                            lambda: self.rec.settings_applied > n, 10)

    async def weather(self, params: FunctionCallParams) -> None:
        self.rec.log.append(["call", params.function_name, dict(params.arguments)])
        await self.set_tool_choice("none")
        await params.result_callback(self.args.result)

    async def start(self) -> None:
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(self.worker)
        self.running = asyncio.ensure_future(runner.run())

    async def stop(self) -> None:
        await self.worker.cancel()
        if self.running is not None:
            await asyncio.wait_for(self.running, 30)


async def run(args: argparse.Namespace, rec: Record) -> None:
    speech = Path(args.speech).read_bytes()
    app = App(args, rec, args.say, "none")
    worker = app.worker
    await app.start()
    mic: asyncio.Task | None = None
    try:
        # 1. text in (the context's user message), audio and transcript out
        await worker.queue_frame(LLMRunFrame())
        await rec.wait("text turn response", lambda: rec.kinds("response"), args.timeout)

        # 2. spoken turn, the function required: call, result, spoken answer
        await app.set_tool_choice("required")

        async def send(pcm: bytes) -> None:
            await worker.queue_frame(InputAudioRawFrame(audio=pcm, sample_rate=RATE,
                                                        num_channels=1))

        def spoken_after(start: int) -> bool:
            return any(e[0] == "response" and e[1].strip() for e in rec.log[start:])

        mic = asyncio.ensure_future(microphone(send, speech))
        await rec.wait("function call", lambda: rec.kinds("call"), args.timeout)
        called = len(rec.log)
        await rec.wait("spoken answer after the function result",
                       lambda: spoken_after(called), args.timeout)

        # 3. the question again: answered from the result in the conversation
        mic.cancel()
        asked = len(rec.log)
        mic = asyncio.ensure_future(microphone(send, speech))
        await rec.wait("spoken answer to the question asked again",
                       lambda: spoken_after(asked), args.timeout)
    finally:
        if mic is not None:
            mic.cancel()
        await app.stop()


async def run_required_first(args: argparse.Namespace, rec: Record) -> None:
    """Tools in the context, ``tool_choice: "required"`` from the start: the
    service's first ``session.update`` (sent on connect, before it has a
    context) says required with no tools; the context's tools follow when it
    runs.  The question in the context must be answered with a call, its
    result, and a spoken answer."""
    app = App(args, rec, args.ask, "required", silence_ms=SILENCE_MS)
    await app.start()
    try:
        await rec.wait("the first session.updated", lambda: rec.kinds("session"), args.timeout)
        await app.worker.queue_frame(LLMRunFrame())
        await rec.wait("function call", lambda: rec.kinds("call"), args.timeout)
        called = len(rec.log)
        await rec.wait("spoken answer after the function result",
                       lambda: any(e[0] == "response" and e[1].strip()
                                   for e in rec.log[called:]), args.timeout)
    finally:
        await app.stop()


def main() -> int:
    ap = arguments("ws://HOST:PORT/v1/realtime")
    ap.add_argument("--ask", default="What is the weather like in Paris today?",
                    help="required-first: the context's question")
    ap.add_argument("--flow", choices=("turns", "required-first"), default="turns",
                    help="turns: text, tool and spoken turns; required-first: tools in the "
                    "context and tool_choice required from the first session.update")
    args = ap.parse_args()
    logger.remove()
    logger.add(sys.stderr, level="INFO")
    rec = Record()
    flow = run_required_first if args.flow == "required-first" else run
    return report(flow(args, rec), rec.log)


if __name__ == "__main__":
    sys.exit(main())
