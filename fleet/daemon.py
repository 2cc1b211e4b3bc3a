"""The store daemon: the store over HTTP/1.1 + JSON (the contract is ``docs/http-api.md``).

What a caller may rely on:

- It listens on ``127.0.0.1`` unless a non-loopback address is asked for explicitly
  (``allow_remote``); every request but ``/v1/health`` needs a bearer token.
- The operator token is created at first start in ``data/operator.token`` (mode 0600).
- One daemon per data dir: an ``flock`` on ``state/daemon.lock`` is held for the daemon's life (the
  kernel drops it if the process dies, so a stale lock never wedges), and the endpoint file
  ``state/daemon.json`` names the url and pid while it runs.
- Long-poll reads wake on commit through a condition variable, never by polling; each wake-up
  re-checks that the reader may still see what it reads.
- On SIGTERM it stops accepting, wakes every long-poll, lets in-flight requests finish, closes the
  database and removes the endpoint file.
- The HTTP rules (bodies, one ``send`` per response, JSON errors, the idle timeout of
  ``idle_timeout`` seconds on a connection without a complete request) are :mod:`fleet.httpbase`'s.
- The API is one table, :data:`ROUTES`: each route says whether the operator console exposes it.
- Presence lives in memory only.
- With ``ui=`` it also serves the operator console (:mod:`fleet.console`) on a listener of its own,
  started after the API and stopped before the store closes; without it nothing else listens.
"""

from __future__ import annotations

import fcntl
import hmac
import json
import logging
import os
import re
import secrets
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from fleet import __version__, errors
from fleet.console import Console
from fleet.httpbase import IDLE_TIMEOUT, Handler, Server, is_loopback, parse_listen
from fleet.models import (
    DEFAULT_MAX_BLIP_BYTES,
    OPERATOR,
    BlipList,
    BlipPage,
    CloseSeat,
    Endpoint,
    FeedRequest,
    Health,
    MintRequest,
    NewBlip,
    NewFork,
    NewSeat,
    NewSession,
    NewSurface,
    NewSystemBlip,
    NewWave,
    Ok,
    PresenceList,
    PresenceReport,
    PresenceRow,
    PresenceState,
    Revoked,
    RevokeRequest,
    RosterChange,
    SeatAnswer,
    SessionList,
    TokenList,
    WaveList,
    Whoami,
)
from fleet.paths import Paths, ensure_private_dir, write_private
from fleet.store import Principal, Store
from fleet.wire import RecordError, dumps, load, loads

log = logging.getLogger(__name__)

M = TypeVar("M")

MAX_WAIT = 60.0
BODY_SLACK = 64 * 1024
"""A request body may be this much larger than the blip limit (the JSON around the text)."""

__all__ = [
    "IDLE_TIMEOUT",
    "ROUTES",
    "Daemon",
    "Notifier",
    "PresenceBook",
    "Route",
    "is_loopback",
    "parse_listen",
]


def ensure_operator_token(paths: Paths) -> str:
    """The operator token, created (0600) on first start."""
    path = paths.operator_token
    if path.exists():
        token = path.read_text(encoding="utf-8").strip()
        if token:
            if path.stat().st_mode & 0o077:
                os.chmod(path, 0o600)
            return token
    token = secrets.token_urlsafe(32)
    write_private(path, token + "\n")
    return token


# ---------------------------------------------------------------- wake-ups and presence


