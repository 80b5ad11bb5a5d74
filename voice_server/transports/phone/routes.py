"""Every phone bridge's routes: ``/v1/telephony/<provider>`` for Twilio,
Telnyx, Plivo, Exotel and Vonage, Twilio's TwiML webhook, and the DTMF tones
an application plays into a call (:mod:`.tones`)."""

from __future__ import annotations

from starlette.routing import Route, WebSocketRoute

from ...settings import ServerSettings
from .bridge import PhoneEndpoint
from .codec import PhoneCodec
from .exotel import ExotelCodec
from .paths import EXOTEL_PATH, PLIVO_PATH, TELNYX_PATH, TWILIO_PATH, VONAGE_PATH
from .plivo import PlivoCodec
from .telnyx import TelnyxCodec
from .tones import tones_route
from .twilio import TWIML_PATH, TwilioCodec, twilio_upgrade_signed, twiml_endpoint
from .vonage import VonageCodec

PROVIDERS: dict[str, tuple[str, type[PhoneCodec]]] = {
    "twilio": (TWILIO_PATH, TwilioCodec),
    "telnyx": (TELNYX_PATH, TelnyxCodec),
    "plivo": (PLIVO_PATH, PlivoCodec),
    "exotel": (EXOTEL_PATH, ExotelCodec),
    "vonage": (VONAGE_PATH, VonageCodec),
}


def phone_routes(pipeline, settings: ServerSettings) -> tuple[list, dict[str, PhoneEndpoint]]:
    """The routes and the endpoints by provider name (each endpoint's
    ``close_all`` belongs in the app's shutdown)."""
    endpoints: dict[str, PhoneEndpoint] = {}
    routes: list = []
    for name, (path, codec_cls) in PROVIDERS.items():
        signature = twilio_upgrade_signed if name == "twilio" else None
        endpoints[name] = PhoneEndpoint(codec_cls, pipeline, settings, signature)
        routes.append(WebSocketRoute(path, endpoints[name]))
    routes.append(Route(TWIML_PATH, twiml_endpoint(settings), methods=["POST"]))
    routes.append(tones_route(endpoints, settings))
    return routes, endpoints


__all__ = ["phone_routes", "PROVIDERS"]
