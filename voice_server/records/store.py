"""The call store: one SQLite database and the recordings, under one folder.

Every read and write runs on ONE worker thread (a single-thread executor that
owns the only connection), so the event loop never waits on the disk and
SQLite never sees two writers.  From the event loop::

    store = CallStore(RecordSettings(enabled=True, folder="records"))  # opens, recovers,
                                                                     # enforces retention
    store.submit(store.put_item, call_id, item)     # a write: fire and forget, in order
    calls = await store.run(store.list_calls, 50)   # a read: awaited
    store.close()                                   # waits for the writes queued so far

The database runs in WAL mode and every write is its own transaction: a
server killed mid-call leaves every row written so far, and the database
readable.  The next :class:`CallStore` on the folder marks such a call
``interrupted`` and turns its raw audio into the WAV.

Layout of the folder: ``calls.sqlite3`` (+ its ``-wal``/``-shm``), and per
recorded call ``<id>.wav`` (16 kHz, 16-bit, caller left, agent right); while
the call is live its two channels grow as ``<id>.caller.pcm`` and
``<id>.agent.pcm``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
import wave
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, Callable

import numpy as np

from .settings import RecordSettings

log = logging.getLogger("voice_server.records")

RECORDING_RATE_HZ = 16000   # both channels: what the listen stage hears
CHANNELS = ("caller", "agent")   # left, right
DB_NAME = "calls.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    id TEXT PRIMARY KEY,            -- the session id
    transport TEXT NOT NULL,        -- websocket | webrtc | twilio | ...
    model TEXT,
    started_at REAL NOT NULL,       -- unix seconds; every *_ms below counts from here
    ended_at REAL,                  -- NULL while live
    state TEXT NOT NULL,            -- live | ended | interrupted (the server died mid-call)
    recording INTEGER NOT NULL DEFAULT 0,   -- 1: audio is being (or was) recorded
    recording_bytes INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS items (
    call_id TEXT NOT NULL REFERENCES calls(id) ON DELETE CASCADE,
    item_id TEXT NOT NULL,
    t_ms REAL NOT NULL,             -- when the client was first told of it
    role TEXT,                      -- user | assistant | system (messages)
    type TEXT NOT NULL,             -- message | function_call | function_call_output
    text TEXT,                      -- a message's text or audio transcript
    status TEXT,
    response_id TEXT,
    name TEXT, call_ref TEXT, arguments TEXT, output TEXT,   -- function calls
    truncated_ms INTEGER,           -- an interrupted reply: the audio the listener heard
    PRIMARY KEY (call_id, item_id)
);
CREATE TABLE IF NOT EXISTS turns (
    call_id TEXT NOT NULL REFERENCES calls(id) ON DELETE CASCADE,
    response_id TEXT NOT NULL,
    status TEXT, reason TEXT,
    timings TEXT NOT NULL,          -- JSON: ms since the call started (recorder.TURN_TIMINGS)
    usage TEXT,                     -- JSON: response.done's usage
    PRIMARY KEY (call_id, response_id)
);
-- every call the agent placed (POST /v1/sip/calls), answered or not; a database
-- made before this table gets it on open (CREATE ... IF NOT EXISTS)
CREATE TABLE IF NOT EXISTS placed_calls (
    id TEXT PRIMARY KEY,            -- the placed call's id (sipout_...)
    call_id TEXT NOT NULL REFERENCES calls(id) ON DELETE CASCADE,
                                    -- its row in calls: its own id until answered, then
                                    -- the session's (the call's transcript and turns)
    target TEXT NOT NULL,           -- the sip: or tel: URI dialled
    status TEXT NOT NULL,           -- dialing | ringing | answered | ended | busy |
                                    -- no_answer | failed | cancelled
    sip_status INTEGER,             -- the callee's final SIP status (200: answered)
    reason TEXT,
    created_at REAL NOT NULL,       -- unix seconds: when it was dialled
    answered_at REAL,
    ended_at REAL
);
CREATE INDEX IF NOT EXISTS calls_started ON calls(started_at);
CREATE INDEX IF NOT EXISTS placed_calls_call ON placed_calls(call_id);
"""
PLACED_LIVE = ("dialing", "ringing", "answered")   # a placed call's statuses before its outcome

