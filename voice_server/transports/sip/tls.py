"""The TLS contexts of SIP over TLS (``sip.tls``): the listener's, which shows
our certificate to callers, and the one we dial with, which checks the
callee's.

Both are built from the configured files once, at the start: a file that is
missing, unreadable or not PEM, or a key that is not the certificate's,
raises :class:`TlsFileError` naming the setting, so the server fails its
start with that message instead of failing the first caller's handshake.
TLS 1.2 is the least either side accepts (RFC 8996 retired 1.0 and 1.1).
"""

from __future__ import annotations

import os
import ssl
from typing import Optional, Protocol


class TlsFiles(Protocol):
    """What the contexts read of ``sip.tls`` (:class:`.settings.TlsSettings`,
    which imports this module to check its files: hence a protocol here)."""
    certfile: str
    keyfile: str
    ca_file: Optional[str]
    verify_client: bool


class TlsFileError(ValueError):
    """A TLS file setting cannot be used; the message names the setting and the file."""


def listener_context(tls: TlsFiles) -> ssl.SSLContext:
    """The server side: our certificate; with ``verify_client`` the caller
    must show one that ``ca_file`` signed."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_ours(ctx, tls)
    if tls.verify_client:
        _load_cas(ctx, tls.ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def dialing_context(tls: TlsFiles) -> ssl.SSLContext:
    """The client side of calls we place: the callee's certificate must be
    valid for the host we dial and signed by ``ca_file`` (else the system's
    CAs).  Ours goes along for a callee that asks (mutual TLS)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)   # verifies and checks the host name
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if tls.ca_file is not None:
        _load_cas(ctx, tls.ca_file)
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    _load_ours(ctx, tls)
    return ctx


def _readable(setting: str, path: str) -> None:
    if not os.path.isfile(path):
        raise TlsFileError(f"tls.{setting}: no such file: {path}")
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise TlsFileError(f"tls.{setting}: cannot read {path}: {exc.strerror}") from None


def _load_cas(ctx: ssl.SSLContext, path: str) -> None:
    _readable("ca_file", path)
    try:
        ctx.load_verify_locations(cafile=path)
    except ssl.SSLError:
        raise TlsFileError(f"tls.ca_file: {path} holds no PEM certificate") from None


def _load_ours(ctx: ssl.SSLContext, tls: TlsFiles) -> None:
    _readable("certfile", tls.certfile)
    _readable("keyfile", tls.keyfile)
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)   # only to tell a bad certfile apart
    try:
        probe.load_verify_locations(cafile=tls.certfile)
    except ssl.SSLError:
        raise TlsFileError(f"tls.certfile: {tls.certfile} holds no PEM certificate") from None

    def no_password() -> bytes:   # else OpenSSL would prompt on the terminal
        raise TlsFileError(f"tls.keyfile: {tls.keyfile} is encrypted; give it unencrypted "
                           "(readable by the server's user only)")

    try:
        ctx.load_cert_chain(tls.certfile, tls.keyfile, password=no_password)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise TlsFileError(f"tls.keyfile: {tls.keyfile} is not the private key of "
                               f"tls.certfile {tls.certfile}") from None
        raise TlsFileError(f"tls.keyfile: {tls.keyfile} holds no PEM private key") from None


__all__ = ["listener_context", "dialing_context", "TlsFileError", "TlsFiles"]