class Notifier:
    """Wakes long-polls when something commits. Waiters compare a sequence number; no polling."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._seq = 0
        self.closing = False

    @property
    def seq(self) -> int:
        return self._seq

    def bump(self) -> None:
        with self._cond:
            self._seq += 1
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self.closing = True
            self._cond.notify_all()

    def wait(self, seen: int, timeout: float) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._seq != seen or self.closing, timeout)


@dataclass
class _Seen:
    session_id: str | None = None
    host: str | None = None
    last_ping: float | None = None
    last_delivery: float | None = None
    last_post: float | None = None
    delivered: int = 0
    gone: bool = False


@dataclass
class PresenceBook:
    """In-memory presence: working from a delivery until a post or ``working_ttl``; gone without pings."""

    working_ttl: float = 600.0
    ping_ttl: float = 90.0
    clock: Callable[[], float] = time.time
    _rows: dict[tuple[str, str], _Seen] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def report(self, wave_id: str, r: PresenceReport) -> None:
        t = self.clock()
        with self._lock:
            s = self._rows.setdefault((wave_id, r.participant), _Seen())
            s.session_id = r.session_id or s.session_id
            s.host = r.host or s.host
            if r.event == "gone":
                s.gone = True
                return
            s.gone = False
            s.last_ping = t
            if r.event == "delivered":
                s.last_delivery = t
                s.delivered += max(0, r.count)

    def posted(self, wave_id: str, author: str) -> None:
        with self._lock:
            self._rows.setdefault((wave_id, author), _Seen()).last_post = self.clock()

    def state(self, s: _Seen) -> PresenceState:
        t = self.clock()
        if s.gone or s.last_ping is None or t - s.last_ping > self.ping_ttl:
            return "gone"
        if (
            s.last_delivery is not None
            and (s.last_post is None or s.last_post < s.last_delivery)
            and t - s.last_delivery < self.working_ttl
        ):
            return "working"
        return "idle"

    def rows(self, wave_id: str, names: list[str]) -> list[PresenceRow]:
        with self._lock:
            out = []
            for name in names:
                s = self._rows.get((wave_id, name), _Seen())
                out.append(
                    PresenceRow(
                        wave_id=wave_id,
                        participant=name,
                        state=self.state(s),
                        session_id=s.session_id,
                        host=s.host,
                        last_ping=s.last_ping,
                        last_delivery=s.last_delivery,
                        last_post=s.last_post,
                        delivered=s.delivered,
                    )
                )
            return out


# ---------------------------------------------------------------- requests and routes


NOBODY = Principal("nobody", "")
"""The principal of a route that needs no token (``/v1/health``): it sees nothing (no wave has id '')."""


@dataclass
class Request:
    """One API call: the path's ``{…}`` segments (unquoted) in ``args``, and who makes it."""

    method: str
    path: str
    query: dict[str, str]
    body: bytes
    who: Principal
    args: tuple[str, ...] = ()

    @property
    def arg(self) -> str:
        """The path's one ``{…}`` segment."""
        return self.args[0]

    def model(self, cls: type[M]) -> M:
        try:
            data = json.loads(self.body or b"{}")
        except (ValueError, UnicodeDecodeError) as exc:  # ValueError: also a 5,000-digit integer
            raise errors.UsageError(f"the request body is not valid JSON: {exc}") from None
        except RecursionError:
            raise errors.UsageError("the request body is not valid JSON: nested too deeply") from None
        if not isinstance(data, dict):
            raise errors.UsageError("the request body must be a JSON object")
        try:
            # JSON's \ud800 escapes decode to lone surrogates, which no UTF-8 text (or SQLite) takes.
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise errors.UsageError(
                "the request body has a string with a lone surrogate: send valid UTF-8"
            ) from None
        try:
            return load(cls, data)
        except RecordError as exc:
            raise errors.UsageError("invalid request: " + errors.describe(exc)) from None

    def q_float(self, name: str, default: float) -> float:
        raw = self.query.get(name)
        if raw is None or raw == "":
            return default
        try:
            value = float(raw)
        except ValueError:
            raise errors.UsageError(f"query parameter {name}={raw!r} is not a number") from None
        if value != value or value < 0:
            raise errors.UsageError(f"query parameter {name} must be a non-negative number")
        return value

    def q_int(self, name: str, default: int) -> int:
        raw = self.query.get(name)
        if raw is None or raw == "":
            return default
        try:
            return int(raw)
        except ValueError:
            raise errors.UsageError(f"query parameter {name}={raw!r} is not an integer") from None


