"""Every message the coordinator, the supervisor and the stage processes exchange.

This module is the control plane's whole vocabulary: one class per message,
its tag and its field names on the wire, all defined once here.  Senders
build a message and call :func:`encode` (or hand it to ``Peers.send``);
receivers call :func:`decode` and dispatch on the class.  Nothing else in the
runtime spells a tag or a wire key.

Who sends what, on which socket (``docs/ARCHITECTURE.md``, "Control-plane
messages", has the same table for readers of the docs):

=============  =====  ===========================  ==================================
class          tag    from -> to                   socket
=============  =====  ===========================  ==================================
Data           d      coordinator/stage -> stage   the stage's PULL (or ``coord`` for
                      stage -> coordinator         output, ``to`` = ``EXIT_DST``)
Release        r      reader -> buffer owner       the owner's PULL
Abort          a      coordinator -> every stage   ``control`` PUB
Shutdown       s      supervisor -> every stage    ``control`` PUB
Hello          hello  supervisor -> every stage    ``control`` PUB (while one starts)
Topology       topo   supervisor -> every stage    ``control`` PUB (Ray placement moved a replica)
AbortAck       k      stage -> coordinator         ``coord`` PULL
Failure        x      stage -> coordinator         ``coord`` PULL
Done           done   stage -> coordinator         ``coord`` PULL (coalesced reports)
Stats          st     stage -> supervisor          ``coord`` PULL
Heartbeat      h      stage -> supervisor          ``coord`` PULL (own thread/socket)
Ready          ready  stage -> supervisor          ``coord`` PULL
Fatal          fatal  stage -> supervisor          ``coord`` PULL (did not start)
=============  =====  ===========================  ==================================

Why plain slotted dataclasses over msgpack maps (and not pydantic): a data
message is built and parsed on every hop of every chunk, and a 4 KB request's
whole trip through three stages takes a fraction of a millisecond, almost all
of it thread wake-ups.  Measured on the 2-vCPU dev VM: a ``Data`` from its
dict 0.37 us, back to a dict 0.28 us; the same as a pydantic model 1.6 us to
validate and 1.3 us to dump, about four times as much, and the validation
buys nothing while both ends are this module.  The wire stays what it was:
a msgpack map with short keys, arrays and tensors as the extension types of
``runtime.wire``, never pickle.  A malformed or unknown message raises :class:`MessageError`,
which names the request when the message had one, so the receiver can fail
that request and keep serving.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from runtime import wire
from runtime.errors import ErrorInfo

# Data.src of a request's input (the coordinator feeds the entry stage).
ENTRY_SRC = "@in"
# Data.to of a stage's output meant for the caller (it goes to the coordinator).
EXIT_DST = "@out"

_TAG = "t"


class MessageError(ValueError):
    """A message that cannot be read; ``request_id`` when it named one."""

    def __init__(self, text: str, request_id: int | None = None, data: bool = False) -> None:
        super().__init__(text)
        self.request_id = request_id
        self.data = data  # it was a data message: its request should fail


# ---- data plane signalling ---------------------------------------------------------------
@dataclass(slots=True)
class Data:
    """One chunk of a request for stage ``to``, or its end of stream, or both.

    ``params`` rides on the first message of a request on each edge (and, as
    an update of some keys, on a later chunk from the coordinator to the entry
    stage: ``RequestHandle.send``);
    ``payload`` is a ``DataPlane.pack`` descriptor (None: end of stream only).
    """

    TAG: ClassVar[str] = "d"
    to: str
    request_id: int
    src: str
    end: bool = False
    params: dict | None = None
    payload: dict | None = None

    def to_wire(self) -> dict:
        d: dict = {_TAG: "d", "to": self.to, "rid": self.request_id, "src": self.src}
        if self.end:
            d["end"] = True
        if self.params is not None:
            d["p"] = self.params
        if self.payload is not None:
            d["pl"] = self.payload
        return d

    @classmethod
    def from_wire(cls, d: dict) -> "Data":
        return cls(d["to"], d["rid"], d["src"], bool(d.get("end")), d.get("p"), d.get("pl"))


@dataclass(slots=True)
class Release:
    """The reader is done with these lends of the receiver's buffer pool."""

    TAG: ClassVar[str] = "r"
    lend_ids: list[int]

    def to_wire(self) -> dict:
        return {_TAG: "r", "lids": self.lend_ids}

    @classmethod
    def from_wire(cls, d: dict) -> "Release":
        return cls(list(d["lids"]))


