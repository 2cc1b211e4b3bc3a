"""Storage faults are named (docs/design.md §2): a full disk (a real, small tmpfs), a read-only file
system (a real read-only bind mount), an empty (0-byte) and a bit-flipped database.

At start the daemon refuses with a message naming the cause and what to do, and exits 7
(:class:`fleet.errors.StorageFault`); at run time a write that fails is a typed error for the client
(HTTP 507, kind ``storage``; the CLI exits 7, no traceback). Earlier data stays intact and readable.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from httphelp import Http, host_port
from test_cli import base_env

from fleet import errors
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths, get_paths
from fleet.store import OPERATOR_PRINCIPAL, Store


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, timeout=30)


def umount(path: Path) -> None:
    """Unmount ``path`` (lazily if something still holds it: a failed test must not leave it mounted)."""
    if subprocess.run(["umount", str(path)], capture_output=True, timeout=30).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], check=True, capture_output=True, timeout=30)


@pytest.fixture
def small_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A real 4 MiB tmpfs holding FLEET_HOME (unmounted at teardown)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mount("-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(disk))
    monkeypatch.setenv("FLEET_HOME", str(disk / "fleet"))
    try:
        yield disk
    finally:
        umount(disk)


def fill(path: Path) -> None:
    """Write ``path`` until its file system has not one free page left (a real ENOSPC)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (1 << 20, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == 28, exc  # ENOSPC
    finally:
        os.close(fd)


def cli(
    *args: str, env: dict[str, str], stdin: str = "", timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def daemon_run(paths: Paths) -> subprocess.CompletedProcess[str]:
    """``fleet daemon run`` on ``paths``: it must exit on its own (a refused start)."""
    env = base_env(FLEET_HOME=str(paths.data.parent))
    env.pop("FLEET_DAEMON", None)
    return cli("daemon", "run", env=env, timeout=20)


def seed(paths: Paths) -> list[str]:
    """A store with a wave and three blips, closed; returns the blips' texts."""
    paths.data.mkdir(parents=True, exist_ok=True)
    store = Store(paths.db)
    try:
        wave = store.create_wave(OPERATOR_PRINCIPAL, "w", ["alice"])
        texts = [f"blip {i}" for i in range(3)]
        for t in texts:
            store.post(OPERATOR_PRINCIPAL, wave.root_id, t)
    finally:
        store.close()
    return texts


def texts_in(paths: Paths) -> list[str]:
    store = Store(paths.db)
    try:
        wl = store.resolve(OPERATOR_PRINCIPAL, "w/main")
        return [b.text for b in store.read_resolved(OPERATOR_PRINCIPAL, wl.id) if b.kind == "message"]
    finally:
        store.close()


def refused(r: subprocess.CompletedProcess[str], *named: str) -> str:
    assert r.returncode == errors.StorageFault.exit_code, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    for word in named:
        assert word in r.stderr, (word, r.stderr)
    return r.stderr


def test_disk_full_is_a_named_typed_error_and_earlier_data_is_intact(small_disk: Path) -> None:
    paths = get_paths()
    d = Daemon(paths, listen="127.0.0.1:0")
    d.start()
    try:
        op = Client(d.url, d.operator_token)
        wave = op.create_wave("w", ["alice"])
        for i in range(3):
            op.post(wave.root_id, f"before {i}")
        fill(small_disk / "filler")
        env = base_env(FLEET_DAEMON=d.url, FLEET_TOKEN=d.operator_token)
        r = cli("post", "w/main", "-", env=env, stdin="x" * 200_000)
        err = refused(r, "database or disk is full", "free space")
        assert "internal error" not in err and r.stdout == ""
        # Over HTTP: 507 with the error kind a client turns back into StorageFault.
        resp = Http(d.url, d.operator_token).post_blip(wave.root_id, "y" * 200_000)
        assert resp.status == 507 and resp.error["kind"] == "storage", resp.raw[:300]
        assert "database or disk is full" in resp.error["message"]
        # Reads still work on the full disk, and show exactly what was committed before.
        got = json.loads(cli("read", "w/main", "--json", env=env).stdout)
        shown = [b["text"] for b in got["blips"] if b["kind"] == "message"]
        assert shown == [f"before {i}" for i in range(3)]
        (small_disk / "filler").unlink()
        r = cli("post", "w/main", "after", env=env)
        assert r.returncode == 0, r.stderr
    finally:
        d.stop()
    # A fresh start passes quick_check and holds the three blips and the one posted after, only.
    assert texts_in(paths) == ["before 0", "before 1", "before 2", "after"]
    d = Daemon(paths, listen="127.0.0.1:0")
    d.start()
    d.stop()


def test_an_empty_database_is_refused_not_reinitialised(fleet_env: Paths) -> None:
    fleet_env.data.mkdir(parents=True)
    fleet_env.db.write_bytes(b"")
    r = daemon_run(fleet_env)
    refused(r, "empty (0-byte)", "restore", f"mv {fleet_env.db}")
    assert fleet_env.db.stat().st_size == 0  # left exactly as it was
    # A command that auto-starts the daemon says why it could not, with the same exit code.
    env = base_env(FLEET_HOME=str(fleet_env.data.parent))
    env.pop("FLEET_DAEMON", None)
    refused(cli("ls", env=env), "refused to start", "empty (0-byte)", str(fleet_env.daemon_log))
    assert fleet_env.db.stat().st_size == 0
    with pytest.raises(errors.StorageFault, match="0-byte"):
        Daemon(fleet_env, listen="127.0.0.1:0").start()


def test_a_bit_flipped_database_is_caught_by_quick_check_at_start(fleet_env: Paths) -> None:
    seed(fleet_env)
    conn = sqlite3.connect(fleet_env.db)
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'blips_by_wavelet'").fetchone()[0]
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = bytearray(fleet_env.db.read_bytes())
    data[(root - 1) * page] ^= 0x01  # one bit of the index page's type byte
    fleet_env.db.write_bytes(bytes(data))
    before = hashlib.sha256(fleet_env.db.read_bytes()).hexdigest()
    r = daemon_run(fleet_env)
    refused(r, "corrupt", "quick_check", "fleet backup")
    assert hashlib.sha256(fleet_env.db.read_bytes()).hexdigest() == before


def test_a_largest_id_edited_by_hand_is_refused_at_start_and_the_data_is_intact(fleet_env: Paths) -> None:
    """No id can be minted above an id that is not UUIDv7 text: the start is refused, naming it,
    where it used to start and fail every write with a traceback."""
    seed(fleet_env)
    conn = sqlite3.connect(fleet_env.db)
    conn.execute("UPDATE blips SET id = 'zz-by-hand' WHERE text = 'blip 2'")
    conn.commit()
    conn.close()
    before = hashlib.sha256(fleet_env.db.read_bytes()).hexdigest()
    refused(daemon_run(fleet_env), "'zz-by-hand'", "edited by hand", "fleet backup")
    assert hashlib.sha256(fleet_env.db.read_bytes()).hexdigest() == before


def test_a_read_only_file_system_is_named_at_start_and_the_data_is_intact(fleet_env: Paths) -> None:
    texts = seed(fleet_env)
    data = fleet_env.data
    mount("--bind", str(data), str(data))
    try:
        mount("-o", "remount,bind,ro", str(data))
        r = daemon_run(fleet_env)
        refused(r, "read-only", "remount it read-write")
    finally:
        umount(data)
    assert texts_in(fleet_env) == texts


def test_on_a_full_disk_the_answers_of_one_turn_are_what_was_stored(small_disk: Path) -> None:
    """The requests one turn of the daemon's loop reads share a transaction (a group commit): when
    it cannot be saved, none of them is answered as written, and what was answered 201 is stored."""
    paths = get_paths()
    d = Daemon(paths, listen="127.0.0.1:0")
    d.start()
    texts = [f"{i:02d}" + "x" * 40_000 for i in range(10)]
    answers: list[tuple[int, bytes]] = []
    held, go = threading.Event(), threading.Event()
    try:
        op = Client(d.url, d.operator_token)
        wave = op.create_wave("w", ["alice"])
        op.post(wave.root_id, "before")
        fill(small_disk / "filler")
        host = d.url.removeprefix("http://")
        socks = [socket.create_connection(host_port(d.url), timeout=20) for _ in texts]
        for s in socks:  # each connection accepted and served once: the loop has them all
            s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: %s\r\n\r\n" % host.encode())
            assert read_answer(s)[0] == 200
        # The loop held while every post is sent: its next turn reads all ten at once.
        assert d._httpd is not None

        def hold() -> None:
            held.set()
            go.wait(20)

        d._httpd.loop.call_soon_threadsafe(hold)
        assert held.wait(20)
        for s, text in zip(socks, texts, strict=True):
            body = json.dumps({"text": text}).encode()
            s.sendall(
                f"POST /v1/wavelets/{wave.root_id}/blips HTTP/1.1\r\nHost: {host}\r\n"
                f"Authorization: Bearer {d.operator_token}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
        go.set()
        answers = [read_answer(s) for s in socks]
        for s in socks:
            s.close()
    finally:
        go.set()
        d.stop()
    statuses = [status for status, _ in answers]
    assert set(statuses) <= {201, 507}, answers
    assert 507 in statuses, statuses  # 400 KB more than the disk holds
    for status, body in answers:
        if status == 507:
            assert json.loads(body)["error"]["kind"] == "storage", body
    (small_disk / "filler").unlink()
    answered = [t for t, status in zip(texts, statuses, strict=True) if status == 201]
    assert sorted(t for t in texts_in(paths) if t != "before") == answered


def read_answer(s: socket.socket) -> tuple[int, bytes]:
    """One HTTP answer (with its Content-Length) read from ``s``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, f"the connection closed without an answer: {data[:200]!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    n = next(
        int(v)
        for k, _, v in (line.partition(b":") for line in head.split(b"\r\n"))
        if k.lower() == b"content-length"
    )
    while len(rest) < n:
        chunk = s.recv(65536)
        assert chunk, "the connection closed mid-answer"
        rest += chunk
    return int(head.split(b" ", 2)[1]), rest[:n]
