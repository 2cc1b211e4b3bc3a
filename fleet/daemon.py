"""The store daemon: the store over HTTP/1.1 + JSON (the contract is ``docs/http-api.md``).

What a caller may rely on:

- It listens on ``127.0.0.1`` unless a non-loopback address is asked for explicitly
  (``allow_remote``); every request but ``/v1/health`` needs a bearer token.
- The operator token is created at first start in ``data/operator.token`` (mode 0600).
- One daemon per data dir: an ``flock`` on ``state/daemon.lock`` is held for the daemon's life (the
  kernel drops it if the process dies, so a stale lock never wedges), and the endpoint file
  ``state/daemon.json`` names the url and pid while it runs.
- Long-poll reads wake on commit through a condition variable, never by polling.
- On SIGTERM it stops accepting, wakes every long-poll, lets in-flight requests finish, closes the
  database and removes the endpoint file.
- Each response is written to the socket in one ``send`` with ``TCP_NODELAY`` set, so keep-alive
  clients are not stalled by delayed ACKs.
- Presence lives in memory only.
- With ``ui=`` it also serves the operator console (:mod:`fleet.console`) on a listener of its own,
  started after the API and stopped before the store closes; without it nothing else listens.
"""

from __future__ import annotations

import fcntl
import hmac
import ipaddress
import json
import logging
import os
import re
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from fleet import __version__, errors
from fleet.console import Console
from fleet.models import (
    DEFAULT_MAX_BLIP_BYTES,
    OPERATOR,
    Endpoint,
    FeedRequest,
    Health,
    MintRequest,
    NewBlip,
    NewFork,
    NewSession,
    NewSurface,
    NewSystemBlip,
    NewWave,
    PresenceReport,
    PresenceRow,
    PresenceState,
    RevokeRequest,
    RosterChange,
    Whoami,
    jsonable,
)
from fleet.paths import Paths, ensure_private_dir, write_private
from fleet.store import Principal, Store
from fleet.wire import RecordError, dumps, load, loads, record

log = logging.getLogger(__name__)

M = TypeVar("M")

MAX_WAIT = 60.0
BODY_SLACK = 64 * 1024
DRAIN_LIMIT = 64 * 1024 * 1024
DRAIN_SECONDS = 2.0
"""How much of a refused body is read and dropped (so the client sees its 413), and for how long."""


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) → (host, port)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise errors.UsageError(f"--listen takes HOST:PORT, e.g. 127.0.0.1:8086, not {listen!r}")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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


# ---------------------------------------------------------------- HTTP


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: bytes
    who: Principal

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


Handler = Callable[[Request, re.Match[str]], tuple[int, Any]]


