"""Durability: a daemon process (``fleet daemon run``) under concurrent posting, killed with SIGKILL
or stopped with SIGTERM; on restart every acknowledged blip is there exactly once, in id order.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import pytest
from conftest import retry_until
from httphelp import Http, Resp

from fleet.paths import Paths


@dataclass
class DaemonProc:
    """One ``python -m fleet daemon run --listen 127.0.0.1:0`` on ``paths``; its log in ``log``."""

    paths: Paths
    log: Path
    proc: subprocess.Popen[bytes]
    url: str = ""
    token: str = ""

    def wait_ready(self) -> Self:
        def endpoint() -> dict[str, object] | None:
            assert self.proc.poll() is None, f"the daemon exited: {self.log.read_text()}"
            try:
                ep: dict[str, object] = json.loads(self.paths.endpoint.read_text())
            except (OSError, ValueError):
                return None
            return ep if ep.get("pid") == self.proc.pid else None

        ep = retry_until(endpoint, timeout=20, what="the daemon's endpoint file")
        assert ep is not None
        self.url = str(ep["url"])
        self.token = self.paths.operator_token.read_text().strip()
        assert Http(self.url).get("/v1/health").ok(200)["pid"] == self.proc.pid
        return self

    def http(self) -> Http:
        return Http(self.url, self.token, timeout=20)


@pytest.fixture
def spawn_daemon(fleet_env: Paths, tmp_path: Path) -> Iterator[Callable[[], DaemonProc]]:
    """Start daemon processes on ``fleet_env``; any still running at teardown is SIGKILLed."""
    procs: list[DaemonProc] = []

    def spawn() -> DaemonProc:
        log = tmp_path / f"daemon-{len(procs)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "fleet", "daemon", "run", "--listen", "127.0.0.1:0"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "FLEET_HOME": str(fleet_env.data.parent)},
            )
        d = DaemonProc(fleet_env, log, proc)
        procs.append(d)
        return d.wait_ready()

    yield spawn
    for d in procs:
        if d.proc.poll() is None:
            d.proc.kill()
        d.proc.wait(10)


@dataclass
class Poster:
    """A thread posting unique texts on its own keep-alive connection until told to stop or cut off."""

    url: str
    token: str
    wavelet: str
    tag: str
    acked: dict[str, str] = field(default_factory=dict)
    """text -> id, for every post answered 201."""
    attempted: set[str] = field(default_factory=set)
    statuses: list[int] = field(default_factory=list)
    error: BaseException | None = None
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        h = Http(self.url, self.token, timeout=20)
        i = 0
        try:
            while not self.stop.is_set():
                text = f"{self.tag}-{i}"
                i += 1
                self.attempted.add(text)
                r = h.post_blip(self.wavelet, text)
                self.statuses.append(r.status)
                if r.status == 201:
                    assert r.body["text"] == text
                    self.acked[text] = r.body["id"]
                elif r.status == 503:
                    return  # shutting down: nothing more will be accepted
                else:
                    raise AssertionError(f"unexpected answer {r.status}: {r.raw[:200]!r}")
        except (OSError, http.client.HTTPException) as exc:  # the daemon went away mid-stream
            self.error = exc
        finally:
            h.close()

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.run, name=f"poster-{self.tag}", daemon=True)
        t.start()
        return t


def all_blips(h: Http, wavelet: str) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    cursor = ""
    while True:
        page = h.read(wavelet, f"after={cursor}&limit=5000&history=1").ok(200)
        if not page["blips"]:
            return out
        out += page["blips"]
        cursor = page["cursor"]


def db_order(db: Path) -> tuple[list[str], list[str], str]:
    """Blip ids in commit order (event log seq), in rowid order, and the integrity check's verdict."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        by_seq = [
            json.loads(p)["blip"]["id"]
            for (p,) in conn.execute(
                "SELECT payload FROM events WHERE type IN ('blip.posted', 'blip.surfaced') ORDER BY seq"
            )
        ]
        by_rowid = [i for (i,) in conn.execute("SELECT id FROM blips ORDER BY rowid")]
        verdict = conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()
    return by_seq, by_rowid, verdict


def check_store(
    h: Http, db: Path, wavelet: str, posters: list[Poster], system_blips: int = 1
) -> list[dict[str, object]]:
    """Every acknowledged post present exactly once with its id; nothing that was not sent; id order."""
    blips = all_blips(h, wavelet)
    ids = [str(b["id"]) for b in blips]
    assert ids == sorted(ids) and len(ids) == len(set(ids))
    by_text: dict[str, list[str]] = {}
    for b in blips:
        if b["kind"] == "message":
            by_text.setdefault(str(b["text"]), []).append(str(b["id"]))
    attempted = set().union(*(p.attempted for p in posters))
    assert set(by_text) <= attempted, "a blip appeared that nobody sent"
    for p in posters:
        for text, blip_id in p.acked.items():
            assert by_text.get(text) == [blip_id], f"acknowledged {text} ({blip_id}) is {by_text.get(text)}"
    assert all(len(v) == 1 for v in by_text.values()), "a post was stored twice"
    assert len(blips) - len(by_text) == system_blips
    by_seq, by_rowid, verdict = db_order(db)
    assert verdict == "ok"
    assert by_seq == sorted(by_seq), "commit order is not id order"
    assert by_rowid == sorted(by_rowid)
    return blips


