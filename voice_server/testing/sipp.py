"""SIPp (Debian ``sip-tester``) as a real SIP caller for tests and benchmarks.

A :class:`SippCall` writes one UAC scenario from steps (offer, play a
capture, send keys, hold, resume, hang up, cancel) and runs ``sipp`` for
one call against the server's SIP port on 127.0.0.1.  The scenario's SDP
names ``rtp_port``: where the agent's RTP goes (a
:class:`voice_server.testing.rtp_peer.RtpPeer` the test owns), while SIPp plays its captures from its own media port, on the
same address.

SIPp ships the captures used here: ``g711a.pcap`` (speech, A-law) and
``dtmf_2833_<key>.pcap`` (RFC 4733 events) in :data:`SIPP_SHARE`.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

SIPP_SHARE = Path("/usr/share/sip-tester")
SPEECH_PCAP = SIPP_SHARE / "g711a.pcap"

OFFER_PCMA = "m=audio [$rtp] RTP/AVP 8 101\na=rtpmap:8 PCMA/8000\n" \
             "a=rtpmap:101 telephone-event/8000\na=fmtp:101 0-15\na=ptime:20"
OFFER_PCMU = "m=audio [$rtp] RTP/AVP 0 101\na=rtpmap:0 PCMU/8000\n" \
             "a=rtpmap:101 telephone-event/8000\na=fmtp:101 0-15\na=ptime:20"
OFFER_G722 = "m=audio [$rtp] RTP/AVP 9 101\na=rtpmap:9 G722/8000\n" \
             "a=rtpmap:101 telephone-event/8000\na=fmtp:101 0-15\na=ptime:20"
OFFER_G729 = "m=audio [$rtp] RTP/AVP 18\na=rtpmap:18 G729/8000\na=ptime:20"


def sipp_available() -> bool:
    return shutil.which("sipp") is not None and SPEECH_PCAP.exists()


def free_port(kind: int = socket.SOCK_DGRAM) -> int:
    """A port free for both UDP and TCP on 127.0.0.1 (for the server's SIP port)."""
    for _ in range(50):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("127.0.0.1", 0))
        port = u.getsockname()[1]
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            t.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            t.close()
            u.close()
    raise RuntimeError("no free port")


def _sdp(offer: str, direction: str = "sendrecv") -> str:
    lines = ["v=0", "o=caller 1 [cseq] IN IP4 [media_ip]", "s=-", "c=IN IP4 [media_ip]",
             "t=0 0", *offer.split("\n"), f"a={direction}"]
    return "\n".join(lines) + "\n"


NEW_VIA = "Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]"
SAME_VIA = "[last_Via:]"  # CANCEL, and the ACK of a non-2xx: the INVITE's own transaction


def _request(method: str, cseq: str, *, sdp: Optional[str] = None,
             headers: tuple[str, ...] = (), in_dialog: bool = True, via: str = NEW_VIA) -> str:
    to = "[last_To:]" if in_dialog else "To: <sip:agent@[remote_ip]:[remote_port]>"
    head = [f"{method} sip:agent@[remote_ip]:[remote_port] SIP/2.0", via,
            "From: <sip:caller@[local_ip]:[local_port]>;tag=[pid]caller[call_number]",
            to, "Call-ID: [call_id]", f"CSeq: {cseq}",
            "Contact: <sip:caller@[local_ip]:[local_port];transport=[transport]>",
            "Max-Forwards: 70", *headers]
    if sdp is not None:
        head += ["Content-Type: application/sdp", "Content-Length: [len]", "", sdp]
    else:
        head += ["Content-Length: 0", "", ""]
    return "\n".join(head)


