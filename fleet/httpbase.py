"""The one stdlib HTTP/1.1 base under the daemon's API and the operator console.

:class:`Server` is a threading HTTP server (one thread per connection) and :class:`Handler` the
request handler both subclass. What a caller (and a client) may rely on, for both:

- **Bodies** are read by ``Content-Length`` only. ``Transfer-Encoding`` is refused (400), as are a
  length that is not a plain decimal number and two ``Content-Length`` headers (400); a body over
  the server's ``body_limit`` is refused (413) without being read into memory: what the client
  still sends is drained, bounded in bytes (:data:`DRAIN_LIMIT`) and time (:data:`DRAIN_SECONDS`),
  so that it reads the answer instead of a reset connection; a body shorter than its length (the
  client closed early) is refused (400) and nothing of it runs. Each of these answers closes the connection.
- **Heads two parsers could read two ways are refused** (400, closing): a target that is not a path
  (absolute-form), a folded header line, a line without a colon or with a name that is not a token
  (``Host : x``), two ``Host`` headers.
- **One write per response**: head and body go to the socket in one ``send``, with ``TCP_NODELAY``
  set, so keep-alive clients are not stalled by delayed ACKs. An answer to ``HEAD`` has headers only.
- **Errors** are JSON ``{"error": {"kind", "message"}}`` (:class:`fleet.models.ErrorEnvelope`) with the
  status :func:`fleet.errors.status_of` gives; malformed HTTP too. Anything unexpected is a 500 that
  says to look at the log (where its traceback is). A client hanging up is routine, logged at debug.
- **Idle timeout**: a connection on which no complete request head arrives for ``idle_timeout``
  seconds is closed, whether it sits idle between keep-alive requests or trickles a head that never
  ends (slowloris). While a request is handled (a long-poll, an event stream) nothing is timed but
  each socket operation, by the same number of seconds.
- **Hang-ups while parked**: a request handled here runs with its connection bound
  (:func:`fleet.hangup.bind`), so a wait that parks it (the daemon's notifier) ends as soon as the
  client closes the connection, not at its timeout.
- **Host** (:class:`HostRule`): a request whose ``Host`` names neither the address the server is
  bound to nor one of its names is refused (421) before anything runs, so a page on another site
  cannot reach it through DNS rebinding.
- **Nothing held between requests**: :meth:`Handler.request_done` runs after every admitted request,
  however it ended (the daemon gives its read connection back there). When a burst of connections
  is over, :meth:`Server.after_burst` runs once (the daemon renews its idle readers; then the URL
  cache is emptied, garbage collected and the C heap trimmed: :func:`give_back_memory`). Nothing a
  connection makes is kept by name per request (:meth:`Handler.handle_one_request`), and all
  threads allocate from one C heap (:func:`one_malloc_arena`), so that trimming reaches it all.
- **Graceful stop** (:meth:`Server.stop`): stop accepting, wait (bounded) for the requests in flight;
  a request that arrives while the server is closing is answered 503.
"""

from __future__ import annotations

import functools
import gc
import io
import ipaddress
import logging
import re
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, cast

from fleet import errors, hangup
from fleet.models import ErrorBody, ErrorEnvelope
from fleet.wire import encode

if TYPE_CHECKING:
    import ssl

log = logging.getLogger(__name__)

IDLE_TIMEOUT = 30.0
"""Default seconds a connection may go without a complete request head before it is closed."""
DRAIN_LIMIT = 64 * 1024 * 1024
DRAIN_SECONDS = 2.0
"""How much of a refused body is read and dropped (so the client sees its 413), and for how long."""

