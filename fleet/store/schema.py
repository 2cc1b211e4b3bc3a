"""The database file: its settings (:func:`connect`), its schema (:data:`MIGRATIONS`), its connections.

What a caller may rely on:

- :func:`connect` is the one place the SQLite settings are made: WAL, foreign keys, a busy timeout,
  ``sqlite3.Row`` rows, autocommit mode (transactions are explicit ``BEGIN IMMEDIATE``). Given a
  ``postgresql://`` URL it opens that store instead (:mod:`fleet.store.postgres`), a :class:`Conn`
  taking the same SQL; the rest of the store does not know which engine it writes.
- :data:`MIGRATIONS` is a list of named, forward-only functions. :func:`migrate` applies those not yet
  recorded in the ``migrations`` table, each in the same transaction as its record. A shipped
  migration is never edited, renamed or reordered: append a new one.
- :class:`Connections` is one writer connection behind a lock (only the daemon writes) and read
  connections from a bounded pool, one per serving thread until it releases it (WAL lets readers
  proceed while the writer commits). The database and WAL files it opened are watched: removed or
  replaced, what the writer had is saved and writes are refused (:mod:`fleet.store.files`).
- :meth:`Connections.group` lets one thread's writes share a transaction (the daemon's loop: the
  requests one turn of it runs). Each write is a savepoint of it, undone alone when it fails; the
  transaction begins with the first write and commits when the group ends; in between that thread
  reads through the writer (what the group wrote so far, nothing else committing meanwhile), and
  the group says which of its steps saw a transaction that did not commit (:class:`Group`).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import uuid6

from fleet import errors
from fleet.store.faults import fault_of, storage_faults
from fleet.store.files import Change, Rescued, StoreFiles, rescue

log = logging.getLogger(__name__)


class Row(Protocol):
    """A row, by position or column name: ``sqlite3.Row``, or PostgreSQL's alike."""

    def __getitem__(self, key: int | str, /) -> Any: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Any]: ...
    def keys(self) -> list[str]: ...


class Cursor(Protocol):
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...
    @property
    def lastrowid(self) -> int | None: ...


class Conn(Protocol):
    """What the store asks of a connection, on either engine (``sqlite3.Connection``, or a
    :class:`fleet.store.postgres.PgConnection`): one SQL text, SQLite's."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Cursor: ...
    @property
    def in_transaction(self) -> bool: ...
    def close(self) -> None: ...


def is_postgres(location: object) -> bool:
    """True when ``location`` is a ``postgresql://`` URL (else it is an SQLite file's path)."""
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


