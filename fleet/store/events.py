"""The event log: one record per event type, and the one code path that applies them.

Every mutation of the store is one event. :func:`record` appends it to the ``events`` table and
applies it to the materialised tables in the caller's write transaction; :func:`replay` rebuilds a
fresh database from a log by parsing each row back into its model (:func:`parse`) and applying it
the same way. :func:`apply` is a dispatch on the model's class, and it is the only code that changes
the materialised tables, so a replayed database equals the live one row for row.

What a caller may rely on:

- :data:`Event` is a msgspec tagged union on ``type`` (the ``events.type`` column). ``type`` itself
  is not part of the stored payload: the payload JSON is exactly what fleet has always written (keys
  in the same order, compact separators, ASCII escapes, a blip's optional keys left out when unset),
  so a log written by an older fleet replays, and writing the same event again gives the same text.
- An event carries the records the reads answer with where the noun is the same (a
  :class:`~fleet.models.Blip`, a :class:`~fleet.models.SeatClaim`, a
  :class:`~fleet.models.SessionRecord`, a :class:`~fleet.records.budgets.BudgetRule`): one
  declaration per noun serves the wire, the log and the rows.
- Events are strict, frozen and refuse unknown keys (a blip's too): a payload that does not fit, or a
  type this fleet does not know (a log from a newer fleet), stops :func:`parse` with a
  :class:`fleet.errors.FleetError` naming the first misfit instead of being half applied.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import msgspec

from fleet import errors
from fleet.models import (
    OPERATOR,
    ROOT_WAVELET,
    Blip,
    Joining,
    SeatClaim,
    SessionRecord,
    SummaryAuthorKind,
)
from fleet.records.budgets import BudgetRule
from fleet.store import keys
from fleet.store.schema import Conn, connect, migrate, note_token_write, now
from fleet.wire import Record, RecordError, load


class _Event(Record, kw_only=True, forbid_unknown_fields=True, tag_field="type"):
    """The base of every event: its ``tag`` is its ``type``."""

    @property
    def type(self) -> str:
        """The event's type: its ``events.type`` column (never in the payload)."""
        return str(self.__struct_config__.tag)


class NewMember(Joining, kw_only=True, forbid_unknown_fields=True):
    """A participant joining a roster, as the log holds it (strict: the wire's :class:`Joining` is
    lenient). ``since``: the last blip before it joined ('' at creation)."""


class WaveCreated(_Event, kw_only=True, tag="wave.created"):
    """A wave with its root wavelet ``main``, its first roster and its ``system`` blip."""

    wave_id: str
    root_id: str
    name: str
    created_by: str
    created_at: str
    members: list[NewMember]
    blips: list[Blip]


class WaveletForked(_Event, kw_only=True, tag="wavelet.forked"):
    """A wavelet forked from ``parent_id`` at ``fork_blip_id``, with its roster and provenance blips."""

    wavelet_id: str
    wave_id: str
    parent_id: str
    fork_blip_id: str | None
    name: str
    private: bool
    created_by: str
    created_at: str
    members: list[NewMember]
    blips: list[Blip]


class RosterInvited(_Event, kw_only=True, tag="roster.invited"):
    wavelet_id: str
    wave_id: str
    at: str
    member: NewMember
    blip: Blip


class RosterLeft(_Event, kw_only=True, tag="roster.left"):
    wavelet_id: str
    wave_id: str
    name: str
    at: str
    blip: Blip


class WaveletTopicSet(_Event, kw_only=True, tag="wavelet.topic"):
    """A wavelet's topic set by ``by`` (or, with ``topic`` '', cleared), with the ``system`` blip
    that tells its members."""

    wavelet_id: str
    wave_id: str
    topic: str
    by: str
    at: str
    blip: Blip


class BlipPosted(_Event, kw_only=True, tag="blip.posted"):
    """A ``message`` (or an operator's ``system``) blip."""

    blip: Blip


class BlipSurfaced(_Event, kw_only=True, tag="blip.surfaced"):
    """A ``surface`` blip in the parent of ``blip.source_wavelet_id``."""

    blip: Blip