_LENGTH = re.compile(r"[0-9]+")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""A header's name (RFC 9110 5.1: a token)."""
MAX_HEADER_LINE = 65536
MAX_HEADERS = 100
"""A request head's limits (the stdlib's): a longer line or more headers is refused (431)."""
Header = tuple[str, str]
_METHODS = {m: f"do_{m}" for m in ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS")}
"""Request method → handler method name, made once (see :meth:`Handler.handle_one_request`); a
method not here is answered 501, as the stdlib answers one its handler has no ``do_`` for."""


BURST = 64
"""Connections that must have ended since the peak for :meth:`Server.after_burst` to run."""
QUIET = 1.0
"""Seconds from the end of a burst to :meth:`Server.after_burst`: the burst's threads are gone by then."""


def give_back_memory() -> bool:
    """Give back to the system what a burst of connections left behind; False where the C heap
    cannot be trimmed (not glibc).

    In order: the stdlib's URL-parsing cache is emptied (``urllib.parse.urlsplit`` keeps the last
    128 URLs it split: those first seen in the burst would keep one of CPython's 1 MiB arenas
    alive each, an arena going back only once nothing in it is alive); garbage is collected (what
    the burst's connections left in reference cycles waits for a collection that, with no more
    allocations, does not come); and the C heap is trimmed (glibc's ``malloc_trim``: glibc keeps
    what was freed for reuse). It walks the heap (tens of milliseconds at most), so it runs once
    per burst, not per connection. Measured after 1,000 idle connections and 500 long-polls
    (``bench/store.py``), from a start of 41 MiB: 70 MiB without the collection and the trim,
    57–60 MiB with them; the rest was objects made during the burst that outlive it (see
    ``docs/design.md`` §2 for what was done about each).
    """
    clear = getattr(urllib.parse.urlsplit, "cache_clear", None)  # (an lru_cache since Python 3.11)
    if clear is not None:
        clear()
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@functools.cache
def _libc() -> Any:
    """glibc, or None (another C library: nothing here applies)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.malloc_trim  # noqa: B018 - only glibc has it
        libc.mallopt  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def _malloc_trim() -> Callable[[int], int] | None:
    libc = _libc()
    return None if libc is None else cast("Callable[[int], int]", libc.malloc_trim)


M_ARENA_MAX = -8
"""glibc's ``mallopt`` parameter: how many malloc arenas threads may spread over."""


@functools.cache
def one_malloc_arena() -> bool:
    """Make every thread of the process allocate from glibc's one main heap (``M_ARENA_MAX`` 1);
    False where that is not glibc. Takes effect for arenas not made yet: call it before the
    threads start (a :class:`Server` does, as it is made).

    Why: each of a burst's connection threads allocated in one of up to 8 per core per-thread
    arenas; what they free returns to the top of their arena, which ``malloc_trim`` does not give
    back (it trims the top of the main heap only): after 1,000 idle connections and 500
    long-polls, 6 MiB stayed in 9 such arenas. With one heap, trimming reaches all of it. Python
    serialises most allocation under the GIL anyway: posts/s through the daemon (8 keep-alive
    clients, best of 3, two alternated runs) 2,345 and 2,395 with it, 2,446 and 2,457 without, within
    the spread of single runs (1,830-2,460).
    """
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_ARENA_MAX, 1))


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) → (host, port); an empty host is ``127.0.0.1``."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise errors.UsageError(f"--listen takes HOST:PORT, e.g. 127.0.0.1:8086, not {listen!r}")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (``localhost`` or an IP literal) is a loopback address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    """Whether ``host`` is the any-address (``0.0.0.0`` or ``::``): every interface."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


class HostRule:
    """Which ``Host`` headers a listener answers: the names it is bound as.

    - Bound to a loopback address: that address, ``127.0.0.1``, ``::1`` and ``localhost``.
    - Bound to another address: that address, and this machine's names (``socket.gethostname()``
      and its fully qualified form); bound to every interface (``0.0.0.0``/``::``), any IP literal
      (a rebinding attack always arrives under a name, never an address).
    - Always: the ``names`` given (``--host-name``: the name other machines use for it).

    The port is not compared (a tunnel or a port forward changes it); names compare case-insensitively
    without a trailing dot.
    """

    def __init__(self, bind_host: str, names: Sequence[str] = ()) -> None:
        self.bind_host = bind_host.strip("[]").lower()
        self.any_address = is_wildcard(self.bind_host)
        allowed = {self.bind_host, *(n.strip().rstrip(".").lower() for n in names if n.strip())}
        if is_loopback(self.bind_host):
            allowed.update(LOOPBACK_NAMES)
        else:
            for name in (socket.gethostname(), socket.getfqdn()):
                if name:
                    allowed.add(name.rstrip(".").lower())
        self.allowed = frozenset(allowed)

    def allows(self, header: str | None) -> bool:
        if not header:
            return False
        host = header.strip().lower()
        if host.startswith("["):
            host = host[1 : host.find("]")] if "]" in host else host
        elif host.count(":") == 1:
            host = host.partition(":")[0]
        host = host.rstrip(".")
        if host in self.allowed:
            return True
        if self.any_address:
            try:
                ipaddress.ip_address(host)
                return True
            except ValueError:
                return False
        return False


