"""Exactly once under crashes: a daemon killed with SIGKILL and restarted 0.2 s later, again and again,
while eight writers post. Every post answered is stored once, none is stored twice, no writer is told
a post failed, and the log replays to the same state.

Two kinds of writer, each on its own daemon: fleet's own :class:`~fleet.client.Client` (what the CLI,
watch, the campaign loop and the resident use), and ``fleet channel``'s ``wavelet_post`` tool over
stdio (what an agent calls).
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import retry_until
from mcphelp import RawMcp, channel_argv, minted_token_file

from fleet.client import Client
from fleet.paths import Paths

WRITERS = 8
RESTART_AFTER = 0.2
"""Seconds between the SIGKILL and the new daemon's start (the fault run's figure)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Restarter:
    """``fleet daemon run`` on one fixed port over ``paths``: started, SIGKILLed, started again."""

    paths: Paths
    logs: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = self.logs / f"daemon-{self.starts}.log"
        self.starts += 1
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fleet", "daemon", "run", "--listen", f"127.0.0.1:{self.port}"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "FLEET_HOME": str(self.paths.data.parent)},
            )

    def ready(self) -> str:
        """Wait for the daemon to answer; its operator token."""
        probe = Client(self.url, "", retries=0, timeout=2)
        retry_until(lambda: _answers(probe), timeout=20, what="the daemon to answer")
        return self.paths.operator_token.read_text().strip()

    def kill_and_restart(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        time.sleep(RESTART_AFTER)  # the fault being tested: a restart 0.2 s after the crash
        self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _answers(probe: Client) -> bool:
    try:
        probe.health()
    except Exception:
        return False
    return True


@pytest.fixture
def restarter(fleet_env: Paths, tmp_path: Path) -> Iterator[Restarter]:
    r = Restarter(fleet_env, tmp_path)
    r.start()
    yield r
    r.stop()


def crash_while(restarter: Restarter, writers: list[threading.Thread], crashes: int, between: float) -> None:
    """Let the writers run, SIGKILL the daemon and restart it ``crashes`` times, ``between`` seconds of
    writing before each crash (counted once the daemon answers again), then let them finish."""
    for t in writers:
        t.start()
    for _ in range(crashes):
        restarter.ready()
        time.sleep(between)  # writing goes on meanwhile: the crash must land mid-stream
        restarter.kill_and_restart()
    restarter.ready()
    time.sleep(between)


def stored_texts(db: Path) -> collections.Counter[str]:
    conn = sqlite3.connect(db)
    try:
        return collections.Counter(
            r[0] for r in conn.execute("SELECT text FROM blips WHERE kind = 'message'")
        )
    finally:
        conn.close()


def check_exactly_once(db: Path, acked: dict[str, str]) -> collections.Counter[str]:
    stored = stored_texts(db)
    twice = {t: n for t, n in stored.items() if n > 1}
    assert not twice, f"stored more than once: {sorted(twice)[:10]} ({len(twice)} texts)"
    lost = [t for t in acked if stored[t] != 1]
    assert not lost, f"acked but not stored: {lost[:10]} ({len(lost)})"
    # Every writer waits for each answer before it stops: a post stored but never acked was one its
    # writer was told had failed.
    unacked = sorted(set(stored) - set(acked))
    assert not unacked, f"stored but never acked: {unacked[:10]} ({len(unacked)})"
    return stored


def replay_is_clean(paths: Paths) -> None:
    env = {**os.environ, "FLEET_HOME": str(paths.data.parent)}
    done = subprocess.run(
        [sys.executable, "-m", "fleet", "replay", "--check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_kill_9_and_a_quick_restart_lose_nothing_and_duplicate_nothing_through_the_client(
    restarter: Restarter,
) -> None:
    token = restarter.ready()
    names = [f"p{i}" for i in range(WRITERS)]
    Client(restarter.url, token).create_wave("w", names)
    acked: dict[str, str] = {}
    failures: list[str] = []
    stop = threading.Event()
    lock = threading.Lock()

    def write(name: str) -> Callable[[], None]:
        def run() -> None:
            c = Client(restarter.url, token, patience=30)
            n = 0
            while not stop.is_set():
                text = f"{name}-{n}"
                n += 1
                try:
                    blip = c.post("w/main", text, as_=name)
                except Exception as exc:
                    failures.append(f"{text}: {exc}")
                    return
                with lock:
                    acked[text] = blip.id

        return run

    writers = [threading.Thread(target=write(n), daemon=True) for n in names]
    crash_while(restarter, writers, crashes=6, between=0.7)
    stop.set()
    for t in writers:
        t.join(60)
    assert not failures, failures[:5]
    restarter.stop()
    stored = check_exactly_once(restarter.paths.db, acked)
    assert len(acked) > 500, f"only {len(acked)} posts: the writers hardly ran"
    print(f"{len(acked)} acked over {restarter.starts - 1} crashes, {sum(stored.values())} stored, 0 twice")
    replay_is_clean(restarter.paths)


def test_an_agent_posting_through_its_channel_never_sees_a_quick_restart(
    restarter: Restarter, tmp_path: Path
) -> None:
    token = restarter.ready()
    names = [f"p{i}" for i in range(WRITERS)]
    op = Client(restarter.url, token)
    op.create_wave("w", names)
    for name in names:  # one wavelet each: the test is about posting, not about pushing to 8 others
        op.fork("w/main", f"desk-{name}", with_=[name])
    channels = [
        RawMcp(
            channel_argv(name, "w", restarter.url, minted_token_file(op, "w", name, tmp_path)),
            stderr=tmp_path / f"{name}.stderr",
            who=name,
        )
        for name in names
    ]
    acked: dict[str, str] = {}
    failures: list[str] = []
    stop = threading.Event()
    lock = threading.Lock()

    def write(ch: RawMcp) -> Callable[[], None]:
        def run() -> None:
            n = 0
            while not stop.is_set():
                text = f"{ch.who}-{n}"
                n += 1
                try:
                    got = ch.call("wavelet_post", {"wavelet": f"desk-{ch.who}", "text": text}, timeout=60)
                except AssertionError as exc:
                    failures.append(f"{text}: {exc}")
                    return
                if got.get("isError"):
                    failures.append(f"{text}: {got['content'][0]['text']}")
                    return
                with lock:
                    acked[text] = got["structuredContent"]["blip"]["id"]

        return run

    try:
        for ch in channels:
            ch.handshake()
        writers = [threading.Thread(target=write(ch), daemon=True) for ch in channels]
        crash_while(restarter, writers, crashes=3, between=0.7)
        stop.set()
        for t in writers:
            t.join(90)
        assert not failures, failures[:5]
    finally:
        for ch in channels:
            ch.kill()
    restarter.stop()
    stored = check_exactly_once(restarter.paths.db, acked)
    assert len(acked) > 100, f"only {len(acked)} posts: the agents hardly ran"
    print(
        f"{len(acked)} wavelet_post acked over {restarter.starts - 1} crashes, {sum(stored.values())} stored"
    )
    replay_is_clean(restarter.paths)
