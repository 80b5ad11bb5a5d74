"""Calls the agent placed, in the call store: every attempt is a call record
with its outcome, SIP status and target, answered or not; an answered one
becomes its session's record; retention and a killed server treat them as
every call; a database made before they were kept opens and gains them.

The placed call is the endpoint's own :class:`PlacedCall`, kept through the
observer the endpoint gives it (:func:`kept_in`); the store is real."""

from __future__ import annotations

import sqlite3
import time

from voice_server.records.settings import RecordSettings
from voice_server.records.store import DB_NAME, CallStore
from voice_server.transports.sip.outbound import PlacedCall, kept_in


def _store(tmp_path, **kw) -> CallStore:
    return CallStore(RecordSettings(enabled=True, folder=str(tmp_path), **kw))


def _placed(store: CallStore, call_id: str, to: str = "sip:bob@127.0.0.1:5070") -> PlacedCall:
    placed = PlacedCall(call_id, to, observer=kept_in(store))
    placed.observer(placed)   # as SipEndpoint.dial does: kept from the first moment
    return placed


def _placed_rows(store: CallStore) -> int:
    return store.call(lambda: store._db.execute("SELECT COUNT(*) FROM placed_calls").fetchone()[0])


def _synced(store: CallStore) -> None:
    store.call(lambda: None)   # every write queued so far is done


def test_an_unanswered_call_is_a_record_of_its_own_with_its_outcome(tmp_path):
    store = _store(tmp_path)
    placed = _placed(store, "sipout_busy")
    _synced(store)
    rec = store.call(store.get_call, "sipout_busy")
    assert (rec["state"], rec["transport"], rec["outbound"]["status"]) == ("live", "sip", "dialing")
    placed.ring()
    _synced(store)
    assert store.call(store.get_call, "sipout_busy")["outbound"]["status"] == "ringing"
    placed.settle("busy", 486, "Busy Here")
    placed.settle("failed", 500)   # the first outcome stands: nothing more is written
    _synced(store)
    rec = store.call(store.get_call, "sipout_busy")
    assert (rec["state"], rec["item_count"], rec["turn_count"]) == ("ended", 0, 0)
    assert rec["ended_at"] == rec["outbound"]["ended_at"] >= rec["started_at"]
    assert {k: rec["outbound"][k] for k in ("id", "to", "status", "sip_status", "reason")} == {
        "id": "sipout_busy", "to": "sip:bob@127.0.0.1:5070", "status": "busy", "sip_status": 486,
        "reason": "Busy Here"}
    [listed] = store.call(store.list_calls)
    assert listed["outbound"] == rec["outbound"]
    store.close()


def test_an_answered_call_becomes_its_sessions_record(tmp_path):
    store = _store(tmp_path)
    placed = _placed(store, "sipout_ok")
    placed.ring()
    store.submit(store.begin_call, "sess_1", "sip", "m", time.time(), False)   # runner.start
    placed.answer("sess_1")
    _synced(store)
    [only] = store.call(store.list_calls)   # one call, not two
    assert only["id"] == "sess_1" and only["state"] == "live"
    assert (only["outbound"]["id"], only["outbound"]["status"], only["outbound"]["sip_status"]) \
        == ("sipout_ok", "answered", 200)
    store.call(store.end_call, "sess_1", time.time())   # the recorder ends the session's row
    placed.settle("ended", reason="hangup requested")
    _synced(store)
    by_placed_id = store.call(store.get_call, "sipout_ok")   # either id finds it
    assert by_placed_id == store.call(store.get_call, "sess_1")
    assert by_placed_id["id"] == "sess_1" and by_placed_id["state"] == "ended"
    assert by_placed_id["outbound"]["status"] == "ended"
    assert by_placed_id["outbound"]["answered_at"] <= by_placed_id["outbound"]["ended_at"]
    assert store.call(store.delete_call, "sess_1") == "deleted"
    assert _placed_rows(store) == 0
    store.close()


def test_retention_takes_placed_calls_with_their_call(tmp_path):
    store = _store(tmp_path, max_age_days=1)
    old = _placed(store, "sipout_old")
    old.settle("no_answer", 487, "not answered in time")
    _synced(store)
    later = time.time() + 2 * 86400
    assert store.call(store.enforce_retention, later) == ["sipout_old"]
    assert _placed_rows(store) == 0
    live = _placed(store, "sipout_live")   # still ringing: never deleted
    _synced(store)
    assert store.call(store.enforce_retention, later) == []
    live.settle("cancelled", reason="hung up before the answer")
    store.close()


def test_a_call_being_placed_when_the_server_died_failed(tmp_path):
    store = _store(tmp_path)
    _placed(store, "sipout_dead").ring()
    store.close()   # as a kill leaves it: never settled
    again = _store(tmp_path)
    rec = again.call(again.get_call, "sipout_dead")
    assert rec["state"] == "interrupted"
    assert (rec["outbound"]["status"], rec["outbound"]["reason"]) == ("failed",
                                                                      "the server stopped")
    assert rec["outbound"]["ended_at"] == rec["ended_at"]
    again.close()


def test_a_database_from_before_placed_calls_gains_them(tmp_path):
    db = sqlite3.connect(tmp_path / DB_NAME)   # the schema as it was: no placed_calls
    now = time.time()
    db.executescript(f"""
        CREATE TABLE calls (id TEXT PRIMARY KEY, transport TEXT NOT NULL, model TEXT,
            started_at REAL NOT NULL, ended_at REAL, state TEXT NOT NULL,
            recording INTEGER NOT NULL DEFAULT 0, recording_bytes INTEGER NOT NULL DEFAULT 0);
        INSERT INTO calls VALUES ('sess_old', 'websocket', 'm', {now - 60}, {now - 30}, 'ended', 0, 0);
    """)
    db.close()
    store = _store(tmp_path)
    [old] = store.call(store.list_calls)
    assert old["id"] == "sess_old" and old["outbound"] is None
    _placed(store, "sipout_new").settle("failed", reason="no route")
    _synced(store)
    assert [c["id"] for c in store.call(store.list_calls)] == ["sipout_new", "sess_old"]
    store.close()