@dataclass
class SippCall:
    """One scripted call (module docstring).  Steps, in order, via the methods."""
    sip_port: int
    rtp_port: int
    transport: str = "udp"  # udp | tcp
    offer: str = OFFER_PCMA
    headers: tuple[str, ...] = ()
    steps: list[str] = field(default_factory=list)
    expect: Optional[int] = 200  # the INVITE's final status (None: cancelled: 487)
    _cseq: int = 1
    _answered: bool = False

    def invite(self) -> "SippCall":
        sdp = _sdp(self.offer)
        self.steps.append(f'<send retrans="500"><![CDATA[\n'
                          f'{_request("INVITE", "1 INVITE", sdp=sdp, headers=self.headers, in_dialog=False)}'
                          ']]></send>')
        self.steps.append('<recv response="100" optional="true"/>')
        if self.expect == 200:
            self.steps.append('<recv response="180" optional="true"/>')
            self.steps.append('<recv response="200" rtd="true"/>')
            self._ack("1 ACK")
            self._answered = True
        elif self.expect is None:  # cancel while it rings
            self.steps.append('<recv response="180"/>')
            self.steps.append('<send><![CDATA[\n' + _request(
                "CANCEL", "1 CANCEL", in_dialog=False, via=SAME_VIA) + ']]></send>')
            self.steps.append('<recv response="200"/>')
            self.steps.append('<recv response="487"/>')
            self._ack("1 ACK", via=SAME_VIA)
        else:
            self.steps.append('<recv response="180" optional="true"/>')
            self.steps.append(f'<recv response="{self.expect}"/>')
            self._ack("1 ACK", via=SAME_VIA)
        return self

    def _ack(self, cseq: str, via: str = NEW_VIA) -> None:
        self.steps.append('<send><![CDATA[\n' + _request("ACK", cseq, via=via) + ']]></send>')

    def play(self, pcap: Path = SPEECH_PCAP) -> "SippCall":
        self.steps.append(f'<nop><action><exec play_pcap_audio="{pcap}"/></action></nop>')
        return self

    def keys(self, keys: str, gap_ms: int = 800) -> "SippCall":
        """Each key's capture, ``gap_ms`` apart: SIPp stops a capture still
        playing when the next starts, and on a busy machine its player starts late."""
        for k in keys:
            name = {"*": "star", "#": "pound"}.get(k, k)
            self.play(SIPP_SHARE / f"dtmf_2833_{name}.pcap")
            self.pause(gap_ms)
        return self

    def pause(self, ms: int) -> "SippCall":
        self.steps.append(f'<pause milliseconds="{ms}"/>')
        return self

    def reinvite(self, direction: str, expect_answer: str) -> "SippCall":
        """A re-INVITE offering ``direction``; the 200's SDP must say ``expect_answer``."""
        self._cseq += 1
        self.steps.append('<send retrans="500"><![CDATA[\n' + _request(
            "INVITE", f"{self._cseq} INVITE", sdp=_sdp(self.offer, direction)) + ']]></send>')
        self.steps.append('<recv response="100" optional="true"/>')
        self.steps.append(f'<recv response="200"><action><ereg regexp="a={expect_answer}" '
                          'search_in="body" check_it="true" assign_to="dir"/></action></recv>')
        self._ack(f"{self._cseq} ACK")
        return self

    def bye(self) -> "SippCall":
        self._cseq += 1
        self.steps.append('<send retrans="500"><![CDATA[\n' + _request(
            "BYE", f"{self._cseq} BYE") + ']]></send>')
        self.steps.append('<recv response="200" crlf="true"/>')
        return self

    def _reply(self, status: str) -> str:
        return ('<send><![CDATA[\nSIP/2.0 ' + status + '\n[last_Via:]\n[last_From:]\n'
                '[last_To:]\n[last_Call-ID:]\n[last_CSeq:]\nContent-Length: 0\n\n]]></send>')

    def transfer(self, outcome: int = 200, refuse: int = 0, timeout_ms: int = 30000,
                 target: Optional[str] = None) -> "SippCall":
        """The agent REFERs us: answer 202 then NOTIFY the transfer's ``outcome``
        (a sipfrag status line), or refuse the REFER with ``refuse``.  With
        ``target``, a Refer-To naming another target fails the scenario."""
        if target is None:
            self.steps.append(f'<recv request="REFER" timeout="{timeout_ms}"/>')
        else:
            self.steps.append(
                f'<recv request="REFER" timeout="{timeout_ms}"><action><ereg regexp="'
                f'{re.escape(target)}" search_in="hdr" header="Refer-To:" check_it="true" '
                'assign_to="refer_to"/></action></recv>')
            self.steps.append('<Reference variables="refer_to"/>')  # (SIPp refuses unused ones)
        if refuse:
            self.steps.append(self._reply(f"{refuse} Refused"))
            return self
        self.steps.append(self._reply("202 Accepted"))
        self._cseq += 1
        body = f"SIP/2.0 {outcome} {'OK' if outcome < 300 else 'Failed'}\n"
        notify = _request("NOTIFY", f"{self._cseq} NOTIFY", headers=(
            "Event: refer", "Subscription-State: terminated;reason=noresource"))
        notify = notify.replace("[last_To:]", "To: <sip:agent@[remote_ip]:[remote_port]>"
                                "[peer_tag_param]")
        notify = notify.replace("Content-Length: 0\n\n", "Content-Type: message/sipfrag;"
                                "version=2.0\nContent-Length: [len]\n\n" + body)
        self.steps.append('<send retrans="500"><![CDATA[\n' + notify + ']]></send>')
        self.steps.append('<recv response="200"/>')
        return self

    def await_bye(self, timeout_ms: int = 30000) -> "SippCall":
        """The agent hangs up: receive its BYE and answer 200."""
        self.steps.append(f'<recv request="BYE" timeout="{timeout_ms}"/>')
        self.steps.append('<send><![CDATA[\nSIP/2.0 200 OK\n[last_Via:]\n[last_From:]\n'
                          '[last_To:]\n[last_Call-ID:]\n[last_CSeq:]\nContent-Length: 0\n\n'
                          ']]></send>')
        return self

    def scenario(self) -> str:
        body = "\n".join(self.steps)
        return ('<?xml version="1.0" encoding="ISO-8859-1" ?>\n'
                f'<scenario name="voice-agent test call">\n<Global variables="rtp"/>\n{body}\n</scenario>\n')

    def command(self, path: str, media_port: int) -> list[str]:
        return ["sipp", f"127.0.0.1:{self.sip_port}", "-sf", path, "-m", "1", "-l", "1",
                "-i", "127.0.0.1", "-p", "0", "-mi", "127.0.0.1", "-mp", str(media_port),
                "-t", "t1" if self.transport == "tcp" else "u1", "-set", "rtp",
                str(self.rtp_port), "-nostdin", "-timeout", "60s", "-timeout_error",
                "-trace_err", "-max_recv_loops", "1000"]

    async def arun(self, timeout_s: float = 60.0) -> "SippResult":
        """Run the call to its end.  SIPp is killed when this is cancelled or
        ``timeout_s`` passes (rc -9 then), so a test that gives up leaves no SIPp behind."""
        return await run_sipp(self.scenario(), lambda path: self.command(path, free_port()),
                              timeout_s)


