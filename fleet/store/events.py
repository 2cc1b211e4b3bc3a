"""The event log: one pydantic model per event type, and the one code path that applies them.

Every mutation of the store is one event. :func:`record` appends it to the ``events`` table and
applies it to the materialised tables in the caller's write transaction; :func:`replay` rebuilds a
fresh database from a log by parsing each row back into its model (:func:`parse`) and applying it
the same way. :func:`apply` is a dispatch on the model's class, and it is the only code that changes
the materialised tables, so a replayed database equals the live one row for row.

What a caller may rely on:

- :data:`Event` is a discriminated union on ``type`` (the ``events.type`` column). ``type`` itself is
  not part of the stored payload: the payload JSON is exactly what fleet has always written (keys in
  the same order, compact separators, ASCII escapes, a blip's optional keys left out when unset), so a
  log written by an older fleet replays, and writing the same event again gives the same text.
- Models are strict and refuse unknown keys: a payload that does not fit, or a type this fleet does
  not know (a log from a newer fleet), stops :func:`parse` with a :class:`fleet.errors.FleetError`
  instead of being half applied.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_serializer

from fleet import errors
from fleet.models import OPERATOR, ROOT_WAVELET, BlipKind, ParticipantKind, Transport
from fleet.store import keys
from fleet.store.schema import connect, migrate, note_token_write, now


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class NewMember(_Shape):
    """A participant joining a roster. ``since``: the last blip before it joined ('' at creation)."""

    name: str
    kind: ParticipantKind
    since: str


class BlipData(_Shape):
    """One blip as an event carries it (the ``blips`` row without ``superseded_by``)."""

    id: str
    wavelet_id: str
    wave_id: str
    author: str
    kind: BlipKind
    text: str
    created_at: str
    replaces: str | None = None
    source_wavelet_id: str | None = None
    source_blip_id: str | None = None
    actor: str | None = None
    replaced_by: str | None = None
    """On a replacement version: who wrote it (``author`` stays the blip's author). Absent in
    events written before replaces kept the author: their ``author`` is the replacer."""

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: Callable[[BlipData], dict[str, Any]]) -> dict[str, Any]:
        # The log has always left a blip's optional keys out when they are unset.
        return {k: v for k, v in handler(self).items() if v is not None}


class WaveCreated(_Shape):
    """A wave with its root wavelet ``main``, its first roster and its ``system`` blip."""

    type: Literal["wave.created"] = Field(default="wave.created", exclude=True)
    wave_id: str
    root_id: str
    name: str
    created_by: str
    created_at: str
    members: list[NewMember]
    blips: list[BlipData]


class WaveletForked(_Shape):
    """A wavelet forked from ``parent_id`` at ``fork_blip_id``, with its roster and provenance blips."""

    type: Literal["wavelet.forked"] = Field(default="wavelet.forked", exclude=True)
    wavelet_id: str
    wave_id: str
    parent_id: str
    fork_blip_id: str | None
    name: str
    private: bool
    created_by: str
    created_at: str
    members: list[NewMember]
    blips: list[BlipData]


class RosterInvited(_Shape):
    type: Literal["roster.invited"] = Field(default="roster.invited", exclude=True)
    wavelet_id: str
    wave_id: str
    at: str
    member: NewMember
    blip: BlipData


class RosterLeft(_Shape):
    type: Literal["roster.left"] = Field(default="roster.left", exclude=True)
    wavelet_id: str
    wave_id: str
    name: str
    at: str
    blip: BlipData


class WaveletTopicSet(_Shape):
    """A wavelet's topic set by ``by`` (or, with ``topic`` '', cleared), with the ``system`` blip
    that tells its members."""

    type: Literal["wavelet.topic"] = Field(default="wavelet.topic", exclude=True)
    wavelet_id: str
    wave_id: str
    topic: str
    by: str
    at: str
    blip: BlipData


class BlipPosted(_Shape):
    """A ``message`` (or an operator's ``system``) blip."""

    type: Literal["blip.posted"] = Field(default="blip.posted", exclude=True)
    blip: BlipData


class BlipSurfaced(_Shape):
    """A ``surface`` blip in the parent of ``blip.source_wavelet_id``."""

    type: Literal["blip.surfaced"] = Field(default="blip.surfaced", exclude=True)
    blip: BlipData


class BlipReplaced(_Shape):
    """A new version of ``blip.replaces``, which becomes ``superseded_by`` it."""

    type: Literal["blip.replaced"] = Field(default="blip.replaced", exclude=True)
    blip: BlipData


class TokenMinted(_Shape):
    """A token for (wave, participant); with ``machine``, minted for that machine (a join), and with
    ``scope`` (wave ids, ``wave_id`` first) an operator-capable machine token for those waves
    (``participant`` is then ``operator``)."""

    type: Literal["token.minted"] = Field(default="token.minted", exclude=True)
    token_id: str
    wave_id: str
    participant: str
    hash: str
    created_at: str
    machine: str | None = None
    scope: list[str] | None = None

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: Callable[[TokenMinted], dict[str, Any]]) -> dict[str, Any]:
        # Tokens minted before machines existed were logged without these keys.
        return {k: v for k, v in handler(self).items() if not (v is None and k in ("machine", "scope"))}


class TokenRevoked(_Shape):
    type: Literal["token.revoked"] = Field(default="token.revoked", exclude=True)
    token_id: str
    revoked_at: str


class SessionRecorded(_Shape):
    """The agent session a participant runs (the newest record per wave and participant wins)."""

    type: Literal["session.recorded"] = Field(default="session.recorded", exclude=True)
    participant: str
    session_id: str
    wavelet_id: str
    layout: str
    agent: str
    transport: Transport
    cwd: str
    host: str
    wave_id: str
    updated_at: str


class SeatClaimed(_Shape):
    """A wave's resident took its seat (or refreshed it: same session, new process)."""

    type: Literal["seat.claimed"] = Field(default="seat.claimed", exclude=True)
    wave_id: str
    participant: str
    session_id: str
    host: str
    pid: int
    pane_id: str
    cwd: str
    claimed_at: str


class SeatClosed(_Shape):
    """A wave's open seat closed: stopped, found dead, or taken over."""

    type: Literal["seat.closed"] = Field(default="seat.closed", exclude=True)
    wave_id: str
    closed_at: str
    why: str


SummaryAuthorKind = Literal["participant", "summarizer", "extractive"]


class SummaryRecorded(_Shape):
    """A rolling summary of a wavelet's blips up to ``upto`` (inclusive), checked before it was
    recorded: ``cites`` holds every id of ``load_bearing`` (docs/design.md, rolling summaries).

    ``after``: the ``upto`` of the summary it rolled forward from ('' for the first); ``covered_*``:
    the blips (current as of ``upto``) it stands in for and their UTF-8 text bytes."""

    type: Literal["summary.recorded"] = Field(default="summary.recorded", exclude=True)
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


class BlipPinned(_Shape):
    """A participant pinned a blip: load-bearing from then on (every summary must cite it)."""

    type: Literal["blip.pinned"] = Field(default="blip.pinned", exclude=True)
    blip_id: str
    wavelet_id: str
    wave_id: str
    by: str
    at: str


class BudgetSet(_Shape):
    """A budget set (or, with neither ``tokens`` nor ``cost``, cleared) by the operator or a layout
    at spawn; whoever had reached the scope's previous budget starts over."""

    type: Literal["budget.set"] = Field(default="budget.set", exclude=True)
    wave_id: str
    wavelet_id: str
    participant: str
    tokens: int | None
    cost: float | None
    source: Literal["operator", "layout"]
    set_by: str
    set_at: str


class BudgetReached(_Shape):
    """A participant's channel reported a budget passed (the first report of it as set): the
    ``system`` blip naming the operator goes with it."""

    type: Literal["budget.reached"] = Field(default="budget.reached", exclude=True)
    wave_id: str
    wavelet_id: str
    scope: str
    participant: str
    set_at: str
    reached_at: str
    blip: BlipData | None
    """None: another member already told the operator of this wavelet budget (the members' sum)."""


class PermissionAsked(_Shape):
    """A session's permission prompt, recorded by its hook (docs/permissions.md): pending until
    answered, or until ``expires_at`` (when the hook stops waiting)."""

    type: Literal["permission.asked"] = Field(default="permission.asked", exclude=True)
    request_id: str
    wave_id: str
    participant: str
    session_id: str
    prompt_id: str
    tool: str
    preview: str
    asked_at: str
    expires_at: str


class PermissionAnswered(_Shape):
    """What became of a pending prompt: ``allowed`` or ``denied`` by ``by`` (the operator, or
    ``pane``) via ``via`` (cli, console, channel, pane), or ``expired`` (the hook let go)."""

    type: Literal["permission.answered"] = Field(default="permission.answered", exclude=True)
    request_id: str
    wave_id: str
    participant: str
    outcome: Literal["allowed", "denied", "expired"]
    by: str
    via: str
    answered_at: str
    message: str


Event = Annotated[
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
    | PermissionAnswered,
    Field(discriminator="type"),
]
"""Any event. ``type`` tells them apart; it is stored in its own column, not in the payload."""

MODELS: tuple[type[_Shape], ...] = (
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
EVENT_TYPES: tuple[str, ...] = tuple(m.model_fields["type"].default for m in MODELS)
"""Every event type this fleet writes and replays."""

_EVENT: TypeAdapter[Event] = TypeAdapter(Event)


def payload_of(event: Event) -> str:
    """The payload text stored in the log (compact JSON, ``type`` left out)."""
    return json.dumps(event.model_dump(), separators=(",", ":"))


def parse(etype: str, payload: str) -> Event:
    """The event a log row holds. Raises FleetError for an unknown type or a payload that does not fit."""
    if etype not in EVENT_TYPES:
        raise errors.FleetError(f"unknown event type {etype!r} in the log: upgrade fleet")
    try:
        data = json.loads(payload)
        if not isinstance(data, dict):
            raise ValueError("the payload is not a JSON object")
        return _EVENT.validate_python({**data, "type": etype})
    except ValidationError as exc:
        raise errors.FleetError(f"a {etype} event in the log does not fit: {errors.describe(exc)}") from None
    except ValueError as exc:
        raise errors.FleetError(f"a {etype} event in the log is not valid JSON: {exc}") from None


# ---------------------------------------------------------------- events -> tables

E = TypeVar("E", bound=_Shape)
_Handler = Callable[[sqlite3.Connection, Any], None]
_HANDLERS: dict[type[_Shape], _Handler] = {}


def _on(model: type[E]) -> Callable[[Callable[[sqlite3.Connection, E], None]], Callable[..., None]]:
    """Register the handler of one event model (each model has exactly one)."""

    def register(fn: Callable[[sqlite3.Connection, E], None]) -> Callable[..., None]:
        assert model not in _HANDLERS, model
        _HANDLERS[model] = fn
        return fn

    return register


def apply(conn: sqlite3.Connection, event: Event) -> None:
    """Apply one event to the materialised tables, dispatching on its model: the only code that
    changes them."""
    _HANDLERS[type(event)](conn, event)


def record(conn: sqlite3.Connection, event: Event) -> None:
    """Append ``event`` to the log and apply it, inside the caller's write transaction (with the
    request key of the request that wrote it, if it is that request's first event: :mod:`keys`)."""
    cur = conn.execute(
        "INSERT INTO events(type, payload, created_at) VALUES (?,?,?)",
        (event.type, payload_of(event), now()),
    )
    apply(conn, event)
    assert cur.lastrowid is not None
    keys.on_record(conn, cur.lastrowid)


def _insert_blip(conn: sqlite3.Connection, b: BlipData) -> None:
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


def _ensure_participant(conn: sqlite3.Connection, wave_id: str, name: str, kind: str) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO participants(wave_id, name, kind) VALUES (?,?,?)", (wave_id, name, kind)
    )


def _add_member(conn: sqlite3.Connection, wave_id: str, wavelet_id: str, m: NewMember, at: str) -> None:
    _ensure_participant(conn, wave_id, m.name, m.kind)
    conn.execute(
        "INSERT INTO members(wavelet_id, name, kind, joined_at, since) VALUES (?,?,?,?,?)",
        (wavelet_id, m.name, m.kind, at, m.since),
    )


@_on(WaveCreated)
def _wave_created(conn: sqlite3.Connection, e: WaveCreated) -> None:
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
def _wavelet_forked(conn: sqlite3.Connection, e: WaveletForked) -> None:
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
def _roster_invited(conn: sqlite3.Connection, e: RosterInvited) -> None:
    _add_member(conn, e.wave_id, e.wavelet_id, e.member, e.at)
    _insert_blip(conn, e.blip)


@_on(RosterLeft)
def _roster_left(conn: sqlite3.Connection, e: RosterLeft) -> None:
    conn.execute("DELETE FROM members WHERE wavelet_id = ? AND name = ?", (e.wavelet_id, e.name))
    _insert_blip(conn, e.blip)


@_on(WaveletTopicSet)
def _wavelet_topic(conn: sqlite3.Connection, e: WaveletTopicSet) -> None:
    conn.execute("UPDATE wavelets SET topic = ? WHERE id = ?", (e.topic, e.wavelet_id))
    _insert_blip(conn, e.blip)


@_on(BlipPosted)
def _blip_posted(conn: sqlite3.Connection, e: BlipPosted) -> None:
    _insert_blip(conn, e.blip)


@_on(BlipSurfaced)
def _blip_surfaced(conn: sqlite3.Connection, e: BlipSurfaced) -> None:
    _insert_blip(conn, e.blip)


@_on(BlipReplaced)
def _blip_replaced(conn: sqlite3.Connection, e: BlipReplaced) -> None:
    _insert_blip(conn, e.blip)
    conn.execute("UPDATE blips SET superseded_by = ? WHERE id = ?", (e.blip.id, e.blip.replaces))


@_on(TokenMinted)
def _token_minted(conn: sqlite3.Connection, e: TokenMinted) -> None:
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
def _token_revoked(conn: sqlite3.Connection, e: TokenRevoked) -> None:
    note_token_write()
    conn.execute(
        "UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (e.revoked_at, e.token_id)
    )


@_on(SessionRecorded)
def _session_recorded(conn: sqlite3.Connection, e: SessionRecorded) -> None:
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
def _seat_claimed(conn: sqlite3.Connection, e: SeatClaimed) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO seats(wave_id, participant, session_id, host, pid, pane_id, cwd,"
        " claimed_at, closed_at, closed_why) VALUES (?,?,?,?,?,?,?,?,NULL,'')",
        (e.wave_id, e.participant, e.session_id, e.host, e.pid, e.pane_id, e.cwd, e.claimed_at),
    )


@_on(SeatClosed)
def _seat_closed(conn: sqlite3.Connection, e: SeatClosed) -> None:
    conn.execute(
        "UPDATE seats SET closed_at = ?, closed_why = ? WHERE wave_id = ? AND closed_at IS NULL",
        (e.closed_at, e.why, e.wave_id),
    )


@_on(SummaryRecorded)
def _summary_recorded(conn: sqlite3.Connection, e: SummaryRecorded) -> None:
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
def _blip_pinned(conn: sqlite3.Connection, e: BlipPinned) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO pins(wavelet_id, blip_id, pinned_by, pinned_at) VALUES (?,?,?,?)",
        (e.wavelet_id, e.blip_id, e.by, e.at),
    )


