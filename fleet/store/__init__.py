"""The store: fleet's truth, in one SQLite file. Only this package writes SQL.

The data model (docs/design.md §1), in prose:

- A **wave** is one task's shared world-state. It has a unique name and is created with its root
  wavelet ``main``, whose roster is the wave's first participants.
- A **wavelet** is a scoped sub-conversation. Wavelets form a tree: every wavelet but the root has a
  parent and a **fork point** (the parent's last blip when it was forked). Forking is the only
  structural primitive. A **private** wavelet is invisible to anyone not on its roster: not listed,
  not readable, and reported as not found rather than forbidden.
- A **roster** is the current membership of one wavelet. Forking copies the chosen members; invite
  and leave change it. Every join and leave is an event, and writes a ``system`` blip into the
  wavelet so the transcript itself says who came and went. Each member remembers ``since``, the last
  blip before it joined: delivery to it starts right after.
- A wavelet may have a one-line **topic**, set or cleared by a member or the operator; each change is
  an event with a ``system`` blip in the wavelet, so its members read what it is about now.
- A **blip** is one message: ``message``, ``system`` or ``surface``. Blips are never edited. A
  **replace** appends a new blip with ``replaces`` pointing at the old one (so it is delivered like
  any other) and marks the old one ``superseded_by``; reads show the latest version and the history
  stays readable. A **surface** posts a conclusion into the parent wavelet with a reference to the
  source wavelet (and blip).
- **Tokens** let one participant act in one wave. Only their SHA-256 is stored.

Every mutation is one typed event (:mod:`fleet.store.events`) appended to the append-only ``events``
table in the same transaction that updates the materialised tables, and the materialised tables are
changed *only* by applying events (:func:`fleet.store.events.apply`, a dispatch on the event's
model). So :func:`replay` rebuilding a fresh database from the log alone yields the same state, row
for row.

Every public :class:`Store` method takes the :class:`Principal` it acts for first, and decides what
that principal may see and do through :class:`fleet.store.access.Access`, the one authorization
layer: no public method reads without a principal. (:meth:`Store.authenticate` is how a participant
principal is obtained from a token; the daemon compares the operator token itself.)

Ids are minted by one :class:`fleet.ids.IdMinter` inside the write lock, so they are strictly
increasing in commit order and "blips with id > cursor" is a correct delivery rule.

Concurrency: one writer connection behind a lock (only the daemon writes), one read connection per
thread (WAL lets readers proceed while the writer commits).

The package, one module per concern: :mod:`~fleet.store.schema` (connections, migrations),
:mod:`~fleet.store.events` (the event models, apply, replay), :mod:`~fleet.store.access` (principals,
visibility, permissions, references), :mod:`~fleet.store.checks` (names and text),
:mod:`~fleet.store.rows` (rows to records), :mod:`~fleet.store.summaries` (rolling summaries, pins,
context assembly), and here the :class:`Store` facade.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleet import errors
from fleet.ids import IdMinter
from fleet.models import (
    DEFAULT_MAX_BLIP_BYTES,
    OPERATOR,
    Activity,
    Blip,
    BlipKind,
    CloseSeat,
    Context,
    Feed,
    FeedWavelet,
    MintedToken,
    NewSeat,
    NewSession,
    ParticipantKind,
    Seat,
    SessionRecord,
    TokenInfo,
    Wave,
    WaveActivity,
    Wavelet,
)
from fleet.records.budgets import (
    Budget,
    BudgetReachedAnswer,
    BudgetReport,
    SetBudget,
    SpendReport,
    check_limit,
    operator_text,
)
from fleet.store import checks, rows
from fleet.store.access import OPERATOR_PRINCIPAL, Access, Principal, check_ref, like_prefix
from fleet.store.checks import RESERVED
from fleet.store.events import (
    EVENT_TYPES,
    BlipPosted,
    BlipReplaced,
    BlipSurfaced,
    BudgetReached,
    BudgetSet,
    Event,
    NewMember,
    RosterInvited,
    RosterLeft,
    SeatClaimed,
    SeatClosed,
    SessionRecorded,
    TokenMinted,
    TokenRevoked,
    WaveCreated,
    WaveletForked,
    WaveletTopicSet,
    parse,
    record,
    replay,
)
from fleet.store.faults import check_database, storage_faults
from fleet.store.keys import Keys
from fleet.store.permissions import Permissions
from fleet.store.schema import (
    MATERIALISED,
    MIGRATIONS,
    Conn,
    Connections,
    GenerationMemo,
    Group,
    Row,
    connect,
    dump_tables,
    is_postgres,
    migrate,
    now,
)
from fleet.store.schema import store_id as read_store_id
from fleet.store.summaries import CONTEXT_PAGE, Summaries

if TYPE_CHECKING:
    from fleet.store.postgres import Listener

__all__ = [
    "EVENT_TYPES",
    "MATERIALISED",
    "MIGRATIONS",
    "OPERATOR_PRINCIPAL",
    "RESERVED",
    "Event",
    "Principal",
    "Store",
    "connect",
    "dump_tables",
    "hash_token",
    "migrate",
    "now",
    "replay",
]

log = logging.getLogger(__name__)

MAX_PAGE = 5000
"""The most blips any one read returns, whatever limit is asked for."""
AUTH_CACHE_MAX = 4096
"""Tokens :meth:`Store.authenticate` remembers between writes (past it, the cache starts over)."""


def hash_token(token: str) -> str:
    """What the store keeps of a token: its SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _after(previous: str, at: str) -> str:
    """``at``, or the millisecond after ``previous`` when ``at`` is not later: a budget's setting is
    named by its ``set_at`` (a report of passing it names the setting it passed), so two settings
    made within one millisecond must not share one."""
    if at > previous:
        return at
    t = datetime.fromisoformat(previous.replace("Z", "+00:00")) + timedelta(milliseconds=1)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _page(limit: int) -> int:
    return max(1, min(limit, MAX_PAGE))


