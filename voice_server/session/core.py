"""The sans-I/O session core: turn taking, response lifecycle, barge-in,
playback position and truncation.  One implementation reused unchanged by
every transport (OpenAI-Realtime WebSocket, WebRTC, Twilio).

The core owns no socket, no task and no clock.  Each input method takes an
event (and ``now_ms``, a monotonic clock in ms supplied by the caller) and
returns ``list[Command]`` (commands.py) to carry out in order.

Inputs
------
``Session(session_id, config=SessionSettings(), audio_out_mode="events"|"stream",
limits=ServerLimits(), dialect="ga"|"beta", output_lead_ms=0.0, extension_events=True,
interruptions=InterruptionSettings(), hang_up_after=None, answering_machine=False,
interruptible_lead_ms=None, clear_on_pause=False)``

* ``start(now_ms)`` -> ``session.created`` (+ ``ConfigureListen`` with VAD on).
  Calling any other input first starts the session implicitly, so a
  ``session.update`` sent before ``session.created`` works.
* ``client_event(raw: str|bytes|dict, now_ms)`` - one Realtime client event.
  Problems become an ``error`` event (``invalid_request_error``, code, param,
  the client's event_id); the session stays open.
* ``input_audio(pcm: int16 ndarray, sample_rate, now_ms)`` - audio from
  non-JSON transports; ``input_audio_buffer.append`` feeds the same path after
  decoding the session's input format.  Audio is resampled (streaming soxr)
  to 16 kHz; its sample count is the input timeline (ms) that the listen
  stage's times refer to.
* ``listen_event(ev: dict, now_ms)`` - listen-stage outputs
  (:mod:`runtime.models.voice_contract` defines them):
  ``{"type":"speech_started","audio_start_ms"}``, ``{"type":"partial","text"}``
  (the full hypothesis so far), ``{"type":"speech_stopped","audio_end_ms"}``,
  ``{"type":"final","text","audio_start_ms","audio_end_ms"}``.
* ``response_chunk(response_id, stage, payload, now_ms)`` - ``"think"``: a
  ``voice_contract`` think chunk (a str text delta, or a list of text deltas
  and ``tool_call_delta`` / ``tool_call_done`` events, which become
  ``function_call`` items: function_calls.py); ``"speak"``: ``{"audio": int16 ndarray, "sample_rate", "text",
  "duration_ms"}``.  Chunks of a response that is not the active one
  (finished, cancelled, unknown) are dropped silently.  The speak chunk is a
  ``voice_contract.SpeakChunk``.
* ``response_finished(response_id, status, error, now_ms, usage=None)`` -
  status ``completed|failed|cancelled``; error ``{"code","message","retryable"}``.
* ``transcription_result(item_id, text, now_ms, error=None)`` - the answer to
  a ``TranscribeBuffer`` command (error: same dict shape as above).
* ``playback_progress(item_id, played_ms, now_ms)`` - what the listener heard.
* ``pump_output(now_ms)`` - release the held output that is due; call it at
  ``next_output_ms`` (None: nothing due until another input).
* ``pause_output(now_ms)`` / ``resume_output(now_ms)`` - hold the active
  reply's audio where it is / release it again from there (below).
* ``tick(now_ms)`` - timers: the turn detection's ``idle_timeout_ms``
  (``server_vad`` and ``semantic_vad``: a check-in the model is told about,
  and with ``hang_up_after`` the goodbye and ``Close``: silence.py), the end
  of a keypad entry, the maximum
  session duration (``ServerLimits.max_session_s``) and the idle limit
  (``ServerLimits.idle_timeout_s``: no client event or audio -> ``error``
  ``idle_timeout`` + ``Close``).  ``client_event`` also enforces
  ``max_client_events_per_s`` (token bucket; excess -> ``rate_limit_exceeded``).
* ``reject_client_frame(code, message, now_ms)`` - a frame the transport
  could not turn into an event (binary WebSocket frame, oversized or
  non-UTF-8 data-channel message): an ``error`` with ``code``, counted as
  traffic and rate limited exactly like ``client_event``.
* ``key_pressed(key, now_ms, received_at)`` - a phone caller's DTMF key:
  ``input_audio_buffer.dtmf_event_received`` at once; each entry (keys up to
  ``#`` or a 1.5 s pause) becomes a user ``input_text`` item
  ``"[pressed 1 2]"`` that interrupts a reply and is answered like an
  utterance (keypad.py).
* ``set_call_actions_available(actions)`` - what the call's transport can do
  (``CallControl.actions()``); with the operator's
  ``voice_agent.call_actions`` it decides which call actions the model is
  offered; ``call_action_done(call_id, output, now_ms, reply=)`` - the
  runner's answer to a ``TransferCall`` / ``SendDtmf`` (agent_actions.py).
* ``disconnect(now_ms)`` - client gone: ``CancelResponse`` for the active
  response and ``StopListen``; afterwards every method returns ``[]``.

Outputs: ``SendEvent``, ``FeedListen``, ``ConfigureListen``, ``StopListen``,
``TranscribeBuffer``, ``StartResponse``, ``CancelResponse``, ``AudioOut``,
``FlushAudio``, ``PauseAudio``, ``RewindAudio``, ``ResumeAudio``, ``Close``,
and the agent's call actions ``HangUpCall``, ``TransferCall``, ``SendDtmf``
(see commands.py).

Output pacing, pause and resume
-------------------------------
With ``output_lead_ms`` > 0 a reply's audio (``response.output_audio.delta``
of 40 ms, or ``AudioOut`` of 100 ms) and the events that follow it
(transcript deltas, the ``*.done`` events, ``response.done``) are held in an
:class:`~voice_server.session.output_pacer.OutputPacer` and released so that
the listener holds at most ``output_lead_ms`` it has not played
(``pump_output`` at ``next_output_ms``).  Events that are not the reply's go
out at once.  The reply stays active until its last audio is released, so a
barge-in cancels it; on the WebSocket the pacer's playout model gives the
played position and the barge-in truncates there (``conversation.item.truncated``
after ``response.done``; the item keeps the audio the client received as its
length, so the client's own truncate is still accepted).
``pause_output`` stops the release (generation goes on into the pacer; stream
transports get ``PauseAudio`` and hold their queue) and ``resume_output``
goes on from there, the same response and item.  Both send an extension
event, ``voice_agent.output_audio.paused`` / ``.resumed`` (``response_id``,
``item_id``, ``audio_end_ms``: the played position), unless
``extension_events`` is False.  A cancel while paused drops what is held and
truncates as above.

Stopping for every client: a pause (the caller's first speech frame) cannot
reach a client that knows only the Realtime events; it plays out what it
holds and stops at ``speech_started``, which the interruption decision sends
later.  So while the caller can talk over the reply (VAD with
``interrupt_response``) the lead is ``interruptible_lead_ms`` (the server
default is 80 ms, in 20 ms deltas) rather than ``output_lead_ms``.  A
listener whose buffer can be emptied (``clear_on_pause``, stream mode: a
phone provider's clear) keeps ``output_lead_ms``: its pause is a
``RewindAudio`` (the transport clears the far end; the pacer takes back
what had not been played and sends it again from there on resume).

Turn taking
-----------
* Server VAD (default): the listen stream runs continuously (FeedListen for
  every input chunk).  speech_started -> ``input_audio_buffer.speech_started``
  (and barge-in, below); speech_stopped -> ``speech_stopped``, ``committed``,
  ``conversation.item.added`` (user ``input_audio``, transcript null); final ->
  transcription ``delta``/``completed``, ``conversation.item.done`` and, with
  ``create_response``, a response built from the final transcript.  An empty
  final creates no response.  While the user is speaking again, or another
  utterance still awaits its final, the auto-response waits and then answers
  all of them at once.
* Push-to-talk (``turn_detection: null``): ``StopListen``; audio is kept in
  a bounded 16 kHz buffer; ``input_audio_buffer.commit`` -> ``committed``,
  ``conversation.item.added`` and ``TranscribeBuffer(item_id, pcm16k)``; the
  runner answers with ``transcription_result``.  A ``response.create`` sent
  before the transcript arrives is announced at once (``response.created``)
  but its ``StartResponse`` is held until every pending transcription is in.
  A manual commit also works under server VAD (same path).

Barge-in
--------
While a reply is being heard, a sound from the caller (listen ``onset``)
pauses it and speech_started starts a decision instead of a cancel
(interruption.py): words that are not backchannels, or speech that goes on,
make it the barge-in below, with the utterance's start; a backchannel or a
noise resumes the same reply and leaves no user turn.  With
``InterruptionSettings.echo_guard`` the reply's own voice leaking into the
microphone is muted before the listen stage hears it (echo_guard.py).
Otherwise (no reply audio yet, or ``resume_backchannels`` off):
speech_started while a response is active and ``interrupt_response`` is true
returns, in that one call: ``CancelResponse(reason="turn_detected")``,
(stream mode) ``FlushAudio`` + ``output_audio_buffer.cleared``,
``input_audio_buffer.speech_started``, the pending ``*.done`` events and
``response.done`` (``cancelled``/``turn_detected``).  The response is then
finished for good: later chunks for it are dropped.  The assistant item keeps
the audio/transcript sent - or, when ``playback_progress`` told us what was
heard, is truncated to that (``conversation.item.truncated`` follows).
``response.cancel`` does the same with ``client_cancelled`` (no flush: per
the WebRTC API, ``output_audio_buffer.clear`` cuts the audio).
In stream mode, speech_started after a reply finished generating but while
it is still playing (``playback_progress`` has not reached its end) flushes
it and truncates the item to what was heard, as ``output_audio_buffer.clear``
does (playback.py); the phone network and the WebRTC track hold seconds of
audio, so without this the caller would be talked over.

Function calling
----------------
``tools`` / ``tool_choice`` (``session.update``, ``response.create``) are
checked in tools.py and reach the thinker with every ``StartResponse``; the
thinker's calls come out as ``function_call`` items with their arguments
streamed (``response.function_call_arguments.delta`` / ``.done``); the
client answers with a ``function_call_output`` item and ``response.create``,
and the next response's messages carry the call and its result
(items.chat_messages).  A call cut off by a cancel ends ``incomplete``, with
no ``.done`` for its arguments, and takes no output.  The operator's call
actions (``end_call``, ``transfer_call``, ``send_dtmf``) are offered as tools
too; the server runs those calls itself and adds their outputs
(agent_actions.py).

Where the code is: client_handlers.py (client events), turns.py (input audio,
listen events, barge-in trigger), responses.py (response lifecycle),
function_calls.py (function call items), playback.py (playback position,
flush, truncation), prompt.py (the system text and the history in the model's
context); this module holds the facade, the session's start, timers and end.
"""

