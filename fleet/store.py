"""The store: fleet's truth, in one SQLite file. Only this module writes SQL.

The data model (DESIGN §1), in prose:

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
- A **blip** is one message: ``message``, ``system`` or ``surface``. Blips are never edited. A
  **replace** appends a new blip with ``replaces`` pointing at the old one (so it is delivered like
  any other) and marks the old one ``superseded_by``; reads show the latest version and the history
  stays readable. A **surface** posts a conclusion into the parent wavelet with a reference to the
  source wavelet (and blip).
- **Tokens** let one participant act in one wave. Only their SHA-256 is stored.

Every mutation is one event appended to the append-only ``events`` table in the same transaction
that updates the materialised tables, and the materialised tables are changed *only* by applying
events (:func:`_apply`). So :func:`replay` rebuilding a fresh database from the log alone yields the
same state, row for row.

Ids are minted by one :class:`fleet.ids.IdMinter` inside the write lock, so they are strictly
increasing in commit order and "blips with id > cursor" is a correct delivery rule.

Concurrency: one writer connection behind a lock (only the daemon writes), one read connection per
thread (WAL lets readers proceed while the writer commits).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleet import errors
from fleet.ids import IdMinter, is_id_like
from fleet.models import (
    DEFAULT_MAX_BLIP_BYTES,
    NAME_RE,
    OPERATOR,
    PARTICIPANT_RE,
    ROOT_WAVELET,
    Activity,
    Blip,
    BlipKind,
    Context,
    Feed,
    FeedWavelet,
    Member,
    MintedToken,
    NewSession,
    ParticipantKind,
    SessionRecord,
    TokenInfo,
    Wave,
    WaveActivity,
    Wavelet,
)
from fleet.wire import dump

log = logging.getLogger(__name__)

Row = sqlite3.Row
Event = dict[str, Any]
"""An event payload as stored in the log. Only :func:`_apply` interprets it."""


def connect(path: Path | str, *, readonly: bool = False) -> sqlite3.Connection:
    """Open the database with fleet's settings: WAL, foreign keys, a busy timeout, Row factory."""
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


def now() -> str:
    """The store's timestamp format: ISO 8601 UTC with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------- migrations


def _script(conn: sqlite3.Connection, sql: str) -> None:
    """Run DDL statement by statement (``executescript`` would commit the migration's transaction)."""
    for statement in sql.split(";"):
        if statement.strip():
            conn.execute(statement)


def _m0001_initial(conn: sqlite3.Connection) -> None:
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


def _m0002_sessions(conn: sqlite3.Connection) -> None:
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


def _m0003_blip_actor(conn: sqlite3.Connection) -> None:
    """Who caused a ``system`` blip (a fork, join or leave), so their own provenance does not wake them."""
    conn.execute("ALTER TABLE blips ADD COLUMN actor TEXT")


MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("0001_initial", _m0001_initial),
    ("0002_sessions", _m0002_sessions),
    ("0003_blip_actor", _m0003_blip_actor),
]
"""Named, forward-only. Append new ones; never edit or reorder a shipped one."""

MATERIALISED = ("waves", "participants", "wavelets", "members", "blips", "tokens", "sessions")


def migrate(conn: sqlite3.Connection) -> list[str]:
    """Apply every migration not yet recorded, each in its own transaction with its record."""
    conn.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    done = {r[0] for r in conn.execute("SELECT name FROM migrations")}
    applied = []
    for name, fn in MIGRATIONS:
        if name in done:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            fn(conn)
            conn.execute("INSERT INTO migrations(name, applied_at) VALUES (?, ?)", (name, now()))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        applied.append(name)
        log.info("applied migration %s", name)
    return applied


# ---------------------------------------------------------------- events -> tables


def _insert_blip(conn: sqlite3.Connection, b: Event) -> None:
    conn.execute(
        "INSERT INTO blips(id, wavelet_id, wave_id, author, kind, text, replaces,"
        " source_wavelet_id, source_blip_id, created_at, actor) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        (
            b["id"],
            b["wavelet_id"],
            b["wave_id"],
            b["author"],
            b["kind"],
            b["text"],
            b.get("replaces"),
            b.get("source_wavelet_id"),
            b.get("source_blip_id"),
            b["created_at"],
            b.get("actor"),
        ),
    )


def _ensure_participant(conn: sqlite3.Connection, wave_id: str, name: str, kind: str) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO participants(wave_id, name, kind) VALUES (?,?,?)", (wave_id, name, kind)
    )


def _add_member(conn: sqlite3.Connection, wave_id: str, wavelet_id: str, m: Event, at: str) -> None:
    _ensure_participant(conn, wave_id, m["name"], m["kind"])
    conn.execute(
        "INSERT INTO members(wavelet_id, name, kind, joined_at, since) VALUES (?,?,?,?,?)",
        (wavelet_id, m["name"], m["kind"], at, m["since"]),
    )


