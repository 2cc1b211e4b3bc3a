"""From a request to its handler: the route table bound to the handlers, tokens, request keys, and
what every handler uses of the daemon (the store, wake-ups, long-polls).

What a caller may rely on:

- :func:`bind` binds each route of :data:`fleet.routes.ROUTES` to the handler of the same name in
  the handler modules (one per noun) and each ``rebuild``/``exact`` route to its rebuild; a route
  without its handler, a handler without its route, or a rebuild where the table says none (or none
  where it says one) is refused when this module is imported, naming it.
- :class:`Dispatcher` runs one call: route (404 unknown path, 405 other method), the token (none for
  an ``auth="none"`` route), the request key of a ``keyed`` route (:mod:`fleet.store.keys`: a repeat
  gets the first answer), then the handler.
"""

from __future__ import annotations

import hmac
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from fleet import errors
from fleet.console import tree_key
from fleet.daemon import (
    blips,
    budgets,
    feed,
    memory,
    meta,
    permissions,
    presence,
    sessions,
    summaries,
    supervisor,
    tokens,
    wavelets,
    waves,
)
from fleet.daemon.request import NOBODY, Answer, Answered, Handler, Parking, Raw, Rebuild, Request, at_once
from fleet.daemon.wakes import Notifier, member_key
from fleet.httpbase import connection_notes, json_bytes
from fleet.models import MAX_REF, ErrorBody, ErrorEnvelope, Wavelet
from fleet.routes import ROUTES, Route
from fleet.store import OPERATOR_PRINCIPAL, Principal, Store
from fleet.store.events import Event, TokenMinted, parse
from fleet.store.keys import Claim, Found, Run, check_key, fingerprint, scope_of

log = logging.getLogger(__name__)

M = TypeVar("M")

MAX_WAIT = 60.0
"""Seconds a long-poll waits at most, whatever it asks."""
MAX_TOKEN = 200
"""The longest bearer token looked at (fleet's are 43 characters): a longer one is refused unread."""

HANDLER_MODULES = (
    meta, waves, wavelets, blips, summaries, feed, presence, sessions, supervisor, memory, permissions,
    budgets, tokens,
)  # fmt: skip
"""The modules whose ``HANDLERS`` serve the routes (and whose ``REBUILDS``, where they have one,
rebuild their answers)."""


@dataclass(frozen=True)
class Bound:
    """A route of the table bound to what serves it: its handler, its rebuild (``rebuild``: the
    module's; ``rerun``: the handler again), and its path's pattern."""

    route: Route[object]
    handler: Handler
    rebuild: Rebuild | None
    pattern: re.Pattern[str] = field(compare=False)

    @property
    def name(self) -> str:
        return self.route.name

    @property
    def method(self) -> str:
        return self.route.method

    @property
    def path(self) -> str:
        return self.route.path

    @property
    def console(self) -> bool:
        return self.route.console

    @property
    def auth(self) -> bool:
        """It needs a token."""
        return self.route.auth != "none"

    @property
    def keyed(self) -> bool:
        return self.route.keyed

    @property
    def exact(self) -> bool:
        return self.route.idempotency == "exact"

    @property
    def secret(self) -> bool:
        return self.route.idempotency == "secret"


def _rerun(d: Dispatcher, r: Request, _e: Event) -> Answer:
    """A write that is the same whether applied once or twice (a set, a close, a record): run it again."""
    route, _args = d.route(r.method, r.path)
    return at_once(route.handler(d, r))


def bind(routes: Sequence[Route[object]], modules: Sequence[object]) -> tuple[Bound, ...]:
    """Each route bound to its handler by name (see the module's docstring for what is refused)."""
    handlers: dict[str, Handler] = {}
    rebuilds: dict[str, Rebuild] = {}
    for module in modules:
        for handler in getattr(module, "HANDLERS", ()):
            if handler.__name__ in handlers:
                raise errors.FleetError(f"two handlers are named {handler.__name__}")
            handlers[handler.__name__] = handler
        rebuilds.update(getattr(module, "REBUILDS", {}))
    names = {r.name for r in routes}
    spare = sorted(set(handlers) - names) + sorted(set(rebuilds) - names)
    if spare:
        raise errors.FleetError(f"handlers or rebuilds without a route in fleet/routes.py: {spare}")
    out = []
    for route in routes:
        if route.name not in handlers:
            raise errors.FleetError(f"the route {route.name} ({route.method} {route.path}) has no handler")
        wants = route.idempotency in ("rebuild", "exact")
        if wants != (route.name in rebuilds):
            raise errors.FleetError(
                f"the route {route.name} is {route.idempotency!r}: it "
                + ("needs a rebuild" if wants else "takes no rebuild")
            )
        rebuild = rebuilds.get(route.name) or (_rerun if route.idempotency == "rerun" else None)
        pattern = re.compile(re.sub(r"\{\w+\}", "([^/]+)", route.path))
        out.append(Bound(route, handlers[route.name], rebuild, pattern))
    return tuple(out)


