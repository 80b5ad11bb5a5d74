"""Where turn traces go (``extra.server.traces``), if anywhere.

``otlp_endpoint`` is the OTLP/HTTP traces URL of a collector (e.g.
``http://127.0.0.1:4318/v1/traces``); none (the default) turns tracing off.
The standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` environment variable sets
it too (``ServerSettings.from_sources``).
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict


class TraceSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    otlp_endpoint: Optional[str] = None
    service_name: str = "voice-agent"

    @property
    def enabled(self) -> bool:
        return bool(self.otlp_endpoint)


__all__ = ["TraceSettings"]
