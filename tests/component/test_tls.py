"""TLS on the daemon and the console, with pinned clients, on real sockets.

A daemon that serves other machines is stood in for by one on a loopback address that the test
declares remote (``tls=True``: exactly what a non-loopback listen gets by default). A small TCP proxy
in the test sits between client and daemon and records every byte both ways, so "the token never
crosses the wire in clear" is checked on the bytes themselves.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import http.client
import socket
import ssl
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from httphelp import host_port
from relay import Relay
from test_daemon_options import serve

from fleet import errors, tls
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths


@pytest.fixture
def remote(fleet_env: Paths) -> Iterator[Daemon]:
    """A daemon on loopback declared remote: HTTPS with its self-made certificate."""
    d = serve(fleet_env, tls=True)
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def recorder(remote: Daemon) -> Iterator[Relay]:
    r = Relay(host_port(remote.url))
    try:
        yield r
    finally:
        r.close()


def pinned(d: Daemon, port: int | None = None, fingerprint: str | None = None, token: str = "") -> Client:
    host, real = host_port(d.url)
    return Client(f"https://{host}:{port or real}#sha256={fingerprint or d.fingerprint}", token, retries=1)


def test_a_declared_remote_daemon_serves_https_with_a_certificate_made_in_the_private_data_dir(
    remote: Daemon, fleet_env: Paths
) -> None:
    assert remote.url.startswith("https://") and remote.fingerprint
    for path in (fleet_env.tls_key, fleet_env.tls_cert):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(fleet_env.tls_key.parent.stat().st_mode) == 0o700
    der = ssl.PEM_cert_to_DER_cert(fleet_env.tls_cert.read_text())
    assert hashlib.sha256(der).hexdigest() == remote.fingerprint
    assert b"PRIVATE KEY" in fleet_env.tls_key.read_bytes()
    # the endpoint file carries the pin, so local clients find the daemon too
    assert f'"fingerprint":"{remote.fingerprint}"' in fleet_env.endpoint.read_text().replace(" ", "")


def test_the_right_fingerprint_works_and_nothing_crosses_in_clear(remote: Daemon, recorder: Relay) -> None:
    with pinned(remote, recorder.port, token=remote.operator_token) as c:
        assert c.whoami().principal == "operator"
        wave = c.create_wave("w1", ["alice"])
        c.post(wave.root_id, "the secret plans of the day")
        alice = c.mint_token("w1", "alice")
    with pinned(remote, recorder.port, token=alice.token) as a:
        assert [b.text for b in a.read(wave.root_id).blips][-1] == "the secret plans of the day"
    wire = recorder.wire
    assert len(wire) > 2000  # a real exchange went through the proxy
    for secret in (remote.operator_token, alice.token, "the secret plans", "Authorization", "Bearer"):
        assert secret.encode() not in wire, secret


def test_the_fingerprint_is_the_same_after_a_restart(fleet_env: Paths) -> None:
    first = serve(fleet_env, tls=True)
    fp = first.fingerprint
    first.stop()
    again = serve(fleet_env, tls=True)
    try:
        assert again.fingerprint == fp
        assert pinned(again, token=again.operator_token).whoami().principal == "operator"
    finally:
        again.stop()


def test_a_wrong_fingerprint_is_refused_before_the_token_is_sent(remote: Daemon, recorder: Relay) -> None:
    wrong = "ab" * 32
    with pytest.raises(errors.Untrusted) as e:
        pinned(remote, recorder.port, fingerprint=wrong, token=remote.operator_token).whoami()
    message = str(e.value)
    assert f"sha256:{remote.fingerprint}" in message and f"not the pinned sha256:{wrong}" in message
    assert "nothing was sent" in message and e.value.exit_code == 5
    assert recorder.up  # the handshake went out; the request did not
    assert remote.operator_token.encode() not in recorder.wire and b"whoami" not in recorder.wire


def test_another_certificate_served_for_the_pinned_address_is_refused(
    fleet_env: Paths, tmp_path: Path
) -> None:
    """The client pinned the daemon's own certificate; the address now serves another one."""
    first = serve(fleet_env, tls=True)
    pin = first.fingerprint
    first.stop()
    tls.make_self_signed(tmp_path / "other.crt", tmp_path / "other.key", ["127.0.0.1"])
    other = serve(fleet_env, tls_cert=tmp_path / "other.crt", tls_key=tmp_path / "other.key")
    try:
        assert other.url.startswith("https://") and other.fingerprint != pin
        with pytest.raises(errors.Untrusted, match="not the pinned"):
            pinned(other, fingerprint=pin, token=other.operator_token).whoami()
        # the user's own certificate is served as given, and works for a client that pins it
        assert pinned(other, token=other.operator_token).whoami().principal == "operator"
    finally:
        other.stop()


def test_an_expired_certificate_is_refused_with_a_clear_message(fleet_env: Paths, tmp_path: Path) -> None:
    long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=400)
    tls.make_self_signed(
        tmp_path / "old.crt", tmp_path / "old.key", ["127.0.0.1"], days=30, not_before=long_ago
    )
    d = serve(fleet_env, tls_cert=tmp_path / "old.crt", tls_key=tmp_path / "old.key")
    try:
        with pytest.raises(errors.Untrusted) as e:
            pinned(d, token=d.operator_token).whoami()
        assert "expired on" in str(e.value) and "renew" in str(e.value)
    finally:
        d.stop()


