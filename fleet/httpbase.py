"""The one HTTP/1.1 base under the daemon's API and the operator console: an asyncio event loop.

:class:`Server` is one listener served by an event loop in a thread of its own; :class:`Handler` the
per-request object both servers subclass. The loop does the I/O (accepting, TLS, reading heads and
bodies, writing answers) and holds every parked request: a long-poll or an event stream that waits
costs a :class:`Park` on the loop, not a thread. Handlers run on the loop itself (the daemon's
API: a few store calls each), or, for a server given ``workers``, on a small bounded pool of
threads so that a slow one never stalls the loop's I/O (the console). SQLite's one writer and its
per-thread readers work as before. What a caller (and a client) may rely on, for both servers:

- **Bodies** are read by ``Content-Length`` only. ``Transfer-Encoding`` is refused (400), as are a
  length that is not a plain decimal number and two ``Content-Length`` headers (400); a body over
  the server's ``body_limit`` is refused (413) without being read into memory: what the client
  still sends is drained, bounded in bytes (:data:`DRAIN_LIMIT`) and time (:data:`DRAIN_SECONDS`),
  so that it reads the answer instead of a reset connection; a body shorter than its length (the
  client closed early) is refused (400) and nothing of it runs. Each of these answers closes the connection.
- **Heads two parsers could read two ways are refused** (400, closing): a target that is not a path
  (absolute-form), a folded header line, a line without a colon or with a name that is not a token
  (``Host : x``), two ``Host`` headers. A line over :data:`MAX_HEADER_LINE` bytes or more than
  :data:`MAX_HEADERS` headers is a 431 (a request line that long: 414).
- **One write per response**: head and body go to the socket in one ``send``, with ``TCP_NODELAY``
  set, so keep-alive clients are not stalled by delayed ACKs. An answer to ``HEAD`` has headers only.
  Pipelined requests are answered in order, one at a time.
- **Errors** are JSON ``{"error": {"kind", "message"}}`` (:class:`fleet.models.ErrorEnvelope`) with the
  status :func:`fleet.errors.status_of` gives; malformed HTTP too. Anything unexpected is a 500 that
  says to look at the log (where its traceback is). A client hanging up is routine, logged at debug.
- **Idle timeout**: a connection on which no complete request head arrives for ``idle_timeout``
  seconds is closed, whether it sits idle between keep-alive requests or trickles a head that never
  ends (slowloris). A body must keep arriving (``idle_timeout`` at most between its pieces), and an
  answer the client does not read for ``idle_timeout`` seconds ends the connection. A parked request
  (a long-poll, an event stream) is not timed but by its own wait.
- **Parking** (:class:`Park`): a handler that must wait yields a ``Park``; the request then holds no
  thread (nor, the daemon's, a read connection) until the park's wake-up, its timeout, or the
  client hanging up (the loop sees the connection's EOF or reset), and resumes (on the loop, or a
  pool thread) with ``True`` sent in when the client is gone (answer at once: the connection is ending). One
  commit that wakes many parks schedules them in one call onto the loop.
- **Host** (:class:`HostRule`): a request whose ``Host`` names neither the address the server is
  bound to nor one of its names is refused (421) before anything runs, so a page on another site
  cannot reach it through DNS rebinding.
- **Nothing held between requests**: :meth:`Handler.request_done` runs after every admitted request,
  however it ended (the daemon gives its read connection back there). When a burst of connections
  is over, :meth:`Server.after_burst` runs once, in a thread of its own (the daemon renews its
  idle readers; then the URL cache is emptied, garbage collected and the C heap trimmed:
  :func:`give_back_memory`); all threads allocate from one C heap (:func:`one_malloc_arena`), so
  that trimming reaches it all.
- **Per connection**: :func:`connection_notes` is a namespace kept for the connection the calling
  handler answers (the daemon's feed keeps its last answer there), empty for each new connection.
- **Graceful stop** (:meth:`Server.stop`): stop accepting, wait (bounded) for the requests in flight;
  a request that arrives while the server is closing is answered 503.
- **TLS** (``tls=``): each connection's first byte says whether it is a TLS handshake; a client that
  speaks plain HTTP to a TLS listener instead gets every request refused (400), none runs. The
  handshake runs on the loop (a slow one holds no one else up).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import ipaddress
import logging
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from http import HTTPStatus
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Protocol, cast

from fleet import errors
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
_FIELDS = re.compile(r"(?:[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[^\r\n]*\r?\n)*\r?\n")
"""A block of header lines every one of which is ``token:value`` (no bare CR), then the blank line:
the common head, read in one pass (:meth:`Handler.parse`); any other is read line by line."""
_FIELD = re.compile(r"([^:\n]+):([^\r\n]*)\r?\n")
MAX_HEADER_LINE = 65536
MAX_HEADERS = 100
"""A request head's limits (the stdlib's): a longer line or more headers is refused (431)."""
Header = tuple[str, str]
_REQUEST_LINE = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+ [^ \r\n]+( HTTP/[0-9]+\.[0-9]+)?\r?\n")
"""What a request line looks like, for a head not yet complete (the whole of it is checked by
:meth:`Handler.parse`); one that does not is refused at once."""
_ANSWERED = frozenset(("GET", "POST"))
_REFUSED = frozenset(("PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"))
"""Methods a handler answers, and methods refused (405) once their body and Host are checked; any
other method is answered 501 before its body is read."""


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

    __slots__ = ("_first", "_items", "_repeats")

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = items
        """(lower-case name, value) in the order received."""
        self._first = dict(reversed(items))
        """Each name's first value."""
        self._repeats = len(self._first) != len(items)
        """Some name comes more than once."""

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._first.get(name.lower(), default)

    def get_all(self, name: str, default: list[str] | None = None) -> list[str] | None:
        key = name.lower()
        if not self._repeats:
            value = self._first.get(key)
            return default if value is None else [value]
        got = [v for k, v in self._items if k == key]
        return got or default

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def items(self) -> list[tuple[str, str]]:
        return list(self._items)


