"""``extra.server.sip``: the SIP endpoint's settings (off by default).

::

    extra:
      server:
        sip:
          enabled: true
          host: 0.0.0.0              # the address the listeners bind
          port: 5060                 # UDP and TCP share it
          transports: [udp, tcp]
          tls: null                  # SIP over TLS on a port of its own (off while null):
            # port: 5061
            # certfile: /etc/voice-agent/sip.crt   # PEM: our certificate, then its chain
            # keyfile: /etc/voice-agent/sip.key    # PEM: its private key (unencrypted)
            # ca_file: null          # PEM CAs we trust for peers (null: the system's)
            # verify_client: false   # callers must show a certificate ca_file signed
            # handshake_timeout_s: 10
          public_host: null          # the address written in Contact and SDP (null: host,
                                     # or 127.0.0.1 when host is 0.0.0.0)
          allow_from: [127.0.0.0/8]  # source networks that may send INVITEs (403 otherwise)
          users: {}                  # digest auth for incoming INVITEs: {user: password}
          realm: voice-agent
          rtp_ports: [20000, 20999]  # the RTP ports, one even port a call
          codecs: [PCMU, PCMA, G722] # the order we prefer (the caller's order wins)
          rtp_timeout_s: 30          # no RTP this long on an active call: BYE
          media_process: true        # RTP and its 20 ms clock in a process of their own
          answer_timeout_s: 30       # the incoming-call hook must decide by then (480)
          outbound_proxy: null       # calls we place go here (a trunk); null: the
                                     # registrar if registered, else the URI's host
          register:                  # null: no registration (a trunk sends INVITEs here)
            registrar: pbx.example:5060  # where the REGISTERs go (UDP)
            aor: sip:agent@pbx.example   # the address callers dial
            user: agent              # digest credentials, when the registrar asks
            password: secret
            expires: 300             # asked for; refreshed before what is granted runs out
            retry_s: 30              # a refused or unanswered registration is tried again

Validated once here; a bad value fails the server's start naming the field.
"""

from __future__ import annotations

import ipaddress
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

CodecName = Literal["PCMU", "PCMA", "G722"]


def host_port(value: str, name: str) -> tuple[str, int]:
    """``host`` or ``host:port`` (5060 by default); ValueError naming the setting."""
    host, _, port = value.rpartition(":") if ":" in value else (value, "", "5060")
    if not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise ValueError(f"{name} must be host or host:port, got {value!r}")
    return host, int(port)


class RegisterSettings(BaseModel):
    """Registration with a registrar (a PBX, a trunk's proxy): the calls to
    ``aor`` reach us through it.  Its address must be in ``allow_from``."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    registrar: str
    aor: str
    user: Optional[str] = None
    password: Optional[str] = None
    expires: int = Field(300, ge=30, le=86400)
    retry_s: float = Field(30.0, ge=1.0, le=3600.0)  # after a refusal or no answer

    @field_validator("aor")
    @classmethod
    def _aor(cls, v: str) -> str:
        if not v.startswith(("sip:", "sips:")) or "@" not in v:
            raise ValueError("aor must be a SIP URI with a user, like sip:agent@pbx.example")
        return v

    @model_validator(mode="after")
    def _credentials(self) -> "RegisterSettings":
        if (self.user is None) != (self.password is None):
            raise ValueError("register.user and register.password go together")
        self.registrar_addr   # a bad port fails here, naming it
        return self

    @property
    def registrar_addr(self) -> tuple[str, int]:
        return host_port(self.registrar, "register.registrar")


class TlsSettings(BaseModel):
    """SIP over TLS (RFC 3261 section 26.2; ``SIP/2.0/TLS`` in Via, ``transport=tls``
    in Contact) on its own port.  The files are read at the server's start
    (:mod:`.tls`): a missing or unreadable file, or a key that is not the
    certificate's, fails the start naming it.  TLS 1.2 at least."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    port: int = Field(5061, ge=1, le=65535)
    certfile: str              # PEM: our certificate first, then its intermediates
    keyfile: str               # PEM: the certificate's private key, unencrypted
    # PEM CAs we trust: callers' certificates (verify_client) and the callees'
    # we dial over TLS; null: the system's store (a trunk's public certificate)
    ca_file: Optional[str] = None
    verify_client: bool = False  # mutual TLS: a caller without a good certificate is dropped
    handshake_timeout_s: float = Field(10.0, gt=0, le=120)

    @model_validator(mode="after")
    def _files(self) -> "TlsSettings":
        if self.verify_client and self.ca_file is None:
            raise ValueError("tls.verify_client needs tls.ca_file (the CAs callers' "
                             "certificates are checked against)")
        from .tls import dialing_context, listener_context  # a bad file fails here
        listener_context(self)
        dialing_context(self)
        return self


class SipSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = Field(5060, ge=1, le=65535)
    transports: tuple[Literal["udp", "tcp"], ...] = ("udp", "tcp")  # (): TLS only
    tls: Optional[TlsSettings] = None  # SIP over TLS on tls.port (off while None)
    public_host: Optional[str] = None
    # trunk-only mode: the networks a trunk or PBX sends from; default loopback only,
    # so turning SIP on never opens the agent to the internet by itself
    allow_from: tuple[str, ...] = ("127.0.0.0/8", "::1/128")
    users: dict[str, str] = Field(default_factory=dict)
    realm: str = "voice-agent"
    rtp_ports: tuple[int, int] = (20000, 20999)
    codecs: tuple[CodecName, ...] = ("PCMU", "PCMA", "G722")
    rtp_timeout_s: float = Field(30.0, gt=0)
    # the calls' RTP and 20 ms send clocks in a process of their own, so the rhythm
    # holds while the server's loop and the stages are busy; false: in the server
    media_process: bool = True
    answer_timeout_s: float = Field(30.0, gt=0)
    user_agent: str = "voice-agent"
    # where calls we place go (a trunk: host or host:port); null: the registrar
    # when registered, else the dialled sip: URI's own host
    outbound_proxy: Optional[str] = None
    # YAML ``register:`` (a field of that name would shadow pydantic's own)
    registration: Optional[RegisterSettings] = Field(None, alias="register")

    @field_validator("allow_from")
    @classmethod
    def _networks(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for net in v:
            ipaddress.ip_network(net, strict=False)  # ValueError names the bad one
        return v

    @model_validator(mode="after")
    def _ranges(self) -> "SipSettings":
        self.outbound_proxy_addr  # a bad one fails here, naming it
        lo, hi = self.rtp_ports
        if not (1024 <= lo < hi <= 65535):
            raise ValueError("rtp_ports must be [low, high] with 1024 <= low < high <= 65535")
        if not (self.transports or self.tls) or not self.codecs:
            raise ValueError("transports (or tls) and codecs must each name at least one")
        if self.tls is not None and self.tls.port == self.port and "tcp" in self.transports:
            raise ValueError(f"tls.port must differ from port ({self.port}): TCP listens there")
        return self

    @property
    def outbound_proxy_addr(self) -> Optional[tuple[str, int]]:
        if self.outbound_proxy:
            return host_port(self.outbound_proxy, "outbound_proxy")
        return self.registration.registrar_addr if self.registration is not None else None

    @property
    def advertised_host(self) -> str:
        """The address peers reach us at (Contact, SDP ``c=``)."""
        if self.public_host:
            return self.public_host
        return "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host


__all__ = ["SipSettings", "RegisterSettings", "TlsSettings", "CodecName"]
