"""``fleet daemon stop`` waits for a graceful stop as long as it sees it progressing (each phase and
each finished request is written to ``state/daemon.stopping``), past ``--timeout``; it gives up
with a clear message (exit 1, no traceback) once nothing moves."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import retry_until
from httphelp import host_port

from fleet.client import Client, read_endpoint
from fleet.models import Endpoint, StopProgress
from fleet.paths import Paths
from fleet.wire import loads

REPO = Path(__file__).resolve().parents[2]


def env() -> dict[str, str]:
    e = dict(os.environ, PYTHONPATH=str(REPO))
    e.pop("FLEET_DEBUG", None)
    return e


@pytest.fixture
def daemon_proc(fleet_env: Paths) -> Iterator[tuple[subprocess.Popen[bytes], Endpoint]]:
    fleet_env.logs.mkdir(parents=True, exist_ok=True)
    log = open(fleet_env.logs / "daemon.log", "wb")  # noqa: SIM115 - closed below
    argv = [sys.executable, "-m", "fleet", "daemon", "run"]
    proc = subprocess.Popen(argv, stdout=log, stderr=log, env=env())

    def answering() -> Endpoint | None:
        e = read_endpoint(fleet_env)
        return e if e is not None and e.pid == proc.pid else None

    try:
        endpoint = retry_until(answering, 20, 0.05, "the daemon")
        assert endpoint is not None
        yield proc, endpoint
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.terminate()
            proc.wait(30)
        log.close()


def stop(timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleet", "daemon", "stop", "--timeout", f"{timeout:g}"],
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def unread_bytes(s: socket.socket) -> int:
    raw = fcntl.ioctl(s.fileno(), termios.FIONREAD, struct.pack("i", 0))
    return int(struct.unpack("i", raw)[0])


def progress(paths: Paths) -> StopProgress | None:
    try:
        return loads(StopProgress, paths.daemon_stopping.read_text())
    except (OSError, ValueError):
        return None


def test_stop_outlasts_its_timeout_while_the_daemon_finishes_a_slow_request(
    fleet_env: Paths, daemon_proc: tuple[subprocess.Popen[bytes], Endpoint]
) -> None:
    proc, endpoint = daemon_proc
    token = fleet_env.operator_token.read_text().strip()
    with Client(endpoint.url, token) as op:
        op.create_wave("w", ["alice"])
        main = op.resolve("w/main").id
        for n in range(60):
            op.post(main, f"{n} " + "x" * 200_000, as_="alice")
    # a client that asked for 12 MB and reads slowly: its answer is in flight until it has read it
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(host_port(endpoint.url))
    host, port = host_port(endpoint.url)
    slow.sendall(
        f"GET /v1/wavelets/{main}/blips?limit=500 HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n".encode()
    )
    retry_until(lambda: unread_bytes(slow) > 0, 20, 0.01, "the answer to start arriving")
    got: list[subprocess.CompletedProcess[str]] = []
    stopper = threading.Thread(target=lambda: got.append(stop(timeout=1)))
    started = time.monotonic()
    stopper.start()

    def draining() -> bool:
        p = progress(fleet_env)
        return p is not None and p.pid == proc.pid and p.phase == "finishing requests" and p.inflight == 1

    retry_until(draining, 20, 0.01, "the daemon to show it is finishing one request")
    # well past the stop's --timeout of 1 s, the stop still waits: the daemon's phase has a bound of
    # its own (10 s) and says so
    while time.monotonic() - started < 3:
        time.sleep(0.1)
        assert not got, got[0].stderr if got else ""
    received = 0
    slow.settimeout(20)
    while chunk := slow.recv(1 << 20):
        received += len(chunk)
    slow.close()
    assert received > 12_000_000
    stopper.join(60)
    assert got, "daemon stop did not return"
    r = got[0]
    assert r.returncode == 0, r.stderr
    assert "stopped the local daemon" in r.stdout
    assert time.monotonic() - started > 3
    assert proc.wait(10) == 0
    assert not fleet_env.daemon_stopping.exists() and read_endpoint(fleet_env) is None


def test_stop_gives_up_clearly_when_the_daemon_shows_no_progress(
    fleet_env: Paths, daemon_proc: tuple[subprocess.Popen[bytes], Endpoint]
) -> None:
    proc, _endpoint = daemon_proc
    os.kill(proc.pid, signal.SIGSTOP)  # frozen: it cannot even start stopping
    try:
        r = stop(timeout=1)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "stopped making progress" in r.stderr and "no sign of stopping within 1s" in r.stderr
    assert f"kill -9 {proc.pid}" in r.stderr and "Traceback" not in r.stderr
    # once thawed it takes the SIGTERM it was sent and stops gracefully
    assert proc.wait(30) == 0
    assert read_endpoint(fleet_env) is None
    assert not fleet_env.daemon_stopping.exists()


def test_stop_says_which_agents_are_connected_and_what_becomes_of_them(
    daemon_proc: tuple[subprocess.Popen[bytes], Endpoint], fleet_env: Paths, tmp_path: Path
) -> None:
    """Stopping is the user's call (no --force): it goes ahead, and says who was connected, that their
    channels keep their place and wait for a daemon at the same address, and how to bring it back."""
    from mcphelp import RawMcp, channel_argv, minted_token_file

    proc, endpoint = daemon_proc
    op = Client(endpoint.url, fleet_env.operator_token.read_text().strip())
    op.create_wave("w", ["alice", "bob"])
    op.create_wave("x", ["carol"])
    chans = [
        RawMcp(channel_argv(who, wave, endpoint.url, minted_token_file(op, wave, who, tmp_path)), who=who)
        for wave, who in (("w", "alice"), ("w", "bob"), ("x", "carol"))
    ]
    try:
        for ch in chans:
            ch.handshake()
        retry_until(
            lambda: sum(p.state == "live" for w in ("w", "x") for p in op.presence(w)) == 3,
            20, 0.05, "three channels heard",
        )  # fmt: skip
        stopped = subprocess.run(
            [sys.executable, "-m", "fleet", "daemon", "stop"], env=env(), capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert stopped.returncode == 0, stopped.stderr
        assert proc.wait(10) is not None
        said = stopped.stdout + stopped.stderr
        assert "3 agents were connected" in said and "w: alice, bob" in said and "x: carol" in said, said
        assert endpoint.url in said and "fleet daemon start" in said and "reconnect" in said, said
        assert all(ch.proc.poll() is None for ch in chans)  # the channels wait; nothing killed them
    finally:
        for ch in chans:
            ch.close()


def test_stop_with_no_agents_connected_says_only_that_it_stopped(
    daemon_proc: tuple[subprocess.Popen[bytes], Endpoint],
) -> None:
    stopped = subprocess.run(
        [sys.executable, "-m", "fleet", "daemon", "stop"],
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.startswith("stopped the local daemon") and "connected" not in stopped.stdout