_NO_HEADERS = Headers([])
"""A request's headers before its head is read (a Headers is never changed: one serves all)."""


WORKERS = 0
"""Threads a server runs its handlers on by default: none, they run on the loop (the daemon's API:
each is a few store calls, 0.1-1 ms; measured in ``docs/performance.md``). A server whose handlers
may take long (the console reads transcripts) is given a pool: then the loop keeps to I/O and
parking. Parked requests hold no thread either way."""
STREAM_BUFFER = 4 * 1024 * 1024
"""Bytes of a streamed answer the client may leave unread before the stream is ended as gone."""
STOP_DRAIN = 2.0
"""Seconds a stopping server gives its connections to close (a parked request to answer, an answer
to finish) once the requests in flight are done or their bound has passed."""
PIPELINE_BUFFER = 256 * 1024
"""Bytes a connection may send ahead (pipelined) while its request is answered: reading pauses."""


class Park(Protocol):
    """What a handler yields to wait without a thread (the daemon's notifier makes them).

    The server calls :meth:`arm` on the loop with a ``wake`` that any thread may call (once is
    enough; more is harmless); False means the wait is over already (resume at once). :meth:`disarm`
    follows every successful ``arm``, however the wait ended: by ``wake``, at ``timeout`` seconds,
    or with the client gone."""

    @property
    def timeout(self) -> float: ...

    def arm(self, wake: Callable[[], None]) -> bool: ...

    def disarm(self) -> None: ...


class Turn(Protocol):
    """What the steps one turn of the loop runs share (:meth:`Server.turn`; the daemon: one write
    transaction). A step takes :meth:`mark` before it runs and its :meth:`span` after; once the
    turn is over, :meth:`fault` says whether what it did was lost (then it is answered with that
    error instead)."""

    def mark(self) -> int: ...

    def span(self, mark: int) -> range: ...

    def fault(self, span: range) -> errors.FleetError | None: ...


class _NoTurn:
    """A turn that shares nothing: no step's work is ever lost with another's."""

    def mark(self) -> int:
        return 0

    def span(self, mark: int) -> range:
        return range(0)

    def fault(self, span: range) -> errors.FleetError | None:
        return None


Answering = Generator[Park, bool, None]
"""A request being answered that may park: it yields parks and is sent, on each resumption,
whether the client hung up meanwhile."""

_local = threading.local()


def connection_notes() -> SimpleNamespace:
    """The notes of the connection the calling handler answers (a fresh namespace outside one)."""
    notes: SimpleNamespace | None = getattr(_local, "notes", None)
    return notes if notes is not None else SimpleNamespace()


def _head_end(buf: bytearray) -> int:
    """The index just past the blank line that ends a request head in ``buf``, or -1."""
    crlf = buf.find(b"\n\r\n")
    lf = buf.find(b"\n\n")
    if crlf < 0:
        return lf + 2 if lf >= 0 else -1
    if lf < 0 or crlf < lf:
        return crlf + 3
    return lf + 2


class _Waker:
    """Wakes parked connections from any thread: one call onto the loop for a batch of wake-ups
    (a commit that wakes 64 feeds costs one ``call_soon_threadsafe``, not 64)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._due: list[_Connection] = []
        self.thread_id = 0
        """The loop's thread (set when it runs)."""

    def wake(self, conn: _Connection) -> None:
        with self._lock:
            first = not self._due
            self._due.append(conn)
        if not first:
            return
        try:
            if threading.get_ident() == self.thread_id:
                self._loop.call_soon(self._drain)
            else:
                self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: the server stopped, nothing waits any more
            pass

    def _drain(self) -> None:
        with self._lock:
            due, self._due = self._due, []
        for conn in due:
            conn.unpark(False)


_HEAD, _BODY, _BUSY, _DRAIN, _CLOSED = range(5)
_EARLY = 0.001
"""Seconds a timer may fire before its time (the loop runs those due within its clock's resolution)."""


