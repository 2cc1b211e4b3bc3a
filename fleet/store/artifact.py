"""The store as an artifact you can carry (docs/design.md §2): backup, export, import, replay check.

What a caller may rely on:

- :func:`backup` copies a live database with SQLite's online backup API through a read connection
  of its own, in one step: the copy is one committed state (a WAL reader's snapshot; the daemon
  keeps writing meanwhile), a single self-contained file (journal mode DELETE), mode 0600, checked
  with ``quick_check`` before it is moved into place. It is the same store (same ``store_id``).
- :func:`export_page` pages the event log for ``GET /v1/events`` (full operator only): the rows
  verbatim, of one wave only when one is named, token rows only when asked (``tokens``). An export
  file (``fleet export``, :class:`ExportWriter`) is a header line (:data:`FORMAT`, the source's
  ``store_id``, the wave), one line per log row (the payload as a JSON object), and a trailer
  (:func:`trailer`: the row count and the SHA-256 of every byte before it).
- :func:`import_log` adds the waves of an export to a store, with the daemon's instance lock held (no
  daemon runs beside it), in one transaction, through :func:`fleet.store.events.apply`: the same
  ids, the same state. It only adds (:class:`_Adder`): every event must belong to a wave created
  earlier in the same file, every id must be new to the store and increasing, every event one a
  live write could have made, token rows only with ``with_tokens``. It reads a bounded line at a
  time (:func:`line_limit`), so memory follows the bound, not the file, and it needs the trailer
  (``allow_partial``: the whole rows before the damage). Any refusal is a UsageError naming the line,
  and nothing is changed.
- :func:`replay_check` rebuilds the materialised tables from the log (one read snapshot of the live
  store) in a scratch in-memory database and lists every row that differs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from fleet import errors
from fleet.ids import UUID7
from fleet.models import DEFAULT_MAX_BLIP_BYTES, OPERATOR, Blip, EventPage, LogRow
from fleet.paths import ensure_private_dir, hide_password
from fleet.records.permissions import PREVIEW_MAX, TOOL_MAX
from fleet.store import checks
from fleet.store.events import (
    BlipPinned,
    BlipPosted,
    BlipReplaced,
    BlipSurfaced,
    BudgetReached,
    BudgetSet,
    Event,
    NewMember,
    PermissionAnswered,
    PermissionAsked,
    RosterInvited,
    RosterLeft,
    SeatClaimed,
    SeatClosed,
    SessionRecorded,
    SummaryRecorded,
    TokenMinted,
    TokenRevoked,
    WaveCreated,
    WaveletForked,
    WaveletTopicSet,
    apply,
    parse,
)
from fleet.store.faults import check_database, corrupt, storage_faults
from fleet.store.lock import StoreLock
from fleet.store.schema import MATERIALISED, Conn, Row, connect, is_postgres, migrate

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


def _wave_of_token(conn: Conn, token_id: str) -> str | None:
    """The wave of a participant token (None for a machine token or an unknown one)."""
    row = conn.execute(
        "SELECT t.wave_id, g.scope FROM tokens t LEFT JOIN token_grants g ON g.token_id = t.id"
        " WHERE t.id = ?",
        (token_id,),
    ).fetchone()
    return None if row is None or row[1] is not None else str(row[0])


def in_wave(conn: Conn, event: Event, wave_id: str) -> bool:
    """Whether ``event`` belongs to a one-wave export of ``wave_id``. Machine tokens (the operator's
    powers over a set of waves) belong to no one wave, and are left out with their revocations."""
    if isinstance(event, BlipPosted | BlipSurfaced | BlipReplaced):
        return event.blip.wave_id == wave_id
    if isinstance(event, TokenMinted):
        return event.scope is None and event.wave_id == wave_id
    if isinstance(event, TokenRevoked):
        return _wave_of_token(conn, event.token_id) == wave_id
    return bool(getattr(event, "wave_id", None) == wave_id)


TOKEN_EVENTS = frozenset({"token.minted", "token.revoked"})
"""The log rows an export leaves out unless asked for tokens (``tokens=True``)."""


def export_page(
    store: Store,
    who: Principal,
    wave: str | None,
    *,
    after: int = 0,
    limit: int = PAGE_ROWS,
    tokens: bool = False,
) -> EventPage:
    """Log rows after seq ``after`` (of ``wave`` only, when named): the full operator only.

    Token rows (:data:`TOKEN_EVENTS`: the hashes of every token, and their revocations) only with
    ``tokens``: a token whose hash travels works wherever the rows are imported."""
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
            if not tokens and row["type"] in TOKEN_EVENTS:
                continue
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


def trailer(events: int, digest: str) -> dict[str, Any]:
    """The last line of an export file: how many log rows it holds and the SHA-256 (hex) of every
    byte before this line (the header and the rows, each with its newline)."""
    return {"end": FORMAT, "events": events, "sha256": digest}


class ExportWriter:
    """Writes an export file through ``write``: :meth:`start` (the header), :meth:`row` per log row,
    :meth:`end` (the trailer). A file without its trailer is one ``fleet import`` refuses as cut short."""

    def __init__(self, write: Callable[[bytes], object]) -> None:
        self._write = write
        self._digest = hashlib.sha256()
        self.events = 0

    def _line(self, obj: dict[str, Any], separators: tuple[str, str] | None = None) -> None:
        raw = (json.dumps(obj, separators=separators) + "\n").encode()
        self._digest.update(raw)
        self._write(raw)

    def start(self, store_id: str, wave_id: str | None, wave_name: str | None) -> None:
        self._line(header(store_id, wave_id, wave_name))

    def row(self, row: LogRow) -> None:
        self._line(line(row), (",", ":"))
        self.events += 1

    def end(self) -> None:
        self._write((json.dumps(trailer(self.events, self._digest.hexdigest())) + "\n").encode())


# ---------------------------------------------------------------- import

LINE_SLACK = 1024 * 1024
"""What a line may hold beside its blip texts (see :func:`line_limit`)."""

_HASH = re.compile(r"[0-9a-f]{64}")
SYSTEM = "system"
"""The author of provenance blips (no participant may take the name: ``checks.RESERVED``)."""
_ID_TABLES = ("waves", "wavelets", "blips", "tokens", "summaries")
"""The tables whose ids the store's minter hands out."""
_HELD_ID = " UNION ALL ".join(f"SELECT '{t[:-1]}' FROM {t} WHERE id = ?1" for t in _ID_TABLES)