def _apply(conn: sqlite3.Connection, etype: str, e: Event) -> None:
    """Apply one event to the materialised tables. The only code that changes them."""
    if etype == "wave.created":
        conn.execute(
            "INSERT INTO waves(id, name, root_id, created_at) VALUES (?,?,?,?)",
            (e["wave_id"], e["name"], e["root_id"], e["created_at"]),
        )
        conn.execute(
            "INSERT INTO wavelets(id, wave_id, parent_id, fork_blip_id, name, private, created_by,"
            " created_at) VALUES (?,?,NULL,NULL,?,0,?,?)",
            (e["root_id"], e["wave_id"], ROOT_WAVELET, e["created_by"], e["created_at"]),
        )
        _ensure_participant(conn, e["wave_id"], OPERATOR, "human")
        for m in e["members"]:
            _add_member(conn, e["wave_id"], e["root_id"], m, e["created_at"])
        for b in e["blips"]:
            _insert_blip(conn, b)
    elif etype == "wavelet.forked":
        conn.execute(
            "INSERT INTO wavelets(id, wave_id, parent_id, fork_blip_id, name, private, created_by,"
            " created_at) VALUES (?,?,?,?,?,?,?,?)",
            (
                e["wavelet_id"],
                e["wave_id"],
                e["parent_id"],
                e["fork_blip_id"],
                e["name"],
                int(e["private"]),
                e["created_by"],
                e["created_at"],
            ),
        )
        for m in e["members"]:
            _add_member(conn, e["wave_id"], e["wavelet_id"], m, e["created_at"])
        for b in e["blips"]:
            _insert_blip(conn, b)
    elif etype == "roster.invited":
        _add_member(conn, e["wave_id"], e["wavelet_id"], e["member"], e["at"])
        _insert_blip(conn, e["blip"])
    elif etype == "roster.left":
        conn.execute("DELETE FROM members WHERE wavelet_id = ? AND name = ?", (e["wavelet_id"], e["name"]))
        _insert_blip(conn, e["blip"])
    elif etype in ("blip.posted", "blip.surfaced"):
        _insert_blip(conn, e["blip"])
    elif etype == "blip.replaced":
        _insert_blip(conn, e["blip"])
        conn.execute(
            "UPDATE blips SET superseded_by = ? WHERE id = ?", (e["blip"]["id"], e["blip"]["replaces"])
        )
    elif etype == "token.minted":
        conn.execute(
            "INSERT INTO tokens(id, wave_id, participant, hash, created_at) VALUES (?,?,?,?,?)",
            (e["token_id"], e["wave_id"], e["participant"], e["hash"], e["created_at"]),
        )
    elif etype == "token.revoked":
        conn.execute(
            "UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
            (e["revoked_at"], e["token_id"]),
        )
    elif etype == "session.recorded":
        conn.execute(
            "INSERT OR REPLACE INTO sessions(wave_id, participant, session_id, wavelet_id, layout, agent,"
            " transport, cwd, host, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                e["wave_id"],
                e["participant"],
                e["session_id"],
                e["wavelet_id"],
                e["layout"],
                e["agent"],
                e["transport"],
                e["cwd"],
                e["host"],
                e["updated_at"],
            ),
        )
    else:  # pragma: no cover - a log written by a newer fleet
        raise errors.FleetError(f"unknown event type {etype!r} in the log: upgrade fleet")


# ---------------------------------------------------------------- principals


@dataclass(frozen=True)
class Principal:
    """Who is asking: the operator, or one participant of one wave (from a participant token)."""

    name: str
    wave_id: str | None = None

    @property
    def is_operator(self) -> bool:
        return self.wave_id is None

    @classmethod
    def operator(cls) -> Principal:
        return cls(OPERATOR, None)


OPERATOR_PRINCIPAL = Principal.operator()


def _kind_of(name: str) -> ParticipantKind:
    return "human" if name == OPERATOR else "agent"


RESERVED = frozenset({"system"})
"""Author of provenance blips; no participant may take the name."""


def _check_participant_name(name: str) -> str:
    if not isinstance(name, str) or not PARTICIPANT_RE.fullmatch(name) or name in RESERVED:
        raise errors.UsageError(
            f"invalid participant name {name!r}: use 1-32 characters of a-z, 0-9, '_' or '-',"
            " starting with a letter ('system' is reserved)"
        )
    return name


def _check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):  # fullmatch: `$` admits a final \n
        raise errors.UsageError(
            f"invalid {what} name {name!r}: use 1-64 characters of a-z, 0-9, '_', '.' or '-',"
            " starting with a letter or digit"
        )
    return name


# ---------------------------------------------------------------- the store