async def run_sipp(scenario: str, command, timeout_s: float) -> "SippResult":
    """Run SIPp on ``scenario`` (``command(path)`` is its command line) to its
    end; killed when cancelled or past ``timeout_s``, so no SIPp is left behind."""
    with tempfile.TemporaryDirectory(prefix="sipp-") as d:
        path = os.path.join(d, "scenario.xml")
        Path(path).write_text(scenario)
        t0 = time.monotonic()
        p = await asyncio.create_subprocess_exec(
            *command(path), cwd=d, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(p.communicate(), timeout_s)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            p.kill()
            await p.wait()
            raise
        errors = "".join(f.read_text(errors="replace") for f in Path(d).glob("*errors.log"))
        return SippResult(p.returncode, out.decode(errors="replace")[-4000:],
                          err.decode(errors="replace")[-4000:], errors, time.monotonic() - t0)


def udp_port_taken(port: int) -> bool:
    """Someone holds UDP ``port`` on 127.0.0.1 (a SIPp callee that is up, a server not yet closed)."""
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.bind(("127.0.0.1", port))
        return False
    except OSError:
        return True
    finally:
        u.close()


@dataclass
class SippCallee:
    """SIPp as the callee of a call the server places: it listens on
    ``sip_port`` and answers one INVITE as told (``answer``: 180 then 200
    with an SDP naming ``rtp_port``; ``busy``: 486; ``ring``: 180 until the
    caller CANCELs), then, once answered, sends its ``reinvites`` in order
    (each ``(direction, expected answer direction, pause_ms after it)``: a
    hold is ``("sendonly", "recvonly", 1500)``), then waits for the
    server's BYE (``hang_up_ms=None``) or sends its own after that long."""
    sip_port: int
    rtp_port: int
    behaviour: str = "answer"  # answer | busy | ring
    hang_up_ms: Optional[int] = None
    offer: str = OFFER_PCMU
    reinvites: tuple[tuple[str, str, int], ...] = ()

    def _in_dialog(self, method: str, cseq: int, sdp: Optional[str] = None) -> str:
        """A request of ours in the dialog (From/To swapped from the ACK we got)."""
        head = (f"{method} sip:agent@[remote_ip]:[remote_port] SIP/2.0\n"
                "Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]\n"
                f"From:[$ack_to]\nTo:[$ack_from]\n[last_Call-ID:]\nCSeq: {cseq} {method}\n"
                "Contact: <sip:callee@[local_ip]:[local_port];transport=[transport]>\n"
                "Max-Forwards: 70\n")
        if sdp is None:
            return head + "Content-Length: 0\n\n"
        return head + f"Content-Type: application/sdp\nContent-Length: [len]\n\n{sdp}"

    def scenario(self) -> str:
        reply = ("<send><![CDATA[\nSIP/2.0 {status}\n[last_Via:]\n[last_From:]\n"
                 "[last_To:];tag=[pid]callee[call_number]\n[last_Call-ID:]\n[last_CSeq:]\n"
                 "Contact: <sip:callee@[local_ip]:[local_port];transport=[transport]>\n"
                 "{body}]]></send>")
        empty = "Content-Length: 0\n\n"
        steps = ['<recv request="INVITE" crlf="true"><action><ereg regexp="CSeq: *([0-9]+)" '
                 'search_in="msg" check_it="true" assign_to="whole,invite_cseq"/></action></recv>']
        if self.behaviour == "busy":
            steps += [reply.format(status="486 Busy Here", body=empty),
                      '<recv request="ACK" optional="true" timeout="5000"/>']
        elif self.behaviour == "ring":
            steps += [reply.format(status="180 Ringing", body=empty),
                      '<recv request="CANCEL"/>',
                      reply.format(status="200 OK", body=empty),
                      reply.format(status="487 Request Terminated", body=empty)
                      .replace("[last_CSeq:]", "CSeq: [$invite_cseq] INVITE"),
                      '<recv request="ACK" optional="true" timeout="5000"/>']
        else:
            sdp = _sdp(self.offer).replace("[cseq]", "1")
            steps += [reply.format(status="180 Ringing", body=empty),
                      '<pause milliseconds="300"/>',
                      reply.format(status="200 OK", body="Content-Type: application/sdp\n"
                                   "Content-Length: [len]\n\n" + sdp),
                      '<recv request="ACK" crlf="true"><action>'
                      '<ereg regexp=".*" search_in="hdr" header="To:" assign_to="ack_to"/>'
                      '<ereg regexp=".*" search_in="hdr" header="From:" assign_to="ack_from"/>'
                      '</action></recv>']
            cseq = 1
            for n, (direction, answer, pause_ms) in enumerate(self.reinvites):
                sdp = _sdp(self.offer, direction).replace("[cseq]", str(n + 2))
                steps += ['<send retrans="500"><![CDATA[\n' + self._in_dialog(
                              "INVITE", cseq, sdp) + ']]></send>',
                          '<recv response="100" optional="true"/>',
                          f'<recv response="200"><action><ereg regexp="a={answer}" '
                          'search_in="body" check_it="true" assign_to="dir"/></action></recv>',
                          '<send><![CDATA[\n' + self._in_dialog("ACK", cseq) + ']]></send>',
                          f'<pause milliseconds="{pause_ms}"/>']
                cseq += 1
            if self.hang_up_ms is None:
                steps += ['<recv request="BYE" timeout="60000"/>',
                          reply.format(status="200 OK", body=empty)]
            else:
                steps += [f'<pause milliseconds="{self.hang_up_ms}"/>',
                          '<send retrans="500"><![CDATA[\n' + self._in_dialog("BYE", cseq)
                          + ']]></send>', '<recv response="200"/>']
        body = "\n".join(steps)
        # SIPp refuses a variable set and never used unless it is declared so
        refs = "whole,invite_cseq,rtp" + (",ack_to,ack_from" if "ack_to" in body else "") \
            + (",dir" if self.reinvites else "")
        return ('<?xml version="1.0" encoding="ISO-8859-1" ?>\n'
                f'<scenario name="voice-agent test callee">\n<Global variables="rtp"/>\n'
                f'{body}\n<Reference variables="{refs}"/>\n</scenario>\n')

    def command(self, path: str) -> list[str]:
        return ["sipp", "-sf", path, "-m", "1", "-i", "127.0.0.1", "-p", str(self.sip_port),
                "-mi", "127.0.0.1", "-mp", str(free_port()), "-t", "u1", "-set", "rtp",
                str(self.rtp_port), "-nostdin", "-timeout", "300s", "-timeout_error", "-trace_err"]

    async def arun(self, timeout_s: float = 60.0) -> "SippResult":
        """Listen, answer one call, end (killed when cancelled or past ``timeout_s``)."""
        return await run_sipp(self.scenario(), self.command, timeout_s)


@dataclass
class SippResult:
    rc: int  # 0: the scenario ran as written
    stdout: str
    stderr: str
    errors: str  # SIPp's unexpected-message log
    seconds: float

    @property
    def ok(self) -> bool:
        return self.rc == 0


__all__ = ["SippCall", "SippCallee", "SippResult", "udp_port_taken", "free_port", "sipp_available", "SPEECH_PCAP",
           "SIPP_SHARE", "OFFER_PCMA", "OFFER_PCMU", "OFFER_G729"]
