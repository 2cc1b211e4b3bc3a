"""The database file and its write-ahead log, watched (docs/design.md §2): a store whose files were
removed or replaced under it takes no more writes.

What a caller may rely on:

- :class:`StoreFiles` records which files (device, inode) the writer opened as ``<db>`` and
  ``<db>-wal``. :meth:`StoreFiles.changed` says whether either path now names another file or none:
  two ``stat`` calls, made after each commit (:meth:`fleet.store.schema.Connections.write`) and
  once a second between writes (:meth:`~fleet.store.schema.Connections.check_files`).
- While the writer is open the ``-wal`` file always exists: SQLite removes it only when the last
  connection closes, and a checkpoint (``TRUNCATE`` included) empties it in place. So a missing
  ``-wal`` is never the normal state of a running daemon; it was unlinked under it.
- :func:`rescue` saves what the writer still sees through the files it holds open. A WAL removed
  or replaced: a checkpoint copies every committed frame into the database file, which is still
  the store's (nothing acknowledged is lost, even to a ``kill -9`` right after). A database file
  removed or replaced: ``VACUUM INTO`` a new file beside it, ``<db>.rescued-<time>`` (0600), then
  the WAL is emptied, so none of its frames is replayed onto whatever file now has the name.
- Once a change is found, every later write is refused with the same
  :class:`~fleet.errors.StorageFault` (HTTP 507, CLI exit 7) until the daemon is restarted; reads
  go on being answered.

Why no automatic reopen: readers of other threads hold connections on the old files, and the
operator may have replaced the file on purpose; a restart is one command and decides nothing for
them.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fleet.errors import StorageFault

if TYPE_CHECKING:
    from fleet.store.schema import Conn

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Change:
    """What happened to one of the store's files: ``what`` (``database`` or ``wal``) was ``how``
    (``removed`` or ``replaced``)."""

    what: str
    how: str
    path: Path


def _ident(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


class StoreFiles:
    """The identities of ``db`` and its ``-wal`` as the writer opened them (call once it has)."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.wal = db.with_name(db.name + "-wal")
        watched = (("database", db, _ident(db)), ("wal", self.wal, _ident(self.wal)))
        # A file not there at open (an in-memory database; no WAL on a read-only medium) is not watched.
        self._watched = tuple((what, str(path), ident) for what, path, ident in watched if ident is not None)

    def changed(self) -> Change | None:
        """The first of the two files whose path names another file (or none) now, or None."""
        # Runs after every commit: two stats and compares inline (about 2 µs; bench figures in README).
        for what, path, opened in self._watched:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                return Change(what, "removed", Path(path))
            if st.st_ino != opened[1] or st.st_dev != opened[0]:
                return Change(what, "replaced", Path(path))
        return None


@dataclass(frozen=True)
class Rescued:
    """What :func:`rescue` did: the ``fault`` every write gets from now on; ``kept``: what the writer
    had is saved somewhere (else the next write tries again); ``in_place``: saved into the store's own
    database file (a restart loses nothing and needs nothing moved)."""

    fault: StorageFault
    kept: bool
    in_place: bool


def _name(change: Change) -> str:
    return f"the store's {'file' if change.what == 'database' else 'write-ahead log'} {change.path}"


def rescue(conn: Conn, files: StoreFiles, change: Change) -> Rescued:
    """Save what ``conn`` (the writer, outside any transaction) sees after ``change``."""
    db, wal = files.db, files.wal
    if change.what == "wal" and files.changed() == change:
        try:
            busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            why = f"{frames - copied} of {frames} frames not copied: a reader held them"
        except sqlite3.Error as exc:
            busy, why = 1, str(exc)
        if not busy:
            log.error(
                "the WAL %s was %s under the daemon: its commits are checkpointed into %s",
                wal,
                change.how,
                db,
            )
            fault = StorageFault(
                f"{_name(change)} was {change.how} while the daemon ran: it takes no more writes (this one"
                f" was not made). Everything committed before was saved into {db}, so nothing is lost:"
                " restart the daemon (`fleet daemon stop`; the next command starts it again) to take"
                " writes again, and keep other programs away from the files beside the store"
            )
            return Rescued(fault, kept=True, in_place=True)
        log.error(
            "checkpointing after the WAL %s was %s did not finish (%s): saving a copy", wal, change.how, why
        )
    saved = _vacuum_into(conn, db)
    if isinstance(saved, Path):
        try:  # empty our WAL: its frames belong to the old file, never to whatever now has its name
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:
            log.exception("emptying the WAL after the rescue")
        log.error("%s was %s under the daemon: what it had is saved in %s", _name(change), change.how, saved)
        fault = StorageFault(
            f"{_name(change)} was {change.how} while the daemon ran: it takes no more writes. Everything"
            f" it had committed is saved in {saved}: stop the daemon"
            f" (`fleet daemon stop`), put the copy in place (`mv {saved} {db}`, unless the file now at {db}"
            f" is the store you want; remove {wal} and {db}-shm if they are there), then start it again"
        )
        return Rescued(fault, kept=True, in_place=False)
    log.error("%s was %s under the daemon, and saving a copy failed: %s", _name(change), change.how, saved)
    fault = StorageFault(
        f"{_name(change)} was {change.how} while the daemon ran: it takes no more writes, and saving a copy"
        f" of what it had beside {db} failed ({saved}). Do not kill the daemon: make room beside {db}"
        " and send any write (the daemon tries the copy again), or export what it still serves"
        " (`fleet export > FILE.jsonl`)"
    )
    return Rescued(fault, kept=False, in_place=False)


def _vacuum_into(conn: Conn, db: Path) -> Path | str:
    """A copy of what ``conn`` sees in a new file beside ``db`` (0600), or why it could not be made."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest = db.with_name(f"{db.name}.rescued-{stamp}")
    n = 1
    while dest.exists():
        n += 1
        dest = db.with_name(f"{db.name}.rescued-{stamp}-{n}")
    try:
        os.close(
            os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        )  # VACUUM INTO takes an empty file
        conn.execute("VACUUM INTO ?", (str(dest),))
    except (OSError, sqlite3.Error) as exc:
        dest.unlink(missing_ok=True)
        return str(exc)
    return dest
