"""Several daemons on one PostgreSQL store (tests/pg.py): a commit on one wakes the long-polls parked
on another at once (LISTEN/NOTIFY), and a token revoked through one is refused by the other; two
daemon processes with stand-ins conversing through both, one SIGKILLed mid-conversation.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from conftest import retry_until
from mcphelp import RawMcp, channel_argv, minted_token_file
from test_client_failover import TURNS, assert_each_once

from fleet import errors
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths
from fleet.store import connect


def home(root: Path, store: str) -> Paths:
    return Paths(root / "data", root / "state", root / "config", root / "logs", store)


@dataclass
class Two:
    a: Daemon
    b: Daemon

    def operator(self, d: Daemon) -> Client:
        return Client(d.url, d.operator_token)


@pytest.fixture
def two(pg_url: str, tmp_path: Path) -> Iterator[Two]:
    """Daemons A and B in this process, each its own state dir, on one database."""
    a = Daemon(home(tmp_path / "a", pg_url), listen="127.0.0.1:0")
    b = Daemon(home(tmp_path / "b", pg_url), listen="127.0.0.1:0")
    a.start()
    try:
        b.start()
        try:
            yield Two(a, b)
        finally:
            b.stop()
    finally:
        a.stop()


def test_a_long_poll_parked_on_b_wakes_at_once_for_a_post_on_a(two: Two) -> None:
    on_a, on_b = two.operator(two.a), two.operator(two.b)
    on_a.create_wave("w", ["alice"])
    main = on_b.resolve("w/main").id
    cursor = on_b.read(main).blips[-1].id
    got: list[tuple[float, list[str]]] = []

    def park() -> None:
        page = on_b.read(main, after=cursor, wait=20)
        got.append((time.monotonic(), [x.text for x in page.blips]))

    t = threading.Thread(target=park)
    t.start()
    retry_until(lambda: two.b.notifier.parked > 0, what="the read to park on B")
    sent = time.monotonic()
    on_a.post(main, "from A", as_="alice")
    t.join(25)
    assert got and got[0][1] == ["from A"], got
    assert got[0][0] - sent < 2.0, f"woken {got[0][0] - sent:.2f} s after the post (the wait was 20 s)"


def test_a_token_revoked_through_a_is_refused_by_b(two: Two) -> None:
    on_a = two.operator(two.a)
    on_a.create_wave("w", ["alice"])
    minted = on_a.mint_token("w", "alice")
    alice_on_b = Client(two.b.url, minted.token)
    assert alice_on_b.whoami().principal == "alice"  # B now remembers the token
    on_a.revoke_token(token_id=minted.id)

    def refused() -> bool:
        try:
            alice_on_b.whoami()
        except errors.Unauthorized:
            return True
        return False

    retry_until(refused, timeout=5, what="B to refuse the token revoked through A")


# ---------------------------------------------------------------- two daemon processes, one killed


class Procs:
    """Daemons A and B as processes (``fleet daemon run --store URL``), each its own FLEET_HOME, on
    one database; each on a fixed port so a client can list both before either starts."""

    def __init__(self, root: Path, url: str) -> None:
        self.root, self.url_of_store = root, url
        root.mkdir(parents=True, exist_ok=True)
        self.ports = {"a": free_port(), "b": free_port()}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.tokens: dict[str, str] = {}

    def url(self, which: str) -> str:
        return f"http://127.0.0.1:{self.ports[which]}"

    def start(self, which: str) -> None:
        env = {**os.environ, "FLEET_HOME": str(self.root / which)}
        with (self.root / f"daemon-{which}.log").open("wb") as out:
            self.procs[which] = subprocess.Popen(
                [sys.executable, "-m", "fleet", "daemon", "run", "--listen",
                 f"127.0.0.1:{self.ports[which]}", "--store", self.url_of_store],
                stdout=out, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        probe = Client(self.url(which), "", retries=0, timeout=2)

        def answers() -> bool:
            assert self.procs[which].poll() is None, (self.root / f"daemon-{which}.log").read_text()
            try:
                return probe.health().pid == self.procs[which].pid
            except Exception:
                return False

        retry_until(answers, timeout=30, what=f"daemon {which} to answer")
        self.tokens[which] = (self.root / which / "data" / "operator.token").read_text().strip()

    def kill(self, which: str) -> None:
        self.procs[which].send_signal(signal.SIGKILL)
        self.procs[which].wait(10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stored(url: str) -> Counter[str]:
    conn = connect(url)
    try:
        return Counter(r[0] for r in conn.execute("SELECT text FROM blips WHERE kind = 'message'"))
    finally:
        conn.close()


def reply_gaps(url: str) -> list[float]:
    """Seconds between each message blip and the one before it, in commit order."""
    conn = connect(url)
    try:
        at = [r[0] for r in conn.execute("SELECT created_at FROM blips WHERE kind = 'message' ORDER BY id")]
    finally:
        conn.close()
    t = [datetime.fromisoformat(x.replace("Z", "+00:00")).timestamp() for x in at]
    return [round(b - a, 3) for a, b in itertools.pairwise(t)]


def standin(name: str, daemons: str, token_file: Path, tmp: Path, *extra: str) -> subprocess.Popen[bytes]:
    """A real ``fleet-standin`` whose fleet MCP server is a channel on the daemons listed."""
    server = channel_argv(name, "w", daemons, token_file)
    config = json.dumps({"mcpServers": {"fleet": {"command": server[0], "args": server[1:]}}})
    argv = [sys.executable, "-m", "fleet.standin", f"--mcp-config={config}", "--name", name,
            "--session-id", str(uuid.uuid4()), "--reply", "{author}: reply {n} from {name}",
            "--turns", str(TURNS), "--exit-after-done", *extra]  # fmt: skip
    env = {**os.environ, "FLEET_WAVELET": "w/main"}
    with (tmp / f"{name}.out").open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)


def test_stand_ins_conversing_through_two_daemons_complete_through_one_when_the_other_is_killed(
    pg_url: str, tmp_path: Path, fleet_env: Paths
) -> None:
    """alice's channel lists [A, B], bob's [B, A]: alice posts on A and bob on B, each woken by the
    other's posts across daemons. A is SIGKILLed a few replies in; alice's channel fails over to B
    (already serving), and the conversation completes: every reply stored once, none handed twice,
    carol (listening on [A, B]) hears every blip once, and ``fleet replay --check`` is clean."""
    d = Procs(tmp_path / "homes", pg_url)
    d.start("a")
    d.start("b")
    a_then_b, b_then_a = f"{d.url('a')},{d.url('b')}", f"{d.url('b')},{d.url('a')}"
    try:
        op = Client(d.url("a"), d.tokens["a"])
        op.create_wave("w", ["alice", "bob", "carol"])
        files = {who: minted_token_file(op, "w", who, tmp_path) for who in ("alice", "bob", "carol")}
        carol = RawMcp(channel_argv("carol", "w", a_then_b, files["carol"]), stderr=tmp_path / "carol.stderr")
        carol.handshake()
        bob = standin("bob", b_then_a, files["bob"], tmp_path)
        alice = standin(
            "alice", a_then_b, files["alice"], tmp_path, "--opening", "bob: let us talk, from {name}"
        )
        try:
            retry_until(lambda: stored(pg_url).total() >= 6, timeout=60, what="the conversation to get going")
            # each reply crossed daemons (alice's on A woke bob on B, and back): at once, never at the
            # 20 s end of a feed's long-poll (ms here; 10 s leaves room for a loaded machine)
            gaps = reply_gaps(pg_url)
            assert max(gaps) < 10.0, f"replies {gaps} s apart across the daemons"
            d.kill("a")
            killed_at = stored(pg_url).total()
            assert alice.wait(90) == 0 and bob.wait(90) == 0
            texts = stored(pg_url)
            assert_each_once(texts, killed_at, carol)
        finally:
            for proc in (alice, bob):
                if proc.poll() is None:
                    proc.kill()
            carol.kill()
        # both daemons minted: in commit order (the log's seq) every blip id is above the one before
        conn = connect(pg_url)
        posted = [
            json.loads(r[0])["blip"]["id"]
            for r in conn.execute("SELECT payload FROM events WHERE type = 'blip.posted' ORDER BY seq")
        ]
        conn.close()
        assert all(x < y for x, y in itertools.pairwise(posted)), posted
        check = subprocess.run(
            [sys.executable, "-m", "fleet", "replay", "--check"],
            env={**os.environ, "FLEET_STORE": pg_url}, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert check.returncode == 0 and "matches" in check.stdout, check.stdout + check.stderr
    finally:
        d.stop()
    print(f"{texts.total()} blips, A killed after {killed_at}; replies before: {gaps} s apart")


def test_posts_through_two_daemon_processes_at_once_get_ids_in_commit_order(
    pg_url: str, tmp_path: Path
) -> None:
    """Eight clients, four on each daemon, posting at once into one wavelet: every post stored once,
    and in commit order (the log's seq) every blip id above the one before."""
    d = Procs(tmp_path / "homes", pg_url)
    d.start("a")
    d.start("b")
    try:
        ops = {w: Client(d.url(w), d.tokens[w]) for w in ("a", "b")}
        ops["a"].create_wave("w", ["alice"])
        main = ops["b"].resolve("w/main").id
        failures: list[BaseException] = []

        def post(k: int) -> None:
            c = Client(d.url("ab"[k % 2]), d.tokens["ab"[k % 2]])
            try:
                for n in range(40):
                    c.post(main, f"{k}-{n}", as_="alice")
            except BaseException as exc:  # asserted below
                failures.append(exc)

        threads = [threading.Thread(target=post, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not failures, failures[:3]
    finally:
        d.stop()
    texts = stored(pg_url)
    assert texts.total() == 320 and set(texts.values()) == {1}
    conn = connect(pg_url)
    posted = [
        json.loads(r[0])["blip"]["id"]
        for r in conn.execute("SELECT payload FROM events WHERE type = 'blip.posted' ORDER BY seq")
    ]
    conn.close()
    out_of_order = [(x, y) for x, y in itertools.pairwise(posted) if not x < y]
    assert not out_of_order, out_of_order[:3]


def test_a_daemon_whose_listening_connection_is_cut_listens_again_and_still_wakes(
    two: Two, pg_url: str
) -> None:
    """The server ends B's LISTEN connection (an admin, a failover of the server): B connects and
    listens again, and a post on A wakes a long-poll parked on B as before."""
    on_a, on_b = two.operator(two.a), two.operator(two.b)
    on_a.create_wave("w", ["alice"])
    main = on_b.resolve("w/main").id
    assert two.b.store is not None and two.b.store._listener is not None
    listener = two.b.store._listener
    conn = connect(pg_url)
    cut = conn.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE query LIKE 'LISTEN%' AND datname = current_database()"
    ).fetchone()[0]
    conn.close()
    assert cut == 2  # A's and B's
    retry_until(lambda: listener.connects >= 2, timeout=10, what="B to listen again")
    cursor = on_b.read(main).blips[-1].id
    got: list[list[str]] = []
    t = threading.Thread(
        target=lambda: got.append([x.text for x in on_b.read(main, after=cursor, wait=20).blips])
    )
    t.start()
    retry_until(lambda: two.b.notifier.parked > 0, what="the read to park on B")
    sent = time.monotonic()
    on_a.post(main, "after the cut", as_="alice")
    t.join(25)
    assert got == [["after the cut"]] and time.monotonic() - sent < 5.0


def test_a_daemon_whose_connections_the_server_ended_answers_the_next_requests(two: Two, pg_url: str) -> None:
    """Every connection of both daemons ended by the server (as a restart of it does): the next read
    and the next post are answered at once, on connections opened again, and nothing is lost."""
    on_a = two.operator(two.a)
    on_a.create_wave("w", ["alice"])
    main = on_a.resolve("w/main").id
    on_a.post(main, "before", as_="alice")
    conn = connect(pg_url)
    cut = conn.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid != pg_backend_pid()"
    ).fetchone()[0]
    conn.close()
    assert cut >= 18  # a writer and 8 readers a daemon, and their listeners
    once = Client(two.a.url, two.a.operator_token, retries=0)  # no resend: the first answer counts
    assert [b.text for b in once.read(main).blips][-1] == "before"
    once.post(main, "after", as_="alice")
    on_b = Client(two.b.url, two.b.operator_token, retries=0)
    assert [b.text for b in on_b.read(main).blips][-2:] == ["before", "after"]
