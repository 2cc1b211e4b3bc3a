"""The typed client of the store daemon, and the rule that finds (or starts) the daemon.

:class:`Client` speaks the HTTP API of ``docs/http-api.md`` over a plain socket. Every
payload in and out is a model from :mod:`fleet.models`; every error the daemon reports comes back as
the same :mod:`fleet.errors` class the daemon raised. What callers may rely on:

- **One keep-alive connection per thread**, ``TCP_NODELAY`` on, each request written to the socket
  in a single ``send`` (headers and body together: writing them separately stalls on delayed ACKs).
  A connection the server closed while idle is noticed before reuse and replaced transparently.
- **Every request is safe to resend.** Each write carries a request key (``Idempotency-Key``, a
  UUIDv7 made once per call and kept across its resends), so the daemon applies it once however
  often it arrives and answers a repeat with the first answer (docs/http-api.md). A connection that
  cannot be established (refused, reset, timed out), a request written but not answered, or a
  ``503`` (the daemon refused it while shutting down) is resent with exponential backoff (0.05 s,
  doubling to 1 s, ``retries`` times: about 1.5 s in all by default, or for ``patience`` seconds),
  then :class:`~fleet.errors.DaemonUnreachable` is raised naming the URL and, for a write, whether
  it may have been applied (``maybe_applied``: False when it never reached the daemon whole).
- **Long-polls** (``read``/``feed`` with ``wait``) get a socket timeout of ``timeout + wait``.

:func:`connect` is the discovery rule of docs/design.md §2: ``FLEET_DAEMON`` (+ ``FLEET_TOKEN`` or
``FLEET_TOKEN_FILE``) wins; otherwise the local daemon named by the endpoint file, if its pid is alive
and it answers; otherwise one is started in the background (under a file lock, so concurrent clients
start one daemon between them) and a one-line notice naming its log goes to stderr.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

import fleet
from fleet import errors
from fleet.allocator import daemon_env
from fleet.ids import request_key
from fleet.models import (
    Blip,
    BlipList,
    BlipPage,
    CloseSeat,
    Context,
    Endpoint,
    ErrorEnvelope,
    EventPage,
    Feed,
    FeedRequest,
    Health,
    MemoryAnswer,
    MemoryOp,
    MemoryWrite,
    MintedToken,
    MintRequest,
    NewBlip,
    NewFork,
    NewMachine,
    NewPin,
    NewSeat,
    NewSession,
    NewSummary,
    NewSurface,
    NewSystemBlip,
    NewWave,
    Ok,
    PresenceList,
    PresenceReport,
    PresenceRow,
    Remote,
    Revoked,
    RevokeRequest,
    RosterChange,
    Seat,
    SeatAnswer,
    SessionList,
    SessionRecord,
    StopProgress,
    Summary,
    SummaryCheck,
    SummaryInput,
    SummaryList,
    SummaryVerdict,
    SupervisorAnswer,
    SupervisorClaim,
    SupervisorLease,
    SupervisorRelease,
    TokenInfo,
    TokenList,
    Wave,
    WaveActivity,
    Wavelet,
    WaveList,
    Whoami,
)
from fleet.paths import Paths, ensure_private_dir, get_paths
from fleet.procs import looks_like_fleet, pid_alive
from fleet.records.budgets import Budget, BudgetList, BudgetReached, BudgetReport, SetBudget, SpendReport
from fleet.records.permissions import (
    PermissionAnswer,
    PermissionAsk,
    PermissionList,
    PermissionRequest,
    PermissionSettled,
)
from fleet.wire import RecordError, dumps, loads, record

log = logging.getLogger(__name__)

M = TypeVar("M")

USER_AGENT = f"fleet/{fleet.__version__}"
AUTOSTART_DEADLINE = 10.0
"""Seconds an autostarted daemon has to write its endpoint file and answer ``/v1/health``."""


# ---------------------------------------------------------------- status


@record
class DaemonStatus:
    """What ``fleet daemon status`` reports (and prints with ``--json``)."""

    running: bool
    url: str | None = None
    pid: int | None = None
    version: str | None = None
    started_at: float | None = None
    remote: bool = False
    """True when the daemon is the one ``FLEET_DAEMON`` names rather than the local one."""
    endpoint_file: str | None = None
    log: str | None = None


# ---------------------------------------------------------------- the connection


class _NoAnswer(Exception):
    """The request was written but the connection ended before a status line arrived."""


class _BadAnswer(Exception):
    """The server's answer is not well-formed HTTP/1.1 (or the connection ended in its middle)."""


MAX_LINE = 65536
MAX_HEADERS = 100