def test_a_plaintext_client_is_refused_and_runs_nothing(remote: Daemon) -> None:
    host, port = host_port(remote.url)
    with pytest.raises(errors.UsageError) as e:
        Client(f"http://{host}:{port}", remote.operator_token, retries=0).create_wave("plain")
    assert "HTTPS only" in str(e.value) and "sha256" in str(e.value)
    conn = http.client.HTTPConnection(host, port, timeout=5)
    conn.request("GET", "/v1/health")
    r = conn.getresponse()
    assert r.status == 400 and b"HTTPS only" in r.read()
    assert pinned(remote, token=remote.operator_token).list_waves() == []


def test_a_pinned_client_of_a_plain_http_daemon_is_refused(daemon: Daemon) -> None:
    host, port = host_port(daemon.url)
    with pytest.raises(errors.Untrusted, match="did not complete a TLS handshake"):
        Client(f"https://{host}:{port}#sha256={'cd' * 32}", daemon.operator_token, retries=0).whoami()


def test_an_https_url_without_a_pin_is_refused(remote: Daemon) -> None:
    with pytest.raises(errors.UsageError, match="names no certificate fingerprint"):
        Client(remote.url, remote.operator_token)


def test_every_non_loopback_listen_serves_https_unless_the_loud_flag_says_otherwise(
    fleet_env: Paths, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO")
    d = Daemon(fleet_env, "0.0.0.0:0", allow_remote=True, ui="0.0.0.0:0", allow_remote_ui=True)
    d.start()
    try:
        assert d.url.startswith("https://0.0.0.0:") and d.fingerprint
        assert d.console is not None and d.console.url.startswith("https://")
        assert pinned(d, token=d.operator_token).whoami().principal == "operator"
        # the console serves the same certificate
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", host_port(d.console.url)[1]))) as s:
            assert hashlib.sha256(s.getpeercert(binary_form=True) or b"").hexdigest() == d.fingerprint
        assert f"sha256:{d.fingerprint}" in caplog.text
    finally:
        d.stop()
    caplog.clear()
    plain = Daemon(fleet_env, "0.0.0.0:0", allow_remote=True, insecure_plain_http=True)
    plain.start()
    try:
        assert plain.url.startswith("http://") and plain.fingerprint is None
        [loud] = [r.getMessage() for r in caplog.records if "PLAIN HTTP" in r.getMessage()]
        assert loud.startswith("WARNING") and "IN CLEAR" in loud and "--insecure-plain-http" in loud
    finally:
        plain.stop()


def test_the_channel_and_hook_find_a_local_https_daemon_pinned(remote: Daemon) -> None:
    from fleet.delivery.config import resolve

    config = resolve(
        participant="operator", wave="w", daemon=None, token_file=None, state_dir=None, need_token_file=True
    )
    assert config.daemon == f"{remote.url}#sha256={remote.fingerprint}"
    assert Client(config.daemon, remote.operator_token).whoami().principal == "operator"


def test_a_list_pins_each_daemon_with_its_own_fingerprint_and_a_wrong_one_is_refused_not_skipped(
    remote: Daemon, recorder: Relay
) -> None:
    host, real = host_port(remote.url)
    with socket.socket() as s:
        s.bind((host, 0))
        dead = s.getsockname()[1]
    right = f"https://{host}:{recorder.port}#sha256={remote.fingerprint}"
    # the first listed daemon is gone: the second, pinned to its own certificate, answers over TLS
    with Client(f"https://{host}:{dead}#sha256={'cd' * 32},{right}", remote.operator_token, retries=0) as c:
        assert c.whoami().principal == "operator"
        assert c.url == f"https://{host}:{recorder.port}" and c.fingerprint == remote.fingerprint
    assert remote.operator_token.encode() not in recorder.wire
    # the first answers with another certificate than its pin: Untrusted (exit 5), never a failover
    # to the next (a certificate that changed is not a daemon that stopped answering)
    wrong = f"https://{host}:{real}#sha256={'ab' * 32},{right}"
    seen = len(recorder.wire)
    with pytest.raises(errors.Untrusted, match="nothing was sent"):
        Client(wrong, remote.operator_token, retries=0).whoami()
    assert len(recorder.wire) == seen  # the second listed daemon was not tried


def test_a_handshake_still_open_when_the_daemon_stops_is_ended_with_it(fleet_env: Paths) -> None:
    """A client that began a TLS handshake and went quiet: the daemon's stop ends the handshake on
    its loop (cancelled, its socket closed), not left to be collected after the loop closed."""
    import asyncio
    import gc
    import sys

    from conftest import retry_until

    d = serve(fleet_env, tls=True)
    loop = d._httpd.loop  # type: ignore[union-attr]
    seen: list[object] = []
    hook, sys.unraisablehook = sys.unraisablehook, seen.append
    try:
        with socket.create_connection(host_port(d.url)) as s:
            s.sendall(b"\x16\x03\x01")  # a ClientHello's first bytes, then nothing
            retry_until(
                lambda: any("connect_accepted_socket" in repr(t.get_coro()) for t in asyncio.all_tasks(loop)),
                what="the handshake under way",
            )
            d.stop()
            gc.collect()
    finally:
        sys.unraisablehook = hook
    assert seen == [], [getattr(u, "exc_value", u) for u in seen]
