"""One writer per store (docs/design.md §2): an exclusive lock beside the database file.

What a caller may rely on:

- :meth:`StoreLock.acquire` takes an ``flock`` on ``<db>.lock`` (``Paths.store_lock``, mode 0600) or
  raises :class:`~fleet.errors.Conflict` naming who holds it (pid, what, its url and state dir when it
  has said them). So two daemons on one database refuse whatever their state dirs, and ``fleet
  import`` refuses beside a running daemon. The kernel drops the lock when its process dies (even
  by ``kill -9``): a stale lock file never wedges the next start.
- The holder's particulars (:class:`LockHolder`) are written into the lock file itself, where a
  refused process reads them: next to the database, since two daemons on one store need not share
  a state dir (where the endpoint file is).
- The lock file is never removed: removing it would let a newcomer lock a fresh file while the
  holder still holds the old one. A holder found with the path pointing at another file (someone
  removed or replaced it) is taken again on the file the path names now.

Why a file of its own and not an ``flock`` on the database: SQLite locks the database with POSIX
locks, and closing *any* descriptor of a file drops every POSIX lock the process holds on it, so a
descriptor of ours on the database is one careless ``close`` away from breaking SQLite's locking.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path

from fleet import errors
from fleet.paths import ensure_private_dir
from fleet.wire import Record, RecordError, dumps, loads

HOLDER_WAIT = 1.0
"""Seconds a refused process waits for the holder's particulars to be readable (it writes them just
after it takes the lock, and again once it listens)."""

DAEMON_HELD = (
    "use that daemon, or stop it first: `kill {pid}` (SIGTERM, a graceful stop) or `fleet daemon stop`"
    " with the environment it was started in (its FLEET_HOME or XDG_STATE_HOME)"
)
"""What a refused daemon is told to do; ``{pid}`` is the holder's."""


class LockHolder(Record, kw_only=True):
    """``<db>.lock``: who holds the store's lock, written by the holder while it holds it."""

    pid: int
    what: str
    """``the daemon`` or ``fleet import``."""
    url: str = ""
    """The daemon's url, once it listens ("" while it starts, and for an import)."""
    state: str = ""
    """The holder's state dir (where a daemon's endpoint file is)."""
    started_at: float = 0.0


def read_holder(lock: Path) -> LockHolder | None:
    """The particulars in the lock file, or None when it holds none (yet) or cannot be read."""
    try:
        raw = lock.read_bytes()
    except OSError:
        return None
    try:
        return loads(LockHolder, raw) if raw.strip() else None
    except (RecordError, ValueError):  # read while the holder rewrote it, or not written by fleet
        return None


class StoreLock:
    """The held lock on one store; :meth:`release` (or process death) lets it go."""

    def __init__(self, path: Path, fd: int, holder: LockHolder) -> None:
        self.path = path
        self._fd: int | None = fd
        self.holder = holder

    @classmethod
    def acquire(
        cls, lock: Path, db: Path, *, what: str, state: Path | None = None, if_daemon: str = DAEMON_HELD
    ) -> StoreLock:
        """Take the lock ``lock`` of the store ``db`` for ``what`` (``state``: its state dir, if any), or
        raise Conflict naming its holder and what to do (``if_daemon`` when the holder is a daemon,
        ``{pid}`` in it its pid)."""
        ensure_private_dir(lock.parent)
        while True:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise errors.Conflict(cls._refusal(lock, db, what, if_daemon)) from None
            except BaseException:
                os.close(fd)
                raise
            # Locked the file the path named when we opened it; if it was replaced since, that lock
            # guards nothing anyone else will look at: take the one the path names now.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(lock))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        holder = LockHolder(
            pid=os.getpid(), what=what, state=str(state) if state else "", started_at=time.time()
        )
        held = cls(lock, fd, holder)
        held._write()
        return held

    @staticmethod
    def _refusal(lock: Path, db: Path, what: str, if_daemon: str) -> str:
        deadline = time.monotonic() + HOLDER_WAIT
        holder = read_holder(lock)
        while holder is None and time.monotonic() < deadline:
            time.sleep(0.02)
            holder = read_holder(lock)
        if holder is None:
            return (
                f"another process holds the store {db} (lock {lock}; it has not said which): stop it"
                " first (`fuser` on the lock file names it), then try again"
            )
        if holder.what != "the daemon":
            return (
                f"{holder.what} (pid {holder.pid}) is writing the store {db} (lock {lock}): wait for it to"
                " finish, then try again"
            )
        where = f"at {holder.url}" if holder.url else "(still starting: no url yet)"
        state = f", state dir {holder.state}" if holder.state else ""
        return (
            f"a daemon {'already ' if what == 'the daemon' else ''}runs on the store {db}: pid {holder.pid}"
            f" {where} (lock {lock}{state}):"
            f" {if_daemon.format(pid=holder.pid)}"
        )

    def announce(self, url: str) -> None:
        """Say the url the holder listens at (a refused daemon names it)."""
        self.holder.url = url
        self._write()

    def _write(self) -> None:
        if self._fd is None:
            return
        data = (dumps(self.holder) + "\n").encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        """Clear the particulars and let the lock go. Idempotent."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)
        self._fd = None
