"""What the operator configures about call records (``extra.server.records``).

Off by default.  ``recording`` (the caller's and the agent's audio as the two
channels of one WAV) is off even when records are on: a transcript is less
than a voice.  The server enforces both retention limits itself, at start and
after every call: calls older than ``max_age_days`` go, then the oldest until
the calls' total size (recordings plus transcript text) is under
``max_total_mb``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RecordSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = False
    folder: str = "call-records"     # the database (calls.sqlite3) and the WAV files
    recording: bool = False          # two-channel WAV per call: caller left, agent right
    max_age_days: float = Field(30.0, gt=0)
    max_total_mb: float = Field(1024.0, gt=0)

    @property
    def max_total_bytes(self) -> int:
        return int(self.max_total_mb * 1024 * 1024)


__all__ = ["RecordSettings"]