class BlipReplaced(_Event, kw_only=True, tag="blip.replaced"):
    """A new version of ``blip.replaces``, which becomes ``superseded_by`` it."""

    blip: Blip


class TokenMinted(_Event, kw_only=True, tag="token.minted"):
    """A token for (wave, participant); with ``machine``, minted for that machine (a join), and with
    ``scope`` (wave ids, ``wave_id`` first) an operator-capable machine token for those waves
    (``participant`` is then ``operator``)."""

    token_id: str
    wave_id: str
    participant: str
    hash: str
    created_at: str
    machine: str | None = None
    scope: list[str] | None = None


class TokenRevoked(_Event, kw_only=True, tag="token.revoked"):
    token_id: str
    revoked_at: str


class SessionRecorded(SessionRecord, _Event, kw_only=True, tag="session.recorded"):
    """The agent session a participant runs (the newest record per wave and participant wins)."""


class SeatClaimed(SeatClaim, _Event, kw_only=True, tag="seat.claimed"):
    """A wave's resident took its seat (or refreshed it: same session, new process)."""


class SeatClosed(_Event, kw_only=True, tag="seat.closed"):
    """A wave's open seat closed: stopped, found dead, or taken over."""

    wave_id: str
    closed_at: str
    why: str


class SummaryRecorded(_Event, kw_only=True, tag="summary.recorded"):
    """A rolling summary of a wavelet's blips up to ``upto`` (inclusive), checked before it was
    recorded: ``cites`` holds every id of ``load_bearing`` (docs/design.md, rolling summaries).

    ``after``: the ``upto`` of the summary it rolled forward from ('' for the first); ``covered_*``:
    the blips (current as of ``upto``) it stands in for and their UTF-8 text bytes."""

    summary_id: str
    wavelet_id: str
    wave_id: str
    after: str
    upto: str
    text: str
    author: str
    author_kind: SummaryAuthorKind
    cites: list[str]
    load_bearing: list[str]
    covered_blips: int
    covered_bytes: int
    created_at: str


class BlipPinned(_Event, kw_only=True, tag="blip.pinned"):
    """A participant pinned a blip: load-bearing from then on (every summary must cite it)."""

    blip_id: str
    wavelet_id: str
    wave_id: str
    by: str
    at: str


class BudgetSet(BudgetRule, _Event, kw_only=True, tag="budget.set"):
    """A budget set (or, with neither ``tokens`` nor ``cost``, cleared) by the operator or a layout
    at spawn; whoever had reached the scope's previous budget starts over."""


class BudgetReached(_Event, kw_only=True, tag="budget.reached"):
    """A participant's channel reported a budget passed (the first report of it as set): the
    ``system`` blip naming the operator goes with it."""

    wave_id: str
    wavelet_id: str
    scope: str
    participant: str
    set_at: str
    reached_at: str
    blip: Blip | None
    """None: another member already told the operator of this wavelet budget (the members' sum)."""


class PermissionAsked(_Event, kw_only=True, tag="permission.asked"):
    """A session's permission prompt, recorded by its hook (docs/permissions.md): pending until
    answered, or until ``expires_at`` (when the hook stops waiting)."""

    request_id: str
    wave_id: str
    participant: str
    session_id: str
    prompt_id: str
    tool: str
    preview: str
    asked_at: str
    expires_at: str


class PermissionAnswered(_Event, kw_only=True, tag="permission.answered"):
    """What became of a pending prompt: ``allowed`` or ``denied`` by ``by`` (the operator, or
    ``pane``) via ``via`` (cli, console, channel, pane), or ``expired`` (the hook let go)."""

    request_id: str
    wave_id: str
    participant: str
    outcome: Literal["allowed", "denied", "expired"]
    by: str
    via: str
    answered_at: str
    message: str


