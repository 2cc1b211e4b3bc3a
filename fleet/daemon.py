"""The store daemon: the store over HTTP/1.1 + JSON (the contract is ``docs/http-api.md``).

What a caller may rely on:

- It listens on ``127.0.0.1`` unless a non-loopback address is asked for explicitly
  (``allow_remote``); every request but ``/v1/health`` needs a bearer token.
- The operator token is created at first start in ``data/operator.token`` (mode 0600).
- One daemon per store: an ``flock`` on ``<db>.lock`` beside the database (:mod:`fleet.store.lock`,
  naming this daemon's pid and url for a refused one) and one on ``state/daemon.lock`` are held for
  the daemon's life (the kernel drops them if the process dies, so a stale lock never wedges), and
  the endpoint file ``state/daemon.json`` names the url and pid while it runs.
- Long-poll reads wake on commits that touch what they read (keyed waiters), never by polling; each wake-up
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

import contextlib
import fcntl
import gc
import hmac
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from fleet import __version__, errors, hangup
from fleet.console import Console, presence_key, tree_key
from fleet.httpbase import IDLE_TIMEOUT, Handler, Server, is_loopback, is_wildcard, json_bytes, parse_listen
from fleet.models import (
    DEFAULT_MAX_BLIP_BYTES,
    MAX_REF,
    OPERATOR,
    AgentState,
    BlipList,
    BlipPage,
    CloseSeat,
    Endpoint,
    ErrorBody,
    ErrorEnvelope,
    Feed,
    FeedRequest,
    FeedWavelet,
    Health,
    MemoryAnswer,
    MemoryWrite,
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
    PresenceState,
    Revoked,
    RevokeRequest,
    RosterChange,
    SeatAnswer,
    SessionList,
    StopProgress,
    SummaryList,
    SupervisorAnswer,
    SupervisorClaim,
    SupervisorLease,
    SupervisorRelease,
    TokenList,
    Wavelet,
    WaveList,
    Whoami,
)
from fleet.paths import Paths, ensure_private_dir, write_private
from fleet.records.budgets import BudgetList, BudgetReport, SetBudget, SpendReport
from fleet.records.permissions import PermissionAnswer, PermissionAsk, PermissionList, PermissionSettled
from fleet.store import OPERATOR_PRINCIPAL, Principal, Store, open_store
from fleet.store.events import (
    BlipPosted,
    BlipReplaced,
    BlipSurfaced,
    Event,
    PermissionAnswered,
    PermissionAsked,
    RosterInvited,
    RosterLeft,
    TokenMinted,
    WaveCreated,
    WaveletForked,
    parse,
)
from fleet.store.faults import storage_faults
from fleet.store.keys import Claim, Found, Run, check_key, fingerprint, scope_of
from fleet.store.lock import StoreLock
from fleet.store.rows import blip_of
from fleet.store.summaries import CONTEXT_PAGE
from fleet.store.summaries import INPUT_MAX as SUMMARY_INPUT_MAX
from fleet.tls import shown
from fleet.wire import RecordError, dumps, load, loads

if TYPE_CHECKING:
    import ssl

    from fleet.tls import ServerCert

log = logging.getLogger(__name__)

M = TypeVar("M")

MAX_WAIT = 60.0
STORE_CLOSE_BOUND = 60.0
"""Seconds closing the store may take at a stop (its last WAL checkpoint), as shown to `daemon stop`."""
MAX_TOKEN = 200
"""The longest bearer token looked at (fleet's are 43 characters): a longer one is refused unread."""
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
    """Wakes long-polls when something they watch commits: waiters keyed by what they read.

    A commit bumps the keys it touched (its wavelet's id, its wave's id, a member key for roster
    changes); only waiters on one of those keys wake, each on an event of its own, so a post to a
    wave nobody reads wakes nobody. A waiter compares the sum of its keys' counters (each only
    grows, so the sum changes exactly when one of them did) with what it saw before its fetch, so a
    commit between fetch and wait is never missed. No polling. ``bump()`` with no keys and
    :meth:`close` wake everyone.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._counts: dict[str, int] = {}
        self._waiters: dict[str, set[threading.Event]] = {}
        self._everything: set[threading.Event] = set()
        """Waiters without keys: any commit wakes them."""
        self.closing = False

    @property
    def seq(self) -> int:
        """Commits so far (every bump)."""
        return self._seq

    def seen(self, keys: Sequence[str] | None = None) -> int:
        """What a waiter on ``keys`` (None: on everything) compares against after its fetch."""
        if keys is None:
            return self._seq
        with self._lock:
            return sum(self._counts.get(k, 0) for k in keys)

    def seen_since(self, seq: int, keys: Sequence[str]) -> int | None:
        """:meth:`seen` of ``keys``, if no commit at all happened since :attr:`seq` was ``seq``
        (then a fetch begun after that read is current for them); None if one did."""
        with self._lock:
            if self._seq != seq:
                return None
            return sum(self._counts.get(k, 0) for k in keys)

    @property
    def parked(self) -> int:
        """Waiters parked now (tests, benchmarks)."""
        with self._lock:
            return len(self._everything) + len({e for s in self._waiters.values() for e in s})

    def bump(self, *keys: str) -> None:
        with self._lock:
            self._seq += 1
            woken = set(self._everything)
            if not keys:
                for waiters in self._waiters.values():
                    woken |= waiters
            for k in keys:
                self._counts[k] = self._counts.get(k, 0) + 1
                woken |= self._waiters.get(k, set())
        for event in woken:
            event.set()

    def close(self) -> None:
        with self._lock:
            self.closing = True
            woken = set(self._everything).union(*self._waiters.values())
        for event in woken:
            event.set()

    def wait(self, seen: int, timeout: float, keys: Sequence[str] | None = None) -> bool:
        """Return when a commit touched ``keys`` since ``seen`` was taken, at ``timeout``, at close,
        or when the client of the connection this thread answers (:func:`fleet.hangup.current`)
        hangs up: True then (answer at once, the connection is ending), else False."""
        event = threading.Event()
        gone = threading.Event()
        with self._lock:
            now = self._seq if keys is None else sum(self._counts.get(k, 0) for k in keys)
            if self.closing or now != seen:
                return False
            if keys is None:
                self._everything.add(event)
            else:
                for k in keys:
                    self._waiters.setdefault(k, set()).add(event)

        def hung_up() -> None:
            gone.set()
            event.set()

        try:
            with hangup.watch(hangup.current(), hung_up):
                event.wait(timeout)
            return gone.is_set()
        finally:
            with self._lock:
                if keys is None:
                    self._everything.discard(event)
                else:
                    for k in keys:
                        waiters = self._waiters.get(k)
                        if waiters is not None:
                            waiters.discard(event)
                            if not waiters:
                                del self._waiters[k]


@dataclass(frozen=True)
class _LastFeed:
    """A connection's last feed answer that had blips: what its next request is expected to ask
    (:meth:`Daemon._feed` parks that request without a fetch while nothing touched ``keys``)."""

    asked: tuple[object, ...]
    """(token id, principal, wave id, participant, limit) of the request."""
    next_cursors: dict[str, str]
    """The request's cursors moved past the answer's blips."""
    seen: int
    """:meth:`Notifier.seen` of ``keys`` before the answer's fetch."""
    keys: Sequence[str]
    wavelets: list[FeedWavelet]


def member_key(wave_id: str, participant: str) -> str:
    """The key a roster change of ``participant`` in ``wave_id`` bumps (the feed waits on it)."""
    return f"member:{wave_id}:{participant}"


@dataclass
class _Seen:
    session_id: str | None = None
    host: str | None = None
    last_ping: float | None = None
    last_delivery: float | None = None
    last_post: float | None = None
    delivered: int = 0
    gone: bool = False
    gone_at: float | None = None
    launch: str | None = None
    agent: AgentState | None = None
    """The agent state the channel reported last (None: never, or a channel older than states)."""


@dataclass
class _Lease:
    holder: str
    pid: int
    host: str
    since: float
    renewed: float
    ttl: float


@dataclass
class SupervisorBook:
    """In-memory supervisor leases, one per wave (docs/resident.md): ``fleet supervise`` claims
    and renews it; a claim while another holder's lease has not lapsed is a Conflict naming it,
    unless forced. Lost with the daemon: the holder's next renewal claims it again."""

    clock: Callable[[], float] = time.time
    _leases: dict[str, _Lease] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _answer(self, wave_id: str, lease: _Lease, t: float, took_over: str = "") -> SupervisorLease:
        return SupervisorLease(
            wave_id=wave_id, holder=lease.holder, pid=lease.pid, host=lease.host,
            held_for=max(0.0, t - lease.since), renewed_ago=max(0.0, t - lease.renewed),
            expires_in=max(0.0, lease.renewed + lease.ttl - t), took_over=took_over,
        )  # fmt: skip

    def get(self, wave_id: str) -> SupervisorLease | None:
        t = self.clock()
        with self._lock:
            lease = self._leases.get(wave_id)
            if lease is None or t > lease.renewed + lease.ttl:
                return None
            return self._answer(wave_id, lease, t)

    def claim(self, wave_id: str, wave_name: str, c: SupervisorClaim) -> SupervisorLease:
        t = self.clock()
        with self._lock:
            old = self._leases.get(wave_id)
            live = old is not None and t <= old.renewed + old.ttl
            took = ""
            if old is not None and live and old.holder != c.holder:
                if not c.force:
                    raise errors.Conflict(
                        f"wave {wave_name!r} is supervised already: `fleet supervise` pid {old.pid} on"
                        f" {old.host}, for {t - old.since:.0f}s (renewed {t - old.renewed:.0f}s ago):"
                        " stop it first, or take over with --force (it then stops)"
                    )
                took = f"pid {old.pid} on {old.host}"
            if old is not None and live and old.holder == c.holder:
                old.renewed, old.ttl, old.pid, old.host = t, c.ttl, c.pid, c.host
                return self._answer(wave_id, old, t)
            lease = _Lease(holder=c.holder, pid=c.pid, host=c.host, since=t, renewed=t, ttl=c.ttl)
            self._leases[wave_id] = lease
            return self._answer(wave_id, lease, t, took)

    def release(self, wave_id: str, holder: str) -> None:
        with self._lock:
            lease = self._leases.get(wave_id)
            if lease is not None and lease.holder == holder:
                del self._leases[wave_id]


@dataclass
class PresenceBook:
    """In-memory presence: ``live`` while the channel pings within ``ping_ttl``, else ``gone``.

    What the agent does is what its channel reported (:mod:`fleet.agentstate`: the channel folds
    the session's own transcript and hooks); no delivery or post is taken as a sign of work. While
    the channel is not heard, the agent is ``unknown`` and says since when."""

    ping_ttl: float = 90.0
    clock: Callable[[], float] = time.time
    _rows: dict[tuple[str, str], _Seen] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def report(self, wave_id: str, r: PresenceReport) -> None:
        t = self.clock()
        with self._lock:
            s = self._rows.setdefault((wave_id, r.participant), _Seen())
            if r.session_id and r.session_id != s.session_id:
                s.agent = None  # another session: what the old one did says nothing of it
            s.session_id = r.session_id or s.session_id
            s.host = r.host or s.host
            s.launch = r.launch or s.launch
            if r.agent is not None:
                s.agent = r.agent
            if r.event == "gone":
                s.gone, s.gone_at = True, t
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
        if s.gone or s.last_ping is None or self.clock() - s.last_ping > self.ping_ttl:
            return "gone"
        return "live"

    def agent(self, s: _Seen) -> AgentState:
        """The reported state while the channel is heard; else ``unknown`` saying since when."""
        if self.state(s) == "live":
            if s.agent is None:
                return AgentState(kind="unknown", why="its channel reports no state (an older fleet)")
            return s.agent
        if s.agent is not None and s.agent.kind == "dead":
            return s.agent  # seen dead (its pane, by the supervisor; its SessionEnd): a fact, not a lapse
        if s.last_ping is None:
            return AgentState(kind="unknown", why="no channel has reported")
        since = s.gone_at if s.gone else s.last_ping + self.ping_ttl
        how = "said gone" if s.gone else f"silent for {self.ping_ttl:g}s"
        last = f", last {s.agent.kind}" if s.agent is not None else ""
        return AgentState(kind="unknown", since=since, why=f"channel gone at {_clock(since)}: {how}{last}")

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
                        launch=s.launch,
                        agent=self.agent(s),
                    )
                )
            return out


