"""Signing a webhook the Standard Webhooks way, which the official ``openai``
SDK's ``client.webhooks.unwrap`` / ``verify_signature`` check.

Three headers go with the JSON body: ``webhook-id`` (unique per event),
``webhook-timestamp`` (Unix seconds; the receiver refuses one more than
five minutes off) and ``webhook-signature``: ``v1,`` followed by the base64
HMAC-SHA256 of ``"{id}.{timestamp}.{body}"`` under the secret.  A secret
written ``whsec_<base64>`` is those bytes (the form OpenAI hands out);
any other string is its UTF-8 bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time

SECRET_PREFIX = "whsec_"


class WebhookSecretError(ValueError):
    """The configured secret cannot sign (empty, or ``whsec_`` without base64)."""


def secret_bytes(secret: str) -> bytes:
    if secret.startswith(SECRET_PREFIX):
        try:
            key = base64.b64decode(secret[len(SECRET_PREFIX):], validate=True)
        except (binascii.Error, ValueError):
            raise WebhookSecretError("a whsec_ secret must be base64 after its prefix") from None
    else:
        key = secret.encode()
    if not key:
        raise WebhookSecretError("the webhook secret is empty")
    return key


def new_secret() -> str:
    """A fresh ``whsec_`` secret (for an operator to configure)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def signature(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret_bytes(secret), f"{webhook_id}.{timestamp}.".encode() + body,
                   hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def signed_headers(secret: str, body: bytes, webhook_id: str | None = None,
                   timestamp: int | None = None) -> dict[str, str]:
    """The headers that go with ``body`` (JSON), signed with ``secret``."""
    webhook_id = webhook_id or "wh_" + secrets.token_hex(12)
    timestamp = int(time.time()) if timestamp is None else timestamp
    return {"webhook-id": webhook_id, "webhook-timestamp": str(timestamp),
            "webhook-signature": signature(secret, webhook_id, timestamp, body),
            "content-type": "application/json"}


__all__ = ["signed_headers", "signature", "secret_bytes", "new_secret", "WebhookSecretError"]