Event = (
    WaveCreated
    | WaveletForked
    | RosterInvited
    | RosterLeft
    | WaveletTopicSet
    | BlipPosted
    | BlipSurfaced
    | BlipReplaced
    | TokenMinted
    | TokenRevoked
    | SessionRecorded
    | SeatClaimed
    | SeatClosed
    | SummaryRecorded
    | BlipPinned
    | BudgetSet
    | BudgetReached
    | PermissionAsked
    | PermissionAnswered
)
"""Any event. ``type`` (its tag) tells them apart; it is stored in its own column, not in the payload."""

MODELS: tuple[type[_Event], ...] = (
    WaveCreated,
    WaveletForked,
    RosterInvited,
    RosterLeft,
    WaveletTopicSet,
    BlipPosted,
    BlipSurfaced,
    BlipReplaced,
    TokenMinted,
    TokenRevoked,
    SessionRecorded,
    SeatClaimed,
    SeatClosed,
    SummaryRecorded,
    BlipPinned,
    BudgetSet,
    BudgetReached,
    PermissionAsked,
    PermissionAnswered,
)
EVENT_TYPES: tuple[str, ...] = tuple(str(m.__struct_config__.tag) for m in MODELS)
"""Every event type this fleet writes and replays."""


_LEFT_OUT_UNSET: dict[type, frozenset[str]] = {
    # The log has always left a blip's optional keys out when they are unset ...
    Blip: frozenset(f.name for f in msgspec.structs.fields(Blip) if f.default is None),
    # ... and a token's machine keys: tokens minted before machines existed were logged without them.
    TokenMinted: frozenset({"machine", "scope"}),
}  # fmt: skip
_NEVER_LOGGED: dict[type, frozenset[str]] = {Blip: frozenset({"superseded_by"})}
"""Fields of a record an event carries that are the materialised tables' alone."""
_BLIP_KEYS = frozenset(Blip.__struct_encode_fields__) - _NEVER_LOGGED[Blip]


_Plan = tuple[tuple[str, str, bool], ...]
_PLANS: dict[type, _Plan] = {}
_SCALARS = frozenset((str, int, float, bool))


def _plan(cls: type[msgspec.Struct]) -> _Plan:
    """(field, key, left out when None) of each field of ``cls`` the log carries, in order."""
    unset = _LEFT_OUT_UNSET.get(cls, frozenset())
    never = _NEVER_LOGGED.get(cls, frozenset())
    fields = zip(cls.__struct_fields__, cls.__struct_encode_fields__, strict=True)
    return tuple((name, key, name in unset) for name, key in fields if name not in never)


def _plain(value: Any) -> Any:
    if isinstance(value, msgspec.Struct):
        cls = type(value)
        plan = _PLANS.get(cls)
        if plan is None:
            plan = _PLANS[cls] = _plan(cls)
        out: dict[str, Any] = {}
        for name, key, unset in plan:
            v = getattr(value, name)
            if v is None:
                if not unset:
                    out[key] = None
            else:
                out[key] = v if type(v) in _SCALARS else _plain(v)
        return out
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


_ENCODER = json.JSONEncoder(separators=(",", ":"))


def payload_of(event: Event) -> str:
    """The payload text stored in the log (compact JSON as ``json.dumps`` writes it, ``type`` left out)."""
    return _ENCODER.encode(_plain(event))


def _foreign_blip_keys(data: dict[str, Any]) -> list[str]:
    """Keys of the blips in a payload that no blip has (a :class:`Blip` is lenient on the wire, where
    a newer daemon may add a field; in the log, a key this fleet does not know is refused)."""
    many = data.get("blips")
    blips: list[Any] = many if isinstance(many, list) else [data.get("blip")]
    return sorted({k for b in blips if isinstance(b, dict) for k in b if k not in _BLIP_KEYS})