def connect(path: Path | str, *, readonly: bool = False) -> Conn:
    """Open the database with fleet's settings: WAL, foreign keys, a busy timeout, Row factory (or
    the PostgreSQL store a ``postgresql://`` URL names)."""
    if is_postgres(path):
        from fleet.store import postgres

        return postgres.connect(str(path))
    conn = sqlite3.connect(str(path), timeout=10.0, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA busy_timeout = 10000")
    conn.execute("PRAGMA foreign_keys = ON")
    if not readonly:
        conn.execute("PRAGMA journal_mode = WAL")
        # NORMAL in WAL mode: a committed transaction survives the process being killed (kill -9);
        # only an OS crash or power loss can lose the newest commits.
        conn.execute("PRAGMA synchronous = NORMAL")
    return conn


_second: tuple[int, str] = (-1, "")
"""The last second :func:`now` formatted, and its text up to the seconds."""


def now() -> str:
    """The store's timestamp format: ISO 8601 UTC with milliseconds (``2026-12-06T04:33:51.321Z``).

    The text of each second is made once (``datetime.isoformat`` for each was 2 µs of every write)."""
    global _second
    second, ms = divmod(time.time_ns() // 1_000_000, 1000)
    known, head = _second
    if known != second:
        head = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second = (second, head)
    return f"{head}.{ms:03d}Z"


# ---------------------------------------------------------------- migrations


def _script(conn: Conn, sql: str) -> None:
    """Run DDL statement by statement (``executescript`` would commit the migration's transaction)."""
    for statement in sql.split(";"):
        if statement.strip():
            conn.execute(statement)


def _m0001_initial(conn: Conn) -> None:
    _script(
        conn,
        """
        CREATE TABLE events (
            seq        INTEGER PRIMARY KEY AUTOINCREMENT,
            type       TEXT NOT NULL,
            payload    TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE TABLE waves (
            id         TEXT PRIMARY KEY,
            name       TEXT NOT NULL UNIQUE,
            root_id    TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE TABLE participants (
            wave_id TEXT NOT NULL REFERENCES waves(id),
            name    TEXT NOT NULL,
            kind    TEXT NOT NULL CHECK (kind IN ('agent', 'human')),
            PRIMARY KEY (wave_id, name)
        );
        CREATE TABLE wavelets (
            id           TEXT PRIMARY KEY,
            wave_id      TEXT NOT NULL REFERENCES waves(id),
            parent_id    TEXT REFERENCES wavelets(id),
            fork_blip_id TEXT,
            name         TEXT NOT NULL,
            private      INTEGER NOT NULL DEFAULT 0,
            created_by   TEXT NOT NULL,
            created_at   TEXT NOT NULL,
            UNIQUE (wave_id, name)
        );
        CREATE TABLE members (
            wavelet_id TEXT NOT NULL REFERENCES wavelets(id),
            name       TEXT NOT NULL,
            kind       TEXT NOT NULL,
            joined_at  TEXT NOT NULL,
            since      TEXT NOT NULL,
            PRIMARY KEY (wavelet_id, name)
        );
        CREATE INDEX members_by_name ON members(name, wavelet_id);
        CREATE TABLE blips (
            id                TEXT PRIMARY KEY,
            wavelet_id        TEXT NOT NULL REFERENCES wavelets(id),
            wave_id           TEXT NOT NULL REFERENCES waves(id),
            author            TEXT NOT NULL,
            kind              TEXT NOT NULL CHECK (kind IN ('message', 'system', 'surface')),
            text              TEXT NOT NULL,
            replaces          TEXT REFERENCES blips(id),
            source_wavelet_id TEXT REFERENCES wavelets(id),
            source_blip_id    TEXT REFERENCES blips(id),
            created_at        TEXT NOT NULL,
            superseded_by     TEXT
        );
        CREATE INDEX blips_by_wavelet ON blips(wavelet_id, id);
        CREATE TABLE tokens (
            id          TEXT PRIMARY KEY,
            wave_id     TEXT NOT NULL REFERENCES waves(id),
            participant TEXT NOT NULL,
            hash        TEXT NOT NULL UNIQUE,
            created_at  TEXT NOT NULL,
            revoked_at  TEXT
        );
        """,
    )


def _m0002_sessions(conn: Conn) -> None:
    _script(
        conn,
        """
        CREATE TABLE sessions (
            wave_id     TEXT NOT NULL REFERENCES waves(id),
            participant TEXT NOT NULL,
            session_id  TEXT NOT NULL,
            wavelet_id  TEXT NOT NULL REFERENCES wavelets(id),
            layout      TEXT NOT NULL,
            agent       TEXT NOT NULL,
            transport   TEXT NOT NULL,
            cwd         TEXT NOT NULL,
            host        TEXT NOT NULL,
            updated_at  TEXT NOT NULL,
            PRIMARY KEY (wave_id, participant)
        )
        """,
    )


def _m0003_blip_actor(conn: Conn) -> None:
    """Who caused a ``system`` blip (a fork, join or leave), so their own provenance does not wake them."""
    conn.execute("ALTER TABLE blips ADD COLUMN actor TEXT")


def _m0004_token_grants(conn: Conn) -> None:
    """Which machine a token was minted for (a join), and a machine token's waves (operator-capable
    there). A row only for such tokens: a plain participant token has none."""
    _script(
        conn,
        """
        CREATE TABLE token_grants (
            token_id TEXT PRIMARY KEY REFERENCES tokens(id),
            machine  TEXT NOT NULL,
            scope    TEXT
        );
        CREATE INDEX token_grants_by_machine ON token_grants(machine);
        """,
    )


def _m0005_store_identity(conn: Conn) -> None:
    """The store's identity, minted once per database (docs/design.md §2): what delivery state
    files are keyed by, so a daemon that moved or restarted is the same store to its clients."""
    conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('store_id', ?)", (str(uuid6.uuid7()),))


def _m0006_seats(conn: Conn) -> None:
    """The resident's seat per wave (one mind per wave, docs/resident.md)."""
    _script(
        conn,
        """
        CREATE TABLE seats (
            wave_id     TEXT PRIMARY KEY REFERENCES waves(id),
            participant TEXT NOT NULL,
            session_id  TEXT NOT NULL,
            host        TEXT NOT NULL,
            pid         INTEGER NOT NULL,
            pane_id     TEXT NOT NULL,
            cwd         TEXT NOT NULL,
            claimed_at  TEXT NOT NULL,
            closed_at   TEXT,
            closed_why  TEXT NOT NULL DEFAULT ''
        )
        """,
    )


def _m0007_budgets(conn: Conn) -> None:
    """Budgets per wave, wavelet and participant (``''``: all), and who reached one since it was
    set (docs/design.md §6, :mod:`fleet.budgets`)."""
    _script(
        conn,
        """
        CREATE TABLE budgets (
            wave_id     TEXT NOT NULL REFERENCES waves(id),
            wavelet_id  TEXT NOT NULL,
            participant TEXT NOT NULL,
            tokens      INTEGER,
            cost        REAL,
            source      TEXT NOT NULL,
            set_by      TEXT NOT NULL,
            set_at      TEXT NOT NULL,
            PRIMARY KEY (wave_id, wavelet_id, participant)
        );
        CREATE TABLE budget_marks (
            wave_id     TEXT NOT NULL REFERENCES waves(id),
            wavelet_id  TEXT NOT NULL,
            scope       TEXT NOT NULL,
            participant TEXT NOT NULL,
            set_at      TEXT NOT NULL,
            reached_at  TEXT NOT NULL,
            blip_id     TEXT NOT NULL,
            PRIMARY KEY (wave_id, wavelet_id, scope, participant)
        )
        """,
    )


def _m0008_summaries(conn: Conn) -> None:
    """Rolling summaries of wavelets (each stands in for its wavelet's blips up to ``upto`` in a
    context) and pinned blips (load-bearing: every summary must cite them)."""
    _script(
        conn,
        """
        CREATE TABLE summaries (
            id            TEXT PRIMARY KEY,
            wavelet_id    TEXT NOT NULL REFERENCES wavelets(id),
            wave_id       TEXT NOT NULL REFERENCES waves(id),
            after         TEXT NOT NULL,
            upto          TEXT NOT NULL REFERENCES blips(id),
            text          TEXT NOT NULL,
            author        TEXT NOT NULL,
            author_kind   TEXT NOT NULL,
            cites         TEXT NOT NULL,
            load_bearing  TEXT NOT NULL,
            covered_blips INTEGER NOT NULL,
            covered_bytes INTEGER NOT NULL,
            created_at    TEXT NOT NULL
        );
        CREATE INDEX summaries_by_wavelet ON summaries(wavelet_id, upto);
        CREATE TABLE pins (
            wavelet_id TEXT NOT NULL REFERENCES wavelets(id),
            blip_id    TEXT NOT NULL REFERENCES blips(id),
            pinned_by  TEXT NOT NULL,
            pinned_at  TEXT NOT NULL,
            PRIMARY KEY (wavelet_id, blip_id)
        );
        """,
    )


def _m0009_blip_replacer(conn: Conn) -> None:
    """Who wrote a replacement version, when a replace keeps the blip's author (docs/design.md §1)."""
    conn.execute("ALTER TABLE blips ADD COLUMN replaced_by TEXT")


def _m0010_budget_spend(conn: Conn) -> None:
    """What each session spent on each wavelet's turns, as its channel last reported it: the sum a
    wavelet budget is judged on (:mod:`fleet.budgets`). Derived state, not from the log: every
    channel reports again at each budget check, so a lost row comes back at the next look."""
    _script(
        conn,
        """
        CREATE TABLE budget_spend (
            wave_id     TEXT NOT NULL REFERENCES waves(id),
            wavelet_id  TEXT NOT NULL,
            participant TEXT NOT NULL,
            session_id  TEXT NOT NULL,
            tokens      INTEGER NOT NULL,
            cost        REAL NOT NULL,
            reported_at TEXT NOT NULL,
            PRIMARY KEY (wave_id, wavelet_id, participant, session_id)
        )
        """,
    )


def _m0011_request_keys(conn: Conn) -> None:
    # Bookkeeping, not state (fleet/store/keys.py): not an event, not materialised, never exported.
    conn.execute(
        """
        CREATE TABLE request_keys (
            scope       TEXT NOT NULL,
            key         TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            seq         INTEGER NOT NULL,
            created_at  REAL NOT NULL,
            status      INTEGER,
            body        BLOB,
            PRIMARY KEY (scope, key)
        ) WITHOUT ROWID
        """
    )
    conn.execute("CREATE INDEX request_keys_created ON request_keys(created_at)")


def _m0012_permissions(conn: Conn) -> None:
    """Permission prompts and their answers (docs/permissions.md, :mod:`fleet.store.permissions`)."""
    _script(
        conn,
        """
        CREATE TABLE permissions (
            id          TEXT PRIMARY KEY,
            wave_id     TEXT NOT NULL REFERENCES waves(id),
            participant TEXT NOT NULL,
            session_id  TEXT NOT NULL,
            prompt_id   TEXT NOT NULL,
            tool        TEXT NOT NULL,
            preview     TEXT NOT NULL,
            asked_at    TEXT NOT NULL,
            expires_at  TEXT NOT NULL,
            outcome     TEXT NOT NULL DEFAULT 'pending',
            answered_by TEXT NOT NULL DEFAULT '',
            via         TEXT NOT NULL DEFAULT '',
            answered_at TEXT,
            message     TEXT NOT NULL DEFAULT ''
        );
        CREATE INDEX permissions_by_participant ON permissions(wave_id, participant, outcome, id);
        """,
    )


def _m0013_budget_spend_unpriced(conn: Conn) -> None:
    """The models with no price a session's spend report counted (comma-separated, '' for none): while
    a member's row names one, the members' cost is unknown, never the priced part alone (issue 26)."""
    conn.execute("ALTER TABLE budget_spend ADD COLUMN unpriced TEXT NOT NULL DEFAULT ''")


def _m0014_wavelet_topic(conn: Conn) -> None:
    """A wavelet's one-line topic ('' for none), set by ``wavelet.topic`` events (issue 27)."""
    conn.execute("ALTER TABLE wavelets ADD COLUMN topic TEXT NOT NULL DEFAULT ''")


MIGRATIONS: list[tuple[str, Callable[[Conn], None]]] = [
    ("0001_initial", _m0001_initial),
    ("0002_sessions", _m0002_sessions),
    ("0003_blip_actor", _m0003_blip_actor),
    ("0004_token_grants", _m0004_token_grants),
    ("0005_store_identity", _m0005_store_identity),
    ("0006_seats", _m0006_seats),
    ("0007_budgets", _m0007_budgets),
    ("0008_summaries", _m0008_summaries),
    ("0009_blip_replacer", _m0009_blip_replacer),
    ("0010_budget_spend", _m0010_budget_spend),
    ("0011_request_keys", _m0011_request_keys),
    ("0012_permissions", _m0012_permissions),
    ("0013_budget_spend_unpriced", _m0013_budget_spend_unpriced),
    ("0014_wavelet_topic", _m0014_wavelet_topic),
]
"""Named, forward-only. Append new ones; never edit or reorder a shipped one."""

MATERIALISED = (
    "waves",
    "participants",
    "wavelets",
    "members",
    "blips",
    "tokens",
    "sessions",
    "token_grants",
    "seats",
    "budgets",
    "budget_marks",
    "summaries",
    "pins",
    "permissions",
)
"""The tables :mod:`fleet.store.events` maintains; everything in them can be rebuilt from the log."""


def migrate(conn: Conn) -> list[str]:
    """Apply every migration not yet recorded, each in its own transaction with its record (under
    the write lock, and checked again under it: two daemons starting on one PostgreSQL store apply
    each migration once)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    done = {r[0] for r in conn.execute("SELECT name FROM migrations")}
    applied = []
    for name, fn in MIGRATIONS:
        if name in done:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("SELECT 1 FROM migrations WHERE name = ?", (name,)).fetchone():
                conn.execute("COMMIT")  # another writer applied it meanwhile
                continue
            fn(conn)
            conn.execute("INSERT INTO migrations(name, applied_at) VALUES (?, ?)", (name, now()))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        applied.append(name)
        log.info("applied migration %s", name)
    return applied


def store_id(conn: Conn) -> str:
    """The identity minted for this database by migration 0005."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
    return str(row[0])


def dump_tables(conn: Conn) -> dict[str, list[tuple[Any, ...]]]:
    """Every materialised row, table by table, in a stable order: equal dumps mean equal states."""
    return {
        table: [tuple(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2")]
        for table in MATERIALISED
    }


# ---------------------------------------------------------------- connections


IDLE_READERS = 8
"""Read connections per database: all opened with it and kept until it closes, each serving one
thread at a time (:class:`Connections`)."""
READER_WAIT = 2.0
"""Seconds a thread waits for a free reader before it opens one beyond the pool (closed when given
back): a safety valve, never the way a loaded daemon serves (see :meth:`Connections.reader`)."""


_token_writes = 0
"""Token rows written in this process (any store): :func:`note_token_write` counts them."""


def note_token_write() -> None:
    """Called by the event handlers that change the tokens tables, inside a write transaction:
    once it commits, :attr:`Connections.token_epoch` moves on."""
    global _token_writes
    _token_writes += 1


class GenerationMemo:
    """Query results shared by the threads that read one generation of the store (the 64 feeds a
    post wakes ask the same wavelet for the same blips). An entry is put only from a read that saw
    exactly its generation (:meth:`Connections.exact`), and read by a thread that took the
    generation before its own snapshot began, so what it gets is never newer than what it reads
    itself; at worst older, by commits whose wake-ups have not gone out yet. A newer generation
    drops the lot."""

    def __init__(self, *, shared: bool = True) -> None:
        self._current: tuple[int, dict[object, object]] = (-1, {})
        self.shared = shared
        """False on a PostgreSQL store: other daemons commit too, and a generation counted here cannot
        tell whether one of their commits landed inside a read, so nothing is shared (:meth:`at` is
        None) and each feed reads for itself."""

    def at(self, generation: int) -> dict[object, object] | None:
        """The entries of ``generation`` (a fresh table when it is newer than the last seen), or
        None for an older one (always None when not :attr:`shared`)."""
        if not self.shared:
            return None
        current = self._current  # one read: the pair is replaced whole, never torn
        if generation > current[0]:
            current = self._current = (generation, {})
        return current[1] if current[0] == generation else None


def _in_transaction(conn: Conn) -> bool:
    try:
        return conn.in_transaction
    except sqlite3.ProgrammingError:  # closed (by Connections.close): nothing is using it
        return False


class _Held:
    """A thread's hold on a reader, kept in its thread-local: when the thread ends without giving
    the reader back, the local goes and this with it, and the reader returns to the pool."""

    __slots__ = ("conn", "give_back", "given_back")

    def __init__(self, give_back: Callable[[Conn], None], conn: Conn) -> None:
        self.give_back = give_back
        self.conn = conn
        self.given_back = False

    def __del__(self) -> None:
        if not self.given_back:
            self.given_back = True
            with contextlib.suppress(Exception):  # at interpreter exit the pool may be gone already
                self.give_back(self.conn)


FILES_CHECK_EVERY = 1.0
"""Seconds between two checks of the database and WAL files while nothing is written."""
CHECKPOINT_COMMITS = 100
"""Commits between two checkpoints of the WAL into the database file, each run by the store's
watcher thread on a connection of its own (:meth:`Connections.checkpoint`), not in a commit."""
CHECKPOINT_BACKSTOP = 10_000
"""WAL pages past which a commit checkpoints itself (SQLite's own autocheckpoint): only when the
watcher's checkpoints have fallen that far behind (SQLite's default is 1,000, in every commit)."""


def _watch_files(ref: weakref.ref[Connections], wake: threading.Event) -> None:
    """Check ``ref``'s files every :data:`FILES_CHECK_EVERY` seconds until it is closed, found
    changed, or gone (a weak reference: an unclosed store is still collected); checkpoint its WAL
    when ``wake`` is set (every :data:`CHECKPOINT_COMMITS` commits)."""
    files_at = time.monotonic() + FILES_CHECK_EVERY
    while True:
        wake.wait(max(0.0, files_at - time.monotonic()))
        conns = ref()
        if conns is None or conns._closed:
            return
        try:
            if wake.is_set():
                wake.clear()
                conns.checkpoint()
            if time.monotonic() >= files_at:
                files_at = time.monotonic() + FILES_CHECK_EVERY
                if not conns.check_files():
                    return
        except Exception:  # the watcher must never take the daemon down; each write checks anyway
            log.exception("checking the store's files")
        del conns


def _open_reader(path: Path | str) -> Conn:
    conn = connect(path, readonly=True)
    if not is_postgres(path):
        conn.execute("PRAGMA schema_version").fetchone()  # its -wal opened now, not at a burst
    return conn


class _Savepoint:
    """One write inside this thread's :meth:`Connections.group`: a savepoint of the group's transaction
    (begun by the first), released at the end, or rolled back to and released if the write fails —
    undone alone; where SQLite had rolled the whole transaction back (a full disk), the group's
    transaction is lost (:meth:`Connections._lose`). SQLite and OS errors of a full disk, a read-only
    file system or a corrupt file are raised as StorageFaults (:func:`~fleet.store.faults.fault_of`).
    A class, not a generator: the daemon's loop enters one for each write it makes (three nested
    generator context managers were ~10 µs of every post)."""

    __slots__ = ("_db", "_g", "_tokens")

    def __init__(self, db: Connections, g: Group) -> None:
        self._db, self._g = db, g
        self._tokens = 0
        """The token writes counted when the write began (:meth:`__enter__`)."""

    def __enter__(self) -> Conn:
        db = self._db
        if not self._g.open:
            db._begin_group(self._g)
        self._tokens = _token_writes
        try:
            db._w.execute("SAVEPOINT fleet_write")
        except BaseException as exc:
            self._tokens_changed()
            fault = self._undo(exc)
            if fault is None:
                raise
            raise fault from exc
        return db._w

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        try:
            if exc is None:
                try:
                    self._db._w.execute("RELEASE fleet_write")
                    return
                except BaseException as err:
                    fault = self._undo(err)
                    if fault is None:
                        raise
                    raise fault from err
            fault = self._undo(exc)
            if fault is not None:
                raise fault from exc
            # else the write's own exception goes on
        finally:
            self._tokens_changed()

    def _undo(self, exc: BaseException) -> errors.FleetError | None:
        """Undo the failed write: the StorageFault ``exc`` is, if it is one (what is raised then)."""
        db = self._db
        fault = fault_of(exc, db.path)
        w = db._w
        undone = False
        if w.in_transaction:
            try:
                w.execute("ROLLBACK TO fleet_write")
                w.execute("RELEASE fleet_write")
                undone = True
            except Exception:
                log.exception("undoing a failed write of a group")
        if not undone:  # SQLite rolled back the whole transaction: the group's earlier writes too
            db._lose(self._g, fault or exc)
        return fault

    def _tokens_changed(self) -> None:
        if _token_writes != self._tokens:
            self._db.token_epoch += 1  # the group's later requests must not be let in from a cache


class Group:
    """The write transactions of one :meth:`Connections.group`, numbered from 1 as they begin
    (usually one; another after one was lost), and the error of each that did not commit.

    A step of the group (the daemon: one request's turn) takes :meth:`mark` before it runs and its
    :meth:`span` after; once the group ended, :meth:`fault` says whether a transaction it wrote or
    read in did not commit: then what it answered was never saved, and it is answered with that
    error instead. A step that began with none open and began none read only what was committed."""

    __slots__ = ("begun", "faults", "open", "tokens")

    def __init__(self) -> None:
        self.begun = 0
        """Transactions begun so far (the open one's number while :attr:`open`)."""
        self.open = False
        self.faults: dict[int, errors.FleetError] = {}
        """The transactions that did not commit, and why."""
        self.tokens = 0
        """The token writes counted when the open transaction began."""

    def mark(self) -> int:
        """The first transaction a step beginning now may touch: the open one, else the next."""
        return self.begun if self.open else self.begun + 1

    def span(self, mark: int) -> range:
        """The transactions a step that took ``mark`` before it ran has touched, now that it ran."""
        return range(mark, self.begun + 1)

    def fault(self, span: range) -> errors.FleetError | None:
        """Why a transaction of ``span`` did not commit (None: each one committed)."""
        for t in span:
            fault = self.faults.get(t)
            if fault is not None:
                return fault
        return None


def _unsaved(exc: BaseException) -> errors.FleetError:
    """What a step whose writes were lost with a group's transaction is told."""
    if isinstance(exc, errors.FleetError):
        return exc
    return errors.FleetError(f"the write was not saved ({type(exc).__name__}: {exc}): send it again")


class Connections:
    """One writer behind a lock, and a fixed pool of read connections, for one database file
    (migrated on open).

    The pool's ``idle_readers`` readers (:data:`IDLE_READERS`) are opened with it and closed only by
    :meth:`close`, or renewed while idle (:meth:`renew_readers`: closed and opened again at once).
    A thread takes one on first use (:meth:`reader`) and holds it until it calls
    :meth:`release_reader` (the daemon does so at the end of each request and before a long-poll
    parks) or ends. So the descriptors and page caches of readers are those of the pool, whatever
    the number of connections, parked long-polls or threads, and they are the same before, during
    and after a burst.

    Why never closed: in WAL mode every open connection holds a shared lock on the database file,
    and SQLite (unix VFS) does not close the descriptor of a connection closed while another one of
    the process holds a lock on that file (closing it would drop the process's POSIX locks): it
    keeps it, to reuse or close when no lock is left, which never happens while the writer is open.
    A pool that closed its surplus readers would keep one descriptor per reader it ever opened.
    """

    def __init__(self, path: Path | str, *, idle_readers: int = IDLE_READERS) -> None:
        self.path = path
        self.postgres = is_postgres(path)
        """On PostgreSQL (a ``postgresql://`` URL): no files to watch, and other daemons may write
        the same database (each write holds its advisory lock: :mod:`fleet.store.postgres`)."""
        self.origin = str(uuid6.uuid7())
        """This process's name in the notifications it sends other daemons on a PostgreSQL store."""
        self._wlock = threading.Lock()
        self.token_epoch = 0
        """Bumped after each commit that changed the tokens (what a cache of token look-ups compares)."""
        self.generation = 0
        """Write transactions ended so far (bumped when each ends, before :meth:`write` returns)."""
        self._writing = 0
        """The generation the write in progress will end as (== :attr:`generation` when none is)."""
        self._w = connect(path)
        migrate(self._w)
        self._checkpointer: Conn | None = None
        """The connection the watcher thread checkpoints the WAL on (SQLite): a commit that ran the
        checkpoint itself (SQLite's default, every 1,000 pages) spent a sixth of a post's CPU in it
        and held the daemon's loop through its fsync (docs/performance.md)."""
        self._checkpoint_lock = threading.Lock()
        self._checkpointed = 0
        """The generation at the last checkpoint the watcher began."""
        self._wake = threading.Event()
        """Set when :data:`CHECKPOINT_COMMITS` commits are not checkpointed yet (and at close)."""
        if not self.postgres:
            self._w.execute(f"PRAGMA wal_autocheckpoint = {CHECKPOINT_BACKSTOP}")
            self._checkpointer = connect(path)
            self._checkpointer.execute("PRAGMA wal_autocheckpoint = 0")
        self._files: StoreFiles | None = None if self.postgres else StoreFiles(Path(path))
        """The database and WAL files the writer opened: checked after each commit (:meth:`write`) and
        once a second between (:meth:`check_files`)."""
        self.on_begin: Callable[[Conn], None] | None = None
        """Called inside each write transaction once it holds the write lock, before anything is
        written (on PostgreSQL the store observes the newest id there: other daemons mint too)."""
        self._files_change: Change | None = None
        self._files_fault: Rescued | None = None
        """Set once either was found removed or replaced (``_files_change``): what every later write
        is refused with."""
        self._local = threading.local()
        self._readers: set[Conn] = set()
        """Every open reader (held by a thread or idle), closed by :meth:`close`."""
        self._idle: list[Conn] = []
        self._idle_max = idle_readers
        self._readers_lock = threading.Lock()
        self._closed = False
        self._free = threading.Condition(self._readers_lock)
        """Notified when a reader goes back to :attr:`_idle` (and at close)."""
        self._extra: set[Conn] = set()
        """Readers opened beyond the pool (:data:`READER_WAIT`), closed when given back."""
        self._group: Group | None = None
        """The group in progress (:meth:`group`), on the thread :attr:`_group_thread`."""
        self._group_thread = 0
        for _ in range(idle_readers):
            conn = _open_reader(path)
            self._readers.add(conn)
            self._idle.append(conn)
        # Between writes too (an idle daemon), at most a second after a file goes: what the writer
        # had is saved before a kill -9 can lose it, and the next write is refused, not the one after.
        if self._files is not None:
            threading.Thread(
                target=_watch_files,
                args=(weakref.ref(self), self._wake),
                name="fleet-store-files",
                daemon=True,
            ).start()

    @property
    def writer(self) -> Conn:
        """The writer connection, for reads that must see the open write transaction's own state."""
        return self._w

    @property
    def open_readers(self) -> int:
        """Readers open now: the pool's, plus any opened beyond it and not yet given back."""
        with self._readers_lock:
            return len(self._readers)

    @property
    def held_readers(self) -> int:
        """Readers held by a thread now (out of the pool)."""
        with self._readers_lock:
            return len(self._readers) - len(self._idle)

    def reader(self) -> Conn:
        """This thread's read connection: taken from the pool on first use, this thread's alone
        until :meth:`release_reader`.

        When every pooled reader is held, the thread waits for one to come back, up to
        :data:`READER_WAIT` s; then it opens one beyond the pool, with a warning in the log. Requests
        hold a reader for the milliseconds of their reads, so a loaded daemon serves from the pool;
        the valve is there for what must not wait forever (a thread inside a write transaction that
        needs a reader while every reader's holder waits for the writer lock) and for a store used
        by more threads than the pool that do not give theirs back.
        """
        g = self._group
        if g is not None and g.open and threading.get_ident() == self._group_thread:
            return self._w  # what the group wrote so far is what this thread's reads must see
        conn: Conn | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._take()
            self._local.conn = conn
            # a thread that ends holding its reader gives it back (the local and its token go with it)
            self._local.token = _Held(self._give_back, conn)
        return conn

    def _take(self) -> Conn:
        with self._free:
            if not self._idle and not self._closed:
                self._free.wait_for(lambda: bool(self._idle) or self._closed, READER_WAIT)
            if self._idle and not self._closed:
                return self._idle.pop()
        if not self._closed:
            log.warning(
                "every one of the %d read connections to %s was held for %.0f s: opening one more"
                " (closed when given back)",
                self._idle_max,
                self.path,
                READER_WAIT,
            )
        conn = connect(self.path, readonly=True)
        with self._readers_lock:
            self._readers.add(conn)
            self._extra.add(conn)
        return conn

    def release_reader(self) -> None:
        """Give this thread's reader back to the pool (a reader opened beyond it is closed). Inside
        :meth:`snapshot` the thread keeps it: the read transaction is still using it."""
        conn: Conn | None = getattr(self._local, "conn", None)
        if conn is None or _in_transaction(conn):
            return
        self._local.conn = None
        token: _Held | None = getattr(self._local, "token", None)
        self._local.token = None
        if token is not None:
            token.given_back = True
        self._give_back(conn)

    def renew_readers(self) -> None:
        """Close the idle readers and open them afresh, for when a burst that used every one is over.

        What a reader grows while it serves stays with it until it is closed: SQLite's page cache
        (up to ``cache_size``, about 2 MiB), and the sqlite3 module's statement cache and list of
        the cursors it made (the dead ones are dropped only every 200th cursor). Made during the
        burst, those small objects are scattered over the memory the burst's connections used and
        keep CPython's allocator from giving it back (a 1 MiB arena goes back only once nothing in
        it is alive): they held 5 of the 12 arenas left after 1,000 idle connections and 500
        long-polls. All are closed before any is opened, so the new ones are not placed among the
        old ones' remains. Descriptors do not move: SQLite keeps a closed reader's descriptor on the
        database (the writer holds a lock) and the reader opened next takes it up again."""
        # Taken out of the pool under the lock, closed and opened outside it: opening allocates,
        # an allocation may run the garbage collector, and a collected _Held gives its reader back
        # under this same (not re-entrant) lock. Meanwhile a request waits for a reader (ms).
        with self._free:
            if self._closed:
                return
            old, self._idle = self._idle, []
            self._readers.difference_update(old)
        n = len(old)
        while old:
            old.pop().close()  # nothing of the old readers outlives this
        fresh: list[Conn] = []
        try:
            for _ in range(n):  # (a storage fault here raises: the pool is short of the rest)
                fresh.append(_open_reader(self.path))
        finally:
            with self._free:
                if self._closed:
                    for conn in fresh:
                        conn.close()
                else:
                    self._readers.update(fresh)
                    self._idle.extend(fresh)
                    self._free.notify_all()

    def _give_back(self, conn: Conn) -> None:
        """Back to the pool, or closed: the readers open are never more than the pool's size or
        the readers held, whichever is larger. A pooled reader given back while one opened beyond
        the pool is still out is the one closed, and that one joins the pool in its place (else
        the pool would hold an idle reader beside the extra one: one more than anyone needs)."""
        with self._free:
            if not self._closed:
                if conn in self._extra:
                    self._extra.discard(conn)
                elif self._extra:
                    self._extra.pop()  # (held by its thread: it comes back to the idle list)
                else:
                    self._idle.append(conn)
                    self._free.notify()
                    return
            self._readers.discard(conn)
            self._extra.discard(conn)
        conn.close()

    def write(self) -> contextlib.AbstractContextManager[Conn]:
        """One write transaction: BEGIN IMMEDIATE .. COMMIT under the writer lock (ROLLBACK on error).

        A full disk, a read-only file system or a corrupt file raise a StorageFault naming it
        (:mod:`fleet.store.faults`). SQLite may already have rolled back on such an error; then
        there is nothing to roll back, and the error that caused it is what is raised.

        After each commit the database and WAL files are checked (:mod:`fleet.store.files`): once
        either is found removed or replaced, what the writer had is saved
        (:func:`~fleet.store.files.rescue`) and every later write raises a StorageFault saying where
        and what to do, with nothing written. The commit that found it is acknowledged only when the
        rescue saved it into the store's own database file; else it raises that fault too.

        Inside this thread's :meth:`group` it is a savepoint of the group's transaction instead.
        """
        g = self._group
        if g is not None and threading.get_ident() == self._group_thread:
            return _Savepoint(self, g)
        return self._transaction()

    @contextmanager
    def _transaction(self) -> Iterator[Conn]:
        with self._wlock, storage_faults(self.path):
            if self._files_fault is not None:
                self._refuse_writes()
            self._writing = self.generation + 1
            try:
                self._w.execute("BEGIN IMMEDIATE")
                if self.on_begin is not None:
                    self.on_begin(self._w)
                tokens_before = _token_writes
                try:
                    yield self._w
                    if self.postgres and _token_writes != tokens_before:  # told at the commit, not before
                        self._w.execute("SELECT pg_notify('fleet', ?)", (f"tokens {self.origin}",))
                    self._w.execute("COMMIT")
                    if _token_writes != tokens_before:
                        self.token_epoch += 1
                except BaseException:
                    if self._w.in_transaction:
                        try:
                            self._w.execute("ROLLBACK")
                        except Exception:
                            log.exception("rolling back a failed write")
                    raise
            finally:
                self._ended()
            # After the commit, not before: a commit into a file removed meanwhile is then never
            # acknowledged unsaved, and one check per write is all it costs.
            fault = self._files_after_commit()
            if fault is not None:
                raise fault

    def _ended(self) -> None:
        """The write in progress ended, committed or not (its generation is now the current one);
        the watcher is woken once :data:`CHECKPOINT_COMMITS` commits are not checkpointed."""
        self.generation = self._writing
        if self.generation - self._checkpointed >= CHECKPOINT_COMMITS:
            self._wake.set()

    def _files_after_commit(self) -> errors.StorageFault | None:
        """Check the database and WAL files after a commit: found removed or replaced, what the
        writer had is saved (and every later write refused); the fault the commit is answered with
        when that rescue could not save it into the store's own file, else None."""
        if self._files is None:
            return None
        change = self._files.changed()
        if change is None:
            return None
        self._files_change = change
        self._files_fault = self._rescue(change)
        return None if self._files_fault.in_place else self._files_fault.fault

    @contextmanager
    def group(self) -> Iterator[Group]:
        """Let this thread's writes until the end share one transaction (see :class:`Group`).

        What the daemon's loop runs in one turn: eight posts then commit once, rewriting the leaf
        pages they share once (docs/performance.md). Each :meth:`write` is a savepoint (its failure
        undoes it alone); the first one takes the writer lock and begins the transaction, which is
        committed at the end (then the files are checked, as after any commit). Meanwhile this
        thread reads through the writer (:meth:`reader`), other threads' writes wait for the end,
        and the generation is that of a write in progress (no shared results are put or taken:
        :meth:`stamp`). A lost transaction (SQLite rolled it back on a full disk, or its commit
        failed) is recorded in the group, never raised here. On PostgreSQL (other daemons write
        too) and inside another group, each write commits on its own."""
        g = Group()
        if self.postgres or self._group is not None:
            yield g
            return
        self._group, self._group_thread = g, threading.get_ident()
        try:
            yield g
        except BaseException as exc:
            if g.open:
                self._lose(g, exc)
            raise
        finally:
            self._group = None
            if g.open:
                self._end_group(g)

    def _begin_group(self, g: Group) -> None:
        self._wlock.acquire()
        try:
            with storage_faults(self.path):
                if self._files_fault is not None:
                    self._refuse_writes()
                self._writing = self.generation + 1
                self._w.execute("BEGIN IMMEDIATE")
                if self.on_begin is not None:
                    self.on_begin(self._w)
        except BaseException:
            if self._w.in_transaction:
                with contextlib.suppress(Exception):
                    self._w.execute("ROLLBACK")
            self._ended()
            self._wlock.release()
            raise
        g.open = True
        g.begun += 1
        g.tokens = _token_writes

    def _lose(self, g: Group, exc: BaseException) -> None:
        """The group's open transaction did not commit (``exc`` says why): rolled back, ended."""
        g.faults[g.begun] = _unsaved(exc)
        if self._w.in_transaction:
            try:
                self._w.execute("ROLLBACK")
            except Exception:
                log.exception("rolling back a group's lost transaction")
        self._close_group(g)

    def _end_group(self, g: Group) -> None:
        try:
            with storage_faults(self.path):
                self._w.execute("COMMIT")
        except BaseException as exc:
            self._lose(g, exc)
            return
        try:
            fault = self._files_after_commit()
            if fault is not None:
                g.faults[g.begun] = fault
        except Exception as exc:
            log.exception("checking the store's files after a group's commit")
            g.faults[g.begun] = _unsaved(exc)
        finally:
            self._close_group(g)

    def _close_group(self, g: Group) -> None:
        g.open = False
        self._ended()
        if _token_writes != g.tokens:
            self.token_epoch += 1  # committed or not, what was remembered meanwhile may be wrong
        self._wlock.release()

    def holding(self) -> bool:
        """This thread's group has its transaction open (it holds the writer lock meanwhile)."""
        g = self._group
        return g is not None and g.open and threading.get_ident() == self._group_thread

    def _rescue(self, change: Change) -> Rescued:
        """:func:`~fleet.store.files.rescue` with no checkpoint of the watcher's running meanwhile:
        SQLite refuses a second checkpoint at once, and the rescue then saved a copy and refused the
        commit that found the change, where it could have checkpointed into the file itself."""
        assert self._files is not None
        with self._checkpoint_lock:
            return rescue(self._w, self._files, change)

    def checkpoint(self) -> None:
        """Copy the WAL's committed pages into the database file (``wal_checkpoint(PASSIVE)``) on a
        connection of its own, beside the writer, whose commits then never run a checkpoint
        themselves (until :data:`CHECKPOINT_BACKSTOP`). The watcher thread's call, every
        :data:`CHECKPOINT_COMMITS` commits; SQLite releases the GIL meanwhile. A checkpoint that
        fails (a full disk) is tried again after the next ones."""
        with self._checkpoint_lock:
            conn = self._checkpointer
            if conn is None or self._files_fault is not None:
                return
            self._checkpointed = self.generation
            try:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except sqlite3.Error as exc:
                log.warning("checkpointing the store's WAL into %s failed: %s", self.path, exc)

    def check_files(self) -> bool:
        """Check the database and WAL files now (the watcher's tick; each write checks them itself):
        False once they were found changed, what the writer had saved (:mod:`fleet.store.files`)."""
        with self._wlock:
            if self._closed or self._files_fault is not None or self._files is None:
                return self._files_fault is None
            change = self._files.changed()
            if change is not None:
                self._files_change = change
                self._files_fault = self._rescue(change)
            return change is None

    def _refuse_writes(self) -> None:
        """Raise the StorageFault of the files found changed (trying the rescue again first while
        it has saved nothing)."""
        assert self._files_fault is not None and self._files_change is not None and self._files is not None
        if not self._files_fault.kept:
            self._files_fault = self._rescue(self._files_change)
        raise self._files_fault.fault

    def notify(self, payload: str) -> None:
        """Send ``payload`` to every daemon listening on this PostgreSQL store (this one included)."""
        with self._wlock:
            self._w.execute("SELECT pg_notify('fleet', ?)", (payload,))

    def heard_tokens(self) -> None:
        """Another daemon committed a change to the tokens: what this one remembers of them goes."""
        with self._wlock:
            self.token_epoch += 1

    def stamp(self) -> tuple[int, int]:
        """(generation, the generation of the write in progress): taken before a read, what
        :meth:`exact` compares with after it. Inside this thread's open group, a stamp no
        generation has: its reads see writes not committed yet, shared with nobody."""
        if self.holding():
            return -2, -1
        return self.generation, self._writing

    def exact(self, stamp: tuple[int, int]) -> bool:
        """True when no write was in progress at ``stamp`` and none began since: a read made in
        between saw exactly generation ``stamp[0]``."""
        return stamp[0] == stamp[1] == self._writing

    @contextmanager
    def snapshot(self) -> Iterator[Conn]:
        """This thread's reader inside one read transaction: every query sees the same committed state
        (a visibility check and the read it guards cannot straddle a commit). Re-entrant."""
        conn = self.reader()
        if conn.in_transaction:
            yield conn
            return
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    def close(self) -> None:
        """Wait for the write in progress (if any) to commit, then close every connection."""
        with self._checkpoint_lock:
            if self._checkpointer is not None:
                self._checkpointer.close()
                self._checkpointer = None
        self._wake.set()  # the watcher ends now, not at its next tick
        with self._wlock:
            self._w.close()
            with self._free:
                self._closed = True
                for c in self._readers:
                    c.close()
                self._readers.clear()
                self._idle.clear()
                self._extra.clear()
                self._free.notify_all()
