"""The ``realtime.call.incoming`` webhook: what the operator's URL is told
when a SIP call rings, in the shape of OpenAI's event (the ``openai`` SDK's
``client.webhooks.unwrap`` parses and verifies it)::

    {"object": "event", "id": "evt_...", "type": "realtime.call.incoming",
     "created_at": 1700000000,
     "data": {"call_id": "rtc_...", "sip_headers": [{"name": "From", "value": "..."}]}}

signed per :mod:`voice_server.webhook_signing`.  A 2xx answer is a
delivery; anything else (or no answer within ``timeout_s``) is retried
twice, after 0.5 s and 1 s.  The operator then accepts or rejects the call
over HTTP (:mod:`voice_server.transports.sip_calls_api`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time

import httpx

from .call_registry import RegisteredCall
from .webhook_signing import signed_headers

log = logging.getLogger("voice_server.call_webhook")

RETRY_DELAYS_S = (0.5, 1.0)


def incoming_event(call: RegisteredCall, now: float | None = None) -> dict:
    return {"object": "event", "id": "evt_" + secrets.token_hex(12),
            "type": "realtime.call.incoming",
            "created_at": int(time.time() if now is None else now),
            "data": {"call_id": call.call_id,
                     "sip_headers": [{"name": n, "value": v} for n, v in call.sip_headers]}}


class CallWebhook:
    """Posts signed events to the operator's ``url``."""

    def __init__(self, url: str, secret: str, timeout_s: float = 5.0) -> None:
        self.url = url
        self.secret = secret
        self.timeout_s = timeout_s

    async def __call__(self, call: RegisteredCall) -> None:
        """Deliver the call's incoming event; raises when every try failed."""
        event = incoming_event(call)
        body = json.dumps(event, separators=(",", ":")).encode()
        last: Exception | None = None
        async with httpx.AsyncClient(timeout=self.timeout_s) as client:
            for delay in (0.0,) + RETRY_DELAYS_S:
                await asyncio.sleep(delay)
                # one id for every try (the receiver may dedupe), a fresh timestamp
                headers = signed_headers(self.secret, body, webhook_id=event["id"])
                try:
                    r = await client.post(self.url, content=body, headers=headers)
                    if 200 <= r.status_code < 300:
                        return
                    last = RuntimeError(f"the webhook answered {r.status_code}")
                except httpx.HTTPError as exc:
                    last = exc
        raise last or RuntimeError("not delivered")


__all__ = ["CallWebhook", "incoming_event"]