class _Connection:
    """One HTTP/1.1 keep-alive connection to the daemon, written on the socket directly.

    Each request goes out in one ``sendall`` (head and body together: apart, they stall on delayed
    ACKs); answers are read by ``Content-Length`` (the daemon always sends one) or, with
    ``Connection: close``, to the end. Not ``http.client``: importing it also imports ``ssl`` and
    ``email``, which costs every ``fleet`` command and channel ~20 ms and ~6 MiB for nothing.
    """

    def __init__(
        self,
        host: str,
        port: int | None,
        connect_timeout: float,
        fingerprint: str | None = None,
        url: str = "",
    ) -> None:
        self.host, self.port = host, port or (443 if fingerprint else 80)
        self._connect_timeout = connect_timeout
        self.fingerprint = fingerprint
        """TLS, pinned to this certificate fingerprint (:func:`fleet.tls.wrap_pinned`), or plain HTTP."""
        self._url = url
        self.sock: socket.socket | None = None
        self._rfile: Any = None
        self.served = 0
        """Requests answered on the current socket: >0 means it is a reused keep-alive socket."""

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self._connect_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.fingerprint is not None:
            from fleet.tls import wrap_pinned  # ssl and cryptography only for a daemon served over TLS

            sock = wrap_pinned(sock, self.host, self.fingerprint, self._url)
        self.sock, self._rfile, self.served = sock, sock.makefile("rb"), 0

    def close(self) -> None:
        sock, rfile, self.sock, self._rfile = self.sock, self._rfile, None, None
        if rfile is not None:
            rfile.close()
        if sock is not None:
            sock.close()

    def send_request(self, method: str, target: str, headers: dict[str, str], body: bytes | None) -> None:
        host = f"[{self.host}]" if ":" in self.host else self.host
        head = f"{method} {target} HTTP/1.1\r\nHost: {host}:{self.port}\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in headers.items()) + "\r\n"
        assert self.sock is not None
        self.sock.sendall(head.encode("latin-1") + (body or b""))

    def getresponse(self) -> tuple[int, bytes]:
        """(status, body) of the answer to the request just sent. Raises :class:`_NoAnswer` when the
        connection ends before a status line, :class:`_BadAnswer` on malformed HTTP."""
        rfile = self._rfile
        assert rfile is not None
        line = rfile.readline(MAX_LINE + 1)
        if not line:
            raise _NoAnswer("connection closed by the server")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise _BadAnswer(f"not an HTTP status line: {line[:80]!r}")
        status = int(parts[1])
        length: int | None = None
        close = parts[0] == b"HTTP/1.0"
        for _ in range(MAX_HEADERS + 1):
            header = rfile.readline(MAX_LINE + 1)
            if header in (b"\r\n", b"\n"):
                break
            if not header:
                raise _BadAnswer("the connection ended inside the answer's headers")
            name, _, value = header.partition(b":")
            key = name.strip().lower()
            if key == b"content-length":
                if not value.strip().isdigit():
                    raise _BadAnswer(f"bad Content-Length {value.strip()!r}")
                length = int(value)
            elif key == b"connection":
                close = value.strip().lower() == b"close"
        else:
            raise _BadAnswer("too many header lines")
        if length is None:
            body = rfile.read()
            close = True
        else:
            body = rfile.read(length)
            if len(body) < length:
                raise _BadAnswer(f"the connection ended after {len(body)} of {length} body bytes")
        if close:
            self.close()
        return status, body

    def is_stale(self) -> bool:
        """True if the idle socket is readable: the server closed it (EOF) or sent something unasked."""
        if self.sock is None:
            return False
        pending = getattr(self.sock, "pending", None)
        if pending is not None and pending():
            return True  # TLS bytes already decrypted: something unasked
        poller = select.poll()
        poller.register(self.sock, select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))


def parse_pin(fragment: str) -> str | None:
    """The fingerprint a daemon URL's fragment pins (``sha256=…``), or None for no fragment."""
    if not fragment:
        return None
    from fleet.tls import parse_fingerprint

    return parse_fingerprint(fragment)


def endpoint_url(endpoint: Endpoint) -> str:
    """The endpoint's URL with its certificate pin when it serves HTTPS."""
    return endpoint.url + (f"#sha256={endpoint.fingerprint}" if endpoint.fingerprint else "")


def _unreachable(url: str, reason: str) -> errors.DaemonUnreachable:
    return errors.DaemonUnreachable(
        f"cannot reach the fleet daemon at {url} ({reason}); "
        "start it with `fleet daemon start`, or check FLEET_DAEMON"
    )


def _q(segment: str) -> str:
    return quote(segment, safe="")