class _Connection(asyncio.Protocol):
    """One client connection on the loop: reads heads and bodies, runs each request (on the pool),
    parks it when it yields a :class:`Park`, writes what it answered."""

    def __init__(self, server: Server, plaintext: bool = False) -> None:
        self.server = server
        self.loop = server.loop
        self.plaintext = plaintext
        self.transport: asyncio.Transport | None = None
        self.peer: Any = ("", 0)
        self.buf = bytearray()
        self.state = _HEAD
        self.notes = SimpleNamespace()
        self.eof = False
        self._timer: asyncio.TimerHandle | None = None
        self._deadline: float | None = None
        """When the idle timer ends the connection (the loop's clock), or None: not timed."""
        self._write_timer: asyncio.TimerHandle | None = None
        self._handler: Handler | None = None
        self._answering: Answering | None = None
        self._length = 0
        self._drain_left = 0
        self._parked: Park | None = None
        self._park_timer: asyncio.TimerHandle | None = None
        self._paused = False
        self._writing = False
        """The transport paused us: more than its high-water mark waits to be written."""
        self._unwritten = 0
        """Answered requests still counted in flight until their answer is written."""

    # -- the transport's callbacks (on the loop)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.peer = transport.get_extra_info("peername") or ("", 0)
        self.transport.set_write_buffer_limits(high=64 * 1024, low=0)  # resumed: all written
        self.server.opened(self)
        self._idle(self.server.idle_timeout)

    def data_received(self, data: bytes) -> None:
        if self.state == _DRAIN:
            self._drain_left -= len(data)
            if self._drain_left <= 0:
                self.close()
            return
        if self.state == _CLOSED:
            return
        self.buf += data
        if self.state == _HEAD:
            self._read_head()
        elif self.state == _BODY:
            self._idle(self.server.idle_timeout)  # a body must keep arriving, piece after piece
            self._read_body()
        elif len(self.buf) > PIPELINE_BUFFER and not self._paused and self.transport is not None:
            self._paused = True  # busy: what comes meanwhile waits in the kernel, not here
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self.eof = True
        if self.state == _BODY and self._handler is not None:
            h = self._handler
            h.refuse(
                errors.UsageError(f"the request body ended after {len(self.buf)} of its {self._length} bytes")
            )
            self._flush(h)
            self.close()
        elif self.state == _BUSY:
            self.unpark(True)  # a parked request answers now: its client is gone (or only reads)
        elif self.state != _CLOSED:
            self.close()
        # keep the socket open to write the answer (a half-closed client still reads); over TLS
        # asyncio closes it anyway, and says so unless told False
        return self.transport is not None and self.transport.get_extra_info("sslcontext") is None

    def connection_lost(self, exc: Exception | None) -> None:
        self.state = _CLOSED
        self.eof = True
        for timer in (self._timer, self._write_timer):
            if timer is not None:
                timer.cancel()
        self._timer = self._write_timer = self._deadline = None
        self.server.closed(self)
        self._left()
        self.unpark(True)

    def pause_writing(self) -> None:
        # the client does not read what it is sent: bounded like any other socket operation
        self._writing = True
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.server.idle_timeout, self.abort)

    def resume_writing(self) -> None:
        self._writing = False  # (the low-water mark is 0: all of it was written)
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        self._left()

    def _written(self, h: Handler) -> None:
        """The request ``h`` answered is in flight until its answer has left (a graceful stop waits
        for a slow reader's answer as for any request): now, or once the socket drained."""
        h.entered = False
        self._unwritten += 1
        if not self._writing or self.state == _CLOSED:
            self._left()

    def _left(self) -> None:
        while self._unwritten:
            self._unwritten -= 1
            self.server.leave()

    # -- reading

    def _idle(self, seconds: float | None) -> None:
        """Time the connection out ``seconds`` from now (None: not timed). The deadline is checked
        when its one timer fires, which is moved only to fire earlier: a request costs no timer
        made or cancelled (two of each a request made it 6% of a post's time on the loop)."""
        if seconds is None:
            self._deadline = None
            return
        deadline = self._deadline = self.loop.time() + seconds
        timer = self._timer
        if timer is not None:
            if timer.when() <= deadline:
                return
            timer.cancel()
        self._timer = self.loop.call_at(deadline, self._check_deadline)

    def _check_deadline(self) -> None:
        self._timer = None
        deadline = self._deadline
        if deadline is None:
            return
        if self.loop.time() + _EARLY < deadline:  # moved on since the timer was set: wait for it
            self._timer = self.loop.call_at(deadline, self._check_deadline)
            return
        self._deadline = None
        self._timed_out()

    def _timed_out(self) -> None:
        if self.state in (_HEAD, _BODY):
            log.debug("%s: %s: no complete request within the idle timeout", self.server.name, self.peer)
            self.close()
        elif self.state == _DRAIN:
            self.close()

    def _read_head(self) -> None:
        buf = self.buf
        if buf[:1] == b"\n" or buf[:2] == b"\r\n":  # an empty request line: nothing to answer
            self.close()
            return
        end = _head_end(buf)
        if end < 0:
            if buf[:1] == b"\x16" or (b"\n" in buf and not _REQUEST_LINE.match(buf)):
                self._bad_start()
            elif len(buf) > MAX_HEADER_LINE:
                self._head_too_large()
            return
        head = bytes(buf[:end])
        del buf[:end]
        self._idle(None)
        h = self.server.handler(self)
        self._handler = h
        length = h.parse(head)
        if length is None:  # refused: answered, closing
            self._flush(h)
            self.close()
            return
        if length > self.server.body_limit:
            h.refuse_too_large(length)
            self._flush(h)
            self._drain(length)
            return
        if h.expect_continue and length > len(buf):
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        self._length = length
        self.state = _BODY
        self._idle(self.server.idle_timeout)
        self._read_body()

    def _bad_start(self) -> None:
        """A head whose first line is already wrong (a TLS handshake on a plain listener, noise):
        refused now, not at the idle timeout (the client waits for an answer, not for more)."""
        h = self.server.handler(self)
        if self.buf[:1] == b"\x16":
            h.refuse(errors.UsageError("this server speaks plain HTTP: use http://, not https://"))
        elif h._request_line(bytes(self.buf[: self.buf.find(b"\n")])):
            return  # odd (two spaces), but a request line all the same: read on
        self._flush(h)
        self.close()

    def _head_too_large(self) -> None:
        """A head that has not ended and is already over a limit: 414, or 431 as the parser says."""
        lines = bytes(self.buf).split(b"\n")
        h = self.server.handler(self)
        if lines[0].startswith(b"HEAD "):
            h.command = "HEAD"  # (its head never parsed) a HEAD's answer is headers only, this one too
        if len(lines[0]) > MAX_HEADER_LINE:
            h.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
        elif any(len(line) > MAX_HEADER_LINE + 1 for line in lines[1:]):
            h.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Line too long")
        elif len(lines) > MAX_HEADERS + 2:
            h.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Too many headers")
        else:
            return  # long, but within the limits so far: read on
        self._flush(h)
        self.close()

    def _read_body(self) -> None:
        if len(self.buf) < self._length:
            if self.eof:
                self.eof_received()
            return
        body = bytes(self.buf[: self._length])
        del self.buf[: self._length]
        self._idle(None)
        self.state = _BUSY
        h = self._handler
        assert h is not None
        self._answering = h.answer(body)
        self._step(None)

    def _drain(self, length: int) -> None:
        """After a refused body: read and drop what the client still sends (bounded in bytes and
        time), so that it finishes its send and reads the 413 instead of a reset connection."""
        self.state = _DRAIN
        self._drain_left = min(length, DRAIN_LIMIT) - len(self.buf)
        self.buf.clear()
        if self._drain_left <= 0:
            self.close()
            return
        self._idle(DRAIN_SECONDS)

    # -- answering

    def _step(self, gone: bool | None) -> None:
        """Run the request on until it parks or ends: on the pool, or without one in the loop's
        next turn, with the other steps due then (:meth:`Server.due`)."""
        pool = self.server.pool
        if pool is None:
            self.server.due(self, gone)
            return
        try:
            future = pool.submit(self._advance, gone)
        except RuntimeError:  # the pool is shut down (the server stopped): finish the request here
            self._advance(gone)
            return
        future.add_done_callback(self._from_pool)

    def _from_pool(self, future: Future[Park | None]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed (the server stopped meanwhile)
            self.loop.call_soon_threadsafe(self._stepped, future.result())

    def _advance(self, gone: bool | None) -> Park | None:
        """One step of the request (on a pool thread): the park it yields, or None once it ended."""
        answering = self._answering
        if answering is None:
            return None
        _local.notes = self.notes
        try:
            return answering.send(gone)  # type: ignore[arg-type]  # (None starts it)
        except StopIteration:
            return None
        except BaseException:  # the handler's own net catches every error: this is a bug here
            log.exception("%s: internal error answering %s", self.server.name, self.peer)
            if self._handler is not None:
                self._handler.close_connection = True
            return None
        finally:
            _local.notes = None

    def _stepped(self, park: Park | None) -> None:
        h = self._handler
        if h is not None:
            self._flush(h)
        if park is not None:
            self._park(park)
            return
        self._answering = None
        self._handler = None
        if h is not None and h.entered:
            self._written(h)
        if self.state == _CLOSED:
            return
        if h is None or h.close_connection or self.eof or self.server.closing():
            self.close()
            return
        self.state = _HEAD
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        self._idle(self.server.idle_timeout)
        if self.buf:
            self._read_head()  # a pipelined request, read while this one was answered

    def _lost(self, park: Park | None, fault: errors.FleetError) -> None:
        """The turn this step ran in lost what it wrote or read (:class:`Turn`): whatever it answered
        is replaced by ``fault`` and the connection ends (what it noted of its answers goes too);
        a request that had parked is ended first."""
        answering = self._answering
        if park is not None and answering is not None:
            with contextlib.suppress(Exception):
                answering.close()  # (its own ``finally`` runs: what the request took is given back)
        h = self._handler
        if h is not None:
            h.out.clear()
            h.close_connection = True
            h.respond_error(fault)
        self._stepped(None)

    def _park(self, park: Park) -> None:
        if self.eof or self.state == _CLOSED:
            self._step(True)
            return
        if not park.arm(functools.partial(self.server.waker.wake, self)):
            self._step(False)
            return
        self._parked = park
        self.server.parked += 1
        self._park_timer = self.loop.call_later(max(0.0, park.timeout), self.unpark, False)

    def unpark(self, gone: bool) -> None:
        """Resume the parked request (on the loop): ``gone``, its client hung up."""
        park = self._parked
        if park is None:
            return
        self._parked = None
        self.server.parked -= 1
        if self._park_timer is not None:
            self._park_timer.cancel()
            self._park_timer = None
        park.disarm()
        self._step(gone or self.eof)

    # -- writing

    def _flush(self, h: Handler) -> None:
        if h.out:
            data = b"".join(h.out) if len(h.out) > 1 else h.out[0]
            h.out.clear()
            self.write(data)

    def write(self, data: bytes) -> None:
        t = self.transport
        if t is not None and not t.is_closing():
            t.write(data)

    def send_now(self, data: bytes) -> None:
        """Write ``data`` from any thread, at once (a stream's events); ConnectionError when the
        client has gone or has left :data:`STREAM_BUFFER` bytes unread."""
        t = self.transport
        if t is None or t.is_closing() or self.state == _CLOSED:
            raise ConnectionResetError("the client has gone")
        if t.get_write_buffer_size() > STREAM_BUFFER:
            self.loop.call_soon_threadsafe(self.abort)
            raise ConnectionResetError("the client does not read what it is sent")
        if threading.get_ident() == self.server.waker.thread_id:
            t.write(data)
        else:
            self.loop.call_soon_threadsafe(self.write, data)

    def close(self) -> None:
        if self.transport is not None and self.state != _CLOSED:
            self.state = _CLOSED if self._answering is None else self.state
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def end(self) -> None:
        """At the server's stop: a request still parked is resumed (gone), the connection closed."""
        self.unpark(True)
        if self._answering is None:
            self.close()


@functools.cache
def _status_lines(status: int, server: str) -> str:
    """An answer's status line and ``Server`` header, each with its CRLF."""
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    return f"HTTP/1.1 {status} {reason}\r\nServer: {server}\r\n"


class Handler:
    """One request on a connection. Subclasses implement :meth:`handle_request` and may override the
    hooks :meth:`admit` (refuse a request before it counts as in flight), :meth:`standard_headers`
    (headers every response of theirs carries) and :meth:`request_done`.

    The request's head is in ``command``, ``path`` (the target, origin-form), ``request_version``
    and ``headers``; ``close_connection`` says whether the connection ends after the answer."""

    protocol_version = "HTTP/1.1"
    server_version = "fleet"
    server: Server

    def __init__(self, conn: _Connection) -> None:
        self.server = conn.server
        self._conn = conn
        self.client_address: Any = conn.peer
        self.plaintext = conn.plaintext
        """A plain-HTTP client on a TLS listener: every request it sends is refused (400), none runs."""
        self.close_connection = True
        self.command = ""
        self.path = ""
        self.request_version = "HTTP/0.9"
        self.requestline = ""
        self.headers = _NO_HEADERS
        self.expect_continue = False
        self.entered = False
        """Counted in flight (:meth:`Server.enter`): until its answer is written or the client gone."""
        self.out: list[bytes] = []
        """What the request answered so far, written when its step ends (one write per response)."""

    def address_string(self) -> str:
        return str(self.client_address[0]) if self.client_address else ""

    # -- the head

    def parse(self, head: bytes) -> int | None:
        """Parse a complete head: the body's length, or None when refused (answered; closing)."""
        text = head.decode("iso-8859-1")
        first, _, fields = text.partition("\n")
        if not self._request_line(first):
            return None
        if (
            len(text) <= MAX_HEADER_LINE
            and fields.count("\n") <= MAX_HEADERS + 1
            and _FIELDS.fullmatch(fields)
        ):
            # every line a token, a colon and a value, none too long, not too many: one pass
            if not self._fields([(n.lower(), v.strip(" \t")) for n, v in _FIELD.findall(fields)]):
                return None
        elif not self._header_lines(fields.split("\n")):
            return None
        if self.command not in _ANSWERED and self.command not in _REFUSED:
            self.send_error(HTTPStatus.NOT_IMPLEMENTED, f"Unsupported method ({self.command!r})")
            return None
        return self.body_length()

    def _request_line(self, raw: bytes | str) -> bool:
        """The stdlib's rules for the request line (version, HTTP/0.9, keep-alive by version)."""
        if len(raw) > MAX_HEADER_LINE:
            self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
            return False
        requestline = (raw if isinstance(raw, str) else str(raw, "iso-8859-1")).rstrip("\r\n")
        self.requestline = requestline
        words = requestline.split()
        version = "HTTP/0.9"
        if not words:
            return False
        if len(words) == 3 and words[2] == "HTTP/1.1":  # (what every client sends: the rules' outcome)
            self.close_connection = False
            self.request_version = "HTTP/1.1"
        elif len(words) >= 3:  # enough to determine the protocol version
            version = words[-1]
            number = version[5:].split(".") if version.startswith("HTTP/") else []
            if len(number) != 2 or not all(n.isdigit() and len(n) <= 10 for n in number):
                self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request version ({version!r})")
                return False
            major, minor = int(number[0]), int(number[1])
            if (major, minor) >= (1, 1):
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
        return True

    def _header_lines(self, lines: list[str]) -> bool:
        """The head's header lines (decoded as ISO-8859-1, split at each LF)."""
        items: list[tuple[str, str]] = []
        token = _TOKEN.fullmatch
        for line in lines:
            if len(line) > MAX_HEADER_LINE:
                self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Line too long")
                return False
            if line == "\r" or not line:
                break
            if len(items) >= MAX_HEADERS:
                self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Too many headers")
                return False
            text = line.rstrip("\r")
            name, sep, value = text.partition(":")
            # A line two parsers could read two ways is refused (RFC 9112 5.1, 5.2): a folded
            # continuation, a line without a colon, a name with spaces before its colon.
            if not sep or not token(name):
                why = "a folded header line" if text[:1] in (" ", "\t") else f"bad header line {text[:100]!r}"
                self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request head: {why}")
                return False
            items.append((name.lower(), value.strip(" \t")))
        return self._fields(items)

    def _fields(self, items: list[tuple[str, str]]) -> bool:
        """The head's headers read: (lower-case name, value) in the order received."""
        self.headers = Headers(items)
        if len(self.headers.get_all("Host") or []) > 1:
            self.send_error(HTTPStatus.BAD_REQUEST, "Bad request head: two Host headers")
            return False
        conntype = (self.headers.get("Connection") or "").lower()
        if conntype == "close":
            self.close_connection = True
        elif conntype == "keep-alive":
            self.close_connection = False
        expect = (self.headers.get("Expect") or "").lower()
        self.expect_continue = expect == "100-continue" and self.request_version >= "HTTP/1.1"
        return True

    def body_length(self) -> int | None:
        """The body's length by the rules above, or None when refused (answered; closing). A length
        over the limit is returned as it is: the connection refuses it (413) and drains it."""
        if self.headers.get("Transfer-Encoding"):
            self.refuse(errors.UsageError("chunked request bodies are not supported: send Content-Length"))
            return None
        lengths = self.headers.get_all("Content-Length") or []
        if len(lengths) > 1:
            self.refuse(errors.UsageError("two Content-Length headers: send one"))
            return None
        raw = lengths[0] if lengths else None
        if raw is None:
            return 0
        if not _LENGTH.fullmatch(raw.strip()):
            self.refuse(errors.UsageError(f"bad Content-Length {raw!r}"))
            return None
        return int(raw)

    def refuse_too_large(self, length: int) -> None:
        limit = self.server.body_limit
        note = f": {self.server.limit_note}" if self.server.limit_note else ""
        self.refuse(
            errors.PayloadTooLarge(f"request body of {length} bytes is over the limit of {limit}{note}")
        )

    # -- hooks

    def handle_request(self, body: bytes) -> Answering | None:
        """Answer one request whose body was read; a generator to park (yield a :class:`Park`).
        Raise a FleetError to answer with it."""
        raise errors.HttpError(405, f"{self.command} is not supported")

    def admit(self) -> bool:
        """False to refuse the request before it counts as in flight (having answered it)."""
        return True

    def standard_headers(self, headers: Sequence[Header]) -> list[Header]:
        """Headers added to every response, given the response's own ``headers``."""
        return []

    def request_done(self) -> None:
        """Called after every request that was admitted, however it ended (answered, refused,
        failed, the client gone), on the thread that ran its last step: where a subclass gives back
        what the request took (the daemon: its read connection), so that nothing is held between
        a keep-alive connection's requests."""

    # -- writing

    def _head(self, status: int, headers: Sequence[Header]) -> bytes:
        standard = self.standard_headers(headers)
        lines = "".join([f"{k}: {v}\r\n" for k, v in (*standard, *headers)])
        return (_status_lines(status, self.server_version) + lines + "\r\n").encode("latin-1")

    def respond(self, status: int, body: bytes, content_type: str, headers: Sequence[Header] = ()) -> None:
        """One complete response, written in one ``send`` (headers only for ``HEAD``)."""
        hdrs = [("Content-Type", content_type), ("Content-Length", str(len(body))), *headers]
        if self.close_connection:
            hdrs.append(("Connection", "close"))
        if self.command == "HEAD":
            body = b""  # a HEAD answer has the headers only, or a keep-alive client desyncs
        self.out.append(self._head(status, hdrs) + body)

    def respond_json(self, status: int, payload: Any, headers: Sequence[Header] = ()) -> None:
        self.respond(status, json_bytes(payload), "application/json", headers)

    def respond_error(self, exc: errors.FleetError) -> None:
        status, kind = errors.status_of(exc)
        self.respond_json(status, ErrorEnvelope(error=ErrorBody(kind=kind, message=exc.message)))

    def write_head(self, status: int, headers: Sequence[Header]) -> None:
        """The head of a streamed answer (no Content-Length: it ends with the connection), sent at once."""
        self.close_connection = True
        self.send_now(self._head(status, headers))

    def send_now(self, data: bytes) -> None:
        """Part of a streamed answer, sent at once; ConnectionError when the client has gone."""
        if self.out:  # what was answered before goes first
            pending = b"".join(self.out)
            self.out.clear()
            self._conn.send_now(pending)
        self._conn.send_now(data)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Malformed HTTP (bad request line, oversized headers): a JSON error, then close."""
        self.close_connection = True
        self.respond_error(errors.HttpError(code, message or HTTPStatus(code).phrase))

    def refuse(self, exc: errors.FleetError) -> None:
        self.close_connection = True
        self.respond_error(exc)

    # -- dispatch

    def host_ok(self) -> bool:
        """The :class:`HostRule` check; a refusal is answered (421) and closes the connection.
        A plain-HTTP request on a TLS listener is refused here too (400)."""
        if self.plaintext:
            self.refuse(
                errors.UsageError(
                    "this server speaks HTTPS only: use https:// with its certificate fingerprint"
                    " (https://HOST:PORT#sha256=…, or `fleet remote join`)"
                )
            )
            return False
        host = self.headers.get("Host")
        if self.server.host_rule.allows(host):
            return True
        self.refuse(
            errors.HttpError(
                421,
                f"this server does not answer to the name {(host or '')[:100]!r}: use the address it"
                " listens on (or start it with --host-name NAME)",
                "forbidden",
            )
        )
        return False

    def answer(self, body: bytes) -> Answering:
        """The whole request, its body read: the checks, then :meth:`handle_request` (resumed across
        its parks), then :meth:`request_done` however it ended."""
        if not self.host_ok():
            return
        if self.command in _REFUSED:
            self.respond_error(errors.HttpError(405, f"{self.command} is not supported"))
            return
        if not self.admit():
            return
        if not self.server.enter():
            self.close_connection = True
            self.respond_error(errors.DaemonUnreachable("the daemon is shutting down"))
            return
        self.entered = True  # in flight until its answer is written (the connection says when)
        try:
            parking = self.handle_request(body)
            if parking is not None:
                yield from parking
        except errors.FleetError as exc:
            self.respond_error(exc)
        except (ConnectionError, TimeoutError):
            self.close_connection = True  # the client went away mid-answer
        except Exception:
            log.exception("%s: internal error on %s %s", self.server.name, self.command, self.path)
            self.respond_error(errors.FleetError("internal error: see the daemon log (`fleet paths`)"))
        finally:
            self.request_done()


class Server:
    """One listener and the event loop that serves it. ``closing`` says when new requests get a 503
    (the owner's shutdown flag).

    ``body_limit`` is the largest request body taken; ``limit_note`` is appended to the 413 message
    (what the limit is made of). ``name`` prefixes log lines and names the loop's thread.
    ``workers``: the handlers' pool, all of its threads started at once (0: run them on the loop).
    """

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
        workers: int = WORKERS,
    ) -> None:
        if not idle_timeout > 0:
            raise errors.UsageError("the idle timeout must be a positive number of seconds")
        self.handler = handler
        self.name = name
        self.body_limit = body_limit
        self.limit_note = limit_note
        self.idle_timeout = idle_timeout
        self.closing = closing
        self.host_rule = HostRule(addr[0], host_names)
        self.tls = tls
        """Serve HTTPS with this context (a plain-HTTP client gets its requests refused)."""
        family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(queue)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self.socket = sock
        self.server_address: tuple[Any, ...] = sock.getsockname()
        one_malloc_arena()
        self.loop = asyncio.new_event_loop()
        self.waker = _Waker(self.loop)
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix=f"{name}-worker") if workers else None
        if self.pool is not None:  # every worker from the start: an idle server's footprint is its busy one's
            ready = threading.Barrier(workers + 1)
            for _ in range(workers):
                self.pool.submit(ready.wait)
            ready.wait()
        self._listener: asyncio.AbstractServer | None = None
        self._conns: set[_Connection] = set()
        self.connections = 0
        """Client connections open now."""
        self.parked = 0
        """Requests parked now (on the loop; holding no thread)."""
        self._peak = 0
        """The most connections open at once since the last :meth:`after_burst`."""
        self._quiet: asyncio.TimerHandle | None = None
        self._inflight = 0
        self._inflight_cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._ending = False
        """:meth:`server_close` asked the loop to end (set before it schedules the stop)."""
        self._due: list[tuple[_Connection, bool | None]] = []
        """Steps to run in the loop's next turn (:meth:`due`), in the order they came."""

    @property
    def url(self) -> str:
        """``http(s)://host:port`` of the bound socket (IPv6 hosts in brackets)."""
        host, port = self.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else str(host)
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"

    # -- lifecycle

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Run the loop in this thread until :meth:`stop` (``poll_interval`` is not used: the loop
        wakes on what happens, not on a timer)."""
        self._thread = self._thread or threading.current_thread()
        self.waker.thread_id = threading.get_ident()
        asyncio.set_event_loop(self.loop)
        listen = self.loop.create_task(self._listen())
        try:
            try:
                self.loop.run_until_complete(listen)
            except RuntimeError:
                if listen.done():
                    raise
                # stopped (server_close: loop.stop) before it listened, as a daemon stopped while it
                # starts: nothing was served, nothing to run; not an error in the loop's thread
                listen.cancel()
            else:
                if not self._ending:  # (else its stop was taken by run_until_complete's last turn)
                    self.loop.run_forever()
        finally:
            try:
                for conn in list(self._conns):
                    conn.end()
                self.loop.run_until_complete(self._closed_all(STOP_DRAIN))
                # what is still under way on the loop (a TLS handshake a client left half done) ends
                # here, its socket closed while the loop can still do it
                left = asyncio.all_tasks(self.loop)
                for task in left:
                    task.cancel()
                self.loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            finally:
                self.socket.close()
                self.loop.close()
                self._stopped.set()

    async def _closed_all(self, seconds: float) -> None:
        """Until every connection has closed (what they still had to write, written), at most ``seconds``."""
        deadline = time.monotonic() + seconds
        while self._conns and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def _listen(self) -> None:
        if self.tls is None:
            self._listener = await self.loop.create_server(lambda: _Connection(self), sock=self.socket)
        else:  # each connection's first byte says TLS or not: accepted here, then sniffed
            self.loop.add_reader(self.socket.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(64):
            try:
                conn, _addr = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. out of descriptors: the next accept may do
                log.warning("%s: accepting a connection: %s", self.name, exc)
                return
            conn.setblocking(False)
            self._sniff(conn)

    def _sniff(self, conn: socket.socket) -> None:
        fd = conn.fileno()

        def give_up() -> None:
            self.loop.remove_reader(fd)
            conn.close()

        timer = self.loop.call_later(self.idle_timeout, give_up)

        def readable() -> None:
            self.loop.remove_reader(fd)
            timer.cancel()
            try:
                first = conn.recv(1, socket.MSG_PEEK)
            except BlockingIOError:
                self.loop.add_reader(fd, readable)
                return
            except OSError:
                first = b""
            if not first:
                conn.close()
                return
            tls = first == b"\x16"  # a TLS handshake record; anything else is plain HTTP (or noise)
            coro = self.loop.connect_accepted_socket(
                lambda: _Connection(self, plaintext=not tls),
                conn,
                ssl=self.tls if tls else None,
                ssl_handshake_timeout=self.idle_timeout if tls else None,
            )
            self.loop.create_task(coro).add_done_callback(self._handshaken)

        self.loop.add_reader(fd, readable)

    def _handshaken(self, task: asyncio.Task[Any]) -> None:
        exc = task.exception() if not task.cancelled() else None
        if exc is not None:  # e.g. the client refused our certificate (it pins another)
            log.debug("%s: TLS handshake failed: %s", self.name, exc)

    def start(self) -> threading.Thread:
        """Serve in a daemon thread; the socket listens already (connections queue until the loop runs)."""
        thread = threading.Thread(target=self.serve_forever, name=self.name, daemon=True)
        self._thread = thread
        thread.start()
        return thread

    def stop(self, timeout: float, progress: Callable[[int], None] | None = None) -> None:
        """Stop accepting, wait up to ``timeout`` s for the requests in flight, close the listener.

        The owner sets ``closing`` first (and wakes what waits on it), so requests that still
        arrive on kept-alive connections are answered 503. ``progress(n)`` is told the number in
        flight at first and whenever it drops. Not from the loop's own thread.
        """
        self._call(self._stop_accepting)
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

    def _call(self, fn: Callable[[], None]) -> None:
        if self._stopped.is_set():
            return
        with contextlib.suppress(RuntimeError):  # closed already
            self.loop.call_soon_threadsafe(fn)

    def _stop_accepting(self) -> None:
        if self._quiet is not None:
            self._quiet.cancel()
            self._quiet = None
        if self._listener is not None:
            self._listener.close()
        elif self.tls is not None:
            self.loop.remove_reader(self.socket.fileno())

    def server_close(self) -> None:
        """End the loop (each connection closed, a request still parked resumed as gone) and the pool."""
        if self._thread is None:  # never served
            self.socket.close()
            self.loop.close()
            self._stopped.set()
        else:
            self._ending = True  # before the stop is scheduled: serve_forever checks it after listening
            self._call(self.loop.stop)
            if self._thread is not threading.current_thread():
                self._stopped.wait(10)
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)

    # -- steps on the loop (no pool)

    def turn(self) -> contextlib.AbstractContextManager[Turn]:
        """What the steps of one turn share, entered before the first and left after the last,
        before any of their answers is written. This one shares nothing; the daemon's makes their
        writes one transaction (:meth:`fleet.store.Store.group`)."""
        return contextlib.nullcontext(_NoTurn())

    def due(self, conn: _Connection, gone: bool | None) -> None:
        """Run a step of ``conn``'s request in the loop's next turn, with every other step due
        then: the requests whose bodies one wake-up of the loop read run together, in one
        :meth:`turn`, and their answers are written once it is over."""
        self._due.append((conn, gone))
        if len(self._due) == 1:
            self.loop.call_soon(self._run_due)

    def _run_due(self) -> None:
        due, self._due = self._due, []
        ran: list[tuple[_Connection, Park | None, range]] = []
        with self.turn() as turn:
            for conn, gone in due:
                mark = turn.mark()
                park = conn._advance(gone)
                ran.append((conn, park, turn.span(mark)))
        for conn, park, span in ran:
            fault = turn.fault(span)
            if fault is None:
                conn._stepped(park)
            else:
                conn._lost(park, fault)

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

    # -- bursts (on the loop)

    def opened(self, conn: _Connection) -> None:
        self._conns.add(conn)
        self.connections += 1
        self._peak = max(self._peak, self.connections)

    def closed(self, conn: _Connection) -> None:
        """A connection ended: once a burst of them has (at least :data:`BURST` fewer open than at
        the peak, and at most a quarter of it), :meth:`after_burst` runs :data:`QUIET` s later."""
        self._conns.discard(conn)
        self.connections -= 1
        ended = self._peak - self.connections >= BURST and self.connections * 4 <= self._peak
        if ended and self._quiet is None:
            self._quiet = self.loop.call_later(QUIET, self._burst_over)

    def _burst_over(self) -> None:
        self._quiet = None
        self._peak = self.connections
        # in a thread of its own: it collects garbage and walks the C heap (tens of ms)
        threading.Thread(target=self._after_burst, name=f"{self.name}-give-back", daemon=True).start()

    def _after_burst(self) -> None:
        try:
            self.after_burst()
        except Exception:
            log.exception("%s: giving back memory after a burst", self.name)

    def after_burst(self) -> None:
        """A burst of connections is over: give the memory they used back to the system
        (:func:`give_back_memory`). Subclasses give back their own caches first."""
        give_back_memory()