def _clock(t: float | None) -> str:
    return "?" if t is None else datetime.fromtimestamp(t).strftime("%H:%M:%S")


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
            self.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise errors.UsageError(
                f"the request body is not valid JSON: it is not UTF-8: byte 0x{self.body[exc.start]:02x}"
                f" at offset {exc.start} ({exc.reason}): send the text as UTF-8"
            ) from None
        try:
            data = json.loads(self.body or b"{}")
        except (ValueError, UnicodeDecodeError) as exc:  # ValueError: also a 5,000-digit integer
            raise errors.UsageError(f"the request body is not valid JSON: {exc}") from None
        except RecursionError:
            raise errors.UsageError("the request body is not valid JSON: nested too deeply") from None
        if not isinstance(data, dict):
            raise errors.UsageError("the request body must be a JSON object")
        _check_integers(data)
        # JSON's \ud800 escapes decode to lone surrogates, which no UTF-8 text (or SQLite) takes.
        bad = _lone_surrogate(data)
        if bad is not None:
            where, char = bad
            code = ord(char)
            byte = (
                f" (the non-UTF-8 byte 0x{code - 0xDC00:02x}, as a client's surrogateescape carries it)"
                if 0xDC80 <= code <= 0xDCFF
                else ""
            )
            what = f"field {where}" if where else "the request body"
            raise errors.UsageError(
                f"{what} is not valid UTF-8: it has the lone surrogate \\u{code:04x}{byte}: send UTF-8 text"
            )
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
            value = int(raw) if len(raw) <= 20 else None
        except ValueError:
            value = None
        if value is None or not -MAX_INT <= value <= MAX_INT:
            raise errors.UsageError(
                f"query parameter {name}={raw[:40]!r} is not an integer of at most 15 digits"
            ) from None
        return value


