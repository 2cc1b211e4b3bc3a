"""The store's read-connection pool (fleet.store.schema.Connections) in-process: never more readers than
its size, none shared, renewing moves no descriptor; and which command lines the daemon starts again."""

from __future__ import annotations

import gc
import itertools
import os
import queue
import sqlite3
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.store import schema
from fleet.store.schema import IDLE_READERS as READERS
from fleet.store.schema import Conn, Connections


def db_fds(pid: int, db: Path) -> int:
    """Descriptors of ``pid`` open on the database file, its -wal or its -shm."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target in (str(db), f"{db}-wal", f"{db}-shm"):
            n += 1
    return n


class Worker:
    """A thread that runs what it is sent, one call at a time (so a test drives many threads)."""

    def __init__(self) -> None:
        self.inbox: queue.Queue[Callable[[], object] | None] = queue.Queue()
        self.outbox: queue.Queue[object] = queue.Queue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (fn := self.inbox.get()) is not None:
            try:
                self.outbox.put(fn())
            except BaseException as exc:
                self.outbox.put(exc)

    def call(self, fn: Callable[[], object]) -> object:
        self.inbox.put(fn)
        got = self.outbox.get(timeout=10)
        if isinstance(got, BaseException):
            raise got
        return got

    def end(self) -> None:
        self.inbox.put(None)
        self.thread.join(10)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.sampled_from(["read", "snapshot", "release", "end", "renew"])),
        max_size=40,
    )
)
def test_the_pool_never_opens_more_than_its_readers_nor_shares_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ops: list[tuple[int, str]]
) -> None:
    """Five threads, a pool of three: each op is a thread reading (it takes a reader), reading in a
    snapshot (given back after), giving its reader back, or ending without giving it back. No two
    threads ever hold the same reader; beyond the pool a reader is opened only after the wait, and
    closed when given back; once every thread has given back or ended, the pool is whole again.
    Renewing the pool (after a burst) replaces the idle readers only: a held one stays its
    holder's and keeps working, and the counts do not move."""
    monkeypatch.setattr(schema, "READER_WAIT", 0.01)
    db = Connections(tmp_path / f"pool-{uuid.uuid4().hex}.sqlite3", idle_readers=3)
    workers = [Worker() for _ in range(5)]
    held: dict[int, Conn] = {}

    def read() -> Conn:
        conn = db.reader()
        assert conn.execute("SELECT count(*) FROM migrations").fetchone()[0] > 0
        return conn

    def snap() -> None:
        with db.snapshot() as conn:
            conn.execute("SELECT 1").fetchone()
        db.release_reader()

    try:
        for i, op in ops:
            w = workers[i]
            if op == "read":
                held[i] = cast(sqlite3.Connection, w.call(read))
            elif op == "snapshot":
                w.call(snap)
                held.pop(i, None)
            elif op == "release":
                w.call(db.release_reader)
                held.pop(i, None)
            elif op == "renew":
                db.renew_readers()
                for j, conn in held.items():  # still its holder's, still open
                    assert workers[j].call(read) is conn
            else:
                w.end()
                workers[i] = Worker()
                held.pop(i, None)
                gc.collect()  # the ended thread's local (and its hold) goes with it
            assert len({id(c) for c in held.values()}) == len(held), "two threads hold one reader"
            assert db.held_readers == len(held)
            assert db.open_readers == max(3, len(held))
        for i in list(held):
            workers[i].call(db.release_reader)
        assert db.held_readers == 0
        assert db.open_readers == 3
    finally:
        for w in workers:
            w.end()
        db.close()


def test_renewing_the_readers_moves_no_descriptor(tmp_path: Path) -> None:
    """What :meth:`Connections.renew_readers` counts on: SQLite hands the descriptor of a reader
    closed while the writer holds its lock to the reader opened next, so renewing the pool (after
    every burst) opens none."""
    path = tmp_path / "renew.sqlite3"
    db = Connections(path)
    try:
        db.reader().execute("SELECT count(*) FROM migrations").fetchone()
        db.release_reader()
        before = db_fds(os.getpid(), path)
        for _ in range(5):
            db.renew_readers()
        assert db_fds(os.getpid(), path) == before
        assert db.open_readers == READERS
        assert db.reader().execute("SELECT count(*) FROM migrations").fetchone()[0] > 0
        db.release_reader()
    finally:
        db.close()


@given(st.lists(st.sampled_from(["daemon", "run", "status", "--json", "-v", "x"]), max_size=6))
def test_only_a_daemon_run_command_line_is_started_again(argv: list[str]) -> None:
    from fleet.allocator import runs_the_daemon

    pairs = list(itertools.pairwise(argv))
    assert runs_the_daemon(argv) == (("daemon", "run") in pairs)