class Store:
    """The SQLite store. Thread-safe; one instance per database file per process.

    Every public method takes the :class:`Principal` it acts for first and enforces visibility and
    permissions itself (through :class:`~fleet.store.access.Access`), so no caller can forget to.
    Invisible things are NotFound, visible but disallowed ones Forbidden, bad input UsageError (or
    PayloadTooLarge); a refused call changes nothing.
    """

    def __init__(self, path: Path | str, *, max_blip_bytes: int = DEFAULT_MAX_BLIP_BYTES) -> None:
        self.path: Path | str = path if is_postgres(path) else Path(path)
        """The SQLite file, or the ``postgresql://`` URL of the store (:mod:`fleet.store.postgres`)."""
        self.max_blip_bytes = max_blip_bytes
        self._db = Connections(self.path)
        self._r = self._db.reader
        self.access = Access(self._db.reader)
        self.ids = IdMinter()
        try:
            self.ids.observe(self._largest_id())
        except errors.FleetError:  # an id no store mints (edited by hand): nothing left open
            self._db.close()
            raise
        if self._db.postgres:  # other daemons mint on this database too: the newest id, under the lock
            self._db.on_begin = lambda conn: self.ids.observe(self._largest_id(conn))
        self.store_id = read_store_id(self._db.writer)
        """Minted once per database (migration 0005): the store's identity across restarts and moves."""
        self.summaries = Summaries(self._db, self.access, self.ids, self._text)
        """Rolling summaries, pins, and context assembly over them (:mod:`fleet.store.summaries`)."""
        self._auth_cache: dict[str, tuple[int, Principal]] = {}
        """Token hash -> (token epoch when read, who): good until a write that changes the tokens
        commits (a revocation takes effect at the next request); known tokens only."""
        self._live: dict[str, int] = {}
        """Token id -> the token epoch at which it was last found unrevoked."""
        self._memo = GenerationMemo(shared=not self._db.postgres)
        """What the feeds one commit wakes read alike, per generation (:meth:`feed`, :meth:`budgets`)."""
        self.permissions = Permissions(self._db, self.access, self.ids)
        """Permission prompts and their answers (:mod:`fleet.store.permissions`)."""
        self.keys = Keys(self._db)
        """Request keys (:mod:`fleet.store.keys`): what makes a resent write answer as the first did."""
        self._listener: Listener | None = None
        """On PostgreSQL, once :meth:`listen` was called: what hears the other daemons."""

    def close(self) -> None:
        """Wait for the write in progress (if any) to commit, then close every connection."""
        if self._listener is not None:
            self._listener.stop()
            self._listener = None
        self._db.close()

    # ---------------------------------------------------------------- several daemons (PostgreSQL)

    @property
    def shared(self) -> bool:
        """True on a PostgreSQL store: other daemons may write it too (:meth:`announce`, :meth:`listen`)."""
        return self._db.postgres

    def announce(self, keys: Sequence[str]) -> None:
        """Tell the other daemons on this PostgreSQL store that a commit touched ``keys`` (none: wake
        everything), after it committed. A no-op on SQLite (one daemon per store)."""
        if self._db.postgres:
            self._db.notify(" ".join(("wake", self._db.origin, *keys)))

    def listen(self, woken: Callable[[Sequence[str] | None], None]) -> None:
        """Hear what the other daemons on this PostgreSQL store commit: ``woken(keys)`` for each of
        their :meth:`announce` (``None``: everything, as after the connection was lost and every
        notification meanwhile with it), and forget what is remembered of tokens when they changed
        some. Returns once listening. A no-op on SQLite."""
        if not self._db.postgres or self._listener is not None:
            return
        from fleet.store.postgres import Listener

        origin = self._db.origin

        def heard(payload: str | None) -> None:
            if payload is None:
                self._db.heard_tokens()
                woken(None)
                return
            kind, sender, *keys = payload.split(" ")
            if sender == origin:
                return
            if kind == "tokens":
                self._db.heard_tokens()
            elif kind == "wake":
                woken(keys or None)

        self._listener = Listener(str(self.path), heard)
        if not self._listener.ready.wait(10):
            log.warning("not yet listening to the store's notifications (retrying in the background)")

    def release_reader(self) -> None:
        """Give the calling thread's read connection back to the pool (at the end of each request, and
        before a long-poll parks); a no-op inside a read snapshot."""
        self._db.release_reader()

    def group(self) -> contextlib.AbstractContextManager[Group]:
        """The writes the calling thread makes until the end share one transaction, committed at the
        end (:meth:`schema.Connections.group`: what the daemon's loop runs in one turn)."""
        return self._db.group()

    def shrink_readers(self) -> None:
        """Free what the read connections no request holds have grown (page and statement caches),
        by opening them afresh (after a burst: :meth:`schema.Connections.renew_readers`)."""
        self._db.renew_readers()

    # ---------------------------------------------------------------- internals

    def _largest_id(self, conn: Conn | None = None) -> str | None:
        row = (
            (conn or self._db.writer)
            .execute(
                "SELECT max(m) FROM (SELECT max(id) AS m FROM blips UNION ALL SELECT max(id) FROM wavelets"
                " UNION ALL SELECT max(id) FROM waves UNION ALL SELECT max(id) FROM tokens"
                " UNION ALL SELECT max(id) FROM summaries UNION ALL SELECT max(id) FROM permissions) AS ids"
            )
            .fetchone()
        )
        return row[0] if row else None

    def _commit(self, event: Event) -> None:
        with self._db.write() as conn:
            record(conn, event)

    def _new_blip(
        self, wl: Row | tuple[str, str], author: str, kind: BlipKind, text: str, at: str, **extra: str | None
    ) -> Blip:
        """A blip for ``wl`` (a wavelet row, or (id, wave_id) of one being created), its id minted now.

        Call inside the write lock: ids are minted in commit order.
        """
        if type(wl) is tuple:  # (a PostgreSQL row is a tuple too, of a subclass)
            wavelet_id, wave_id = wl
        else:
            row: Any = wl
            wavelet_id, wave_id = row["id"], row["wave_id"]
        return Blip(
            id=self.ids.mint(),
            wavelet_id=wavelet_id,
            wave_id=wave_id,
            author=author,
            kind=kind,
            text=text,
            created_at=at,
            **extra,
        )

    def _last_blip_id(self, conn: Conn, wavelet_id: str) -> str:
        row = conn.execute("SELECT max(id) FROM blips WHERE wavelet_id = ?", (wavelet_id,)).fetchone()
        return row[0] or ""

    def _text(self, text: str) -> str:
        return checks.text(text, self.max_blip_bytes)

    def _wavelet(self, who: Principal, wl: Row, wave_name: str | None = None) -> Wavelet:
        return rows.wavelet(self._r(), wl, self.access.sight(who), wave_name)

    def _current(self, who: Principal, wavelet_id: str) -> Wavelet:
        """The wavelet a write just changed, as its writer may now see it (it is on the roster, or
        it is the operator). Read after the commit, so the roster is the new one."""
        row = self._r().execute("SELECT * FROM wavelets WHERE id = ?", (wavelet_id,)).fetchone()
        return self._wavelet(who, row)

    def _blips_after(
        self, who: Principal, wavelet_id: str, after: str | None, limit: int, history: bool
    ) -> list[Blip]:
        sql = "SELECT * FROM blips WHERE wavelet_id = ? AND id > ?"
        if not history:
            sql += " AND superseded_by IS NULL"
        got = self._r().execute(sql + " ORDER BY id LIMIT ?", (wavelet_id, after or "", _page(limit)))
        sight = self.access.sight(who)
        return [rows.blip(b, sight) for b in got.fetchall()]

    # ---------------------------------------------------------------- principals

    def authenticate(self, token: str) -> Principal | None:
        """Who a token stands for (a participant, or a machine's operator powers in its waves), or
        None if unknown or revoked (the operator token itself is the daemon's to compare).

        The one public method without a principal: it is how one is obtained.
        """
        key = hash_token(token)
        epoch = self._db.token_epoch  # read before the query: a revocation committed after it drops it
        cached = self._auth_cache.get(key)
        if cached is not None and cached[0] == epoch:
            return cached[1]
        who = self._authenticate(key)
        if who is not None:
            if len(self._auth_cache) >= AUTH_CACHE_MAX:
                self._auth_cache.clear()
            self._auth_cache[key] = (epoch, who)
        return who

    def _require_live(self, who: Principal) -> None:
        """:meth:`Access.require_live`, asked of the database only when a token changed since this
        token was last found live (a feed checks it on every fetch)."""
        if who.token_id is None:
            return
        epoch = self._db.token_epoch  # read before the query, as in :meth:`authenticate`
        if self._live.get(who.token_id) == epoch:
            return
        self.access.require_live(who)
        if len(self._live) >= AUTH_CACHE_MAX:
            self._live.clear()
        self._live[who.token_id] = epoch

    def _authenticate(self, key: str) -> Principal | None:
        row = (
            self._r()
            .execute(
                "SELECT t.id, t.wave_id, t.participant, g.machine, g.scope FROM tokens t"
                " LEFT JOIN token_grants g ON g.token_id = t.id WHERE t.hash = ? AND t.revoked_at IS NULL",
                (key,),
            )
            .fetchone()
        )
        if row is None:
            return None
        if row["scope"] is not None:
            return Principal(
                OPERATOR, None, waves=frozenset(json.loads(row["scope"])), machine=row["machine"],
                token_id=row["id"],
            )  # fmt: skip
        return Principal(row["participant"], row["wave_id"], machine=row["machine"], token_id=row["id"])

    # ---------------------------------------------------------------- waves

    def create_wave(self, who: Principal, name: str, with_: Sequence[str] = ()) -> Wave:
        """A new wave named ``name`` with its root ``main`` whose roster is ``with_`` (operator only)."""
        self.access.require_full_operator(who, "creates waves")
        checks.name(name, "wave")
        members = list(dict.fromkeys(checks.participant_name(n) for n in with_))
        with self._db.write() as conn:
            if conn.execute("SELECT 1 FROM waves WHERE name = ?", (name,)).fetchone():
                raise errors.Conflict(f"wave {name!r} already exists: pick another name")
            at = now()
            wave_id, root_id = self.ids.mint(), self.ids.mint()
            text = f"{who.name} created wave {name}" + (f" with {', '.join(members)}" if members else "")
            blip = self._new_blip((root_id, wave_id), "system", "system", text, at, actor=who.name)
            record(
                conn,
                WaveCreated(
                    wave_id=wave_id,
                    root_id=root_id,
                    name=name,
                    created_by=who.name,
                    created_at=at,
                    members=[NewMember(name=m, kind=checks.kind_of(m), since="") for m in members],
                    blips=[blip],
                ),
            )
        return self.get_wave(who, wave_id)

    def list_waves(self, who: Principal) -> list[Wave]:
        """The waves ``who`` may see (a participant: its own), without their wavelets, by id."""
        got = self._r().execute("SELECT * FROM waves ORDER BY id").fetchall()
        return [rows.wave(w) for w in got if who.in_scope(w["id"])]

    def get_wave(self, who: Principal, ref: str) -> Wave:
        """The wave with the wavelets ``who`` may see (private ones only where it is on the roster)."""
        w = self.access.wave(who, ref)
        sight = self.access.sight(who)
        return rows.wave(
            w, [rows.wavelet(self._r(), wl, sight, w["name"]) for wl in self.access.wavelets(who, w["id"])]
        )

    def wave_id(self, who: Principal, wave: str) -> str:
        """The id of the wave ``wave`` (a name, id or id prefix) names, if ``who`` may see it (a
        feed asks it on every request: answered from the generation's shared results)."""
        return str(self.access.wave(who, wave, self._memo.at(self._db.stamp()[0]))["id"])

    def wave_name(self, who: Principal, wave: str) -> str:
        """The name of the wave ``wave`` (a name, id or id prefix) names, if ``who`` may see it."""
        return str(self.access.wave(who, wave)["name"])

    def participants(self, who: Principal, wave: str) -> list[tuple[str, ParticipantKind]]:
        """Everyone who was ever on a roster of ``wave`` (plus the operator), by name.

        A participant token sees only names it could learn anyway: the operator and those on the
        roster of, or with a blip in, a wavelet it can see (a private wavelet's members stay hidden).
        """
        w = self.access.wave(who, wave)
        r = self._r()
        everyone = r.execute(
            "SELECT name, kind FROM participants WHERE wave_id = ? ORDER BY name", (w["id"],)
        ).fetchall()
        if who.is_operator:
            return [(p["name"], p["kind"]) for p in everyone]
        known = {OPERATOR}
        for wl in self.access.wavelets(who, w["id"]):
            known.update(
                m[0] for m in r.execute("SELECT name FROM members WHERE wavelet_id = ?", (wl["id"],))
            )
            known.update(
                b[0] for b in r.execute("SELECT DISTINCT author FROM blips WHERE wavelet_id = ?", (wl["id"],))
            )
        return [(p["name"], p["kind"]) for p in everyone if p["name"] in known]

    def activity(self, who: Principal, wave: str) -> WaveActivity:
        """Per (wavelet, author): blips written (system blips aside) and the latest; plus the head.

        Operator only (it spans private wavelets). Reads through the wavelet index, one group per
        wavelet and author; the latest's ``created_at`` by its id (one text for both engines: a
        bare column beside ``max(id)`` is SQLite's alone).
        """
        self.access.require_operator(who, "reads a wave's activity")
        w = self.access.wave(who, wave)
        got = self._r().execute(
            "SELECT g.wavelet_id, g.author, g.n, g.last_id, b.created_at FROM (SELECT wavelet_id,"
            " author, count(*) AS n, max(id) AS last_id FROM blips"
            " WHERE wavelet_id IN (SELECT id FROM wavelets WHERE wave_id = ?) AND kind != 'system'"
            " GROUP BY wavelet_id, author) AS g JOIN blips b ON b.id = g.last_id"
            " ORDER BY g.wavelet_id, g.author",
            (w["id"],),
        )
        return WaveActivity(
            wave_id=w["id"],
            head=self._head(w["id"]),
            activity=[
                Activity(
                    wavelet_id=r["wavelet_id"],
                    participant=r["author"],
                    blips=r["n"],
                    last_blip_id=r["last_id"],
                    last_blip_at=r["created_at"],
                )
                for r in got
            ],
        )

    def wave_head(self, who: Principal, wave: str) -> str:
        """The greatest blip id committed in the wave ('' if none): a cursor that starts at "now".

        Operator only (it spans private wavelets).
        """
        self.access.require_operator(who, "reads a wave's head")
        return self._head(self.access.wave(who, wave)["id"])

    def _head(self, wave_id: str) -> str:
        row = (
            self._r()
            .execute(
                "SELECT max((SELECT max(b.id) FROM blips b WHERE b.wavelet_id = wl.id))"
                " FROM wavelets wl WHERE wl.wave_id = ?",
                (wave_id,),
            )
            .fetchone()
        )
        return str(row[0] or "")

    def read_wave_after(self, who: Principal, wave: str, after: str, *, limit: int = 500) -> list[Blip]:
        """Every blip of a wave with id > ``after``, replaced versions included, oldest first.

        Operator only: nothing is filtered by visibility. Because ids are minted in commit order,
        "id > cursor" across the whole wave misses nothing and repeats nothing.
        """
        self.access.require_operator(who, "reads a whole wave's stream: read a wavelet")
        with self._db.snapshot() as r:
            self.access.require_live(who)
            w = self.access.wave(who, wave)
            got = r.execute(
                "SELECT * FROM blips WHERE id > ? AND wave_id = ? ORDER BY id LIMIT ?",
                (after, w["id"], _page(limit)),
            )
            sight = self.access.sight(who)
            return [rows.blip(b, sight) for b in got.fetchall()]

    # ---------------------------------------------------------------- wavelets

    def resolve(self, who: Principal, ref: str, wave: str | None = None) -> Wavelet:
        """The wavelet ``ref`` names for ``who`` (``wave``: where a bare name is looked up)."""
        return self._wavelet(who, self.access.wavelet(who, ref, wave=wave))

    def fork(
        self,
        who: Principal,
        parent_ref: str,
        name: str,
        with_: Sequence[str] = (),
        *,
        private: bool = False,
        as_: str | None = None,
    ) -> Wavelet:
        """Fork ``parent_ref``: a new wavelet whose context is the parent's up to now.

        The roster is ``with_`` plus the forking participant (unless that is the operator acting as
        itself). A public fork announces itself in the parent when the forker may write there (the
        operator, a member); a private one only in itself. A public fork of a private parent does not
        name it in its own provenance (its readers may not see the parent).
        """
        author = self.access.author(who, as_)
        parent = self.access.wavelet(who, parent_ref)
        checks.name(name, "wavelet")
        # A public fork announces itself in the parent: that is a write there, so only where the
        # forker may write (a non-member forks a public wavelet silently).
        announce = not private and (who.is_operator or self.access.is_member(parent["id"], who.name))
        names = [checks.participant_name(n) for n in with_]
        if author != OPERATOR:
            names.insert(0, author)
        members = list(dict.fromkeys(names))
        with self._db.write() as conn:
            if conn.execute(
                "SELECT 1 FROM wavelets WHERE wave_id = ? AND name = ?", (parent["wave_id"], name)
            ).fetchone():
                # Names are unique per wave, so this refusal tells a caller that the name is taken,
                # by a wavelet it may not see: when the name is not in its tree, that a private
                # wavelet holds it (the one bit docs/design.md §1 owns up to, and why no cheaper
                # design removes it). The message says so, and is the same whoever holds the name,
                # so it says nothing more: not the holder's id, parent, roster or privacy.
                raise errors.Conflict(
                    f"the wavelet name {name!r} is not available in this wave: it is taken, perhaps by"
                    " a wavelet you cannot see (names are unique per wave); pick another"
                )
            at = now()
            fork_point = self._last_blip_id(conn, parent["id"]) or None
            wavelet_id = self.ids.mint()
            who_txt = ", ".join(members) if members else "nobody yet"
            blips = []
            if announce:
                blips.append(
                    self._new_blip(
                        parent,
                        "system",
                        "system",
                        f"{author} forked {name} with {who_txt}",
                        at,
                        source_wavelet_id=wavelet_id,
                        actor=author,
                    )
                )
            # A fork of a private wavelet may be read by someone who cannot see the parent (anyone in
            # the wave when the fork is public; a member of the fork who is not of the parent, now or
            # invited later, when it is private): its text never names it. The ids it points at are
            # withheld per reader (fleet.store.access.Sight), so they are kept for whoever may see them.
            origin = "" if parent["private"] else f" from {parent['name']}"
            blips.append(
                self._new_blip(
                    (wavelet_id, parent["wave_id"]),
                    "system",
                    "system",
                    f"{author} forked {'private ' if private else ''}{name}{origin} with {who_txt}",
                    at,
                    source_wavelet_id=parent["id"],
                    source_blip_id=fork_point,
                    actor=author,
                )
            )
            record(
                conn,
                WaveletForked(
                    wavelet_id=wavelet_id,
                    wave_id=parent["wave_id"],
                    parent_id=parent["id"],
                    fork_blip_id=fork_point,
                    name=name,
                    private=bool(private),
                    created_by=author,
                    created_at=at,
                    members=[NewMember(name=m, kind=checks.kind_of(m), since="") for m in members],
                    blips=blips,
                ),
            )
        return self._current(who, wavelet_id)

    def invite(self, who: Principal, ref: str, name: str, *, as_: str | None = None) -> Wavelet:
        """Add ``name`` to the roster (a no-op if already on it). Members and the operator may invite."""
        actor = self.access.author(who, as_)
        wl = self.access.wavelet(who, ref)
        checks.participant_name(name)
        self.access.require_member(who, wl, "invite")
        with self._db.write() as conn:
            if conn.execute(
                "SELECT 1 FROM members WHERE wavelet_id = ? AND name = ?", (wl["id"], name)
            ).fetchone():
                return self._current(who, wl["id"])
            since = self._last_blip_id(conn, wl["id"])
            member = NewMember(name=name, kind=checks.kind_of(name), since=since)
            self._act(conn, wl, actor, f"{actor} invited {name}", RosterInvited, member=member)
        return self._current(who, wl["id"])

    def leave(self, who: Principal, ref: str, name: str, *, as_: str | None = None) -> Wavelet:
        """Take ``name`` off the roster: deliveries to it stop. A participant may only remove itself."""
        actor = self.access.author(who, as_)
        wl = self.access.wavelet(who, ref)
        checks.participant_name(name)
        self.access.require_self(who, name, f"{who.name!r} may only take itself off a roster, not {name!r}")
        with self._db.write() as conn:
            if not conn.execute(
                "SELECT 1 FROM members WHERE wavelet_id = ? AND name = ?", (wl["id"], name)
            ).fetchone():
                raise errors.NotFound(f"{name!r} is not on the roster of {wl['name']!r}")
            text = f"{name} left" if actor == name else f"{actor} removed {name}"
            self._act(conn, wl, actor, text, RosterLeft, name=name)
        return self._current(who, wl["id"])

    def set_topic(self, who: Principal, ref: str, topic: str, *, as_: str | None = None) -> Wavelet:
        """Set ``ref``'s topic ('' clears it): members and the operator (as itself, or as a member).
        A topic it already has changes nothing (no event, no blip). Refused (UsageError) unless one
        line within :data:`fleet.models.MAX_TOPIC` characters (:func:`fleet.store.checks.topic`)."""
        actor = self.access.author(who, as_)
        wl = self.access.wavelet(who, ref)
        checks.topic(topic)
        self.access.require_member(who, wl, "set the topic", actor=actor)
        with self._db.write() as conn:
            was = conn.execute("SELECT topic FROM wavelets WHERE id = ?", (wl["id"],)).fetchone()[0]
            if was == topic:
                return self._current(who, wl["id"])
            # json.dumps quotes it: the blip shows exactly where the topic starts and ends.
            quoted = json.dumps(topic, ensure_ascii=False)
            text = f"{actor} set the topic: {quoted}" if topic else f"{actor} cleared the topic"
            self._act(conn, wl, actor, text, WaveletTopicSet, topic=topic, by=actor)
        return self._current(who, wl["id"])

    def _act(
        self,
        conn: Conn,
        wl: Row,
        actor: str,
        text: str,
        event: Callable[..., Event],
        **fields: Any,
    ) -> None:
        """Record ``event`` (a roster or topic change of ``wl``, built with ``fields``) with the
        ``system`` blip that tells the wavelet of it in ``text``, written by ``actor``'s act, now."""
        at = now()
        blip = self._new_blip(wl, "system", "system", text, at, actor=actor)
        record(conn, event(wavelet_id=wl["id"], wave_id=wl["wave_id"], at=at, blip=blip, **fields))

    # ---------------------------------------------------------------- blips

    def post(self, who: Principal, ref: str, text: str, *, as_: str | None = None) -> Blip:
        """A ``message`` blip by ``who`` (or, for the operator, ``as_``) into ``ref``: members only."""
        author = self.access.author(who, as_)
        wl = self.access.wavelet(who, ref)
        self._text(text)
        self.access.require_member(who, wl, "post", actor=author)
        with self._db.write() as conn:
            blip = self._new_blip(wl, author, "message", text, now())
            record(conn, BlipPosted(blip=blip))
        return rows.shown(blip, self.access.sight(who))

    def post_system(self, who: Principal, ref: str, text: str) -> Blip:
        """Post a ``system`` blip (author ``system``) into ``ref``: operator only.

        How the operator's own tools (``fleet supervise``, ``fleet kill``) put what they did into the
        transcript. Participants can never write one, so a system blip is always provenance.
        """
        self.access.require_operator(who, "posts system blips")
        wl = self.access.wavelet(who, ref)
        self._text(text)
        with self._db.write() as conn:
            blip = self._new_blip(wl, "system", "system", text, now())
            record(conn, BlipPosted(blip=blip))
        return rows.shown(blip, self.access.sight(who))

    def surface(
        self,
        who: Principal,
        ref: str,
        text: str,
        *,
        source_blip_id: str | None = None,
        as_: str | None = None,
    ) -> Blip:
        """Post ``text`` as a ``surface`` blip into the parent of ``ref``, referencing ``ref``."""
        author = self.access.author(who, as_)
        wl = self.access.wavelet(who, ref)
        self._text(text)
        self.access.require_member(who, wl, "surface", actor=author)
        if wl["parent_id"] is None:
            raise errors.UsageError(
                f"{wl['name']!r} is the wave's root and has no parent to surface into: post instead"
            )
        self._require_writer_of_parent(who, wl)
        if source_blip_id is not None:
            src = self.access.blip(who, source_blip_id)
            if src["wavelet_id"] != wl["id"]:
                raise errors.UsageError(f"blip {source_blip_id!r} is not in {wl['name']!r}")
            source_blip_id = src["id"]
        with self._db.write() as conn:
            blip = self._new_blip(
                (wl["parent_id"], wl["wave_id"]),
                author,
                "surface",
                text,
                now(),
                source_wavelet_id=wl["id"],
                source_blip_id=source_blip_id,
            )
            record(conn, BlipSurfaced(blip=blip))
        return rows.shown(blip, self.access.sight(who))

    def _require_writer_of_parent(self, who: Principal, wl: Row) -> None:
        """Forbidden unless ``who`` may surface into ``wl``'s parent: a public parent takes the
        surfaces of its child's members (that is what a surface is for: a fork's participants,
        often not on the parent's roster, report their conclusion up); a private one only from its
        own roster, and one the caller cannot see is not named."""
        parent = self._r().execute("SELECT * FROM wavelets WHERE id = ?", (wl["parent_id"],)).fetchone()
        if who.is_operator:
            return
        if not self.access.can_see(who, parent):
            raise errors.Forbidden(
                f"{who.name!r} cannot surface from {wl['name']!r}: only members of its parent wavelet can"
            )
        if parent["private"]:
            self.access.require_member(who, parent, "surface into it")

    def replace(self, who: Principal, ref: str, text: str, *, as_: str | None = None) -> Blip:
        """Append a new version of blip ``ref``. Only its author or the operator may; history stays.

        The new version keeps the blip's author; ``replaced_by`` records who wrote it (``as_``)."""
        writer = self.access.author(who, as_)
        old = self.access.blip(who, ref)
        self._text(text)
        self.access.require_replaceable(who, old)
        with self._db.write() as conn:
            current = conn.execute("SELECT superseded_by FROM blips WHERE id = ?", (old["id"],)).fetchone()
            if current["superseded_by"]:
                raise errors.Conflict(
                    f"blip {old['id']} was already replaced by {current['superseded_by']}:"
                    " replace the latest version"
                )
            blip = self._new_blip(
                (old["wavelet_id"], old["wave_id"]),
                old["author"],
                old["kind"],
                text,
                now(),
                replaces=old["id"],
                source_wavelet_id=old["source_wavelet_id"],
                source_blip_id=old["source_blip_id"],
                replaced_by=writer,
            )
            record(conn, BlipReplaced(blip=blip))
        return rows.shown(blip, self.access.sight(who))

    def read(
        self,
        who: Principal,
        ref: str,
        *,
        after: str | None = None,
        limit: int = 500,
        history: bool = False,
    ) -> list[Blip]:
        """Blips of ``ref`` with id > ``after``, oldest first; replaced versions only with ``history``."""
        wl = self.access.wavelet(who, ref)
        return self._blips_after(who, wl["id"], after, limit, history)

    def read_resolved(
        self,
        who: Principal,
        wavelet_id: str,
        *,
        after: str | None = None,
        limit: int = 500,
        history: bool = False,
    ) -> list[Blip]:
        """:meth:`read` by exact wavelet id (a long-poll's inner loop, after one :meth:`resolve`).

        Re-checks on every call that ``who`` may still see the wavelet (NotFound once it was taken
        off a private wavelet's roster), so a long-poll that wakes never reads past a leave.
        """
        with self._db.snapshot():  # the check and the read see one state: no leave slips between
            self.access.require_live(who)
            self.access.wavelet_by_id(who, wavelet_id)
            return self._blips_after(who, wavelet_id, after, limit, history)

    def read_tail(
        self, who: Principal, ref: str, *, before: str | None = None, limit: int = 200
    ) -> list[Blip]:
        """The newest ``limit`` current blips of ``ref`` with id < ``before``, oldest first.

        Replaced versions are left out (as in :meth:`read`). ``before=None`` means the wavelet's end,
        so paging backwards is: pass the first id of the previous page. Uses the wavelet index, so a
        page costs the same at the end of a 10,000-blip wavelet as at its start.
        """
        wl = self.access.wavelet(who, ref)
        sql = "SELECT * FROM blips WHERE wavelet_id = ? AND superseded_by IS NULL"
        args: tuple[str | int, ...] = (wl["id"],)
        if before:
            sql, args = sql + " AND id < ?", (*args, before)
        got = self._r().execute(sql + " ORDER BY id DESC LIMIT ?", (*args, _page(limit)))
        sight = self.access.sight(who)
        return [rows.blip(b, sight) for b in reversed(got.fetchall())]

    def get_blip(self, who: Principal, ref: str) -> Blip:
        """The blip ``ref`` names (id or unique prefix), whichever version it is."""
        return rows.blip(self.access.blip(who, ref), self.access.sight(who))

    def history(self, who: Principal, ref: str) -> list[Blip]:
        """Every version of the blip ``ref`` belongs to, oldest first."""
        row = self.access.blip(who, ref)
        r = self._r()
        while row["replaces"]:
            row = r.execute("SELECT * FROM blips WHERE id = ?", (row["replaces"],)).fetchone()
        chain = [row]
        while chain[-1]["superseded_by"]:
            chain.append(
                r.execute("SELECT * FROM blips WHERE id = ?", (chain[-1]["superseded_by"],)).fetchone()
            )
        sight = self.access.sight(who)
        return [rows.blip(b, sight) for b in chain]

    def context(
        self, who: Principal, ref: str, *, limit: int = CONTEXT_PAGE, before: str | None = None
    ) -> Context:
        """What ``who`` sees reading ``ref``: each visible ancestor's latest summary up to its fork
        point and the blips after it up to the fork point, then ``ref``'s own summary and live tail;
        one page of it (:meth:`fleet.store.summaries.Summaries.context`).

        Assembled per call. Ancestors the caller cannot see contribute nothing and are left out of
        ``path``. Within each part, replaced versions are hidden when their replacement falls inside
        the same part. With no summary it is the full walk.
        """
        return self.summaries.context(who, ref, limit=limit, before=before)

    def feed(
        self, who: Principal, wave: str, participant: str, cursors: dict[str, str], *, limit: int = 200
    ) -> Feed:
        """Blips newer than each cursor across every wavelet ``participant`` is on in ``wave``.

        Includes the participant's own blips (echo suppression is the client's, by author, so that
        cursors can step over them). A wavelet left is absent and delivers nothing. A participant
        reads only its own feed.
        """
        stamp = self._db.stamp()  # before the snapshot: shared results of its generation are no newer
        memo = self._memo.at(stamp[0])
        with self._db.snapshot() as r:  # memberships and blips from one state: no leave slips between
            self._require_live(who)
            w = self.access.wave(who, wave, memo)
            checks.participant_name(participant)
            self.access.require_self(
                who, participant, f"{who.name!r} cannot read the feed of {participant!r}"
            )
            memberships = r.execute(
                "SELECT wl.id, wl.name, wl.private, m.since, wl.parent_id IS NULL AS root FROM members m JOIN"
                " wavelets wl ON wl.id ="
                " m.wavelet_id WHERE m.name = ? AND wl.wave_id = ? ORDER BY wl.id",
                (participant, w["id"]),
            ).fetchall()
            limit = _page(limit)
            wavelets: list[FeedWavelet] = []
            blips: list[Blip] = []
            more = False
            # the memo is shared by every reader's feed: it keeps blips whole, each feed withholds
            sight, whole = self.access.sight(who), self.access.sight(OPERATOR_PRINCIPAL)
            for row in memberships:
                wavelets.append(
                    FeedWavelet(
                        id=row["id"],
                        name=row["name"],
                        wave=w["name"],
                        private=bool(row["private"]),
                        since=row["since"],
                        root=bool(row["root"]),
                    )
                )
                cursor = cursors.get(row["id"])
                if cursor is None or cursor < row["since"]:
                    cursor = row["since"]
                key = ("feed", row["id"], cursor, limit)
                got: list[Blip] | None = memo.get(key) if memo is not None else None  # type: ignore[assignment]
                if got is None:
                    got = [
                        rows.blip(b, whole)
                        for b in r.execute(
                            "SELECT * FROM blips WHERE wavelet_id = ? AND id > ? ORDER BY id LIMIT ?",
                            (row["id"], cursor, limit + 1),
                        )
                    ]
                    if memo is not None and self._db.exact(stamp):
                        memo[key] = got  # the other feeds woken by the same commit read it from here
                if len(got) > limit:
                    more, got = True, got[:limit]
                blips.extend(got if sight.everything else [rows.shown(b, sight) for b in got])
            blips.sort(key=lambda b: b.id)
            return Feed(wavelets=wavelets, blips=blips, more=more)

    # ---------------------------------------------------------------- tokens

    def mint_token(
        self, who: Principal, wave: str, participant: str, secret: str, *, machine: str | None = None
    ) -> MintedToken:
        """Record a participant token (only its hash). ``secret`` is generated by the caller.

        ``machine``: minted for that machine (a participant's join). A machine token's own mints are
        its machine's, whatever ``machine`` says, so revoking the machine revokes them too.
        """
        self.access.require_operator(who, "mints tokens")
        w = self.access.wave(who, wave)
        checks.participant_name(participant)
        if who.machine is not None and who.is_operator:
            machine = who.machine
        elif machine is not None:
            self.access.require_full_operator(who, "mints tokens for a machine")
            checks.name(machine, "machine")
        with self._db.write() as conn:
            token_id, at = self.ids.mint(), now()
            record(
                conn,
                TokenMinted(
                    token_id=token_id,
                    wave_id=w["id"],
                    participant=participant,
                    hash=hash_token(secret),
                    created_at=at,
                    machine=machine,
                ),
            )
        return MintedToken(
            id=token_id, wave_id=w["id"], wave=w["name"], participant=participant, created_at=at,
            token=secret, machine=machine,
        )  # fmt: skip

    def mint_machine_token(
        self, who: Principal, machine: str, waves: Sequence[str], secret: str
    ) -> MintedToken:
        """Record a machine token: the operator's powers in ``waves`` (at least one), for ``machine``.

        Only the operator token itself mints one. A machine token can mint participant tokens in its
        waves (to spawn panes there), never another machine token, and sees no other wave.
        """
        self.access.require_full_operator(who, "mints machine tokens")
        checks.name(machine, "machine")
        if not waves:
            raise errors.UsageError("a machine token needs at least one wave: name the waves it may act in")
        rows_ = [self.access.wave(who, w) for w in waves]
        scope = list(dict.fromkeys(r["id"] for r in rows_))
        with self._db.write() as conn:
            token_id, at = self.ids.mint(), now()
            record(
                conn,
                TokenMinted(
                    token_id=token_id,
                    wave_id=scope[0],
                    participant=OPERATOR,
                    hash=hash_token(secret),
                    created_at=at,
                    machine=machine,
                    scope=scope,
                ),
            )
        names = {r["id"]: r["name"] for r in rows_}
        return MintedToken(
            id=token_id, wave_id=scope[0], wave=names[scope[0]], participant=OPERATOR, created_at=at,
            token=secret, machine=machine, waves=[names[i] for i in scope],
        )  # fmt: skip

    _TOKENS = (
        "SELECT t.*, w.name AS wave, g.machine, g.scope FROM tokens t JOIN waves w ON w.id = t.wave_id"
        " LEFT JOIN token_grants g ON g.token_id = t.id"
    )

    def _token_infos(self, who: Principal, got: Sequence[Row]) -> list[TokenInfo]:
        """Token rows as ``who`` may list them: a machine token sees its waves' participant tokens."""
        names = {w["id"]: w["name"] for w in self._r().execute("SELECT id, name FROM waves")}
        out = []
        for t in got:
            scope = json.loads(t["scope"]) if t["scope"] is not None else None
            if not who.is_full_operator and (scope is not None or not who.in_scope(t["wave_id"])):
                continue
            info = rows.token_info(t)
            info.machine = t["machine"]
            info.waves = [names[i] for i in scope] if scope is not None else None
            out.append(info)
        return out

    def list_tokens(
        self, who: Principal, wave: str | None = None, *, machine: str | None = None
    ) -> list[TokenInfo]:
        """Every token (of ``wave``, of ``machine``, if given), revoked ones included, by id: the
        operator (a machine token: the participant tokens of its waves)."""
        self.access.require_operator(who, "lists tokens")
        sql, args = self._TOKENS + " WHERE 1 = 1", []
        if wave:
            sql += " AND t.wave_id = ?"
            args.append(self.access.wave(who, wave)["id"])
        if machine:
            check_ref(machine, "machine")
            sql += " AND g.machine = ?"
            args.append(machine)
        return self._token_infos(who, self._r().execute(sql + " ORDER BY t.id", args).fetchall())

    def revoke_tokens(
        self,
        who: Principal,
        *,
        token_id: str | None = None,
        wave: str | None = None,
        participant: str | None = None,
        machine: str | None = None,
    ) -> list[TokenInfo]:
        """Revoke one token by id, every live token of (wave, participant), or every token of a
        ``machine`` (its machine token and the tokens minted for or by it; the operator token itself
        only). Revoking a machine token by id revokes its machine's tokens too. Returns those revoked."""
        self.access.require_operator(who, "revokes tokens")
        r = self._r()
        if token_id:
            check_ref(token_id, "token")
            found = r.execute(
                self._TOKENS + " WHERE t.id = ? OR t.id LIKE ? ESCAPE '\\'",
                (token_id, like_prefix(token_id)),
            ).fetchall()
            found = [t for t in found if self._token_infos(who, [t])]
            if len(found) != 1:
                raise errors.NotFound(f"no token {token_id!r}: `fleet token list` shows them")
            if found[0]["scope"] is not None:
                found = r.execute(self._TOKENS + " WHERE g.machine = ?", (found[0]["machine"],)).fetchall()
        elif machine and not (wave or participant):
            self.access.require_full_operator(who, "revokes a machine's tokens")
            check_ref(machine, "machine")
            found = r.execute(self._TOKENS + " WHERE g.machine = ?", (machine,)).fetchall()
            if not found:
                raise errors.NotFound(f"no tokens for machine {machine!r}: `fleet token list` shows them")
        elif wave and participant and not machine:
            w = self.access.wave(who, wave)
            found = r.execute(
                self._TOKENS + " WHERE t.wave_id = ? AND t.participant = ? AND g.scope IS NULL",
                (w["id"], participant),
            ).fetchall()
            if not found:
                raise errors.NotFound(f"no token for {participant!r} in wave {w['name']!r}")
        else:
            raise errors.UsageError("name a token id, a machine, or both a wave and a participant")
        live = [t for t in found if t["revoked_at"] is None]
        if live:
            with self._db.write() as conn:
                at = now()
                for t in live:
                    record(conn, TokenRevoked(token_id=t["id"], revoked_at=at))
        ids = {t["id"] for t in live}
        return [t for t in self.list_tokens(who) if t.id in ids]

    # ---------------------------------------------------------------- agent sessions

    def record_session(self, who: Principal, wave: str, rec: NewSession) -> SessionRecord:
        """Remember which agent session ``rec.participant`` runs (operator only): respawn reads it."""
        self.access.require_operator(who, "records agent sessions")
        w = self.access.wave(who, wave)
        checks.participant_name(rec.participant)
        checks.session_id(rec.session_id)
        wl = self.access.wavelet(who, rec.wavelet_id)
        if wl["wave_id"] != w["id"]:
            raise errors.UsageError(f"wavelet {rec.wavelet_id!r} is not in wave {w['name']!r}")
        self._commit(
            SessionRecorded(
                participant=rec.participant,
                session_id=rec.session_id,
                wavelet_id=wl["id"],
                layout=rec.layout,
                agent=rec.agent,
                transport=rec.transport,
                cwd=rec.cwd,
                host=rec.host,
                wave_id=w["id"],
                updated_at=now(),
            )
        )
        return self.sessions(who, wave, rec.participant)[0]

    def sessions(self, who: Principal, wave: str, participant: str | None = None) -> list[SessionRecord]:
        """Recorded sessions of ``wave``, by participant (a participant sees only its own)."""
        w = self.access.wave(who, wave)
        if not who.is_operator:
            participant = who.name
        sql, args = "SELECT * FROM sessions WHERE wave_id = ?", [w["id"]]
        if participant:
            sql += " AND participant = ?"
            args.append(participant)
        return [rows.session(s) for s in self._r().execute(sql + " ORDER BY participant", args)]

    # ---------------------------------------------------------------- the resident's seat

    def seat(self, who: Principal, wave: str) -> Seat | None:
        """The wave's newest seat, open or closed (None: it never had a resident); any participant
        of the wave may read it."""
        w = self.access.wave(who, wave)
        row = self._r().execute("SELECT * FROM seats WHERE wave_id = ?", (w["id"],)).fetchone()
        return rows.seat(row) if row is not None else None

    def claim_seat(self, who: Principal, wave: str, rec: NewSeat) -> Seat:
        """Seat ``rec`` as the wave's resident (operator only). One brain per wave: an open seat of
        another session is a Conflict naming it, unless ``rec.force`` (then it is closed as taken
        over, in the same transaction); an open seat of the same session is refreshed."""
        self.access.require_operator(who, "seats a wave's resident")
        w = self.access.wave(who, wave)
        checks.participant_name(rec.participant)
        checks.session_id(rec.session_id)
        if rec.pid <= 0:
            raise errors.UsageError(f"pid {rec.pid} is not a process id")
        with self._db.write() as conn:
            row = conn.execute(
                "SELECT * FROM seats WHERE wave_id = ? AND closed_at IS NULL", (w["id"],)
            ).fetchone()
            at = now()
            if row is not None and row["session_id"] != rec.session_id:
                if not rec.force:
                    raise errors.Conflict(
                        f"wave {w['name']!r} already has a resident: {row['participant']} (session"
                        f" {row['session_id']}, pid {row['pid']} on {row['host']}, since"
                        f" {row['claimed_at']}): `fleet resident stop {w['name']}` first, or take"
                        " over with --force"
                    )
                record(conn, SeatClosed(wave_id=w["id"], closed_at=at, why=f"taken over by {rec.session_id}"))
            record(
                conn,
                SeatClaimed(
                    wave_id=w["id"], participant=rec.participant, session_id=rec.session_id,
                    host=rec.host, pid=rec.pid, pane_id=rec.pane_id, cwd=rec.cwd, claimed_at=at,
                ),
            )  # fmt: skip
        seat = self.seat(who, wave)
        assert seat is not None
        return seat

    def close_seat(self, who: Principal, wave: str, rec: CloseSeat) -> Seat | None:
        """Close the wave's open seat (operator only), if it is ``rec.session_id``'s when that is
        given; returns the seat as it now is (None: the wave never had one). Idempotent."""
        self.access.require_operator(who, "closes a wave's resident seat")
        w = self.access.wave(who, wave)
        if not rec.why.strip():
            raise errors.UsageError("closing a seat needs a reason (why)")
        with self._db.write() as conn:
            row = conn.execute(
                "SELECT * FROM seats WHERE wave_id = ? AND closed_at IS NULL", (w["id"],)
            ).fetchone()
            if row is not None and rec.session_id in (None, row["session_id"]):
                record(conn, SeatClosed(wave_id=w["id"], closed_at=now(), why=rec.why))
        return self.seat(who, wave)

    def memory_seat(self, who: Principal, wave: str) -> tuple[Seat, Wave]:
        """The seat whose worktree locates the wave's MEMORY.md, for ``who`` holding its pen (the
        operator, or the seated resident: Forbidden otherwise); NotFound while it never had one."""
        w = self.access.wave(who, wave)
        seat = self.seat(who, w["id"])
        self.access.require_memory_pen(who, seat, w["name"])
        if seat is None:
            raise errors.NotFound(
                f"wave {w['name']!r} has no resident yet, so fleet does not know its repository:"
                f" `fleet resident start {w['name']}` in it first (before that, MEMORY.md is the file"
                f" wave/{w['name']}/MEMORY.md in the repository, to edit by hand)"
            )
        return seat, self.get_wave(who, w["id"])

    # ---------------------------------------------------------------- budgets

    def budgets(self, who: Principal, wave: str, participant: str | None = None) -> list[Budget]:
        """The wave's budgets ``who`` may see (a participant: those that apply to it), each with who
        reached it since it was set; ``participant``: only those that apply to that participant."""
        stamp = self._db.stamp()
        memo = self._memo.at(stamp[0])
        w = self.access.wave(who, wave, memo)
        r = self._r()
        out: list[Budget] = []
        if memo is not None and memo.get(("no budgets", w["id"])):
            return out  # (every feed answer carries the budgets: most waves have none)
        if not r.execute("SELECT 1 FROM budgets WHERE wave_id = ? LIMIT 1", (w["id"],)).fetchone():
            if memo is not None and self._db.exact(stamp):
                memo[("no budgets", w["id"])] = True
            return out
        for b in r.execute(
            "SELECT * FROM budgets WHERE wave_id = ? ORDER BY wavelet_id, participant", (w["id"],)
        ):
            if not self.access.sees_budget(who, b):
                continue
            if participant and b["participant"] not in ("", participant):
                continue
            label = ""
            if b["wavelet_id"]:
                wl = r.execute("SELECT name FROM wavelets WHERE id = ?", (b["wavelet_id"],)).fetchone()
                label = f"{w['name']}/{wl['name']}" if wl is not None else b["wavelet_id"]
            reached = [
                m["participant"]
                for m in r.execute(
                    "SELECT participant FROM budget_marks WHERE wave_id = ? AND wavelet_id = ? AND scope = ?"
                    " AND set_at = ? ORDER BY participant",
                    (w["id"], b["wavelet_id"], b["participant"], b["set_at"]),
                )
                if who.is_operator or m["participant"] == who.name
            ]
            budget = rows.budget(b, label, reached)
            if budget.shared:
                total = r.execute(
                    "SELECT COALESCE(SUM(tokens), 0) AS tokens, COALESCE(SUM(cost), 0.0) AS cost,"
                    " GROUP_CONCAT(NULLIF(unpriced, '')) AS unpriced"
                    " FROM budget_spend WHERE wave_id = ? AND wavelet_id = ?",
                    (w["id"], b["wavelet_id"]),
                ).fetchone()
                budget.spent_tokens, budget.spent_cost = int(total["tokens"]), float(total["cost"])
                budget.spent_unpriced = sorted({m for m in (total["unpriced"] or "").split(",") if m})
            out.append(budget)
        return out

    def report_spend(self, who: Principal, wave: str, rep: SpendReport) -> list[Budget]:
        """Record what ``rep.participant``'s session spent on each wavelet named (its own channel, or
        the operator): a row is never lowered, so a repeated or late report changes nothing. Returns
        the budgets that apply to the participant, the members' sums included."""
        self.access.require_budget_reporter(who, rep.participant)
        w = self.access.wave(who, wave)
        checks.participant_name(rep.participant)
        at = now()
        with self._db.write() as conn:
            for sp in rep.spend[:1000]:
                if sp.tokens < 0 or not sp.cost >= 0:
                    raise errors.UsageError(f"spend on {sp.wavelet_id!r}: tokens and cost must be 0 or more")
                # the unpriced models are the latest report's: a price added since clears them
                unpriced = ",".join(sorted({m[:200] for m in sp.unpriced[:50] if m and "," not in m}))
                conn.execute(
                    "INSERT INTO budget_spend(wave_id, wavelet_id, participant, session_id, tokens, cost,"
                    " reported_at, unpriced) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(wave_id, wavelet_id,"
                    " participant, session_id) DO UPDATE SET"
                    " tokens = MAX(budget_spend.tokens, excluded.tokens),"
                    " cost = MAX(budget_spend.cost, excluded.cost), reported_at = excluded.reported_at,"
                    " unpriced = excluded.unpriced",
                    (
                        w["id"], sp.wavelet_id, rep.participant, rep.session_id[:200], sp.tokens, sp.cost, at,
                        unpriced,
                    ),
                )  # fmt: skip
        return self.budgets(who, w["id"], rep.participant)

    def set_budget(self, who: Principal, wave: str, req: SetBudget) -> Budget | None:
        """Set (or clear: neither tokens nor cost) a budget: operator only. A layout's budget
        (``source="layout"``) never replaces one the operator set; the budget as it now is is
        returned (None: cleared)."""
        self.access.require_budget_setter(who)
        w = self.access.wave(who, wave)
        if req.source not in ("operator", "layout"):
            raise errors.UsageError(f"budget source {req.source!r}: use operator or layout")
        check_limit(req.tokens, req.cost)
        participant = checks.participant_name(req.participant) if req.participant else ""
        wavelet_id = ""
        if req.wavelet:
            wl = self.access.wavelet(who, req.wavelet, wave=w["id"])
            if wl["wave_id"] != w["id"]:
                raise errors.UsageError(f"wavelet {req.wavelet!r} is not in wave {w['name']!r}")
            wavelet_id = wl["id"]
        key = (w["id"], wavelet_id, participant)
        with self._db.write() as conn:
            old = conn.execute(
                "SELECT * FROM budgets WHERE wave_id = ? AND wavelet_id = ? AND participant = ?", key
            ).fetchone()
            keep = req.source == "layout" and old is not None and old["source"] == "operator"
            same = old is not None and (old["tokens"], old["cost"]) == (req.tokens, req.cost)
            if (
                not keep
                and not (same and req.source == "layout")
                and (old is not None or req.tokens or req.cost)
            ):
                record(
                    conn,
                    BudgetSet(
                        wave_id=w["id"], wavelet_id=wavelet_id, participant=participant, tokens=req.tokens,
                        cost=None if req.cost is None else float(req.cost),
                        source="layout" if req.source == "layout" else "operator",
                        set_by=who.name, set_at=_after(old["set_at"] if old is not None else "", now()),
                    ),
                )  # fmt: skip
        got = [b for b in self.budgets(who, wave) if (b.wavelet_id, b.participant) == key[1:]]
        return got[0] if got else None

    def budget_reached(self, who: Principal, wave: str, rep: BudgetReport) -> BudgetReachedAnswer:
        """Record that ``rep.participant`` passed a budget, with one ``system`` blip naming the
        operator; only the first report of the budget as set (``set_at``) does anything."""
        self.access.require_budget_reporter(who, rep.participant)
        w = self.access.wave(who, wave)
        checks.participant_name(rep.participant)
        key = (w["id"], rep.wavelet_id, rep.scope)
        with self._db.write() as conn:
            b = conn.execute(
                "SELECT * FROM budgets WHERE wave_id = ? AND wavelet_id = ? AND participant = ?", key
            ).fetchone()
            if b is None or b["set_at"] != rep.set_at or b["participant"] not in ("", rep.participant):
                return BudgetReachedAnswer(first=False)
            if conn.execute(
                "SELECT 1 FROM budget_marks WHERE wave_id = ? AND wavelet_id = ? AND scope = ?"
                " AND participant = ?",
                (*key, rep.participant),
            ).fetchone():
                return BudgetReachedAnswer(first=False)
            where = rep.wavelet_id
            if not where:
                s = conn.execute(
                    "SELECT wavelet_id FROM sessions WHERE wave_id = ? AND participant = ?",
                    (w["id"], rep.participant),
                ).fetchone()
                where = s["wavelet_id"] if s is not None else w["root_id"]
            wl = conn.execute("SELECT * FROM wavelets WHERE id = ?", (where,)).fetchone()
            label = f"{w['name']}/{wl['name']}" if rep.wavelet_id else ""
            budget = rows.budget(b, label, [])
            text = operator_text(rep.participant, budget, rep.spent[:600], w["name"])
            at = now()
            told = (
                budget.shared
                and conn.execute(  # the members' sum: one blip for them all
                    "SELECT 1 FROM budget_marks WHERE wave_id = ? AND wavelet_id = ? AND scope = ?"
                    " AND set_at = ?",
                    (*key, rep.set_at),
                ).fetchone()
            )
            blip = None if told else self._new_blip(wl, "system", "system", text, at, actor=rep.participant)
            record(
                conn,
                BudgetReached(
                    wave_id=w["id"], wavelet_id=rep.wavelet_id, scope=rep.scope, participant=rep.participant,
                    set_at=rep.set_at, reached_at=at, blip=blip,
                ),
            )  # fmt: skip
        if blip is None:
            return BudgetReachedAnswer(first=True)
        return BudgetReachedAnswer(first=True, blip_id=blip.id, wavelet_id=blip.wavelet_id)

    # ---------------------------------------------------------------- the log

    def events(self, who: Principal) -> Iterator[Event]:
        """The whole event log as typed events, oldest first: operator only."""
        self.access.require_full_operator(who, "reads the event log")
        for row in self._r().execute("SELECT type, payload FROM events ORDER BY seq"):
            yield parse(row["type"], row["payload"])

    def dump(self, who: Principal) -> dict[str, list[tuple[Any, ...]]]:
        """Every materialised row, table by table, in a stable order (for comparing stores): operator only."""
        self.access.require_full_operator(who, "dumps the store")
        return dump_tables(self._r())


def open_store(path: Path | str, **options: Any) -> Store:
    """The store at ``path`` (after :func:`check_database` for an SQLite file), storage faults named."""
    if not is_postgres(path):
        check_database(Path(path))
    with storage_faults(path):
        return Store(path, **options)