def json_bytes(payload: Any) -> bytes:
    """A record (or plain data holding records) as compact UTF-8 JSON, encoded by msgspec straight
    from the records (no intermediate dicts: a 500-blip read's answer was half its time in them)."""
    return encode(payload)


class Headers:
    """A request's headers, as the handlers read them: ``get`` (the first of that name) and
    ``get_all``, names compared case-insensitively."""

    __slots__ = ("_items",)

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = items
        """(lower-case name, value) in the order received."""

    def get(self, name: str, default: str | None = None) -> str | None:
        key = name.lower()
        for k, v in self._items:
            if k == key:
                return v
        return default

    def get_all(self, name: str, default: list[str] | None = None) -> list[str] | None:
        key = name.lower()
        got = [v for k, v in self._items if k == key]
        return got or default

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def items(self) -> list[tuple[str, str]]:
        return list(self._items)


class _HeadDeadline(socket.SocketIO):
    """The request socket's reader, with a deadline for a whole request head (the idle timeout).

    Each ``recv`` is bounded by the socket's timeout (``idle``); while a deadline is armed, it is
    shortened to what is left of the deadline once that is the tighter bound (so a client that
    trickles one byte per ``idle - ε`` seconds is still cut at the deadline). Off the deadline, the
    socket's own timeout is restored.
    """

    def __init__(self, sock: socket.socket, idle: float) -> None:
        super().__init__(sock, "rb")
        self._conn = sock
        self._idle = idle
        self._deadline: float | None = None
        self._shortened = False

    def arm(self) -> None:
        self._deadline = time.monotonic() + self._idle

    def disarm(self) -> None:
        self._deadline = None
        if self._shortened:
            self._shortened = False
            self._conn.settimeout(self._idle)

    def readinto(self, b: Any) -> int | None:
        if self._deadline is not None:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no complete request within the idle timeout")
            if left < self._idle * 0.95:  # the socket's own timeout is no longer the tighter bound
                self._conn.settimeout(left)
                self._shortened = True
        return super().readinto(b)


