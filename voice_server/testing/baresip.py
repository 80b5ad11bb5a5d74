"""baresip (Debian ``baresip-core``) as a real SIP phone for the tests: it
dials the agent or answers the agent's call, says what a WAV file holds, and
records what it hears.

One process per :class:`Baresip`, with a configuration folder of its own
(``baresip -f DIR``) holding only what a phone on 127.0.0.1 needs:

* ``g711`` (PCMU, PCMA): the codecs every SIP peer of the agent shares;
* ``aufile`` as the microphone: it plays :attr:`Baresip.source`, a WAV file
  the test writes with :meth:`Baresip.say`.  baresip ends the call when the
  file ends, so :meth:`say` pads the words with silence to last the call;
* ``sndfile``, an audio filter, as the ear: per call it writes what it
  decodes from the agent as ``dump-<time>-dec.wav`` (and what it sends as
  ``...-enc.wav``) under the recordings folder.  baresip 1.0's ``aufile``
  has no player side, so the recording comes from this filter, and no audio
  player (no sound card, no ALSA) is loaded at all;
* ``account`` for the one account (``answermode=auto`` when it answers
  calls), ``menu`` for the call commands (``dial``, ``hangup``, ``accept``)
  and ``ctrl_tcp`` to drive it (:mod:`.baresip_ctrl`).

SIP, RTP and the control socket bind 127.0.0.1 (``net_interface``), so no
packet leaves the machine.  The process dies with :meth:`Baresip.stop`
(terminate, then kill), whatever happened; baresip's own ``-t`` ends it
after ``lifetime_s`` if this process died first::

    with Baresip() as phone:
        phone.say(pcm, 16000)
        ctl = await phone.control()
        await ctl.command("dial", "sip:agent@127.0.0.1:5060")
        ...
        heard = await phone.heard()     # (int16 mono, rate) of the last call
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
import wave
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from voice_server.audio_codec import resample
from .baresip_ctrl import BaresipControl
from .sipp import free_port

MODULES = Path("/usr/lib/baresip/modules")
SOURCE_RATE = 8000  # what the file is written at: a phone line's rate, no resampling in baresip
CONFIG = """\
# written by voice_server.testing.baresip for one test phone
poll_method             epoll
net_interface           127.0.0.1
sip_listen              127.0.0.1:{sip_port}
call_local_timeout      120
call_max_calls          1
audio_source            aufile,{source}
audio_path              {folder}
rtp_ports               {rtp_lo}-{rtp_hi}
module_path             {modules}
module                  g711.so
module                  aufile.so
module                  sndfile.so
module_tmp              account.so
module_app              menu.so
module_app              ctrl_tcp.so
ctrl_tcp_listen         127.0.0.1:{ctrl_port}
snd_path                {recordings}
ringback_disabled       yes
statmode_default        off
"""


def baresip_available() -> bool:
    return shutil.which("baresip") is not None and all(
        (MODULES / f"{m}.so").exists() for m in ("g711", "aufile", "sndfile", "ctrl_tcp", "menu",
                                                 "account"))


def _tcp_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


@dataclass
class Baresip:
    """One baresip phone (module docstring).  ``rtp_ports``: the range its
    RTP binds in (keep it apart from the agent's)."""
    rtp_ports: tuple[int, int] = (34700, 34798)
    user: str = "phone"
    auto_answer: bool = True  # answer the agent's calls at once
    lifetime_s: int = 900  # baresip quits by itself after this long, whatever happens here
    sip_port: int = 0  # set by start
    ctrl_port: int = 0
    folder: Optional[Path] = None
    proc: Optional[subprocess.Popen] = None
    _tmp: Optional[tempfile.TemporaryDirectory] = field(default=None, repr=False)

    @property
    def source(self) -> Path:
        """The WAV baresip plays into each call (:meth:`say` writes it)."""
        return self.folder / "source.wav"

    @property
    def recordings(self) -> Path:
        return self.folder / "recordings"

    @property
    def uri(self) -> str:
        """Where the agent dials this phone."""
        return f"sip:{self.user}@127.0.0.1:{self.sip_port}"

    @property
    def log(self) -> str:
        return (self.folder / "baresip.log").read_text(errors="replace") if self.folder else ""

    # ------------------------------------------------------------ life
    def start(self, timeout: float = 20.0) -> "Baresip":
        """Write the configuration, start baresip and wait until its control
        socket answers; RuntimeError with its log if it does not."""
        self._tmp = tempfile.TemporaryDirectory(prefix="baresip-")
        self.folder = Path(self._tmp.name)
        self.recordings.mkdir()
        self.sip_port, self.ctrl_port = free_port(), free_port()
        (self.folder / "config").write_text(CONFIG.format(
            sip_port=self.sip_port, ctrl_port=self.ctrl_port, source=self.source,
            folder=self.folder, rtp_lo=self.rtp_ports[0], rtp_hi=self.rtp_ports[1],
            modules=MODULES, recordings=self.recordings))
        answer = ";answermode=auto" if self.auto_answer else ""
        (self.folder / "accounts").write_text(
            f"<{self.uri}>;regint=0;audio_codecs=PCMU,PCMA{answer}\n")
        self.say(np.zeros(SOURCE_RATE, np.int16), SOURCE_RATE)
        log = open(self.folder / "baresip.log", "wb")
        try:
            self.proc = subprocess.Popen(
                ["baresip", "-f", str(self.folder), "-t", str(self.lifetime_s)],
                cwd=self.folder, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        try:
            deadline = time.monotonic() + timeout
            while not _tcp_open(self.ctrl_port):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("baresip did not start:\n" + self.log[-3000:])
                time.sleep(0.05)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """End the process (terminate, then kill) and remove its folder."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> "Baresip":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    async def control(self) -> BaresipControl:
        """A new ``ctrl_tcp`` connection (on the caller's loop)."""
        return await BaresipControl.connect(self.ctrl_port)

    # ------------------------------------------------------------ audio
    def say(self, pcm: np.ndarray, rate: int, lasting_s: float = 120.0) -> None:
        """What the next call's microphone says: ``pcm`` (int16 mono), then
        silence until ``lasting_s`` (baresip hangs up where the file ends).
        Takes effect at the next call; the recordings of earlier calls go."""
        self.clear_recordings()
        pcm = resample(np.asarray(pcm, np.int16), rate, SOURCE_RATE)
        tail = max(int(lasting_s * SOURCE_RATE) - pcm.size, 0)
        with wave.open(str(self.source), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(SOURCE_RATE)
            w.writeframes(np.concatenate([pcm, np.zeros(tail, np.int16)]).astype("<i2").tobytes())

    def clear_recordings(self) -> None:
        for p in self.recordings.glob("*.wav"):
            p.unlink()

    async def heard(self, timeout: float = 10.0) -> tuple[np.ndarray, int]:
        """What the phone heard in its last call, once the call is over:
        int16 mono samples and their rate.  The recordings are then removed,
        so the next call's are the only ones (sndfile names its files by the
        second the call started)."""
        deadline = time.monotonic() + timeout
        while True:
            got = _finished_wav(self.recordings, "-dec.wav")
            if got is not None:
                self.clear_recordings()
                return got
            if time.monotonic() > deadline:
                names = sorted(p.name for p in self.recordings.iterdir())
                raise TimeoutError(f"no finished recording in {timeout} s: {names}")
            await asyncio.sleep(0.1)


def _finished_wav(folder: Path, suffix: str) -> Optional[tuple[np.ndarray, int]]:
    """The newest ``*suffix`` file once libsndfile has closed it (its header
    then counts every byte that follows it), else None."""
    files = sorted(folder.glob(f"*{suffix}"))
    if not files:
        return None
    path = files[-1]
    try:
        with wave.open(str(path)) as w:
            n, rate, width, channels = (w.getnframes(), w.getframerate(), w.getsampwidth(),
                                        w.getnchannels())
            data = w.readframes(n)
    except (EOFError, wave.Error):
        return None  # still being written
    if n == 0 or len(data) != n * width * channels or width != 2:
        return None
    pcm = np.frombuffer(data, "<i2")
    if channels > 1:
        pcm = pcm.reshape(-1, channels)[:, 0]
    return pcm.copy(), rate


__all__ = ["Baresip", "baresip_available", "SOURCE_RATE"]
