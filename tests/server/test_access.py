"""The access rules every transport shares (voice_server.transports.access):
loopback detection, the Origin policy, key comparison, the admission counter
and the order in which a session is admitted (a client secret is spent only
once a place is found)."""

from __future__ import annotations

import pytest

from voice_server.session_registry import registry_for
from voice_server.settings import ServerSettings
from voice_server.transports.access import (Refusal, admit, admit_session, host_of,
                                            is_loopback, key_matches, origin_allowed)
from voice_server.transports.client_secrets import ClientSecretStore


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST", "127.0.0.1", "127.0.0.2", "::1",
                                  "[::1]", "::1%lo"])
def test_loopback_hosts(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["", None, "0.0.0.0", "10.0.0.1", "example.com",
                                  "localhost.example.com", "::", "127.0.0.1.example.com"])
def test_not_loopback(host):
    assert not is_loopback(host)


def test_host_of_a_host_header():
    assert host_of("127.0.0.1:8000") == "127.0.0.1"
    assert host_of("[::1]:8000") == "::1"
    assert host_of("Example.COM") == "example.com"
    assert host_of(None) == ""


def test_origin_policy():
    # not a browser: judged by the key alone
    assert origin_allowed(None, "h:1", [])
    # no list: this host or a loopback page only
    assert origin_allowed("http://h:1", "h:1", [])
    assert origin_allowed("http://localhost:5173", "h:1", [])
    assert not origin_allowed("https://evil.example", "h:1", [])
    assert not origin_allowed("null", "h:1", [])
    assert not origin_allowed("https://evil.example", None, [])
    # a list: exactly its entries (trailing slashes ignored), loopback included
    good = ["https://good.example/"]
    assert origin_allowed("https://good.example", "h:1", good)
    assert not origin_allowed("http://localhost:5173", "h:1", good)
    assert not origin_allowed("http://h:1", "h:1", good)
    assert origin_allowed("https://any.example", "h:1", ["*"])


def test_key_matches():
    assert key_matches("k2", ["k1", "k2"])
    assert not key_matches("k", ["k1", "k2"])
    assert not key_matches(None, ["k1"]) and not key_matches("", [""])
    assert not key_matches("k1", [])
    assert key_matches("clé", ["clé"])


class _Pipeline:
    """A registry key: admission counts per pipeline object."""


def test_admission_counts_pending_and_releases_once():
    p = _Pipeline()
    a = admit(p, 2)
    b = admit(p, 2)
    assert a is not None and b is not None
    assert admit(p, 2) is None
    a.release()
    a.release()  # twice: harmless
    assert registry_for(p).pending == 1
    c = admit(p, 2)
    assert c is not None and admit(p, 2) is None
    b.release()
    c.release()
    assert registry_for(p).pending == 0


def test_a_refused_session_does_not_spend_the_client_secret():
    p = _Pipeline()
    settings = ServerSettings(api_keys=["k"], max_sessions=1)
    store = ClientSecretStore()
    secret = store.mint({}).value
    held = admit(p, 1)
    with pytest.raises(Refusal) as ei:
        admit_session(p, settings, origin=None, host="h", key=secret, secrets=store)
    assert ei.value.status == 503 and ei.value.code == "server_busy"
    held.release()
    ok = admit_session(p, settings, origin=None, host="h", key=secret, secrets=store)
    assert ok.secret is not None and ok.secret.value == secret
    ok.ticket.release()
    with pytest.raises(Refusal) as ei:  # single use
        admit_session(p, settings, origin=None, host="h", key=secret, secrets=store)
    assert ei.value.status == 401 and ei.value.code == "invalid_client_secret"
    assert registry_for(p).pending == 0  # the failed attempt gave its place back


def test_admission_order_origin_then_key_then_place():
    p = _Pipeline()
    settings = ServerSettings(api_keys=["k"], max_sessions=1)
    held = admit(p, 1)
    try:
        for origin, key, status in [("https://evil.example", "k", 403), (None, "bad", 401),
                                    (None, None, 401), (None, "k", 503)]:
            with pytest.raises(Refusal) as ei:
                admit_session(p, settings, origin=origin, host="h", key=key, secrets=None)
            assert ei.value.status == status, (origin, key)
    finally:
        held.release()
    ok = admit_session(p, settings, origin="http://h", host="h", key="k", secrets=None)
    ok.ticket.release()
