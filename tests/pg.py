"""A real PostgreSQL for the tests: one server per test session, a fresh database per test.

:class:`Server` runs ``initdb`` in a temporary folder and ``postgres`` on a free 127.0.0.1 port (its
unix socket in that folder), and :meth:`Server.database` makes a database (``CREATE DATABASE …
TEMPLATE``) and returns its ``postgresql://`` URL. The server is stopped and its folder removed
afterwards. PostgreSQL missing is a failure, never a skip: ``scripts/test.sh`` installs Debian's
``postgresql`` package when ``initdb`` is not found.

initdb and postgres refuse to run as root, and the tests run as root on CI: then both run as
``nobody`` (every Debian system has it; its home need not exist), over a folder made for it under
/tmp (pytest's own temp dirs are 0700 root's: not reachable by ``nobody``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

StoreAt = Callable[[str], Path | str]
"""The ``store_at`` fixture (tests/conftest.py): where a test's store of a given name lives."""

BIN_DIRS = ("/usr/lib/postgresql/*/bin",)
"""Where Debian's ``postgresql`` puts initdb and postgres (not on PATH): the newest is taken."""


def find_bin(name: str) -> str:
    """The path of PostgreSQL's ``name`` (``initdb``, ``postgres``, ``pg_dump``…), or an error saying
    how to install it."""
    found = shutil.which(name)
    if found:
        return found
    for pattern in BIN_DIRS:
        candidates = sorted(glob.glob(f"{pattern}/{name}"), key=lambda p: int(p.split("/")[-3]))
        if candidates:
            return candidates[-1]
    raise AssertionError(
        f"PostgreSQL's {name} is not installed: the PostgreSQL tests need it (never skipped);"
        " `apt-get install postgresql` (scripts/test.sh does it when initdb is missing)"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """A PostgreSQL server of the tests' own, stopped by :meth:`stop`."""

    def __init__(self) -> None:
        self.as_user: dict[str, Any] = {}
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            self.as_user = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
        # as nobody, under /tmp (1777 on every Debian): a TMPDIR of root's own may not be traversable
        self.root = Path(tempfile.mkdtemp(prefix="fleet-pg-", dir="/tmp" if self.as_user else None))
        os.chmod(self.root, 0o700)
        if self.as_user:
            os.chown(self.root, self.as_user["user"], self.as_user["group"])
        self.data = self.root / "data"
        self.user = "fleet"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
        self.env = env
        try:
            subprocess.run(
                [find_bin("initdb"), "-D", str(self.data), "-U", self.user, "--auth=trust", "--locale=C",
                 "--encoding=UTF8", "--no-sync"],
                check=True, capture_output=True, stdin=subprocess.DEVNULL, env=env, cwd=self.root,
                **self.as_user,
            )  # fmt: skip
        except subprocess.CalledProcessError as exc:
            shutil.rmtree(self.root, ignore_errors=True)
            raise AssertionError(f"initdb failed: {exc.stderr.decode(errors='replace')}") from None
        self.proc: subprocess.Popen[bytes] | None = None
        for _ in range(5):  # a port found free may be taken before postgres binds it: another one
            self.port = _free_port()
            if self._start():
                return
        self.stop()
        raise AssertionError(f"postgres did not start: {(self.root / 'log').read_text(errors='replace')}")

    def _start(self) -> bool:
        log = open(self.root / "log", "ab")  # noqa: SIM115 (the server's, closed when it ends)
        self.proc = subprocess.Popen(
            [find_bin("postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.root),
             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
             "-c", "full_page_writes=off", "-c", "max_connections=300"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=self.env, cwd=self.root,
            **self.as_user,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                if self._ready():
                    return True
            time.sleep(0.05)
        return False

    def _ready(self) -> bool:
        import psycopg

        try:
            psycopg.connect(self.url("postgres"), connect_timeout=2).close()
        except psycopg.OperationalError:
            return False
        return True

    def url(self, database: str) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """A fresh, empty database: its URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:16]
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE template0")
        return self.url(name)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # immediate shutdown: nothing of it is kept
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)
