"""Playback and truncation (stream-mode transports: WebRTC, Twilio): what the
listener has heard (``playback_progress``), ``output_audio_buffer.clear`` /
``.stopped``, cutting the assistant item to the audio that was played, and
barge-in over a reply that finished generating but is still playing.  Part of
:class:`voice_server.session.Session` (core.py), split out by section."""

from __future__ import annotations

from .commands import Command, FlushAudio
from .responses import _Response


class Playback:
    def _interrupt_playback(self) -> list[Command]:
        """Barge-in over a reply that finished generating but is still playing
        (stream mode: a phone network holds seconds of it, a WebRTC track its
        queue).  The reply is no longer active, so there is nothing to cancel;
        its audio is flushed and its item truncated to what was heard, exactly
        as a client's ``output_audio_buffer.clear`` would."""
        r = self._last_audio
        if self.audio_out_mode != "stream" or r is None or not r.done or r.item is None \
                or not r.buffer_started or r.playback_stopped:
            return []
        return self._on_output_audio_buffer_clear(None, None)

    def _on_output_audio_buffer_clear(self, ev, now_ms) -> list[Command]:
        r = self._active if (self._active and self._active.item) else self._last_audio
        if r is None:
            return []
        out: list[Command] = []
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
        r = self._last_audio if self._last_audio and self._last_audio.item is item else None
        if r is not None and r.done and r.first_audio_ms is not None:
            td = self.settings.turn_detection
            if td is not None and td.idle_timeout_ms and self._idle_deadline is not None:
                remaining = max(item.audio_ms - item.played_ms, 0.0)
                self._idle_deadline = now_ms + remaining + td.idle_timeout_ms
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