# ---- coordinator -> every stage (PUB) ----------------------------------------------------
@dataclass(slots=True)
class Abort:
    """Drop one request everywhere.  ``ack=False`` when the request already
    failed and nobody waits for the acknowledgements."""

    TAG: ClassVar[str] = "a"
    request_id: int
    reason: str
    ack: bool = True

    def to_wire(self) -> dict:
        return {_TAG: "a", "rid": self.request_id, "reason": self.reason, "ack": self.ack}

    @classmethod
    def from_wire(cls, d: dict) -> "Abort":
        return cls(d["rid"], d["reason"], bool(d.get("ack", True)))


@dataclass(slots=True)
class _Signal:
    """A message that is all tag, no fields."""

    TAG: ClassVar[str]

    def to_wire(self) -> dict:
        return {_TAG: self.TAG}

    @classmethod
    def from_wire(cls, d: dict) -> "_Signal":
        return cls()


@dataclass(slots=True)
class Shutdown(_Signal):
    """Leave the loop and exit cleanly."""

    TAG: ClassVar[str] = "s"


@dataclass(slots=True)
class Hello(_Signal):
    """Published while a stage starts: PUB/SUB joins late, so a starting stage
    waits until one reaches it before it reports ready."""

    TAG: ClassVar[str] = "hello"


@dataclass(slots=True)
class Topology:
    """Where every replica listens and on which node it runs (``placement.backend: ray``):
    a re-created replica comes back on a new endpoint, maybe on another node."""

    TAG: ClassVar[str] = "topo"
    endpoints: dict[str, list[str]]   # group -> endpoint of each replica
    nodes: dict                       # runtime.placement.NodeMap.to_wire()

    def to_wire(self) -> dict:
        return {_TAG: "topo", "eps": self.endpoints, "nodes": self.nodes}

    @classmethod
    def from_wire(cls, d: dict) -> "Topology":
        return cls({k: list(v) for k, v in d["eps"].items()}, dict(d["nodes"]))


# ---- stage -> coordinator ----------------------------------------------------------------
@dataclass(slots=True)
class AbortAck:
    """A stage process dropped the request: which of its stages held it, what it freed."""

    TAG: ClassVar[str] = "k"
    request_id: int
    group: str
    replica: int
    stages: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    freed_bytes: int = 0
    freed_buffers: int = 0

    def to_wire(self) -> dict:
        return {_TAG: "k", "rid": self.request_id, "g": self.group, "r": self.replica,
                "stages": self.stages, "held": self.held, "freed_bytes": self.freed_bytes,
                "freed_buffers": self.freed_buffers}

    @classmethod
    def from_wire(cls, d: dict) -> "AbortAck":
        return cls(d["rid"], d["g"], d["r"], list(d.get("stages", ())), list(d.get("held", ())),
                   d.get("freed_bytes", 0), d.get("freed_buffers", 0))


@dataclass(slots=True)
class Failure:
    """A stage failed one request; the coordinator fails it and aborts it elsewhere."""

    TAG: ClassVar[str] = "x"
    request_id: int
    error: ErrorInfo

    def to_wire(self) -> dict:
        return {_TAG: "x", "rid": self.request_id, "err": self.error.to_wire()}

    @classmethod
    def from_wire(cls, d: dict) -> "Failure":
        return cls(d["rid"], ErrorInfo.from_wire(d["err"]))


class DoneItem(NamedTuple):
    """A stage finished a request: its counts and times for the request table."""

    request_id: int
    stage: str
    n_out: int
    queue_ms: float
    compute_ms: float


