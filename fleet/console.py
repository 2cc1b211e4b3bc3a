"""The operator console: the waves in a browser, served by the daemon on a listener of its own.

``fleet daemon run --ui 127.0.0.1:8087`` starts it; without ``--ui`` nothing listens. The page is
one HTML shell, one script and one stylesheet shipped in ``fleet/console_assets`` (no build step, no
CDN). What a caller (and an operator) may rely on:

- **Addresses.** Loopback unless a non-loopback address is asked for explicitly (``allow_remote``).
  On a loopback address, a request whose ``Host`` is not a loopback name with the console's port is
  refused (a DNS-rebinding page cannot reach it under another name).
- **Login.** At start the console logs a one-time link ``/login?nonce=…``. Visiting it consumes the
  nonce, sets an ``HttpOnly; SameSite=Strict`` session cookie and redirects to the console. The
  unauthenticated page also takes the operator token itself (a form ``POST``), so a second browser
  or a lost link needs no restart. Sessions live in memory: a restart logs everyone out.
- **Nothing without the cookie.** Without a valid session every path answers ``401``: the shell and
  its assets included (they get a minimal login page that carries no data), the API and the event
  stream (a JSON error).
- **Origin.** Every ``POST`` must carry an ``Origin`` equal to the origin it was sent to, or it is
  refused with ``403`` before anything runs.
- **Same powers, same API.** ``/api/v1/…`` is the daemon's own HTTP API (``docs/http-api.md``), run
  through :meth:`fleet.daemon.Daemon.dispatch` as the operator, so a post, fork, invite, leave,
  surface or replace from the page has exactly the semantics (and wake-ups and presence effects) of
  the same call from the CLI or a channel. Only the routes the page uses are exposed (no tokens).
- **Live transcripts.** ``GET /api/console/waves/{wave}/events`` is a Server-Sent Events stream of
  the wave: ``blip`` events (every blip, replaced versions included, ``id:`` = the blip id),
  ``tree`` (the wave with its wavelets and rosters, when it changes), ``presence`` (when a state
  changes) and a ``: keep-alive`` comment after ``keepalive`` seconds of silence. It resumes from
  ``Last-Event-ID`` (or ``?after=``): blip ids increase strictly in commit order, so a reconnect gets
  exactly the blips it missed. Without either it starts at the wave's newest blip and says so in a
  first ``ready`` event that carries that id, so even an early reconnect resumes correctly. Streams
  wake on the daemon's :class:`~fleet.daemon.Notifier`, never by polling, and end after
  ``max_stream`` seconds (browsers reconnect on their own, with ``Last-Event-ID``).
- **History pages.** ``GET /api/console/wavelets/{wavelet}/tail?before=ID&limit=N`` returns the newest
  ``N`` current blips before ``ID`` (the page renders the tail and pages back on scroll).
"""

from __future__ import annotations

import hashlib
import hmac
import html
import json
import logging
import re
import secrets
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from fleet import __version__, errors
from fleet.ids import is_id_like
from fleet.models import OPERATOR, Blip, PresenceList, jsonable
from fleet.store import OPERATOR_PRINCIPAL, Store
from fleet.wire import record

if TYPE_CHECKING:
    from fleet.daemon import Daemon

log = logging.getLogger(__name__)

KEEPALIVE = 15.0
"""Seconds of silence after which an event stream sends a ``: keep-alive`` comment."""
TAIL_LIMIT = 200
TAIL_MAX = 1000
STREAM_BATCH = 500
RETRY_MS = 1000
"""What the stream tells EventSource to wait before reconnecting."""
MAX_STREAM = 600.0
"""Seconds a stream lives before the console ends it (the browser resumes at once, missing nothing).
Bounds how long a client that vanished without a word can hold a thread."""