def test_sigkill_mid_stream_loses_no_acknowledged_blip(spawn_daemon: Callable[[], DaemonProc]) -> None:
    d = spawn_daemon()
    op = d.http()
    root = op.new_wave("durable").ok(201)["root_id"]
    posters: list[Poster] = []
    for round_ in range(2):  # kill, restart, post more, kill again
        batch = [Poster(d.url, d.token, root, f"r{round_}t{k}") for k in range(6)]
        threads = [p.start() for p in batch]
        posters += batch
        target = 300 * (round_ + 1)

        def enough(posters: list[Poster] = posters, target: int = target) -> bool:
            return sum(len(p.acked) for p in posters) >= target

        retry_until(enough, timeout=30, what=f"{target} acked posts")
        assert all(t.is_alive() for t in threads), "posting must still be going on when the kill lands"
        os.kill(d.proc.pid, signal.SIGKILL)
        assert d.proc.wait(10) == -signal.SIGKILL
        for t in threads:
            t.join(20)
            assert not t.is_alive()
        assert all(p.error is not None for p in batch), "every poster was cut off mid-stream"
        # the killed daemon left its endpoint file behind; it does not stop a restart
        stale = json.loads(d.paths.endpoint.read_text())
        assert stale["pid"] == d.proc.pid
        op.close()
        d = spawn_daemon()
        assert d.proc.pid != stale["pid"]
        op = d.http()
        blips = check_store(op, d.paths.db, root, posters)
        acked = sum(len(p.acked) for p in posters)
        print(f"round {round_}: {acked} acknowledged, {len(blips) - 1} stored, all present once")

    newest = max(str(b["id"]) for b in blips)
    after = op.post_blip(root, "after the restarts").ok(201)
    assert after["id"] > newest
    # a blip posted after restart goes to the end of the cursor order too
    assert op.read(root, f"after={newest}").ok()["blips"][0]["id"] == after["id"]
    op.close()


def test_stale_endpoint_file_does_not_prevent_a_start(
    spawn_daemon: Callable[[], DaemonProc], fleet_env: Paths
) -> None:
    # an endpoint file naming a long-gone daemon (and a live, unrelated pid: ours)
    fleet_env.state.mkdir(parents=True, exist_ok=True)
    fleet_env.endpoint.write_text(
        json.dumps({"url": "http://127.0.0.1:9", "pid": os.getpid(), "started_at": 0, "version": "0"})
    )
    d = spawn_daemon()
    assert json.loads(fleet_env.endpoint.read_text())["url"] == d.url
    d.http().get("/v1/whoami").ok(200)


def test_sigterm_is_graceful(spawn_daemon: Callable[[], DaemonProc]) -> None:
    d = spawn_daemon()
    op = d.http()
    root = op.new_wave("graceful").ok(201)["root_id"]
    quiet = op.fork(root, "quiet").ok(201)["id"]
    cursor = op.read(quiet).ok()["cursor"]

    # a long-poll in flight on a quiet wavelet, on a connection the daemon has already served
    poll = d.http()
    poll.get("/v1/whoami").ok(200)
    out: list[Resp | BaseException] = []

    def long_poll() -> None:
        try:
            out.append(poll.read(quiet, f"after={cursor}&wait=60"))
        except BaseException as exc:
            out.append(exc)

    poll_thread = threading.Thread(target=long_poll, daemon=True)
    poll_thread.start()
    posters = [Poster(d.url, d.token, root, f"t{k}") for k in range(4)]
    threads = [p.start() for p in posters]
    retry_until(lambda: sum(len(p.acked) for p in posters) >= 200, timeout=30, what="200 acked posts")
    for _ in range(3):  # round trips after the long-poll was sent: it has been read and parked
        op.get("/v1/whoami").ok(200)
    assert poll_thread.is_alive()

    t0 = time.perf_counter()
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(15) == 0, d.log.read_text()
    took = time.perf_counter() - t0
    poll_thread.join(10)
    for t in threads:
        t.join(20)
    res = out[0]
    assert isinstance(res, Resp), f"the in-flight long-poll got no answer: {res!r}"
    assert res.ok(200) == {"blips": [], "cursor": cursor}
    assert not d.paths.endpoint.exists(), "the endpoint file outlived the daemon"
    log = d.log.read_text()
    assert "Traceback" not in log, log
    assert log.count("fleet daemon stopped") == 1, log
    answers = sorted({s for p in posters for s in p.statuses})
    print(f"SIGTERM to exit: {took * 1000:.0f} ms; answers seen: {answers}")
    for p in posters:  # each poster was answered 201 until the end, then 503 or a closed connection
        assert set(p.statuses) <= {201, 503}

    d2 = spawn_daemon()
    op2 = d2.http()
    check_store(op2, d2.paths.db, root, posters, system_blips=2)  # created + the fork notice
    op.close()
    op2.close()
    poll.close()