def parse(etype: str, payload: str) -> Event:
    """The event a log row holds. Raises FleetError for an unknown type or a payload that does not fit."""
    if etype not in EVENT_TYPES:
        raise errors.FleetError(f"unknown event type {etype!r} in the log: upgrade fleet")
    try:
        data = json.loads(payload)
        if not isinstance(data, dict):
            raise ValueError("the payload is not a JSON object")
    except ValueError as exc:
        raise errors.FleetError(f"a {etype} event in the log is not valid JSON: {exc}") from None
    try:
        if foreign := _foreign_blip_keys(data):
            raise RecordError([(f"blip.{k}", "unknown field") for k in foreign])
        return cast(Event, load(Event, {**data, "type": etype}))  # type: ignore[arg-type]
    except RecordError as exc:
        raise errors.FleetError(f"a {etype} event in the log does not fit: {errors.describe(exc)}") from None


# ---------------------------------------------------------------- events -> tables

E = TypeVar("E", bound=_Event)
_Handler = Callable[[Conn, Any], None]
_HANDLERS: dict[type[_Event], _Handler] = {}


def _on(model: type[E]) -> Callable[[Callable[[Conn, E], None]], Callable[..., None]]:
    """Register the handler of one event model (each model has exactly one)."""

    def register(fn: Callable[[Conn, E], None]) -> Callable[..., None]:
        assert model not in _HANDLERS, model
        _HANDLERS[model] = fn
        return fn

    return register


def apply(conn: Conn, event: Event) -> None:
    """Apply one event to the materialised tables, dispatching on its model: the only code that
    changes them."""
    _HANDLERS[type(event)](conn, event)


def record(conn: Conn, event: Event) -> None:
    """Append ``event`` to the log and apply it, inside the caller's write transaction (with the
    request key of the request that wrote it, if it is that request's first event: :mod:`keys`)."""
    cur = conn.execute(
        "INSERT INTO events(type, payload, created_at) VALUES (?,?,?)",
        (event.type, payload_of(event), now()),
    )
    apply(conn, event)
    assert cur.lastrowid is not None
    keys.on_record(conn, cur.lastrowid)


def _insert_blip(conn: Conn, b: Blip) -> None:
    conn.execute(
        "INSERT INTO blips(id, wavelet_id, wave_id, author, kind, text, replaces, source_wavelet_id,"
        " source_blip_id, created_at, actor, replaced_by) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            b.id,
            b.wavelet_id,
            b.wave_id,
            b.author,
            b.kind,
            b.text,
            b.replaces,
            b.source_wavelet_id,
            b.source_blip_id,
            b.created_at,
            b.actor,
            b.replaced_by,
        ),
    )


def _ensure_participant(conn: Conn, wave_id: str, name: str, kind: str) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO participants(wave_id, name, kind) VALUES (?,?,?)", (wave_id, name, kind)
    )


def _add_member(conn: Conn, wave_id: str, wavelet_id: str, m: NewMember, at: str) -> None:
    _ensure_participant(conn, wave_id, m.name, m.kind)
    conn.execute(
        "INSERT INTO members(wavelet_id, name, kind, joined_at, since) VALUES (?,?,?,?,?)",
        (wavelet_id, m.name, m.kind, at, m.since),
    )


@_on(WaveCreated)
def _wave_created(conn: Conn, e: WaveCreated) -> None:
    conn.execute(
        "INSERT INTO waves(id, name, root_id, created_at) VALUES (?,?,?,?)",
        (e.wave_id, e.name, e.root_id, e.created_at),
    )
    conn.execute(
        "INSERT INTO wavelets(id, wave_id, parent_id, fork_blip_id, name, private, created_by,"
        " created_at) VALUES (?,?,NULL,NULL,?,0,?,?)",
        (e.root_id, e.wave_id, ROOT_WAVELET, e.created_by, e.created_at),
    )
    _ensure_participant(conn, e.wave_id, OPERATOR, "human")
    for m in e.members:
        _add_member(conn, e.wave_id, e.root_id, m, e.created_at)
    for b in e.blips:
        _insert_blip(conn, b)


