"""The store's own tests on PostgreSQL: the same tests as on SQLite (tests/unit/test_store*.py), each
store a fresh database of the session's real PostgreSQL (tests/pg.py), and what only several
writers on one database can show.

The SQLite-only tests are left out by name (:data:`SQLITE_ONLY`), each for a reason given there.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pg
import pytest
from test_store import *  # noqa: F403
from test_store_access import *  # noqa: F403
from test_store_summaries import *  # noqa: F403

from fleet.store import MIGRATIONS, OPERATOR_PRINCIPAL, Store, connect, migrate

OP = OPERATOR_PRINCIPAL

SQLITE_ONLY = {
    # they open the file with sqlite3 or build an old SQLite log by hand: SQLite's own
    "test_migrating_an_empty_database_gives_the_final_schema": "asserts sqlite_master",
    "test_a_log_written_before_typed_events_replays_to_the_same_rows": "an SQLite file written by hand",
    "test_a_log_row_that_does_not_fit_stops_replay": "an SQLite file written by hand",
}
for _name in SQLITE_ONLY:
    globals().pop(_name, None)


@pytest.fixture
def store_at(pg_server: pg.Server) -> Callable[[str], str]:
    """A database per name: the same name in one test is the same store (reopened)."""
    made: dict[str, str] = {}

    def at(name: str) -> str:
        if name not in made:
            made[name] = pg_server.database()
        return made[name]

    return at


POSTER = """
import sys, time, uuid, uuid6
from fleet.store import OPERATOR_PRINCIPAL, Store
url, wavelet, tag, skew = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
real = uuid6.uuid7
if skew:  # this host's clock is behind the others' by `skew` seconds
    def uuid7() -> uuid.UUID:
        n = real().int - (int(skew * 1000) << 80)
        return uuid.UUID(int=n)
    uuid6.uuid7 = uuid7
s = Store(url)
print("ready", flush=True)
sys.stdin.readline()
for n in range(80):
    s.post(OPERATOR_PRINCIPAL, wavelet, f"{tag}-{n}")
s.close()
"""


def test_ids_strictly_increase_in_commit_order_with_several_writers_on_one_database(pg_url: str) -> None:
    """Three processes (three daemons' worth), one with its clock a second behind, posting at once
    into one database: every id is greater than every id committed before it (by the log's seq), and
    none repeats. Each writer mints under the transaction's advisory lock after reading the newest id;
    without that, the late clock's ids land below the others'."""
    store = Store(pg_url)
    store.create_wave(OP, "demo", ["alice"])
    main = store.resolve(OP, "demo/main").id
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", POSTER, pg_url, main, f"p{i}", "1.0" if i == 0 else "0"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:  # all at once
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        assert p.wait(120) == 0
    conn = connect(pg_url)
    by_commit = [
        json.loads(r[0])["blip"]["id"]
        for r in conn.execute("SELECT payload FROM events WHERE type = 'blip.posted' ORDER BY seq")
    ]
    conn.close()
    store.close()
    assert len(by_commit) == 240 and len(set(by_commit)) == 240
    out_of_order = [(a, b) for a, b in itertools.pairwise(by_commit) if not a < b]
    assert not out_of_order, f"{len(out_of_order)} ids not above the one before: {out_of_order[:3]}"


def test_migrating_an_empty_database_gives_the_tables_and_columns_sqlite_has(
    pg_url: str, tmp_path: Path
) -> None:
    """The same migrations on both engines give the same tables, columns and primary keys."""
    lite, pgc = connect(tmp_path / "x.sqlite3"), connect(pg_url)
    assert migrate(lite) == migrate(pgc) == [name for name, _ in MIGRATIONS]
    assert migrate(pgc) == []  # recorded: applied once
    tables = [r[0] for r in lite.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for table in tables:
        if table == "sqlite_sequence":
            continue
        ours = [r["name"] for r in lite.execute(f"PRAGMA table_info({table})")]
        theirs = [
            r[0]
            for r in pgc.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ?"
                " ORDER BY ordinal_position",
                (table,),
            )
        ]
        assert ours == theirs, table
    lite.close()
    pgc.close()