ASSETS: dict[str, str] = {
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""No inline script or style runs, even if some text were ever injected as markup."""

LOGIN_CSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
"""The login page has no script at all; its few inline styles are all it needs."""

SECURITY_HEADERS = (
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
)

# The daemon routes the page may use, as (method, path pattern). Token routes are deliberately absent.
_SEG = r"[^/]+"
_PROXIED: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (m, re.compile(p))
    for m, p in (
        ("GET", r"/v1/whoami"),
        ("GET", r"/v1/waves"),
        ("GET", rf"/v1/waves/{_SEG}"),
        ("GET", rf"/v1/waves/{_SEG}/presence"),
        ("GET", r"/v1/resolve"),
        ("GET", rf"/v1/wavelets/{_SEG}"),
        ("GET", rf"/v1/wavelets/{_SEG}/blips"),
        ("GET", rf"/v1/wavelets/{_SEG}/context"),
        ("GET", rf"/v1/blips/{_SEG}"),
        ("GET", rf"/v1/blips/{_SEG}/history"),
        ("POST", rf"/v1/wavelets/{_SEG}/blips"),
        ("POST", rf"/v1/wavelets/{_SEG}/fork"),
        ("POST", rf"/v1/wavelets/{_SEG}/invite"),
        ("POST", rf"/v1/wavelets/{_SEG}/leave"),
        ("POST", rf"/v1/wavelets/{_SEG}/surface"),
        ("POST", rf"/v1/blips/{_SEG}/replace"),
    )
)
_TAIL = re.compile(r"/api/console/wavelets/([^/]+)/tail")
_EVENTS = re.compile(r"/api/console/waves/([^/]+)/events")


# ---------------------------------------------------------------- shapes the page reads


@record
class TailPage:
    """A page of a wavelet's history, oldest first; ``more`` says older blips exist."""

    blips: list[Blip]
    more: bool


@record
class StreamReady:
    """The first event of a stream opened without a cursor: where it starts (a blip id, or '')."""

    cursor: str


# ---------------------------------------------------------------- helpers


def parse_ui_address(ui: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT`` → (host, port); a missing host is ``127.0.0.1``."""
    from fleet.daemon import parse_listen

    text = ui.strip()
    if text.isdigit():
        text = f"127.0.0.1:{text}"
    try:
        return parse_listen(text)
    except errors.UsageError:
        raise errors.UsageError(f"--ui takes HOST:PORT or PORT, e.g. 127.0.0.1:8087, not {ui!r}") from None


def _dumps(obj: Any) -> str:
    return json.dumps(jsonable(obj), separators=(",", ":"))


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _asset(name: str) -> bytes:
    return resources.files("fleet").joinpath("console_assets", name).read_bytes()


def login_page(message: str) -> bytes:
    """The only page served without a session: no data, a way to log in, nothing else."""
    text = html.escape(message)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width, initial-scale=1'>"
        "<link rel=icon href='data:,'><title>fleet console: log in</title></head>"
        "<body style='font:15px system-ui,sans-serif;max-width:34em;margin:4em auto;padding:0 1em'>"
        "<h1 style='font-size:1.3em'>fleet console</h1>"
        f"<p id=login-message>{text}</p>"
        "<p>Log in with the one-time link the daemon printed when it started (its log says"
        " <code>console: log in at …</code>), or paste the operator token (the file"
        " <code>operator.token</code> in the daemon's data dir; <code>fleet paths</code> shows it).</p>"
        "<form method=post action=/login><input name=token type=password autocomplete=off"
        " aria-label='operator token' placeholder='operator token' style='width:22em'>"
        " <button>Log in</button></form></body></html>"
    ).encode()


# ---------------------------------------------------------------- the console


class Console:
    """The console server of one :class:`~fleet.daemon.Daemon` (which must be open: store and token).

    ``start()`` binds and serves in a thread; ``stop()`` ends every stream and request. The daemon
    owns both calls when it is given ``ui=``.
    """

    def __init__(
        self,
        daemon: Daemon,
        listen: str,
        *,
        allow_remote: bool = False,
        keepalive: float = KEEPALIVE,
        max_stream: float = MAX_STREAM,
    ) -> None:
        from fleet.daemon import is_loopback

        host, port = parse_ui_address(listen)
        if not is_loopback(host) and not allow_remote:
            raise errors.UsageError(
                f"refusing to serve the console on non-loopback address {host}: pass --ui {host}:{port}"
                " explicitly to open it to other machines (it is plain HTTP: prefer an SSH tunnel)"
            )
        self.daemon = daemon
        self.host, self.port = host, port
        self.loopback = is_loopback(host)
        self.keepalive = keepalive
        self.max_stream = max_stream
        self.url = ""
        self.cookie_name = ""
        self._nonces: set[str] = set()
        self._sessions: dict[str, float] = {}
        self._lock = threading.Lock()
        self._closing = False
        self._inflight = 0
        self._inflight_cond = threading.Condition()
        self._httpd: _ConsoleServer | None = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> str:
        """Bind, serve in a thread, log the one-time login link and return it."""
        try:
            httpd = _ConsoleServer((self.host, self.port), self)
        except OSError as exc:
            raise errors.UsageError(
                f"cannot serve the console on {self.host}:{self.port}: {exc.strerror or exc}:"
                " pick another --ui address (port 0 takes any free one)"
            ) from None
        self._httpd = httpd
        host, port = httpd.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else str(host)
        self.port = int(port)
        self.url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
        # Cookies are per host, not per port: a name per port keeps two consoles from clobbering.
        self.cookie_name = f"fleet_console_{port}"
        self._thread = threading.Thread(
            target=httpd.serve_forever, args=(0.05,), name="fleet-console", daemon=True
        )
        self._thread.start()
        link = self.login_link()
        if not self.loopback:
            log.warning("console: %s is not loopback and the console speaks plain HTTP", self.url)
        log.info("console: log in at %s (one-time link)", link)
        return link

    def login_link(self) -> str:
        """Mint another one-time login link (each link works once)."""
        nonce = secrets.token_urlsafe(32)
        with self._lock:
            self._nonces.add(_digest(nonce))
        return f"{self.url}/login?nonce={nonce}"

    def stop(self, timeout: float = 10.0) -> None:
        """End every stream, let in-flight requests finish, close the listener. Idempotent."""
        if self._httpd is None or self._closing:
            return
        self._closing = True
        self.daemon.notifier.bump()  # wake the streams so they see _closing
        if threading.current_thread() is not self._thread:
            self._httpd.shutdown()
        with self._inflight_cond:
            self._inflight_cond.wait_for(lambda: self._inflight == 0, timeout)
        self._httpd.server_close()
        with self._lock:
            self._sessions.clear()
            self._nonces.clear()
        log.info("console stopped")

    @property
    def closing(self) -> bool:
        return self._closing or self.daemon.notifier.closing

    def _enter(self) -> bool:
        with self._inflight_cond:
            if self.closing:
                return False
            self._inflight += 1
            return True

    def _leave(self) -> None:
        with self._inflight_cond:
            self._inflight -= 1
            self._inflight_cond.notify_all()

    # ---------------------------------------------------------------- sessions

    def consume_nonce(self, nonce: str) -> str | None:
        """A new session id if ``nonce`` is a live login nonce (which it then no longer is)."""
        with self._lock:
            key = _digest(nonce)
            if key not in self._nonces:
                return None
            self._nonces.discard(key)
        return self._new_session()

    def login_with_token(self, token: str) -> str | None:
        if not hmac.compare_digest(token.strip().encode(), self.daemon.operator_token.encode()):
            return None
        return self._new_session()

    def _new_session(self) -> str:
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions[_digest(sid)] = time.time()
        return sid

    def session_of(self, cookie_header: str | None) -> str | None:
        """The session id the request's cookie carries, if it is a live one."""
        # Parsed by hand: SimpleCookie gives up on the whole header over one odd cookie that some
        # other app on this host set, which would log the operator out for no reason.
        for part in (cookie_header or "").split(";"):
            name, eq, value = part.strip().partition("=")
            if eq and name == self.cookie_name:
                with self._lock:
                    if _digest(value.strip()) in self._sessions:
                        return value.strip()
        return None

    def end_session(self, sid: str) -> None:
        with self._lock:
            self._sessions.pop(_digest(sid), None)

    def cookie(self, sid: str, *, expire: bool = False) -> str:
        life = "; Max-Age=0" if expire else ""
        return f"{self.cookie_name}={sid}; Path=/; HttpOnly; SameSite=Strict{life}"

    # ---------------------------------------------------------------- request checks

    def host_ok(self, host_header: str | None) -> bool:
        """On loopback, only loopback names with our port (defeats DNS rebinding)."""
        if not self.loopback:
            return True
        if not host_header:
            return False
        host, _, port = host_header.strip().lower().rpartition(":")
        host = host.strip("[]")
        return port == str(self.port) and host in ("127.0.0.1", "localhost", "::1")

    @staticmethod
    def same_origin(origin: str | None, host_header: str | None) -> bool:
        """True when ``Origin`` names exactly the origin the request was sent to."""
        if not origin or not host_header:
            return False
        return hmac.compare_digest(origin.strip().lower(), f"http://{host_header.strip().lower()}")

    # ---------------------------------------------------------------- API

    def proxy(self, method: str, target: str, body: bytes) -> tuple[int, Any]:
        """Run one daemon API call (``target`` without the ``/api`` prefix) as the operator."""
        path = urlsplit(target).path
        if not any(m == method and p.fullmatch(path) for m, p in _PROXIED):
            raise errors.NotFound(f"the console does not expose {method} {path}")
        headers = {"Authorization": f"Bearer {self.daemon.operator_token}"}
        return self.daemon.dispatch(method, target, headers, body)

    def tail(self, wavelet: str, query: dict[str, str]) -> TailPage:
        store = self._store()
        wl = store.resolve(OPERATOR_PRINCIPAL, wavelet)  # a wavelet that is not there: 404 first
        before = query.get("before") or None
        if before is not None and not is_id_like(before):
            raise errors.UsageError(f"before={before!r} is not a blip id")
        raw = query.get("limit") or str(TAIL_LIMIT)
        if not raw.isdigit():
            raise errors.UsageError(f"limit={raw!r} is not a positive integer")
        limit = max(1, min(int(raw), TAIL_MAX))
        blips = store.read_tail(OPERATOR_PRINCIPAL, wl.id, before=before, limit=limit + 1)
        more = len(blips) > limit
        return TailPage(blips=blips[1:] if more else blips, more=more)

    def _store(self) -> Store:
        store = self.daemon.store
        if store is None:
            raise errors.DaemonUnreachable("the daemon is not open")
        return store

    def presence(self, wave_id: str) -> PresenceList:
        store = self._store()
        names = [n for n, _k in store.participants(OPERATOR_PRINCIPAL, wave_id) if n != OPERATOR]
        return PresenceList(presence=self.daemon.presence.rows(wave_id, names))

    def stream(self, wave: str, cursor: str | None, emit: _Emitter) -> None:
        """Serve one wave's event stream through ``emit`` until the client goes or the daemon stops.

        ``cursor`` is the last blip id the client has (``None``: start now). Raises NotFound before
        anything is emitted if the wave does not exist.
        """
        store = self._store()
        w = store.get_wave(OPERATOR_PRINCIPAL, wave)
        emit.open()
        emit.write(f"retry: {RETRY_MS}\n\n")
        if cursor is None:
            cursor = store.wave_head(OPERATOR_PRINCIPAL, w.id)
            emit.event("ready", StreamReady(cursor=cursor), event_id=cursor)
        last_tree = last_presence = ""
        quiet_since = time.monotonic()
        ends = quiet_since + self.max_stream
        while not self.closing and time.monotonic() < ends:
            seen = self.daemon.notifier.seq
            blips = store.read_wave_after(OPERATOR_PRINCIPAL, w.id, cursor, limit=STREAM_BATCH)
            for b in blips:
                emit.event("blip", b, event_id=b.id)
                cursor = b.id
            tree = store.get_wave(OPERATOR_PRINCIPAL, w.id)
            tree_json = _dumps(tree)
            if tree_json != last_tree:
                emit.raw_event("tree", tree_json)
                last_tree = tree_json
            pres = self.presence(w.id)
            states = _dumps([(r.participant, r.state) for r in pres.presence])
            if states != last_presence:
                emit.event("presence", pres)
                last_presence = states
            if emit.wrote:
                emit.flush()
                quiet_since = time.monotonic()
            if len(blips) == STREAM_BATCH:
                continue  # more is waiting: no need to sleep on the notifier
            remaining = self.keepalive - (time.monotonic() - quiet_since)
            if remaining <= 0:
                emit.write(": keep-alive\n\n")
                emit.flush()
                quiet_since = time.monotonic()
                continue
            # Presence TTLs lapse without a commit: the keep-alive wake-up re-evaluates them too.
            self.daemon.notifier.wait(seen, min(remaining, ends - time.monotonic()))


class _Emitter:
    """Writes one SSE response. ``write`` raises ``ConnectionError`` when the client has gone."""

    def __init__(self, handler: _ConsoleHandler) -> None:
        self._h = handler
        self._buf: list[str] = []
        self.wrote = False

    def open(self) -> None:
        self._h.close_connection = True
        self._h.send_head(
            200,
            [
                ("Content-Type", "text/event-stream; charset=utf-8"),
                ("X-Accel-Buffering", "no"),
                ("Connection", "close"),
            ],
        )

    def write(self, text: str) -> None:
        self._buf.append(text)
        self.wrote = True

    def event(self, name: str, payload: object, *, event_id: str | None = None) -> None:
        self.raw_event(name, _dumps(payload), event_id=event_id)

    def raw_event(self, name: str, data: str, *, event_id: str | None = None) -> None:
        # json.dumps never emits a raw newline, so one data: line carries the whole payload.
        head = f"id: {event_id}\n" if event_id is not None else ""
        self.write(f"{head}event: {name}\ndata: {data}\n\n")

    def flush(self) -> None:
        data = "".join(self._buf).encode("utf-8")
        self._buf.clear()
        self.wrote = False
        self._h.wfile.write(data)
        self._h.wfile.flush()


# ---------------------------------------------------------------- HTTP plumbing


class _ConsoleServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], console: Console) -> None:
        self.address_family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
        self.console = console
        super().__init__(addr, _ConsoleHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            log.debug("console client %s went away: %s", client_address, exc)
        else:
            log.exception("console error serving %s", client_address)


class _ConsoleHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = f"fleet-console/{__version__}"
    timeout = 300
    server: _ConsoleServer

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("console %s " + format, self.address_string(), *args)

    # -- writing

    def _head(self, status: int, headers: list[tuple[str, str]], csp: str) -> bytes:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = ""
        lines = [f"HTTP/1.1 {status} {reason}", f"Server: {self.server_version}"]
        lines += [f"{k}: {v}" for k, v in (("Content-Security-Policy", csp), *SECURITY_HEADERS, *headers)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def send_head(self, status: int, headers: list[tuple[str, str]]) -> None:
        """The head of a streamed answer (no Content-Length: the stream ends with the connection)."""
        self.wfile.write(self._head(status, headers, CSP))

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str,
        extra: list[tuple[str, str]] | None = None,
        csp: str = CSP,
    ) -> None:
        headers = [("Content-Type", content_type), ("Content-Length", str(len(body))), *(extra or [])]
        if self.close_connection:
            headers.append(("Connection", "close"))
        head = self._head(status, headers, csp)
        if getattr(self, "command", None) == "HEAD":
            body = b""  # headers only, or a keep-alive client would read the body as the next answer
        try:
            self.wfile.write(head + body)  # one write: no delayed-ACK stall
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _json(self, status: int, payload: Any, extra: list[tuple[str, str]] | None = None) -> None:
        self._send(status, _dumps(payload).encode(), "application/json", extra)

    def _error(self, status: int, kind: str, message: str) -> None:
        self._json(status, {"error": {"kind": kind, "message": message}})

    def _fleet_error(self, exc: errors.FleetError) -> None:
        status, kind = errors.status_of(exc)
        self._error(status, kind, exc.message)

    def _login(self, status: int, message: str, extra: list[tuple[str, str]] | None = None) -> None:
        self._send(status, login_page(message), "text/html; charset=utf-8", extra, csp=LOGIN_CSP)

    def _redirect(self, location: str, extra: list[tuple[str, str]]) -> None:
        self._send(303, b"", "text/plain; charset=utf-8", [("Location", location), *extra])

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Malformed HTTP: a JSON error, then close."""
        self.close_connection = True
        self._error(code, "usage", message or HTTPStatus(code).phrase)

    # -- reading

    def _body(self) -> bytes | None:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            self._error(400, "usage", "chunked request bodies are not supported: send Content-Length")
            return None
        raw = self.headers.get("Content-Length")
        if raw is None:
            return b""
        limit = self.server.console.daemon.max_blip_bytes + 64 * 1024
        if not raw.isdigit() or int(raw) > limit:
            self.close_connection = True
            self._error(413, "too_large", f"request body over {limit} bytes (or bad Content-Length)")
            return None
        return self.rfile.read(int(raw)) if int(raw) else b""

    # -- dispatch

    def _handle(self) -> None:
        console = self.server.console
        body = self._body()
        if body is None:
            return
        if not console.host_ok(self.headers.get("Host")):
            self.close_connection = True
            self._error(421, "forbidden", "this console answers only to its loopback address")
            return
        if not console._enter():
            self.close_connection = True
            self._error(503, "unreachable", "the daemon is shutting down")
            return
        try:
            self._route(console, body)
        except errors.FleetError as exc:
            self._fleet_error(exc)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:
            log.exception("console: internal error on %s %s", self.command, self.path)
            self._error(500, "error", "internal error: see the daemon log (`fleet paths`)")
        finally:
            console._leave()

    def _route(self, console: Console, body: bytes) -> None:
        split = urlsplit(self.path)
        path = split.path
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        method = self.command
        host = self.headers.get("Host")
        if method == "POST" and not console.same_origin(self.headers.get("Origin"), host):
            self._error(403, "forbidden", "cross-origin request refused: use the console's own page")
            return
        if path == "/login":
            self._route_login(console, method, query, body)
            return
        sid = console.session_of(self.headers.get("Cookie"))
        if sid is None:
            if path.startswith("/api/"):
                self._error(401, "unauthorized", "log in with the link the daemon printed at start")
            else:
                self._login(401, "Not logged in.")
            return
        if path == "/logout" and method == "POST":
            console.end_session(sid)
            self._redirect("/", [("Set-Cookie", console.cookie("", expire=True))])
        elif path == "/" and method == "GET":
            self._send(200, _asset("index.html"), "text/html; charset=utf-8")
        elif path.startswith("/assets/") and method == "GET":
            name = path.removeprefix("/assets/")
            if name not in ASSETS:
                raise errors.NotFound(f"no asset {name!r}")
            self._send(200, _asset(name), ASSETS[name])
        elif path.startswith("/api/v1/"):
            status, payload = console.proxy(method, self.path.removeprefix("/api"), body)
            self._json(status, payload)
        elif (m := _TAIL.fullmatch(path)) and method == "GET":
            self._json(200, console.tail(unquote(m[1]), query))
        elif (m := _EVENTS.fullmatch(path)) and method == "GET":
            cursor = self.headers.get("Last-Event-ID") or query.get("after") or None
            if cursor is not None and not is_id_like(cursor):
                raise errors.UsageError(f"cursor {cursor!r} is not a blip id")
            try:
                console.stream(unquote(m[1]), cursor, _Emitter(self))
            except (BrokenPipeError, ConnectionResetError, TimeoutError):
                log.debug("console: event stream client went away")
            self.close_connection = True
        else:
            raise errors.NotFound(f"no such console path {method} {path}")

    def _route_login(self, console: Console, method: str, query: dict[str, str], body: bytes) -> None:
        if method == "GET" and "nonce" in query:
            sid = console.consume_nonce(query["nonce"])
            if sid is None:
                self._login(403, "That login link was already used or is not valid.")
                return
        elif method == "POST":
            form = {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
            sid = console.login_with_token(form.get("token", ""))
            if sid is None:
                self._login(403, "That is not the operator token.")
                return
        else:
            self._login(401, "Not logged in.")
            return
        log.info("console: a browser logged in from %s", self.address_string())
        self._redirect("/", [("Set-Cookie", console.cookie(sid))])

    do_GET = _handle
    do_POST = _handle

    def _unsupported(self) -> None:
        self._body()
        self._error(405, "usage", f"{self.command} is not supported")

    do_PUT = _unsupported
    do_DELETE = _unsupported
    do_PATCH = _unsupported
    do_HEAD = _unsupported