from __future__ import annotations

import base64

from runtime.models.voice_contract import LISTEN_LANGUAGE, LISTEN_LANGUAGE_START

from ..audio_codec import decode_wire_audio
from .agent_actions import ActionState, AgentActions
from .backchannel import InterruptionSettings
from .client_handlers import ClientEventHandlers
from .commands import AudioOut, Close, Command, ConfigureListen, SendEvent, StopListen
from .config import ServerLimits, SessionSettings, session_to_wire
from .echo_guard import EchoGuard
from .errors import ClientError
from .function_calls import FunctionCalls
from .input_buffer import InputBuffer
from .interruption import InterruptionState, Interruptions
from .items import Content, Conversation, Item
from .answering_machine import MESSAGE_NOTE, NO_ANSWER_MS, AnsweringMachineDetector, Verdict
from .keypad import KEYS, Keypad, entry_text
from .lead_sizer import LeadSizer
from .silence import SilenceWatch, no_answer_note, silence_note
from .output_pacer import OutputPacer
from .playback import Playback
from .prompt import Prompt
from .rate_limit import TokenBucket
from .responses import ResponseState, Responses
from .server_events import EventFactory, IdFactory, error_body
from .turns import InputAudio, Turns, TurnState


# audio per released slice when pacing: WebSocket deltas of 40 ms; stream
# transports get 100 ms (five Twilio frames, one mark)
OUTPUT_SLICE_MS = {"events": 40.0, "stream": 100.0}


