"""The WAL is checkpointed beside the writer, not in its commits (fleet.store.schema.Connections.
checkpoint, run by the store's watcher thread every CHECKPOINT_COMMITS commits), and the store's
timestamps. Real SQLite files: what the database file itself holds is read with an immutable
connection, which ignores the WAL."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet import errors
from fleet.store import OPERATOR_PRINCIPAL as OP
from fleet.store import Store, schema
from fleet.store.schema import CHECKPOINT_COMMITS


@pytest.fixture
def store(sqlite_store: Store) -> Store:
    return sqlite_store


def in_the_file(path: Path | str) -> int:
    """Blips the database file holds without its WAL (what a checkpoint has copied into it)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        if conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'blips'").fetchone()[0] == 0:
            return 0  # not even the schema was checkpointed yet
        return int(conn.execute("SELECT count(*) FROM blips").fetchone()[0])
    finally:
        conn.close()


def posts(store: Store, n: int) -> None:
    root = store.create_wave(OP, f"w{time.monotonic_ns()}", ["alice"]).root_id
    for i in range(n):
        store.post(OP, root, f"post {i} " + "x" * 600)


def test_commits_do_not_checkpoint_the_wal_themselves(store: Store) -> None:
    """400 commits of ~3 pages each: SQLite's default would have checkpointed in a commit at 1,000
    pages; here nothing reaches the database file while the watcher's checkpoints are held."""
    with patch.object(schema.Connections, "checkpoint", lambda self: None):
        posts(store, 400)
    assert in_the_file(store.path) == 0


def test_the_watcher_checkpoints_every_hundred_commits(store: Store) -> None:
    posts(store, CHECKPOINT_COMMITS + 5)
    deadline = time.monotonic() + 10
    while in_the_file(store.path) == 0:
        assert time.monotonic() < deadline, "no checkpoint 10 s after 100 commits"
        time.sleep(0.02)
    assert in_the_file(store.path) >= CHECKPOINT_COMMITS - 5


def test_closing_leaves_everything_in_the_file_and_no_wal(tmp_path: Path) -> None:
    s = Store(tmp_path / "fleet.sqlite3")
    posts(s, 30)
    s.close()
    assert not (tmp_path / "fleet.sqlite3-wal").exists()
    assert in_the_file(tmp_path / "fleet.sqlite3") == 30 + 1  # and the wave's creation blip


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["post", "checkpoint", "reopen"]), max_size=40))
def test_checkpoints_anywhere_change_nothing_anyone_reads(
    tmp_path_factory: pytest.TempPathFactory, steps: list[str]
) -> None:
    path = tmp_path_factory.mktemp("ckpt") / "fleet.sqlite3"
    s = Store(path)
    root = s.create_wave(OP, "w", ["alice"]).root_id
    written: list[str] = []
    try:
        for i, step in enumerate(steps):
            if step == "post":
                written.append(s.post(OP, root, f"p{i}").id)
            elif step == "checkpoint":
                s._db.checkpoint()
            else:
                s.close()
                s = Store(path)
            assert [b.id for b in s.read(OP, root)][1:] == written
    finally:
        s.close()


@settings(deadline=None)
@given(st.integers(0, 4_102_444_800_000_000_000))
def test_now_is_the_iso_text_of_the_clocks_millisecond(ns: int) -> None:
    with patch("fleet.store.schema.time.time_ns", lambda: ns):
        made = schema.now()
    expected = datetime.fromtimestamp(ns // 1_000_000 / 1000, UTC).isoformat(timespec="milliseconds")
    assert made == expected.replace("+00:00", "Z")


def test_a_wal_removed_while_checkpoints_run_is_still_saved_in_place(tmp_path: Path) -> None:
    """The rescue of a removed WAL checkpoints it into the database file; SQLite refuses a second
    checkpoint at once (busy), so one the watcher was running made the rescue save a copy instead
    and refuse the commit that found it. Checkpoints in a tight loop beside the writes: the rescue
    still saves in place."""
    path = tmp_path / "fleet.sqlite3"
    s = Store(path)
    root = s.create_wave(OP, "w", ["alice"]).root_id
    stop = threading.Event()

    def checkpoints() -> None:
        while not stop.is_set():
            s._db.checkpoint()

    t = threading.Thread(target=checkpoints)
    t.start()
    try:
        for i in range(30):
            s.post(OP, root, f"before {i} " + "x" * 2000)
        os.unlink(f"{path}-wal")
        s.post(OP, root, "the one that finds it")  # acknowledged: its commit is saved in place
        with pytest.raises(errors.StorageFault) as refused:
            s.post(OP, root, "after")
        assert "restart the daemon" in refused.value.message, refused.value.message
    finally:
        stop.set()
        t.join()
        s.close()
    assert not list(tmp_path.glob("*.rescued-*"))
    assert in_the_file(path) == 32  # the wave's creation blip, 30, and the one that found it
