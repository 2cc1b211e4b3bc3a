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
  through the daemon's own dispatch as the operator, so a post, fork, invite, leave, surface or
  replace from the page has exactly the semantics (and wake-ups and presence effects) of the same
  call from the CLI or a channel. Only the routes the daemon's route table marks ``console`` are
  exposed (no tokens); anything else is ``404``. The page calls them by name: ``/assets/routes.js``
  is generated from :mod:`fleet.routes` (:func:`routes_js`: each console route's method, path
  template and query), and the page's scripts write no ``/v1/`` path of their own.
- **Live transcripts.** ``GET /api/console/waves/{wave}/events`` is a Server-Sent Events stream of
  the wave: ``blip`` events (every blip, replaced versions included, ``id:`` = the blip id),
  ``tree`` (the wave with its wavelets and rosters, when it changes), ``presence`` (when a state
  changes) and a ``: keep-alive`` comment after ``keepalive`` seconds of silence. It resumes from
  ``Last-Event-ID`` (or ``?after=``): blip ids increase strictly in commit order, so a reconnect gets
  exactly the blips it missed. Without either it starts at the wave's newest blip and says so in a
  first ``ready`` event that carries that id, so even an early reconnect resumes correctly. Streams
  wake on the daemon's notifier, never by polling, and end after
  ``max_stream`` seconds (browsers reconnect on their own, with ``Last-Event-ID``).
- **HTTP** is :mod:`fleet.httpbase`'s (bodies, one ``send`` per response, JSON errors, the daemon's
  idle timeout), with a strict ``Content-Security-Policy`` and the headers of
  :data:`SECURITY_HEADERS` on every response.
- **Usage.** ``GET /api/console/waves/{wave}/usage`` is ``fleet usage WAVE --json`` (tokens, turns,
  estimated cost per participant and wavelet) from the transcripts on the daemon's machine; the page
  shows each participant's beside its presence and refreshes it when presence changes.
- **Campaigns.** ``GET /api/console/waves/{wave}/campaign`` is ``fleet campaign status --json`` for
  the campaign the wave carries out (``…/campaign/notes/{n}``: wave n's NOTES.md), read-only; the
  page shows it above the transcript (:mod:`fleet.campaign.consoleview`, ``campaign.js``).
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
import threading
import time
from collections.abc import Generator, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from fleet import __version__, errors, routes
from fleet.campaign import consoleview
from fleet.httpbase import Answering, Handler, Header, Park, Server, is_loopback, parse_listen
from fleet.ids import is_id_like
from fleet.models import OPERATOR, Blip, PresenceList, PresenceRow, jsonable
from fleet.paths import Paths
from fleet.records.permissions import PermissionList
from fleet.store import OPERATOR_PRINCIPAL, Store
from fleet.wire import Record

if TYPE_CHECKING:
    import ssl

log = logging.getLogger(__name__)

WORKERS = 2
"""Threads the console's handlers run on (its usage and campaign views read transcripts and files,
which may take long): its event loop keeps to I/O and parked streams meanwhile."""
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
    "campaign.js": "text/javascript; charset=utf-8",
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
    # same-origin, not no-referrer: with no-referrer Chromium sends `Origin: null` on the page's own
    # form posts (log in with the token, log out), which the Origin check must then refuse.
    ("Referrer-Policy", "same-origin"),
    ("Cache-Control", "no-store"),
)

_TAIL = re.compile(r"/api/console/wavelets/([^/]+)/tail")
_EVENTS = re.compile(r"/api/console/waves/([^/]+)/events")
_USAGE = re.compile(r"/api/console/waves/([^/]+)/usage")


# ---------------------------------------------------------------- what the console needs of its daemon


def tree_key(wave_id: str) -> str:
    """The notifier key a change of ``wave_id``'s tree bumps (a new wave, a fork, a roster change)."""
    return f"tree:{wave_id}"


def presence_key(wave_id: str) -> str:
    """The notifier key a change of a presence state in ``wave_id`` bumps."""
    return f"presence:{wave_id}"


class Wakes(Protocol):
    """The daemon's commit notifier: ``seq`` changes on every commit; a ``park`` (yielded to the
    HTTP loop, holding no thread) ends on a change of its keys."""

    @property
    def seq(self) -> int: ...

    @property
    def closing(self) -> bool: ...

    def bump(self, *keys: str) -> None: ...

    def seen(self, keys: Sequence[str] | None = None) -> int: ...

    def park(self, seen: int, timeout: float, keys: Sequence[str] | None = None) -> Park:
        """A wait for a commit that touches ``keys`` since ``seen``; the loop sends back True when
        the client hung up meanwhile."""
        ...