class Session(ClientEventHandlers, Turns, Interruptions, Responses, FunctionCalls, Playback,
              Prompt, AgentActions):
    """One Realtime session (module docstring).  The facade over its sections:
    client events (client_handlers.py), turn taking (turns.py), deciding
    interruptions (interruption.py), responses (responses.py), function calls
    (function_calls.py), playback and
    truncation (playback.py), what the model is asked with (prompt.py); the
    timers and the session's own life are here."""

    def __init__(self, session_id: str, config: SessionSettings | None = None,
                 audio_out_mode: str = "events", limits: ServerLimits | None = None,
                 dialect: str = "ga", output_lead_ms: float = 0.0,
                 extension_events: bool = True,
                 interruptions: InterruptionSettings | None = None,
                 hang_up_after: int | None = None, answering_machine: bool = False,
                 interruptible_lead_ms: float | None = None,
                 clear_on_pause: bool = False) -> None:
        if audio_out_mode not in ("events", "stream"):
            raise ValueError("audio_out_mode must be 'events' or 'stream'")
        self.session_id = session_id
        self.settings = config or SessionSettings()
        self.audio_out_mode = audio_out_mode
        self.limits = limits or ServerLimits()
        self.ids = IdFactory()
        self._ev = EventFactory(self.ids, dialect)
        self.conversation = Conversation()
        self.conversation_id = self.ids.new("conv")
        self.started = False
        self.closed = False
        self._start_ms: float | None = None
        # input path
        self._input = InputAudio()  # the resampler to 16 kHz and the input timeline (turns.py)
        self._buffer = InputBuffer(self.limits.max_buffered_input_s)
        self._listening: dict | None = None  # last ConfigureListen params
        self._turn = TurnState()  # what the caller's turns leave open (turns.py)
        # talked over while a reply plays: backchannel or interruption (interruption.py)
        self.interruptions = interruptions or InterruptionSettings()
        self._interruption = InterruptionState.from_settings(self.interruptions)  # phrases, decision
        self._echo = EchoGuard(self.interruptions.echo_margin_db) \
            if self.interruptions.echo_guard else None
        # responses
        self._responses = ResponseState()  # the active one, the last to speak (responses.py)
        # every function call's call_id, the server's and the client's (function_calls.py)
        self._call_ids: set[str] = set()
        self._actions = ActionState()  # the agent's call actions (agent_actions.py)
        self._out_of_context: set[str] = set()  # items truncation took out (prompt.py)
        # output pacing and pause (output_pacer.py, playback.py)
        self._full_lead_ms = float(output_lead_ms)
        self._interruptible_lead_ms = interruptible_lead_ms
        # the listener's buffer can be emptied (a phone provider's clear): a pause
        # takes back what it had not played (playback.py)
        self.clear_on_pause = clear_on_pause and audio_out_mode == "stream"
        self._pacer = OutputPacer(output_lead_ms, keep_released=self.clear_on_pause)
        self._lead: LeadSizer | None = None   # the interruptible lead, sized to the line
        self._lead_now_ms = 0.0
        if self._echo is not None:
            self._pacer.on_play = self._reply_played
        self.output_slice_ms = OUTPUT_SLICE_MS[audio_out_mode]
        self._size_lead()
        self._paused_item: str | None = None  # item a stream transport holds paused (playback.py)
        self.extension_events = extension_events
        # the caller's language: the client's pin, else what the listen stage
        # detected (turns.py _language_changed); None: not known yet
        self.language: str | None = self.settings.language
        self._keypad = Keypad()  # the phone caller's key presses (key_pressed)
        self._silence = SilenceWatch(hang_up_after)  # the idle deadline, check-ins, the hang-up
        self._on_hold = False  # the caller put the call on hold (call_held): nothing is due
        # outbound calls: who answered (answering_machine.py); None: not asked
        self._machine = AnsweringMachineDetector() if answering_machine else None
        self._message_left = False  # the message for a machine was asked for
        # operator limits on client traffic (ServerLimits.idle_timeout_s, max_client_events_per_s);
        # the idle limit counts from _last_traffic_ms: the client's last input
        # (_client_traffic), or the last tick while a reply was in progress
        self._last_traffic_ms: float | None = None
        self._bucket = TokenBucket(self.limits.max_client_events_per_s,
                                   self.limits.client_events_burst)

    def _reply_played(self, cmd: Command, start_ms: float) -> None:
        """The echo guard's reference: reply audio the listener plays from ``start_ms``."""
        r = self._responses.active
        if isinstance(cmd, AudioOut):
            self._echo.played(cmd.pcm, cmd.sample_rate, start_ms, cmd.response_id)
        elif isinstance(cmd, SendEvent) and cmd.type == "response.output_audio.delta" \
                and r is not None:
            fmt = r.output_format
            pcm = decode_wire_audio(base64.b64decode(cmd.event["delta"]), fmt.type)
            self._echo.played(pcm, fmt.sample_rate, start_ms, r.id)

    def call_held(self, held: bool, now_ms: float) -> list[Command]:
        """The caller put the call on hold (a SIP re-INVITE ``sendonly`` /
        ``inactive``) or took it off: the reply pauses and resumes where it
        was, and a silence on hold is no silence: the agent does not check in
        while held, and counts a whole ``idle_timeout_ms`` again from the resume."""
        if held == self._on_hold:
            return []
        self._on_hold = held
        if held:
            return self.pause_output(now_ms)
        td = self.settings.turn_detection
        if self._silence.deadline is not None and td is not None and td.idle_timeout_ms:
            self._silence.count_until(max(self._silence.deadline, now_ms + td.idle_timeout_ms))
        return self.resume_output(now_ms)

    # ------------------------------------------------------- events and state
    def _send(self, type_: str, **fields) -> SendEvent:
        return SendEvent(self._ev.make(type_, **fields))

    def _error(self, type_: str, code: str | None, message: str, param: str | None = None,
               cause: str | None = None) -> SendEvent:
        return self._send("error", error=error_body(type_, code, message, param, cause))

    def _client_error(self, err: ClientError) -> SendEvent:
        return self._error("invalid_request_error", err.code, err.message, err.param,
                           err.event_id)

    def _ensure_started(self, now_ms: float) -> list[Command]:
        return [] if self.started else self.start(now_ms)

    def _client_traffic(self, now_ms: float) -> list[Command]:
        """The client sent something (an event, a frame it could not turn into
        one, audio, a key): the session starts if it has not, and the idle
        limit counts from now.  Returns what starting sends."""
        out = self._ensure_started(now_ms)
        self._last_traffic_ms = now_ms
        return out

    @property
    def active_response_id(self) -> str | None:
        return self._responses.active.id if self._responses.active else None

    @property
    def user_speaking(self) -> bool:
        """The listen stage reported speech that has not stopped yet."""
        return self._turn.speech_item is not None

    def cancel_response(self, reason: str, now_ms: float) -> list[Command]:
        """Cancel the active response on the server's behalf (the drain): its
        ``CancelResponse``, audio flush and ``response.done`` (cancelled, with
        ``reason``); nothing when no response is active."""
        return self._cancel_active(reason, now_ms, flush=True)

    # ------------------------------------------------------------------ start
    def start(self, now_ms: float) -> list[Command]:
        if self.started or self.closed:
            return []
        self.started = True
        self._start_ms = now_ms
        out: list[Command] = [self._send("session.created", session=self._session_wire())]
        out += self._sync_listen(None)
        return out

    def session_object(self) -> dict:
        """The session as ``session.created`` / ``session.updated`` show it now
        (a sideband attaching to a live call starts from it)."""
        return self._session_wire()

    def _session_wire(self) -> dict:
        expires = 0
        if self._start_ms is not None:
            expires = int((self._start_ms / 1000.0) + self.limits.max_session_s)
        return session_to_wire(self.settings, self.session_id, expires)

    def _size_lead(self) -> None:
        """The listener's lead for the turn detection in force.  A client that
        cannot be told to stop (it knows only the standard events, and stops
        at ``speech_started``) plays on, after the pause at the caller's first
        speech frame, whatever it holds: while the caller can talk over the
        reply (VAD with ``interrupt_response``) it is given only
        ``interruptible_lead_ms``, in slices of a quarter of that (the lead
        it holds stays between 3/4 of it and all of it), raised up to
        ``output_lead_ms`` by the lateness and jitter the connection shows
        (lead_sizer.py), else ``output_lead_ms``.  A listener that a pause empties
        (``clear_on_pause``) keeps ``output_lead_ms``: more room for the
        network's jitter costs it no stop time."""
        full = self._full_lead_ms
        small = self._interruptible_lead_ms
        td = self.settings.turn_detection
        slice_ms = OUTPUT_SLICE_MS[self.audio_out_mode]
        if full > 0 and small is not None and 0 < small < full and td is not None \
                and td.interrupt_response and not self.clear_on_pause:
            self.output_slice_ms = min(slice_ms, small / 4.0)
            if self._lead is None:
                self._lead = LeadSizer(small, full, self.output_slice_ms)
            self._pacer.lead_ms = self._lead.lead_ms(self._lead_now_ms)
        else:
            self._lead = None
            self.output_slice_ms = slice_ms
            self._pacer.lead_ms = full

    def _resize_lead(self, now_ms: float) -> None:
        """The interruptible lead for what this connection has shown so far
        (lead_sizer.py): raised by lateness and jitter, down again as they pass."""
        self._lead_now_ms = now_ms
        if self._lead is not None:
            self._pacer.lead_ms = self._lead.lead_ms(now_ms)

    def _sync_listen(self, old: SessionSettings | None) -> list[Command]:
        self._size_lead()
        td = self.settings.turn_detection
        if td is None:
            if self._listening is not None:
                self._listening = None
                return [StopListen()]
            return []
        out = self._language_changed(self.settings.language, "pinned") \
            if self.settings.language else []
        params = {**td.listen_params(), "noise_reduction": self.settings.noise_reduction,
                  "voice_lock": self.settings.voice_lock}
        if self.settings.language:
            params[LISTEN_LANGUAGE] = self.settings.language
        if params != self._listening:
            self._listening = params
            # a new stream starts from the language detected so far (not a pin)
            start = {LISTEN_LANGUAGE_START: self.language} \
                if self.language and not self.settings.language else {}
            return out + [ConfigureListen({**params, **start})]
        return out

    # ----------------------------------------------------------------- timers
    def tick(self, now_ms: float) -> list[Command]:
        if self.closed or not self.started:
            return []
        if now_ms - self._start_ms >= self.limits.max_session_s * 1000.0:
            return self._expire(now_ms)
        idle_s = self.limits.idle_timeout_s
        if self._responses.active is not None:  # a reply in progress is not idleness
            self._last_traffic_ms = now_ms
        elif idle_s > 0 and \
                now_ms - (self._last_traffic_ms or self._start_ms) >= idle_s * 1000.0:
            return self._expire(now_ms, "idle_timeout",
                                f"No client events or audio for {idle_s:g} seconds.")
        entry = self._keypad.due(now_ms)
        if entry:
            return self._keypad_entry(entry, now_ms)
        if self._silence.goodbye_id is not None and self._goodbye_heard(now_ms):
            return self._hang_up()
        if self._actions.calls or self._actions.reply_due:
            acted = self._run_actions(now_ms)
            if acted or self._actions.hanging_up:
                return acted
        td = self.settings.turn_detection
        if td is None or not td.idle_timeout_ms or not self._silence.due(now_ms) or \
                self._on_hold or self._responses.active is not None or \
                self._turn.speech_item is not None or self._turn.awaiting_final:
            return []
        return self._caller_silent(td, now_ms)

    def _caller_silent(self, td, now_ms: float) -> list[Command]:
        """``idle_timeout_ms`` passed: an empty user turn whose transcript tells
        the model about the silence, and its answer (silence.py)."""
        self._silence.count_until(None)
        goodbye = self._silence.timed_out()
        if goodbye and not td.create_response:
            return self._hang_up()
        pos = int(self.input_ms)
        note = silence_note(td.idle_timeout_ms, goodbye)
        item = Item(self.ids.new("item"), "user", [Content("input_audio", transcript=note)])
        prev = self.conversation.add(item)
        out: list[Command] = [
            self._send("input_audio_buffer.timeout_triggered", audio_start_ms=pos,
                       audio_end_ms=pos, item_id=item.id),
            self._send("input_audio_buffer.committed", previous_item_id=prev, item_id=item.id),
            self._send("conversation.item.added", previous_item_id=prev, item=item.wire()),
            self._send("conversation.item.done", previous_item_id=prev, item=item.wire()),
        ]
        if td.create_response:
            out += self._auto_response(now_ms)
            if goodbye and self._responses.active is not None:
                self._silence.goodbye_id = self._responses.active.id
        return out

    def _goodbye_heard(self, now_ms: float) -> bool:
        """The goodbye is done and the caller heard it (or its playback report
        is overdue by GOODBYE_GRACE_MS)."""
        r = self._responses.last_audio
        if self._responses.active is not None:
            return False
        if r is None or r.id != self._silence.goodbye_id:
            return True  # no audio (text only, or it failed)
        return self._all_heard(now_ms)

    def _hang_up(self) -> list[Command]:
        """The goodbye (or the message left on a machine) was heard, or the
        caller stayed silent through every check-in: end the session."""
        out: list[Command] = []
        if self._listening is not None:
            self._listening = None
            out.append(StopListen())
        out.append(Close(1000, "machine_message_left" if self._message_left else "idle_hangup"))
        self.closed = True
        return out

    # ------------------------------------------------------- answering machine
    @property
    def _holding_for_machine(self) -> bool:
        """No reply yet: who answered is not known, or a machine's greeting plays."""
        m = self._machine
        return m is not None and (m.verdict is None or m.verdict is Verdict.MACHINE)

    def _machine_heard(self, pcm16, now_ms: float) -> list[Command]:
        """Input audio reached the detector: a verdict, or the moment to speak
        to a machine."""
        m = self._machine
        pos = self.input_ms
        m.audio(pcm16, pos)
        verdict = m.advance(pos)
        out: list[Command] = []
        if verdict is not None:
            if self.extension_events:
                out.append(SendEvent(self._ev.make("voice_agent.answering_machine.detected",
                                                   result=verdict.value,
                                                   audio_end_ms=int(pos))))
            if verdict is Verdict.SILENCE:
                out += self._user_note(no_answer_note(NO_ANSWER_MS), now_ms)
            if verdict is not Verdict.MACHINE:
                out += self._maybe_auto_respond(now_ms)  # a person (or nobody yet): speak
        if m.verdict is Verdict.MACHINE and not self._message_left and m.greeting_over(pos):
            out += self._leave_message(now_ms)
        return out

    def _leave_message(self, now_ms: float) -> list[Command]:
        """After the beep: the model is told it speaks to a recording; once
        that reply has been heard the call ends (the goodbye path)."""
        self._message_left = True
        out = self._user_note(MESSAGE_NOTE, now_ms)
        out += self._auto_response(now_ms)
        if self._responses.active is not None:
            self._silence.goodbye_id = self._responses.active.id
        return out

    def _user_note(self, note: str, now_ms: float) -> list[Command]:
        """A user text item the model reads: what the server knows about the call."""
        item = Item(self.ids.new("item"), "user", [Content("input_text", text=note)])
        prev = self.conversation.add(item)
        self._turn.unanswered = True
        return [self._send("conversation.item.added", previous_item_id=prev, item=item.wire()),
                self._send("conversation.item.done", previous_item_id=prev, item=item.wire())]

    # ----------------------------------------------------------------- keypad
    def key_pressed(self, key: str, now_ms: float, received_at: int) -> list[Command]:
        """A phone caller pressed ``key`` (``0-9 * # A-D``; ``received_at``: Unix
        seconds).  The key is announced at once; the entry it belongs to
        reaches the conversation when it ends (keypad.py), as a user text item
        the model reads, and is answered like an utterance."""
        if self.closed or key not in KEYS:
            return []
        out = self._client_traffic(now_ms)
        if not self._bucket.take(now_ms):  # a key is a client event: the same rate limit
            return out + [self._rate_limited(None)]
        self._silence.count_until(None)  # the caller is there
        out.append(self._send("input_audio_buffer.dtmf_event_received", event=key,
                              received_at=int(received_at)))
        entry = self._keypad.press(key, now_ms)
        return out + (self._keypad_entry(entry, now_ms) if entry else [])

    def _keypad_entry(self, keys: str, now_ms: float) -> list[Command]:
        """An entry the caller finished typing: like words spoken over a reply,
        it interrupts it (``interrupt_response``), goes into the conversation
        and gets the answer ("press 1 for sales" is answered by a key)."""
        td = self.settings.turn_detection
        out: list[Command] = []
        if td is not None and td.interrupt_response:
            out += self._cancel_active("turn_detected", now_ms, flush=True) \
                if self._responses.active is not None else self._interrupt_playback()
        self._silence.caller_spoke()
        out += self._user_note(entry_text(keys), now_ms)
        out += self._maybe_auto_respond(now_ms)
        if self._responses.active is None and td is not None and td.idle_timeout_ms:
            self._silence.count_until(now_ms + td.idle_timeout_ms)  # no answer: the silence counts
        return out

    def _expire(self, now_ms: float, code: str = "session_expired",
                message: str | None = None) -> list[Command]:
        out: list[Command] = []
        if self._responses.active is not None:
            out += self._cancel_active("client_cancelled", now_ms, flush=True,
                                       reason_cmd=code)
        out.append(self._error("invalid_request_error", code, message or
                               f"Your session hit the maximum duration of "
                               f"{self.limits.max_session_s:g} seconds."))
        if self._listening is not None:
            self._listening = None
            out.append(StopListen())
        out.append(Close(1000, code))
        self.closed = True
        return out

    def disconnect(self, now_ms: float) -> list[Command]:
        if self.closed:
            return []
        self.closed = True
        out = self._abandon_active()
        self._pacer.drop()
        if self._listening is not None:
            self._listening = None
            out.append(StopListen())
        return out