class Client:
    """A typed client of one daemon. Thread-safe: each thread gets its own keep-alive connection.

    ``timeout`` bounds connecting and waiting for an answer (long-polls add their ``wait``);
    ``retries`` bounds reconnection attempts, spaced ``backoff`` seconds apart and doubling (to 1 s at
    most); ``patience`` keeps them going for at least that many seconds in all (a daemon restarting).
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30,
        retries: int = 5,
        backoff: float = 0.05,
        connect_timeout: float = 3.0,
        fingerprint: str | None = None,
        patience: float = 0.0,
    ) -> None:
        parts = urlsplit(base_url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise errors.UsageError(
                f"daemon URL {base_url!r} is not an http://HOST:PORT or https://HOST:PORT#sha256=FP"
                " address (check FLEET_DAEMON)"
            )
        pin = fingerprint or parse_pin(parts.fragment)
        if parts.scheme == "https" and pin is None:
            raise errors.UsageError(
                f"daemon URL {base_url!r} is https but names no certificate fingerprint to pin: give"
                " https://HOST:PORT#sha256=FP (the daemon prints FP at start), or use `fleet remote join`"
            )
        if parts.scheme == "http" and pin is not None:
            raise errors.UsageError(f"daemon URL {base_url!r} pins a certificate but is not https://")
        self.fingerprint = pin
        """The pinned certificate fingerprint (https), or None (plain HTTP: loopback)."""
        self.url = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
        """The daemon's address, without the pin."""
        self.base_url = self.url + (f"#sha256={pin}" if pin else "")
        """The address with its pin: what a spawned agent's channel and hook are handed."""
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._token = token.strip()
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.patience = patience
        """Seconds to keep resending past ``retries`` while the daemon is away (a restart)."""
        self.connect_timeout = min(connect_timeout, timeout)
        self._local = threading.local()
        self._all: list[_Connection] = []
        self._all_lock = threading.Lock()

    @property
    def token(self) -> str:
        """The bearer token this client sends (so a spawner can hand it on through a 0600 file)."""
        return self._token

    def __repr__(self) -> str:
        return f"Client({self.base_url!r})"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every thread's connection. The client stays usable: the next call reconnects."""
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local.__dict__.clear()

    # ------------------------------------------------------------ transport

    def _conn(self) -> _Connection:
        conn: _Connection | None = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            conn = _Connection(self._host, self._port, self.connect_timeout, self.fingerprint, self.url)
            self._local.conn, self._local.pid = conn, os.getpid()
            with self._all_lock:
                self._all.append(conn)
        return conn

    def _exchange(
        self,
        method: str,
        path: str,
        body: bytes | None,
        *,
        read_timeout: float,
        key: str | None,
        retries: int | None = None,
    ) -> tuple[int, bytes]:
        """Send one request and return (status, body), reconnecting and resending where safe."""
        try:
            return self._exchange_retrying(method, path, body, read_timeout, key, retries)
        except BaseException:
            # Whatever interrupted the exchange (an error, Ctrl-C) left the connection mid-request:
            # drop it so the next call starts clean.
            self._conn().close()
            raise

    def _exchange_retrying(
        self,
        method: str,
        path: str,
        body: bytes | None,
        read_timeout: float,
        key: str | None,
        retries: int | None,
    ) -> tuple[int, bytes]:
        retries = self.retries if retries is None else retries
        headers = {
            "Authorization": f"Bearer {self._token}",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
            "Content-Length": str(len(body or b"")),
        }
        if body is not None:
            headers["Content-Type"] = "application/json"
        if key is not None:
            headers["Idempotency-Key"] = key
        # A read, or a write with its request key, is the same sent once or many times.
        resendable = method == "GET" or key is not None
        target = self._prefix + path
        delay, attempt, stale_retry_used = self.backoff, 0, False
        patience_until = time.monotonic() + self.patience
        written = False
        """Whether the request ever reached the daemon whole: if not, it certainly was not applied."""

        def backoff_or_raise(reason: str) -> None:
            nonlocal delay, attempt
            if attempt >= retries and time.monotonic() >= patience_until:
                raise self._gave_up(method, reason, written)
            attempt += 1
            log.debug("daemon %s: %s; retry %d in %.2fs", self.base_url, reason, attempt, delay)
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

        while True:
            conn = self._conn()
            if conn.sock is not None and conn.is_stale():
                conn.close()
            reused = conn.sock is not None and conn.served > 0
            try:
                if conn.sock is None:
                    conn.connect()
            except OSError as exc:
                conn.close()
                backoff_or_raise(_reason(exc))
                continue
            assert conn.sock is not None
            conn.sock.settimeout(read_timeout)
            try:
                conn.send_request(method, target, headers, body)
            except OSError as exc:
                # An incompletely written request cannot have been acted on: safe to send again.
                conn.close()
                if reused and not stale_retry_used:
                    stale_retry_used = True
                    continue
                backoff_or_raise(_reason(exc))
                continue
            written = True
            try:
                try:
                    status, data = conn.getresponse()
                except ConnectionResetError as exc:
                    raise _NoAnswer(_reason(exc)) from exc
            except TimeoutError:
                conn.close()
                raise self._gave_up(method, f"no answer within {read_timeout:g}s", written) from None
            except _NoAnswer as exc:
                conn.close()
                if reused and not stale_retry_used and resendable:
                    stale_retry_used = True  # the server dropped an idle keep-alive socket
                    continue
                if resendable:
                    backoff_or_raise(str(exc))
                    continue
                raise self._gave_up(method, f"{exc} before answering", written) from None
            except (OSError, _BadAnswer) as exc:
                conn.close()
                if resendable:
                    backoff_or_raise(_reason(exc))
                    continue
                raise self._gave_up(method, f"{_reason(exc)} while reading the answer", written) from None
            conn.served += 1
            if status == 503:
                # The daemon refused the request before acting on it (it is shutting down): any
                # request, even a POST, is safe to send again, to the daemon that replaces it.
                conn.close()
                backoff_or_raise(self._error(503, data).message)
                continue
            return status, data

    def _gave_up(self, method: str, reason: str, written: bool) -> errors.DaemonUnreachable:
        """The error of a request given up on; for a write, whether it may have been applied."""
        exc = _unreachable(self.url, reason)
        if method == "GET":
            return exc
        said = (
            "may or may not have been applied" if written else "was not applied: it never reached the daemon"
        )
        return errors.DaemonUnreachable(f"{exc.message}; the {method} {said}", maybe_applied=written)

    def _call(
        self,
        method: str,
        path: str,
        model: type[M],
        body: object | None = None,
        *,
        wait: float = 0.0,
        retries: int | None = None,
        key: str | None = None,
    ) -> M:
        """One API call. A write (any method but GET) carries a request key, made here once per call
        (or ``key``, the caller's, to make two calls one operation) and sent with every resend, so
        the daemon applies it once however many times it arrives (docs/http-api.md)."""
        payload = None
        if body is not None:
            payload = dumps(body, exclude_none=True).encode()
        if method != "GET" and key is None:
            key = request_key()
        status, data = self._exchange(
            method,
            path,
            payload,
            read_timeout=self.timeout + max(wait, 0.0),
            key=key if method != "GET" else None,
            retries=retries,
        )
        if status >= 400:
            raise self._error(status, data)
        try:
            return loads(model, data)
        except RecordError as exc:
            raise errors.FleetError(
                f"the daemon at {self.url} answered {method} {path} with an unexpected body "
                f"({errors.describe(exc)}); is it a different fleet version?"
            ) from None

    def _error(self, status: int, data: bytes) -> errors.FleetError:
        try:
            body = loads(ErrorEnvelope, data).error
        except RecordError:
            snippet = data[:200].decode("utf-8", "replace").strip()
            return errors.FleetError(f"the daemon at {self.url} answered HTTP {status}: {snippet}")
        return errors.from_kind(body.kind, body.message)

    # ------------------------------------------------------------ the API (docs/http-api.md)

    def health(self) -> Health:
        return self._call("GET", "/v1/health", Health)

    def whoami(self) -> Whoami:
        return self._call("GET", "/v1/whoami", Whoami)

    def create_wave(self, name: str, with_: Sequence[str] = ()) -> Wave:
        """Create a wave and its root wavelet ``main`` with ``with_`` on its roster (operator only)."""
        return self._call("POST", "/v1/waves", Wave, NewWave(name=name, with_=list(with_)))

    def list_waves(self) -> list[Wave]:
        """Every wave the caller can see, without their wavelets."""
        return self._call("GET", "/v1/waves", WaveList).waves

    def get_wave(self, wave: str) -> Wave:
        """A wave (by name or id) with the wavelets the caller can see, rosters included."""
        return self._call("GET", f"/v1/waves/{_q(wave)}", Wave)

    def resolve(self, ref: str, wave: str | None = None) -> Wavelet:
        """The wavelet ``ref`` names: ``WAVE/WAVELET``, a wavelet name inside ``wave``, or an id/prefix."""
        query = {"ref": ref} | ({"wave": wave} if wave else {})
        return self._call("GET", f"/v1/resolve?{urlencode(query)}", Wavelet)

    def get_wavelet(self, wavelet_id: str) -> Wavelet:
        return self._call("GET", f"/v1/wavelets/{_q(wavelet_id)}", Wavelet)

    def fork(
        self,
        wavelet_id: str,
        name: str,
        with_: Sequence[str] = (),
        private: bool = False,
        as_: str | None = None,
    ) -> Wavelet:
        """Fork a child wavelet whose roster is ``with_``; the parent and child get provenance blips."""
        req = NewFork(name=name, with_=list(with_), private=private, as_=as_)
        return self._call("POST", f"/v1/wavelets/{_q(wavelet_id)}/fork", Wavelet, req)

    def invite(self, wavelet_id: str, name: str, as_: str | None = None) -> Wavelet:
        req = RosterChange(name=name, as_=as_)
        return self._call("POST", f"/v1/wavelets/{_q(wavelet_id)}/invite", Wavelet, req)

    def leave(self, wavelet_id: str, name: str, as_: str | None = None) -> Wavelet:
        req = RosterChange(name=name, as_=as_)
        return self._call("POST", f"/v1/wavelets/{_q(wavelet_id)}/leave", Wavelet, req)

    def post(self, wavelet_id: str, text: str, as_: str | None = None, *, key: str | None = None) -> Blip:
        """A ``message`` blip. ``key``: the request key, when the caller makes two calls one post."""
        req = NewBlip(text=text, as_=as_)
        return self._call("POST", f"/v1/wavelets/{_q(wavelet_id)}/blips", Blip, req, key=key)

    def post_system(self, wavelet_id: str, text: str) -> Blip:
        """Post a ``system`` blip (author ``system``) so the transcript records an operator tool's act.

        Operator only.
        """
        req = NewSystemBlip(text=text)
        return self._call("POST", f"/v1/wavelets/{_q(wavelet_id)}/system", Blip, req)

    def surface(
        self,
        wavelet_id: str,
        text: str,
        source_blip_id: str | None = None,
        as_: str | None = None,
        *,
        key: str | None = None,
    ) -> Blip:
        """Post a ``surface`` blip into the parent of ``wavelet_id``, referencing it as the source."""
        req = NewSurface(text=text, source_blip_id=source_blip_id, as_=as_)
        return self._call("POST", f"/v1/wavelets/{_q(wavelet_id)}/surface", Blip, req, key=key)

    def replace(self, blip_id: str, text: str, as_: str | None = None) -> Blip:
        """Append a new version of ``blip_id`` (the new blip has ``replaces`` set and a new id)."""
        req = NewBlip(text=text, as_=as_)
        return self._call("POST", f"/v1/blips/{_q(blip_id)}/replace", Blip, req)

    def read(
        self,
        wavelet_id: str,
        after: str | None = None,
        wait: float = 0,
        limit: int = 500,
        history: bool = False,
    ) -> BlipPage:
        """Blips with id > ``after`` in id order; with ``wait`` > 0, block until one exists or it lapses.

        At the deadline the page is empty and ``cursor == after``. Pass ``cursor`` back as ``after``.
        """
        query: dict[str, str] = {"limit": str(limit), "history": "1" if history else "0"}
        if after:
            query["after"] = after
        if wait > 0:
            query["wait"] = f"{wait:g}"
        path = f"/v1/wavelets/{_q(wavelet_id)}/blips?{urlencode(query)}"
        return self._call("GET", path, BlipPage, wait=wait)

    def context(self, wavelet_id: str, *, limit: int | None = None, before: str | None = None) -> Context:
        """One page of what a participant sees reading this wavelet: each ancestor's latest summary
        and blips up to the fork point, then its own summary and live tail. The newest ``limit``
        entries (the daemon's default: 500) older than ``before``; ``more``: pass ``cursor`` back."""
        query: dict[str, str] = {}
        if limit is not None:
            query["limit"] = str(limit)
        if before:
            query["before"] = before
        tail = f"?{urlencode(query)}" if query else ""
        return self._call("GET", f"/v1/wavelets/{_q(wavelet_id)}/context{tail}", Context)

    def full_context(self, wavelet_id: str, *, page: int = 5000) -> Context:
        """Every page of the context, stitched (blips and summaries oldest first)."""
        ctx = self.context(wavelet_id, limit=page)
        while ctx.more:
            older = self.context(wavelet_id, limit=page, before=ctx.cursor)
            ctx.blips[:0] = older.blips
            ctx.summaries[:0] = older.summaries
            ctx.more, ctx.cursor = older.more, older.cursor
        return ctx

    def summaries(self, wavelet_id: str) -> list[Summary]:
        """Every summary of the wavelet, oldest first."""
        return self._call("GET", f"/v1/wavelets/{_q(wavelet_id)}/summaries", SummaryList).summaries

    def summarize(self, wavelet_id: str, summary: NewSummary) -> SummaryVerdict:
        """Offer a summary: recorded if it cites every load-bearing blip of its range, else rejected."""
        return self._call("POST", f"/v1/wavelets/{_q(wavelet_id)}/summaries", SummaryVerdict, summary)

    def summary_check(self, wavelet_id: str) -> SummaryCheck:
        return self._call("GET", f"/v1/wavelets/{_q(wavelet_id)}/summaries/check", SummaryCheck)

    def summary_pending(self, wavelet_id: str, limit: int | None = None) -> SummaryInput:
        """The latest summary, the blips after it, and the ids a summary up to the last must cite."""
        tail = f"?limit={limit}" if limit is not None else ""
        return self._call("GET", f"/v1/wavelets/{_q(wavelet_id)}/summaries/pending{tail}", SummaryInput)

    def pin(self, blip_id: str, as_: str | None = None) -> Blip:
        """Pin a blip: load-bearing from now on (every summary of its wavelet must cite it)."""
        return self._call("POST", f"/v1/blips/{_q(blip_id)}/pin", Blip, NewPin(as_=as_))

    def get_blip(self, blip_id: str) -> Blip:
        return self._call("GET", f"/v1/blips/{_q(blip_id)}", Blip)

    def history(self, blip_id: str) -> list[Blip]:
        """Every version of a blip, oldest first."""
        return self._call("GET", f"/v1/blips/{_q(blip_id)}/history", BlipList).blips

    def feed(
        self, wave: str, participant: str, cursors: dict[str, str], wait: float = 0, limit: int = 200
    ) -> Feed:
        """One long-poll across every wavelet on ``participant``'s roster in ``wave`` (safe to retry)."""
        req = FeedRequest(participant=participant, cursors=cursors, wait=wait, limit=limit)
        return self._call("POST", f"/v1/waves/{_q(wave)}/feed", Feed, req, wait=wait)

    def report_presence(self, wave: str, report: PresenceReport) -> None:
        self._call("POST", f"/v1/waves/{_q(wave)}/presence", Ok, report)

    def presence(self, wave: str) -> list[PresenceRow]:
        return self._call("GET", f"/v1/waves/{_q(wave)}/presence", PresenceList).presence

    def read_wave(self, wave: str, after: str = "", wait: float = 0, limit: int = 500) -> BlipPage:
        """Every blip of ``wave`` with id > ``after``, oldest first, replaced versions too (operator only).

        A long-poll like :meth:`read`: with ``wait`` it returns as soon as one exists, or empty at the
        deadline with ``cursor == after``. Start at ``activity(wave).head`` to see only what comes next.
        """
        query = {"after": after, "wait": f"{wait:g}", "limit": str(limit)}
        return self._call("GET", f"/v1/waves/{_q(wave)}/blips?{urlencode(query)}", BlipPage, wait=wait)

    def activity(self, wave: str) -> WaveActivity:
        """Who wrote how much where, and when last; and the wave's newest blip id (operator only)."""
        return self._call("GET", f"/v1/waves/{_q(wave)}/activity", WaveActivity)

    def mint_token(self, wave: str, participant: str, machine: str | None = None) -> MintedToken:
        """A new token for (wave, participant), for ``machine`` if given (listed and revoked with it).
        The secret is in the answer only (operator only)."""
        req = MintRequest(wave=wave, participant=participant, machine=machine)
        return self._call("POST", "/v1/tokens", MintedToken, req)

    def mint_machine_token(self, machine: str, waves: Sequence[str]) -> MintedToken:
        """A machine token: the operator's powers in ``waves``, for ``machine`` (the operator token only)."""
        return self._call("POST", "/v1/machines", MintedToken, NewMachine(name=machine, waves=list(waves)))

    def list_tokens(self, wave: str | None = None, machine: str | None = None) -> list[TokenInfo]:
        query = {k: v for k, v in (("wave", wave), ("machine", machine)) if v}
        return self._call("GET", f"/v1/tokens{'?' + urlencode(query) if query else ''}", TokenList).tokens

    def revoke_token(
        self,
        token_id: str | None = None,
        wave: str | None = None,
        participant: str | None = None,
        machine: str | None = None,
    ) -> list[TokenInfo]:
        """Revoke one token by id, every token of (wave, participant), or every token of ``machine``.
        Returns what was revoked."""
        req = RevokeRequest(token_id=token_id, wave=wave, participant=participant, machine=machine)
        return self._call("POST", "/v1/tokens/revoke", Revoked, req).revoked

    def record_session(self, wave: str, session: NewSession) -> SessionRecord:
        """Remember the agent session a participant runs (operator only; see ``fleet respawn``)."""
        return self._call("POST", f"/v1/waves/{_q(wave)}/sessions", SessionRecord, session)

    def sessions(self, wave: str, participant: str | None = None) -> list[SessionRecord]:
        query = f"?{urlencode({'participant': participant})}" if participant else ""
        return self._call("GET", f"/v1/waves/{_q(wave)}/sessions{query}", SessionList).sessions

    def seat(self, wave: str) -> Seat | None:
        """The wave's newest resident seat, open or closed (None: never had one)."""
        return self._call("GET", f"/v1/waves/{_q(wave)}/seat", SeatAnswer).seat

    def claim_seat(self, wave: str, seat: NewSeat) -> Seat:
        """Seat a resident (operator only); Conflict names a live seat of another session."""
        got = self._call("POST", f"/v1/waves/{_q(wave)}/seat", SeatAnswer, seat).seat
        assert got is not None
        return got

    def supervisor(self, wave: str) -> SupervisorLease | None:
        """Who supervises ``wave`` now (None: no ``fleet supervise`` holds its lease; operator only)."""
        return self._call("GET", f"/v1/waves/{_q(wave)}/supervisor", SupervisorAnswer).lease

    def claim_supervisor(self, wave: str, claim: SupervisorClaim) -> SupervisorLease:
        """Claim or renew the wave's supervisor lease; Conflict names another live holder unless
        ``claim.force``."""
        got = self._call("POST", f"/v1/waves/{_q(wave)}/supervisor", SupervisorAnswer, claim).lease
        assert got is not None
        return got

    def release_supervisor(self, wave: str, holder: str) -> None:
        """Give the lease up if ``holder`` holds it (idempotent)."""
        self._call(
            "POST",
            f"/v1/waves/{_q(wave)}/supervisor/release",
            SupervisorAnswer,
            SupervisorRelease(holder=holder),
        )

    def close_seat(self, wave: str, why: str, session_id: str | None = None) -> Seat | None:
        """Close the wave's open seat (only ``session_id``'s, when given); idempotent."""
        req = CloseSeat(why=why, session_id=session_id)
        return self._call("POST", f"/v1/waves/{_q(wave)}/seat/close", SeatAnswer, req).seat

    def memory(self, wave: str) -> MemoryAnswer:
        """The wave's MEMORY.md (the operator or the seated resident only)."""
        return self._call("GET", f"/v1/waves/{_q(wave)}/memory", MemoryAnswer)

    def write_memory(
        self, wave: str, op: MemoryOp, content: str, summary: str | None = None, as_: str | None = None
    ) -> MemoryAnswer:
        """``update`` (replace) or ``add`` to the wave's MEMORY.md (``as_``: the operator writing
        as the seated resident). A resend carries the same request key, so ``add`` adds once."""
        req = MemoryWrite(op=op, content=content, summary=summary, as_=as_)
        return self._call("POST", f"/v1/waves/{_q(wave)}/memory", MemoryAnswer, req)

    def events(
        self, after: int = 0, limit: int = 1000, wave: str | None = None, *, tokens: bool = False
    ) -> EventPage:
        """A page of the event log after seq ``after`` (of ``wave`` only): the full operator only.
        Token rows (their hashes) only with ``tokens``."""
        query = f"after={after}&limit={limit}" + (f"&wave={_q(wave)}" if wave else "")
        query += "&tokens=1" if tokens else ""
        return self._call("GET", f"/v1/events?{query}", EventPage)

    def budgets(self, wave: str, participant: str | None = None) -> list[Budget]:
        """The wave's budgets this token may see; ``participant``: those that apply to it."""
        query = f"?{urlencode({'participant': participant})}" if participant else ""
        return self._call("GET", f"/v1/waves/{_q(wave)}/budgets{query}", BudgetList).budgets

    def set_budget(self, wave: str, req: SetBudget) -> Budget | None:
        """Set or clear (neither tokens nor cost) a budget (operator only); the budget as it now is."""
        got = self._call("POST", f"/v1/waves/{_q(wave)}/budgets", BudgetList, req).budgets
        return got[0] if got else None

    def report_spend(self, wave: str, report: SpendReport) -> list[Budget]:
        """Report a session's spend on wavelets with a shared budget (the participant's channel);
        the budgets that apply to it, with the members' sums."""
        return self._call("POST", f"/v1/waves/{_q(wave)}/budgets/spend", BudgetList, report).budgets

    def budget_reached(self, wave: str, report: BudgetReport) -> BudgetReached:
        """Report a budget passed (the participant's channel); ``first`` for the report that counted."""
        return self._call("POST", f"/v1/waves/{_q(wave)}/budgets/reached", BudgetReached, report)

    # ------------------------------------------------------------ permission prompts (docs/permissions.md)

    def ask_permission(self, wave: str, ask: PermissionAsk) -> PermissionRequest:
        """Record a session's permission prompt (its hook, with the participant's own token)."""
        return self._call("POST", f"/v1/waves/{_q(wave)}/permissions", PermissionRequest, ask)

    def permission(self, wave: str, request_id: str, wait: float = 0) -> PermissionRequest:
        """One request; with ``wait`` > 0, block until it is no longer pending or ``wait`` lapses."""
        query = f"?{urlencode({'wait': f'{wait:g}'})}" if wait > 0 else ""
        path = f"/v1/waves/{_q(wave)}/permissions/{_q(request_id)}{query}"
        return self._call("GET", path, PermissionRequest, wait=wait)

    def permissions(
        self, wave: str, participant: str | None = None, *, pending: bool = False, limit: int = 100
    ) -> list[PermissionRequest]:
        """The wave's requests, newest first (``pending``: those waiting now)."""
        query: dict[str, str] = {"limit": str(limit)}
        if participant:
            query["participant"] = participant
        if pending:
            query["pending"] = "1"
        path = f"/v1/waves/{_q(wave)}/permissions?{urlencode(query)}"
        return self._call("GET", path, PermissionList).requests

    def answer_permission(self, wave: str, answer: PermissionAnswer) -> PermissionRequest:
        """The operator allows or denies a participant's pending request."""
        return self._call("POST", f"/v1/waves/{_q(wave)}/permissions/answer", PermissionRequest, answer)

    def settle_permission(self, wave: str, request_id: str, settled: PermissionSettled) -> PermissionRequest:
        """The hook records how its request ended without the operator (the pane, or let go)."""
        path = f"/v1/waves/{_q(wave)}/permissions/{_q(request_id)}/settled"
        return self._call("POST", path, PermissionRequest, settled)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ConnectionResetError):
        return "connection closed by the server"
    if isinstance(exc, socket.gaierror):
        return f"unknown host: {exc.strerror}"
    return str(exc) or type(exc).__name__


