"""Shared fixtures: every test gets its own FLEET_HOME, HOME and SHELL; real daemons on 127.0.0.1:0.

The tests are in four tiers, one folder each, and the folder sets the marker (``pytest -m unit``):

- ``tests/unit`` — one module of fleet/ at a time: no processes, no sockets, no daemon (enforced
  here: a unit test that starts a process or connects a socket fails, naming the tier it belongs
  to). The inner loop: ``.venv/bin/python -m pytest tests/unit``.
- ``tests/component`` — a real daemon (in-process on 127.0.0.1:0 or a ``fleet daemon run``
  subprocess), ``fleet channel`` and CLI subprocesses, real SQLite files.
- ``tests/system`` — real tmux servers on their own sockets, headless Chromium.
- ``tests/real`` — the pinned Claude Code over the scripted model (tests/realclaude.py).

Every test file's basename is unique across the tiers (pytest imports test files by basename, and
a few tests import helpers from another test file).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest

from fleet.features import load as load_features
from fleet.paths import Paths, get_paths

load_features()  # what the CLI loads: tests driving the core in-process (a Spawner) get the same seams

if TYPE_CHECKING:  # the fixtures import these lazily: a test that needs no daemon loads none
    import libtmux
    import pg
    from realclaude import RealFleet
    from scripted_model import Script

    from fleet.client import Client
    from fleet.daemon import Daemon
    from fleet.store import Store

T = TypeVar("T")

# the console's fixtures (d, op, wave, browser, page) for its wire tests and its browser tests
pytest_plugins = ["consolehelp"]

TIERS = ("unit", "component", "system", "real")
TESTS = Path(__file__).resolve().parent


def retry_until(fn: Callable[[], T], timeout: float = 10.0, interval: float = 0.02, what: str = "") -> T:
    """Call ``fn`` until it returns a truthy value (returned) or ``timeout`` passes (AssertionError)."""
    deadline = time.monotonic() + timeout
    last: T = fn()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or fn}: last={last!r}")
        time.sleep(interval)
        last = fn()
    return last


@pytest.fixture(autouse=True)
def fleet_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Paths:
    """Point FLEET_HOME, HOME and SHELL at temp places; clear variables that would reach a real fleet.

    ``FLEET_TEST_ENGINE=postgresql`` (outside the unit tier) puts each test's store on a fresh
    database of the session's PostgreSQL instead (FLEET_STORE): the daemons, CLIs and channels a test
    starts then run on that engine, a way to sweep the tiers over it."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "fleet"))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SHELL", "/bin/sh")
    for var in (
        "FLEET_DAEMON", "FLEET_TOKEN", "FLEET_WAVE", "FLEET_TMUX_SOCKET", "TMUX", "TMUX_PANE", "FLEET_STORE"
    ):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    on_postgresql = os.environ.get("FLEET_TEST_ENGINE") == "postgresql"
    if on_postgresql and request.node.get_closest_marker("unit") is None:
        server: pg.Server = request.getfixturevalue("pg_server")
        monkeypatch.setenv("FLEET_STORE", server.database())
    return get_paths()


@pytest.fixture
def daemon(fleet_env: Paths) -> Iterator[Daemon]:
    """A real daemon serving real HTTP on 127.0.0.1:0 in a thread, over a real SQLite file."""
    from fleet.daemon import Daemon

    d = Daemon(fleet_env, listen="127.0.0.1:0")
    d.start()
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def operator(daemon: Daemon) -> Client:
    """A client holding the operator token of ``daemon``."""
    from fleet.client import Client

    return Client(daemon.url, daemon.operator_token)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    """A store on a fresh SQLite file (``fleet.sqlite3`` in the test's folder), closed after."""
    from fleet.store import Store

    s = Store(tmp_path / "fleet.sqlite3")
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def store_at(tmp_path: Path) -> pg.StoreAt:
    """Where a test's store named ``name`` lives: an SQLite file in ``tmp_path`` here; a database of
    the session's PostgreSQL where a module overrides it (tests/component/test_store_pg.py)."""
    return lambda name: tmp_path / name


