"""Storage faults, named (docs/design.md §2): the disk is full, the file system is read-only, the
database is corrupt or empty.

What a caller may rely on:

- :func:`check_database` is what the daemon runs before it opens the store: a read-only file
  system, a 0-byte file (never silently re-initialised as an empty store) and a database that
  ``PRAGMA quick_check`` finds damaged are each a :class:`~fleet.errors.StorageFault` that names the
  cause and what to do. A missing file is fine: it is a new store.
- :func:`storage_faults` turns the SQLite and OS errors of those causes (``SQLITE_FULL``,
  ``SQLITE_READONLY``, ``SQLITE_IOERR``, ``SQLITE_CORRUPT``, ``SQLITE_NOTADB``; ``ENOSPC``,
  ``EDQUOT``, ``EROFS``) into a ``StorageFault``; anything else passes through unchanged. The write
  transaction (:meth:`fleet.store.schema.Connections.write`) runs under it, so a client whose write
  failed gets the typed error (HTTP 507, CLI exit 7), and what was committed before is intact.
- :func:`open_store` is :func:`check_database` and then the :class:`~fleet.store.Store`, under
  :func:`storage_faults`.
- The database or its WAL removed or replaced under a running store is named by
  :mod:`fleet.store.files` (the same StorageFault, raised by the write path).
"""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fleet.errors import StorageFault
from fleet.paths import hide_password

SQLITE_READONLY = 8
SQLITE_IOERR = 10
SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_NOTADB = 26

QUICK_CHECK_SHOWN = 5
"""How many of ``quick_check``'s problems a corrupt-store message quotes."""


def _restore(path: Path | str) -> str:
    return (
        f"stop the daemon, move the file away (`mv {path} {path}.bad`) and restore a backup made by"
        f" `fleet backup` (`cp BACKUP {path}`)"
    )


def disk_full(path: Path | str, detail: str, what: str = "the store") -> StorageFault:
    return StorageFault(
        f"the disk holding {what} {path} is full ({detail}): nothing was written and what was"
        " committed before is intact; free space on that file system, then try again"
    )


def read_only(path: Path | str, detail: str, what: str = "the store") -> StorageFault:
    return StorageFault(
        f"{what} {path} cannot be written: its file system is read-only ({detail}); remount it"
        " read-write (or point FLEET_HOME at a writable place), then try again"
    )


def corrupt(path: Path | str, detail: str) -> StorageFault:
    return StorageFault(f"the store {path} is corrupt ({detail}): {_restore(path)}")


def classify(exc: sqlite3.Error, path: Path | str, what: str = "the store") -> StorageFault | None:
    """The storage fault an SQLite error names, or None when it is not one."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return None
    primary = code & 0xFF
    if primary == SQLITE_FULL:
        return disk_full(path, f"SQLite: {exc}", what)
    if primary == SQLITE_READONLY:
        return StorageFault(
            f"{what} {path} cannot be written (SQLite: {exc}): its file system is read-only or the"
            " file is not writable; nothing was written; remount it read-write (or fix the file's"
            " permissions) and restart the daemon"
        )
    if primary == SQLITE_IOERR:
        return StorageFault(
            f"{what} {path} hit a disk I/O error (SQLite: {exc}): nothing was written; check the"
            " disk (`dmesg`, free space), then restart the daemon"
        )
    if primary in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return corrupt(path, f"SQLite: {exc}")
    return None


def fault_of(exc: BaseException, path: Path | str, what: str = "the store") -> StorageFault | None:
    """The StorageFault ``exc`` is (a full disk, a read-only file system, a corrupt database: see
    :func:`storage_faults`), naming ``what`` at ``path``; None for any other exception."""
    if isinstance(exc, sqlite3.Error):
        return classify(exc, path if isinstance(path, Path) else hide_password(path), what)
    if isinstance(exc, OSError):
        if isinstance(path, str):  # a postgresql:// URL: named without its password
            path = hide_password(path)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return disk_full(path, exc.strerror or str(exc), what)
        if exc.errno == errno.EROFS:
            return read_only(exc.filename or path, exc.strerror or str(exc), what)
    return None


@contextmanager
def storage_faults(path: Path | str, what: str = "the store") -> Iterator[None]:
    """Raise the SQLite and OS errors of a full disk, a read-only file system or a corrupt database
    as :class:`~fleet.errors.StorageFault` (naming ``what`` at ``path``: the store, a backup);
    let every other exception through unchanged."""
    try:
        yield
    except (sqlite3.Error, OSError) as exc:
        fault = fault_of(exc, path, what)
        if fault is None:
            raise
        raise fault from exc


def check_database(path: Path) -> None:
    """Refuse to open a store that cannot be written or trusted (a StorageFault naming why).

    A read-only file system; an empty (0-byte) file, which SQLite would silently treat as a new,
    empty database; a file ``PRAGMA quick_check`` finds damaged (or that is not a database at all).
    A missing file passes: the store is new.
    """
    where = path if path.exists() else path.parent
    if where.exists() and os.statvfs(where).f_flag & os.ST_RDONLY:
        raise read_only(where, "mounted read-only")
    if not path.exists():
        return
    if path.stat().st_size == 0:
        wal = path.with_name(path.name + "-wal")
        size = wal.stat().st_size if wal.exists() else 0
        keep = f" (its {wal.name} beside it, {size} bytes, may hold data: move it with it)" if size else ""
        raise StorageFault(
            f"the store {path} is an empty (0-byte) file, not a database: fleet will not start over"
            f" on it as an empty store. If you have a backup, restore it (`cp BACKUP {path}`); to start"
            f" an empty store instead, move the file away (`mv {path} {path}.empty`){keep}; then start"
            " the daemon again"
        )
    problems: list[Any]
    conn = sqlite3.connect(str(path), timeout=10.0)
    try:
        problems = [r[0] for r in conn.execute(f"PRAGMA quick_check({QUICK_CHECK_SHOWN})")]
    except sqlite3.Error as exc:
        fault = classify(exc, path)
        raise fault or corrupt(path, f"SQLite cannot read it: {exc}") from exc
    finally:
        conn.close()
    if problems != ["ok"]:
        shown = "; ".join(str(p) for p in problems[:QUICK_CHECK_SHOWN])
        raise corrupt(path, f"PRAGMA quick_check: {shown}")
