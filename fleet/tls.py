"""TLS for a daemon that other machines reach: its certificate, the server's context, the client's pin.

What a caller (and an operator) may rely on:

- **Every non-loopback listen serves HTTPS** (the daemon and the console alike). Without a certificate
  of the user's own (``--tls-cert``/``--tls-key``), the first such start makes an EC P-256 key and a
  self-signed certificate in the private data dir (``data/tls/``, files 0600, directory 0700) and
  later starts reuse them, so the fingerprint stays what clients pinned. A self-made certificate that
  has expired is replaced (the new fingerprint is printed); a user's expired one is served with a
  loud warning (clients refuse it: the operator must renew it).
- **Clients pin** the certificate's SHA-256 fingerprint (of its DER bytes, 64 hex digits, written
  ``sha256:…``), carried in the daemon URL as ``https://HOST:PORT#sha256=…``. No certificate
  authority is consulted. A handshake that fails, another certificate, or one outside its validity
  period is :class:`~fleet.errors.Untrusted`, raised before a byte of the request (its token
  included) is written.

``cryptography`` makes the key and certificate (the standard library cannot) and reads a pinned
certificate's validity on the client; it is imported only where TLS is used, as is ``ssl``, so local
commands pay for neither.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import ipaddress
import logging
import re
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fleet import errors
from fleet.paths import Paths, ensure_private_dir, write_private

if TYPE_CHECKING:
    import ssl

log = logging.getLogger(__name__)

SELF_SIGNED_DAYS = 3650
"""How long a self-made certificate is valid: it is pinned, so a renewal means joining again."""

_HEX64 = re.compile(r"[0-9a-f]{64}")


def fingerprint_of(der: bytes) -> str:
    """The SHA-256 fingerprint of a DER certificate: 64 lowercase hex digits."""
    return hashlib.sha256(der).hexdigest()


def parse_fingerprint(text: str) -> str:
    """A fingerprint as given (``sha256:AB:CD…``, ``sha256=…``, bare hex) in canonical form, or UsageError."""
    raw = text.strip().lower()
    for prefix in ("sha256:", "sha256="):
        if raw.startswith(prefix):
            raw = raw[len(prefix) :]
    raw = raw.replace(":", "")
    if not _HEX64.fullmatch(raw):
        raise errors.UsageError(
            f"{text[:80]!r} is not a SHA-256 certificate fingerprint (64 hex digits, e.g. as the daemon"
            " printed it at start: sha256:…)"
        )
    return raw


def shown(fingerprint: str) -> str:
    """How a fingerprint is printed: ``sha256:`` and the hex digits."""
    return f"sha256:{fingerprint}"


# ---------------------------------------------------------------- the server's certificate


@dataclass(frozen=True)
class ServerCert:
    cert: Path
    key: Path
    fingerprint: str
    not_after: dt.datetime
    self_signed: bool


def make_self_signed(
    cert_path: Path,
    key_path: Path,
    names: Sequence[str],
    *,
    days: int = SELF_SIGNED_DAYS,
    not_before: dt.datetime | None = None,
) -> None:
    """Write a new EC P-256 key and a self-signed certificate for ``names`` (host names or IPs), 0600."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    start = not_before or (dt.datetime.now(dt.UTC) - dt.timedelta(days=1))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"fleet daemon on {socket.gethostname()}")])
    sans: list[x509.GeneralName] = []
    for name in dict.fromkeys(n.strip().strip("[]") for n in names if n.strip()):
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            sans.append(x509.DNSName(name))
        else:
            if not address.is_unspecified:
                sans.append(x509.IPAddress(address))
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(key, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    write_private(key_path, key_pem.decode("ascii"))
    write_private(cert_path, cert.public_bytes(serialization.Encoding.PEM).decode("ascii"))


def load_cert(cert_path: Path, key_path: Path, *, self_signed: bool = False) -> ServerCert:
    """The certificate at ``cert_path`` (PEM; the first of a chain) with its key, or UsageError."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        pem = cert_path.read_bytes()
        key_path.read_bytes()
    except OSError as exc:
        raise errors.UsageError(
            f"cannot read the TLS certificate or key ({exc.filename}: {exc.strerror}): check --tls-cert"
            " and --tls-key"
        ) from None
    try:
        cert = x509.load_pem_x509_certificate(pem)
    except ValueError:
        raise errors.UsageError(f"{cert_path} is not a PEM certificate: check --tls-cert") from None
    der = cert.public_bytes(serialization.Encoding.DER)
    return ServerCert(cert_path, key_path, fingerprint_of(der), cert.not_valid_after_utc, self_signed)


def ensure_self_signed(paths: Paths, names: Sequence[str]) -> ServerCert:
    """The daemon's own certificate in ``data/tls/``, made on first use (or when it has expired)."""
    ensure_private_dir(paths.tls_key.parent)
    if paths.tls_cert.exists() and paths.tls_key.exists():
        current = load_cert(paths.tls_cert, paths.tls_key, self_signed=True)
        if current.not_after > dt.datetime.now(dt.UTC):
            return current
        log.warning(
            "the daemon's self-signed certificate expired on %s: making a new one (joined machines must"
            " join again)",
            current.not_after.date(),
        )
    make_self_signed(paths.tls_cert, paths.tls_key, names)
    made = load_cert(paths.tls_cert, paths.tls_key, self_signed=True)
    log.info(
        "made a TLS key and self-signed certificate in %s (%s)",
        paths.tls_cert.parent,
        shown(made.fingerprint),
    )
    return made


def server_context(cert: ServerCert) -> ssl.SSLContext:
    """A server context (TLS 1.2 or later) serving ``cert``; UsageError if the key does not fit it."""
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    except (ssl.SSLError, OSError) as exc:
        raise errors.UsageError(
            f"the TLS certificate {cert.cert} and key {cert.key} cannot be used together ({exc}):"
            " check --tls-cert and --tls-key"
        ) from None
    if cert.not_after <= dt.datetime.now(dt.UTC):
        log.warning(
            "WARNING: the TLS certificate %s EXPIRED on %s: clients will refuse it; renew it",
            cert.cert,
            cert.not_after.date(),
        )
    return ctx


# ---------------------------------------------------------------- the client's pin

_client_ctx: ssl.SSLContext | None = None
_client_lock = threading.Lock()


def _client_context() -> ssl.SSLContext:
    global _client_ctx
    import ssl

    with _client_lock:
        if _client_ctx is None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.check_hostname = False  # the pin below is the check: no CA, no name matching
            ctx.verify_mode = ssl.CERT_NONE
            _client_ctx = ctx
        return _client_ctx


def wrap_pinned(sock: socket.socket, host: str, fingerprint: str, url: str) -> socket.socket:
    """``sock`` after a TLS handshake whose certificate is the pinned one (and is in its validity
    period); otherwise the socket is closed and :class:`~fleet.errors.Untrusted` raised."""
    import ssl

    try:
        ipaddress.ip_address(host)
        server_name: str | None = None
    except ValueError:
        server_name = host
    try:
        tls = _client_context().wrap_socket(sock, server_hostname=server_name)
    except ssl.SSLError as exc:
        sock.close()
        raise errors.Untrusted(
            f"the daemon at {url} did not complete a TLS handshake ({exc.reason or exc}): it may serve"
            " plain HTTP, or not be a fleet daemon; check the address"
        ) from None
    der = tls.getpeercert(binary_form=True) or b""
    got = fingerprint_of(der)
    if not hmac.compare_digest(got, fingerprint):
        tls.close()
        raise errors.Untrusted(
            f"the daemon at {url} presented certificate {shown(got)}, not the pinned {shown(fingerprint)}:"
            " nothing was sent. Either something else answers there, or the daemon has a new"
            " certificate: then join again with a fresh string (`fleet remote mint` on its machine)"
        )
    from cryptography import x509

    cert = x509.load_der_x509_certificate(der)
    now = dt.datetime.now(dt.UTC)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        tls.close()
        when = f"expired on {cert.not_valid_after_utc:%Y-%m-%d}"
        if now < cert.not_valid_before_utc:
            when = f"is not valid before {cert.not_valid_before_utc:%Y-%m-%d}"
        raise errors.Untrusted(
            f"the daemon at {url} presented its pinned certificate, but it {when}: nothing was sent;"
            " its operator must renew it (and mint new join strings)"
        )
    return tls