class _Writer(io.BufferedIOBase):
    """The response side of the socket: every ``write`` is one ``sendall`` (nothing buffered)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self._sock.sendall(b)
        with memoryview(b) as view:
            return view.nbytes


class Server(ThreadingHTTPServer):
    """One listener. ``closing`` says when new requests get a 503 (the owner's shutdown flag).

    ``body_limit`` is the largest request body taken; ``limit_note`` is appended to the 413 message
    (what the limit is made of). ``name`` prefixes log lines and names the serving thread.
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        addr: tuple[str, int],
        handler: type[Handler],
        *,
        name: str,
        body_limit: int,
        limit_note: str = "",
        idle_timeout: float = IDLE_TIMEOUT,
        closing: Callable[[], bool] = lambda: False,
        queue: int = 128,
        host_names: Sequence[str] = (),
        tls: ssl.SSLContext | None = None,
    ) -> None:
        if not idle_timeout > 0:
            raise errors.UsageError("the idle timeout must be a positive number of seconds")
        self.address_family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
        self.request_queue_size = queue
        self.name = name
        self.body_limit = body_limit
        self.limit_note = limit_note
        self.idle_timeout = idle_timeout
        self.closing = closing
        self.host_rule = HostRule(addr[0], host_names)
        self.tls = tls
        """Serve HTTPS with this context (each connection's handshake runs in its own thread)."""
        self._inflight = 0
        self._inflight_cond = threading.Condition()
        self._serving: threading.Thread | None = None
        self._conns_lock = threading.Lock()
        self.connections = 0
        """Client connections open now (a thread each)."""
        self._peak = 0
        """The most connections open at once since the last :meth:`after_burst`."""
        self._quiet: threading.Timer | None = None
        one_malloc_arena()
        super().__init__(addr, handler)

    @property
    def url(self) -> str:
        """``http(s)://host:port`` of the bound socket (IPv6 hosts in brackets)."""
        host, port = self.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else str(host)
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"

    # -- lifecycle

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._serving = threading.current_thread()
        super().serve_forever(poll_interval)

    def start(self) -> threading.Thread:
        """Serve in a daemon thread (a short poll interval: :meth:`stop` waits for the loop to notice)."""
        thread = threading.Thread(target=self.serve_forever, args=(0.05,), name=self.name, daemon=True)
        self._serving = thread  # before it runs: a stop() right after start() must still shut it down
        thread.start()
        return thread

    def stop(self, timeout: float, progress: Callable[[int], None] | None = None) -> None:
        """Stop accepting, wait up to ``timeout`` s for the requests in flight, close the listener.

        The owner sets ``closing`` first (and wakes what waits on it), so requests that still
        arrive on kept-alive connections are answered 503. Safe to call from a handler thread.
        ``progress(n)`` is told the number in flight at first and whenever it drops.
        """
        if self._serving is not None and threading.current_thread() is not self._serving:
            self.shutdown()
        with self._conns_lock:
            if self._quiet is not None:
                self._quiet.cancel()
        deadline = time.monotonic() + timeout
        with self._inflight_cond:
            now = self._inflight
        while True:
            if progress is not None:
                progress(now)
            left = deadline - time.monotonic()
            if now == 0 or left <= 0:
                break
            with self._inflight_cond:
                self._inflight_cond.wait_for(lambda last=now: self._inflight != last, left)  # type: ignore[misc]
                now = self._inflight
        self.server_close()

    def enter(self) -> bool:
        """Count a request in flight; False (count nothing) once the server is closing."""
        with self._inflight_cond:
            if self.closing():
                return False
            self._inflight += 1
            return True

    def leave(self) -> None:
        with self._inflight_cond:
            self._inflight -= 1
            self._inflight_cond.notify_all()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """One connection's thread, counted: once a burst of connections has ended (at least
        :data:`BURST` fewer open than at the peak, and at most a quarter of it), :meth:`after_burst`
        runs :data:`QUIET` s later, in a thread of its own."""
        with self._conns_lock:
            self.connections += 1
            self._peak = max(self._peak, self.connections)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._conns_lock:
                self.connections -= 1
                ended = self._peak - self.connections >= BURST and self.connections * 4 <= self._peak
                if ended and self._quiet is None:
                    # once the rest of the burst's threads are gone too (they end within moments)
                    self._quiet = threading.Timer(QUIET, self._burst_over)
                    self._quiet.daemon = True
                    self._quiet.start()

    def _burst_over(self) -> None:
        with self._conns_lock:
            self._quiet = None
            self._peak = self.connections
        try:
            self.after_burst()
        except Exception:
            log.exception("%s: giving back memory after a burst", self.name)

    def after_burst(self) -> None:
        """A burst of connections is over: give the memory they used back to the system
        (:func:`give_back_memory`). Subclasses give back their own caches first."""
        give_back_memory()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up mid-request is routine; anything else is logged with its traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            log.debug("%s: client %s went away: %s", self.name, client_address, exc)
        else:
            log.exception("%s: error serving %s", self.name, client_address)


