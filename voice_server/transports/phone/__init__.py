"""Phone bridges: Twilio, Telnyx, Plivo, Exotel and Vonage calls on one core.

* :mod:`.bridge` - the call loop and the endpoint (access, admission), one
  for every provider;
* :mod:`.codec` - what a provider's messages become, and the codecs' base;
  one small socket-free codec per provider: :mod:`.twilio` (+ TwiML and
  signatures), :mod:`.telnyx`, :mod:`.plivo`, :mod:`.exotel`, :mod:`.vonage`;
* :mod:`.playout` - outbound framing, marks and the played position;
* :mod:`.line` - a line's audio format; :mod:`.paths` - the endpoints' paths;
* :mod:`.tones` - ``POST /v1/telephony/calls/{id}/dtmf``: tones into a call;
* :mod:`.routes` - every route, for the app.
"""