@_on(BudgetSet)
def _budget_set(conn: sqlite3.Connection, e: BudgetSet) -> None:
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
def _budget_reached(conn: sqlite3.Connection, e: BudgetReached) -> None:
    blip_id = e.blip.id if e.blip is not None else ""
    conn.execute(
        "INSERT INTO budget_marks(wave_id, wavelet_id, scope, participant, set_at, reached_at, blip_id)"
        " VALUES (?,?,?,?,?,?,?)",
        (e.wave_id, e.wavelet_id, e.scope, e.participant, e.set_at, e.reached_at, blip_id),
    )
    if e.blip is not None:
        _insert_blip(conn, e.blip)


@_on(PermissionAsked)
def _permission_asked(conn: sqlite3.Connection, e: PermissionAsked) -> None:
    conn.execute(
        "INSERT INTO permissions(id, wave_id, participant, session_id, prompt_id, tool, preview, asked_at,"
        " expires_at) VALUES (?,?,?,?,?,?,?,?,?)",
        (e.request_id, e.wave_id, e.participant, e.session_id, e.prompt_id, e.tool, e.preview, e.asked_at,
         e.expires_at),
    )  # fmt: skip


@_on(PermissionAnswered)
def _permission_answered(conn: sqlite3.Connection, e: PermissionAnswered) -> None:
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
