"""Clients that fail over: two daemon processes on one SQLite store S, only one holding it at a time
(daemon A is SIGKILLed; daemon B starts on S after it, on another port), and clients that list
[A, B]. The CLI, a write whose answer was lost, the channel with stand-ins conversing, and the hook.

Without PostgreSQL: the clients' side only needs a second daemon that answers for the same store.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import retry_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcphelp import RawMcp, channel_argv, minted_token_file

from fleet import errors
from fleet.client import Client
from fleet.client.transport import KEPT
from fleet.daemon import Daemon
from fleet.paths import Paths


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Pair:
    """Daemons A and B for one FLEET_HOME (one store), each on its own fixed port; started, killed."""

    paths: Paths
    logs: Path
    ports: dict[str, int] = field(default_factory=lambda: {"a": free_port(), "b": free_port()})
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def url(self, which: str) -> str:
        return f"http://127.0.0.1:{self.ports[which]}"

    @property
    def both(self) -> str:
        """What a client lists: A, then B."""
        return f"{self.url('a')},{self.url('b')}"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "FLEET_HOME": str(self.paths.data.parent)}

    def start(self, which: str) -> str:
        """Start ``which`` and wait until it answers; the operator token."""
        log = self.logs / f"daemon-{which}-{time.monotonic_ns()}.log"
        with log.open("wb") as out:
            self.procs[which] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "fleet",
                    "daemon",
                    "run",
                    "--listen",
                    f"127.0.0.1:{self.ports[which]}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
        probe = Client(self.url(which), "", retries=0, timeout=2)

        def answers() -> bool:
            assert self.procs[which].poll() is None, log.read_text()
            try:
                return probe.health().pid == self.procs[which].pid
            except Exception:
                return False

        retry_until(answers, timeout=20, what=f"daemon {which} to answer")
        return self.paths.operator_token.read_text().strip()

    def kill(self, which: str) -> None:
        proc = self.procs[which]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


@pytest.fixture
def pair(fleet_env: Paths, tmp_path: Path) -> Iterator[Pair]:
    p = Pair(fleet_env, tmp_path)
    yield p
    p.stop()


def stored(db: Path) -> Counter[str]:
    conn = sqlite3.connect(db)
    try:
        return Counter(r[0] for r in conn.execute("SELECT text FROM blips WHERE kind = 'message'"))
    finally:
        conn.close()


# ---------------------------------------------------------------- the CLI


def test_the_cli_posts_through_a_list_whose_first_daemon_is_dead_and_lands_on_the_second(
    pair: Pair,
) -> None:
    token = pair.start("a")
    Client(pair.url("a"), token).create_wave("w", ["alice"])
    pair.kill("a")
    pair.start("b")
    env = {**pair.env, "FLEET_DAEMON": pair.both, "FLEET_TOKEN": token}
    got = subprocess.run(
        [sys.executable, "-m", "fleet", "post", "w/main", "through the list", "--as", "alice"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert got.returncode == 0, got.stdout + got.stderr
    b = Client(pair.url("b"), token)
    assert [x.text for x in b.read(b.resolve("w/main").id).blips][-1] == "through the list"
    assert stored(pair.paths.db)["through the list"] == 1

    # `fleet daemon status` names each listed daemon and whether it answers
    status = subprocess.run(
        [sys.executable, "-m", "fleet", "daemon", "status"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stdout + status.stderr
    lines = status.stdout.splitlines()
    assert lines[0] == "1 of 2 listed daemons answer:"
    assert pair.url("a") in lines[1] and "no answer (connection refused)" in lines[1]
    assert pair.url("b") in lines[2] and f"answers, pid {pair.procs['b'].pid}" in lines[2]
    as_json = subprocess.run(
        [sys.executable, "-m", "fleet", "daemon", "status", "--json"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    st = json.loads(as_json.stdout)
    assert st["running"] and st["url"] == pair.url("b")
    assert [(d["url"], d["answers"]) for d in st["daemons"]] == [
        (pair.url("a"), False),
        (pair.url("b"), True),
    ]

    pair.kill("b")  # none answers: exit 3, each named
    down = subprocess.run(
        [sys.executable, "-m", "fleet", "post", "w/main", "nowhere", "--as", "alice"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert down.returncode == 3, down.stdout + down.stderr
    assert pair.url("a") in down.stderr and pair.url("b") in down.stderr and "Traceback" not in down.stderr


# ---------------------------------------------------------------- a lost answer


class AnswerEater:
    """A TCP relay in front of daemon A that passes one request through, lets A answer it (A commits
    the write), SIGKILLs A, and closes the client's connection without passing the answer on: the
    write landed, and its writer cannot know."""

    def __init__(self, pair: Pair) -> None:
        self.pair = pair
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.ate = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        client, _ = self.listener.accept()
        with client, socket.create_connection(("127.0.0.1", self.pair.ports["a"])) as upstream:
            request = b""
            while b"\r\n\r\n" not in request:
                request += client.recv(65536)
            head, _, body = request.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            while len(body) < length:
                body += client.recv(65536)
            upstream.sendall(head + b"\r\n\r\n" + body)
            answer = upstream.recv(65536)
            assert answer.startswith(b"HTTP/1.1 201"), answer[:200]
            self.pair.kill("a")
            self.listener.close()  # A's address refuses from now on
            self.ate.set()


def test_a_write_whose_answer_was_lost_is_resent_to_the_other_daemon_and_lands_once(pair: Pair) -> None:
    token = pair.start("a")
    Client(pair.url("a"), token).create_wave("w", ["alice"])
    eater = AnswerEater(pair)
    writer = Client(f"{eater.url},{pair.url('b')}", token, patience=30)
    result: dict[str, object] = {}

    def post() -> None:
        try:
            result["blip"] = writer.post("w/main", "exactly once", as_="alice")
        except Exception as exc:
            result["error"] = exc

    t = threading.Thread(target=post, daemon=True)
    t.start()
    assert eater.ate.wait(20), "the relay never saw the post"
    assert stored(pair.paths.db)["exactly once"] == 1  # A committed it before its answer was eaten
    pair.start("b")  # B, on the same store, after A's death
    t.join(40)
    assert "error" not in result, result
    blip = result["blip"]
    assert stored(pair.paths.db)["exactly once"] == 1
    b = Client(pair.url("b"), token)
    ids = [x.id for x in b.read(b.resolve("w/main").id).blips if x.text == "exactly once"]
    assert ids == [getattr(blip, "id", None)]  # B answered the resend with the first answer: A's id
    assert writer.url == pair.url("b")
    move = writer.last_failover
    assert move is not None and move.source == eater.url and move.to == pair.url("b")


# ---------------------------------------------------------------- the channel


TURNS = 12


def standin(name: str, pair: Pair, token_file: Path, tmp: Path, *extra: str) -> subprocess.Popen[bytes]:
    """A real ``fleet-standin`` whose fleet MCP server is a channel on [A, B]."""
    server = channel_argv(name, "w", pair.both, token_file)
    config = json.dumps({"mcpServers": {"fleet": {"command": server[0], "args": server[1:]}}})
    argv = [sys.executable, "-m", "fleet.standin", f"--mcp-config={config}", "--name", name,
            "--session-id", str(uuid.uuid4()), "--reply", "{author}: reply {n} from {name}",
            "--turns", str(TURNS), "--exit-after-done", *extra]  # fmt: skip
    env = {**pair.env, "FLEET_WAVELET": "w/main"}
    with (tmp / f"{name}.out").open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)


def standin_events(paths: Paths, name: str) -> list[dict[str, object]]:
    path = paths.state / "standin" / f"{name}.jsonl"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def assert_each_once(texts: Counter[str], killed_at: int, carol: RawMcp) -> None:
    """The stand-ins' conversation (``texts``: what the store holds, each text's count) went on past
    the kill (``killed_at`` blips stored then): every one of its replies stored once, and carol's
    channel handed every blip once."""
    assert killed_at < texts.total(), "the conversation was over before A died"
    twice = [t for t, n in texts.items() if n > 1]
    assert not twice, f"stored twice: {twice}"
    for me, other in (("alice", "bob"), ("bob", "alice")):
        mine = [f"{other}: reply {n} from {me}" for n in range(1, TURNS + 1)]
        assert all(texts[t] == 1 for t in mine), (me, sorted(texts))
    expected = set(texts)

    def heard_all() -> Counter[str] | None:
        c = Counter(carol.contents())
        return c if expected <= set(c) else None

    got = retry_until(heard_all, timeout=30, what="carol to hear every blip")
    assert got is not None
    assert all(got[t] == 1 for t in expected), {t: n for t, n in got.items() if n != 1}


def test_a_conversation_through_a_channel_on_two_daemons_completes_when_the_first_is_killed(
    pair: Pair, tmp_path: Path
) -> None:
    token = pair.start("a")
    op = Client(pair.url("a"), token)
    op.create_wave("w", ["alice", "bob", "carol"])
    files = {who: minted_token_file(op, "w", who, tmp_path) for who in ("alice", "bob", "carol")}
    # carol only listens (a channel of her own on [A, B]): every blip once, and her status
    carol = RawMcp(channel_argv("carol", "w", pair.both, files["carol"]), stderr=tmp_path / "carol.stderr")
    carol.handshake()
    bob = standin("bob", pair, files["bob"], tmp_path)
    alice = standin("alice", pair, files["alice"], tmp_path, "--opening", "bob: let us talk, from {name}")
    try:
        # mid-conversation: a few replies in, A dies; B comes up on the same store
        retry_until(
            lambda: stored(pair.paths.db).total() >= 6, timeout=60, what="the conversation to get going"
        )
        pair.kill("a")
        killed_at = stored(pair.paths.db).total()
        pair.start("b")
        assert alice.wait(90) == 0 and bob.wait(90) == 0
        texts = stored(pair.paths.db)
        assert_each_once(texts, killed_at, carol)
        for me, other in (("alice", "bob"), ("bob", "alice")):
            heard = [
                str(e["content"]) for e in standin_events(pair.paths, me) if e.get("event") == "notification"
            ]
            theirs = [t for t in heard if f"from {other}" in t]
            assert len(theirs) == len(set(theirs)), f"{me} was handed a blip twice: {theirs}"
        ping = carol.call("wavelet_ping")["structuredContent"]
        detail = ping["delivery"]["detail"]
        assert ping["delivery"]["state"] == "running", ping
        assert f"on the daemon at {pair.url('b')}" in detail and f"failed over from {pair.url('a')}" in detail
        told = f"delivery failed over from the daemon at {pair.url('a')} to {pair.url('b')}"
        assert carol.stderr_text().count(told) == 1, carol.stderr_text()[-2000:]
    finally:
        for proc in (alice, bob):
            if proc.poll() is None:
                proc.kill()
        carol.kill()
    print(f"{texts.total()} blips, A killed after {killed_at}; carol: {detail}")


# ---------------------------------------------------------------- the hook


def test_the_hook_on_a_list_whose_first_daemon_is_dead_wakes_from_the_second(
    pair: Pair, tmp_path: Path
) -> None:
    token = pair.start("a")
    op = Client(pair.url("a"), token)
    op.create_wave("w", ["alice", "bob"])
    token_file = minted_token_file(op, "w", "alice", tmp_path)
    pair.kill("a")
    pair.start("b")
    Client(pair.url("b"), token).post("w/main", "alice: wake up", as_="bob")
    got = subprocess.run(
        [sys.executable, "-m", "fleet", "watch", "--participant", "alice", "--wave", "w",
         "--daemon", pair.both, "--token-file", str(token_file), "--hook"],
        env=pair.env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert got.returncode == 2, got.stdout + got.stderr
    assert "alice: wake up" in got.stderr


# ---------------------------------------------------------------- which daemon answers (property)


class Switch:
    """A TCP relay to a daemon that can be cut (its port refusing, its connections dropped, as a
    daemon killed) and restored on the same port; counts the connections it relayed."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = 0
        self.listener: socket.socket | None = None
        self.socks: list[socket.socket] = []
        self.accepted = 0
        self.lock = threading.Lock()
        self.up()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        if self.listener is not None:
            return
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def down(self) -> None:
        listener, self.listener = self.listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accept: the port refuses at once
            listener.close()
        with self.lock:
            socks, self.socks = self.socks, []
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.socks += [conn, upstream]
                self.accepted += 1
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def test_the_client_lands_on_the_first_daemon_up_from_its_current_one_and_stays_there(daemon: Daemon) -> None:
    """Three "daemons" (relays in front of one daemon, cut and restored at will) listed in order:
    whatever went up and down before, a call lands on the current one if it answers, else on the
    first that answers after it in the list's order (around the end), and stays there; with none
    up it fails naming all three, and the next call starts from the same place. Each change of the
    daemon that answers is one recorded failover, from the one before to the new one."""
    port = int(daemon.url.rsplit(":", 1)[1])
    switches = [Switch(port) for _ in range(3)]
    client = Client(",".join(s.url for s in switches), daemon.operator_token, retries=0, timeout=5)

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.frozensets(st.integers(0, 2), max_size=3), min_size=1, max_size=8))
    def check(steps: list[frozenset[int]]) -> None:
        for s in switches:
            s.up()
        client.health()  # start each example from whichever answers: the model's first state
        current = [s.url for s in switches].index(client.url)
        answered, moves = current, len(client.failovers)
        for up in steps:
            for i, s in enumerate(switches):
                (s.up if i in up else s.down)()
            before = [s.accepted for s in switches]
            if not up:
                with pytest.raises(errors.DaemonUnreachable) as got:
                    client.health()
                assert all(s.url in got.value.message for s in switches)
                assert client.url == switches[current].url  # a full round comes back to where it began
                continue
            client.health()
            expected = next(i % 3 for i in range(current, current + 3) if i % 3 in up)
            assert client.url == switches[expected].url, (steps, up)
            gained = [i for i, s in enumerate(switches) if s.accepted > before[i]]
            assert gained in ([], [expected]), gained  # answered there (a kept connection: no new one)
            if expected != answered:
                moves += 1
                move = client.last_failover
                assert move is not None
                assert (move.source, move.to) == (switches[answered].url, switches[expected].url)
            assert len(client.failovers) == min(moves, KEPT)
            current = answered = expected

    try:
        check()
    finally:
        for s in switches:
            s.down()