MAX_INT = 10**15
"""The largest integer a request may carry (JSON body or query): every count and limit is far below."""


def _lone_surrogate(data: Any, where: str = "") -> tuple[str, str] | None:
    """The field path and the first lone surrogate of a string in ``data`` (keys included), if any."""
    if isinstance(data, str):
        for ch in data:
            if "\ud800" <= ch <= "\udfff":
                return where, ch
        return None
    if isinstance(data, dict):
        for k, v in data.items():
            found = _lone_surrogate(k, where) or _lone_surrogate(v, f"{where}.{k}" if where else str(k))
            if found is not None:
                return found
    elif isinstance(data, list):
        for i, v in enumerate(data):
            found = _lone_surrogate(v, f"{where}[{i}]")
            if found is not None:
                return found
    return None


def _check_integers(data: Any, depth: int = 0) -> None:
    """UsageError for an integer in a request body over :data:`MAX_INT` (in magnitude)."""
    if isinstance(data, bool):
        return
    if isinstance(data, int):
        if not -MAX_INT <= data <= MAX_INT:
            raise errors.UsageError(f"an integer in the request body is out of range (at most {MAX_INT})")
    elif isinstance(data, dict):
        for v in data.values():
            _check_integers(v, depth + 1)
    elif isinstance(data, list):
        for v in data:
            _check_integers(v, depth + 1)


Answer = tuple[int, Any]
"""A status and the record answered with (or :class:`Raw`: the JSON bytes of one)."""


class Raw(bytes):
    """An answer already in JSON (a request key's stored answer), sent as it is."""


Rebuild = Callable[["Daemon", Request, Event], Answer]
"""How a write's answer is rebuilt from the event it recorded, when the daemon died before storing it."""


def _rerun(d: Daemon, r: Request, _e: Event) -> Answer:
    """A write that is the same whether applied once or twice (a set, a close, a record): run it again."""
    route, _args = d.route(r.method, r.path)
    return route.handler(d, r)