BOUND: tuple[Bound, ...] = bind(ROUTES, HANDLER_MODULES)
"""The whole API, bound (``docs/http-api.md``). ``console``: the operator console's page may call it
(as the operator, through ``/api/v1/…``); token routes, the feed, presence reports, the whole-wave
stream and system blips are the CLI's and the channels' only."""


@dataclass(frozen=True)
class _Table:
    """Routes as one regex over ``METHOD path``: an alternative per route, in the table's order, so
    that the first that matches is the route the table's order gives (one ``fullmatch`` a request,
    not one per route: 42 of them took 19 us of a post)."""

    routes: tuple[Bound, ...]
    regex: re.Pattern[str]
    found: dict[int, tuple[Bound, tuple[int, ...]]]
    """An alternative's group (the last a match closes) -> its route and its path segments' groups."""


_TABLES: dict[tuple[int, bool], _Table] = {}


def _table(routes: tuple[Bound, ...], console: bool) -> _Table:
    """``routes`` (only the console's, with ``console``) as a :class:`_Table`, made once."""
    key = (id(routes), console)
    table = _TABLES.get(key)
    if table is not None and table.routes is routes:
        return table
    alternatives: list[str] = []
    found: dict[int, tuple[Bound, tuple[int, ...]]] = {}
    group = 0
    for route in routes:
        if console and not route.console:
            continue
        alternatives.append(f"({re.escape(route.method)} {route.pattern.pattern})")
        group += 1
        found[group] = (route, tuple(range(group + 1, group + 1 + route.pattern.groups)))
        group += route.pattern.groups
    table = _Table(routes, re.compile("|".join(alternatives) or "(?!)"), found)
    _TABLES[key] = table
    return table


def _refusal(routes: tuple[Bound, ...], method: str, path: str, console: bool) -> errors.FleetError:
    """Why no route serves ``method path``: 405 when a route has that path under another method."""
    if not console and any(route.pattern.fullmatch(path) for route in routes):
        return errors.HttpError(405, f"{method} is not allowed on {path}")
    if console:
        return errors.NotFound(f"the console does not expose {method} {path}")
    return errors.NotFound(f"no such endpoint {method} {path}: see docs/http-api.md")