# A call's size for retention: its recording plus its rows' text (a rough
# row overhead of 64 bytes each keeps a call of many short items honest).
_SIZES = """
SELECT c.id, c.started_at,
       c.recording_bytes
       + COALESCE((SELECT SUM(64 + LENGTH(COALESCE(text, '')) + LENGTH(COALESCE(arguments, ''))
                              + LENGTH(COALESCE(output, ''))) FROM items WHERE call_id = c.id), 0)
       + COALESCE((SELECT SUM(64 + LENGTH(timings) + LENGTH(COALESCE(usage, '')))
                   FROM turns WHERE call_id = c.id), 0)
       + COALESCE((SELECT SUM(64 + LENGTH(target) + LENGTH(COALESCE(reason, '')))
                   FROM placed_calls WHERE call_id = c.id), 0)
FROM calls c WHERE c.state != 'live' ORDER BY c.started_at
"""

# A call's summary: its row, its counts, and what became of it when the agent placed it.
_SUMMARY = """
SELECT c.*, (SELECT COUNT(*) FROM items WHERE call_id = c.id) AS n_items,
       (SELECT COUNT(*) FROM turns WHERE call_id = c.id) AS n_turns,
       p.id AS placed_id, p.target AS placed_to, p.status AS placed_status,
       p.sip_status AS placed_sip_status, p.reason AS placed_reason,
       p.created_at AS placed_created_at, p.answered_at AS placed_answered_at,
       p.ended_at AS placed_ended_at
FROM calls c LEFT JOIN placed_calls p ON p.call_id = c.id
"""
_PLACED_FIELDS = ("id", "to", "status", "sip_status", "reason", "created_at", "answered_at",
                  "ended_at")

_ITEM_FIELDS = ("role", "type", "text", "status", "response_id", "name", "call_ref",
                "arguments", "output")


def _log_failure(f: Future) -> None:
    if not f.cancelled() and f.exception() is not None:
        log.error("call store write failed: %r", f.exception(), exc_info=f.exception())