@_on(WaveletForked)
def _wavelet_forked(conn: Conn, e: WaveletForked) -> None:
    conn.execute(
        "INSERT INTO wavelets(id, wave_id, parent_id, fork_blip_id, name, private, created_by,"
        " created_at) VALUES (?,?,?,?,?,?,?,?)",
        (
            e.wavelet_id,
            e.wave_id,
            e.parent_id,
            e.fork_blip_id,
            e.name,
            int(e.private),
            e.created_by,
            e.created_at,
        ),
    )
    for m in e.members:
        _add_member(conn, e.wave_id, e.wavelet_id, m, e.created_at)
    for b in e.blips:
        _insert_blip(conn, b)


@_on(RosterInvited)
def _roster_invited(conn: Conn, e: RosterInvited) -> None:
    _add_member(conn, e.wave_id, e.wavelet_id, e.member, e.at)
    _insert_blip(conn, e.blip)


@_on(RosterLeft)
def _roster_left(conn: Conn, e: RosterLeft) -> None:
    conn.execute("DELETE FROM members WHERE wavelet_id = ? AND name = ?", (e.wavelet_id, e.name))
    _insert_blip(conn, e.blip)


@_on(WaveletTopicSet)
def _wavelet_topic(conn: Conn, e: WaveletTopicSet) -> None:
    conn.execute("UPDATE wavelets SET topic = ? WHERE id = ?", (e.topic, e.wavelet_id))
    _insert_blip(conn, e.blip)


@_on(BlipPosted)
def _blip_posted(conn: Conn, e: BlipPosted) -> None:
    _insert_blip(conn, e.blip)


@_on(BlipSurfaced)
def _blip_surfaced(conn: Conn, e: BlipSurfaced) -> None:
    _insert_blip(conn, e.blip)


@_on(BlipReplaced)
def _blip_replaced(conn: Conn, e: BlipReplaced) -> None:
    _insert_blip(conn, e.blip)
    conn.execute("UPDATE blips SET superseded_by = ? WHERE id = ?", (e.blip.id, e.blip.replaces))


@_on(TokenMinted)
def _token_minted(conn: Conn, e: TokenMinted) -> None:
    note_token_write()
    conn.execute(
        "INSERT INTO tokens(id, wave_id, participant, hash, created_at) VALUES (?,?,?,?,?)",
        (e.token_id, e.wave_id, e.participant, e.hash, e.created_at),
    )
    if e.machine is not None:
        conn.execute(
            "INSERT INTO token_grants(token_id, machine, scope) VALUES (?,?,?)",
            (e.token_id, e.machine, json.dumps(e.scope) if e.scope is not None else None),
        )


@_on(TokenRevoked)
def _token_revoked(conn: Conn, e: TokenRevoked) -> None:
    note_token_write()
    conn.execute(
        "UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (e.revoked_at, e.token_id)
    )


@_on(SessionRecorded)
def _session_recorded(conn: Conn, e: SessionRecorded) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO sessions(wave_id, participant, session_id, wavelet_id, layout, agent,"
        " transport, cwd, host, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
        (
            e.wave_id,
            e.participant,
            e.session_id,
            e.wavelet_id,
            e.layout,
            e.agent,
            e.transport,
            e.cwd,
            e.host,
            e.updated_at,
        ),
    )


@_on(SeatClaimed)
def _seat_claimed(conn: Conn, e: SeatClaimed) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO seats(wave_id, participant, session_id, host, pid, pane_id, cwd,"
        " claimed_at, closed_at, closed_why) VALUES (?,?,?,?,?,?,?,?,NULL,'')",
        (e.wave_id, e.participant, e.session_id, e.host, e.pid, e.pane_id, e.cwd, e.claimed_at),
    )


@_on(SeatClosed)
def _seat_closed(conn: Conn, e: SeatClosed) -> None:
    conn.execute(
        "UPDATE seats SET closed_at = ?, closed_why = ? WHERE wave_id = ? AND closed_at IS NULL",
        (e.closed_at, e.why, e.wave_id),
    )