# ---------------------------------------------------------------- discovery


def connect(*, autostart: bool = True, paths: Paths | None = None) -> Client:
    """A client for the daemon this environment means (docs/design.md §2).

    1. ``FLEET_DAEMON`` set: that URL, with ``FLEET_TOKEN`` (or the file ``FLEET_TOKEN_FILE`` names).
    2. Otherwise the local daemon of the endpoint file, if its pid is alive and ``/v1/health`` answers
       with that pid, with ``FLEET_TOKEN`` if set, else the operator token from the data dir.
    3. Otherwise, with ``autostart``, a daemon started in the background (one line on stderr says
       where it listens and where its log is); without it, :class:`~fleet.errors.DaemonUnreachable`.
    """
    paths = paths or get_paths()
    token = _env_token()
    url = os.environ.get("FLEET_DAEMON", "").strip()
    if url and "://" not in url:  # the name of a joined daemon (`fleet remote join`)
        remote = load_remote(paths, url)
        return Client(remote.url, token if token is not None else remote.token)
    if url:
        if token is None:
            endpoint = read_endpoint(paths)
            if endpoint is None or endpoint.url.rstrip("/") != Client(url, "").url:
                raise errors.UsageError(
                    f"FLEET_DAEMON is set to {url} but FLEET_TOKEN is not: set FLEET_TOKEN to a token "
                    "from `fleet token mint` (or FLEET_TOKEN_FILE to a file holding one)"
                )
            token = _operator_token(paths)
        return Client(url, token)
    endpoint = live_endpoint(paths)
    if endpoint is None:
        if not autostart:
            raise errors.DaemonUnreachable(
                f"no local fleet daemon is running (endpoint file {paths.endpoint}); "
                "start it with `fleet daemon start`, or set FLEET_DAEMON"
            )
        endpoint, _ = start_local_daemon(paths, announce=True)
    return Client(endpoint_url(endpoint), token if token is not None else _operator_token(paths))


