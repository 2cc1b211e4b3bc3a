"""The store as an artifact (docs/design.md §2), through the CLI a user runs against real daemons:
``fleet backup`` while another thread posts, ``fleet export`` → ``fleet import`` into a fresh store
(identical reads), a wave imported into a store that already holds it (refused, nothing changed),
and ``fleet replay --check`` on a healthy and on a tampered store. (What an import refuses of a crafted
or damaged file, and exports without tokens: tests/component/test_artifact_import.py.)
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import retry_until
from test_cli import base_env

from fleet import wire
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.models import Wave
from fleet.paths import Paths
from fleet.store import OPERATOR_PRINCIPAL, Store, dump_tables, migrate
from fleet.store.events import apply, parse
from fleet.store.schema import connect


def fleet(
    *args: str, home: Path, stdout: Any = subprocess.PIPE, **extra: str
) -> subprocess.CompletedProcess[str]:
    """``python -m fleet ARGS`` as a user of the local store in ``home`` (no FLEET_DAEMON)."""
    env = base_env(FLEET_HOME=str(home), **extra)
    if "FLEET_DAEMON" not in extra:
        env.pop("FLEET_DAEMON", None)
    if "FLEET_TOKEN" not in extra:
        env.pop("FLEET_TOKEN", None)
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
    )


def ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, (r.args, r.returncode, r.stdout, r.stderr)
    return r.stdout or ""


def refused(r: subprocess.CompletedProcess[str], code: int, *named: str) -> str:
    assert r.returncode == code, (r.args, r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    for word in named:
        assert word in r.stderr, (word, r.stderr)
    return r.stderr


def paths_in(home: Path) -> Paths:
    return Paths(home / "data", home / "state", home / "config", home / "logs")


@pytest.fixture
def other_daemons() -> Iterator[list[Daemon]]:
    """Daemons a test starts on other stores; stopped at teardown."""
    started: list[Daemon] = []
    yield started
    for d in started:
        d.stop()


def serve(home: Path, started: list[Daemon]) -> tuple[Daemon, Client]:
    d = Daemon(paths_in(home), listen="127.0.0.1:0")
    d.start()
    started.append(d)
    return d, Client(d.url, d.operator_token)


def build_state(op: Client) -> dict[str, str]:
    """Two waves exercising every kind of event; returns a participant token of wave w."""
    w = op.create_wave("w", ["alice", "bob"])
    first = op.post(w.root_id, "hello", as_="alice")
    op.post(w.root_id, "hi alice", as_="bob")
    op.replace(first.id, "hello, edited", as_="alice")
    side = op.fork(w.root_id, "side", ["alice"], private=True)
    found = op.post(side.id, "a secret", as_="alice")
    op.surface(side.id, "side is done", source_blip_id=found.id, as_="alice")
    op.invite(side.id, "carol")
    op.leave(side.id, "carol")
    op.set_topic(side.id, "the secret side, in one line", as_="alice")
    alice = op.mint_token("w", "alice")
    spare = op.mint_token("w", "bob")
    op.revoke_token(token_id=spare.id)
    v = op.create_wave("v", ["dave"])
    op.post(v.root_id, "other wave", as_="dave")
    return {"alice": alice.token}


def reads(op: Client) -> dict[str, Any]:
    """What a user can read of a store, as wire JSON."""
    waves = op.list_waves()
    got: dict[str, Any] = {"waves": wire.dump(waves), "tokens": wire.dump(op.list_tokens())}
    for listed in waves:
        wave: Wave = op.get_wave(listed.id)
        got[f"wave {wave.name}"] = wire.dump(wave)
        for wl in wave.wavelets:
            got[f"read {wl.id}"] = wire.dump(op.read(wl.id, history=True))
    return got


def log_of(db: Path) -> list[tuple[str, str, str]]:
    conn = sqlite3.connect(db)
    try:
        return [tuple(r) for r in conn.execute("SELECT type, payload, created_at FROM events ORDER BY seq")]
    finally:
        conn.close()


def tables_of(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = connect(db, readonly=True)
    try:
        return dump_tables(conn)
    finally:
        conn.close()


def test_backup_while_posting_is_the_source_at_one_point(
    daemon: Daemon, operator: Client, tmp_path: Path
) -> None:
    home = daemon.paths.data.parent
    wave = operator.create_wave("w", ["alice"])
    posted: list[str] = []
    stop = threading.Event()

    def post() -> None:
        poster = Client(daemon.url, daemon.operator_token)
        while not stop.is_set():
            posted.append(poster.post(wave.root_id, f"blip {len(posted)}", as_="alice").id)

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    try:
        retry_until(lambda: len(posted) >= 20, timeout=30, what="20 posts before the backup")
        copy = tmp_path / "backup.sqlite3"
        out = ok(fleet("backup", str(copy), home=home))
        after_backup = len(posted)
        retry_until(lambda: len(posted) >= after_backup + 20, timeout=30, what="20 posts after the backup")
    finally:
        stop.set()
        thread.join(30)
    assert "backed up" in out and str(copy) in out
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert not Path(f"{copy}-wal").exists()  # one self-contained file
    conn = sqlite3.connect(copy)
    assert conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]
    assert conn.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()[0] == daemon._s.store_id
    conn.close()
    source, copied = log_of(daemon.paths.db), log_of(copy)
    assert 0 < len(copied) < len(source)  # taken while posts went on before and after it
    assert copied == source[: len(copied)]  # a prefix of the log: one committed state
    # ... and its tables are exactly what the source's first N events make.
    scratch = connect(":memory:")
    migrate(scratch)
    for etype, payload, _at in copied:
        apply(scratch, parse(etype, payload))
    assert tables_of(copy) == dump_tables(scratch)
    # It works on this machine's file: with FLEET_DAEMON naming another daemon it refuses.
    elsewhere = tmp_path / "elsewhere.sqlite3"
    r = fleet("backup", str(elsewhere), home=home, FLEET_DAEMON="http://127.0.0.1:9")
    refused(r, 2, "FLEET_DAEMON names another daemon")
    assert not elsewhere.exists()
    # A copy over an existing file needs --force; the existing file is left as it was.
    before = copy.read_bytes()
    refused(fleet("backup", str(copy), home=home), 1, "already exists", "--force")
    assert copy.read_bytes() == before


def test_export_then_import_into_a_fresh_store_reads_the_same(
    daemon: Daemon, operator: Client, tmp_path: Path, other_daemons: list[Daemon]
) -> None:
    home = daemon.paths.data.parent
    tokens = build_state(operator)
    export = tmp_path / "all.jsonl"
    with export.open("w") as f:
        r = fleet("export", "--with-tokens", home=home, stdout=f)
    ok(r)
    assert stat.S_IMODE(export.stat().st_mode) == 0o600  # it holds private wavelets and token hashes
    lines = export.read_text().splitlines()
    assert json.loads(lines[0])["format"] == "fleet-events"
    assert json.loads(lines[-1])["events"] == len(lines) - 2 == len(log_of(daemon.paths.db))
    # Exporting is the operator's: a participant token is refused.
    refused(fleet("export", home=home, FLEET_TOKEN=tokens["alice"]), 5, "operator")

    fresh = tmp_path / "fresh"
    out = ok(fleet("import", "--with-tokens", str(export), home=fresh))
    assert "imported" in out and "w, v" in out
    target, target_op = serve(fresh, other_daemons)
    assert target._s.store_id != daemon._s.store_id  # another store, with the same content
    assert reads(target_op) == reads(operator)
    assert tables_of(paths_in(fresh).db) == tables_of(daemon.paths.db)
    assert log_of(paths_in(fresh).db) == log_of(daemon.paths.db)
    # The same ids: alice's token works there too, and new posts get later ids.
    alice = Client(target.url, tokens["alice"])
    assert alice.whoami().principal == "alice"
    main = target_op.resolve("w/main")
    newest = target_op.read(main.id).blips[-1].id
    assert alice.post(main.id, "after the import").id > newest


def test_a_wave_imported_into_a_store_that_holds_it_is_refused_and_nothing_changes(
    daemon: Daemon, operator: Client, tmp_path: Path
) -> None:
    home = daemon.paths.data.parent
    build_state(operator)
    export = tmp_path / "w.jsonl"
    with export.open("w") as f:
        ok(fleet("export", "w", home=home, stdout=f))
    rows = [json.loads(x) for x in export.read_text().splitlines()[1:-1]]
    assert rows and all("dave" not in json.dumps(x) for x in rows)  # wave v's events are left out

    # The source holds it, and its daemon runs: refused before anything is read into it.
    refused(fleet("import", str(export), home=home), 1, "daemon runs", "fleet daemon stop")

    once = tmp_path / "once"
    ok(fleet("import", str(export), home=once))
    db = paths_in(once).db
    tables, log = tables_of(db), log_of(db)
    assert [w[1] for w in tables["waves"]] == ["w"]
    refused(
        fleet("import", str(export), home=once), 2, "line 2", "already holds wave 'w'", "nothing was imported"
    )
    assert tables_of(db) == tables and log_of(db) == log

    # Another store with its own wave named w: refused the same way.
    named = tmp_path / "named"
    paths_in(named).data.mkdir(parents=True)
    store = Store(paths_in(named).db)
    store.create_wave(OPERATOR_PRINCIPAL, "w", ["zed"])
    store.close()
    tables, log = tables_of(paths_in(named).db), log_of(paths_in(named).db)
    refused(fleet("import", str(export), home=named), 2, "another wave of that name")
    assert tables_of(paths_in(named).db) == tables and log_of(paths_in(named).db) == log

    # A row whose wave is neither in the file nor in the store: refused, and no empty store is left.
    # (Sealed with a trailer of its own: what stops it is the check, not the trailer.)
    orphan = tmp_path / "orphan.jsonl"
    head, *rest = export.read_text().splitlines()
    posted = next(x for x in rest if json.loads(x)["type"] == "blip.posted")
    body = f"{head}\n{posted}\n"
    digest = hashlib.sha256(body.encode()).hexdigest()
    orphan.write_text(body + json.dumps({"end": "fleet-events", "events": 1, "sha256": digest}) + "\n")
    nowhere = tmp_path / "nowhere"
    refused(fleet("import", str(orphan), home=nowhere), 2, "line 2 (blip.posted)", "not created earlier")
    assert not paths_in(nowhere).db.exists()

    # Not an export at all: a usage error naming the line.
    junk = tmp_path / "junk.jsonl"
    junk.write_text('{"format": "fleet-events", "version": 1}\n{"type": "blip.posted"\n')
    refused(fleet("import", str(junk), home=named), 2, "line 2", "not JSON")
    assert tables_of(paths_in(named).db) == tables


def test_replay_check_passes_on_a_healthy_store_and_names_a_tampered_row(
    daemon: Daemon, operator: Client
) -> None:
    home = daemon.paths.data.parent
    build_state(operator)
    out = ok(fleet("replay", "--check", home=home))
    assert "matches its event log" in out
    main = operator.resolve("w/main")
    blip = operator.read(main.id).blips[-1]
    conn = sqlite3.connect(daemon.paths.db)
    conn.execute("UPDATE blips SET text = 'tampered' WHERE id = ?", (blip.id,))
    conn.execute("DELETE FROM members WHERE name = 'bob'")
    conn.commit()
    conn.close()
    r = fleet("replay", "--check", home=home)
    refused(r, 1, "differs from what its event log rebuilds in 2 place(s)", "restore a backup")
    assert f"blips {blip.id}: text is 'tampered' in the store, {blip.text!r} from the log" in r.stdout
    assert f"members {main.id}/bob: rebuilt from the log, missing from the store" in r.stdout
    refused(fleet("replay", home=home), 2, "--check")
    assert os.path.exists(daemon.paths.db)


def test_export_pages_through_a_long_log_and_a_wave_export_skips_other_waves(
    daemon: Daemon, operator: Client, tmp_path: Path
) -> None:
    home = daemon.paths.data.parent
    v = operator.create_wave("v", ["dave"])
    operator.post(v.root_id, "the one blip of v", as_="dave")
    w = operator.create_wave("w", ["alice"])
    for i in range(1100):  # more than one page (1,000 rows) of another wave's events
        operator.post(w.root_id, f"blip {i}", as_="alice")
    operator.post(v.root_id, "v again, after them", as_="dave")
    total = len(log_of(daemon.paths.db))
    assert total > 1000
    lines = ok(fleet("export", home=home)).splitlines()
    assert [json.loads(x)["seq"] for x in lines[1:-1]] == list(range(1, total + 1))
    rows = [json.loads(x) for x in ok(fleet("export", "v", home=home)).splitlines()[1:-1]]
    assert [r["type"] for r in rows] == ["wave.created", "blip.posted", "blip.posted"]
    assert rows[-1]["payload"]["blip"]["text"] == "v again, after them"
    # The API pages by `limit` and hands back a cursor; every row once, in order.
    seen: list[int] = []
    after = 0
    while True:
        page = operator.events(after=after, limit=7)
        seen.extend(r.seq for r in page.events)
        if not page.more:
            break
        after = page.cursor
    assert seen == list(range(1, total + 1))