@_on(SummaryRecorded)
def _summary_recorded(conn: Conn, e: SummaryRecorded) -> None:
    conn.execute(
        "INSERT INTO summaries(id, wavelet_id, wave_id, after, upto, text, author, author_kind, cites,"
        " load_bearing, covered_blips, covered_bytes, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            e.summary_id,
            e.wavelet_id,
            e.wave_id,
            e.after,
            e.upto,
            e.text,
            e.author,
            e.author_kind,
            json.dumps(e.cites),
            json.dumps(e.load_bearing),
            e.covered_blips,
            e.covered_bytes,
            e.created_at,
        ),
    )


@_on(BlipPinned)
def _blip_pinned(conn: Conn, e: BlipPinned) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO pins(wavelet_id, blip_id, pinned_by, pinned_at) VALUES (?,?,?,?)",
        (e.wavelet_id, e.blip_id, e.by, e.at),
    )


@_on(BudgetSet)
def _budget_set(conn: Conn, e: BudgetSet) -> None:
    key = (e.wave_id, e.wavelet_id, e.participant)
    if e.tokens is None and e.cost is None:
        conn.execute("DELETE FROM budgets WHERE wave_id = ? AND wavelet_id = ? AND participant = ?", key)
    else:
        conn.execute(
            "INSERT OR REPLACE INTO budgets(wave_id, wavelet_id, participant, tokens, cost, source, set_by,"
            " set_at) VALUES (?,?,?,?,?,?,?,?)",
            (*key, e.tokens, e.cost, e.source, e.set_by, e.set_at),
        )
    conn.execute("DELETE FROM budget_marks WHERE wave_id = ? AND wavelet_id = ? AND scope = ?", key)


@_on(BudgetReached)
def _budget_reached(conn: Conn, e: BudgetReached) -> None:
    blip_id = e.blip.id if e.blip is not None else ""
    conn.execute(
        "INSERT INTO budget_marks(wave_id, wavelet_id, scope, participant, set_at, reached_at, blip_id)"
        " VALUES (?,?,?,?,?,?,?)",
        (e.wave_id, e.wavelet_id, e.scope, e.participant, e.set_at, e.reached_at, blip_id),
    )
    if e.blip is not None:
        _insert_blip(conn, e.blip)


@_on(PermissionAsked)
def _permission_asked(conn: Conn, e: PermissionAsked) -> None:
    conn.execute(
        "INSERT INTO permissions(id, wave_id, participant, session_id, prompt_id, tool, preview, asked_at,"
        " expires_at) VALUES (?,?,?,?,?,?,?,?,?)",
        (e.request_id, e.wave_id, e.participant, e.session_id, e.prompt_id, e.tool, e.preview, e.asked_at,
         e.expires_at),
    )  # fmt: skip


@_on(PermissionAnswered)
def _permission_answered(conn: Conn, e: PermissionAnswered) -> None:
    conn.execute(
        "UPDATE permissions SET outcome = ?, answered_by = ?, via = ?, answered_at = ?, message = ?"
        " WHERE id = ? AND outcome = 'pending'",
        (e.outcome, e.by, e.via, e.answered_at, e.message, e.request_id),
    )


assert set(_HANDLERS) == set(MODELS), "every event model needs exactly one handler"


# ---------------------------------------------------------------- replay


def replay(source: Path | str, target: Path | str) -> None:
    """Rebuild the whole state into a new database at ``target`` from ``source``'s event log alone.

    Each row is parsed into its model and applied through :func:`apply`, in one transaction; the log
    rows are copied verbatim (type, payload text, timestamp).
    """
    src = connect(source, readonly=True)
    dst = connect(target)
    try:
        migrate(dst)
        dst.execute("BEGIN IMMEDIATE")
        try:
            for row in src.execute("SELECT type, payload, created_at FROM events ORDER BY seq"):
                dst.execute(
                    "INSERT INTO events(type, payload, created_at) VALUES (?,?,?)",
                    (row["type"], row["payload"], row["created_at"]),
                )
                apply(dst, parse(row["type"], row["payload"]))
            dst.execute("COMMIT")
        except BaseException:
            dst.execute("ROLLBACK")
            raise
    finally:
        src.close()
        dst.close()