def remote_path(paths: Paths, name: str) -> Path:
    from fleet.models import PARTICIPANT_RE

    if not PARTICIPANT_RE.fullmatch(name):
        raise errors.UsageError(
            f"{name[:40]!r} is neither a daemon URL (http://… or https://…#sha256=…) nor the name of a"
            " joined daemon (lower case letter first, then letters, digits, '_' or '-')"
        )
    return paths.remotes / f"{name}.json"


def load_remote(paths: Paths, name: str) -> Remote:
    """The joined daemon ``name`` (``fleet remote join … --name NAME``), or UsageError."""
    path = remote_path(paths, name)
    try:
        return loads(Remote, path.read_bytes())
    except FileNotFoundError:
        joined = sorted(p.stem for p in paths.remotes.glob("*.json")) if paths.remotes.is_dir() else []
        raise errors.UsageError(
            f"no joined daemon is named {name!r} (FLEET_DAEMON / --remote): "
            + (f"joined here: {', '.join(joined)}" if joined else "join one with `fleet remote join STRING`")
        ) from None
    except (OSError, RecordError) as exc:
        raise errors.UsageError(f"cannot read the joined daemon {path}: {exc}") from None


def _env_token() -> str | None:
    token = os.environ.get("FLEET_TOKEN", "").strip()
    if token:
        return token
    token_file = os.environ.get("FLEET_TOKEN_FILE", "").strip()
    if token_file:
        try:
            token = Path(token_file).expanduser().read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise errors.UsageError(f"cannot read FLEET_TOKEN_FILE {token_file}: {exc.strerror}") from None
        if not token:
            raise errors.UsageError(f"FLEET_TOKEN_FILE {token_file} is empty")
        return token
    return None


