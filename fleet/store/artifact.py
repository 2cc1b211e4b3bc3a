"""The store as an artifact you can carry (docs/design.md §2): backup, export, import, replay check.

What a caller may rely on:

- :func:`backup` copies a live database with SQLite's online backup API through a read connection
  of its own, in one step: the copy is one committed state (a WAL reader's snapshot; the daemon
  keeps writing meanwhile), a single self-contained file (journal mode DELETE), mode 0600, checked
  with ``quick_check`` before it is moved into place. It is the same store (same ``store_id``).
- :func:`export_page` pages the event log for ``GET /v1/events`` (full operator only): the rows
  verbatim, of one wave only when one is named. An export file (``fleet export``) is a header line
  (:data:`FORMAT`, the source's ``store_id``, the wave) and one line per log row, the payload as a
  JSON object.
- :func:`import_log` applies an export to a store through :func:`fleet.store.events.apply`, with the
  daemon's instance lock held (no daemon runs beside it), in one transaction: the same ids, the
  same state. A wave the store already holds (by id or name), or any other row that does not fit, is
  a Conflict naming the line, and nothing is changed.
- :func:`replay_check` rebuilds the materialised tables from the log (one read snapshot of the live
  store) in a scratch in-memory database and lists every row that differs.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleet import errors
from fleet.models import EventPage, LogRow
from fleet.paths import ensure_private_dir
from fleet.store.events import (
    BlipPosted,
    BlipReplaced,
    BlipSurfaced,
    Event,
    TokenMinted,
    TokenRevoked,
    WaveCreated,
    apply,
    parse,
)
from fleet.store.faults import check_database, corrupt, storage_faults
from fleet.store.lock import StoreLock
from fleet.store.schema import MATERIALISED, connect, migrate

if TYPE_CHECKING:
    from fleet.store import Principal, Store

FORMAT = "fleet-events"
VERSION = 1
PAGE_ROWS = 1000
"""Log rows per ``GET /v1/events`` page, at most (and :data:`PAGE_BYTES` of payload)."""
PAGE_BYTES = 4 * 1024 * 1024


# ---------------------------------------------------------------- backup


@dataclass
class BackupReport:
    path: str
    bytes: int
    events: int
    store_id: str


def backup(db: Path, dest: Path, *, force: bool = False) -> BackupReport:
    """Copy the store at ``db`` to ``dest`` (0600) while it may be in use."""
    if not db.exists():
        raise errors.NotFound(f"there is no store at {db}: nothing to back up (is FLEET_HOME right?)")
    if db.stat().st_size == 0:
        raise errors.StorageFault(f"the store {db} is an empty (0-byte) file: there is nothing to back up")
    dest = dest.expanduser().absolute()
    if dest.exists() and dest.resolve() == db.resolve():
        raise errors.UsageError(f"{dest} is the store itself: give another file to back it up to")
    if not dest.parent.is_dir():
        raise errors.UsageError(f"{dest.parent} is not a directory: give a file in an existing directory")
    if dest.exists() and not force:
        raise errors.Conflict(f"{dest} already exists: give a new file, or --force to replace it")
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    with storage_faults(dest, "the backup"):
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        try:
            src = sqlite3.connect(str(db), timeout=10.0)
            dst = sqlite3.connect(str(tmp))
            try:
                src.execute("PRAGMA busy_timeout = 10000")
                src.backup(dst)  # pages=-1: the whole database in one step, from one read snapshot
                dst.execute("PRAGMA journal_mode = DELETE")  # one self-contained file, no -wal beside it
                problems = [r[0] for r in dst.execute("PRAGMA quick_check(5)")]
                if problems != ["ok"]:
                    raise corrupt(db, "its copy fails PRAGMA quick_check: " + "; ".join(map(str, problems)))
                events = int(dst.execute("SELECT count(*) FROM events").fetchone()[0])
                row = dst.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
            finally:
                dst.close()
                src.close()
            os.chmod(tmp, 0o600)
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
    return BackupReport(
        path=str(dest), bytes=dest.stat().st_size, events=events, store_id=row[0] if row else ""
    )


# ---------------------------------------------------------------- export


def _wave_of_token(conn: sqlite3.Connection, token_id: str) -> str | None:
    """The wave of a participant token (None for a machine token or an unknown one)."""
    row = conn.execute(
        "SELECT t.wave_id, g.scope FROM tokens t LEFT JOIN token_grants g ON g.token_id = t.id"
        " WHERE t.id = ?",
        (token_id,),
    ).fetchone()
    return None if row is None or row[1] is not None else str(row[0])


def in_wave(conn: sqlite3.Connection, event: Event, wave_id: str) -> bool:
    """Whether ``event`` belongs to a one-wave export of ``wave_id``. Machine tokens (the operator's
    powers over a set of waves) belong to no one wave, and are left out with their revocations."""
    if isinstance(event, BlipPosted | BlipSurfaced | BlipReplaced):
        return event.blip.wave_id == wave_id
    if isinstance(event, TokenMinted):
        return event.scope is None and event.wave_id == wave_id
    if isinstance(event, TokenRevoked):
        return _wave_of_token(conn, event.token_id) == wave_id
    return bool(getattr(event, "wave_id", None) == wave_id)


def export_page(
    store: Store, who: Principal, wave: str | None, *, after: int = 0, limit: int = PAGE_ROWS
) -> EventPage:
    """Log rows after seq ``after`` (of ``wave`` only, when named): the full operator only."""
    store.access.require_full_operator(who, "exports the event log")
    wave_id = str(store.access.wave(who, wave)["id"]) if wave else None
    limit = max(1, min(limit, PAGE_ROWS))
    rows: list[LogRow] = []
    cursor, size = after, 0
    with store._db.snapshot() as r:
        got = r.execute(
            "SELECT seq, type, payload, created_at FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
            (after, limit + 1),
        ).fetchall()
        more = len(got) > limit
        for row in got[:limit]:
            if size >= PAGE_BYTES:
                more = True
                break
            cursor = int(row["seq"])
            if wave_id is not None and not in_wave(r, parse(row["type"], row["payload"]), wave_id):
                continue
            rows.append(
                LogRow(seq=cursor, type=row["type"], payload=row["payload"], created_at=row["created_at"])
            )
            size += len(row["payload"])
    return EventPage(store_id=store.store_id, wave_id=wave_id, events=rows, cursor=cursor, more=more)


def header(store_id: str, wave_id: str | None, wave_name: str | None) -> dict[str, Any]:
    """The first line of an export file."""
    wave = {"id": wave_id, "name": wave_name} if wave_id else None
    return {"format": FORMAT, "version": VERSION, "store_id": store_id, "wave": wave}


def line(row: LogRow) -> dict[str, Any]:
    """One log row as a line of an export file (the payload as an object)."""
    return {
        "seq": row.seq,
        "type": row.type,
        "created_at": row.created_at,
        "payload": json.loads(row.payload),
    }


# ---------------------------------------------------------------- import


@dataclass
class Entry:
    line: int
    type: str
    payload: str
    created_at: str
    event: Event


@dataclass
class ImportReport:
    events: int
    waves: list[str] = field(default_factory=list)
    source_store_id: str = ""


def read_export(data: bytes, name: str) -> tuple[dict[str, Any], list[Entry]]:
    """The header and rows of an export file; UsageError naming the first line that is not one."""
    head: dict[str, Any] | None = None
    entries: list[Entry] = []
    for n, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise errors.UsageError(
                f"{name} line {n} is not UTF-8 (byte {raw[exc.start]:#04x} at {exc.start}):"
                " give a file written by `fleet export`"
            ) from None
        except ValueError as exc:
            raise errors.UsageError(
                f"{name} line {n} is not JSON ({exc}): give a file written by `fleet export`"
            ) from None
        if head is None:
            if not isinstance(obj, dict) or obj.get("format") != FORMAT:
                raise errors.UsageError(
                    f"{name} is not a fleet export: its first line is not `fleet export`'s header"
                )
            if obj.get("version") != VERSION:
                raise errors.UsageError(
                    f"{name} is a fleet export of version {obj.get('version')!r}; this fleet reads version"
                    f" {VERSION}: use the fleet that wrote it, or upgrade"
                )
            head = obj
            continue
        if not (
            isinstance(obj, dict)
            and isinstance(obj.get("type"), str)
            and isinstance(obj.get("created_at"), str)
            and isinstance(obj.get("payload"), dict)
        ):
            raise errors.UsageError(
                f"{name} line {n} is not a log row (an object with type, created_at and payload)"
            )
        payload = json.dumps(obj["payload"], separators=(",", ":"))  # the log's own text (events.payload_of)
        try:
            event = parse(obj["type"], payload)
        except errors.FleetError as exc:
            raise errors.UsageError(f"{name} line {n}: {exc.message}") from None
        entries.append(Entry(n, obj["type"], payload, obj["created_at"], event))
    if head is None:
        raise errors.UsageError(f"{name} is empty: give a file written by `fleet export`")
    return head, entries


@contextmanager
def instance_lock(lock: Path, db: Path) -> Iterator[None]:
    """Hold the store's lock ``lock`` (``Paths.store_lock``, beside ``db``): no daemon writes the store
    meanwhile, whatever its state dir (:mod:`fleet.store.lock`); Conflict naming the daemon if one does."""
    held = StoreLock.acquire(
        lock,
        db,
        what="fleet import",
        if_daemon="stop it first (`fleet daemon stop`), import, then start it again (an import writes"
        " the whole file in one transaction, with no daemon writing beside it)",
    )
    try:
        yield
    finally:
        held.release()


def _refuse(conn: sqlite3.Connection, e: Entry, name: str) -> None:
    """Conflict if the store already holds the wave ``e`` creates (by id or by name)."""
    if not isinstance(e.event, WaveCreated):
        return
    w = e.event
    row = conn.execute("SELECT id, name FROM waves WHERE id = ? OR name = ?", (w.wave_id, w.name)).fetchone()
    if row is None:
        return
    what = "the same wave" if row["id"] == w.wave_id else f"another wave of that name, id {row['id']}"
    raise errors.Conflict(
        f"{name} line {e.line}: this store already holds wave {w.name!r} ({what}): nothing was imported;"
        " import into a store that does not hold it (another FLEET_HOME)"
    )


@contextmanager
def _removed_on_failure(db: Path | None) -> Iterator[None]:
    """Remove the database ``db`` (and its -wal and -shm) if the block fails: an import that created
    the store and then was refused leaves no empty store behind."""
    try:
        yield
    except BaseException:
        if db is not None:
            for p in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
                p.unlink(missing_ok=True)
        raise


def import_log(db: Path, lock: Path, data: bytes, name: str) -> ImportReport:
    """Apply the export ``data`` (read from ``name``) to the store at ``db``, all or nothing."""
    head, entries = read_export(data, name)
    with instance_lock(lock, db):
        check_database(db)
        ensure_private_dir(db.parent)
        created = not db.exists()
        with storage_faults(db), _removed_on_failure(db if created else None):
            conn = connect(db)
            try:
                migrate(conn)
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for e in entries:
                        _refuse(conn, e, name)
                        conn.execute(
                            "INSERT INTO events(type, payload, created_at) VALUES (?,?,?)",
                            (e.type, e.payload, e.created_at),
                        )
                        try:
                            apply(conn, e.event)
                        except sqlite3.IntegrityError as exc:
                            raise errors.Conflict(
                                f"{name} line {e.line} ({e.type}) does not fit this store ({exc}): it holds"
                                " something with the same id, or the line refers to something neither the"
                                " file nor this store holds; nothing was imported"
                            ) from None
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            finally:
                conn.close()
    waves = [e.event.name for e in entries if isinstance(e.event, WaveCreated)]
    return ImportReport(events=len(entries), waves=waves, source_store_id=str(head.get("store_id", "")))


# ---------------------------------------------------------------- replay --check


@dataclass
class ReplayReport:
    store: str
    events: int
    rows: int
    differences: list[str] = field(default_factory=list)
    """The first ``shown`` differences, in words."""
    total: int = 0
    """How many differences there are in all."""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _keyed(conn: sqlite3.Connection, table: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    info = conn.execute(f"PRAGMA table_info({table})").fetchall()
    pk = [r["name"] for r in sorted((r for r in info if r["pk"]), key=lambda r: r["pk"])]
    out = {}
    for row in conn.execute(f"SELECT * FROM {table}"):
        d = dict(row)
        out[tuple(d[k] for k in pk) if pk else tuple(d.values())] = d
    return out


def replay_check(db: Path, *, shown: int = 50) -> ReplayReport:
    """Rebuild the materialised tables from ``db``'s log in a scratch database and compare (at most
    ``shown`` differences are listed; the count in the message is of all)."""
    if not db.exists():
        raise errors.NotFound(f"there is no store at {db}: nothing to check (is FLEET_HOME right?)")
    if db.stat().st_size == 0:
        raise errors.StorageFault(f"the store {db} is an empty (0-byte) file: there is no log to replay")
    with storage_faults(db):
        src = connect(db, readonly=True)
        scratch = connect(":memory:")
        try:
            src.execute("BEGIN")  # the log and the tables from one committed state
            log = src.execute("SELECT seq, type, payload FROM events ORDER BY seq").fetchall()
            live = {t: _keyed(src, t) for t in MATERIALISED}
            src.execute("COMMIT")
            migrate(scratch)
            report = ReplayReport(store=str(db), events=len(log), rows=sum(len(t) for t in live.values()))
            scratch.execute("BEGIN")
            for row in log:
                try:
                    apply(scratch, parse(row["type"], row["payload"]))
                except (sqlite3.Error, errors.FleetError) as exc:
                    report.differences.append(
                        f"the log does not replay: event {row['seq']} ({row['type']}): {exc}"
                    )
                    report.total = 1
                    return report
            rebuilt = {t: _keyed(scratch, t) for t in MATERIALISED}
            scratch.execute("COMMIT")
        finally:
            src.close()
            scratch.close()
    diffs = report.differences
    for table in MATERIALISED:
        a, b = live[table], rebuilt[table]
        for key in sorted(set(a) | set(b), key=repr):
            mine, theirs = a.get(key), b.get(key)
            if mine == theirs:
                continue
            where = f"{table} {'/'.join(map(str, key))}"
            if mine is None:
                diffs.append(f"{where}: rebuilt from the log, missing from the store")
            elif theirs is None:
                diffs.append(f"{where}: in the store, not in what the log rebuilds")
            else:
                for col in mine:
                    if mine[col] != theirs.get(col):
                        diffs.append(
                            f"{where}: {col} is {_shown(mine[col])} in the store,"
                            f" {_shown(theirs.get(col))} from the log"
                        )
    report.total = len(diffs)
    del diffs[shown:]
    return report