@dataclass(frozen=True)
class Route:
    """One endpoint. ``path`` is a template whose ``{name}`` parts each match one path segment.

    ``console``: the operator console's ``/api/v1/…`` proxy exposes it. ``auth``: it needs a token.
    ``keyed``: it writes, so it honours an ``Idempotency-Key`` (every POST but the ones that only read
    or report presence: :mod:`fleet.store.keys`). ``rebuild``: how its answer is rebuilt from the event
    it recorded when the daemon died before storing that answer (None: a repeat then says the request
    was applied); ``exact``: that rebuild is the first answer itself (a blip write's answer is the
    blip its event holds), so the answer is never stored: a repeat always rebuilds it. ``secret``:
    its answer carries a secret, which is never stored (a repeat says what was made instead).
    """

    method: str
    path: str
    handler: Callable[[Daemon, Request], Answer]
    console: bool = False
    auth: bool = True
    keyed: bool | None = None
    rebuild: Rebuild | None = None
    exact: bool = False
    secret: bool = False
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pattern", re.compile(re.sub(r"\{\w+\}", "([^/]+)", self.path)))
        if self.keyed is None:
            object.__setattr__(self, "keyed", self.method == "POST")


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
        ping_ttl: float = 90.0,
        ui: str | None = None,
        allow_remote_ui: bool = False,
        idle_timeout: float = IDLE_TIMEOUT,
        host_names: Sequence[str] = (),
        tls: bool | None = None,
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
        insecure_plain_http: bool = False,
        remember_port: bool = False,
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
        self.host_names = tuple(host_names)
        """Names other machines reach this daemon by (``--host-name``): accepted as ``Host``."""
        if (tls_cert is None) != (tls_key is None):
            raise errors.UsageError(
                "give both --tls-cert and --tls-key (a certificate and its key), or neither"
            )
        if insecure_plain_http and (tls or tls_cert is not None):
            raise errors.UsageError("--insecure-plain-http and TLS options contradict each other: pick one")
        if tls is None:
            tls = tls_cert is not None or (not is_loopback(host) and not insecure_plain_http)
        self.tls = tls
        """Serve HTTPS: off loopback unless ``insecure_plain_http``, and with a certificate given
        (``tls`` forces it either way)."""
        self.tls_cert, self.tls_key = tls_cert, tls_key
        self.insecure_plain_http = insecure_plain_http
        self.certificate: ServerCert | None = None
        """The certificate served (made or loaded at start), when some listener serves HTTPS."""
        self._tls_ctx: ssl.SSLContext | None = None
        self.remember_port = remember_port and port == 0
        """The local daemon (docs/design.md §2): bind the port remembered in ``state/daemon.port``
        (a fresh one the first time, or when another process took it) and remember what was bound."""
        self.presence = PresenceBook(ping_ttl=ping_ttl)
        self.supervisors = SupervisorBook()
        self.notifier = Notifier()
        self._conn = threading.local()
        """Per client connection (a thread serves one): its last feed answer (:class:`_LastFeed`)."""
        self._lock_fd: int | None = None
        self._store_lock: StoreLock | None = None
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
        self.console_link = ""
        """The console's first one-time login link (a credential: shown to the operator, not logged)."""

    # ---------------------------------------------------------------- lifecycle

    @property
    def fingerprint(self) -> str | None:
        """The served certificate's SHA-256 fingerprint (clients pin it), None on plain HTTP."""
        return self.certificate.fingerprint if self.certificate else None

    def tls_context(self, host: str) -> ssl.SSLContext | None:
        """The TLS context of a listener on ``host``: the daemon's own listener when :attr:`tls`, any
        other (the console) off loopback unless ``insecure_plain_http``. Made once, shared."""
        wanted = self.tls if host == self.host else not is_loopback(host) and not self.insecure_plain_http
        if not wanted:
            return None
        if self._tls_ctx is None:
            from fleet import tls as fleet_tls

            if self.tls_cert is not None and self.tls_key is not None:
                cert = fleet_tls.load_cert(self.tls_cert, self.tls_key)
            else:
                names = [self.host, *self.host_names, socket.gethostname(), "localhost", "127.0.0.1"]
                cert = fleet_tls.ensure_self_signed(self.paths, names)
            self._tls_ctx = fleet_tls.server_context(cert)
            self.certificate = cert
        return self._tls_ctx

    def _acquire_instance_lock(self) -> None:
        """The store's lock (one daemon per database, whatever its state dir: :mod:`fleet.store.lock`),
        then the state dir's (one daemon per endpoint file, whatever its store)."""
        ensure_private_dir(self.paths.data)
        self._store_lock = StoreLock.acquire(
            self.paths.store_lock, self.paths.db, what="the daemon", state=self.paths.state
        )
        try:
            ensure_private_dir(self.paths.state)
            fd = os.open(self.paths.daemon_lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
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
                    f"a daemon already runs with state dir {self.paths.state} at {where}, on another"
                    " store: use it, or stop it with `fleet daemon stop`"
                ) from None
        except BaseException:
            self._store_lock.release()
            self._store_lock = None
            raise
        self._lock_fd = fd

    def _open(self) -> None:
        self._acquire_instance_lock()
        with contextlib.suppress(OSError):  # a stop that died half way left it: not ours
            self.paths.daemon_stopping.unlink()
        try:
            self.operator_token = ensure_operator_token(self.paths)
            self.store = open_store(self.paths.db, max_blip_bytes=self.max_blip_bytes)
            httpd = self._listen()
            httpd.daemon = self
            self._httpd = httpd
            self.url = httpd.url
            if self.remember_port:
                write_private(self.paths.daemon_port, f"{httpd.server_address[1]}\n")
            endpoint = Endpoint(
                url=self.url,
                pid=os.getpid(),
                started_at=time.time(),
                version=__version__,
                fingerprint=self.fingerprint,
                store_id=self.store.store_id,
            )
            write_private(self.paths.endpoint, dumps(endpoint) + "\n")
            assert self._store_lock is not None
            self._store_lock.announce(self.url)
            if self.console is not None:
                try:
                    self.console_link = self.console.start()
                except BaseException:
                    httpd.server_close()
                    raise
        except BaseException:
            if self.store is not None:  # closed before its lock goes: no one else writes it meanwhile
                self.store.close()
                self.store = None
            self._release()
            raise
        log.info("fleet daemon %s listening on %s (data %s)", __version__, self.url, self.paths.data)
        if self.certificate is not None:
            log.info(
                "TLS certificate fingerprint %s (%s)",
                shown(self.certificate.fingerprint),
                self.certificate.cert,
            )
        if not is_loopback(self.host) and not self.tls:
            log.warning(
                "WARNING: PLAIN HTTP on the non-loopback address %s (--insecure-plain-http): every token,"
                " the operator's included, crosses the network IN CLEAR",
                self.host,
            )
        if is_wildcard(self.host):
            log.warning(
                "WARNING: listening on EVERY network interface (%s): any machine that can reach this one"
                " can reach the daemon; give one address (--listen ADDR:PORT) to serve one network",
                self.host,
            )

    def _server(self, port: int) -> _ApiServer:
        return _ApiServer(
            (self.host, port),
            _ApiHandler,
            name="fleet-daemon",
            body_limit=self.max_blip_bytes + BODY_SLACK,
            limit_note=f"blips are limited to {self.max_blip_bytes} bytes",
            idle_timeout=self.idle_timeout,
            closing=lambda: self.notifier.closing,
            host_names=self.host_names,
            tls=self.tls_context(self.host),
        )

    def _listen(self) -> _ApiServer:
        """Bind the listener: the remembered port when there is one and it is free, else ``self.port``."""
        if self.remember_port:
            try:
                text = self.paths.daemon_port.read_text(encoding="utf-8").strip()
            except OSError:
                text = ""
            if text.isdigit() and 0 < int(text) < 65536:
                try:
                    return self._server(int(text))
                except OSError as exc:
                    log.warning(
                        "the remembered port %s is not available (%s): taking a new one; channels and "
                        "hooks started against the old address need `fleet respawn --force`",
                        text,
                        exc.strerror or exc,
                    )
        return self._server(self.port)

    def start(self) -> None:
        """Serve in a background thread; returns once the socket is listening."""
        with storage_faults(self.paths.db):  # a full or read-only disk at start, named
            self._open()
        assert self._httpd is not None
        self._thread = self._httpd.start()

    def serve_forever(self) -> None:
        """Serve in the foreground until SIGTERM or SIGINT, then shut down gracefully."""
        with storage_faults(self.paths.db):  # a full or read-only disk at start, named
            self._open()
        assert self._httpd is not None
        if self.certificate is not None:
            sys.stderr.write(
                f"fleet: TLS certificate fingerprint {shown(self.certificate.fingerprint)}"
                f" (clients pin it: {self.url}#sha256={self.certificate.fingerprint})\n"
            )
        if self.console_link:
            # A credential: onto the operator's terminal (stderr), never into the log's INFO lines.
            sys.stderr.write(f"fleet: console: log in at {self.console_link} (one-time link)\n")
            sys.stderr.flush()

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
        # Each phase is shown in state/daemon.stopping, so `fleet daemon stop` waits while it moves.
        self._stopping("closing streams", timeout)
        self.notifier.close()  # from here on new requests get a 503, and every long-poll returns
        if self.console is not None:
            self.console.stop(timeout)
        self._httpd.stop(timeout, lambda n: self._stopping("finishing requests", timeout, n))
        if self.store is not None:
            self._stopping("closing the store", STORE_CLOSE_BOUND)
            self.store.close()
        self._release()
        with contextlib.suppress(OSError):
            self.paths.daemon_stopping.unlink()
        self._stopped.set()
        log.info("fleet daemon stopped")

    def _stopping(self, phase: str, bound: float, inflight: int = 0) -> None:
        if inflight:
            log.info("stopping: %s (%d in flight)", phase, inflight)
        progress = StopProgress(pid=os.getpid(), phase=phase, inflight=inflight, bound=bound, at=time.time())
        with contextlib.suppress(OSError):
            write_private(self.paths.daemon_stopping, dumps(progress) + "\n")

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
        if self._store_lock is not None:  # last: the store is closed (or was never opened) by now
            self._store_lock.release()
            self._store_lock = None

    # ---------------------------------------------------------------- dispatch

    def authenticate(self, header: str | None) -> Principal:
        if not header or not header.startswith("Bearer "):
            raise errors.Unauthorized(
                "this request needs a token: send `Authorization: Bearer <token>` (the operator token"
                " file in the daemon's data dir, or a participant token from `fleet token mint`)"
            )
        token = header[7:].strip()
        if len(token) > MAX_TOKEN:
            raise errors.Unauthorized(
                f"the token is {len(token)} characters, over the limit of {MAX_TOKEN}: send the token"
                " the operator gave you (`fleet token mint` prints one)"
            )
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
        self,
        method: str,
        target: str,
        authorization: str | None,
        body: bytes,
        *,
        console: bool = False,
        key: str | None = None,
    ) -> Answer:
        """Run one API call: ``target`` is the request target (path and query), ``authorization``
        the ``Authorization`` header, ``key`` the ``Idempotency-Key`` header. ``console``: only the
        routes the console exposes exist."""
        split = urlsplit(target)
        route, args = self.route(method, split.path, console=console)
        for n, arg in zip(re.findall(r"\{(\w+)\}", route.path), args, strict=False):
            if len(arg) > MAX_REF:
                raise errors.UsageError(
                    f"the {n} in the path is {len(arg)} characters, over the limit of {MAX_REF}:"
                    " name it by its name, WAVE/WAVELET or its id"
                )
        who = self.authenticate(authorization) if route.auth else NOBODY
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        for k, v in query.items():
            if len(v) > MAX_REF or len(k) > MAX_REF:
                raise errors.UsageError(
                    f"query parameter {k[:40]!r} is {max(len(k), len(v))} characters, over the limit"
                    f" of {MAX_REF}"
                )
        request = Request(method, split.path, query, body, who, args)
        if key is not None and route.keyed:
            return self._keyed(
                route, request, Claim(scope_of(who), check_key(key), fingerprint(method, target, body))
            )
        return route.handler(self, request)

    def _keyed(self, route: Route, r: Request, claim: Claim) -> Answer:
        """Run a write under its request key (:mod:`fleet.store.keys`): a repeat of the key gets the
        first answer, however many times the client sent it and whatever died in between."""
        keys = self._s.keys
        with keys.running(claim) as run:
            found = keys.find(claim.scope, claim.key)
            if found is not None:
                return self._repeat(route, r, claim, found, run)
            try:
                status, payload = route.handler(self, r)
            except errors.FleetError as exc:
                if run.seq is not None:  # it wrote, then failed: the repeat must fail alike
                    status, kind = errors.status_of(exc)
                    self._answered(
                        claim, status, ErrorEnvelope(error=ErrorBody(kind=kind, message=exc.message))
                    )
                raise
            if run.seq is None or route.secret or route.exact:
                # nothing written (a repeat runs again), not to be stored, or rebuilt exactly by a repeat
                return status, payload
            return status, self._answered(claim, status, payload)

    def _answered(self, claim: Claim, status: int, payload: object) -> Raw:
        body = Raw(json_bytes(payload))
        try:
            self._s.keys.answered(claim, status, body)
        except errors.FleetError as exc:  # the write stands: a repeat rebuilds its answer from its event
            log.warning("storing the answer of request key %s failed: %s", claim.key, exc.message)
        return body

    def _repeat(self, route: Route, r: Request, claim: Claim, found: Found, run: Run) -> Answer:
        if found.fingerprint != claim.fingerprint:
            raise errors.Conflict(
                f"the Idempotency-Key {claim.key!r} was already used for a different request: make a new"
                " key for each operation (docs/http-api.md)"
            )
        if found.status is not None and found.body is not None:
            return found.status, Raw(found.body)  # an error the first time is the same error again
        etype, data = self._s.keys.event_at(found.seq)
        event = parse(etype, data)
        if route.secret and isinstance(event, TokenMinted):
            raise errors.Conflict(
                f"this mint was applied (token {event.token_id}), but its secret is shown only once and the"
                f" answer was lost: revoke it (`fleet token revoke --id {event.token_id}`) and mint again"
            )
        if route.rebuild is None:
            raise errors.Conflict(
                f"this request (Idempotency-Key {claim.key!r}) was applied, but the daemon stopped before"
                " it answered: read the current state to see what it made"
            )
        run.written(found.seq)
        status, payload = route.rebuild(self, r, event)
        return status, payload if route.exact else self._answered(claim, status, payload)

    # ---------------------------------------------------------------- handlers

    @property
    def _s(self) -> Store:
        if self.store is None:
            raise errors.DaemonUnreachable("the daemon is not open")
        return self.store

    def _wrote(self, wave_id: str, author: str, wavelet_id: str = "") -> None:
        keys = [k for k in (wavelet_id, wave_id) if k]
        if author != "system":
            self.presence.posted(wave_id, author)  # (a post says nothing of what the agent does)
        self.notifier.bump(*keys)

    def _roster_changed(self, wl: Wavelet, *names: str) -> None:
        """Wake who reads ``wl``, its parent (provenance blips), its wave (and its tree), and the
        feeds of ``names``."""
        keys = [wl.id, wl.wave_id, tree_key(wl.wave_id), *(member_key(wl.wave_id, n) for n in names)]
        self.notifier.bump(*(keys + ([wl.parent_id] if wl.parent_id else [])))

    def _long_poll(
        self,
        wait: float,
        fetch: Callable[[], M],
        empty: Callable[[M], bool],
        keys: Callable[[M], Sequence[str]] | None = None,
        *,
        start: tuple[int, Sequence[str], M] | None = None,
        basis: list[tuple[int, Sequence[str]]] | None = None,
    ) -> M:
        """``fetch()`` until it is not ``empty`` or ``wait`` (capped) lapses, waking on commits that
        touch ``keys(result)`` (None: any commit).

        ``start``: (what :meth:`Notifier.seen` of its keys was before a fetch, those keys, the empty
        result that fetch would give): when nothing touched the keys since, park at once without
        fetching. ``basis`` gets (seen, keys) for the returned result's fetch, when they are known
        (the fetch began after a wait on those keys)."""
        deadline = time.monotonic() + min(wait, MAX_WAIT)
        watched: Sequence[str] | None = None
        if start is not None and wait > 0 and not self.notifier.closing:
            seen, watched, result = start
            if self.notifier.seen(watched) == seen:
                self._s.release_reader()  # a parked long-poll holds no read connection
                if self.notifier.wait(seen, deadline - time.monotonic(), watched):
                    return result  # the client hung up
                if deadline - time.monotonic() <= 0:
                    return result
            else:
                watched = None
        while True:
            seq = self.notifier.seq
            seen = self.notifier.seen(watched)
            result = fetch()
            remaining = deadline - time.monotonic()
            if not empty(result) or remaining <= 0 or self.notifier.closing:
                if basis is not None and watched is not None and keys is not None and keys(result) == watched:
                    basis.append((seen, watched))
                return result
            now = keys(result) if keys is not None else None
            if now is not None and now != watched:
                watched = now  # the keys are known from the first fetch
                unchanged = self.notifier.seen_since(seq, watched)
                if unchanged is None:
                    continue  # something committed since the fetch began: fetch again under them
                seen = unchanged  # nothing did: what the fetch saw is what the keys say now
            self._s.release_reader()  # a parked long-poll holds no read connection
            if self.notifier.wait(seen, remaining, watched):
                return result  # the client hung up: answer now, the connection ends with it

    def _health(self, r: Request) -> Answer:
        return 200, Health(
            ok=True,
            version=__version__,
            pid=os.getpid(),
            store_id=self._s.store_id,
            parked=self.notifier.parked,
        )

    def _whoami(self, r: Request) -> Answer:
        wave = self._s.wave_name(r.who, r.who.wave_id) if r.who.wave_id else None
        waves = None
        if r.who.waves is not None:
            waves = [w.name for w in self._s.list_waves(r.who)]
        return 200, Whoami(
            principal=r.who.name, wave_id=r.who.wave_id, wave=wave, daemon_version=__version__,
            machine=r.who.machine, waves=waves, can_mint=r.who.is_operator,
        )  # fmt: skip

    def _create_wave(self, r: Request) -> Answer:
        body = r.model(NewWave)
        wave = self._s.create_wave(r.who, body.name, body.with_)
        self.notifier.bump(wave.id, tree_key(wave.id))
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
        self._roster_changed(wl, *(m.name for m in wl.roster))
        return 201, wl

    def _invite(self, r: Request) -> Answer:
        body = r.model(RosterChange)
        wl = self._s.invite(r.who, r.arg, body.name, as_=body.as_)
        self._roster_changed(wl, body.name)
        return 200, wl

    def _leave_roster(self, r: Request) -> Answer:
        body = r.model(RosterChange)
        wl = self._s.leave(r.who, r.arg, body.name, as_=body.as_)
        self._roster_changed(wl, body.name)
        return 200, wl

    def _post(self, r: Request) -> Answer:
        body = r.model(NewBlip)
        blip = self._s.post(r.who, r.arg, body.text, as_=body.as_)
        self._wrote(blip.wave_id, blip.author, blip.wavelet_id)
        return 201, blip

    def _post_system(self, r: Request) -> Answer:
        body = r.model(NewSystemBlip)
        blip = self._s.post_system(r.who, r.arg, body.text)
        self._wrote(blip.wave_id, blip.author, blip.wavelet_id)
        return 201, blip

    def _surface(self, r: Request) -> Answer:
        body = r.model(NewSurface)
        blip = self._s.surface(r.who, r.arg, body.text, source_blip_id=body.source_blip_id, as_=body.as_)
        self._wrote(blip.wave_id, blip.author, blip.wavelet_id)
        return 201, blip

    def _replace(self, r: Request) -> Answer:
        body = r.model(NewBlip)
        blip = self._s.replace(r.who, r.arg, body.text, as_=body.as_)
        self._wrote(blip.wave_id, blip.writer, blip.wavelet_id)
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
            lambda _got: (wl.id,),
        )
        return 200, BlipPage(blips=blips, cursor=blips[-1].id if blips else after)

    def _read_wave(self, r: Request) -> Answer:
        """Every blip of the wave after ``after`` (long-poll): the operator's whole-wave stream."""
        after = r.query.get("after") or ""
        limit = r.q_int("limit", 500)
        wait = r.q_float("wait", 0.0)
        wave_id = str(self._s.access.wave(r.who, r.arg)["id"]) if wait > 0 else ""
        blips = self._long_poll(
            wait,
            lambda: self._s.read_wave_after(r.who, r.arg, after, limit=limit),
            lambda got: not got,
            lambda _got: (wave_id,),
        )
        return 200, BlipPage(blips=blips, cursor=blips[-1].id if blips else after)

    def _activity(self, r: Request) -> Answer:
        return 200, self._s.activity(r.who, r.arg)

    def _context(self, r: Request) -> Answer:
        """One page of the assembled context: ``limit`` entries (default 500), older than ``before``."""
        limit = r.q_int("limit", CONTEXT_PAGE)
        if limit < 1:
            raise errors.UsageError(f"limit={limit} must be at least 1")
        return 200, self._s.context(r.who, r.arg, limit=limit, before=r.query.get("before") or None)

    def _summaries(self, r: Request) -> Answer:
        return 200, SummaryList(summaries=self._s.summaries.of(r.who, r.arg))

    def _summarize(self, r: Request) -> Answer:
        verdict = self._s.summaries.summarize(r.who, r.arg, r.model(NewSummary))
        return (201 if verdict.accepted else 200), verdict

    def _summary_check(self, r: Request) -> Answer:
        return 200, self._s.summaries.check(r.who, r.arg)

    def _summary_pending(self, r: Request) -> Answer:
        return 200, self._s.summaries.pending(r.who, r.arg, limit=r.q_int("limit", SUMMARY_INPUT_MAX))

    def _pin(self, r: Request) -> Answer:
        return 200, self._s.summaries.pin(r.who, r.arg, as_=r.model(NewPin).as_)

    def _get_blip(self, r: Request) -> Answer:
        return 200, self._s.get_blip(r.who, r.arg)

    def _history(self, r: Request) -> Answer:
        return 200, BlipList(blips=self._s.history(r.who, r.arg))

    def _feed(self, r: Request) -> Answer:
        body = r.model(FeedRequest)
        if not body.wait >= 0:  # also NaN, which would otherwise wait forever
            raise errors.UsageError("wait must be a non-negative number of seconds")
        wave_id = self._s.wave_id(r.who, r.arg) if body.wait > 0 else ""
        asked = (r.who.token_id, r.who.name, wave_id, body.participant, body.limit)
        last: _LastFeed | None = getattr(self._conn, "feed", None)
        self._conn.feed = None  # (a request that fails leaves no note behind)
        start = None
        if last is not None and last.asked == asked and last.next_cursors == body.cursors:
            start = (last.seen, last.keys, Feed(wavelets=last.wavelets, blips=[]))
        basis: list[tuple[int, Sequence[str]]] = []
        feed = self._long_poll(
            body.wait,
            lambda: self._s.feed(r.who, r.arg, body.participant, body.cursors, limit=body.limit),
            lambda f: not f.blips,
            lambda f: [*(w.id for w in f.wavelets), member_key(wave_id, body.participant)],
            start=start,
            basis=basis,
        )
        if basis and feed.blips and not feed.more and wave_id:
            # What this connection's next request will ask, and what it would be answered: nothing,
            # unless a commit touches these keys since the fetch began. So that request parks at
            # once, without a fetch of its own (half of a channel's feed requests in a burst).
            nxt = dict(body.cursors)
            for b in feed.blips:
                nxt[b.wavelet_id] = max(nxt.get(b.wavelet_id, ""), b.id)
            seen, keys = basis[0]
            self._conn.feed = _LastFeed(asked, nxt, seen, keys, feed.wavelets)
        # the budgets the participant's channel checks before it delivers: sent with the answer,
        # so that a delivery costs one request, not two (docs/http-api.md)
        feed.budgets = self._s.budgets(r.who, r.arg, body.participant)
        return 200, feed

    def _report_presence(self, r: Request) -> Answer:
        body = r.model(PresenceReport)
        wave_id = self._s.wave_id(r.who, r.arg)  # (not the whole wave: two per second per agent)
        if not r.who.is_operator and body.participant != r.who.name:
            raise errors.Forbidden(f"{r.who.name!r} cannot report presence for {body.participant!r}")
        row = self.presence.rows(wave_id, [body.participant])[0]
        before = (row.state, row.agent)
        self.presence.report(wave_id, body)
        row = self.presence.rows(wave_id, [body.participant])[0]
        if (row.state, row.agent) != before:
            # a state change wakes the wave's console streams (not pings), and nothing else
            self.notifier.bump(presence_key(wave_id))
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

    def _supervisor(self, r: Request) -> Answer:
        self._s.access.require_operator(r.who, "reads who supervises a wave")
        wave = self._s.access.wave(r.who, r.arg)
        return 200, SupervisorAnswer(lease=self.supervisors.get(str(wave["id"])))

    def _claim_supervisor(self, r: Request) -> Answer:
        self._s.access.require_operator(r.who, "supervises a wave")
        body = r.model(SupervisorClaim)
        wave = self._s.access.wave(r.who, r.arg)
        return 200, SupervisorAnswer(lease=self.supervisors.claim(str(wave["id"]), str(wave["name"]), body))

    def _release_supervisor(self, r: Request) -> Answer:
        self._s.access.require_operator(r.who, "supervises a wave")
        body = r.model(SupervisorRelease)
        wave = self._s.access.wave(r.who, r.arg)
        self.supervisors.release(str(wave["id"]), body.holder)
        return 200, SupervisorAnswer(lease=self.supervisors.get(str(wave["id"])))

    def _memory(self, r: Request) -> Answer:
        from fleet.resident import memory

        seat, wave = self._s.memory_seat(r.who, r.arg)
        path = memory.memory_file(seat, wave.name)
        return 200, MemoryAnswer(wave=wave.name, path=str(path), content=memory.read(path))

    def _write_memory(self, r: Request) -> Answer:
        """The daemon holds the pen (:mod:`fleet.resident.memory`): it writes the file, then one blip
        records the write (the operator's wakes the resident to re-read it)."""
        from fleet.resident import memory

        body = r.model(MemoryWrite)
        seat, wave = self._s.memory_seat(r.who, r.arg)
        author = self._s.access.author(r.who, body.as_)
        if author not in (r.who.name, seat.participant):
            raise errors.Forbidden(
                f"memory is written by the operator or as the wave's resident ({seat.participant!r}),"
                f" not as {author!r}"
            )
        path = memory.memory_file(seat, wave.name)
        content = memory.apply(path, body.op, body.content)
        said = memory.summary_of(body.content, body.summary)
        by_resident = author == seat.participant
        text = memory.blip_text(body.op, said, wave.name, by_resident, seat.participant)
        if by_resident:
            blip = self._s.post_system(OPERATOR_PRINCIPAL, wave.root_id, text)
        else:
            blip = self._s.post(r.who, wave.root_id, text)
        self._wrote(blip.wave_id, blip.author, blip.wavelet_id)
        return 200, MemoryAnswer(
            wave=wave.name, path=str(path), content=content, summary=said, blip_id=blip.id
        )

    # ---------------------------------------------------------------- permission prompts

    def _permissions_changed(self, wave_id: str) -> None:
        """Wake the hooks waiting on the wave's requests and the console's presence streams."""
        self.notifier.bump(permission_key(wave_id), presence_key(wave_id))

    def _ask_permission(self, r: Request) -> Answer:
        req = self._s.permissions.ask(r.who, r.arg, r.model(PermissionAsk))
        self._permissions_changed(req.wave_id)
        return 201, req

    def _list_permissions(self, r: Request) -> Answer:
        pending = r.query.get("pending", "0") not in ("", "0", "false")
        got = self._s.permissions.list(
            r.who, r.arg, r.query.get("participant") or None, pending=pending, limit=r.q_int("limit", 100)
        )
        return 200, PermissionList(requests=got)

    def _get_permission(self, r: Request) -> Answer:
        """One request; with ``wait``, a long-poll until it is no longer pending (what the hook waits on)."""
        wave, request_id = r.args
        wait = r.q_float("wait", 0.0)
        wave_id = self._s.wave_id(r.who, wave)
        req = self._long_poll(
            wait,
            lambda: self._s.permissions.get(r.who, wave_id, request_id),
            lambda got: got.state == "pending",
            lambda _got: (permission_key(wave_id),),
        )
        return 200, req

    def _answer_permission(self, r: Request) -> Answer:
        req = self._s.permissions.answer(r.who, r.arg, r.model(PermissionAnswer))
        self._permissions_changed(req.wave_id)
        return 200, req

    def _settle_permission(self, r: Request) -> Answer:
        wave, request_id = r.args
        req = self._s.permissions.settle(r.who, wave, request_id, r.model(PermissionSettled))
        self._permissions_changed(req.wave_id)
        return 200, req

    def _budgets(self, r: Request) -> Answer:
        return 200, BudgetList(budgets=self._s.budgets(r.who, r.arg, r.query.get("participant") or None))

    def _set_budget(self, r: Request) -> Answer:
        got = self._s.set_budget(r.who, r.arg, r.model(SetBudget))
        return 200, BudgetList(budgets=[got] if got is not None else [])

    def _report_spend(self, r: Request) -> Answer:
        return 200, BudgetList(budgets=self._s.report_spend(r.who, r.arg, r.model(SpendReport)))

    def _budget_reached(self, r: Request) -> Answer:
        got = self._s.budget_reached(r.who, r.arg, r.model(BudgetReport))
        if got.first and got.wavelet_id:
            wave = self._s.get_wave(r.who, r.arg)
            self._wrote(wave.id, "system", got.wavelet_id)
        return 200, got

    def _mint(self, r: Request) -> Answer:
        body = r.model(MintRequest)
        secret = secrets.token_urlsafe(32)
        return 201, self._s.mint_token(r.who, body.wave, body.participant, secret, machine=body.machine)

    def _mint_machine(self, r: Request) -> Answer:
        body = r.model(NewMachine)
        return 201, self._s.mint_machine_token(r.who, body.name, body.waves, secrets.token_urlsafe(32))

    def _list_tokens(self, r: Request) -> Answer:
        tokens = self._s.list_tokens(
            r.who, r.query.get("wave") or None, machine=r.query.get("machine") or None
        )
        return 200, TokenList(tokens=tokens)

    def _events(self, r: Request) -> Answer:
        """A page of the event log (``fleet export``): the full operator only."""
        from fleet.store.artifact import PAGE_ROWS, export_page

        wave = r.query.get("wave") or None
        tokens = r.query.get("tokens", "0") not in ("", "0", "false")
        return 200, export_page(
            self._s, r.who, wave, after=r.q_int("after", 0), limit=r.q_int("limit", PAGE_ROWS), tokens=tokens
        )

    def _revoke(self, r: Request) -> Answer:
        body = r.model(RevokeRequest)
        revoked = self._s.revoke_tokens(
            r.who, token_id=body.token_id, wave=body.wave, participant=body.participant, machine=body.machine
        )
        self.notifier.bump()  # a long-poll holding a revoked token wakes and is refused
        return 200, Revoked(revoked=revoked)