def _operator_token(paths: Paths) -> str:
    try:
        token = paths.operator_token.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise errors.Unauthorized(
            f"cannot read the operator token {paths.operator_token} ({exc.strerror}); "
            "it is created when the daemon first starts: check FLEET_HOME"
        ) from None
    return token


def read_endpoint(paths: Paths) -> Endpoint | None:
    """The endpoint file's contents, or None if it is missing or unreadable (it may be stale)."""
    try:
        return loads(Endpoint, paths.endpoint.read_bytes())
    except (OSError, RecordError):
        return None


def _answers(endpoint: Endpoint) -> bool:
    """True if ``/v1/health`` at the endpoint answers with the endpoint's own pid."""
    try:
        with Client(endpoint_url(endpoint), "", timeout=2.0, retries=0) as probe:
            return probe.health().pid == endpoint.pid
    except errors.FleetError:
        return False


def live_endpoint(paths: Paths) -> Endpoint | None:
    """The local daemon's endpoint if its process is alive and answering, else None."""
    endpoint = read_endpoint(paths)
    if endpoint is None or not pid_alive(endpoint.pid) or not _answers(endpoint):
        return None
    return endpoint


@contextlib.contextmanager
def _autostart_lock(paths: Paths, deadline: float) -> Iterator[None]:
    ensure_private_dir(paths.state)
    with open(paths.state / "autostart.lock", "a+b") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise errors.DaemonUnreachable(
                        f"another fleet command is still starting the daemon (lock {lock.name}); "
                        "retry, or start it with `fleet daemon start`"
                    ) from None
                time.sleep(0.02)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _daemon_env(paths: Paths) -> dict[str, str]:
    """The environment for a background daemon: the same fleet package, the same FLEET_HOME, the
    system allocator (:mod:`fleet.allocator`: set here, the daemon need not start itself again)."""
    env = daemon_env(os.environ)
    package_root = str(Path(fleet.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    root = paths.data.parent
    if (paths.state, paths.config, paths.logs) == (root / "state", root / "config", root / "logs"):
        env["FLEET_HOME"] = str(root)
    return env


def _log_tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.rstrip().splitlines()[-lines:]) or "(empty log)"


def start_local_daemon(paths: Paths, *, announce: bool = False) -> tuple[Endpoint, bool]:
    """Start the local daemon in the background unless one runs; returns (endpoint, started).

    The daemon runs in its own session (it outlives this process), its output appended to
    ``paths.daemon_log``. With ``announce``, a started daemon is reported on stderr in one line.
    Raises :class:`~fleet.errors.DaemonUnreachable`, with the log's last lines, if it dies or does not
    answer within :data:`AUTOSTART_DEADLINE` seconds; the daemon's own StorageFault or Conflict (a
    daemon of another state dir holds the store) when it refused to start with one.
    """
    deadline = time.monotonic() + AUTOSTART_DEADLINE
    with _autostart_lock(paths, deadline):
        endpoint = live_endpoint(paths)
        if endpoint is not None:
            return endpoint, False
        ensure_private_dir(paths.logs)
        # No --listen: the local daemon binds its remembered port, so its address outlives restarts.
        cmd = [sys.executable, "-m", "fleet", "daemon", "run"]
        with open(paths.daemon_log, "ab") as logfile:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=logfile,
                stderr=logfile,
                start_new_session=True,
                env=_daemon_env(paths),
            )
        log.info("started daemon pid %s", proc.pid)
        while True:
            endpoint = read_endpoint(paths)
            if endpoint is not None and endpoint.pid == proc.pid and _answers(endpoint):
                break
            if proc.poll() is not None:
                other = live_endpoint(paths)  # lost a race with a daemon started by other means
                if other is not None:
                    return other, False
                said = [ln for ln in _log_tail(paths.daemon_log).splitlines() if "error:" in ln]
                reason = said[-1].split("error:", 1)[1].strip() if said else ""
                if proc.returncode == errors.StorageFault.exit_code:  # a named storage fault: not transient
                    raise errors.StorageFault(
                        f"the fleet daemon refused to start: {reason or 'a storage fault'}"
                        f" (its log: {paths.daemon_log})"
                    )
                if proc.returncode == errors.Conflict.exit_code and "already runs" in reason:
                    # The instance locks' refusal (exit 1 is every FleetError's: the words tell):
                    # a daemon of another state dir holds the store; not transient either.
                    raise errors.Conflict(
                        f"the fleet daemon refused to start: {reason} (its log: {paths.daemon_log})"
                    )
                raise errors.DaemonUnreachable(
                    f"the fleet daemon exited at start (status {proc.returncode}); "
                    f"the end of its log {paths.daemon_log}:\n{_log_tail(paths.daemon_log)}"
                )
            if time.monotonic() > deadline:
                proc.terminate()
                raise errors.DaemonUnreachable(
                    f"the fleet daemon did not answer within {AUTOSTART_DEADLINE:g}s; "
                    f"the end of its log {paths.daemon_log}:\n{_log_tail(paths.daemon_log)}"
                )
            time.sleep(0.02)
    if announce:
        # The one line docs/design.md §2 promises the user; stderr, so stdout stays data (and protocol).
        sys.stderr.write(f"fleet: started the local daemon at {endpoint.url} (log: {paths.daemon_log})\n")
    return endpoint, True


