"""Read connections come from a bounded pool, taken per request and given back at its end (and
before a long-poll parks): a thousand fresh client connections neither leak file descriptors nor
fail under a small ``ulimit -n``; a burst of idle connections and parked long-polls holds no more
readers than the pool has, and once released the daemon's descriptors on the database and its RSS
are back where they started."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import retry_until
from httphelp import host_port
from test_store_readers import db_fds

from fleet import errors
from fleet.client import Client, read_endpoint
from fleet.models import Endpoint
from fleet.paths import Paths
from fleet.store.schema import IDLE_READERS as READERS


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


DB_BOUND = 2 * (READERS + 2) + 1
"""Descriptors on the database at most: the writer's, the checkpointer's and each reader's on the
file and its -wal, and the one -shm every connection of the process shares."""


def _lift_fd_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))


def start_daemon(paths: Paths, preexec: Callable[[], None] = _lift_fd_limit) -> subprocess.Popen[bytes]:
    paths.logs.mkdir(parents=True, exist_ok=True)
    with open(paths.logs / "daemon.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "fleet", "daemon", "run"], stdout=log, stderr=log, preexec_fn=preexec
        )


def wait_endpoint(paths: Paths, proc: subprocess.Popen[bytes]) -> Endpoint:
    def answering() -> Endpoint | None:
        assert proc.poll() is None, (paths.logs / "daemon.log").read_text()
        e = read_endpoint(paths)
        return e if e is not None and e.pid == proc.pid else None

    endpoint = retry_until(answering, 20, 0.05, "the daemon")
    assert endpoint is not None
    return endpoint


def stop_daemon(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def test_a_thousand_fresh_connections_under_ulimit_256_get_no_500(fleet_env: Paths) -> None:
    def small_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    proc = start_daemon(fleet_env, small_limit)
    try:
        endpoint = wait_endpoint(fleet_env, proc)
        token = fleet_env.operator_token.read_text().strip()
        with Client(endpoint.url, token) as op:
            op.create_wave("w", ["alice"])
            main = op.resolve("w/main").id
            op.post(main, "alice: hello")
            count = len(op.read(main).blips)
        start = fds(proc.pid)
        failures: list[str] = []
        for n in range(1000):
            with Client(endpoint.url, token, retries=0) as fresh:  # one new TCP connection each
                try:
                    assert len(fresh.read(main).blips) == count
                except errors.FleetError as exc:
                    failures.append(f"{n}: {exc}")
        assert not failures, failures[:3]
        # every connection's thread is gone once its socket closed: the fds come back
        retry_until(lambda: fds(proc.pid) <= start + 10, 10, 0.05, f"fds back near {start}")
    finally:
        stop_daemon(proc)
        assert proc.returncode is not None


# ---------------------------------------------------------------- bursts


class Raw:
    """One keep-alive client connection, requests written by hand (no client library between)."""

    def __init__(self, url: str, token: str) -> None:
        self.host, self.port = host_port(url)
        self.sock = socket.create_connection((self.host, self.port), timeout=30)
        self.token = token
        self.buf = b""

    def send(self, method: str, path: str, body: bytes = b"") -> None:
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Authorization: Bearer {self.token}\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.sock.sendall(head.encode() + body)

    def receive(self) -> tuple[int, bytes]:
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            self._fill()
            head, _, rest = self.buf.partition(b"\r\n\r\n")
        self.buf = rest[length:]
        return int(head[9:12]), rest[:length]

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the daemon closed the connection")
        self.buf += chunk

    def close(self) -> None:
        self.sock.close()


@dataclass
class Running:
    proc: subprocess.Popen[bytes]
    url: str
    db: Path
    wave: str
    main: str
    alice: str
    """A participant token (alice's, in wave ``wave``): what any agent holds."""

    def db_fds(self) -> int:
        return db_fds(self.proc.pid, self.db)

    def rss(self) -> int:
        return rss_kib(self.proc.pid)


@pytest.fixture
def running(fleet_env: Paths) -> Iterator[Running]:
    _lift_fd_limit()  # this process holds the burst's 1,500 client sockets
    proc = start_daemon(fleet_env)
    try:
        endpoint = wait_endpoint(fleet_env, proc)
        with Client(endpoint.url, fleet_env.operator_token.read_text().strip()) as op:
            op.create_wave("w", ["alice"])
            main = op.resolve("w/main").id
            op.post(main, "alice: hello", as_="alice")
            alice = op.mint_token("w", "alice").token
        yield Running(proc, endpoint.url, fleet_env.db, "w", main, alice)
    finally:
        stop_daemon(proc)


def settled(r: Running) -> tuple[int, int]:
    """(db fds, RSS KiB) once a few reads have run: the start figure a burst is compared with."""
    c = Raw(r.url, r.alice)
    for _ in range(20):
        c.send("GET", f"/v1/wavelets/{r.main}/blips")
        assert c.receive()[0] == 200
    serving = fds(r.proc.pid)
    c.close()
    retry_until(lambda: fds(r.proc.pid) < serving, 10, 0.02, "the connection's socket closed")
    return r.db_fds(), r.rss()


RSS_BACK = 1.10
"""RSS after a burst, at most, as a multiple of the start (the issue's 10 %). The daemon runs on the
system allocator (``PYTHONMALLOC=malloc``, :mod:`fleet.allocator`): on CPython's own it stayed at
~1.2 x here, 1 MiB arenas kept by an object or two the burst made."""


def back_to_start(r: Running, start: tuple[int, int], what: str) -> None:
    fds0, rss0 = start

    def back() -> bool:
        return r.db_fds() <= fds0 * 1.1 and r.rss() <= rss0 * RSS_BACK

    try:
        retry_until(back, 20, 0.1, what)
    except AssertionError:
        raise AssertionError(
            f"{what}: db fds {fds0} -> {r.db_fds()} (want within 10 %), RSS {rss0} -> {r.rss()} KiB"
            f" (want at most {RSS_BACK} x)"
        ) from None


def test_a_burst_of_idle_connections_and_long_polls_holds_a_bounded_pool_and_gives_it_back(
    running: Running,
) -> None:
    r = running
    start = settled(r)
    assert start[0] <= DB_BOUND
    conns: list[Raw] = []
    try:
        for _ in range(1000):  # each reads once, then stays open and idle (keep-alive)
            c = Raw(r.url, r.alice)
            conns.append(c)
            c.send("GET", f"/v1/wavelets/{r.main}/blips")
            assert c.receive()[0] == 200
        polls = []
        for _ in range(500):  # parked until their 60 s wait: nothing is posted
            c = Raw(r.url, r.alice)
            conns.append(c)
            polls.append(c)
            c.send("GET", f"/v1/wavelets/{r.main}/blips?after=ffffffffffffffff&wait=60")
        with Client(r.url, r.alice) as alice:
            retry_until(lambda: alice.health().parked == 500, 30, 0.1, "500 parked long-polls")
        # every connection still open: readers are the pool's, not a connection's or a waiter's
        assert r.db_fds() <= DB_BOUND, f"{r.db_fds()} fds on the database with 1,500 connections open"
    finally:
        for c in conns:
            c.close()
    back_to_start(r, start, "db fds and RSS back after 1,000 idle connections and 500 long-polls")


def test_thirty_feed_long_polls_that_time_out_leave_no_readers(running: Running) -> None:
    r = running
    start = settled(r)
    conns = [Raw(r.url, r.alice) for _ in range(30)]
    try:
        body = json.dumps({"participant": "alice", "cursors": {}, "wait": 0}).encode()
        cursor: dict[str, str] = {}
        for c in conns[:1]:  # the feed's cursor past what is there, so that the polls park
            c.send("POST", f"/v1/waves/{r.wave}/feed", body)
            status, raw = c.receive()
            assert status == 200, raw
            cursor = {b["wavelet_id"]: b["id"] for b in json.loads(raw)["blips"]}
        body = json.dumps({"participant": "alice", "cursors": cursor, "wait": 1.0}).encode()
        t0 = time.monotonic()
        for c in conns:
            c.send("POST", f"/v1/waves/{r.wave}/feed", body)
        for c in conns:
            status, raw = c.receive()
            assert status == 200, raw
            assert json.loads(raw)["blips"] == []
        assert time.monotonic() - t0 >= 0.9  # they parked and timed out
        # timed out and answered, their connections still open and idle: no reader is held for them
        back_to_start(r, start, "db fds and RSS back after 30 timed-out feeds, connections open")
    finally:
        for c in conns:
            c.close()
    back_to_start(r, start, "db fds and RSS back after 30 timed-out feeds, connections closed")


# ---------------------------------------------------------------- the pool, as a property


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


@pytest.mark.parametrize(
    ("given", "runs_on"), [(None, "malloc"), ("pymalloc", "pymalloc")], ids=["chosen", "the-users-choice"]
)
def test_the_daemon_runs_on_the_system_allocator_unless_one_is_chosen(
    fleet_env: Paths, monkeypatch: pytest.MonkeyPatch, given: str | None, runs_on: str
) -> None:
    """`fleet daemon run` started without PYTHONMALLOC starts itself again on glibc's malloc (the
    pid its starter holds stays the daemon's); a PYTHONMALLOC the user set is kept."""
    if given is None:
        monkeypatch.delenv("PYTHONMALLOC", raising=False)
    else:
        monkeypatch.setenv("PYTHONMALLOC", given)
    proc = start_daemon(fleet_env)
    try:
        endpoint = wait_endpoint(fleet_env, proc)
        assert endpoint.pid == proc.pid
        assert _environ(proc.pid).get("PYTHONMALLOC") == runs_on
        with Client(endpoint.url, fleet_env.operator_token.read_text().strip()) as op:
            assert op.health().ok
    finally:
        stop_daemon(proc)


def test_the_autostarted_daemon_is_started_on_the_system_allocator(
    fleet_env: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleet.client import start_local_daemon

    monkeypatch.delenv("PYTHONMALLOC", raising=False)
    endpoint, started = start_local_daemon(fleet_env)
    try:
        assert started
        assert _environ(endpoint.pid).get("PYTHONMALLOC") == "malloc"
    finally:
        os.kill(endpoint.pid, 15)
        retry_until(
            lambda: not Path(f"/proc/{endpoint.pid}").exists() or _zombie(endpoint.pid),
            20,
            0.05,
            "the daemon stopped",
        )


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