class Store:
    """The SQLite store. Thread-safe; one instance per database file per process.

    Every public method takes the :class:`Principal` it acts for and enforces visibility and
    permissions itself, so no caller can forget to.
    """

    def __init__(self, path: Path | str, *, max_blip_bytes: int = DEFAULT_MAX_BLIP_BYTES) -> None:
        self.path = Path(path)
        self.max_blip_bytes = max_blip_bytes
        self._wlock = threading.Lock()
        self._w = connect(self.path)
        migrate(self._w)
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self.ids = IdMinter()
        self.ids.observe(self._largest_id())

    # -- connections

    def _r(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path, readonly=True)
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def close(self) -> None:
        """Wait for the write in progress (if any) to commit, then close every connection."""
        with self._wlock:
            self._w.close()
            with self._readers_lock:
                for c in self._readers:
                    c.close()
                self._readers.clear()

    def _largest_id(self) -> str | None:
        row = self._w.execute(
            "SELECT max(m) FROM (SELECT max(id) AS m FROM blips UNION ALL SELECT max(id) FROM wavelets"
            " UNION ALL SELECT max(id) FROM waves UNION ALL SELECT max(id) FROM tokens)"
        ).fetchone()
        return row[0] if row else None

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: BEGIN IMMEDIATE .. COMMIT under the writer lock."""
        with self._wlock:
            self._w.execute("BEGIN IMMEDIATE")
            try:
                yield self._w
                self._w.execute("COMMIT")
            except BaseException:
                self._w.execute("ROLLBACK")
                raise

    def _commit_event(self, etype: str, payload: Event) -> None:
        with self._write() as conn:
            self._record(conn, etype, payload)

    @staticmethod
    def _record(conn: sqlite3.Connection, etype: str, payload: Event) -> None:
        conn.execute(
            "INSERT INTO events(type, payload, created_at) VALUES (?,?,?)",
            (etype, json.dumps(payload, separators=(",", ":")), now()),
        )
        _apply(conn, etype, payload)

    # -- validation helpers

    def _check_text(self, text: str) -> str:
        if not isinstance(text, str):
            raise errors.UsageError("blip text must be a string")
        if not text.strip():
            raise errors.UsageError("blip text is empty: say something")
        size = len(text.encode("utf-8", errors="surrogatepass"))
        if size > self.max_blip_bytes:
            raise errors.PayloadTooLarge(
                f"blip is {size} bytes, over the limit of {self.max_blip_bytes}: split it, or put the"
                " bulk in a file and post its path"
            )
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise errors.UsageError("blip text is not valid UTF-8 (lone surrogate)") from exc
        return text

    def _author(self, who: Principal, as_: str | None) -> str:
        if as_ is None or as_ == who.name:
            return who.name
        if not who.is_operator:
            raise errors.Forbidden(
                f"participant {who.name!r} cannot act as {as_!r}: a participant token writes only as itself"
            )
        return _check_participant_name(as_)

    # -- lookups (no visibility)

    def _wave_row(self, ref: str) -> Row:
        r = self._r()
        row: Row | None = r.execute("SELECT * FROM waves WHERE name = ? OR id = ?", (ref, ref)).fetchone()
        if row is None and is_id_like(ref):
            rows = r.execute(
                "SELECT * FROM waves WHERE id LIKE ? ESCAPE '\\' LIMIT 2", (_like_prefix(ref),)
            ).fetchall()
            if len(rows) == 1:
                row = rows[0]
        if row is None:
            raise errors.NotFound(f"no wave {ref!r}: `fleet wave list` shows the waves there are")
        return row

    def _wavelet_row(self, wavelet_id: str) -> Row | None:
        row: Row | None = self._r().execute("SELECT * FROM wavelets WHERE id = ?", (wavelet_id,)).fetchone()
        return row

    def _is_member(self, wavelet_id: str, name: str) -> bool:
        return (
            self._r()
            .execute("SELECT 1 FROM members WHERE wavelet_id = ? AND name = ?", (wavelet_id, name))
            .fetchone()
            is not None
        )

    def _can_see(self, who: Principal, wl: Row) -> bool:
        if who.is_operator:
            return True
        if wl["wave_id"] != who.wave_id:
            return False
        return not wl["private"] or self._is_member(wl["id"], who.name)

    def _visible_wave(self, who: Principal, ref: str) -> Row:
        row = self._wave_row(ref)
        if not who.is_operator and row["id"] != who.wave_id:
            raise errors.NotFound(f"no wave {ref!r}: `fleet wave list` shows the waves there are")
        return row

    def _visible_wavelet(self, who: Principal, ref: str, *, wave: str | None = None) -> Row:
        """Resolve ``ref`` (WAVE/NAME, NAME within ``wave``, id, or unique id prefix) for ``who``."""
        r = self._r()
        missing = errors.NotFound(
            f"no wavelet {ref!r}: address it as WAVE/WAVELET, by id, or set FLEET_WAVE"
            " (`fleet tree` lists them)"
        )
        if not isinstance(ref, str) or not ref:
            raise missing
        row: Row | None = None
        if "/" in ref:
            wave_ref, _, name = ref.partition("/")
            try:
                w = self._visible_wave(who, wave_ref)
            except errors.NotFound:
                raise missing from None
            row = r.execute(
                "SELECT * FROM wavelets WHERE wave_id = ? AND name = ?", (w["id"], name)
            ).fetchone()
        else:
            hint = wave if wave else None
            if hint is None and not who.is_operator:
                hint = who.wave_id
            if hint is not None:
                try:
                    w = self._visible_wave(who, hint)
                    row = r.execute(
                        "SELECT * FROM wavelets WHERE wave_id = ? AND name = ?", (w["id"], ref)
                    ).fetchone()
                except errors.NotFound:
                    row = None
            if row is None:
                row = r.execute("SELECT * FROM wavelets WHERE id = ?", (ref,)).fetchone()
            if row is None and is_id_like(ref):
                candidates = [
                    c
                    for c in r.execute(
                        "SELECT * FROM wavelets WHERE id LIKE ? ESCAPE '\\' LIMIT 50", (_like_prefix(ref),)
                    )
                    if self._can_see(who, c)
                ]
                if len(candidates) > 1:
                    raise errors.UsageError(
                        f"id prefix {ref!r} matches {len(candidates)} wavelets: give more characters"
                    )
                row = candidates[0] if candidates else None
        if row is None or not self._can_see(who, row):
            raise missing
        return row

    def _visible_blip(self, who: Principal, ref: str) -> Row:
        r = self._r()
        missing = errors.NotFound(f"no blip {ref!r}: `fleet read WAVELET --json` shows blip ids")
        if not isinstance(ref, str) or not ref:
            raise missing
        row: Row | None = r.execute("SELECT * FROM blips WHERE id = ?", (ref,)).fetchone()
        if row is None and is_id_like(ref):
            rows = r.execute(
                "SELECT * FROM blips WHERE id LIKE ? ESCAPE '\\' LIMIT 50", (_like_prefix(ref),)
            ).fetchall()
            rows = [b for b in rows if self._can_see(who, self._wavelet_row(b["wavelet_id"]) or b)]
            if len(rows) > 1:
                raise errors.UsageError(f"id prefix {ref!r} matches {len(rows)} blips: give more characters")
            row = rows[0] if rows else None
        if row is None:
            raise missing
        wl = self._wavelet_row(row["wavelet_id"])
        if wl is None or not self._can_see(who, wl):
            raise missing
        return row

    def _require_member(self, who: Principal, wl: Row, doing: str) -> None:
        if who.is_operator:
            return
        if not self._is_member(wl["id"], who.name):
            raise errors.Forbidden(
                f"{who.name!r} is not on the roster of {wl['name']!r} and cannot {doing} there:"
                " ask a member to invite you"
            )

    # -- model builders

    def _members(self, wavelet_id: str) -> list[Member]:
        return [
            Member(name=m["name"], kind=m["kind"], joined_at=m["joined_at"], since=m["since"])
            for m in self._r().execute(
                "SELECT * FROM members WHERE wavelet_id = ? ORDER BY joined_at, name", (wavelet_id,)
            )
        ]

    def _wavelet_model(self, wl: Row, wave_name: str | None = None) -> Wavelet:
        if wave_name is None:
            wave_name = (
                self._r().execute("SELECT name FROM waves WHERE id = ?", (wl["wave_id"],)).fetchone()[0]
            )
        return Wavelet(
            id=wl["id"],
            wave_id=wl["wave_id"],
            wave=wave_name,
            name=wl["name"],
            parent_id=wl["parent_id"],
            fork_blip_id=wl["fork_blip_id"],
            private=bool(wl["private"]),
            created_by=wl["created_by"],
            created_at=wl["created_at"],
            roster=self._members(wl["id"]),
        )

    @staticmethod
    def _blip_model(b: Row) -> Blip:
        return Blip(
            id=b["id"],
            wavelet_id=b["wavelet_id"],
            wave_id=b["wave_id"],
            author=b["author"],
            kind=b["kind"],
            text=b["text"],
            replaces=b["replaces"],
            source_wavelet_id=b["source_wavelet_id"],
            source_blip_id=b["source_blip_id"],
            created_at=b["created_at"],
            superseded_by=b["superseded_by"],
            actor=b["actor"],
        )

    def _new_blip(
        self,
        wl: Row | dict[str, Any],
        author: str,
        kind: BlipKind,
        text: str,
        at: str,
        **extra: str | None,
    ) -> Event:
        return {
            "id": self.ids.mint(),
            "wavelet_id": wl["id"],
            "wave_id": wl["wave_id"],
            "author": author,
            "kind": kind,
            "text": text,
            "created_at": at,
            **{k: v for k, v in extra.items() if v is not None},
        }

    def _last_blip_id(self, wavelet_id: str) -> str:
        row = self._w.execute("SELECT max(id) FROM blips WHERE wavelet_id = ?", (wavelet_id,)).fetchone()
        return row[0] or ""

    # ---------------------------------------------------------------- authentication

    def authenticate(self, token: str) -> Principal | None:
        """The participant a token stands for, or None if unknown or revoked (operator: the daemon)."""
        row = (
            self._r()
            .execute(
                "SELECT wave_id, participant FROM tokens WHERE hash = ? AND revoked_at IS NULL",
                (hash_token(token),),
            )
            .fetchone()
        )
        return Principal(row["participant"], row["wave_id"]) if row else None

    def wave_name(self, wave_id: str) -> str:
        row = self._r().execute("SELECT name FROM waves WHERE id = ?", (wave_id,)).fetchone()
        return str(row[0]) if row else ""

    # ---------------------------------------------------------------- waves

    def create_wave(self, who: Principal, name: str, with_: Sequence[str] = ()) -> Wave:
        if not who.is_operator:
            raise errors.Forbidden("only the operator creates waves")
        _check_name(name, "wave")
        members = list(dict.fromkeys(_check_participant_name(n) for n in with_))
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM waves WHERE name = ?", (name,)).fetchone():
                raise errors.Conflict(f"wave {name!r} already exists: pick another name")
            at = now()
            wave_id, root_id = self.ids.mint(), self.ids.mint()
            text = f"{who.name} created wave {name}" + (f" with {', '.join(members)}" if members else "")
            blip = {
                "id": self.ids.mint(),
                "wavelet_id": root_id,
                "wave_id": wave_id,
                "author": "system",
                "kind": "system",
                "text": text,
                "created_at": at,
                "actor": who.name,
            }
            self._record(
                conn,
                "wave.created",
                {
                    "wave_id": wave_id,
                    "root_id": root_id,
                    "name": name,
                    "created_by": who.name,
                    "created_at": at,
                    "members": [{"name": m, "kind": _kind_of(m), "since": ""} for m in members],
                    "blips": [blip],
                },
            )
        return self.get_wave(who, wave_id)

    def list_waves(self, who: Principal) -> list[Wave]:
        rows = self._r().execute("SELECT * FROM waves ORDER BY id").fetchall()
        return [
            Wave(id=w["id"], name=w["name"], created_at=w["created_at"], root_id=w["root_id"])
            for w in rows
            if who.is_operator or w["id"] == who.wave_id
        ]

    def get_wave(self, who: Principal, ref: str) -> Wave:
        w = self._visible_wave(who, ref)
        wavelets = [
            self._wavelet_model(wl, w["name"])
            for wl in self._r().execute("SELECT * FROM wavelets WHERE wave_id = ? ORDER BY id", (w["id"],))
            if self._can_see(who, wl)
        ]
        return Wave(
            id=w["id"], name=w["name"], created_at=w["created_at"], root_id=w["root_id"], wavelets=wavelets
        )

    def participants(self, who: Principal, wave: str) -> list[tuple[str, ParticipantKind]]:
        """Everyone who was ever on a roster of ``wave`` (plus the operator), by name.

        A participant token sees only names it could learn anyway: the operator and those on the
        roster of, or with a blip in, a wavelet it can see (a private wavelet's members stay hidden).
        """
        w = self._visible_wave(who, wave)
        rows = (
            self._r()
            .execute("SELECT name, kind FROM participants WHERE wave_id = ? ORDER BY name", (w["id"],))
            .fetchall()
        )
        if who.is_operator:
            return [(p["name"], p["kind"]) for p in rows]
        r = self._r()
        visible = [
            wl["id"]
            for wl in r.execute("SELECT * FROM wavelets WHERE wave_id = ?", (w["id"],))
            if self._can_see(who, wl)
        ]
        known = {OPERATOR}
        for wl_id in visible:
            known.update(m[0] for m in r.execute("SELECT name FROM members WHERE wavelet_id = ?", (wl_id,)))
            known.update(
                b[0] for b in r.execute("SELECT DISTINCT author FROM blips WHERE wavelet_id = ?", (wl_id,))
            )
        return [(p["name"], p["kind"]) for p in rows if p["name"] in known]

    # ---------------------------------------------------------------- wavelets

    def resolve(self, who: Principal, ref: str, wave: str | None = None) -> Wavelet:
        return self._wavelet_model(self._visible_wavelet(who, ref, wave=wave))

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
        itself). A public fork announces itself in the parent; a private one only in itself.
        """
        author = self._author(who, as_)
        parent = self._visible_wavelet(who, parent_ref)
        _check_name(name, "wavelet")
        names = [_check_participant_name(n) for n in with_]
        if author != OPERATOR:
            names.insert(0, author)
        members = list(dict.fromkeys(names))
        with self._write() as conn:
            if conn.execute(
                "SELECT 1 FROM wavelets WHERE wave_id = ? AND name = ?", (parent["wave_id"], name)
            ).fetchone():
                raise errors.Conflict(
                    f"a wavelet named {name!r} already exists in this wave: pick another name"
                )
            at = now()
            fork_point = self._last_blip_id(parent["id"]) or None
            wavelet_id = self.ids.mint()
            child = {"id": wavelet_id, "wave_id": parent["wave_id"]}
            who_txt = ", ".join(members) if members else "nobody yet"
            blips = []
            if not private:
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
            blips.append(
                self._new_blip(
                    child,
                    "system",
                    "system",
                    f"{author} forked {'private ' if private else ''}{name} from {parent['name']}"
                    f" with {who_txt}",
                    at,
                    source_wavelet_id=parent["id"],
                    source_blip_id=fork_point,
                    actor=author,
                )
            )
            self._record(
                conn,
                "wavelet.forked",
                {
                    "wavelet_id": wavelet_id,
                    "wave_id": parent["wave_id"],
                    "parent_id": parent["id"],
                    "fork_blip_id": fork_point,
                    "name": name,
                    "private": bool(private),
                    "created_by": author,
                    "created_at": at,
                    "members": [{"name": m, "kind": _kind_of(m), "since": ""} for m in members],
                    "blips": blips,
                },
            )
        return self.resolve(OPERATOR_PRINCIPAL, wavelet_id)

    def invite(self, who: Principal, ref: str, name: str, *, as_: str | None = None) -> Wavelet:
        """Add ``name`` to the roster (a no-op if already on it). Members and the operator may invite."""
        actor = self._author(who, as_)
        wl = self._visible_wavelet(who, ref)
        _check_participant_name(name)
        self._require_member(who, wl, "invite")
        with self._write() as conn:
            if conn.execute(
                "SELECT 1 FROM members WHERE wavelet_id = ? AND name = ?", (wl["id"], name)
            ).fetchone():
                return self.resolve(OPERATOR_PRINCIPAL, wl["id"])
            at = now()
            since = self._last_blip_id(wl["id"])
            self._record(
                conn,
                "roster.invited",
                {
                    "wavelet_id": wl["id"],
                    "wave_id": wl["wave_id"],
                    "at": at,
                    "member": {"name": name, "kind": _kind_of(name), "since": since},
                    "blip": self._new_blip(
                        wl, "system", "system", f"{actor} invited {name}", at, actor=actor
                    ),
                },
            )
        return self.resolve(OPERATOR_PRINCIPAL, wl["id"])

    def leave(self, who: Principal, ref: str, name: str, *, as_: str | None = None) -> Wavelet:
        """Take ``name`` off the roster: deliveries to it stop. A participant may only remove itself."""
        actor = self._author(who, as_)
        wl = self._visible_wavelet(who, ref)
        _check_participant_name(name)
        if not who.is_operator and name != who.name:
            raise errors.Forbidden(f"{who.name!r} may only take itself off a roster, not {name!r}")
        with self._write() as conn:
            if not conn.execute(
                "SELECT 1 FROM members WHERE wavelet_id = ? AND name = ?", (wl["id"], name)
            ).fetchone():
                raise errors.NotFound(f"{name!r} is not on the roster of {wl['name']!r}")
            at = now()
            text = f"{name} left" if actor == name else f"{actor} removed {name}"
            self._record(
                conn,
                "roster.left",
                {
                    "wavelet_id": wl["id"],
                    "wave_id": wl["wave_id"],
                    "name": name,
                    "at": at,
                    "blip": self._new_blip(wl, "system", "system", text, at, actor=actor),
                },
            )
        return self.resolve(OPERATOR_PRINCIPAL, wl["id"])

    # ---------------------------------------------------------------- blips

    def post(self, who: Principal, ref: str, text: str, *, as_: str | None = None) -> Blip:
        author = self._author(who, as_)
        wl = self._visible_wavelet(who, ref)
        self._check_text(text)
        self._require_member(who, wl, "post")
        with self._write() as conn:
            blip = self._new_blip(wl, author, "message", text, now())
            self._record(conn, "blip.posted", {"blip": blip})
        return Blip(**blip)

    def post_system(self, who: Principal, ref: str, text: str) -> Blip:
        """Post a ``system`` blip (author ``system``) into ``ref``: operator only.

        How the operator's own tools (``fleet supervise``, ``fleet kill``) put what they did into the
        transcript. Participants can never write one, so a system blip is always provenance.
        """
        if not who.is_operator:
            raise errors.Forbidden("only the operator posts system blips")
        wl = self._visible_wavelet(who, ref)
        self._check_text(text)
        with self._write() as conn:
            blip = self._new_blip(wl, "system", "system", text, now())
            self._record(conn, "blip.posted", {"blip": blip})
        return Blip(**blip)

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
        author = self._author(who, as_)
        wl = self._visible_wavelet(who, ref)
        self._check_text(text)
        self._require_member(who, wl, "surface")
        if wl["parent_id"] is None:
            raise errors.UsageError(
                f"{wl['name']!r} is the wave's root and has no parent to surface into: post instead"
            )
        if source_blip_id is not None:
            src = self._visible_blip(who, source_blip_id)
            if src["wavelet_id"] != wl["id"]:
                raise errors.UsageError(f"blip {source_blip_id!r} is not in {wl['name']!r}")
            source_blip_id = src["id"]
        parent = self._wavelet_row(wl["parent_id"])
        assert parent is not None
        with self._write() as conn:
            blip = self._new_blip(
                parent,
                author,
                "surface",
                text,
                now(),
                source_wavelet_id=wl["id"],
                source_blip_id=source_blip_id,
            )
            self._record(conn, "blip.surfaced", {"blip": blip})
        return Blip(**blip)

    def replace(self, who: Principal, ref: str, text: str, *, as_: str | None = None) -> Blip:
        """Append a new version of blip ``ref``. Only its author or the operator may; history stays."""
        author = self._author(who, as_)
        old = self._visible_blip(who, ref)
        self._check_text(text)
        if old["kind"] == "system":
            raise errors.Forbidden("system blips are provenance and cannot be replaced")
        if not who.is_operator and old["author"] != who.name:
            raise errors.Forbidden(
                f"only {old['author']!r} (its author) or the operator may replace blip {old['id']}"
            )
        wl = self._wavelet_row(old["wavelet_id"])
        assert wl is not None
        with self._write() as conn:
            current = conn.execute("SELECT superseded_by FROM blips WHERE id = ?", (old["id"],)).fetchone()
            if current["superseded_by"]:
                raise errors.Conflict(
                    f"blip {old['id']} was already replaced by {current['superseded_by']}:"
                    " replace the latest version"
                )
            blip = self._new_blip(
                wl,
                author,
                old["kind"],
                text,
                now(),
                replaces=old["id"],
                source_wavelet_id=old["source_wavelet_id"],
                source_blip_id=old["source_blip_id"],
            )
            self._record(conn, "blip.replaced", {"blip": blip})
        return Blip(**blip)

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
        wl = self._visible_wavelet(who, ref)
        return self.read_resolved(wl["id"], after=after, limit=limit, history=history)

    def read_resolved(
        self, wavelet_id: str, *, after: str | None = None, limit: int = 500, history: bool = False
    ) -> list[Blip]:
        """:meth:`read` for a wavelet id the caller already resolved (the long-poll's inner loop)."""
        sql = "SELECT * FROM blips WHERE wavelet_id = ? AND id > ?"
        if not history:
            sql += " AND superseded_by IS NULL"
        sql += " ORDER BY id LIMIT ?"
        rows = self._r().execute(sql, (wavelet_id, after or "", max(1, min(limit, 5000)))).fetchall()
        return [self._blip_model(b) for b in rows]

    def read_tail(self, wavelet_id: str, *, before: str | None = None, limit: int = 200) -> list[Blip]:
        """The newest ``limit`` current blips of a resolved wavelet with id < ``before``, oldest first.

        Replaced versions are left out (as in :meth:`read`). ``before=None`` means the wavelet's end,
        so paging backwards is: pass the first id of the previous page. Uses the wavelet index, so a
        page costs the same at the end of a 10,000-blip wavelet as at its start.
        """
        sql = "SELECT * FROM blips WHERE wavelet_id = ? AND superseded_by IS NULL"
        args: tuple[str | int, ...] = (wavelet_id,)
        if before:
            sql, args = sql + " AND id < ?", (*args, before)
        rows = self._r().execute(sql + " ORDER BY id DESC LIMIT ?", (*args, max(1, min(limit, 5000))))
        return [self._blip_model(b) for b in reversed(rows.fetchall())]

    def read_wave_after(self, wave_id: str, after: str, *, limit: int = 500) -> list[Blip]:
        """Every blip of a wave with id > ``after``, replaced versions included, oldest first.

        Nothing is filtered by visibility: callers act for the operator. Because ids are minted in
        commit order, "id > cursor" across the whole wave misses nothing and repeats nothing.
        """
        rows = self._r().execute(
            "SELECT * FROM blips WHERE id > ? AND wave_id = ? ORDER BY id LIMIT ?",
            (after, wave_id, max(1, min(limit, 5000))),
        )
        return [self._blip_model(b) for b in rows.fetchall()]

    def wave_head(self, wave_id: str) -> str:
        """The greatest blip id committed in the wave ('' if none): a cursor that starts at "now"."""
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

    def activity(self, who: Principal, wave: str) -> WaveActivity:
        """Per (wavelet, author): blips written (system blips aside) and the latest; plus the head.

        Operator only (it spans private wavelets). Reads through the wavelet index, one group per
        wavelet and author; the bare ``created_at`` comes from the row holding ``max(id)`` (SQLite).
        """
        if not who.is_operator:
            raise errors.Forbidden("only the operator reads a wave's activity")
        w = self._visible_wave(who, wave)
        rows = self._r().execute(
            "SELECT wavelet_id, author, count(*) AS n, max(id) AS last_id, created_at FROM blips"
            " WHERE wavelet_id IN (SELECT id FROM wavelets WHERE wave_id = ?) AND kind != 'system'"
            " GROUP BY wavelet_id, author ORDER BY wavelet_id, author",
            (w["id"],),
        )
        return WaveActivity(
            wave_id=w["id"],
            head=self.wave_head(w["id"]),
            activity=[
                Activity(
                    wavelet_id=r["wavelet_id"],
                    participant=r["author"],
                    blips=r["n"],
                    last_blip_id=r["last_id"],
                    last_blip_at=r["created_at"],
                )
                for r in rows
            ],
        )

    def get_blip(self, who: Principal, ref: str) -> Blip:
        return self._blip_model(self._visible_blip(who, ref))

    def history(self, who: Principal, ref: str) -> list[Blip]:
        """Every version of the blip ``ref`` belongs to, oldest first."""
        row = self._visible_blip(who, ref)
        r = self._r()
        while row["replaces"]:
            row = r.execute("SELECT * FROM blips WHERE id = ?", (row["replaces"],)).fetchone()
        chain = [row]
        while chain[-1]["superseded_by"]:
            chain.append(
                r.execute("SELECT * FROM blips WHERE id = ?", (chain[-1]["superseded_by"],)).fetchone()
            )
        return [self._blip_model(b) for b in chain]

    def context(self, who: Principal, ref: str) -> Context:
        """What ``who`` sees reading ``ref``: each ancestor's blips up to its fork point, then ``ref``'s.

        Assembled per call. Ancestors the caller cannot see contribute nothing. Within each part,
        replaced versions are hidden when their replacement falls inside the same part.
        """
        wl = self._visible_wavelet(who, ref)
        path = [wl]
        while path[0]["parent_id"]:
            parent = self._wavelet_row(path[0]["parent_id"])
            assert parent is not None
            path.insert(0, parent)
        r = self._r()
        blips: list[Blip] = []
        for i, node in enumerate(path):
            if i < len(path) - 1:
                upto = path[i + 1]["fork_blip_id"]
                if not upto or not self._can_see(who, node):
                    continue
                rows = r.execute(
                    "SELECT * FROM blips WHERE wavelet_id = ? AND id <= ? AND"
                    " (superseded_by IS NULL OR superseded_by > ?) ORDER BY id",
                    (node["id"], upto, upto),
                ).fetchall()
            else:
                rows = r.execute(
                    "SELECT * FROM blips WHERE wavelet_id = ? AND superseded_by IS NULL ORDER BY id",
                    (node["id"],),
                ).fetchall()
            blips.extend(self._blip_model(b) for b in rows)
        wave_name = self.wave_name(wl["wave_id"])
        return Context(
            wavelet=self._wavelet_model(wl, wave_name),
            path=[self._wavelet_model(n, wave_name) for n in path],
            blips=blips,
        )

    def feed(
        self, who: Principal, wave: str, participant: str, cursors: dict[str, str], *, limit: int = 200
    ) -> Feed:
        """Blips newer than each cursor across every wavelet ``participant`` is on in ``wave``.

        Includes the participant's own blips (echo suppression is the client's, by author, so that
        cursors can step over them). A wavelet left is absent and delivers nothing.
        """
        w = self._visible_wave(who, wave)
        _check_participant_name(participant)
        if not who.is_operator and participant != who.name:
            raise errors.Forbidden(f"{who.name!r} cannot read the feed of {participant!r}")
        r = self._r()
        rows = r.execute(
            "SELECT wl.id, wl.name, wl.private, m.since FROM members m JOIN wavelets wl ON wl.id ="
            " m.wavelet_id WHERE m.name = ? AND wl.wave_id = ? ORDER BY wl.id",
            (participant, w["id"]),
        ).fetchall()
        limit = max(1, min(limit, 5000))
        wavelets: list[FeedWavelet] = []
        blips: list[Blip] = []
        more = False
        for row in rows:
            wavelets.append(
                FeedWavelet(
                    id=row["id"],
                    name=row["name"],
                    wave=w["name"],
                    private=bool(row["private"]),
                    since=row["since"],
                )
            )
            cursor = cursors.get(row["id"])
            if cursor is None or cursor < row["since"]:
                cursor = row["since"]
            got = r.execute(
                "SELECT * FROM blips WHERE wavelet_id = ? AND id > ? ORDER BY id LIMIT ?",
                (row["id"], cursor, limit + 1),
            ).fetchall()
            if len(got) > limit:
                more, got = True, got[:limit]
            blips.extend(self._blip_model(b) for b in got)
        blips.sort(key=lambda b: b.id)
        return Feed(wavelets=wavelets, blips=blips, more=more)

    # ---------------------------------------------------------------- tokens

    def mint_token(self, who: Principal, wave: str, participant: str, secret: str) -> MintedToken:
        """Record a participant token (only its hash). ``secret`` is generated by the caller."""
        if not who.is_operator:
            raise errors.Forbidden("only the operator mints tokens")
        w = self._visible_wave(who, wave)
        _check_participant_name(participant)
        with self._write() as conn:
            token_id, at = self.ids.mint(), now()
            self._record(
                conn,
                "token.minted",
                {
                    "token_id": token_id,
                    "wave_id": w["id"],
                    "participant": participant,
                    "hash": hash_token(secret),
                    "created_at": at,
                },
            )
        return MintedToken(
            id=token_id, wave_id=w["id"], wave=w["name"], participant=participant, created_at=at, token=secret
        )

    def list_tokens(self, who: Principal, wave: str | None = None) -> list[TokenInfo]:
        if not who.is_operator:
            raise errors.Forbidden("only the operator lists tokens")
        sql = "SELECT t.*, w.name AS wave FROM tokens t JOIN waves w ON w.id = t.wave_id"
        args: tuple[str, ...] = ()
        if wave:
            sql, args = sql + " WHERE t.wave_id = ?", (self._visible_wave(who, wave)["id"],)
        return [_token_info(t) for t in self._r().execute(sql + " ORDER BY t.id", args)]

    def revoke_tokens(
        self,
        who: Principal,
        *,
        token_id: str | None = None,
        wave: str | None = None,
        participant: str | None = None,
    ) -> list[TokenInfo]:
        """Revoke one token by id, or every live token of (wave, participant). Returns those revoked."""
        if not who.is_operator:
            raise errors.Forbidden("only the operator revokes tokens")
        r = self._r()
        if token_id:
            rows = r.execute(
                "SELECT t.*, w.name AS wave FROM tokens t JOIN waves w ON w.id = t.wave_id"
                " WHERE t.id = ? OR t.id LIKE ? ESCAPE '\\'",
                (token_id, _like_prefix(token_id)),
            ).fetchall()
            if len(rows) != 1:
                raise errors.NotFound(f"no token {token_id!r}: `fleet token list` shows them")
        elif wave and participant:
            w = self._visible_wave(who, wave)
            rows = r.execute(
                "SELECT t.*, w.name AS wave FROM tokens t JOIN waves w ON w.id = t.wave_id"
                " WHERE t.wave_id = ? AND t.participant = ?",
                (w["id"], participant),
            ).fetchall()
            if not rows:
                raise errors.NotFound(f"no token for {participant!r} in wave {w['name']!r}")
        else:
            raise errors.UsageError("name a token id, or both a wave and a participant")
        live = [t for t in rows if t["revoked_at"] is None]
        if live:
            with self._write() as conn:
                at = now()
                for t in live:
                    self._record(conn, "token.revoked", {"token_id": t["id"], "revoked_at": at})
        ids = {t["id"] for t in live}
        return [t for t in self.list_tokens(who) if t.id in ids]

    # ---------------------------------------------------------------- agent sessions

    def record_session(self, who: Principal, wave: str, rec: NewSession) -> SessionRecord:
        """Remember which agent session ``rec.participant`` runs (operator only): respawn reads it."""
        if not who.is_operator:
            raise errors.Forbidden("only the operator records agent sessions")
        w = self._visible_wave(who, wave)
        _check_participant_name(rec.participant)
        try:
            uuid.UUID(rec.session_id)
        except ValueError:
            raise errors.UsageError(f"session id {rec.session_id!r} is not a UUID") from None
        wl = self._visible_wavelet(who, rec.wavelet_id)
        if wl["wave_id"] != w["id"]:
            raise errors.UsageError(f"wavelet {rec.wavelet_id!r} is not in wave {w['name']!r}")
        payload = dump(rec)
        payload.update(wave_id=w["id"], wavelet_id=wl["id"], updated_at=now())
        self._commit_event("session.recorded", payload)
        return self.sessions(who, wave, rec.participant)[0]

    def sessions(self, who: Principal, wave: str, participant: str | None = None) -> list[SessionRecord]:
        """Recorded sessions of ``wave`` (a participant sees only its own)."""
        w = self._visible_wave(who, wave)
        if not who.is_operator:
            participant = who.name
        sql, args = "SELECT * FROM sessions WHERE wave_id = ?", [w["id"]]
        if participant:
            sql += " AND participant = ?"
            args.append(participant)
        return [
            SessionRecord(**{k: row[k] for k in row.keys() if k != "wave_id"})  # noqa: SIM118 (Row)
            for row in self._r().execute(sql + " ORDER BY participant", args)
        ]

    # ---------------------------------------------------------------- the log

    def events(self) -> Iterator[tuple[str, Event]]:
        for row in self._r().execute("SELECT type, payload FROM events ORDER BY seq"):
            yield row["type"], json.loads(row["payload"])

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every materialised row, table by table, in a stable order (for comparing stores)."""
        return dump_tables(self._r())


def _token_info(t: Row) -> TokenInfo:
    return TokenInfo(
        id=t["id"],
        wave_id=t["wave_id"],
        wave=t["wave"],
        participant=t["participant"],
        created_at=t["created_at"],
        revoked_at=t["revoked_at"],
    )


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def dump_tables(conn: sqlite3.Connection) -> dict[str, list[tuple[Any, ...]]]:
    return {
        table: [tuple(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2")]
        for table in MATERIALISED
    }


def replay(source: Path | str, target: Path | str) -> None:
    """Rebuild the whole state into a new database at ``target`` from ``source``'s event log alone."""
    src = connect(source, readonly=True)
    dst = connect(target)
    try:
        migrate(dst)
        dst.execute("BEGIN IMMEDIATE")
        for row in src.execute("SELECT type, payload, created_at FROM events ORDER BY seq"):
            dst.execute(
                "INSERT INTO events(type, payload, created_at) VALUES (?,?,?)",
                (row["type"], row["payload"], row["created_at"]),
            )
            _apply(dst, row["type"], json.loads(row["payload"]))
        dst.execute("COMMIT")
    finally:
        src.close()
        dst.close()