def connected_agents(paths: Paths) -> dict[str, list[str]] | None:
    """The participants whose channels the local daemon hears now (presence ``live``), by wave name;
    None when it cannot be asked (not running, not answering within a few seconds, no operator
    token). What ``fleet daemon stop`` says before stopping it."""
    endpoint = read_endpoint(paths)
    if endpoint is None or not pid_alive(endpoint.pid):
        return None
    try:
        with Client(endpoint_url(endpoint), _operator_token(paths), timeout=3.0, retries=0) as c:
            live = {
                w.name: sorted(p.participant for p in c.presence(w.id) if p.state == "live")
                for w in c.list_waves()
            }
    except errors.FleetError as exc:
        log.debug("cannot ask the daemon who is connected: %s", exc.message)
        return None
    return {wave: names for wave, names in sorted(live.items()) if names}


def stop_local_daemon(paths: Paths, timeout: float = 10.0) -> Endpoint | None:
    """SIGTERM the local daemon and wait until its process is gone; returns what was stopped.

    None means no local daemon was running (a stale endpoint file is left for the next daemon to
    replace). The wait lasts as long as the daemon shows progress: it writes each phase of its
    graceful stop (and each request in flight that finishes) to ``state/daemon.stopping``, with the
    longest that phase can take. Raises :class:`~fleet.errors.FleetError` once nothing has moved for
    ``timeout`` seconds, or for longer than the current phase's own bound.
    """
    endpoint = read_endpoint(paths)
    if endpoint is None or not pid_alive(endpoint.pid):
        return None
    if not _answers(endpoint) and not looks_like_fleet(endpoint.pid):
        log.warning("pid %s in %s is not a fleet daemon; not signalling it", endpoint.pid, paths.endpoint)
        return None
    try:
        os.kill(endpoint.pid, signal.SIGTERM)
    except ProcessLookupError:
        return endpoint
    seen: StopProgress | None = None
    moved = time.monotonic()
    allowed = timeout
    while pid_alive(endpoint.pid):
        progress = _stop_progress(paths, endpoint.pid)
        if progress is not None and progress != seen:
            seen, moved = progress, time.monotonic()
            allowed = max(timeout, progress.bound + STOP_SLACK)
        stalled = time.monotonic() - moved
        if stalled > allowed:
            what = (
                f"it has been {seen.phase!r} ({seen.inflight} in flight) for {stalled:.0f}s"
                if seen is not None
                else f"it showed no sign of stopping within {timeout:g}s of SIGTERM"
            )
            raise errors.FleetError(
                f"the fleet daemon (pid {endpoint.pid}) stopped making progress: {what}; see"
                f" {paths.daemon_log}, wait and run `fleet daemon stop` again, or `kill -9 {endpoint.pid}`"
            )
        time.sleep(0.02)
    return endpoint