Answer = tuple[int, Any]
"""A status and the record answered with."""


@dataclass(frozen=True)
class Route:
    """One endpoint. ``path`` is a template whose ``{name}`` parts each match one path segment.

    ``console``: the operator console's ``/api/v1/…`` proxy exposes it. ``auth``: it needs a token.
    """

    method: str
    path: str
    handler: Callable[[Daemon, Request], Answer]
    console: bool = False
    auth: bool = True
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pattern", re.compile(re.sub(r"\{\w+\}", "([^/]+)", self.path)))


# ---------------------------------------------------------------- the daemon


class Daemon:
    """The daemon. ``start()`` serves in a thread (tests); ``serve_forever()`` is the CLI's foreground.

    ``idle_timeout``: seconds a connection may go without a complete request head before it is
    closed (the console's connections too).
    """

    def __init__(
        self,
        paths: Paths,
        listen: str = "127.0.0.1:0",
        *,
        max_blip_bytes: int = DEFAULT_MAX_BLIP_BYTES,
        allow_remote: bool = False,
        working_ttl: float = 600.0,
        ping_ttl: float = 90.0,
        ui: str | None = None,
        allow_remote_ui: bool = False,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        host, port = parse_listen(listen)
        if not is_loopback(host) and not allow_remote:
            raise errors.UsageError(
                f"refusing to listen on non-loopback address {host}: pass --listen {host}:{port}"
                " explicitly to serve other machines (tokens are always required)"
            )
        if max_blip_bytes < 1:
            raise errors.UsageError("--max-blip-bytes must be at least 1")
        if not idle_timeout > 0:
            raise errors.UsageError("the idle timeout must be a positive number of seconds")
        self.paths = paths
        self.host, self.port = host, port
        self.max_blip_bytes = max_blip_bytes
        self.idle_timeout = idle_timeout
        self.presence = PresenceBook(working_ttl=working_ttl, ping_ttl=ping_ttl)
        self.notifier = Notifier()
        self._lock_fd: int | None = None
        self._httpd: _ApiServer | None = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        self.store: Store | None = None
        self.operator_token = ""
        self.url = ""
        self.routes: tuple[Route, ...] = ROUTES
        self.console: Console | None = Console(self, ui, allow_remote=allow_remote_ui) if ui else None
        """The operator console (``ui=HOST:PORT``), or None: off unless asked for."""

    # ---------------------------------------------------------------- lifecycle

    def _acquire_instance_lock(self) -> None:
        ensure_private_dir(self.paths.state)
        fd = os.open(self.paths.daemon_lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            where = "unknown address"
            try:
                ep = loads(Endpoint, self.paths.endpoint.read_text())
                where = f"{ep.url} (pid {ep.pid})"
            except (OSError, ValueError):
                pass
            raise errors.Conflict(
                f"a daemon already runs on data dir {self.paths.data} at {where}:"
                " use it, or stop it with `fleet daemon stop`"
            ) from None
        self._lock_fd = fd

    def _open(self) -> None:
        self._acquire_instance_lock()
        try:
            ensure_private_dir(self.paths.data)
            self.operator_token = ensure_operator_token(self.paths)
            self.store = Store(self.paths.db, max_blip_bytes=self.max_blip_bytes)
            httpd = _ApiServer(
                (self.host, self.port),
                _ApiHandler,
                name="fleet-daemon",
                body_limit=self.max_blip_bytes + BODY_SLACK,
                limit_note=f"blips are limited to {self.max_blip_bytes} bytes",
                idle_timeout=self.idle_timeout,
                closing=lambda: self.notifier.closing,
            )
            httpd.daemon = self
            self._httpd = httpd
            self.url = httpd.url
            write_private(
                self.paths.endpoint,
                dumps(Endpoint(url=self.url, pid=os.getpid(), started_at=time.time(), version=__version__))
                + "\n",
            )
            if self.console is not None:
                try:
                    self.console.start()
                except BaseException:
                    httpd.server_close()
                    raise
        except BaseException:
            self._release()
            raise
        log.info("fleet daemon %s listening on %s (data %s)", __version__, self.url, self.paths.data)

    def start(self) -> None:
        """Serve in a background thread; returns once the socket is listening."""
        self._open()
        assert self._httpd is not None
        self._thread = self._httpd.start()

    def serve_forever(self) -> None:
        """Serve in the foreground until SIGTERM or SIGINT, then shut down gracefully."""
        self._open()
        assert self._httpd is not None

        def on_signal(signum: int, _frame: object) -> None:
            log.info("signal %s: shutting down", signum)
            threading.Thread(target=self.stop, name="fleet-shutdown", daemon=True).start()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        try:
            self._httpd.serve_forever(poll_interval=0.2)
        finally:
            self.stop()
            self._stopped.wait(30)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop accepting, wake long-polls, let in-flight requests finish, close, clean up. Idempotent."""
        # On SIGTERM both the signal's thread and serve_forever's `finally` call this: one does the work.
        with self._stop_lock:
            self._stop(timeout)

    def _stop(self, timeout: float) -> None:
        if self._stopped.is_set() or self._httpd is None:
            return
        self.notifier.close()  # from here on new requests get a 503, and every long-poll returns
        if self.console is not None:
            self.console.stop(timeout)
        self._httpd.stop(timeout)
        if self.store is not None:
            self.store.close()
        self._release()
        self._stopped.set()
        log.info("fleet daemon stopped")

    def _release(self) -> None:
        try:
            ep = loads(Endpoint, self.paths.endpoint.read_text())
            if ep.pid == os.getpid():
                self.paths.endpoint.unlink()
        except (OSError, ValueError):
            pass
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ---------------------------------------------------------------- dispatch

    def authenticate(self, header: str | None) -> Principal:
        if not header or not header.startswith("Bearer "):
            raise errors.Unauthorized(
                "this request needs a token: send `Authorization: Bearer <token>` (the operator token"
                " file in the daemon's data dir, or a participant token from `fleet token mint`)"
            )
        token = header[7:].strip()
        if hmac.compare_digest(token.encode(), self.operator_token.encode()):
            return Principal.operator()
        who = self._s.authenticate(token)
        if who is None:
            raise errors.Unauthorized("the token is unknown or revoked: ask the operator for a new one")
        return who

    def route(self, method: str, path: str, *, console: bool = False) -> tuple[Route, tuple[str, ...]]:
        """The route serving ``method path`` and the path's unquoted segments.

        NotFound for an unknown path, 405 for a known path under another method; with ``console``,
        NotFound for anything the console does not expose.
        """
        other_method = False
        for route in self.routes:
            if console and not route.console:
                continue
            m = route.pattern.fullmatch(path)
            if m is None:
                continue
            if route.method == method:
                return route, tuple(unquote(g) for g in m.groups())
            other_method = True
        if console:
            raise errors.NotFound(f"the console does not expose {method} {path}")
        if other_method:
            raise errors.HttpError(405, f"{method} is not allowed on {path}")
        raise errors.NotFound(f"no such endpoint {method} {path}: see docs/http-api.md")

    def dispatch(
        self, method: str, target: str, authorization: str | None, body: bytes, *, console: bool = False
    ) -> Answer:
        """Run one API call: ``target`` is the request target (path and query), ``authorization``
        the ``Authorization`` header. ``console``: only the routes the console exposes exist."""
        split = urlsplit(target)
        route, args = self.route(method, split.path, console=console)
        who = self.authenticate(authorization) if route.auth else NOBODY
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        return route.handler(self, Request(method, split.path, query, body, who, args))

    # ---------------------------------------------------------------- handlers

    @property
    def _s(self) -> Store:
        if self.store is None:
            raise errors.DaemonUnreachable("the daemon is not open")
        return self.store

    def _wrote(self, wave_id: str, author: str) -> None:
        if author != "system":
            self.presence.posted(wave_id, author)
        self.notifier.bump()

    def _long_poll(self, wait: float, fetch: Callable[[], M], empty: Callable[[M], bool]) -> M:
        """``fetch()`` until it is not ``empty`` or ``wait`` (capped) lapses, waking on commits."""
        deadline = time.monotonic() + min(wait, MAX_WAIT)
        while True:
            seen = self.notifier.seq
            result = fetch()
            remaining = deadline - time.monotonic()
            if not empty(result) or remaining <= 0 or self.notifier.closing:
                return result
            self.notifier.wait(seen, remaining)

    def _health(self, r: Request) -> Answer:
        return 200, Health(ok=True, version=__version__, pid=os.getpid())

    def _whoami(self, r: Request) -> Answer:
        wave = self._s.wave_name(r.who, r.who.wave_id) if r.who.wave_id else None
        return 200, Whoami(principal=r.who.name, wave_id=r.who.wave_id, wave=wave, daemon_version=__version__)

    def _create_wave(self, r: Request) -> Answer:
        body = r.model(NewWave)
        wave = self._s.create_wave(r.who, body.name, body.with_)
        self.notifier.bump()
        return 201, wave

    def _list_waves(self, r: Request) -> Answer:
        return 200, WaveList(waves=self._s.list_waves(r.who))

    def _get_wave(self, r: Request) -> Answer:
        return 200, self._s.get_wave(r.who, r.arg)

    def _resolve(self, r: Request) -> Answer:
        ref = r.query.get("ref")
        if not ref:
            raise errors.UsageError("resolve needs ?ref=WAVE/WAVELET, a wavelet name with &wave=, or an id")
        return 200, self._s.resolve(r.who, ref, r.query.get("wave") or None)

    def _get_wavelet(self, r: Request) -> Answer:
        return 200, self._s.resolve(r.who, r.arg)

    def _fork(self, r: Request) -> Answer:
        body = r.model(NewFork)
        wl = self._s.fork(r.who, r.arg, body.name, body.with_, private=body.private, as_=body.as_)
        self.notifier.bump()
        return 201, wl

    def _invite(self, r: Request) -> Answer:
        body = r.model(RosterChange)
        wl = self._s.invite(r.who, r.arg, body.name, as_=body.as_)
        self.notifier.bump()
        return 200, wl

    def _leave_roster(self, r: Request) -> Answer:
        body = r.model(RosterChange)
        wl = self._s.leave(r.who, r.arg, body.name, as_=body.as_)
        self.notifier.bump()
        return 200, wl

    def _post(self, r: Request) -> Answer:
        body = r.model(NewBlip)
        blip = self._s.post(r.who, r.arg, body.text, as_=body.as_)
        self._wrote(blip.wave_id, blip.author)
        return 201, blip

    def _post_system(self, r: Request) -> Answer:
        body = r.model(NewSystemBlip)
        blip = self._s.post_system(r.who, r.arg, body.text)
        self._wrote(blip.wave_id, blip.author)
        return 201, blip

    def _surface(self, r: Request) -> Answer:
        body = r.model(NewSurface)
        blip = self._s.surface(r.who, r.arg, body.text, source_blip_id=body.source_blip_id, as_=body.as_)
        self._wrote(blip.wave_id, blip.author)
        return 201, blip

    def _replace(self, r: Request) -> Answer:
        body = r.model(NewBlip)
        blip = self._s.replace(r.who, r.arg, body.text, as_=body.as_)
        self._wrote(blip.wave_id, blip.author)
        return 201, blip

    def _read(self, r: Request) -> Answer:
        wl = self._s.resolve(r.who, r.arg)
        after = r.query.get("after") or ""
        limit = r.q_int("limit", 500)
        history = r.query.get("history", "0") not in ("", "0", "false")
        wait = r.q_float("wait", 0.0)
        blips = self._long_poll(
            wait,
            lambda: self._s.read_resolved(r.who, wl.id, after=after, limit=limit, history=history),
            lambda got: not got,
        )
        return 200, BlipPage(blips=blips, cursor=blips[-1].id if blips else after)

    def _read_wave(self, r: Request) -> Answer:
        """Every blip of the wave after ``after`` (long-poll): the operator's whole-wave stream."""
        after = r.query.get("after") or ""
        limit = r.q_int("limit", 500)
        wait = r.q_float("wait", 0.0)
        blips = self._long_poll(
            wait,
            lambda: self._s.read_wave_after(r.who, r.arg, after, limit=limit),
            lambda got: not got,
        )
        return 200, BlipPage(blips=blips, cursor=blips[-1].id if blips else after)

    def _activity(self, r: Request) -> Answer:
        return 200, self._s.activity(r.who, r.arg)

    def _context(self, r: Request) -> Answer:
        return 200, self._s.context(r.who, r.arg)

    def _get_blip(self, r: Request) -> Answer:
        return 200, self._s.get_blip(r.who, r.arg)

    def _history(self, r: Request) -> Answer:
        return 200, BlipList(blips=self._s.history(r.who, r.arg))

    def _feed(self, r: Request) -> Answer:
        body = r.model(FeedRequest)
        if not body.wait >= 0:  # also NaN, which would otherwise wait forever
            raise errors.UsageError("wait must be a non-negative number of seconds")
        feed = self._long_poll(
            body.wait,
            lambda: self._s.feed(r.who, r.arg, body.participant, body.cursors, limit=body.limit),
            lambda f: not f.blips,
        )
        return 200, feed

    def _report_presence(self, r: Request) -> Answer:
        body = r.model(PresenceReport)
        wave = self._s.get_wave(r.who, r.arg)
        if not r.who.is_operator and body.participant != r.who.name:
            raise errors.Forbidden(f"{r.who.name!r} cannot report presence for {body.participant!r}")
        before = self.presence.rows(wave.id, [body.participant])[0].state
        self.presence.report(wave.id, body)
        if self.presence.rows(wave.id, [body.participant])[0].state != before:
            self.notifier.bump()  # a state change wakes the console's streams (pings alone do not)
        return 200, Ok()

    def _presence(self, r: Request) -> Answer:
        wave = self._s.get_wave(r.who, r.arg)
        names = [n for n, _kind in self._s.participants(r.who, wave.id) if n != OPERATOR]
        return 200, PresenceList(presence=self.presence.rows(wave.id, names))

    def _record_session(self, r: Request) -> Answer:
        return 200, self._s.record_session(r.who, r.arg, r.model(NewSession))

    def _sessions(self, r: Request) -> Answer:
        participant = r.query.get("participant") or None
        return 200, SessionList(sessions=self._s.sessions(r.who, r.arg, participant))

    def _seat(self, r: Request) -> Answer:
        return 200, SeatAnswer(seat=self._s.seat(r.who, r.arg))

    def _claim_seat(self, r: Request) -> Answer:
        return 200, SeatAnswer(seat=self._s.claim_seat(r.who, r.arg, r.model(NewSeat)))

    def _close_seat(self, r: Request) -> Answer:
        return 200, SeatAnswer(seat=self._s.close_seat(r.who, r.arg, r.model(CloseSeat)))

    def _mint(self, r: Request) -> Answer:
        body = r.model(MintRequest)
        return 201, self._s.mint_token(r.who, body.wave, body.participant, secrets.token_urlsafe(32))

    def _list_tokens(self, r: Request) -> Answer:
        return 200, TokenList(tokens=self._s.list_tokens(r.who, r.query.get("wave") or None))

    def _revoke(self, r: Request) -> Answer:
        body = r.model(RevokeRequest)
        revoked = self._s.revoke_tokens(
            r.who, token_id=body.token_id, wave=body.wave, participant=body.participant
        )
        return 200, Revoked(revoked=revoked)


ROUTES: tuple[Route, ...] = (
    Route("GET", "/v1/health", Daemon._health, auth=False),
    Route("GET", "/v1/whoami", Daemon._whoami, console=True),
    Route("POST", "/v1/waves", Daemon._create_wave),
    Route("GET", "/v1/waves", Daemon._list_waves, console=True),
    Route("GET", "/v1/waves/{wave}", Daemon._get_wave, console=True),
    Route("POST", "/v1/waves/{wave}/feed", Daemon._feed),
    Route("POST", "/v1/waves/{wave}/presence", Daemon._report_presence),
    Route("GET", "/v1/waves/{wave}/presence", Daemon._presence, console=True),
    Route("GET", "/v1/waves/{wave}/blips", Daemon._read_wave),
    Route("GET", "/v1/waves/{wave}/activity", Daemon._activity),
    Route("POST", "/v1/waves/{wave}/sessions", Daemon._record_session),
    Route("GET", "/v1/waves/{wave}/sessions", Daemon._sessions),
    Route("GET", "/v1/waves/{wave}/seat", Daemon._seat),
    Route("POST", "/v1/waves/{wave}/seat", Daemon._claim_seat),
    Route("POST", "/v1/waves/{wave}/seat/close", Daemon._close_seat),
    Route("GET", "/v1/resolve", Daemon._resolve, console=True),
    Route("GET", "/v1/wavelets/{wavelet}", Daemon._get_wavelet, console=True),
    Route("POST", "/v1/wavelets/{wavelet}/fork", Daemon._fork, console=True),
    Route("POST", "/v1/wavelets/{wavelet}/invite", Daemon._invite, console=True),
    Route("POST", "/v1/wavelets/{wavelet}/leave", Daemon._leave_roster, console=True),
    Route("POST", "/v1/wavelets/{wavelet}/blips", Daemon._post, console=True),
    Route("GET", "/v1/wavelets/{wavelet}/blips", Daemon._read, console=True),
    Route("POST", "/v1/wavelets/{wavelet}/system", Daemon._post_system),
    Route("POST", "/v1/wavelets/{wavelet}/surface", Daemon._surface, console=True),
    Route("GET", "/v1/wavelets/{wavelet}/context", Daemon._context, console=True),
    Route("GET", "/v1/blips/{blip}", Daemon._get_blip, console=True),
    Route("GET", "/v1/blips/{blip}/history", Daemon._history, console=True),
    Route("POST", "/v1/blips/{blip}/replace", Daemon._replace, console=True),
    Route("POST", "/v1/tokens", Daemon._mint),
    Route("GET", "/v1/tokens", Daemon._list_tokens),
    Route("POST", "/v1/tokens/revoke", Daemon._revoke),
)
"""The whole API (``docs/http-api.md``). ``console=True``: the operator console's page may call it
(as the operator, through ``/api/v1/…``); token routes, the feed, presence reports, the whole-wave
stream and system blips are the CLI's and the channels' only."""


# ---------------------------------------------------------------- HTTP


class _ApiServer(Server):
    daemon: Daemon


class _ApiHandler(Handler):
    server_version = f"fleet/{__version__}"
    server: _ApiServer

    def handle_request(self, body: bytes) -> None:
        status, payload = self.server.daemon.dispatch(
            self.command, self.path, self.headers.get("Authorization"), body
        )
        self.respond_json(status, payload)


def read_endpoint(paths: Paths) -> Endpoint | None:
    """The endpoint file, or None if absent or unreadable."""
    try:
        return loads(Endpoint, Path(paths.endpoint).read_text(encoding="utf-8"))
    except (OSError, RecordError):
        return None
