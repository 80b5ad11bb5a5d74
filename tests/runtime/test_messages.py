"""The control-plane vocabulary: every message survives the wire, bad ones are named."""

import numpy as np
import pytest

from runtime import messages, wire
from runtime.errors import ErrorCode, ErrorInfo
from runtime.messages import (Abort, AbortAck, Data, Done, DoneItem, Failure, Fatal, Heartbeat, Hello,
                              MessageError, Ready, Release, Shutdown, Stats)

EVERY_MESSAGE = [
    Data("b", 7, "a"),
    Data("b", 7, "a", end=True, params={"_route": ["a", "b"], "k": 1},
         payload={"tr": "inline", "v": np.arange(4, dtype=np.int16)}),
    Release([1, 2, 3]),
    Abort(7, "barge_in"),
    Abort(7, "timeout", ack=False),
    Shutdown(),
    Hello(),
    AbortAck(7, "gen", 1, ["gen"], ["gen"], 4096, 2),
    Failure(7, ErrorInfo.make(ErrorCode.BAD_INPUT, "no", "a")),
    Done([DoneItem(7, "a", 3, 0.5, 1.25), DoneItem(8, "b", 0, 0.0, 0.0)]),
    Heartbeat("gen", 0, 1234),
    Ready("gen", 0, 1234, ["gen", "c"]),
    Fatal("gen", 0, 1234, "RuntimeError: cannot load"),
    Stats("gen", 0, 1234, {"held": [7], "pool": {"lent": 0}, "stages": {"gen": {"running": 1}}}),
]


@pytest.mark.parametrize("msg", EVERY_MESSAGE, ids=lambda m: type(m).__name__)
def test_every_message_round_trips(msg):
    back = messages.decode(messages.encode(msg))
    assert type(back) is type(msg)
    if isinstance(msg, Data) and msg.payload is not None:
        assert np.array_equal(back.payload["v"], msg.payload["v"])
        back.payload, msg = None, Data(msg.to, msg.request_id, msg.src, msg.end, msg.params)
    assert back == msg


def test_every_message_class_has_its_own_tag():
    tags = [type(m).TAG for m in EVERY_MESSAGE]
    assert len(set(tags)) == len({type(m) for m in EVERY_MESSAGE}) == 12


def test_a_data_message_with_only_an_end_is_small():
    """The per-chunk message carries no empty keys: absent fields stay off the wire."""
    assert wire.loads(messages.encode(Data("b", 7, "a"))) == {"t": "d", "to": "b", "rid": 7, "src": "a"}


def test_unknown_or_malformed_messages_raise_message_error_naming_the_request():
    with pytest.raises(MessageError, match="unknown message tag 'tomb'"):
        messages.decode(wire.dumps({"t": "tomb", "rids": [1]}))
    with pytest.raises(MessageError, match="a map"):
        messages.decode(wire.dumps([1, 2]))
    with pytest.raises(MessageError, match="not a msgpack message"):
        messages.decode(b"\xc1")
    with pytest.raises(MessageError, match="malformed Data") as bad_data:
        messages.decode(wire.dumps({"t": "d", "rid": 9, "src": "a"}))  # no destination
    assert bad_data.value.request_id == 9 and bad_data.value.data
    with pytest.raises(MessageError, match="malformed Failure") as bad_failure:
        messages.decode(wire.dumps({"t": "x", "rid": 9, "err": {"code": "no-such-code", "message": ""}}))
    assert bad_failure.value.request_id == 9 and not bad_failure.value.data
