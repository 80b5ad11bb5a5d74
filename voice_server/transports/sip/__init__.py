"""The SIP endpoint: a SIP trunk or a PBX calls the agent directly (docs/SIP.md).

One room for everything SIP and RTP, beside the phone bridges, on the same
session core (``audio_out_mode="stream"``) through :class:`SessionRunner`:

* :mod:`.settings` - ``extra.server.sip`` (off by default);
* :mod:`.endpoint` - the UDP/TCP/TLS listeners, access, admission, the incoming
  call hook and the routing of every request to its call;
* :mod:`.incoming` - what the operator's hook sees and decides;
* :mod:`.access` - who may call (source networks, digest auth);
* :mod:`.call` - one answered call <-> one session; :mod:`.control` - its
  :class:`~voice_server.call_control.CallControl` (BYE, REFER, DTMF out);
* :mod:`.sdp` - offer/answer, codec choice, hold directions;
* :mod:`.media` - the RTP socket and the 20 ms send clock, run in
  :mod:`.media_process` (the RTP process; :mod:`.media_remote` is the
  server's side of it, :mod:`.media_link` the socket between them); :mod:`.rtp` -
  RTP packets in and out; :mod:`.dtmf` - RFC 4733 events;
  :mod:`.playout` - the outbound queue, barge-in and what was heard;
  :mod:`.payload` - G.711 / G.722 payloads; :mod:`.ports` - the RTP ports;
* :mod:`.listeners` - aiosipua's UDP and TCP listeners, adapted (uvloop;
  TCP answers on the request's own connection), and the TLS listener on the
  TCP one; :mod:`.tls` - its contexts, from ``sip.tls``'s files.
* :mod:`.registration` - keeping ``sip.register`` registered (digest,
  refresh, retries); :mod:`.registration_api` - its state over HTTP.

Signalling (parser, dialogs, transactions) is aiosipua's; RTP packets and
RFC 4733 payloads are aiortp's.  Only this package imports them.
"""