class PresenceSource(Protocol):
    def rows(self, wave_id: str, names: list[str]) -> list[PresenceRow]: ...


class ConsoleHost(Protocol):
    """What a :class:`Console` uses of the daemon that serves it (:class:`fleet.daemon.Daemon`)."""

    @property
    def store(self) -> Store | None: ...

    @property
    def operator_token(self) -> str: ...

    @property
    def notifier(self) -> Wakes: ...

    @property
    def presence(self) -> PresenceSource: ...

    @property
    def max_blip_bytes(self) -> int: ...

    @property
    def paths(self) -> Paths: ...

    @property
    def idle_timeout(self) -> float: ...

    @property
    def host_names(self) -> tuple[str, ...]: ...

    def tls_context(self, host: str) -> ssl.SSLContext | None:
        """The TLS context a listener on ``host`` serves with, or None for plain HTTP (loopback)."""
        ...

    def dispatch(
        self, method: str, target: str, authorization: str | None, body: bytes, *, console: bool = False
    ) -> tuple[int, Any] | Generator[Park, bool, tuple[int, Any]]:
        """Run one API call; with ``console``, only the routes the console exposes exist. A
        long-poll's answer comes on its way (yielding its parks)."""
        ...


# ---------------------------------------------------------------- shapes the page reads


class TailPage(Record, kw_only=True):
    """A page of a wavelet's history, oldest first; ``more`` says older blips exist."""

    blips: list[Blip]
    more: bool


class StreamReady(Record, kw_only=True):
    """The first event of a stream opened without a cursor: where it starts (a blip id, or '')."""

    cursor: str


# ---------------------------------------------------------------- helpers


