"""The local daemon survives its own restart (docs/design.md §2, "A stable local endpoint").

The daemon is the real local one, started in the background as a user's first command starts it;
three stand-in agents converse through their channels while it is killed with SIGKILL (and
auto-started again by the next command) and while it is stopped and started: the conversation
completes, each blip reaches each participant exactly once, nothing is replayed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.delivery.state import StateFile
from fleet.paths import Paths


def fleet(env: dict[str, str], *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_state_file_is_the_stores_not_the_addresss(fleet_env: Paths) -> None:
    """A daemon that comes back on another port serves the same store: the same state file."""
    first = Daemon(fleet_env, "127.0.0.1:0")
    first.start()
    try:
        before = StateFile(fleet_env.channels, first.url, "w", "alice")
        state = before.fresh()
        state.cursors["x"] = "0000"
        assert before.acquire()
        before.save(state)
        before.release()
        store_id = Client(first.url, "").health().store_id
    finally:
        first.stop()
    again = Daemon(fleet_env, "127.0.0.1:0")
    again.start()
    try:
        assert again.url != first.url
        after = StateFile(fleet_env.channels, again.url, "w", "alice")
        assert after.path == before.path and after.store == store_id
        assert after.load().cursors == {"x": "0000"}
    finally:
        again.stop()


def test_a_file_keyed_by_host_and_port_is_where_delivery_resumes(fleet_env: Paths, daemon: Daemon) -> None:
    """Upgrading: the state a channel wrote under the old host:port name is where delivery resumes."""
    legacy = StateFile(fleet_env.channels, daemon.url, "w", "alice", store="")
    state = legacy.fresh()
    state.cursors["x"] = "0001"
    assert legacy.acquire()
    legacy.save(state)
    legacy.release()
    now = StateFile(fleet_env.channels, daemon.url, "w", "alice")
    assert now.path != legacy.path and now.legacy_path == legacy.path
    assert now.load().cursors == {"x": "0001"}


def test_the_remembered_port_is_kept_in_a_private_file(fleet_env: Paths) -> None:
    d = Daemon(fleet_env, "127.0.0.1:0", remember_port=True)
    d.start()
    try:
        port = int(d.url.rsplit(":", 1)[1])
    finally:
        d.stop()
    assert fleet_env.daemon_port.read_text().strip() == str(port)
    assert fleet_env.daemon_port.stat().st_mode & 0o777 == 0o600
    again = Daemon(fleet_env, "127.0.0.1:0", remember_port=True)
    again.start()
    try:
        assert again.url == d.url
    finally:
        again.stop()


def test_a_remembered_port_someone_else_took_gives_a_new_one(fleet_env: Paths, tmp_path: Path) -> None:
    import socket

    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    try:
        fleet_env.state.mkdir(parents=True, exist_ok=True)
        fleet_env.daemon_port.write_text(f"{squatter.getsockname()[1]}\n")
        d = Daemon(fleet_env, "127.0.0.1:0", remember_port=True)
        d.start()
        try:
            assert d.url != f"http://127.0.0.1:{squatter.getsockname()[1]}"
            assert fleet_env.daemon_port.read_text().strip() == d.url.rsplit(":", 1)[1]
        finally:
            d.stop()
    finally:
        squatter.close()