STOP_SLACK = 2.0
"""Seconds past a stop phase's own bound before ``daemon stop`` calls it stuck."""


def _stop_progress(paths: Paths, pid: int) -> StopProgress | None:
    """The stopping daemon's last progress report, if that daemon (``pid``) wrote one."""
    try:
        p = loads(StopProgress, paths.daemon_stopping.read_text(encoding="utf-8"))
    except (OSError, RecordError):
        return None
    return p if p.pid == pid else None


def local_status(paths: Paths) -> DaemonStatus:
    """Whether the local daemon runs and answers, where, and since when."""
    endpoint = live_endpoint(paths)
    status = DaemonStatus(running=False, endpoint_file=str(paths.endpoint), log=str(paths.daemon_log))
    if endpoint is not None:
        status.running, status.url, status.pid = True, endpoint.url, endpoint.pid
        status.version, status.started_at = endpoint.version, endpoint.started_at
    return status


def remote_status(url: str) -> DaemonStatus:
    """Whether the daemon at ``url`` (``FLEET_DAEMON``) answers ``/v1/health``."""
    try:
        with Client(url, "", timeout=5.0, retries=0) as probe:
            health = probe.health()
    except errors.DaemonUnreachable:
        return DaemonStatus(running=False, url=url, remote=True)
    return DaemonStatus(running=True, url=url, pid=health.pid, version=health.version, remote=True)
