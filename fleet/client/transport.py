"""The client's transport: one keep-alive HTTP/1.1 connection per thread to the daemon, resends,
failover between daemons, and the one call every API method makes (:meth:`Transport.call`, through
:mod:`fleet.routes`).

What callers may rely on:

- **An address may list several daemons** (on one store): ``URL[,URL…]``, each URL with its own pin
  (:func:`parse_daemons`, :func:`format_daemons`); one URL is the old form, unchanged. Requests go
  to the *current* daemon, shared by every thread; when it stops answering (refused, reset, no answer
  within the bound, or a ``503``) a resendable request moves at once to the next in the list, and
  the one that answers becomes current (:attr:`Transport.url`; each move that an answer confirmed is
  in :attr:`Transport.failovers`). Once every daemon has been tried, the round starts again after the
  backoff below: a round counts as one retry.

- **One keep-alive connection per thread**, ``TCP_NODELAY`` on, each request written to the socket
  in a single ``send`` (headers and body together: writing them separately stalls on delayed ACKs).
  A connection the server closed while idle is noticed before reuse and replaced transparently.
- **Every request is safe to resend.** Each write carries a request key (``Idempotency-Key``, a
  UUIDv7 made once per call and kept across its resends), so the daemon applies it once however
  often it arrives and answers a repeat with the first answer (docs/http-api.md); a read, and a POST
  that only reads, reports or renews (the feed, presence), is the same sent twice. A connection that
  cannot be established (refused, reset, timed out), a request written but not answered, or a
  ``503`` (the daemon refused it while shutting down) is resent with exponential backoff (0.05 s,
  doubling to 1 s, ``retries`` times: about 1.5 s in all by default, or for ``patience`` seconds),
  then :class:`~fleet.errors.DaemonUnreachable` is raised naming the URL and, for a write, whether
  it may have been applied (``maybe_applied``: False when it never reached the daemon whole).
- **Long-polls** (``read``/``feed`` with ``wait``) get a socket timeout of ``timeout + wait``. With
  one daemon listed, a request unanswered within it is given up at once (it may be slow, not gone);
  with several, it is sent to the next daemon instead.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any, Self, TypeVar
from urllib.parse import urlsplit

import fleet
from fleet import errors
from fleet.ids import request_key
from fleet.models import ErrorEnvelope
from fleet.routes import QueryValue, Route, target
from fleet.wire import FrozenValue, RecordError, dumps, loads

log = logging.getLogger(__name__)

M = TypeVar("M")

USER_AGENT = f"fleet/{fleet.__version__}"


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
        # an ASCII host as bytes: getaddrinfo encodes a str host with the idna codec, which loads
        # unicodedata and stringprep (0.3 MiB and 2 ms of a channel's start) to change nothing
        host: str | bytes = self.host.encode("ascii") if self.host.isascii() else self.host
        sock = socket.create_connection((host, self.port), self._connect_timeout)  # type: ignore[arg-type]
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


class Daemon(FrozenValue, frozen=True):
    """One listed daemon: its address without the pin, and the pin (https) or None (plain HTTP)."""

    url: str
    fingerprint: str | None
    host: str
    port: int | None
    prefix: str

    @property
    def pinned(self) -> str:
        """The address with its pin: the form :func:`parse_daemons` reads back."""
        return self.url + (f"#sha256={self.fingerprint}" if self.fingerprint else "")


def parse_daemon(text: str, fingerprint: str | None = None) -> Daemon:
    """One daemon address (``http://HOST:PORT`` or ``https://HOST:PORT#sha256=FP``), or UsageError
    naming it and the form expected. ``fingerprint`` pins it when its fragment does not."""
    text = text.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise errors.UsageError(
            f"daemon URL {text!r} is not an http://HOST:PORT or https://HOST:PORT#sha256=FP"
            " address (check FLEET_DAEMON; several daemons are separated by commas)"
        )
    pin = fingerprint or parse_pin(parts.fragment)
    if parts.scheme == "https" and pin is None:
        raise errors.UsageError(
            f"daemon URL {text!r} is https but names no certificate fingerprint to pin: give"
            " https://HOST:PORT#sha256=FP (the daemon prints FP at start), or use `fleet remote join`"
        )
    if parts.scheme == "http" and pin is not None:
        raise errors.UsageError(f"daemon URL {text!r} pins a certificate but is not https://")
    prefix = parts.path.rstrip("/")
    return Daemon(f"{parts.scheme}://{parts.netloc}{prefix}", pin, parts.hostname, port, prefix)


def parse_daemons(text: str, fingerprint: str | None = None) -> list[Daemon]:
    """The daemons an address lists: ``URL[,URL…]`` (spaces around commas ignored), in order, each
    once. One URL is the single-daemon form every older string has. ``fingerprint`` (an old caller's
    separate pin) applies only to a single URL. UsageError names the first bad one, or an empty list."""
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise errors.UsageError("no daemon URL given (check FLEET_DAEMON): give http://HOST:PORT")
    if len(items) > 1 and fingerprint is not None:
        raise errors.UsageError("a separate certificate pin applies to one daemon URL, not a list")
    daemons: list[Daemon] = []
    for item in items:
        if not item:
            raise errors.UsageError(
                f"daemon list {text!r} has an empty entry (two commas, or a trailing one)"
            )
        d = parse_daemon(item, fingerprint)
        if all(d.url != seen.url for seen in daemons):
            daemons.append(d)
    return daemons


def format_daemons(daemons: list[Daemon]) -> str:
    """The address :func:`parse_daemons` reads back as ``daemons``: pinned URLs joined by commas."""
    return ",".join(d.pinned for d in daemons)


class Failover(FrozenValue, frozen=True):
    """A move from one daemon to another, confirmed by an answer from the new one."""

    at: float
    """When the new daemon answered (``time.time()``)."""
    source: str
    """The daemon that answered before (its URL, no pin)."""
    to: str
    reason: str
    """Why the one before was left: what the last request to it met."""


def _unreachable(urls: list[str], reason: str) -> errors.DaemonUnreachable:
    where = f"at {urls[0]}" if len(urls) == 1 else f"at any of {', '.join(urls)}"
    return errors.DaemonUnreachable(
        f"cannot reach the fleet daemon {where} ({reason}); "
        "start it with `fleet daemon start`, or check FLEET_DAEMON"
    )


KEPT = 20
"""Failovers a transport remembers (:attr:`Transport.failovers`)."""


class Transport:
    """The connection to the daemons ``base_url`` lists (one, or several on one store). Thread-safe:
    each thread gets its own keep-alive connection, to the current daemon.

    ``timeout`` bounds connecting and waiting for an answer (long-polls add their ``wait``);
    ``retries`` bounds reconnection rounds (each tries every listed daemon once), spaced ``backoff``
    seconds apart and doubling (to 1 s at most); ``patience`` keeps them going for at least that many
    seconds in all (a daemon restarting).
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
        self.daemons = parse_daemons(base_url, fingerprint)
        """Every listed daemon, in the order given."""
        self.base_url = format_daemons(self.daemons)
        """Every listed daemon with its pin: what a spawned agent's channel and hook are handed."""
        self._current = 0
        self._answered: int | None = None
        """The daemon that answered last (index), None before any answer."""
        self.failovers: list[Failover] = []
        """Each move to another daemon an answer confirmed, oldest first (the last :data:`KEPT`)."""
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
    def url(self) -> str:
        """The current daemon's address, without the pin (the one requests go to now)."""
        return self.daemons[self._current].url

    @property
    def fingerprint(self) -> str | None:
        """The current daemon's pinned certificate fingerprint (https), or None (plain HTTP: loopback)."""
        return self.daemons[self._current].fingerprint

    @property
    def urls(self) -> list[str]:
        """Every listed daemon's address, without pins."""
        return [d.url for d in self.daemons]

    @property
    def last_failover(self) -> Failover | None:
        return self.failovers[-1] if self.failovers else None

    @property
    def token(self) -> str:
        """The bearer token this client sends (so a spawner can hand it on through a 0600 file)."""
        return self._token

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"

    def __enter__(self) -> Self:
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

    def _conn(self, index: int) -> _Connection:
        """This thread's connection to daemon ``index`` (its connection to another is closed)."""
        conn: _Connection | None = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "daemon", None) != index:
            conn.close()
            conn = None
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            d = self.daemons[index]
            conn = _Connection(d.host, d.port, self.connect_timeout, d.fingerprint, d.url)
            self._local.conn, self._local.pid, self._local.daemon = conn, os.getpid(), index
            with self._all_lock:
                self._all.append(conn)
        return conn

    def _leave(self, index: int) -> None:
        """Daemon ``index`` did not answer: make the next one current, unless another thread moved
        on already (so two threads failing on one daemon do not skip the next)."""
        with self._all_lock:
            if self._current == index:
                self._current = (index + 1) % len(self.daemons)

    def _heard(self, index: int, first: int, reason: str) -> None:
        """Daemon ``index`` answered a call first sent to daemon ``first``: it is current, and a move
        from the one before (the last to answer; before any answer, ``first``) is recorded."""
        if index == self._answered == self._current:
            return  # the common case, on every answer: no lock taken
        with self._all_lock:
            self._current = index
            before, self._answered = self._answered, index
            if before is None:
                before = first
            if before == index:
                return
            move = Failover(time.time(), self.daemons[before].url, self.daemons[index].url, reason)
            self.failovers = [*self.failovers[-(KEPT - 1) :], move]
        # info, not warning: a hook's stderr is its session's input; the channel says it in its log
        log.info("failed over from the daemon at %s to %s (%s)", move.source, move.to, reason)

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
        """Send one request and return (status, body), reconnecting and resending it as needed (every
        request is safe to resend: see the module's docstring)."""
        try:
            return self._exchange_retrying(method, path, body, read_timeout, key, retries)
        except BaseException:
            # Whatever interrupted the exchange (an error, Ctrl-C) left the connection mid-request:
            # drop it so the next call starts clean.
            conn: _Connection | None = getattr(self._local, "conn", None)
            if conn is not None:
                conn.close()
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
        several = len(self.daemons) > 1
        delay, rounds, stale_retry_used = self.backoff, 0, False
        patience_until = time.monotonic() + self.patience
        written = False
        """Whether the request ever reached a daemon whole: if not, it certainly was not applied."""
        index = first = self._current
        tried = 0
        """Daemons tried in this round: once all have been, the round ends in a backoff."""
        left = ""
        """Why the last daemon left in this call was left (the reason a failover records)."""

        def next_daemon(reason: str) -> None:
            """Leave daemon ``index`` for the next: at once within a round, after the backoff (or
            the error, once retries and patience are spent) when every daemon has been tried."""
            nonlocal delay, rounds, index, tried, left
            log.debug("daemon %s: %s", self.daemons[index].url, reason)
            left = reason
            self._leave(index)
            index = self._current
            tried += 1
            if tried < len(self.daemons):
                return
            tried = 0
            if rounds >= retries and time.monotonic() >= patience_until:
                raise self._gave_up(method, reason, written)
            rounds += 1
            log.debug("no daemon answered; round %d in %.2fs", rounds, delay)
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

        while True:
            conn = self._conn(index)
            if conn.sock is not None and conn.is_stale():
                conn.close()
            reused = conn.sock is not None and conn.served > 0
            try:
                if conn.sock is None:
                    conn.connect()
            except OSError as exc:
                conn.close()
                next_daemon(_reason(exc))
                continue
            assert conn.sock is not None
            conn.sock.settimeout(read_timeout)
            target = self.daemons[index].prefix + path
            try:
                conn.send_request(method, target, headers, body)
            except OSError as exc:
                # An incompletely written request cannot have been acted on: safe to send again.
                conn.close()
                if reused and not stale_retry_used:
                    stale_retry_used = True
                    continue
                next_daemon(_reason(exc))
                continue
            written = True
            try:
                try:
                    status, data = conn.getresponse()
                except ConnectionResetError as exc:
                    raise _NoAnswer(_reason(exc)) from exc
            except TimeoutError:
                conn.close()
                reason = f"no answer within {read_timeout:g}s"
                if several:
                    next_daemon(reason)  # hung, or cut off without a reset: the next may answer
                    continue
                raise self._gave_up(method, reason, written) from None
            except _NoAnswer as exc:
                conn.close()
                if reused and not stale_retry_used:
                    stale_retry_used = True  # the server dropped an idle keep-alive socket
                    continue
                next_daemon(str(exc))
                continue
            except (OSError, _BadAnswer) as exc:
                conn.close()
                next_daemon(_reason(exc))
                continue
            conn.served += 1
            if status == 503:
                # The daemon refused the request before acting on it (it is shutting down): any
                # request, even a POST, is safe to send again, to the daemon that replaces it.
                conn.close()
                next_daemon(self._error(503, data).message)
                continue
            self._heard(index, first, left or "it stopped answering")
            return status, data

    def _gave_up(self, method: str, reason: str, written: bool) -> errors.DaemonUnreachable:
        """The error of a request given up on; for a write, whether it may have been applied."""
        exc = _unreachable(self.urls, reason)
        if method == "GET":
            return exc
        said = (
            "may or may not have been applied" if written else "was not applied: it never reached the daemon"
        )
        return errors.DaemonUnreachable(f"{exc.message}; the {method} {said}", maybe_applied=written)

    def call(
        self,
        route: Route[M],
        body: object | None = None,
        *,
        query: Mapping[str, QueryValue] | None = None,
        wait: float = 0.0,
        retries: int | None = None,
        key: str | None = None,
        **args: str,
    ) -> M:
        """Call ``route`` with its path parameters ``args`` (``wave=…``), ``query`` and ``body`` (the
        route's request record); the answer is the route's response record. ``wait``: the seconds a
        long-poll may hold the answer (added to the socket timeout). A body of another record than
        the route declares is a UsageError naming both (a client bug), before anything is sent."""
        # By name, not isinstance: a module run as ``__main__`` (the permission hook) has its own
        # copy of its record classes.
        if type(body).__name__ != (route.request or type(None)).__name__:
            expected = route.request.__name__ if route.request is not None else "no body"
            raise errors.UsageError(f"route {route.name} takes {expected}, not {type(body).__name__}")
        return self._call(
            route.method,
            target(route, args, query),
            route.response,
            body,
            wait=wait,
            retries=retries,
            key=key,
            keyed=route.keyed,
        )

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
        keyed: bool = True,
    ) -> M:
        """One API call. A write (any method but GET) carries a request key, made here once per call
        (or ``key``, the caller's, to make two calls one operation) and sent with every resend, so
        the daemon applies it once however many times it arrives (docs/http-api.md). A POST whose
        route only reads, reports or renews (not ``keyed``: the feed, presence) carries none and is
        resent as a read is: a key there was a random draw and a header per long-poll for nothing."""
        payload = None
        if body is not None:
            payload = dumps(body, exclude_none=True).encode()
        if method == "GET" or not keyed:
            key = None
        elif key is None:
            key = request_key()
        status, data = self._exchange(
            method,
            path,
            payload,
            read_timeout=self.timeout + max(wait, 0.0),
            key=key,
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