def line_limit(max_blip_bytes: int = DEFAULT_MAX_BLIP_BYTES) -> int:
    """The longest line (bytes, its newline aside) ``fleet import`` reads: 8 × the blip limit + 1 MiB,
    3 MiB at the default 256 KiB.

    Why that admits every line a store writes: the largest is an event carrying a blip (or a summary)
    of ``max_blip_bytes`` of text, which JSON escapes into at most 6 bytes a byte (``\\u0001`` for a
    control character), beside what one request body (the blip limit + 64 KiB, ``BODY_SLACK``) can add
    around it in names and ids, which need no escaping: a summary's ``cites`` and ``load_bearing`` each
    at most a body, a fork's or a wave's member list and its system blips naming them about two. A
    store served with ``--max-blip-bytes N`` is imported with the same ``--max-blip-bytes N``.
    """
    return 8 * max_blip_bytes + LINE_SLACK


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
    tokens: int = 0
    """Tokens imported (``token.minted`` lines): they work on this store as on the source."""
    skipped: str = ""
    """What ``--allow-partial`` left out, in words ('' when the whole file was imported)."""


class _Damage(Exception):
    """The file is damaged from ``line`` on (cut short, or a line that is not a log row): with
    ``--allow-partial`` the whole rows before it are imported, otherwise nothing."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


class _Reader:
    """The lines of an export file, read one bounded ``readline`` at a time (memory stays within
    :func:`line_limit`, however long the file), with the running SHA-256 the trailer is checked
    against."""

    def __init__(self, stream: BinaryIO, name: str, limit: int) -> None:
        self.stream, self.name, self.limit = stream, name, limit
        self.n = 0
        self.events = 0
        self._digest = hashlib.sha256()
        self._ended = False

    def _next(self) -> tuple[bytes, Any] | None:
        """The next line and its JSON (None at the end of the file); _Damage for one that is not JSON."""
        raw = self.stream.readline(self.limit + 1)
        if not raw:
            return None
        self.n += 1
        where = f"{self.name} line {self.n}"
        if not raw.endswith(b"\n"):
            if len(raw) > self.limit:
                raise _Damage(
                    self.n,
                    f"{where} is longer than {self.limit} bytes, more than any line `fleet export` writes"
                    " (8 x the blip limit + 1 MiB; a store served with --max-blip-bytes N is imported"
                    " with the same --max-blip-bytes N): it was not read further",
                )
            raise _Damage(self.n, f"{where} ends unfinished (no newline after it): the file was cut short")
        try:
            return raw, json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise _Damage(
                self.n, f"{where} is not UTF-8 (byte {raw[exc.start]:#04x} at {exc.start})"
            ) from None
        except ValueError as exc:
            raise _Damage(self.n, f"{where} is not JSON ({exc})") from None

    def header(self) -> dict[str, Any]:
        """The header line; UsageError if the file does not start with one (--allow-partial or not)."""
        try:
            got = self._next()
        except _Damage as exc:
            raise errors.UsageError(
                f"{exc.message}: it is not a fleet export; give a file written by `fleet export`"
            ) from None
        if got is None:
            raise errors.UsageError(
                f"{self.name} is empty (line 1 should be `fleet export`'s header): give a file written by"
                " `fleet export`"
            )
        raw, obj = got
        if not isinstance(obj, dict) or obj.get("format") != FORMAT:
            raise errors.UsageError(
                f"{self.name} is not a fleet export: its line 1 is not `fleet export`'s header"
            )
        if obj.get("version") != VERSION:
            raise errors.UsageError(
                f"{self.name} line 1: a fleet export of version {obj.get('version')!r}; this fleet reads"
                f" version {VERSION}: use the fleet that wrote it, or upgrade"
            )
        self._digest.update(raw)
        return obj

    def entry(self) -> Entry | None:
        """The next log row; None once the trailer is read and matches, and nothing follows it.

        _Damage for a line that is not a whole log row or a file that ends without its trailer (or
        goes on after it); UsageError for a trailer that does not match the lines before it (which
        lines changed cannot be told, so --allow-partial refuses it too)."""
        if self._ended:
            return None
        got = self._next()
        where = f"{self.name} line {self.n}"
        if got is None:
            raise _Damage(
                self.n + 1,
                f"{self.name} line {self.n} is its last line and `fleet export`'s trailer is not after it:"
                f" the file was cut short ({self.events} whole events read)",
            )
        raw, obj = got
        if isinstance(obj, dict) and "end" in obj:
            want = trailer(self.events, self._digest.hexdigest())
            if obj != want:
                raise errors.UsageError(
                    f"{where}: the trailer does not match the lines before it (it says {obj.get('events')!r}"
                    f" events and SHA-256 {str(obj.get('sha256'))[:16]}..., they are {self.events} events"
                    f" and {want['sha256'][:16]}...): the file was changed after `fleet export` wrote it;"
                    " nothing was imported (which lines changed cannot be told, so --allow-partial"
                    " refuses it too): export it again"
                )
            self._ended = True
            after = self.stream.readline(1)
            if after:
                raise _Damage(
                    self.n + 1,
                    f"{self.name} line {self.n + 1} comes after the trailer (line {self.n}), where the"
                    " file should end",
                )
            return None
        if not (
            isinstance(obj, dict)
            and isinstance(obj.get("type"), str)
            and isinstance(obj.get("created_at"), str)
            and isinstance(obj.get("payload"), dict)
        ):
            raise _Damage(self.n, f"{where} is not a log row (an object with type, created_at and payload)")
        payload = json.dumps(obj["payload"], separators=(",", ":"))  # the log's own text (events.payload_of)
        try:
            event = parse(obj["type"], payload)
        except errors.FleetError as exc:
            raise _Damage(self.n, f"{where}: {exc.message}") from None
        self._digest.update(raw)
        self.events += 1
        return Entry(self.n, obj["type"], payload, obj["created_at"], event)


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


class _Refused(Exception):
    """One line does not only add (the reason in words): the whole import is refused."""


def _participant(value: str, what: str) -> None:
    """A name a live write accepts for a participant (the operator's included)."""
    if value == OPERATOR:
        return
    try:
        checks.participant_name(value)
    except errors.FleetError as exc:
        raise _Refused(f"{what}: {exc.message}") from None


class _Adder:
    """Checks each event of an import before it is applied, against the store as the events before it
    in the same transaction left it: what makes an import one that only adds.

    - Every event belongs to a wave a ``wave.created`` line earlier in the file created (the store did
      not hold it, by id or name), and everything it names (wavelets, blips, tokens, the waves of a
      machine token's scope) to such a wave: the store's own waves are never written.
    - Every id it mints (wave, root, wavelet, blip, token, summary) is UUIDv7 text, held by no table
      of the store, and greater than every id before it in its wave (a store mints them strictly
      increasing in commit order).
    - It respects what a live write enforces (fleet/store/__init__.py): a message, a surface, a pin
      or a participant's summary by a member of the wavelet at that point (or the operator); system
      blips by ``system`` only; a replacement of the latest version, keeping its author and kind; a
      surface into its source's parent; a fork point and an invitee's ``since`` that are the
      wavelet's last blip then; a leave of a member; a topic within the rules, set by a member; a
      seat claimed over no open seat of another session, closed only when open; a budget reached
      that was set; blip texts within the limit.
    - Tokens only with ``with_tokens``.

    The tables this looks in are indexed by what it asks; the only state it keeps itself is the
    waves and wavelets created so far (a structure count, not a blip count).
    """

    def __init__(self, conn: Conn, *, with_tokens: bool, max_blip_bytes: int) -> None:
        self.conn = conn
        self.with_tokens = with_tokens
        self.max_blip_bytes = max_blip_bytes
        self.waves: dict[str, str] = {}
        """Waves created by this file: id -> name."""
        self.wavelets: dict[str, Row] = {}
        """Wavelets of those waves, as created (a wavelet row never changes)."""
        self.last: dict[str, str] = {}
        """Per wave created by this file, the last id it minted so far."""
        self.events = 0
        self.tokens = 0
        row = conn.execute(
            "SELECT max(m) FROM ("
            + " UNION ALL ".join(f"SELECT max(id) AS m FROM {t}" for t in _ID_TABLES)
            + ") AS ids"
        ).fetchone()
        self.top = str(row[0] or "")
        """The greatest id the store holds (this import's included): a greater one cannot be held, so
        only ids at or below it are looked up (none, for a whole-store export into a fresh store)."""

    # ------------------------------------------------------------ lookups

    def _one(self, sql: str, *args: object) -> Row | None:
        row: Row | None = self.conn.execute(sql, args).fetchone()
        return row

    def _new_id(self, value: str, what: str, wave_id: str) -> None:
        """``value`` is an id fleet mints, new to the store, and greater than the ids before it in its
        wave. (Per wave, not across the file: a store that imported an older wave holds it after
        newer ones, and exports it so; within a wave, ids grow in commit order even then.)"""
        if not UUID7.fullmatch(value):
            raise _Refused(f"{what} {value!r} is not an id fleet mints (UUIDv7 text)")
        last = self.last.get(wave_id, "")
        if value <= last:
            raise _Refused(
                f"{what} {value} is not greater than the id before it in its wave ({last}): a store mints"
                " ids strictly increasing in commit order (lines reordered or repeated?)"
            )
        held = self._one(_HELD_ID, value) if value <= self.top else None
        if held is not None:
            raise _Refused(f"{what} {value} is an id this store already holds (a {held[0]})")
        self.last[wave_id] = value
        self.top = max(self.top, value)

    def _wave(self, wave_id: str) -> None:
        if wave_id in self.waves:
            return
        held = self._one("SELECT name FROM waves WHERE id = ?", wave_id)
        if held is not None:
            raise _Refused(
                f"it writes into wave {held['name']!r} ({wave_id}), which this store already holds and this"
                " file has not created: an import only adds waves created in the same file, and never"
                " changes one the store holds"
            )
        raise _Refused(
            f"its wave {wave_id} is not created earlier in this file (no wave.created line for it before"
            " this one)"
        )

    def _wavelet(self, wavelet_id: str, wave_id: str, what: str = "wavelet") -> Row:
        row = self.wavelets.get(wavelet_id)
        if row is None or row["wave_id"] != wave_id:
            raise _Refused(
                f"its {what} {wavelet_id} is not a wavelet created earlier in this file in its wave"
            )
        return row

    def _blip_row(self, blip_id: str, wave_id: str, what: str) -> Row:
        row = self._one("SELECT * FROM blips WHERE id = ?", blip_id)
        if row is None or row["wave_id"] != wave_id:
            raise _Refused(f"its {what} {blip_id} is not a blip created earlier in this file in its wave")
        return row

    def _last_blip(self, wavelet_id: str) -> str:
        row = self._one("SELECT max(id) FROM blips WHERE wavelet_id = ?", wavelet_id)
        return str(row[0] or "") if row is not None else ""

    def _member(self, wavelet_id: str, name: str) -> bool:
        return (
            self._one("SELECT 1 FROM members WHERE wavelet_id = ? AND name = ?", wavelet_id, name) is not None
        )

    def _by_member(self, wl: Row, name: str, doing: str) -> None:
        _participant(name, doing)
        if name != OPERATOR and not self._member(wl["id"], name):
            raise _Refused(
                f"{name!r} is not on the roster of {wl['name']!r} at this point: only its members (and the"
                f" operator) {doing} there"
            )

    def _blip(self, b: Blip, wave_id: str, new_wavelet: str | None = None) -> None:
        """A blip an event adds: a new id, in the event's wave, its references in that wave too."""
        self._new_id(b.id, "blip", wave_id)
        if b.wave_id != wave_id:
            raise _Refused(f"blip {b.id} names wave {b.wave_id}, not its event's wave {wave_id}")
        if b.wavelet_id != new_wavelet:
            self._wavelet(b.wavelet_id, wave_id)
        if (b.kind == "system") != (b.author == SYSTEM):
            raise _Refused(
                f"blip {b.id} is a {b.kind} blip by {b.author!r}: system blips are by 'system' only"
            )
        if b.author != SYSTEM:
            _participant(b.author, f"blip {b.id}'s author")
        if b.kind == "system":
            if not b.text.strip():
                raise _Refused(f"system blip {b.id} has no text")
        else:
            try:
                checks.text(b.text, self.max_blip_bytes)
            except errors.FleetError as exc:
                raise _Refused(
                    f"blip {b.id}: {exc.message} (a store served with --max-blip-bytes N is imported with"
                    " the same --max-blip-bytes N)"
                ) from None
        if b.source_wavelet_id is not None and b.source_wavelet_id != new_wavelet:
            self._wavelet(b.source_wavelet_id, wave_id, "source wavelet")
        if b.source_blip_id is not None:
            self._blip_row(b.source_blip_id, wave_id, "source blip")

    def _members(self, members: list[NewMember]) -> None:
        for m in members:
            _participant(m.name, "a member")

    # ------------------------------------------------------------ per event type

    def check(self, event: Event) -> None:
        """_Refused unless ``event`` only adds to what the file created so far (see the class)."""
        if isinstance(event, WaveCreated):
            self._wave_created(event)
        elif isinstance(event, WaveletForked):
            self._wavelet_forked(event)
        elif isinstance(event, RosterInvited):
            self._wave(event.wave_id)
            wl = self._wavelet(event.wavelet_id, event.wave_id)
            _participant(event.member.name, "the invitee")
            if self._member(wl["id"], event.member.name):
                raise _Refused(f"{event.member.name!r} is already on the roster of {wl['name']!r}")
            if event.member.since != self._last_blip(wl["id"]):
                raise _Refused(
                    f"the invitee's since {event.member.since!r} is not the wavelet's last blip then"
                )
            self._system_blip(event.blip, event.wave_id, wl["id"])
        elif isinstance(event, RosterLeft):
            self._wave(event.wave_id)
            wl = self._wavelet(event.wavelet_id, event.wave_id)
            if not self._member(wl["id"], event.name):
                raise _Refused(f"{event.name!r} leaves {wl['name']!r} without being on its roster")
            self._system_blip(event.blip, event.wave_id, wl["id"])
        elif isinstance(event, WaveletTopicSet):
            self._wave(event.wave_id)
            wl = self._wavelet(event.wavelet_id, event.wave_id)
            try:
                checks.topic(event.topic)
            except errors.FleetError as exc:
                raise _Refused(f"wavelet {wl['name']!r}: {exc.message}") from None
            self._by_member(wl, event.by, "set the topic")
            self._system_blip(event.blip, event.wave_id, wl["id"])
        elif isinstance(event, BlipPosted):
            b = event.blip
            self._wave(b.wave_id)
            wl = self._wavelet(b.wavelet_id, b.wave_id)
            if b.kind == "surface" or b.replaces is not None or b.source_wavelet_id or b.source_blip_id:
                raise _Refused("a posted blip is a message or a system blip, with no replaces or source")
            self._blip(b, b.wave_id)
            if b.kind == "message":
                self._by_member(wl, b.author, "post")
        elif isinstance(event, BlipSurfaced):
            self._blip_surfaced(event.blip)
        elif isinstance(event, BlipReplaced):
            self._blip_replaced(event.blip)
        elif isinstance(event, TokenMinted):
            self._token_minted(event)
        elif isinstance(event, TokenRevoked):
            self._require_tokens()
            row = self._one("SELECT wave_id, revoked_at FROM tokens WHERE id = ?", event.token_id)
            if row is None or row["wave_id"] not in self.waves:
                raise _Refused(
                    f"it revokes token {event.token_id}, which is not a token minted earlier in this file"
                )
            if row["revoked_at"] is not None:
                raise _Refused(f"token {event.token_id} is already revoked")
        elif isinstance(event, SessionRecorded):
            self._wave(event.wave_id)
            self._wavelet(event.wavelet_id, event.wave_id)
            _participant(event.participant, "the session's participant")
            self._session_id(event.session_id)
        elif isinstance(event, SeatClaimed):
            self._wave(event.wave_id)
            _participant(event.participant, "the resident")
            self._session_id(event.session_id)
            if event.pid <= 0:
                raise _Refused(f"pid {event.pid} is not a process id")
            seat = self._one(
                "SELECT session_id FROM seats WHERE wave_id = ? AND closed_at IS NULL", event.wave_id
            )
            if seat is not None and seat["session_id"] != event.session_id:
                raise _Refused("it claims the wave's seat while another session holds it open")
        elif isinstance(event, SeatClosed):
            self._wave(event.wave_id)
            if (
                self._one("SELECT 1 FROM seats WHERE wave_id = ? AND closed_at IS NULL", event.wave_id)
                is None
            ):
                raise _Refused("it closes the wave's seat, which is not open")
        elif isinstance(event, SummaryRecorded):
            self._summary_recorded(event)
        elif isinstance(event, BlipPinned):
            self._wave(event.wave_id)
            wl = self._wavelet(event.wavelet_id, event.wave_id)
            blip = self._blip_row(event.blip_id, event.wave_id, "blip")
            if blip["wavelet_id"] != wl["id"]:
                raise _Refused(f"blip {event.blip_id} is not in {wl['name']!r}")
            if self._one("SELECT 1 FROM pins WHERE wavelet_id = ? AND blip_id = ?", wl["id"], blip["id"]):
                raise _Refused(f"blip {event.blip_id} is already pinned")
            self._by_member(wl, event.by, "pin")
        elif isinstance(event, BudgetSet):
            self._wave(event.wave_id)
            if event.wavelet_id:
                self._wavelet(event.wavelet_id, event.wave_id)
            if event.participant:
                _participant(event.participant, "the budget's participant")
        elif isinstance(event, PermissionAsked):
            self._permission_asked(event)
        elif isinstance(event, PermissionAnswered):
            self._permission_answered(event)
        elif isinstance(event, BudgetReached):
            self._budget_reached(event)
        else:  # an event type added without its check here: refused, not applied unchecked
            raise _Refused(f"this fleet has no import check for {event.type} events: upgrade fleet")

    def _permission_asked(self, e: PermissionAsked) -> None:
        """A prompt of a participant on its wave's roster (a wave created in this file), a new id."""
        self._wave(e.wave_id)
        _participant(e.participant, "the asking participant")
        if (
            self._one("SELECT 1 FROM participants WHERE wave_id = ? AND name = ?", e.wave_id, e.participant)
            is None
        ):
            raise _Refused(f"{e.participant!r} asks permission in a wave whose roster never had it")
        self._session_id(e.session_id)
        if self._one("SELECT 1 FROM permissions WHERE id = ?", e.request_id) is not None:
            raise _Refused(f"permission request {e.request_id} is already in this store")
        if not e.tool or len(e.tool) > TOOL_MAX or len(e.preview) > PREVIEW_MAX:
            raise _Refused(
                f"permission request {e.request_id}: a tool of 1-{TOOL_MAX} characters and a preview of at"
                f" most {PREVIEW_MAX}"
            )
        if not e.asked_at < e.expires_at:
            raise _Refused(f"permission request {e.request_id} expires before it was asked")

    def _permission_answered(self, e: PermissionAnswered) -> None:
        """The answer of a pending request of this file's, by the operator or the participant's pane."""
        self._wave(e.wave_id)
        row = self._one("SELECT * FROM permissions WHERE id = ?", e.request_id)
        if row is None or row["wave_id"] != e.wave_id or row["participant"] != e.participant:
            raise _Refused(
                f"it answers permission request {e.request_id}, which is not {e.participant!r}'s request"
                " asked earlier in this file in its wave"
            )
        if row["outcome"] != "pending":
            raise _Refused(f"permission request {e.request_id} was already {row['outcome']}")
        if e.via not in ("cli", "console", "channel", "pane", "hook"):
            raise _Refused(
                f"permission request {e.request_id} answered via {e.via!r}, which fleet never writes"
            )

    def _require_tokens(self) -> None:
        if not self.with_tokens:
            raise _Refused(
                "the file carries tokens (exported with --with-tokens): a token imported keeps working"
                " here as on the store it came from; give --with-tokens to import them too, or import an"
                " export made without them"
            )

    @staticmethod
    def _session_id(value: str) -> None:
        try:
            checks.session_id(value)
        except errors.FleetError as exc:
            raise _Refused(exc.message) from None

    def _system_blip(self, b: Blip, wave_id: str, wavelet_id: str) -> None:
        if b.kind != "system" or b.wavelet_id != wavelet_id:
            raise _Refused(f"blip {b.id} should be a system blip in wavelet {wavelet_id}")
        self._blip(b, wave_id)

    def _wave_created(self, e: WaveCreated) -> None:
        same = self._one("SELECT id, name FROM waves WHERE id = ? OR name = ?", e.wave_id, e.name)
        if same is not None:
            what = (
                "the same wave" if same["id"] == e.wave_id else f"another wave of that name, id {same['id']}"
            )
            raise _Refused(
                f"this store already holds wave {e.name!r} ({what}): import into a store that does not hold"
                " it (another FLEET_HOME)"
            )
        try:
            checks.name(e.name, "wave")
        except errors.FleetError as exc:
            raise _Refused(exc.message) from None
        self._new_id(e.wave_id, "wave", e.wave_id)
        self._new_id(e.root_id, "root wavelet", e.wave_id)
        _participant(e.created_by, "its creator")
        self._members(e.members)
        if any(m.since for m in e.members):
            raise _Refused("a wave's first members start with since ''")
        for b in e.blips:
            if b.kind != "system" or b.wavelet_id != e.root_id:
                raise _Refused(f"blip {b.id} of a new wave should be a system blip in its root")
            self._blip(b, e.wave_id, new_wavelet=e.root_id)

    def _wavelet_forked(self, e: WaveletForked) -> None:
        self._wave(e.wave_id)
        parent = self._wavelet(e.parent_id, e.wave_id, "parent")
        if e.fork_blip_id != (self._last_blip(parent["id"]) or None):
            raise _Refused(f"its fork point {e.fork_blip_id} is not the parent's last blip then")
        self._new_id(e.wavelet_id, "wavelet", e.wave_id)
        try:
            checks.name(e.name, "wavelet")
        except errors.FleetError as exc:
            raise _Refused(exc.message) from None
        _participant(e.created_by, "its creator")
        self._members(e.members)
        if any(m.since for m in e.members):
            raise _Refused("a fork's members start with since ''")
        for b in e.blips:
            if b.kind != "system" or b.wavelet_id not in (e.parent_id, e.wavelet_id):
                raise _Refused(f"blip {b.id} of a fork should be a system blip in the fork or its parent")
            self._blip(b, e.wave_id, new_wavelet=e.wavelet_id)

    def _blip_surfaced(self, b: Blip) -> None:
        self._wave(b.wave_id)
        if b.kind != "surface" or b.source_wavelet_id is None or b.replaces is not None:
            raise _Refused("a surfaced blip is a surface blip naming its source wavelet")
        source = self._wavelet(b.source_wavelet_id, b.wave_id, "source wavelet")
        if source["parent_id"] != b.wavelet_id:
            raise _Refused(f"blip {b.id} is not in the parent of its source wavelet {source['name']!r}")
        self._blip(b, b.wave_id)
        if (
            b.source_blip_id is not None
            and self._blip_row(b.source_blip_id, b.wave_id, "source blip")["wavelet_id"] != source["id"]
        ):
            raise _Refused(f"its source blip {b.source_blip_id} is not in {source['name']!r}")
        self._by_member(source, b.author, "surface from")

    def _blip_replaced(self, b: Blip) -> None:
        self._wave(b.wave_id)
        if b.replaces is None:
            raise _Refused("a replacement names the blip it replaces")
        old = self._blip_row(b.replaces, b.wave_id, "replaced blip")
        if old["wavelet_id"] != b.wavelet_id:
            raise _Refused(f"blip {b.id} is not in the wavelet of the blip it replaces")
        if old["superseded_by"] is not None:
            raise _Refused(f"blip {b.replaces} was already replaced by {old['superseded_by']}")
        if b.kind != old["kind"]:
            raise _Refused(f"a replacement keeps the blip's kind ({old['kind']}), not {b.kind}")
        if b.replaced_by is not None:  # (events from before replaces kept the author have no replaced_by)
            _participant(b.replaced_by, "its writer")
            if b.author != old["author"]:
                raise _Refused(f"a replacement keeps the blip's author ({old['author']!r}), not {b.author!r}")
        if (b.source_wavelet_id, b.source_blip_id) != (old["source_wavelet_id"], old["source_blip_id"]):
            raise _Refused("a replacement keeps the blip's source")
        self._blip(b, b.wave_id)

    def _token_minted(self, e: TokenMinted) -> None:
        self._require_tokens()
        self._wave(e.wave_id)
        self._new_id(e.token_id, "token", e.wave_id)
        _participant(e.participant, "its participant")
        if not _HASH.fullmatch(e.hash):
            raise _Refused("its hash is not a SHA-256 in hex")
        if self._one("SELECT 1 FROM tokens WHERE hash = ?", e.hash) is not None:
            raise _Refused("this store already holds a token with that hash")
        if e.machine is not None:
            try:
                checks.name(e.machine, "machine")
            except errors.FleetError as exc:
                raise _Refused(exc.message) from None
        if e.scope is not None:
            if e.machine is None or e.participant != OPERATOR or not e.scope or e.scope[0] != e.wave_id:
                raise _Refused(
                    "a machine token is the operator's, for a machine, its wave first in its scope"
                )
            if len(set(e.scope)) != len(e.scope):
                raise _Refused("a machine token's scope names a wave twice")
            for wave_id in e.scope:
                self._wave(wave_id)
        self.tokens += 1

    def _summary_recorded(self, e: SummaryRecorded) -> None:
        self._wave(e.wave_id)
        wl = self._wavelet(e.wavelet_id, e.wave_id)
        self._new_id(e.summary_id, "summary", e.wave_id)
        upto = self._blip_row(e.upto, e.wave_id, "last covered blip")
        if upto["wavelet_id"] != wl["id"]:
            raise _Refused(f"its last covered blip {e.upto} is not in {wl['name']!r}")
        prev = self._one("SELECT max(upto) FROM summaries WHERE wavelet_id = ?", wl["id"])
        after = str(prev[0] or "") if prev is not None else ""
        if e.after != after or e.upto <= after:
            raise _Refused(
                f"it does not roll forward from the wavelet's latest summary (up to {after or 'none'})"
            )
        if not e.text.strip():
            raise _Refused("a summary needs text")
        cites = set(e.cites)
        known = {
            r[0]
            for r in self.conn.execute(
                "SELECT id FROM blips WHERE wavelet_id = ? AND id <= ?"
                " AND id IN (SELECT value FROM json_each(?))",
                (wl["id"], e.upto, json.dumps(sorted(cites))),
            )
        }
        if cites - known or not set(e.load_bearing) <= cites:
            raise _Refused("it cites ids that are not blips of its range, or leaves a load-bearing one out")
        if e.author_kind == "participant":
            self._by_member(wl, e.author, "summarize")

    def _budget_reached(self, e: BudgetReached) -> None:
        self._wave(e.wave_id)
        if e.wavelet_id:
            self._wavelet(e.wavelet_id, e.wave_id)
        _participant(e.participant, "its participant")
        if (
            self._one(
                "SELECT 1 FROM budgets WHERE wave_id = ? AND wavelet_id = ? AND participant = ?"
                " AND set_at = ?",
                e.wave_id,
                e.wavelet_id,
                e.scope,
                e.set_at,
            )
            is None
        ):
            raise _Refused("it reaches a budget that is not set (as of its set_at) at this point")
        if e.blip is not None:
            if e.blip.kind != "system":
                raise _Refused(f"blip {e.blip.id} should be a system blip")
            self._blip(e.blip, e.wave_id)

    # ------------------------------------------------------------ apply

    def add(self, e: Entry, name: str) -> None:
        """Check ``e``, then append it to the log and apply it; UsageError naming the line if it does
        not only add."""
        try:
            self.check(e.event)
            self.conn.execute(
                "INSERT INTO events(type, payload, created_at) VALUES (?,?,?)",
                (e.type, e.payload, e.created_at),
            )
            try:
                apply(self.conn, e.event)
            except sqlite3.IntegrityError as exc:
                raise _Refused(f"it does not fit the store ({exc})") from None
        except _Refused as exc:
            raise errors.UsageError(f"{name} line {e.line} ({e.type}): {exc}; nothing was imported") from None
        self.events += 1
        if isinstance(e.event, WaveCreated):
            self.waves[e.event.wave_id] = e.event.name
        if isinstance(e.event, WaveCreated | WaveletForked):
            wl_id = e.event.root_id if isinstance(e.event, WaveCreated) else e.event.wavelet_id
            row = self._one("SELECT * FROM wavelets WHERE id = ?", wl_id)
            assert row is not None
            self.wavelets[wl_id] = row


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


def import_log(
    db: Path | str,
    lock: Path,
    stream: BinaryIO,
    name: str,
    *,
    with_tokens: bool = False,
    allow_partial: bool = False,
    max_blip_bytes: int = DEFAULT_MAX_BLIP_BYTES,
) -> ImportReport:
    """Add the waves of the export read from ``stream`` (called ``name`` in messages) to the store at
    ``db``, all or nothing, with the daemon's instance lock ``lock`` held.

    The import only adds (:class:`_Adder` says exactly what that means): a line that would change a
    wave the store holds, reuse an id, break an invariant of live writes, or carry a token without
    ``with_tokens`` is a UsageError naming it, and nothing changes. The file must end with a trailer
    matching it (:func:`trailer`); ``allow_partial`` imports a damaged file's whole log rows before the
    damage (a line cut short or not a log row, a missing trailer, lines after it), all checked the
    same way, and says what it left out in ``skipped``; a trailer that does not match is refused even
    then. Lines over :func:`line_limit` are refused without being buffered.
    """
    lines = _Reader(stream, name, line_limit(max_blip_bytes))
    head = lines.header()
    # On PostgreSQL no lock file: the import's one transaction holds the write lock every daemon's
    # writes take, and each of them reads the newest id under it (fleet/store/postgres.py)
    with contextlib.nullcontext() if is_postgres(db) else instance_lock(lock, Path(db)):
        created = False
        if not is_postgres(db):
            db = Path(db)
            check_database(db)
            ensure_private_dir(db.parent)
            created = not db.exists()
        with storage_faults(db), _removed_on_failure(Path(db) if created else None):
            conn = connect(db)
            try:
                migrate(conn)
                conn.execute("BEGIN IMMEDIATE")
                try:
                    adder = _Adder(conn, with_tokens=with_tokens, max_blip_bytes=max_blip_bytes)
                    skipped = ""
                    while True:
                        try:
                            entry = lines.entry()
                        except _Damage as exc:
                            if not allow_partial:
                                raise errors.UsageError(
                                    f"{exc.message}; nothing was imported: export it again, or import the"
                                    f" {adder.events} whole events before line {exc.line} with"
                                    " --allow-partial"
                                ) from None
                            skipped = f"line {exc.line} and everything after it ({exc.message})"
                            break
                        if entry is None:
                            break
                        adder.add(entry, name)
                    if not adder.events:
                        raise errors.UsageError(
                            f"{name} holds no events to import"
                            + (f": it is damaged from the start ({skipped})" if skipped else "")
                        )
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            finally:
                conn.close()
    return ImportReport(
        events=adder.events,
        waves=list(adder.waves.values()),
        source_store_id=str(head.get("store_id", "")),
        tokens=adder.tokens,
        skipped=skipped,
    )


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


def _primary_key(conn: Conn, table: str) -> list[str]:
    """``table``'s primary key columns, read from an SQLite connection."""
    info = conn.execute(f"PRAGMA table_info({table})").fetchall()
    return [r["name"] for r in sorted((r for r in info if r["pk"]), key=lambda r: r["pk"])]


def _keyed(conn: Conn, table: str, pk: list[str]) -> dict[tuple[Any, ...], dict[str, Any]]:
    out = {}
    for row in conn.execute(f"SELECT * FROM {table}"):
        d = dict(row)
        out[tuple(d[k] for k in pk) if pk else tuple(d.values())] = d
    return out


def replay_check(db: Path | str, *, shown: int = 50) -> ReplayReport:
    """Rebuild the materialised tables from ``db``'s log (an SQLite file or a ``postgresql://`` URL)
    in a scratch SQLite database and compare (at most ``shown`` differences are listed; the count in
    the message is of all)."""
    if not is_postgres(db):
        db = Path(db)
        if not db.exists():
            raise errors.NotFound(f"there is no store at {db}: nothing to check (is FLEET_HOME right?)")
        if db.stat().st_size == 0:
            raise errors.StorageFault(f"the store {db} is an empty (0-byte) file: there is no log to replay")
    with storage_faults(db):
        src = connect(db, readonly=True)
        scratch = connect(":memory:")
        try:
            migrate(scratch)
            keys = {t: _primary_key(scratch, t) for t in MATERIALISED}  # (the same on either engine)
            src.execute("BEGIN")  # the log and the tables from one committed state
            log = src.execute("SELECT seq, type, payload FROM events ORDER BY seq").fetchall()
            live = {t: _keyed(src, t, keys[t]) for t in MATERIALISED}
            src.execute("COMMIT")
            report = ReplayReport(
                store=hide_password(str(db)), events=len(log), rows=sum(len(t) for t in live.values())
            )
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
            rebuilt = {t: _keyed(scratch, t, keys[t]) for t in MATERIALISED}
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
