"""Keep the CPUs quick to wake while a stage has work: a PM QoS request.

An idle CPU enters an idle state, and the deeper the state the longer it
takes to run again.  Inside a virtual machine the idle state that matters is
the halt: a halted vCPU gives its host core back, and waking it means waiting
for the host to schedule it again.  A turn's critical path wakes CPUs many
times (every hop between stage processes, and llama.cpp's worker thread at
every prompt), so on a 2-vCPU Firecracker VM a reply's ~10-token prompt on
two threads took 179 ms (p50) with the CPUs free to halt and 76 ms with them
polling instead, and a hop to another process 904 us against 368
(benchmarks/cpu_wakeup_bench.py).

Linux's answer is the CPU latency QoS interface: while a process keeps
``/dev/cpu_dma_latency`` open with a value written to it, the idle governor
picks no state slower to leave than that many microseconds (0: the CPUs poll
when idle, never halt).  It costs power, and in a VM the host cores the idle
vCPUs keep, so a stage process holds the request only while it has requests,
and lets it go ``linger_s`` after its last one.  Writing the device needs
root (or a udev rule that grants it); without it nothing changes and the
stage says why in its stats.
"""

from __future__ import annotations

import os
import struct
import time

DEVICE = "/dev/cpu_dma_latency"
LINGER_S = 5.0       # idle this long before the CPUs may sleep deeply again


class CpuWakeupLatency:
    """Holds the QoS request while :meth:`update` says the process is busy."""

    def __init__(self, limit_us: float | None, linger_s: float = LINGER_S,
                 device: str = DEVICE) -> None:
        self.limit_us = None if limit_us is None else int(limit_us)
        self.linger_s = float(linger_s)
        self.device = device
        self._fd: int | None = None
        self._last_busy = 0.0
        self._unavailable: str | None = None
        self.holds = 0          # how many times the request was made

    @property
    def state(self) -> str:
        if self.limit_us is None:
            return "off"
        if self._unavailable is not None:
            return f"unavailable: {self._unavailable}"
        return "held" if self._fd is not None else "released"

    def update(self, busy: bool, now: float | None = None) -> None:
        if self.limit_us is None or self._unavailable is not None:
            return
        now = time.monotonic() if now is None else now
        if busy:
            self._last_busy = now
            if self._fd is None:
                self._hold()
        elif self._fd is not None and now - self._last_busy >= self.linger_s:
            self.release()

    def _hold(self) -> None:
        try:
            fd = os.open(self.device, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as e:      # not root, no such device (not Linux, a container)
            self._unavailable = f"{self.device}: {e.strerror or e}"
            return
        try:
            os.write(fd, struct.pack("=i", max(0, self.limit_us)))
        except OSError as e:
            os.close(fd)
            self._unavailable = f"{self.device}: {e.strerror or e}"
            return
        self._fd = fd
        self.holds += 1

    def release(self) -> None:
        """The kernel drops the request when the descriptor closes (or the process exits)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


__all__ = ["DEVICE", "LINGER_S", "CpuWakeupLatency"]