class Dispatcher:
    """Runs API calls against the open store: what the handlers see of the daemon.

    :class:`fleet.daemon.server.Daemon` is one (it adds the listeners and the lifecycle).
    """

    store: Store | None
    operator_token: str
    routes: tuple[Bound, ...]
    notifier: Notifier
    presence: presence.PresenceBook
    supervisors: supervisor.SupervisorBook

    @property
    def conn_notes(self) -> SimpleNamespace:
        """Per client connection (:func:`fleet.httpbase.connection_notes`): its last feed answer
        (:class:`feed._LastFeed`)."""
        return connection_notes()

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
            return OPERATOR_PRINCIPAL
        who = self.s.authenticate(token)
        if who is None:
            raise errors.Unauthorized("the token is unknown or revoked: ask the operator for a new one")
        return who

    def route(self, method: str, path: str, *, console: bool = False) -> tuple[Bound, tuple[str, ...]]:
        """The route serving ``method path`` and the path's unquoted segments: the first in the
        table's order whose method and path pattern match.

        NotFound for an unknown path, 405 for a known path under another method; with ``console``,
        NotFound for anything the console does not expose.
        """
        table = _table(self.routes, console)
        m = table.regex.fullmatch(f"{method} {path}")
        if m is None:
            raise _refusal(table.routes, method, path, console)
        route, groups = table.found[m.lastindex or 0]
        if not groups:
            return route, ()
        args: tuple[str, ...] = m.group(*groups) if len(groups) > 1 else (m.group(groups[0]),)
        return route, args if "%" not in path else tuple(unquote(a) for a in args)

    def dispatch(
        self,
        method: str,
        target: str,
        authorization: str | None,
        body: bytes,
        *,
        console: bool = False,
        key: str | None = None,
    ) -> Answered:
        """Run one API call: ``target`` is the request target (path and query), ``authorization``
        the ``Authorization`` header, ``key`` the ``Idempotency-Key`` header. ``console``: only the
        routes the console exposes exist. A long-poll's answer comes on its way (:data:`Parking`):
        the HTTP base drives it."""
        split = urlsplit(target)
        route, args = self.route(method, split.path, console=console)
        if args and max(map(len, args)) > MAX_REF:
            for n, arg in zip(route.route.params, args, strict=False):
                if len(arg) > MAX_REF:
                    raise errors.UsageError(
                        f"the {n} in the path is {len(arg)} characters, over the limit of {MAX_REF}:"
                        " name it by its name, WAVE/WAVELET or its id"
                    )
        who = self.authenticate(authorization) if route.auth else NOBODY
        query = (
            {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
            if split.query
            else {}
        )
        for k, v in query.items():
            if len(v) > MAX_REF or len(k) > MAX_REF:
                raise errors.UsageError(
                    f"query parameter {k[:40]!r} is {max(len(k), len(v))} characters, over the limit"
                    f" of {MAX_REF}"
                )
        request = Request(route.route, method, split.path, query, body, who, args)
        if key is not None and route.keyed:
            return self._keyed(
                route, request, Claim(scope_of(who), check_key(key), fingerprint(method, target, body))
            )
        return route.handler(self, request)

    def _keyed(self, route: Bound, r: Request, claim: Claim) -> Answer:
        """Run a write under its request key (:mod:`fleet.store.keys`): a repeat of the key gets the
        first answer, however many times the client sent it and whatever died in between."""
        keys = self.s.keys
        with keys.running(claim) as run:
            found = keys.find(claim.scope, claim.key)
            if found is not None:
                return self._repeat(route, r, claim, found, run)
            try:
                status, payload = at_once(route.handler(self, r))
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
            self.s.keys.answered(claim, status, body)
        except errors.FleetError as exc:  # the write stands: a repeat rebuilds its answer from its event
            log.warning("storing the answer of request key %s failed: %s", claim.key, exc.message)
        return body

    def _repeat(self, route: Bound, r: Request, claim: Claim, found: Found, run: Run) -> Answer:
        if found.fingerprint != claim.fingerprint:
            raise errors.Conflict(
                f"the Idempotency-Key {claim.key!r} was already used for a different request: make a new"
                " key for each operation (docs/http-api.md)"
            )
        if found.status is not None and found.body is not None:
            return found.status, Raw(found.body)  # an error the first time is the same error again
        etype, data = self.s.keys.event_at(found.seq)
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

    @property
    def s(self) -> Store:
        """The open store (DaemonUnreachable once it is closed): what every handler calls."""
        if self.store is None:
            raise errors.DaemonUnreachable("the daemon is not open")
        return self.store

    _s = s  # its name while the handlers were the daemon's own methods (tests still read it)

    def wrote(self, wave_id: str, author: str, wavelet_id: str = "") -> None:
        """A blip by ``author`` was written in ``wavelet_id`` of ``wave_id``: wake who reads either."""
        keys = [k for k in (wavelet_id, wave_id) if k]
        if author != "system":
            self.presence.posted(wave_id, author)  # (a post says nothing of what the agent does)
        self.notifier.bump(*keys)

    def roster_changed(self, wl: Wavelet, *names: str) -> None:
        """Wake who reads ``wl``, its parent (provenance blips), its wave (and its tree), and the
        feeds of ``names``."""
        keys = [wl.id, wl.wave_id, tree_key(wl.wave_id), *(member_key(wl.wave_id, n) for n in names)]
        self.notifier.bump(*(keys + ([wl.parent_id] if wl.parent_id else [])))

    def long_poll(
        self,
        wait: float,
        fetch: Callable[[], M],
        empty: Callable[[M], bool],
        keys: Callable[[M], Sequence[str]] | None = None,
        *,
        start: tuple[int, Sequence[str], M] | None = None,
        basis: list[tuple[int, Sequence[str]]] | None = None,
    ) -> Parking[M]:
        """``fetch()`` until it is not ``empty`` or ``wait`` (capped) lapses, waking on commits that
        touch ``keys(result)`` (None: any commit); a handler runs it with ``yield from``. Each wait
        is a :class:`fleet.daemon.wakes.Parked` yielded to the HTTP loop: it holds no thread and no
        read connection, and ends early when the client hangs up (the result so far is returned).

        ``start``: (what :meth:`Notifier.seen` of its keys was before a fetch, those keys, the empty
        result that fetch would give): when nothing touched the keys since, park at once without
        fetching. ``basis`` gets (seen, keys) for the returned result's fetch, when they are known
        (the fetch began after a wait on those keys)."""
        deadline = time.monotonic() + min(wait, MAX_WAIT)
        watched: Sequence[str] | None = None
        if start is not None and wait > 0 and not self.notifier.closing:
            seen, watched, result = start
            if self.notifier.seen(watched) == seen:
                self.s.release_reader()  # a parked long-poll holds no read connection
                if (yield self.notifier.park(seen, deadline - time.monotonic(), watched)):
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
            self.s.release_reader()  # a parked long-poll holds no read connection
            if (yield self.notifier.park(seen, remaining, watched)):
                return result  # the client hung up: answer now, the connection ends with it