def permission_key(wave_id: str) -> str:
    """The key a permission request's write in ``wave_id`` bumps (its hook's long-poll waits on it)."""
    return f"permissions:{wave_id}"


def _permission_answer(status: int) -> Rebuild:
    def rebuild(d: Daemon, r: Request, e: Event) -> Answer:
        assert isinstance(e, PermissionAsked | PermissionAnswered)
        return status, d._s.permissions.get(r.who, e.wave_id, e.request_id)

    return rebuild


def _blip_answer(d: Daemon, r: Request, e: Event) -> Answer:
    """The blip the write recorded, as its writer was shown it (the same sight of its sources)."""
    assert isinstance(e, BlipPosted | BlipSurfaced | BlipReplaced)
    return 201, blip_of(e.blip, d._s.access.sight(r.who))


def _wave_answer(d: Daemon, r: Request, e: Event) -> Answer:
    assert isinstance(e, WaveCreated)
    return 201, d._s.get_wave(r.who, e.wave_id)


def _wavelet_answer(status: int) -> Rebuild:
    def rebuild(d: Daemon, r: Request, e: Event) -> Answer:
        assert isinstance(e, WaveletForked | RosterInvited | RosterLeft)
        return status, d._s.resolve(r.who, e.wavelet_id)

    return rebuild


