"""``fleet read --follow`` outlives a daemon restart (issue 26): it reconnects with backoff,
re-resolving the endpoint (the daemon may come back on another port), says so on stderr once per
outage, and resumes from its cursor: every blip appears exactly once, none skipped.

The daemon is the real local one in a subprocess, killed with SIGKILL (the first time brought back on
another port: its remembered port is taken meanwhile) and stopped and started (the second time).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from conftest import retry_until

from fleet.client import read_endpoint
from fleet.models import Endpoint
from fleet.paths import Paths
from fleet.procs import pid_alive


def fleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
    )


class Lines:
    """A stream read by a thread as it comes, line by line."""

    def __init__(self, stream: object) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line.rstrip("\n"))


@pytest.fixture
def local(fleet_env: Paths) -> Iterator[Paths]:
    started = fleet("daemon", "start")
    assert started.returncode == 0, started.stderr
    try:
        yield fleet_env
    finally:
        fleet("daemon", "stop")


def endpoint(paths: Paths) -> Endpoint:
    e = read_endpoint(paths)
    assert e is not None
    return e


def post(text: str) -> None:
    got = fleet("post", "w/main", text)
    assert got.returncode == 0, got.stderr


def test_follow_reconnects_across_a_sigkill_on_another_port_and_a_stop_start_printing_each_blip_once(
    local: Paths,
) -> None:
    assert fleet("wave", "new", "w", "--with", "alice").returncode == 0
    for i in range(3):
        post(f"before {i}")
    follow = subprocess.Popen(
        [sys.executable, "-m", "fleet", "read", "w/main", "--follow"],
        env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out, err = Lines(follow.stdout), Lines(follow.stderr)
    squatter = socket.socket()
    try:
        retry_until(lambda: any("before 2" in x for x in out.lines), 20, 0.05, "the backlog")
        first = endpoint(local)
        post("just before the kill")  # perhaps not read yet when the daemon dies: printed after
        os.kill(first.pid, signal.SIGKILL)
        retry_until(lambda: not pid_alive(first.pid), 10, 0.02, "the daemon to die")
        retry_until(lambda: any("daemon gone" in x for x in err.lines), 20, 0.05, "the outage noticed")
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # its connections linger
        squatter.bind(("127.0.0.1", urlsplit(first.url).port or 0))  # its remembered port is taken
        squatter.listen()
        assert fleet("daemon", "start").returncode == 0
        second = endpoint(local)
        assert second.url != first.url and second.pid != first.pid
        # said as soon as the daemon answers, not at the next blip (nothing new is posted yet)
        retry_until(lambda: any("reconnected" in x for x in err.lines), 20, 0.05, "the reconnection said")
        for i in range(3):
            post(f"after the kill {i}")
        retry_until(lambda: any("after the kill 2" in x for x in out.lines), 30, 0.05, "follow to resume")
        assert follow.poll() is None, err.lines
        stopped = fleet("daemon", "stop")
        assert stopped.returncode == 0, stopped.stderr
        retry_until(
            lambda: sum("daemon gone" in x for x in err.lines) == 2, 20, 0.05, "the second outage noticed"
        )
        assert fleet("daemon", "start").returncode == 0
        retry_until(
            lambda: sum("reconnected" in x for x in err.lines) == 2, 20, 0.05, "the second reconnection said"
        )
        post("after the restart")
        retry_until(
            lambda: any("after the restart" in x for x in out.lines), 30, 0.05, "follow to resume again"
        )
    finally:
        print("follow stdout:", out.lines, "stderr:", err.lines)  # shown when the test fails
        squatter.close()
        follow.send_signal(signal.SIGINT)
        follow.wait(20)
    texts = [x.split(": ", 1)[-1] for x in out.lines if "operator" in x]
    want = [
        *(f"before {i}" for i in range(3)), "just before the kill",
        *(f"after the kill {i}" for i in range(3)), "after the restart",
    ]  # fmt: skip
    assert [t for t in texts if t in want] == want, out.lines  # each once, in order, none skipped
    assert sum("daemon gone" in x for x in err.lines) == 2, err.lines  # once per outage
    assert sum("reconnected" in x for x in err.lines) == 2, err.lines
    assert any(second.url in x for x in err.lines if "reconnected" in x), err.lines
    assert not any("Traceback" in x for x in err.lines), err.lines
    assert follow.returncode in (0, -signal.SIGINT), (follow.returncode, err.lines)
