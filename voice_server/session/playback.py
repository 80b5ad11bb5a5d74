"""Playback and truncation: what the listener has heard
(``playback_progress`` from stream transports, the output pacer's playout
model on the WebSocket), pausing and resuming the reply's audio
(``pause_output`` / ``resume_output`` and their extension events),
``output_audio_buffer.clear`` / ``.stopped``, cutting the assistant item to
the audio that was played, and barge-in over a reply that finished generating
but is still playing.  Part of :class:`voice_server.session.Session`
(core.py), split out by section."""

from __future__ import annotations

from .commands import Command, FlushAudio, PauseAudio, ResumeAudio, RewindAudio, SendEvent
from .responses import _Response

PAUSED_EVENT = "voice_agent.output_audio.paused"
RESUMED_EVENT = "voice_agent.output_audio.resumed"


class Playback:
    def pause_output(self, now_ms: float) -> list[Command]:
        """Stop releasing the active reply's audio, keeping it: generation goes
        on into the held buffer (OutputPacer), a stream transport holds what it
        has queued (``PauseAudio``).  The listener still plays what it already
        holds (at most the pacer's lead: ``interruptible_lead_ms`` while the
        caller can talk over the reply, core.py ``_size_lead``; nothing on
        WebRTC, whose track stops).  With ``clear_on_pause`` (a phone line:
        the provider's clear empties its buffer) the pacer takes back what
        the listener had not played and the transport gets ``RewindAudio``
        instead: the caller stops hearing the reply at once, and a resume
        sends it again from where they stopped.
        ``voice_agent.output_audio.paused`` says where playback is.
        Nothing when no reply with audio is active or it is paused already."""
        r = self._responses.active
        if self.closed or r is None or not r.audio or self._pacer.paused:
            return []
        self._pacer.paused = True
        out: list[Command] = []
        if self.audio_out_mode == "stream" and r.item is not None:
            self._paused_item = r.item.id
            if self.clear_on_pause:
                out.append(RewindAudio(r.item.id, self._pacer.rewind(now_ms)))
            else:
                out.append(PauseAudio(r.item.id))
        out += self._extension_event(PAUSED_EVENT, r, now_ms)
        return out

    def resume_output(self, now_ms: float) -> list[Command]:
        """Release the paused reply again from exactly where it stopped (the
        same response and item; no ``response.done`` in between)."""
        r = self._responses.active
        if self.closed or not self._pacer.paused:
            return []
        self._pacer.paused = False
        out: list[Command] = []
        if self._paused_item is not None:
            out.append(ResumeAudio(self._paused_item))
            self._paused_item = None
        if r is not None:
            out += self._extension_event(RESUMED_EVENT, r, now_ms)
        return out + self.pump_output(now_ms)

    def _end_pause(self) -> str | None:
        """The reply ends early (responses.py ``_drop_held``): a pause ends with
        it.  Returns the item a stream transport holds paused, if any, for the
        caller to resume or flush."""
        paused_item, self._paused_item = self._paused_item, None
        self._pacer.paused = False
        return paused_item

    @property
    def output_paused(self) -> bool:
        return self._pacer.paused

    @property
    def output_held(self) -> bool:
        """A reply's output is still held for release (pacing or a pause)."""
        r = self._responses.active
        return self._pacer.holding or (r is not None and r.generated)

    def played_position_ms(self, now_ms: float) -> float:
        """Where the listener is in the active (or last) reply's audio: the
        transport's report on stream transports, else the playout model."""
        r = self._responses.active or self._responses.last_audio
        item = r.item if r is not None else None
        if self.audio_out_mode == "stream" and item is not None and item.played_ms is not None:
            return item.played_ms
        return self._pacer.played_ms(now_ms)

    def _extension_event(self, type_: str, r: _Response, now_ms: float) -> list[Command]:
        """An event outside the Realtime API (``voice_agent.*``), sent only
        to sessions that take them (``extension_events``)."""
        if not self.extension_events:
            return []
        return [SendEvent(self._ev.make(
            type_, response_id=r.id, item_id=r.item.id if r.item else None,
            audio_end_ms=int(self.played_position_ms(now_ms))))]

    def _interrupt_playback(self) -> list[Command]:
        """Barge-in over a reply that finished generating but is still playing
        (stream mode: a phone network holds seconds of it, a WebRTC track its
        queue).  The reply is no longer active, so there is nothing to cancel;
        its audio is flushed and its item truncated to what was heard, exactly
        as a client's ``output_audio_buffer.clear`` would."""
        r = self._responses.last_audio
        if self.audio_out_mode != "stream" or r is None or not r.done or r.item is None \
                or not r.buffer_started or r.playback_stopped:
            return []
        return self._on_output_audio_buffer_clear(None, None)

    def _on_output_audio_buffer_clear(self, ev, now_ms) -> list[Command]:
        active = self._responses.active
        r = active if (active and active.item) else self._responses.last_audio
        if r is None:
            return []
        out: list[Command] = []
        if r is active:
            self._drop_held(r)  # the client cut the audio: what is held goes too
        if self.audio_out_mode == "stream" and r.item is not None:
            out.append(FlushAudio(r.item.id))
            out += self._truncate_to_played(r, before_done=False)
        out.append(self._send("output_audio_buffer.cleared", response_id=r.id))
        r.playback_stopped = True
        return out

    def _truncate_to_played(self, r: _Response, before_done: bool) -> list[Command]:
        """Stream mode: cut the item to what was heard (when known)."""
        item = r.item
        if item is None or item.played_ms is None or not r.audio:
            return []
        end = int(item.played_ms)
        if end >= item.max_truncate_ms():
            return []
        item.truncate(end)
        if r.transcript:
            r.transcript = item.content[0].transcript or ""
        if before_done:
            return []
        return [self._send("conversation.item.truncated", item_id=item.id, content_index=0,
                           audio_end_ms=end)]

    def playback_progress(self, item_id: str, played_ms: float, now_ms: float) -> list[Command]:
        if self.closed:
            return []
        item = self._find_item(item_id)
        if item is None or item.role != "assistant":
            return []
        played = min(float(played_ms), item.audio_ms)
        item.played_ms = played if item.played_ms is None else max(item.played_ms, played)
        last = self._responses.last_audio
        r = last if last and last.item is item else None
        if r is not None and r.done and r.first_audio_ms is not None:
            td = self.settings.turn_detection
            if td is not None and td.idle_timeout_ms:
                remaining = max(item.audio_ms - item.played_ms, 0.0)
                self._silence.postpone(now_ms + remaining + td.idle_timeout_ms)
            return self._maybe_stop_playback(r)
        return []

    def _maybe_stop_playback(self, r: _Response) -> list[Command]:
        item = r.item
        if self.audio_out_mode != "stream" or not r.done or not r.buffer_started or \
                r.playback_stopped or item is None or item.played_ms is None:
            return []
        if item.played_ms + 1.0 >= item.audio_ms:
            r.playback_stopped = True
            return [self._send("output_audio_buffer.stopped", response_id=r.id)]
        return []