@pytest.fixture(scope="session")
def pg_server() -> Iterator[pg.Server]:
    """A real PostgreSQL (tests/pg.py) for the session (per xdist worker), stopped afterwards."""
    import pg

    server = pg.Server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: pg.Server) -> str:
    """A fresh, empty database of the session's PostgreSQL: its ``postgresql://`` URL."""
    return pg_server.database()


TMUX_CONF = """\
set -g default-shell /bin/sh
set -g base-index 0
set -g pane-base-index 0
set -g history-limit 5000
"""


@pytest.fixture
def tmux_server(tmp_path: Path) -> Iterator[libtmux.Server]:
    """A real tmux server on an isolated socket with its own config; killed and its socket removed after."""
    import libtmux

    conf = tmp_path / "tmux.conf"
    conf.write_text(TMUX_CONF)
    name = f"fleet-test-{uuid.uuid4().hex[:8]}"
    srv = libtmux.Server(socket_name=name, config_file=str(conf))
    try:
        yield srv
    finally:
        try:
            srv.kill()
        except libtmux.exc.LibTmuxException:
            # "server exited unexpectedly": a test whose last session ended leaves a server that
            # exits by itself, and kill-server can meet it mid-exit (seen under load); gone either way
            retry_until(lambda: not srv.is_alive(), what="the tmux server gone")
        sock = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.geteuid()}" / name
        sock.unlink(missing_ok=True)


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tier, from its folder; a test outside the four folders is an error."""
    seen: dict[str, Path] = {}
    for item in items:
        path = Path(str(item.path)).resolve()
        try:
            tier = path.relative_to(TESTS).parts[0]
        except ValueError:
            continue  # a test file run from outside tests/ (pytest some/where/else.py): no tier
        if tier not in TIERS:
            raise pytest.UsageError(f"{path}: a test file belongs in one of tests/{{{','.join(TIERS)}}}/")
        other = seen.setdefault(path.name, path)
        if other != path:
            raise pytest.UsageError(f"{path} and {other} share a basename: rename one (pytest imports by it)")
        item.add_marker(getattr(pytest.mark, tier))


def _refuse(what: str) -> Callable[..., object]:
    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError(
            f"a unit test {what}: move it to tests/component (daemon, processes) or tests/system (tmux)"
        )

    return refuse


@pytest.fixture(autouse=True)
def unit_tier_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """In tests/unit, starting a process or binding/connecting a socket fails the test.

    Threads and files (SQLite included) are fine: what keeps the tier fast is that nothing waits on
    another process or the network.
    """
    if request.node.get_closest_marker("unit") is None:
        return
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse("starts a process"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse("starts a process"))
    for name in ("bind", "connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, _refuse("opens a socket"))


@pytest.fixture
def real_fleet(
    tmp_path: Path, fleet_env: Paths, operator: Client, tmux_server: libtmux.Server
) -> Iterator[Callable[..., RealFleet]]:
    """A factory of :class:`realclaude.RealFleet`: ``real_fleet(channels=True, script=Script(...))``.

    Real Claude Code sessions against a scripted model (tests/scripted_model). Fails, never skips,
    when the pinned Claude Code is missing. At the end the sessions are ended (the tmux server is
    killed) and the model's log is checked for bad requests.
    """
    from realclaude import RealFleet

    made: list[RealFleet] = []

    def make(*, channels: bool = True, script: Script | None = None) -> RealFleet:
        world = RealFleet(tmp_path, fleet_env, operator, tmux_server, channels=channels, script=script)
        made.append(world)
        return world

    yield make
    for world in made:
        world.close()


@pytest.fixture
def codex() -> str:
    """The pinned Codex CLI (``FLEET_CODEX_BIN``, else ``.ci/node``, else ``PATH``): fails, never skips,
    naming the install when it is missing or another version (tests/realcodex.py)."""
    from realcodex import pinned_codex

    return pinned_codex()
