"""The WebSocket paths of the phone bridges, one per provider.

Kept apart from the codecs so that code which only needs to recognise a phone
stream (the oversize-frame close in :mod:`voice_server.third_party_patches`:
phone providers get a bare 1009, no Realtime ``error`` event) imports no
bridge machinery.
"""

from __future__ import annotations

TWILIO_PATH = "/v1/telephony/twilio"
TELNYX_PATH = "/v1/telephony/telnyx"
PLIVO_PATH = "/v1/telephony/plivo"
EXOTEL_PATH = "/v1/telephony/exotel"
VONAGE_PATH = "/v1/telephony/vonage"

PHONE_PATHS = (TWILIO_PATH, TELNYX_PATH, PLIVO_PATH, EXOTEL_PATH, VONAGE_PATH)

__all__ = ["TWILIO_PATH", "TELNYX_PATH", "PLIVO_PATH", "EXOTEL_PATH", "VONAGE_PATH",
           "PHONE_PATHS"]