class Daemon:
    """The daemon. ``start()`` serves in a thread (tests); ``serve_forever()`` is the CLI's foreground."""

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
    ) -> None:
        host, port = parse_listen(listen)
        if not is_loopback(host) and not allow_remote:
            raise errors.UsageError(
                f"refusing to listen on non-loopback address {host}: pass --listen {host}:{port}"
                " explicitly to serve other machines (tokens are always required)"
            )
        if max_blip_bytes < 1:
            raise errors.UsageError("--max-blip-bytes must be at least 1")
        self.paths = paths
        self.host, self.port = host, port
        self.max_blip_bytes = max_blip_bytes
        self.presence = PresenceBook(working_ttl=working_ttl, ping_ttl=ping_ttl)
        self.notifier = Notifier()
        self._lock_fd: int | None = None
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self._inflight = 0
        self._inflight_cond = threading.Condition()
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        self.store: Store | None = None
        self.operator_token = ""
        self.url = ""
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = self._make_routes()
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
            httpd = _Server((self.host, self.port), _RequestHandler, self)
            self._httpd = httpd
            host, port = httpd.server_address[:2]
            host = host.decode() if isinstance(host, bytes) else str(host)
            shown = f"[{host}]" if ":" in host else host
            self.url = f"http://{shown}:{port}"
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
        # A short poll interval: stop() waits for serve_forever to notice the shutdown request.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="fleet-daemon", daemon=True
        )
        self._thread.start()

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
        httpd = self._httpd
        self.notifier.close()
        if self.console is not None:
            self.console.stop(timeout)
        if threading.current_thread() is not self._thread:
            httpd.shutdown()
        with self._inflight_cond:
            self._inflight_cond.wait_for(lambda: self._inflight == 0, timeout)
        httpd.server_close()
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

    # ---------------------------------------------------------------- request plumbing

    def authenticate(self, header: str | None) -> Principal:
        if not header or not header.startswith("Bearer "):
            raise errors.Unauthorized(
                "this request needs a token: send `Authorization: Bearer <token>` (the operator token"
                " file in the daemon's data dir, or a participant token from `fleet token mint`)"
            )
        token = header[7:].strip()
        if hmac.compare_digest(token.encode(), self.operator_token.encode()):
            return Principal.operator()
        assert self.store is not None
        who = self.store.authenticate(token)
        if who is None:
            raise errors.Unauthorized("the token is unknown or revoked: ask the operator for a new one")
        return who

    def dispatch(self, method: str, target: str, headers: Any, body: bytes) -> tuple[int, Any]:
        split = urlsplit(target)
        path = split.path
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        if method == "GET" and path == "/v1/health":
            return 200, Health(ok=True, version=__version__, pid=os.getpid())
        matched_path = False
        for m, pattern, fn in self._routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            matched_path = True
            if m != method:
                continue
            who = self.authenticate(headers.get("Authorization"))
            return fn(Request(method, path, query, body, who), match)
        if matched_path:
            raise errors.HttpError(405, f"{method} is not allowed on {path}")
        raise errors.NotFound(f"no such endpoint {method} {path}: see docs/http-api.md")

    def _enter(self) -> bool:
        with self._inflight_cond:
            if self.notifier.closing:
                return False
            self._inflight += 1
            return True

    def _leave(self) -> None:
        with self._inflight_cond:
            self._inflight -= 1
            self._inflight_cond.notify_all()

    # ---------------------------------------------------------------- routes

    def _make_routes(self) -> list[tuple[str, re.Pattern[str], Handler]]:
        seg = r"([^/]+)"
        table: list[tuple[str, str, Handler]] = [
            ("GET", "/v1/whoami", self._whoami),
            ("POST", "/v1/waves", self._create_wave),
            ("GET", "/v1/waves", self._list_waves),
            ("GET", f"/v1/waves/{seg}", self._get_wave),
            ("POST", f"/v1/waves/{seg}/feed", self._feed),
            ("POST", f"/v1/waves/{seg}/presence", self._report_presence),
            ("GET", f"/v1/waves/{seg}/presence", self._presence),
            ("GET", f"/v1/waves/{seg}/blips", self._read_wave),
            ("GET", f"/v1/waves/{seg}/activity", self._activity),
            ("GET", "/v1/resolve", self._resolve),
            ("GET", f"/v1/wavelets/{seg}", self._get_wavelet),
            ("POST", f"/v1/wavelets/{seg}/fork", self._fork),
            ("POST", f"/v1/wavelets/{seg}/invite", self._invite),
            ("POST", f"/v1/wavelets/{seg}/leave", self._leave_roster),
            ("POST", f"/v1/wavelets/{seg}/blips", self._post),
            ("POST", f"/v1/wavelets/{seg}/system", self._post_system),
            ("GET", f"/v1/wavelets/{seg}/blips", self._read),
            ("POST", f"/v1/wavelets/{seg}/surface", self._surface),
            ("GET", f"/v1/wavelets/{seg}/context", self._context),
            ("GET", f"/v1/blips/{seg}", self._get_blip),
            ("GET", f"/v1/blips/{seg}/history", self._history),
            ("POST", f"/v1/blips/{seg}/replace", self._replace),
            ("POST", f"/v1/waves/{seg}/sessions", self._record_session),
            ("GET", f"/v1/waves/{seg}/sessions", self._sessions),
            ("POST", "/v1/tokens", self._mint),
            ("GET", "/v1/tokens", self._list_tokens),
            ("POST", "/v1/tokens/revoke", self._revoke),
        ]
        return [(m, re.compile(p), fn) for m, p, fn in table]

    @property
    def _s(self) -> Store:
        assert self.store is not None
        return self.store

    def _wrote(self, wave_id: str, author: str) -> None:
        if author != "system":
            self.presence.posted(wave_id, author)
        self.notifier.bump()

    def _long_poll(self, wait: float, fetch: Callable[[], M], empty: Callable[[M], bool]) -> M:
        deadline = time.monotonic() + min(wait, MAX_WAIT)
        while True:
            seen = self.notifier.seq
            result = fetch()
            remaining = deadline - time.monotonic()
            if not empty(result) or remaining <= 0 or self.notifier.closing:
                return result
            self.notifier.wait(seen, remaining)

    def _whoami(self, r: Request, _m: re.Match[str]) -> tuple[int, Any]:
        wave = self._s.wave_name(r.who, r.who.wave_id) if r.who.wave_id else None
        return 200, Whoami(principal=r.who.name, wave_id=r.who.wave_id, wave=wave, daemon_version=__version__)

    def _create_wave(self, r: Request, _m: re.Match[str]) -> tuple[int, Any]:
        body = r.model(NewWave)
        wave = self._s.create_wave(r.who, body.name, body.with_)
        self.notifier.bump()
        return 201, wave

    def _list_waves(self, r: Request, _m: re.Match[str]) -> tuple[int, Any]:
        return 200, {"waves": self._s.list_waves(r.who)}

    def _get_wave(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        return 200, self._s.get_wave(r.who, unquote(m[1]))

    def _resolve(self, r: Request, _m: re.Match[str]) -> tuple[int, Any]:
        ref = r.query.get("ref")
        if not ref:
            raise errors.UsageError("resolve needs ?ref=WAVE/WAVELET, a wavelet name with &wave=, or an id")
        return 200, self._s.resolve(r.who, ref, r.query.get("wave") or None)

    def _get_wavelet(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        return 200, self._s.resolve(r.who, unquote(m[1]))

    def _fork(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        body = r.model(NewFork)
        wl = self._s.fork(r.who, unquote(m[1]), body.name, body.with_, private=body.private, as_=body.as_)
        self.notifier.bump()
        return 201, wl

    def _invite(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        body = r.model(RosterChange)
        wl = self._s.invite(r.who, unquote(m[1]), body.name, as_=body.as_)
        self.notifier.bump()
        return 200, wl

    def _leave_roster(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        body = r.model(RosterChange)
        wl = self._s.leave(r.who, unquote(m[1]), body.name, as_=body.as_)
        self.notifier.bump()
        return 200, wl

    def _post(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        body = r.model(NewBlip)
        blip = self._s.post(r.who, unquote(m[1]), body.text, as_=body.as_)
        self._wrote(blip.wave_id, blip.author)
        return 201, blip

    def _post_system(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        body = r.model(NewSystemBlip)
        blip = self._s.post_system(r.who, unquote(m[1]), body.text)
        self._wrote(blip.wave_id, blip.author)
        return 201, blip

    def _surface(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        body = r.model(NewSurface)
        blip = self._s.surface(
            r.who, unquote(m[1]), body.text, source_blip_id=body.source_blip_id, as_=body.as_
        )
        self._wrote(blip.wave_id, blip.author)
        return 201, blip

    def _replace(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        body = r.model(NewBlip)
        blip = self._s.replace(r.who, unquote(m[1]), body.text, as_=body.as_)
        self._wrote(blip.wave_id, blip.author)
        return 201, blip

    def _read(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        wl = self._s.resolve(r.who, unquote(m[1]))
        after = r.query.get("after") or ""
        limit = r.q_int("limit", 500)
        history = r.query.get("history", "0") not in ("", "0", "false")
        wait = r.q_float("wait", 0.0)
        blips = self._long_poll(
            wait,
            lambda: _BlipList(
                items=self._s.read_resolved(r.who, wl.id, after=after, limit=limit, history=history)
            ),
            lambda res: not res.items,
        ).items
        cursor = after
        if blips:
            cursor = blips[-1].id
        return 200, {"blips": blips, "cursor": cursor}

    def _read_wave(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        """Every blip of the wave after ``after`` (long-poll): the operator's whole-wave stream."""
        wave = unquote(m[1])
        after = r.query.get("after") or ""
        limit = r.q_int("limit", 500)
        wait = r.q_float("wait", 0.0)
        blips = self._long_poll(
            wait,
            lambda: _BlipList(items=self._s.read_wave_after(r.who, wave, after, limit=limit)),
            lambda res: not res.items,
        ).items
        return 200, {"blips": blips, "cursor": blips[-1].id if blips else after}

    def _activity(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        return 200, self._s.activity(r.who, unquote(m[1]))

    def _context(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        return 200, self._s.context(r.who, unquote(m[1]))

    def _get_blip(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        return 200, self._s.get_blip(r.who, unquote(m[1]))

    def _history(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        return 200, {"blips": self._s.history(r.who, unquote(m[1]))}

    def _feed(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        body = r.model(FeedRequest)
        if not body.wait >= 0:  # also NaN, which would otherwise wait forever
            raise errors.UsageError("wait must be a non-negative number of seconds")
        wave = unquote(m[1])
        feed = self._long_poll(
            body.wait,
            lambda: self._s.feed(r.who, wave, body.participant, body.cursors, limit=body.limit),
            lambda f: not f.blips,
        )
        return 200, feed

    def _report_presence(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        body = r.model(PresenceReport)
        wave = self._s.get_wave(r.who, unquote(m[1]))
        if not r.who.is_operator and body.participant != r.who.name:
            raise errors.Forbidden(f"{r.who.name!r} cannot report presence for {body.participant!r}")
        before = self.presence.rows(wave.id, [body.participant])[0].state
        self.presence.report(wave.id, body)
        if self.presence.rows(wave.id, [body.participant])[0].state != before:
            self.notifier.bump()  # a state change wakes the console's streams (pings alone do not)
        return 200, {"ok": True}

    def _presence(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        wave = self._s.get_wave(r.who, unquote(m[1]))
        names = [n for n, _kind in self._s.participants(r.who, wave.id) if n != OPERATOR]
        return 200, {"presence": self.presence.rows(wave.id, names)}

    def _record_session(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        return 200, self._s.record_session(r.who, unquote(m[1]), r.model(NewSession))

    def _sessions(self, r: Request, m: re.Match[str]) -> tuple[int, Any]:
        participant = r.query.get("participant") or None
        return 200, {"sessions": self._s.sessions(r.who, unquote(m[1]), participant)}

    def _mint(self, r: Request, _m: re.Match[str]) -> tuple[int, Any]:
        body = r.model(MintRequest)
        return 201, self._s.mint_token(r.who, body.wave, body.participant, secrets.token_urlsafe(32))

    def _list_tokens(self, r: Request, _m: re.Match[str]) -> tuple[int, Any]:
        return 200, {"tokens": self._s.list_tokens(r.who, r.query.get("wave") or None)}

    def _revoke(self, r: Request, _m: re.Match[str]) -> tuple[int, Any]:
        body = r.model(RevokeRequest)
        revoked = self._s.revoke_tokens(
            r.who, token_id=body.token_id, wave=body.wave, participant=body.participant
        )
        return 200, {"revoked": revoked}


@record
class _BlipList:
    items: list[Any]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up mid-request is routine; anything else is logged with its traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            log.debug("client %s went away: %s", client_address, exc)
        else:
            log.exception("error serving %s", client_address)

    def __init__(self, addr: tuple[str, int], handler: type[BaseHTTPRequestHandler], daemon: Daemon) -> None:
        self.address_family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
        self.fleet = daemon
        super().__init__(addr, handler)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = f"fleet/{__version__}"
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Malformed HTTP (bad request line, oversized headers): a JSON error, then close."""
        self.close_connection = True
        self._respond(code, {"error": {"kind": "usage", "message": message or HTTPStatus(code).phrase}})

    def _respond(self, status: int, payload: Any) -> None:
        body = json.dumps(jsonable(payload), separators=(",", ":")).encode("utf-8")
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = ""
        head = (
            f"HTTP/1.1 {status} {reason}\r\n"
            f"Server: {self.server_version}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
            + ("Connection: close\r\n" if self.close_connection else "")
            + "\r\n"
        )
        if getattr(self, "command", None) == "HEAD":
            body = b""  # a HEAD answer has the headers only, or a keep-alive client desyncs
        try:
            self.wfile.write(head.encode("latin-1") + body)  # one write: no delayed-ACK stall
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _error(self, exc: errors.FleetError) -> None:
        status, kind = errors.status_of(exc)
        self._respond(status, {"error": {"kind": kind, "message": exc.message}})

    def _read_body(self) -> bytes | None:
        daemon = self.server.fleet
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            self._error(errors.UsageError("chunked request bodies are not supported: send Content-Length"))
            return None
        raw = self.headers.get("Content-Length")
        if raw is None:
            return b""
        try:
            length = int(raw)
            if length < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            self._error(errors.UsageError(f"bad Content-Length {raw!r}"))
            return None
        if length > daemon.max_blip_bytes + BODY_SLACK:
            self.close_connection = True
            self._error(
                errors.PayloadTooLarge(
                    f"request body of {length} bytes is over the limit of"
                    f" {daemon.max_blip_bytes + BODY_SLACK}:"
                    f" blips are limited to {daemon.max_blip_bytes} bytes"
                )
            )
            self._drain(length)
            return None
        return self.rfile.read(length) if length else b""

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

    def _handle(self) -> None:
        daemon = self.server.fleet
        body = self._read_body()
        if body is None:
            return
        if not daemon._enter():
            self.close_connection = True
            self._respond(503, {"error": {"kind": "unreachable", "message": "the daemon is shutting down"}})
            return
        try:
            status, payload = daemon.dispatch(self.command, self.path, self.headers, body)
            self._respond(status, payload)
        except errors.FleetError as exc:
            self._error(exc)
        except Exception:
            log.exception("internal error on %s %s", self.command, self.path)
            self._respond(
                500,
                {"error": {"kind": "error", "message": "internal error: see the daemon log (`fleet paths`)"}},
            )
        finally:
            daemon._leave()

    do_GET = _handle
    do_POST = _handle

    def _unsupported(self) -> None:
        if self._read_body() is None:
            return  # already answered (bad Content-Length, body too large)
        self._respond(405, {"error": {"kind": "usage", "message": f"{self.command} is not supported"}})

    do_PUT = _unsupported
    do_DELETE = _unsupported
    do_PATCH = _unsupported
    do_HEAD = _unsupported


def read_endpoint(paths: Paths) -> Endpoint | None:
    """The endpoint file, or None if absent or unreadable."""
    try:
        return loads(Endpoint, Path(paths.endpoint).read_text(encoding="utf-8"))
    except (OSError, RecordError):
        return None
