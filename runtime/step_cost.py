"""What one kind of engine step costs: CPU seconds (every thread of the process),
wall seconds, steps and tokens.

An engine that runs one step at a time on its process (a thinker's decode)
can time a step with the process's CPU clock: the CPU its worker threads
spend is counted too, which a thread's own clock would miss.  The ratio of
CPU to wall time says how many cores a step really keeps busy, which is what
choosing its thread count needs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class StepCost:
    steps: int = 0
    tokens: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    _cpu0: float = field(default=0.0, init=False, repr=False)
    _wall0: float = field(default=0.0, init=False, repr=False)

    def start(self) -> None:
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()

    def stop(self, tokens: int) -> None:
        self.cpu_s += time.process_time() - self._cpu0
        self.wall_s += time.perf_counter() - self._wall0
        self.steps += 1
        self.tokens += tokens

    def as_dict(self) -> dict:
        return {"steps": self.steps, "tokens": self.tokens,
                "cpu_s": round(self.cpu_s, 3), "wall_s": round(self.wall_s, 3)}