ROUTES: tuple[Route, ...] = (
    Route("GET", "/v1/health", Daemon._health, auth=False),
    Route("GET", "/v1/whoami", Daemon._whoami, console=True),
    Route("POST", "/v1/waves", Daemon._create_wave, rebuild=_wave_answer),
    Route("GET", "/v1/waves", Daemon._list_waves, console=True),
    Route("GET", "/v1/waves/{wave}", Daemon._get_wave, console=True),
    Route("POST", "/v1/waves/{wave}/feed", Daemon._feed, keyed=False),
    Route("POST", "/v1/waves/{wave}/presence", Daemon._report_presence, keyed=False),
    Route("GET", "/v1/waves/{wave}/presence", Daemon._presence, console=True),
    Route("GET", "/v1/waves/{wave}/blips", Daemon._read_wave),
    Route("GET", "/v1/waves/{wave}/activity", Daemon._activity),
    Route("POST", "/v1/waves/{wave}/sessions", Daemon._record_session, rebuild=_rerun),
    Route("GET", "/v1/waves/{wave}/sessions", Daemon._sessions),
    Route("GET", "/v1/waves/{wave}/seat", Daemon._seat),
    Route("POST", "/v1/waves/{wave}/seat", Daemon._claim_seat),
    Route("POST", "/v1/waves/{wave}/seat/close", Daemon._close_seat, rebuild=_rerun),
    Route("GET", "/v1/waves/{wave}/supervisor", Daemon._supervisor),
    Route("POST", "/v1/waves/{wave}/supervisor", Daemon._claim_supervisor, keyed=False),
    Route("POST", "/v1/waves/{wave}/supervisor/release", Daemon._release_supervisor, keyed=False),
    Route("GET", "/v1/waves/{wave}/memory", Daemon._memory),
    Route("POST", "/v1/waves/{wave}/memory", Daemon._write_memory),
    Route("GET", "/v1/waves/{wave}/budgets", Daemon._budgets),
    Route("POST", "/v1/waves/{wave}/budgets", Daemon._set_budget, rebuild=_rerun),
    Route("POST", "/v1/waves/{wave}/budgets/reached", Daemon._budget_reached, rebuild=_rerun),
    Route("POST", "/v1/waves/{wave}/budgets/spend", Daemon._report_spend, rebuild=_rerun),
    Route("POST", "/v1/waves/{wave}/permissions", Daemon._ask_permission, rebuild=_permission_answer(201)),
    Route("GET", "/v1/waves/{wave}/permissions", Daemon._list_permissions, console=True),
    Route(
        "POST",
        "/v1/waves/{wave}/permissions/answer",
        Daemon._answer_permission,
        console=True,
        rebuild=_permission_answer(200),
    ),
    Route("GET", "/v1/waves/{wave}/permissions/{request}", Daemon._get_permission),
    Route(
        "POST",
        "/v1/waves/{wave}/permissions/{request}/settled",
        Daemon._settle_permission,
        rebuild=_permission_answer(200),
    ),
    Route("GET", "/v1/resolve", Daemon._resolve, console=True),
    Route("GET", "/v1/wavelets/{wavelet}", Daemon._get_wavelet, console=True),
    Route("POST", "/v1/wavelets/{wavelet}/fork", Daemon._fork, console=True, rebuild=_wavelet_answer(201)),
    Route(
        "POST", "/v1/wavelets/{wavelet}/invite", Daemon._invite, console=True, rebuild=_wavelet_answer(200)
    ),
    Route(
        "POST",
        "/v1/wavelets/{wavelet}/leave",
        Daemon._leave_roster,
        console=True,
        rebuild=_wavelet_answer(200),
    ),
    Route(
        "POST", "/v1/wavelets/{wavelet}/blips", Daemon._post, console=True, rebuild=_blip_answer, exact=True
    ),
    Route("GET", "/v1/wavelets/{wavelet}/blips", Daemon._read, console=True),
    Route("POST", "/v1/wavelets/{wavelet}/system", Daemon._post_system, rebuild=_blip_answer, exact=True),
    Route(
        "POST",
        "/v1/wavelets/{wavelet}/surface",
        Daemon._surface,
        console=True,
        rebuild=_blip_answer,
        exact=True,
    ),
    Route("GET", "/v1/wavelets/{wavelet}/context", Daemon._context, console=True),
    Route("GET", "/v1/wavelets/{wavelet}/summaries", Daemon._summaries),
    Route("POST", "/v1/wavelets/{wavelet}/summaries", Daemon._summarize),
    Route("GET", "/v1/wavelets/{wavelet}/summaries/check", Daemon._summary_check),
    Route("GET", "/v1/wavelets/{wavelet}/summaries/pending", Daemon._summary_pending),
    Route("POST", "/v1/blips/{blip}/pin", Daemon._pin),
    Route("GET", "/v1/blips/{blip}", Daemon._get_blip, console=True),
    Route("GET", "/v1/blips/{blip}/history", Daemon._history, console=True),
    Route(
        "POST", "/v1/blips/{blip}/replace", Daemon._replace, console=True, rebuild=_blip_answer, exact=True
    ),
    Route("POST", "/v1/tokens", Daemon._mint, secret=True),
    Route("POST", "/v1/machines", Daemon._mint_machine, secret=True),
    Route("GET", "/v1/tokens", Daemon._list_tokens),
    Route("POST", "/v1/tokens/revoke", Daemon._revoke, rebuild=_rerun),
    Route("GET", "/v1/events", Daemon._events),
)
"""The whole API (``docs/http-api.md``). ``console=True``: the operator console's page may call it
(as the operator, through ``/api/v1/…``); token routes, the feed, presence reports, the whole-wave
stream and system blips are the CLI's and the channels' only."""


# ---------------------------------------------------------------- HTTP


class _ApiServer(Server):
    daemon: Daemon

    def after_burst(self) -> None:
        gc.collect()  # the burst's garbage first: the readers renewed next are not placed among it
        store = self.daemon.store
        if store is not None:
            store.shrink_readers()
        super().after_burst()


class _ApiHandler(Handler):
    server_version = f"fleet/{__version__}"
    server: _ApiServer

    def handle_request(self, body: bytes) -> None:
        status, payload = self.server.daemon.dispatch(
            self.command,
            self.path,
            self.headers.get("Authorization"),
            body,
            key=self.headers.get("Idempotency-Key"),
        )
        if isinstance(payload, Raw):
            self.respond(status, payload, "application/json")
        else:
            self.respond_json(status, payload)

    def request_done(self) -> None:
        """Each request gives its thread's read connection back to the store's pool as it ends: an
        idle keep-alive connection holds none."""
        store = self.server.daemon.store
        if store is not None:
            store.release_reader()


def read_endpoint(paths: Paths) -> Endpoint | None:
    """The endpoint file, or None if absent or unreadable."""
    try:
        return loads(Endpoint, Path(paths.endpoint).read_text(encoding="utf-8"))
    except (OSError, RecordError):
        return None
