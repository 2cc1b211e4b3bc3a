"""One daemon per store, and a watched WAL (docs/design.md §2).

Real daemon processes (``python -m fleet daemon run``) on real files:

- Two daemons on one database with two state dirs (one ``XDG_DATA_HOME``, two ``XDG_STATE_HOME``):
  the second refuses (exit 1, Conflict) naming the first's pid and url; ``fleet import`` beside a
  running daemon refuses the same way and changes nothing; a ``kill -9``'d daemon leaves no lock that
  wedges the next start.
- The WAL unlinked while clients post: the next write fails with the named storage fault (HTTP 507;
  ``fleet post`` exits 7 with the message), and every write acknowledged (201) before is there after a
  ``kill -9`` and a restart. The database file removed or replaced: the same refusal, and what the
  daemon had is in the rescued copy it names.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import retry_until
from httphelp import Http
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from test_cli import base_env
from test_daemon_crash import DaemonProc
from test_storage_faults import cli

from fleet import errors
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths
from fleet.store import OPERATOR_PRINCIPAL, Store
from fleet.store import lock as lock_module
from fleet.store.artifact import backup
from fleet.store.lock import StoreLock, read_holder


def xdg_paths(data_home: Path, state_home: Path) -> Paths:
    """Where fleet puts things with no FLEET_HOME and these XDG dirs (platformdirs' Linux layout)."""
    state = state_home / "fleet"
    return Paths(data_home / "fleet", state, data_home.parent / "config" / "fleet", state / "log")


def xdg_env(paths: Paths) -> dict[str, str]:
    env = base_env(
        XDG_DATA_HOME=str(paths.data.parent),
        XDG_STATE_HOME=str(paths.state.parent),
        XDG_CONFIG_HOME=str(paths.config.parent),
    )
    env.pop("FLEET_HOME", None)
    return env


@dataclass
class Proc(DaemonProc):
    """A daemon process (tests/component/test_daemon_crash.py) started with ``env``: its own data and
    state dirs."""

    env: dict[str, str] = field(default_factory=dict)

    def cli_env(self) -> dict[str, str]:
        return {**self.env, "FLEET_DAEMON": self.url, "FLEET_TOKEN": self.token}


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """Start daemon processes (``ready=False``: do not wait for it); any left running is SIGKILLed."""
    procs: list[Proc] = []

    def spawn(paths: Paths, env: dict[str, str], *, ready: bool = True) -> Proc:
        log = tmp_path / f"daemon-{len(procs)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "fleet", "daemon", "run", "--listen", "127.0.0.1:0"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        d = Proc(paths, log, proc, env=env)
        procs.append(d)
        return d.wait_ready() if ready else d

    yield spawn
    for d in procs:
        if d.proc.poll() is None:
            d.proc.kill()
        d.proc.wait(10)


def two_state_dirs(tmp_path: Path) -> tuple[tuple[Paths, dict[str, str]], tuple[Paths, dict[str, str]]]:
    """One data dir, two state dirs: the layout two daemons on one store had."""
    a = xdg_paths(tmp_path / "share", tmp_path / "state-a")
    b = xdg_paths(tmp_path / "share", tmp_path / "state-b")
    assert a.db == b.db and a.state != b.state
    return (a, xdg_env(a)), (b, xdg_env(b))


def test_fleet_paths_is_the_layout_the_tests_assume(tmp_path: Path) -> None:
    (a, env), _ = two_state_dirs(tmp_path)
    shown = json.loads(cli("paths", "--json", env=env).stdout)
    assert (shown["db"], shown["endpoint"]) == (str(a.db), str(a.endpoint))
    assert shown["store_lock"] == str(a.db) + ".lock"


def symlinked_homes(tmp_path: Path) -> tuple[tuple[Paths, dict[str, str]], tuple[Paths, dict[str, str]]]:
    """Two FLEET_HOMEs, the second's data/ a symlink to the first's: one store under two names."""
    homes = [tmp_path / "home-a", tmp_path / "home-b"]
    (homes[0] / "data").mkdir(parents=True)
    homes[1].mkdir()
    (homes[1] / "data").symlink_to(homes[0] / "data")
    return tuple(  # type: ignore[return-value]
        (Paths(h / "data", h / "state", h / "config", h / "logs"), base_env(FLEET_HOME=str(h))) for h in homes
    )


@pytest.mark.parametrize("layout", [two_state_dirs, symlinked_homes], ids=["xdg", "symlinked-home"])
def test_a_second_daemon_on_the_same_store_refuses_whatever_its_state_dir(
    tmp_path: Path,
    start: Callable[..., Proc],
    layout: Callable[[Path], tuple[tuple[Paths, dict[str, str]], ...]],
) -> None:
    (a, env_a), (b, env_b) = layout(tmp_path)
    first = start(a, env_a)
    root = first.http().new_wave("w").ok(201)["root_id"]
    second = start(b, env_b, ready=False)
    try:
        code = second.proc.wait(20)
    except subprocess.TimeoutExpired:
        pytest.fail(f"a second daemon started on the same store: {second.log.read_text()[-2000:]}")
    said = second.log.read_text()
    assert code == errors.Conflict.exit_code, said
    assert "Traceback" not in said, said
    assert f"pid {first.proc.pid}" in said and first.url in said, said
    assert str(b.db) in said and "fleet daemon stop" in said, said  # the store as the refused one names it
    assert not b.endpoint.exists(), "the refused daemon left an endpoint file"
    # The first is untouched: still serving, its lock file 0600 and naming it.
    first.http().post_blip(root, "still here").ok(201)
    assert stat.S_IMODE(a.store_lock.stat().st_mode) == 0o600
    holder = read_holder(a.store_lock)
    assert holder is not None and (holder.pid, holder.url) == (first.proc.pid, first.url)


def test_a_command_from_another_state_dir_names_the_daemon_on_its_store_instead_of_starting_one(
    tmp_path: Path, start: Callable[..., Proc]
) -> None:
    (a, env_a), (b, env_b) = two_state_dirs(tmp_path)
    first = start(a, env_a)
    # No daemon in b's state dir, so the command auto-starts one: it is refused on the store, and the
    # command says so (Conflict, exit 1, naming the daemon to use), not "unreachable" (retried forever).
    r = cli("wave", "list", env=env_b)
    assert r.returncode == errors.Conflict.exit_code, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    for word in ("a daemon already runs on the store", f"pid {first.proc.pid}", first.url):
        assert word in r.stderr, (word, r.stderr)
    assert not b.endpoint.exists()


def test_fleet_import_beside_a_running_daemon_refuses_and_changes_nothing(
    tmp_path: Path, start: Callable[..., Proc]
) -> None:
    (a, env_a), (_b, env_b) = two_state_dirs(tmp_path)
    first = start(a, env_a)
    first.http().new_wave("w").ok(201)
    # An export of another store's wave (a daemon on a FLEET_HOME of its own) to import.
    other = Daemon(
        Paths(
            tmp_path / "other/data",
            tmp_path / "other/state",
            tmp_path / "other/config",
            tmp_path / "other/logs",
        ),
        listen="127.0.0.1:0",
    )
    other.start()
    try:
        Client(other.url, other.operator_token).create_wave("x", ["alice"])
        exported = cli("export", env=base_env(FLEET_DAEMON=other.url, FLEET_TOKEN=other.operator_token))
    finally:
        other.stop()
    assert exported.returncode == 0, exported.stderr
    export = tmp_path / "x.jsonl"
    export.write_text(exported.stdout)
    before = first.http().get("/v1/waves").ok(200)
    # from another state dir and from the daemon's own; the file named, and piped in (`-`)
    for env, how in ((env_b, "file"), (env_a, "file"), (env_b, "-"), (env_a, "-")):
        if how == "file":
            r = cli("import", str(export), env=env)
        else:
            r = cli("import", "-", env=env, stdin=exported.stdout)
        assert r.returncode == errors.Conflict.exit_code, (how, r.returncode, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr, r.stderr
        for word in (
            "a daemon runs on the store",
            f"pid {first.proc.pid}",
            first.url,
            "fleet daemon stop",
        ):
            assert word in r.stderr, (how, word, r.stderr)
    assert first.http().get("/v1/waves").ok(200) == before
    # Stopped, the import goes through (and the lock it took does not stop the next start).
    first.proc.send_signal(signal.SIGTERM)
    assert first.proc.wait(15) == 0
    r = cli("import", "-", env=env_b, stdin=exported.stdout)  # the file form: test_artifact_import.py
    assert r.returncode == 0, r.stderr
    again = start(a, env_a)
    assert {w["name"] for w in again.http().get("/v1/waves").ok(200)["waves"]} == {"w", "x"}


def test_a_killed_daemon_leaves_no_lock_that_wedges_the_next_start(
    tmp_path: Path, start: Callable[..., Proc]
) -> None:
    (a, env_a), (b, env_b) = two_state_dirs(tmp_path)
    first = start(a, env_a)
    first.proc.kill()
    assert first.proc.wait(10) == -signal.SIGKILL
    assert read_holder(a.store_lock) is not None  # its particulars outlive it; the lock does not
    second = start(b, env_b)  # another state dir: only the store's lock could have stopped it
    holder = read_holder(a.store_lock)
    assert holder is not None and (holder.pid, holder.url) == (second.proc.pid, second.url)
    second.proc.kill()
    second.proc.wait(10)
    start(a, env_a)  # and the first state dir's own lock did not wedge either


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.binary(max_size=300))
def test_whatever_the_lock_file_holds_a_refusal_is_a_clean_conflict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, junk: bytes
) -> None:
    monkeypatch.setattr(lock_module, "HOLDER_WAIT", 0.0)  # no holder to wait for: it is this test
    db = tmp_path / "fleet.sqlite3"
    lock = tmp_path / "fleet.sqlite3.lock"
    lock.unlink(missing_ok=True)
    lock.write_bytes(junk)
    held = StoreLock.acquire(lock, db, what="the daemon")  # a stale file never stops a start
    try:
        held.announce("http://127.0.0.1:1")
        lock.write_bytes(junk)  # the holder's particulars overwritten by anything at all
        with pytest.raises(errors.Conflict) as refused:
            StoreLock.acquire(lock, db, what="fleet import")
        said = refused.value.message
        assert str(db) in said and str(lock) in said
        if read_holder(lock) is None:
            assert "has not said which" in said
    finally:
        held.release()
    StoreLock.acquire(lock, db, what="fleet import").release()