@dataclass(slots=True)
class Done:
    """Reports of finished requests, coalesced (never one message per request)."""

    TAG: ClassVar[str] = "done"
    items: list[DoneItem]

    def to_wire(self) -> dict:
        return {_TAG: "done", "items": [list(i) for i in self.items]}

    @classmethod
    def from_wire(cls, d: dict) -> "Done":
        return cls([DoneItem(*i) for i in d["items"]])


# ---- stage -> supervisor (through the coordinator's socket) ------------------------------
@dataclass(slots=True)
class _FromProcess:
    """About the sending process itself: which group and replica, which incarnation (pid:
    a message from a process that was already replaced is ignored)."""

    TAG: ClassVar[str]
    group: str
    replica: int
    pid: int

    def _head(self) -> dict:
        return {_TAG: self.TAG, "g": self.group, "r": self.replica, "pid": self.pid}

    @staticmethod
    def _who(d: dict) -> tuple[str, int, int]:
        return d["g"], d["r"], d["pid"]


@dataclass(slots=True)
class Heartbeat(_FromProcess):
    """Liveness, from a thread of its own: a long step is not a death."""

    TAG: ClassVar[str] = "h"

    def to_wire(self) -> dict:
        return self._head()

    @classmethod
    def from_wire(cls, d: dict) -> "Heartbeat":
        return cls(*cls._who(d))


@dataclass(slots=True)
class Ready(_FromProcess):
    """The process loaded its stages and hears the control broadcast."""

    TAG: ClassVar[str] = "ready"
    stages: list[str] = field(default_factory=list)

    def to_wire(self) -> dict:
        return {**self._head(), "stages": self.stages}

    @classmethod
    def from_wire(cls, d: dict) -> "Ready":
        return cls(*cls._who(d), list(d.get("stages", ())))


@dataclass(slots=True)
class Fatal(_FromProcess):
    """The process could not start; ``error`` says why."""

    TAG: ClassVar[str] = "fatal"
    error: str = ""

    def to_wire(self) -> dict:
        return {**self._head(), "error": self.error}

    @classmethod
    def from_wire(cls, d: dict) -> "Fatal":
        return cls(*cls._who(d), d["error"])


@dataclass(slots=True)
class Stats(_FromProcess):
    """The process's periodic report; also counts as a heartbeat.

    ``report`` is open-ended (held ids, pool, tombstones, per-stage scheduler
    and executor stats): each scheduler and executor adds its own keys, and
    the coordinator's snapshot shows them as they come.
    """

    TAG: ClassVar[str] = "st"
    report: dict = field(default_factory=dict)

    def to_wire(self) -> dict:
        return {**self._head(), "report": self.report}

    @classmethod
    def from_wire(cls, d: dict) -> "Stats":
        return cls(*cls._who(d), dict(d["report"]))


Message = (Data | Release | Abort | Shutdown | Hello | Topology | AbortAck | Failure | Done | Heartbeat
           | Ready | Fatal | Stats)

_BY_TAG: dict[str, Any] = {cls.TAG: cls for cls in (
    Data, Release, Abort, Shutdown, Hello, Topology, AbortAck, Failure, Done, Heartbeat, Ready, Fatal,
    Stats)}


def encode(msg: Message) -> bytes:
    return wire.dumps(msg.to_wire())


def decode(buf: bytes | memoryview) -> Message:
    """Bytes from a socket -> the message; :class:`MessageError` if it is not one."""
    try:
        d = wire.loads(buf)
    except Exception as exc:  # noqa: BLE001 - msgpack raises several unrelated types
        raise MessageError(f"not a msgpack message: {type(exc).__name__}: {exc}") from None
    return from_wire(d)


def from_wire(d: Any) -> Message:
    if not isinstance(d, dict):
        raise MessageError(f"a message is a map, not a {type(d).__name__}")
    cls = _BY_TAG.get(d.get(_TAG))
    if cls is None:
        raise MessageError(f"unknown message tag {d.get(_TAG)!r}")
    try:
        return cls.from_wire(d)
    except (KeyError, TypeError, ValueError) as exc:
        rid = d.get("rid")
        raise MessageError(f"malformed {cls.__name__} message: {type(exc).__name__}: {exc}",
                           rid if isinstance(rid, int) else None, cls is Data) from None
