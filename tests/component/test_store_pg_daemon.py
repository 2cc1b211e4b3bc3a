"""``fleet daemon run --store postgresql://…`` end to end: a daemon process on a real PostgreSQL
(tests/pg.py), the CLI against it (paths, replay --check, export and import, backup's refusal), and
what a bad or unreachable URL says. The URL carries a password (the test server trusts any), which
nothing may print or log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pg
import pytest
from conftest import retry_until

from fleet.client import Client
from fleet.paths import Paths

SECRET = "sekrit-pw"


def with_password(url: str) -> str:
    return url.replace("postgresql://fleet@", f"postgresql://fleet:{SECRET}@")


def fleet(*args: str, env: dict[str, str], stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args],
        env=env, capture_output=True, text=True, timeout=120,
        input=stdin.decode() if stdin is not None else None,
    )  # fmt: skip


class Running:
    def __init__(self, paths: Paths, url: str, log: Path) -> None:
        self.env = {**os.environ, "FLEET_HOME": str(paths.data.parent)}
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fleet", "daemon", "run", "--listen", "127.0.0.1:0", "--store", url],
                stdout=out, stderr=subprocess.STDOUT, env=self.env,
            )  # fmt: skip
        self.paths = paths

        def endpoint() -> dict[str, object] | None:
            assert self.proc.poll() is None, log.read_text()
            try:
                ep: dict[str, object] = json.loads(paths.endpoint.read_text())
            except (OSError, ValueError):
                return None
            return ep if ep.get("pid") == self.proc.pid else None

        ep = retry_until(endpoint, timeout=30, what="the daemon's endpoint file")
        assert ep is not None
        self.url = str(ep["url"])
        self.client = Client(self.url, paths.operator_token.read_text().strip())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)


@pytest.fixture
def running(fleet_env: Paths, pg_url: str, tmp_path: Path) -> Iterator[Running]:
    r = Running(fleet_env, with_password(pg_url), tmp_path / "daemon.log")
    yield r
    r.stop()


def test_a_daemon_on_postgresql_serves_and_the_cli_checks_exports_and_imports_its_store(
    running: Running, pg_server: pg.Server, pg_url: str, tmp_path: Path
) -> None:
    c = running.client
    c.create_wave("w", ["alice", "bob"])
    main = c.resolve("w/main").id
    for i in range(20):
        c.post(main, f"hello {i}", as_="alice" if i % 2 else "bob")
    fork = c.fork(main, "side", ["alice"], private=True)
    c.post(fork.id, "inside")
    assert [b.text for b in c.read(main).blips][-1] == "hello 19"
    env = {**running.env, "FLEET_STORE": with_password(pg_url)}

    shown = fleet("paths", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    store = json.loads(shown.stdout)["store"]
    assert store == pg_url.replace("postgresql://fleet@", "postgresql://fleet:***@")

    check = fleet("replay", "--check", env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "matches" in check.stdout

    backup = fleet("backup", str(tmp_path / "b.sqlite3"), env=env)
    assert backup.returncode == 2 and "pg_dump" in backup.stderr and "pg_basebackup" in backup.stderr

    export = fleet("export", env=env)
    assert export.returncode == 0, export.stderr
    other = pg_server.database()
    imported = fleet(
        "import", "-", env={**env, "FLEET_STORE": with_password(other)}, stdin=export.stdout.encode()
    )
    assert imported.returncode == 0, imported.stdout + imported.stderr
    again = fleet("replay", "--check", "--json", env={**env, "FLEET_STORE": other})
    assert (
        again.returncode == 0
        and json.loads(again.stdout)["rows"]
        == json.loads(fleet("replay", "--check", "--json", env=env).stdout)["rows"]
    )

    running.stop()
    everything = running.log.read_text() + "".join(
        p.stdout + p.stderr for p in (shown, check, backup, imported, again)
    )
    assert SECRET not in everything
    assert "store postgresql://fleet:***@" in running.log.read_text()


def test_an_unreachable_or_wrong_store_url_is_named_without_its_password(
    fleet_env: Paths, tmp_path: Path
) -> None:
    env = {**os.environ, "FLEET_HOME": str(fleet_env.data.parent)}
    gone = fleet("daemon", "run", "--store", f"postgresql://fleet:{SECRET}@127.0.0.1:1/nowhere", env=env)
    assert gone.returncode == 7, gone.stderr
    assert "cannot open the PostgreSQL store postgresql://fleet:***@127.0.0.1:1/nowhere" in gone.stderr
    assert SECRET not in gone.stderr + gone.stdout and "Traceback" not in gone.stderr
    wrong = fleet("daemon", "run", "--store", str(tmp_path / "x.sqlite3"), env=env)
    assert wrong.returncode == 2 and "is not a postgresql:// URL" in wrong.stderr, wrong.stderr


def test_a_postgresql_store_without_psycopg_says_to_install_fleet_postgresql(fleet_env: Paths) -> None:
    """psycopg made unimportable in the process (as where it is not installed): exit 6, the extra named."""
    env = {**os.environ, "FLEET_HOME": str(fleet_env.data.parent)}
    got = subprocess.run(
        [sys.executable, "-c",
         "import sys; sys.modules['psycopg'] = None; sys.argv = ['fleet', 'daemon', 'run', '--store',"
         " 'postgresql://fleet@127.0.0.1:1/x']; from fleet.__main__ import main; main()"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert got.returncode == 6, got.stderr
    assert "install fleet[postgresql]" in got.stderr and "Traceback" not in got.stderr


def test_the_store_commands_refuse_a_fleet_store_that_is_not_a_postgresql_url(
    fleet_env: Paths, tmp_path: Path
) -> None:
    env = {**os.environ, "FLEET_HOME": str(fleet_env.data.parent), "FLEET_STORE": str(tmp_path / "x.sqlite3")}
    for args in (["replay", "--check"], ["import", "-"], ["backup", str(tmp_path / "b")]):
        got = fleet(*args, env=env, stdin=b"")
        assert got.returncode == 2 and "is not a postgresql:// URL" in got.stderr, (args, got.stderr)