class Handler(BaseHTTPRequestHandler):
    """One connection. Subclasses implement :meth:`handle_request` and may override the hooks
    :meth:`admit` (refuse a request before it counts as in flight) and :meth:`standard_headers`
    (headers every response of theirs carries)."""

    protocol_version = "HTTP/1.1"
    server: Server

    # -- connection

    plaintext = False
    """A plain-HTTP client on a TLS listener: every request it sends is refused (400), none runs."""

    def setup(self) -> None:
        self.request.settimeout(self.server.idle_timeout)
        if self.server.tls is not None:
            self.request = self._tls_handshake(self.request, self.server.tls)
        self.connection = self.request
        self.connection.settimeout(self.server.idle_timeout)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._reader = _HeadDeadline(self.connection, self.server.idle_timeout)
        self.rfile = io.BufferedReader(self._reader)
        self.wfile = _Writer(self.connection)

    def _tls_handshake(self, sock: socket.socket, ctx: ssl.SSLContext) -> socket.socket:
        """The TLS side of a new connection, in its handler thread (a slow handshake holds no one
        else up); a client that speaks plain HTTP instead keeps its socket, marked :attr:`plaintext`."""
        import ssl

        first = sock.recv(1, socket.MSG_PEEK)
        if not first:
            raise ConnectionAbortedError("closed before a TLS handshake")
        if first != b"\x16":  # not a TLS handshake record: plain HTTP (or noise)
            self.plaintext = True
            return sock
        try:
            tls = ctx.wrap_socket(sock, server_side=True)
        except ssl.SSLError as exc:  # e.g. the client refused our certificate (it pins another)
            raise ConnectionAbortedError(f"TLS handshake failed: {exc.reason or exc}") from None
        return tls

    def handle_one_request(self) -> None:
        """The stdlib's ``handle_one_request`` (request line, head, the ``do_`` method), but the
        method's name is looked up, not built: the stdlib's ``"do_" + command`` is a new string per
        request, and each one stays referenced from CPython's method cache (up to 4,096 of them),
        scattered over memory the connection allocated, which keeps a burst's arenas from being
        given back (132 such strings alive after a burst of 1,500 connections)."""
        self._reader.arm()  # from now until the head is parsed: the idle timeout's deadline
        try:
            self.raw_requestline = self.rfile.readline(MAX_HEADER_LINE + 1)
            if len(self.raw_requestline) > MAX_HEADER_LINE:
                self.requestline = self.request_version = self.command = ""
                self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
                return
            if not self.raw_requestline:
                self.close_connection = True
                return
            if not self.parse_request():
                return  # answered already
            method = getattr(self, _METHODS.get(self.command, ""), None)
            if method is None:
                self.send_error(HTTPStatus.NOT_IMPLEMENTED, f"Unsupported method ({self.command!r})")
                return
            method()
            self.wfile.flush()
        except TimeoutError as exc:  # a read or a write timed out: drop the connection
            self.log_error("Request timed out: %r", exc)
            self.close_connection = True
        finally:
            self._reader.disarm()

    def parse_request(self) -> bool:
        ok = self._parse_request()
        self._reader.disarm()  # the head is in: the body and the answer are timed per operation
        return ok

    def _parse_request(self) -> bool:
        """The stdlib's ``parse_request`` (request line, version, keep-alive, ``Expect``), with the
        headers read into :class:`Headers` instead of through the ``email`` parser, which was a
        fifth of the daemon's time per request."""
        self.command = None  # type: ignore[assignment]  # set in case of error on the first line
        self.request_version = version = self.default_request_version
        self.close_connection = True
        raw: bytes = self.raw_requestline  # set by handle_one_request
        requestline = str(raw, "iso-8859-1").rstrip("\r\n")
        self.requestline = requestline
        words = requestline.split()
        if not words:
            return False
        if len(words) >= 3:  # enough to determine the protocol version
            version = words[-1]
            number = version[5:].split(".") if version.startswith("HTTP/") else []
            if len(number) != 2 or not all(n.isdigit() and len(n) <= 10 for n in number):
                self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request version ({version!r})")
                return False
            major, minor = int(number[0]), int(number[1])
            if (major, minor) >= (1, 1) and self.protocol_version >= "HTTP/1.1":
                self.close_connection = False
            if major >= 2:
                self.send_error(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, f"Invalid HTTP version {version[5:]}")
                return False
            self.request_version = version
        if not 2 <= len(words) <= 3:
            self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request syntax ({requestline!r})")
            return False
        command, path = words[:2]
        if len(words) == 2:
            self.close_connection = True
            if command != "GET":
                self.send_error(HTTPStatus.BAD_REQUEST, f"Bad HTTP/0.9 request type ({command!r})")
                return False
        self.command, self.path = command, path
        if not path.startswith("/"):  # origin-form only: an absolute-form target names a host of its own
            self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request target ({path[:100]!r}): send a path")
            return False
        if self.path.startswith("//"):  # as the stdlib does (gh-87389): never an absolute URI
            self.path = "/" + self.path.lstrip("/")
        items: list[tuple[str, str]] = []
        while True:
            line = self.rfile.readline(MAX_HEADER_LINE + 1)
            if len(line) > MAX_HEADER_LINE:
                self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Line too long")
                return False
            if line in (b"\r\n", b"\n", b""):
                break
            if len(items) >= MAX_HEADERS:
                self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Too many headers")
                return False
            text = line.decode("iso-8859-1").rstrip("\r\n")
            name, sep, value = text.partition(":")
            # A line two parsers could read two ways is refused (RFC 9112 5.1, 5.2): a folded
            # continuation, a line without a colon, a name with spaces before its colon.
            if not sep or not _TOKEN.fullmatch(name):
                why = "a folded header line" if text[:1] in (" ", "\t") else f"bad header line {text[:100]!r}"
                self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request head: {why}")
                return False
            items.append((name.lower(), value.strip(" \t")))
        self.headers = Headers(items)  # type: ignore[assignment]
        if len(self.headers.get_all("Host") or []) > 1:
            self.send_error(HTTPStatus.BAD_REQUEST, "Bad request head: two Host headers")
            return False
        conntype = (self.headers.get("Connection") or "").lower()
        if conntype == "close":
            self.close_connection = True
        elif conntype == "keep-alive" and self.protocol_version >= "HTTP/1.1":
            self.close_connection = False
        expect = (self.headers.get("Expect") or "").lower()
        if expect == "100-continue" and self.request_version >= "HTTP/1.1":
            return self.handle_expect_100()
        return True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s: %s " + format, self.server.name, self.address_string(), *args)

    # -- hooks

    def handle_request(self, body: bytes) -> None:
        """Answer one request whose body was read. Raise a FleetError to answer with it."""
        raise errors.HttpError(405, f"{self.command} is not supported")

    def admit(self) -> bool:
        """False to refuse the request before it counts as in flight (having answered it)."""
        return True

    def standard_headers(self, headers: Sequence[Header]) -> list[Header]:
        """Headers added to every response, given the response's own ``headers``."""
        return []

    def request_done(self) -> None:
        """Called after every request that was admitted, however it ended (answered, refused,
        failed, the client gone): where a subclass gives back what the request took (the daemon:
        its read connection), so that nothing is held between a keep-alive connection's requests."""

    # -- writing

    def _head(self, status: int, headers: Sequence[Header]) -> bytes:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = ""
        lines = [f"HTTP/1.1 {status} {reason}", f"Server: {self.server_version}"]
        lines += [f"{k}: {v}" for k, v in (*self.standard_headers(headers), *headers)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def respond(self, status: int, body: bytes, content_type: str, headers: Sequence[Header] = ()) -> None:
        """Write one complete response in one ``send`` (headers only for ``HEAD``)."""
        hdrs = [("Content-Type", content_type), ("Content-Length", str(len(body))), *headers]
        if self.close_connection:
            hdrs.append(("Connection", "close"))
        if getattr(self, "command", None) == "HEAD":
            body = b""  # a HEAD answer has the headers only, or a keep-alive client desyncs
        try:
            self.wfile.write(self._head(status, hdrs) + body)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True

    def respond_json(self, status: int, payload: Any, headers: Sequence[Header] = ()) -> None:
        self.respond(status, json_bytes(payload), "application/json", headers)

    def respond_error(self, exc: errors.FleetError) -> None:
        status, kind = errors.status_of(exc)
        self.respond_json(status, ErrorEnvelope(error=ErrorBody(kind=kind, message=exc.message)))

    def write_head(self, status: int, headers: Sequence[Header]) -> None:
        """The head of a streamed answer (no Content-Length: it ends with the connection)."""
        self.close_connection = True
        self.wfile.write(self._head(status, headers))

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Malformed HTTP (bad request line, oversized headers): a JSON error, then close."""
        self.close_connection = True
        self.respond_error(errors.HttpError(code, message or HTTPStatus(code).phrase))

    # -- reading

    def read_body(self) -> bytes | None:
        """The request body, or None when the request was refused for it (answered; closing)."""
        if self.headers.get("Transfer-Encoding"):
            self._refuse(errors.UsageError("chunked request bodies are not supported: send Content-Length"))
            return None
        lengths = self.headers.get_all("Content-Length") or []
        if len(lengths) > 1:
            self._refuse(errors.UsageError("two Content-Length headers: send one"))
            return None
        raw = lengths[0] if lengths else None
        if raw is None:
            return b""
        if not _LENGTH.fullmatch(raw.strip()):
            self._refuse(errors.UsageError(f"bad Content-Length {raw!r}"))
            return None
        length = int(raw)
        limit = self.server.body_limit
        if length > limit:
            note = f": {self.server.limit_note}" if self.server.limit_note else ""
            self._refuse(
                errors.PayloadTooLarge(f"request body of {length} bytes is over the limit of {limit}{note}")
            )
            self._drain(length)
            return None
        body = self.rfile.read(length) if length else b""
        if len(body) < length:  # the client closed early: an incomplete request applies nothing
            self._refuse(errors.UsageError(f"the request body ended after {len(body)} of its {length} bytes"))
            return None
        return body

    def _refuse(self, exc: errors.FleetError) -> None:
        self.close_connection = True
        self.respond_error(exc)

    def _drain(self, length: int) -> None:
        """After refusing a body, read and drop what the client is still sending (bounded in bytes
        and time), so that it finishes its send and reads the 413 instead of a reset connection."""
        budget = min(length, DRAIN_LIMIT)
        deadline = time.monotonic() + DRAIN_SECONDS
        try:
            self.connection.settimeout(DRAIN_SECONDS)
            while budget > 0 and time.monotonic() < deadline:
                chunk = self.rfile.read1(min(budget, 65536))
                if not chunk:
                    break
                budget -= len(chunk)
        except OSError:
            pass

    # -- dispatch

    def host_ok(self) -> bool:
        """The :class:`HostRule` check; a refusal is answered (421) and closes the connection.
        A plain-HTTP request on a TLS listener is refused here too (400)."""
        if self.plaintext:
            self._refuse(
                errors.UsageError(
                    "this server speaks HTTPS only: use https:// with its certificate fingerprint"
                    " (https://HOST:PORT#sha256=…, or `fleet remote join`)"
                )
            )
            return False
        host = self.headers.get("Host")
        if self.server.host_rule.allows(host):
            return True
        self._refuse(
            errors.HttpError(
                421,
                f"this server does not answer to the name {(host or '')[:100]!r}: use the address it"
                " listens on (or start it with --host-name NAME)",
                "forbidden",
            )
        )
        return False

    def _handle(self) -> None:
        body = self.read_body()
        if body is None or not self.host_ok() or not self.admit():
            return
        if not self.server.enter():
            self.close_connection = True
            self.respond_error(errors.DaemonUnreachable("the daemon is shutting down"))
            return
        try:
            with hangup.bind(self.connection):  # a parked wait notices this client hanging up
                self.handle_request(body)
        except errors.FleetError as exc:
            self.respond_error(exc)
        except (ConnectionError, TimeoutError):
            self.close_connection = True  # the client went away mid-answer
        except Exception:
            log.exception("%s: internal error on %s %s", self.server.name, self.command, self.path)
            self.respond_error(errors.FleetError("internal error: see the daemon log (`fleet paths`)"))
        finally:
            try:
                self.request_done()
            finally:
                self.server.leave()

    do_GET = _handle
    do_POST = _handle

    def _unsupported(self) -> None:
        if self.read_body() is None or not self.host_ok():
            return  # already answered (bad Content-Length, body too large, a foreign Host)
        self.respond_error(errors.HttpError(405, f"{self.command} is not supported"))

    do_PUT = _unsupported
    do_DELETE = _unsupported
    do_PATCH = _unsupported
    do_HEAD = _unsupported