# ---------------------------------------------------------------- the watched WAL


@dataclass
class Poster:
    """Posts unique texts until told to stop or refused; a new connection every ``fresh`` posts (so
    new read connections open after the files changed, too)."""

    url: str
    token: str
    wavelet: str
    tag: str
    fresh: int = 0
    acked: dict[str, str] = field(default_factory=dict)
    refused: list[tuple[int, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def run(self) -> None:
        h = Http(self.url, self.token, timeout=20)
        i = 0
        try:
            while not self.stop.is_set():
                if self.fresh and i and i % self.fresh == 0:
                    h.close()
                    h = Http(self.url, self.token, timeout=20)
                text = f"{self.tag}-{i}"
                i += 1
                r = h.post_blip(self.wavelet, text)
                if r.status == 201:
                    self.acked[text] = r.body["id"]
                    continue
                self.refused.append((r.status, r.raw.decode(errors="replace")))
                return
        except (OSError, http.client.HTTPException) as exc:
            self.error = exc
        finally:
            h.close()

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.run, name=f"poster-{self.tag}", daemon=True)
        t.start()
        return t


def post_then(d: Proc, root: str, cut: Callable[[], None], n: int = 4) -> list[Poster]:
    """Clients post until 150 are acked, then ``cut()`` runs while they go on: returns them once
    each was refused (or errored)."""
    posters = [Poster(d.url, d.token, root, f"t{k}", fresh=7 * k) for k in range(n)]
    threads = [p.start() for p in posters]
    retry_until(lambda: sum(len(p.acked) for p in posters) >= 150, timeout=30, what="150 acked posts")
    cut()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a client was still being acknowledged after the cut"
    for p in posters:
        assert p.error is None, p.error
        assert p.refused and p.refused[0][0] == 507, p.refused
        assert json.loads(p.refused[0][1])["error"]["kind"] == "storage"
    return posters


def texts(db: Path) -> set[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return {t for (t,) in conn.execute("SELECT text FROM blips WHERE kind = 'message'")}
    finally:
        conn.close()


def acked_of(posters: list[Poster]) -> set[str]:
    return {t for p in posters for t in p.acked}


def test_the_wal_unlinked_under_a_running_daemon_stops_writes_and_loses_nothing_acked(
    fleet_env: Paths, start: Callable[..., Proc]
) -> None:
    env = base_env(FLEET_HOME=str(fleet_env.data.parent))
    d = start(fleet_env, env)
    root = d.http().new_wave("w").ok(201)["root_id"]
    wal = Path(str(fleet_env.db) + "-wal")
    posters = post_then(d, root, lambda: os.unlink(wal))
    acked = acked_of(posters)
    message = json.loads(posters[0].refused[0][1])["error"]["message"]
    assert f"write-ahead log {wal} was removed" in message and "restart the daemon" in message, message
    # The CLI: the same named fault, exit 7, no traceback, nothing written.
    r = cli("post", "w/main", "after the cut", env=d.cli_env())
    assert r.returncode == errors.StorageFault.exit_code, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "was removed while the daemon ran" in r.stderr, r.stderr
    assert r.stdout == ""
    # Reads are still answered, with everything acknowledged.
    shown = {b["text"] for b in d.http().read(root, "limit=5000").ok(200)["blips"]}
    assert acked <= shown
    # The harshest restart: every acknowledged write is in the database file itself.
    d.proc.kill()
    d.proc.wait(10)
    stored = texts(fleet_env.db)
    assert acked <= stored, f"{len(acked - stored)} of {len(acked)} acknowledged writes lost"
    assert "after the cut" not in stored
    again = start(fleet_env, env)
    again.http().post_blip(root, "after the restart").ok(201)
    assert acked | {"after the restart"} <= texts(fleet_env.db)


def test_the_wal_unlinked_under_an_idle_daemon_is_saved_within_a_second(
    fleet_env: Paths, start: Callable[..., Proc]
) -> None:
    env = base_env(FLEET_HOME=str(fleet_env.data.parent))
    d = start(fleet_env, env)
    h = d.http()
    root = h.new_wave("w").ok(201)["root_id"]
    acked = {h.post_blip(root, f"idle-{i}").ok(201)["text"] for i in range(100)}
    os.unlink(str(fleet_env.db) + "-wal")
    # No write comes: the daemon's watcher notices on its own, saves what the WAL held, says so.
    retry_until(lambda: "was removed under the daemon" in d.log.read_text(), timeout=5, what="the watcher")
    r = cli("post", "w/main", "after", env=d.cli_env())
    assert r.returncode == errors.StorageFault.exit_code and "restart the daemon" in r.stderr, r.stderr
    d.proc.kill()
    d.proc.wait(10)
    stored = texts(fleet_env.db)
    assert acked <= stored, f"{len(acked - stored)} of {len(acked)} acknowledged writes lost"


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_the_database_file_removed_or_replaced_stops_writes_and_the_rescue_holds_every_ack(
    fleet_env: Paths, start: Callable[..., Proc], tmp_path: Path, how: str
) -> None:
    env = base_env(FLEET_HOME=str(fleet_env.data.parent))
    d = start(fleet_env, env)
    root = d.http().new_wave("w").ok(201)["root_id"]
    old = tmp_path / "old.sqlite3"
    assert cli("backup", str(old), env=env).returncode == 0  # what an operator might "restore" live

    def cut() -> None:
        if how == "removed":
            os.unlink(fleet_env.db)
        else:
            os.replace(old, fleet_env.db)

    posters = post_then(d, root, cut)
    acked = acked_of(posters)
    message = json.loads(posters[0].refused[0][1])["error"]["message"]
    assert f"the store's file {fleet_env.db} was {how}" in message, message
    found = re.search(r"saved in (\S+): stop the daemon", message)
    assert found, message
    rescued = Path(found.group(1))
    assert stat.S_IMODE(rescued.stat().st_mode) == 0o600
    r = cli("post", "w/main", "after the cut", env=d.cli_env())
    assert r.returncode == errors.StorageFault.exit_code and "Traceback" not in r.stderr, r.stderr
    assert f"was {how} while the daemon ran" in r.stderr, r.stderr
    d.proc.kill()
    d.proc.wait(10)
    assert acked <= texts(rescued), f"{len(acked - texts(rescued))} acknowledged writes not in the copy"
    # The remedy the message gives: the copy in place, the files beside it removed, start again.
    shutil.move(rescued, fleet_env.db)
    for suffix in ("-wal", "-shm"):
        Path(str(fleet_env.db) + suffix).unlink(missing_ok=True)
    again = start(fleet_env, env)
    shown = {b["text"] for b in again.http().read(root, "limit=5000").ok(200)["blips"]}
    assert acked <= shown
    again.http().post_blip(root, "after the restart").ok(201)


# ---------------------------------------------------------------- the same, as a property


def saved_texts(db: Path, fault: str | None, scratch: Path) -> set[str]:
    """What a restart after ``kill -9`` would find: the database file alone when no fault named a
    copy (the WAL may be gone), else the copy the fault names."""
    found = re.search(r"saved in (\S+): stop the daemon", fault or "")
    src = Path(found.group(1)) if found else db
    copy = scratch / f"restart-{len(list(scratch.iterdir()))}.sqlite3"
    shutil.copyfile(src, copy)  # the file alone: no -wal, no -shm beside it
    return texts(copy)


class FilesMachine(RuleBasedStateMachine):
    """A store (in this process) posting while its files are removed or replaced, or touched the
    legitimate ways (another connection's TRUNCATE checkpoint, a `fleet backup`): a legitimate touch
    never refuses a write; after a fault every acknowledged post is in what a restart would find, and
    once a write is refused every later one is."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="fleet-files-"))
        self.db = self.dir / "fleet.sqlite3"
        (self.dir / "scratch").mkdir()
        self.store = Store(self.db)
        self.root = self.store.create_wave(OPERATOR_PRINCIPAL, "w", ["alice"]).root_id
        self.acked: set[str] = set()
        self.n = 0
        self.cut = False
        self.db_cut = False
        self.fault: str | None = None
        self.old: Path | None = None

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(k=st.integers(1, 20))
    def post(self, k: int) -> None:
        for _ in range(k):
            self.n += 1
            text = f"p{self.n}"
            try:
                self.store.post(OPERATOR_PRINCIPAL, self.root, text)
            except errors.StorageFault as exc:
                assert self.cut, f"a write was refused with the files untouched: {exc}"
                assert self.fault in (None, exc.message)  # every refusal after the first is the same
                self.fault = exc.message
                continue
            except sqlite3.Error:
                # A read before the write (the wavelet's row) through a reader opened on the new files.
                assert self.cut
                continue
            assert self.fault is None, "a write was acknowledged after one was refused"
            self.acked.add(text)

    @rule()
    def tick(self) -> None:
        """The watcher's once-a-second check, made now."""
        self.store._db.check_files()

    # Not between a database cut and the store noticing: SQLite in that other process then takes the
    # old WAL for the new file's and checkpoints its frames into it, out of the daemon's reach (the
    # limit docs/design.md §2 states).
    @precondition(lambda self: not self.db_cut or self.store._db._files_fault is not None)
    @rule()
    def checkpoint_elsewhere(self) -> None:
        """Another process's checkpoint (``fleet backup``, ``replay --check`` reading): legitimate
        before a cut; after a WAL cut it may fail (its reads of a removed WAL), and must lose nothing."""
        other = sqlite3.connect(self.db)
        try:
            other.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:
            assert self.cut
        finally:
            other.close()

    @precondition(lambda self: self.old is None and not self.cut)
    @rule()
    def take_a_backup(self) -> None:
        self.old = self.dir / "old.sqlite3"
        backup(self.db, self.old)

    # Until the store notices: a file removed after what it held was saved is the operator's loss.
    @precondition(lambda self: self.store._db._files_fault is None)
    @rule(what=st.sampled_from(["unlink wal", "replace wal", "unlink db", "replace db"]))
    def cut_a_file(self, what: str) -> None:
        wal = Path(str(self.db) + "-wal")
        if what == "unlink wal":
            wal.unlink(missing_ok=True)
        elif what == "replace wal":
            empty = self.dir / "empty"
            empty.write_bytes(b"")
            os.replace(empty, wal)
        elif what == "unlink db":
            self.db.unlink(missing_ok=True)
            self.db_cut = True
        elif self.old is not None and self.old.exists():
            shutil.copyfile(self.old, self.dir / "restore")
            os.replace(self.dir / "restore", self.db)
            self.db_cut = True
        else:
            return
        self.cut = True

    @invariant()
    def nothing_acknowledged_is_lost(self) -> None:
        if self.cut and (self.fault is not None or self.acked):
            if self.fault is None and not self.store_refused_since_cut():
                return  # not noticed yet: the next write notices
            assert self.acked <= saved_texts(self.db, self.fault, self.dir / "scratch")

    def store_refused_since_cut(self) -> bool:
        fault = self.store._db._files_fault
        if fault is not None and self.fault is None and not fault.in_place:
            self.fault = fault.fault.message  # found by the watcher's tick: the copy it names
        return fault is not None


FilesMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=15, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_files_watched_under_any_sequence = FilesMachine.TestCase