class CallStore:
    def __init__(self, settings: RecordSettings) -> None:
        self.settings = settings
        self.folder = Path(settings.folder)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="call-store")
        # worker thread only: the connection and the raw channel files of live calls
        self._db: sqlite3.Connection | None = None
        self._audio: dict[tuple[str, str], BinaryIO] = {}
        self._pool.submit(self._open).result()

    # ------------------------------------------------------------ event loop side
    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the worker thread, after every write queued before."""
        self._pool.submit(fn, *args).add_done_callback(_log_failure)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on the worker thread, awaited (reads)."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on the worker thread, waited for: off the event loop
        only (tools, tests)."""
        return self._pool.submit(fn, *args).result()

    def close(self) -> None:
        """Finish the writes queued so far and close the database."""
        self._pool.submit(self._close).result()
        self._pool.shutdown()

    # ------------------------------------------------------------ worker: lifecycle
    def _open(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.folder / DB_NAME, isolation_level=None)   # autocommit
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")   # WAL: a crash loses no committed row
        db.execute("PRAGMA foreign_keys=ON")
        db.executescript(_SCHEMA)
        self._db = db
        self._recover()
        self.enforce_retention()

    def _close(self) -> None:
        for f in self._audio.values():
            f.close()
        self._audio.clear()
        if self._db is not None:
            self._db.close()
            self._db = None

    def _recover(self) -> None:
        """Calls a previous server left ``live`` (it was killed): ``interrupted``,
        ended at their last known moment, their raw audio made a WAV."""
        for row in self._db.execute("SELECT id, started_at, recording FROM calls "
                                    "WHERE state = 'live'").fetchall():
            last = self._db.execute("SELECT MAX(t_ms) FROM items WHERE call_id = ?",
                                    (row["id"],)).fetchone()[0]
            ended = row["started_at"] + (last or 0.0) / 1000.0
            self._db.execute("UPDATE calls SET state = 'interrupted', ended_at = ? WHERE id = ?",
                             (ended, row["id"]))
            if row["recording"]:
                self._finish_recording(row["id"])
            log.warning("call %s was live when the server stopped: kept as interrupted", row["id"])
        # a call we were placing when it stopped: never answered, it failed; answered, it ended
        self._db.execute(
            "UPDATE placed_calls SET status = CASE WHEN answered_at IS NULL THEN 'failed' "
            "ELSE 'ended' END, reason = 'the server stopped', "
            "ended_at = (SELECT ended_at FROM calls WHERE calls.id = placed_calls.call_id) "
            f"WHERE status IN ({', '.join('?' * len(PLACED_LIVE))})", PLACED_LIVE)

    # ------------------------------------------------------------ worker: writes
    def begin_call(self, call_id: str, transport: str, model: str | None, started_at: float,
                   recording: bool) -> None:
        self._db.execute("INSERT OR REPLACE INTO calls (id, transport, model, started_at, state, "
                         "recording) VALUES (?, ?, ?, ?, 'live', ?)",
                         (call_id, transport, model, started_at, int(recording)))

    def put_item(self, call_id: str, item_id: str, t_ms: float, fields: dict) -> None:
        """Insert the item, or update the fields given (None keeps a field)."""
        values = [fields.get(k) for k in _ITEM_FIELDS]
        self._db.execute(
            f"INSERT INTO items (call_id, item_id, t_ms, {', '.join(_ITEM_FIELDS)}) "
            f"VALUES (?, ?, ?, {', '.join('?' * len(_ITEM_FIELDS))}) "
            "ON CONFLICT (call_id, item_id) DO UPDATE SET "
            + ", ".join(f"{k} = COALESCE(excluded.{k}, {k})" for k in _ITEM_FIELDS),
            (call_id, item_id, t_ms, *values))

    def truncate_item(self, call_id: str, item_id: str, audio_end_ms: int) -> None:
        self._db.execute("UPDATE items SET truncated_ms = ? WHERE call_id = ? AND item_id = ?",
                         (audio_end_ms, call_id, item_id))

    def put_turn(self, call_id: str, response_id: str, status: str | None, reason: str | None,
                 timings: dict, usage: dict | None) -> None:
        self._db.execute("INSERT OR REPLACE INTO turns VALUES (?, ?, ?, ?, ?, ?)",
                         (call_id, response_id, status, reason, json.dumps(timings),
                          None if usage is None else json.dumps(usage)))

    def append_audio(self, call_id: str, channel: str, data: bytes) -> None:
        """Raw 16 kHz int16 samples at the end of a live call's channel file."""
        key = (call_id, channel)
        f = self._audio.get(key)
        if f is None:
            f = self._audio[key] = open(self._raw_path(call_id, channel), "ab")
        f.write(data)
        f.flush()   # a crash keeps what was heard so far

    def end_call(self, call_id: str, ended_at: float) -> None:
        """The call is over: its WAV assembled, then retention enforced."""
        self._db.execute("UPDATE calls SET state = 'ended', ended_at = ? WHERE id = ?",
                         (ended_at, call_id))
        row = self._db.execute("SELECT recording FROM calls WHERE id = ?", (call_id,)).fetchone()
        if row is not None and row["recording"]:
            self._finish_recording(call_id)
        self.enforce_retention()

    # ------------------------------------------------------------ worker: calls placed
    def put_placed(self, placed: dict) -> None:
        """A call the agent placed, as it stands now (``PlacedCall.as_json()``).

        Every attempt is a call in ``calls``, so the list shows busy and
        unanswered ones beside the sessions: until it is answered the call is
        a row of its own (its placed id, transport ``sip``, no transcript),
        ended with its outcome; once answered, the session's row (written
        when the session started) is the call's and the placed one goes."""
        pid, session = placed["id"], placed.get("session_id")
        finished = placed["status"] not in PLACED_LIVE
        db = self._db
        db.execute("BEGIN")
        try:
            if session and db.execute("SELECT 1 FROM calls WHERE id = ?", (session,)).fetchone():
                home = session
            else:
                home = pid
                db.execute("INSERT OR IGNORE INTO calls (id, transport, model, started_at, state, "
                           "recording) VALUES (?, 'sip', NULL, ?, 'live', 0)",
                           (pid, placed["created_at"]))
                if finished:
                    db.execute("UPDATE calls SET state = 'ended', ended_at = ? WHERE id = ? AND "
                               "state = 'live'", (placed["ended_at"], pid))
            db.execute(
                "INSERT INTO placed_calls (id, call_id, target, status, sip_status, reason, "
                "created_at, answered_at, ended_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET call_id = excluded.call_id, "
                "status = excluded.status, sip_status = excluded.sip_status, "
                "reason = excluded.reason, answered_at = excluded.answered_at, "
                "ended_at = excluded.ended_at",
                (pid, home, placed["to"], placed["status"], placed.get("sip_status"),
                 placed.get("reason"), placed["created_at"], placed.get("answered_at"),
                 placed.get("ended_at")))
            if home != pid:   # answered: the session's row holds the call now
                db.execute("DELETE FROM calls WHERE id = ?", (pid,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        if finished:
            self.enforce_retention()

    # ------------------------------------------------------------ worker: recordings
    def _raw_path(self, call_id: str, channel: str) -> Path:
        return self.folder / f"{call_id}.{channel}.pcm"

    def wav_path(self, call_id: str) -> Path:
        return self.folder / f"{call_id}.wav"

    def _finish_recording(self, call_id: str) -> None:
        """Interleave the two raw channels (the shorter padded with silence)
        into ``<id>.wav``, a block at a time, and drop the raw files."""
        for ch in CHANNELS:
            f = self._audio.pop((call_id, ch), None)
            if f is not None:
                f.close()
        raws = [self._raw_path(call_id, ch) for ch in CHANNELS]
        sizes = [p.stat().st_size // 2 if p.exists() else 0 for p in raws]
        n = max(sizes)
        maps = [np.memmap(p, dtype="<i2", mode="r") if s else None for p, s in zip(raws, sizes)]
        block = RECORDING_RATE_HZ * 60
        with wave.open(str(self.wav_path(call_id)), "wb") as w:
            w.setnchannels(2)
            w.setsampwidth(2)
            w.setframerate(RECORDING_RATE_HZ)
            for start in range(0, n, block):
                end = min(start + block, n)
                frames = np.zeros((end - start, 2), dtype="<i2")
                for ch, (m, s) in enumerate(zip(maps, sizes)):
                    if m is not None and start < s:
                        part = m[start:min(end, s)]
                        frames[:part.size, ch] = part
                w.writeframes(frames.tobytes())
        del maps
        for p in raws:
            p.unlink(missing_ok=True)
        self._db.execute("UPDATE calls SET recording_bytes = ? WHERE id = ?",
                         (self.wav_path(call_id).stat().st_size, call_id))

    # ------------------------------------------------------------ worker: retention
    def enforce_retention(self, now: float | None = None) -> list[str]:
        """Delete the calls past ``max_age_days``, then the oldest until the rest
        fit in ``max_total_mb`` (live calls are never deleted); their ids."""
        now = time.time() if now is None else now
        cutoff = now - self.settings.max_age_days * 86400.0
        rows = self._db.execute(_SIZES).fetchall()
        total = sum(r[2] for r in rows)
        gone = []
        for call_id, started_at, size in rows:   # oldest first
            if started_at >= cutoff and total <= self.settings.max_total_bytes:
                break
            self._delete(call_id)
            total -= size
            gone.append(call_id)
        if gone:
            log.info("call records: retention deleted %d call(s)", len(gone))
        return gone

    def delete_call(self, call_id: str) -> str:
        """Remove one finished call, its rows and its recording: ``deleted``;
        ``live`` (still going: not deleted) or ``unknown``."""
        row = self._db.execute("SELECT state FROM calls WHERE id = ?", (call_id,)).fetchone()
        if row is None:
            return "unknown"
        if row["state"] == "live":
            return "live"
        self._delete(call_id)
        return "deleted"

    def _delete(self, call_id: str) -> None:
        self._db.execute("DELETE FROM calls WHERE id = ?", (call_id,))   # rows cascade
        self.wav_path(call_id).unlink(missing_ok=True)
        for ch in CHANNELS:
            self._raw_path(call_id, ch).unlink(missing_ok=True)

    # ------------------------------------------------------------ worker: reads
    def list_calls(self, limit: int = 50, before: float | None = None) -> list[dict]:
        """The newest calls first (started before ``before``, unix seconds)."""
        rows = self._db.execute(
            _SUMMARY + "WHERE c.started_at < ? ORDER BY c.started_at DESC LIMIT ?",
            (before if before is not None else float("inf"), limit)).fetchall()
        return [_call_summary(r) for r in rows]

    def get_call(self, call_id: str) -> dict | None:
        """One call: its summary, its items in order, its turns in order.  A
        placed call's id (``sipout_...``) finds its call too: once answered,
        that is its session's."""
        row = self._db.execute(_SUMMARY + "WHERE c.id = ?", (call_id,)).fetchone()
        if row is None:
            row = self._db.execute(_SUMMARY + "WHERE p.id = ?", (call_id,)).fetchone()
        if row is None:
            return None
        call_id = row["id"]
        call = _call_summary(row)
        call["items"] = [_item(r) for r in self._db.execute(
            "SELECT * FROM items WHERE call_id = ? ORDER BY t_ms, rowid", (call_id,))]
        call["turns"] = [{"response_id": r["response_id"], "status": r["status"],
                          "reason": r["reason"], "timings": json.loads(r["timings"]),
                          "usage": None if r["usage"] is None else json.loads(r["usage"])}
                         for r in self._db.execute("SELECT * FROM turns WHERE call_id = ? "
                                                   "ORDER BY rowid", (call_id,))]
        return call

    def recording_file(self, call_id: str) -> Path | None:
        """The finished WAV of a call, or None (not recorded, or still live)."""
        p = self.wav_path(call_id)
        return p if p.exists() else None


def _call_summary(r: sqlite3.Row) -> dict:
    return {"id": r["id"], "object": "voice_agent.call", "transport": r["transport"],
            "model": r["model"], "started_at": r["started_at"], "ended_at": r["ended_at"],
            "state": r["state"], "recorded": bool(r["recording"]) and r["state"] != "live",
            "item_count": r["n_items"], "turn_count": r["n_turns"],
            # a call the agent placed (POST /v1/sip/calls): its outcome, as GET /v1/sip/calls
            # showed it; None for every other call
            "outbound": None if r["placed_id"] is None else
            {k: r[f"placed_{k}"] for k in _PLACED_FIELDS}}


def _item(r: sqlite3.Row) -> dict:
    out = {"id": r["item_id"], "t_ms": r["t_ms"], "type": r["type"]}
    for k in (*_ITEM_FIELDS, "truncated_ms"):
        if k != "type" and r[k] is not None:
            out[k] = r[k]
    return out


__all__ = ["CallStore", "RECORDING_RATE_HZ", "CHANNELS"]