def parse_ui_address(ui: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT`` → (host, port); a missing host is ``127.0.0.1``."""
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


def routes_js() -> bytes:
    """``/assets/routes.js``: the console's routes from the route table, by name, as the page's
    ``FLEET_ROUTES`` (``{name: {method, path, query}}``, ``path`` under ``/api`` with its ``{…}``
    parts to fill). Served, not inlined: the CSP runs no inline script."""
    table = {
        r.name: {"method": r.method, "path": "/api" + r.path, "query": list(r.query)}
        for r in routes.ROUTES
        if r.console
    }
    return (
        "// Generated by fleet.console.routes_js from fleet/routes.py: the routes the console may call.\n"
        f"window.FLEET_ROUTES = Object.freeze({json.dumps(table, indent=1, sort_keys=True)});\n"
    ).encode()


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
        "<p>Log in with the one-time link the daemon printed when it started"
        " (<code>fleet: console: log in at …</code>), or paste the operator token (the file"
        " <code>operator.token</code> in the daemon's data dir; <code>fleet paths</code> shows it).</p>"
        "<form method=post action=/login><input name=token type=password autocomplete=off"
        " aria-label='operator token' placeholder='operator token' style='width:22em'>"
        " <button>Log in</button></form></body></html>"
    ).encode()


# ---------------------------------------------------------------- the console


class Console:
    """The console server of one daemon (a :class:`ConsoleHost`, which must be open: store and token).

    ``start()`` binds and serves in a thread; ``stop()`` ends every stream and request. The daemon
    owns both calls when it is given ``ui=``.
    """

    def __init__(
        self,
        daemon: ConsoleHost,
        listen: str,
        *,
        allow_remote: bool = False,
        keepalive: float = KEEPALIVE,
        max_stream: float = MAX_STREAM,
    ) -> None:
        host, port = parse_ui_address(listen)
        if not is_loopback(host) and not allow_remote:
            raise errors.UsageError(
                f"refusing to serve the console on non-loopback address {host}: pass --ui {host}:{port}"
                " explicitly to open it to other machines (it then serves HTTPS)"
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
        self._httpd: _ConsoleServer | None = None

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> str:
        """Bind, serve in a thread, log the one-time login link and return it."""
        try:
            httpd = _ConsoleServer(
                (self.host, self.port),
                _ConsoleHandler,
                name="fleet-console",
                body_limit=self.daemon.max_blip_bytes + 64 * 1024,
                idle_timeout=self.daemon.idle_timeout,
                closing=lambda: self.closing,
                queue=64,
                host_names=self.daemon.host_names,
                tls=self.daemon.tls_context(self.host),
                workers=WORKERS,
            )
        except OSError as exc:
            raise errors.UsageError(
                f"cannot serve the console on {self.host}:{self.port}: {exc.strerror or exc}:"
                " pick another --ui address (port 0 takes any free one)"
            ) from None
        httpd.console = self
        self._httpd = httpd
        self.port = int(httpd.server_address[1])
        self.url = httpd.url
        # Cookies are per host, not per port: a name per port keeps two consoles from clobbering.
        self.cookie_name = f"fleet_console_{self.port}"
        httpd.start()
        link = self.login_link()
        if not self.loopback and httpd.tls is None:
            log.warning("WARNING: console: %s is not loopback and serves PLAIN HTTP", self.url)
        # The link is a credential: it goes to the operator's terminal (`fleet daemon run` prints
        # what start() returns), never into a log.
        log.info(
            "console: serving %s (the one-time login link is printed where the daemon started)", self.url
        )
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
        self._httpd.stop(timeout)
        with self._lock:
            self._sessions.clear()
            self._nonces.clear()
        log.info("console stopped")

    @property
    def closing(self) -> bool:
        return self._closing or self.daemon.notifier.closing

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
        secure = "; Secure" if self.url.startswith("https:") else ""
        return f"{self.cookie_name}={sid}; Path=/; HttpOnly; SameSite=Strict{secure}{life}"

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

    def same_origin(self, origin: str | None, host_header: str | None) -> bool:
        """True when ``Origin`` names exactly the origin the request was sent to."""
        if not origin or not host_header:
            return False
        scheme = "https" if self.url.startswith("https:") else "http"
        return hmac.compare_digest(origin.strip().lower(), f"{scheme}://{host_header.strip().lower()}")

    # ---------------------------------------------------------------- API

    def proxy(self, method: str, target: str, body: bytes) -> Generator[Park, bool, tuple[int, Any]]:
        """Run one daemon API call (``target`` without the ``/api`` prefix) as the operator (with
        ``yield from``: a long-poll parks).

        Only the routes the daemon's table marks ``console`` exist here: others are NotFound.
        """
        authorization = f"Bearer {self.daemon.operator_token}"
        got = self.daemon.dispatch(method, target, authorization, body, console=True)
        return got if isinstance(got, tuple) else (yield from got)

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

    def usage(self, wave: str) -> dict[str, Any]:
        """``fleet usage WAVE --json`` of the transcripts on the daemon's machine (read incrementally)."""
        from fleet.usage import wave_usage

        store = self._store()

        class _AsOperator:  # the store reads wave_usage makes, as the operator
            def get_wave(self, ref: str) -> Any:
                return store.get_wave(OPERATOR_PRINCIPAL, ref)

            def sessions(self, wave_id: str) -> Any:
                return store.sessions(OPERATOR_PRINCIPAL, wave_id)

            def budgets(self, wave_id: str) -> Any:
                return store.budgets(OPERATOR_PRINCIPAL, wave_id)

        return wave_usage(_AsOperator(), self.daemon.paths, wave).model_dump(mode="json")

    def presence(self, wave_id: str) -> PresenceList:
        store = self._store()
        names = [n for n, _k in store.participants(OPERATOR_PRINCIPAL, wave_id) if n != OPERATOR]
        return PresenceList(presence=self.daemon.presence.rows(wave_id, names))

    def stream(self, wave: str, cursor: str | None, emit: _Emitter) -> Answering:
        """Serve one wave's event stream through ``emit`` until the client goes or the daemon stops
        (with ``yield from``: between changes it parks on the loop, holding no thread).

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
        # the page starts each connection with nothing waiting: the prompts are sent once there are some
        last_waiting = _dumps(PermissionList(requests=[]))
        # What each part of the stream depends on: a commit bumps only the keys of what it changed
        # (a post: the wave's blips, maybe its author's presence; a fork: the tree), and each part is
        # recomputed only when its own key moved (presence also when the tree did, for who is in
        # the wave, and when a wait lapsed: TTLs expire).
        blips_key, tree, pres_key = w.id, tree_key(w.id), presence_key(w.id)
        seen_blips = seen_tree = seen_pres = -1
        lapsed = False
        quiet_since = time.monotonic()
        ends = quiet_since + self.max_stream
        notifier = self.daemon.notifier
        while not self.closing and time.monotonic() < ends:
            seen = notifier.seen((blips_key, pres_key))
            now_blips, now_tree, now_pres = (notifier.seen((k,)) for k in (blips_key, tree, pres_key))
            blips: list[Blip] = []
            if now_blips != seen_blips:
                blips = store.read_wave_after(OPERATOR_PRINCIPAL, w.id, cursor, limit=STREAM_BATCH)
                if len(blips) < STREAM_BATCH:
                    seen_blips = now_blips  # all caught up; else read on at once
                for b in blips:
                    emit.event("blip", b, event_id=b.id)
                    cursor = b.id
            roster_moved = now_tree != seen_tree  # who is in the wave: presence lists them too
            if roster_moved:
                seen_tree = now_tree
                tree_json = _dumps(store.get_wave(OPERATOR_PRINCIPAL, w.id))
                if tree_json != last_tree:
                    emit.raw_event("tree", tree_json)
                    last_tree = tree_json
            if now_pres != seen_pres or lapsed or roster_moved:
                seen_pres, lapsed = now_pres, False
                # the prompts agents wait at (docs/permissions.md), before presence: the page badges
                # the rows presence draws
                pending = store.permissions.list(OPERATOR_PRINCIPAL, w.id, pending=True)
                waiting_json = _dumps(PermissionList(requests=pending))
                if waiting_json != last_waiting:
                    emit.raw_event("permissions", waiting_json)
                    last_waiting = waiting_json
                pres = self.presence(w.id)
                states = _dumps([(r.participant, r.state, jsonable(r.agent)) for r in pres.presence])
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
                lapsed = True  # presence TTLs lapse without a commit: re-evaluate them now and then
                continue
            store.release_reader()  # a parked stream holds no read connection
            if (yield notifier.park(seen, min(remaining, ends - time.monotonic()), (blips_key, pres_key))):
                return  # the client hung up: the stream ends now, not at its next write
            lapsed = notifier.seen((blips_key, pres_key)) == seen


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
        self._h.send_now(data)


# ---------------------------------------------------------------- HTTP plumbing


class _ConsoleServer(Server):
    console: Console


class _ConsoleHandler(Handler):
    server_version = f"fleet-console/{__version__}"
    server: _ConsoleServer

    # -- writing

    def standard_headers(self, headers: Sequence[Header]) -> list[Header]:
        """A CSP (the strict one unless the response brings its own) and the security headers."""
        csp = (
            []
            if any(k == "Content-Security-Policy" for k, _ in headers)
            else [("Content-Security-Policy", CSP)]
        )
        return [*csp, *SECURITY_HEADERS]

    def send_head(self, status: int, headers: list[Header]) -> None:
        """The head of a streamed answer (no Content-Length: the stream ends with the connection)."""
        self.write_head(status, headers)

    def _send(self, status: int, body: bytes, content_type: str, extra: Sequence[Header] = ()) -> None:
        self.respond(status, body, content_type, extra)

    def _json(self, status: int, payload: Any, extra: Sequence[Header] = ()) -> None:
        self.respond_json(status, payload, extra)

    def _error(self, status: int, kind: str, message: str) -> None:
        self.respond_error(errors.HttpError(status, message, kind))

    def _login(self, status: int, message: str, extra: Sequence[Header] = ()) -> None:
        headers = [("Content-Security-Policy", LOGIN_CSP), *extra]
        self._send(status, login_page(message), "text/html; charset=utf-8", headers)

    def _redirect(self, location: str, extra: Sequence[Header]) -> None:
        self._send(303, b"", "text/plain; charset=utf-8", [("Location", location), *extra])

    # -- dispatch

    def request_done(self) -> None:
        """Each request gives its thread's read connection back to the store's pool as it ends."""
        store = self.server.console.daemon.store
        if store is not None:
            store.release_reader()

    def admit(self) -> bool:
        if not self.server.console.host_ok(self.headers.get("Host")):
            self.close_connection = True
            self._error(421, "forbidden", "this console answers only to its loopback address")
            return False
        return True

    def handle_request(self, body: bytes) -> Answering:
        console = self.server.console
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
            if name == "routes.js":
                self._send(200, routes_js(), "text/javascript; charset=utf-8")
            elif name not in ASSETS:
                raise errors.NotFound(f"no asset {name!r}")
            else:
                self._send(200, _asset(name), ASSETS[name])
        elif path.startswith("/api/v1/"):
            status, payload = yield from console.proxy(method, self.path.removeprefix("/api"), body)
            self._json(status, payload)
        elif (m := _TAIL.fullmatch(path)) and method == "GET":
            self._json(200, console.tail(unquote(m[1]), query))
        elif (m := _USAGE.fullmatch(path)) and method == "GET":
            self._json(200, console.usage(unquote(m[1])))
        elif (m := _EVENTS.fullmatch(path)) and method == "GET":
            cursor = self.headers.get("Last-Event-ID") or query.get("after") or None
            if cursor is not None and not is_id_like(cursor):
                raise errors.UsageError(f"cursor {cursor!r} is not a blip id")
            try:
                yield from console.stream(unquote(m[1]), cursor, _Emitter(self))
            except (BrokenPipeError, ConnectionResetError, TimeoutError):
                log.debug("console: event stream client went away")
            self.close_connection = True
        elif method == "GET" and consoleview.ROUTE.fullmatch(path):
            self._json(200, consoleview.serve(console._store(), console.daemon.paths, path))
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
