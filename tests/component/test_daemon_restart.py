"""The local daemon survives its own restart (docs/design.md §2, "A stable local endpoint").

The daemon is the real local one, started in the background as a user's first command starts it;
three stand-in agents converse through their channels while it is killed with SIGKILL (and
auto-started again by the next command) and while it is stopped and started: the conversation
completes, each blip reaches each participant exactly once, nothing is replayed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import libtmux
from conftest import retry_until
from scripted_model import Script, on_message, post, rule, say

from fleet.client import Client, read_endpoint
from fleet.daemon import Daemon
from fleet.delivery.state import StateFile
from fleet.paths import Paths
from fleet.procs import pid_alive

RING = """\
description = "a ring: the operator asks alice, alice asks bob, bob asks carol, carol answers"
arrangement = "tiled"

[defaults]
agent = "fleet-standin"
attention = "full"

[participants.alice]
args = ["--reply", "bob: alice passes round {n} on.", "--turns", "3", "--done", "DONE: alice."]

[participants.bob]
args = ["--reply", "carol: bob passes round {n} on.", "--turns", "3", "--done", "DONE: bob."]

[participants.carol]
args = ["--reply", "operator: carol closes round {n}.", "--turns", "3", "--done", "DONE: carol."]
"""
PEOPLE = ("alice", "bob", "carol")


def fleet(env: dict[str, str], *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def standin_log(paths: Paths, name: str) -> list[dict[str, Any]]:
    path = paths.state / "standin" / f"{name}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def delivered(paths: Paths, name: str) -> list[str]:
    """Every blip id the stand-in's channel pushed to it, in order, repeats kept."""
    out: list[str] = []
    for e in standin_log(paths, name):
        if e["event"] == "notification":
            meta = e["meta"]
            ids = meta.get("blip_ids") or meta.get("blip_id", "")
            out.extend(i for i in ids.replace(",", " ").split() if i)
    return out


def blips(env: dict[str, str]) -> list[dict[str, Any]]:
    got = fleet(env, "read", "w/main", "--json")
    assert got.returncode == 0, got.stderr
    return list(json.loads(got.stdout)["blips"])


def count(env: dict[str, str], needle: str) -> int:
    return sum(needle in b["text"] for b in blips(env))


def test_three_standins_converse_across_a_sigkill_and_a_stop_start(
    fleet_env: Paths, tmux_server: libtmux.Server
) -> None:
    tmux_server.cmd("new-session", "-d", "-s", "keepalive", "tail", "-f", "/dev/null")
    env = {**os.environ, "FLEET_TMUX_SOCKET": str(tmux_server.socket_name)}
    (fleet_env.layouts).mkdir(parents=True, exist_ok=True)
    (fleet_env.layouts / "ring.toml").write_text(RING)
    try:
        made = fleet(env, "wave", "new", "w", "--with", ",".join(PEOPLE))
        assert made.returncode == 0, made.stderr
        first = read_endpoint(fleet_env)
        assert first is not None and first.store_id
        spawned = fleet(env, "spawn", "w/main", "--layout", "ring")
        assert spawned.returncode == 0, spawned.stdout + spawned.stderr

        def round_trip(n: int) -> None:
            posted = fleet(env, "post", "w/main", f"alice: round {n}, please.")
            assert posted.returncode == 0, posted.stderr
            retry_until(lambda: count(env, f"carol closes round {n}.") == 1, 30, 0.1, f"round {n}")

        round_trip(1)
        os.kill(first.pid, signal.SIGKILL)
        retry_until(lambda: not pid_alive(first.pid), 10, 0.02, "the daemon to die")
        round_trip(2)  # `fleet post` auto-starts the daemon: on the same address
        second = read_endpoint(fleet_env)
        assert second is not None and second.pid != first.pid
        assert (second.url, second.store_id) == (first.url, first.store_id)

        stopped = fleet(env, "daemon", "stop")
        assert stopped.returncode == 0, stopped.stderr
        started = fleet(env, "daemon", "start")
        assert started.returncode == 0 and first.url in started.stdout, started.stdout + started.stderr
        round_trip(3)
        retry_until(lambda: count(env, "DONE:") == 3, 30, 0.1, "three DONE blips")

        everything = blips(env)
        assert [b["text"] for b in everything if "round" in b["text"]] == [
            text
            for n in (1, 2, 3)
            for text in (
                f"alice: round {n}, please.",
                f"bob: alice passes round {n} on.",
                f"carol: bob passes round {n} on.",
                f"operator: carol closes round {n}.",
            )
        ]
        for who in PEOPLE:
            others = [b["id"] for b in everything if b["author"] != who and b["kind"] == "message"]
            retry_until(
                lambda who=who, others=others: set(others) <= set(delivered(fleet_env, who)),  # type: ignore[misc]
                10,
                0.1,
                f"{who} to receive every blip",
            )
            got = delivered(fleet_env, who)
            assert len(got) == len(set(got)), f"{who} was handed a blip twice: {got}"
            mine = {b["id"] for b in everything if b["author"] == who}
            assert not mine & set(got), f"{who} was handed its own blips"
    finally:
        fleet(env, "daemon", "stop")


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


def test_spawn_does_not_call_a_pane_ready_whose_channel_reaches_no_daemon(
    fleet_env: Paths, tmux_server: libtmux.Server
) -> None:
    tmux_server.cmd("new-session", "-d", "-s", "keepalive", "tail", "-f", "/dev/null")
    first = Daemon(fleet_env, "127.0.0.1:0")
    first.start()
    env = {**os.environ, "FLEET_TMUX_SOCKET": str(tmux_server.socket_name), "FLEET_DAEMON": first.url}
    env["FLEET_TOKEN"] = first.operator_token
    Client(first.url, first.operator_token).create_wave("w", ["alice"])
    spawned = fleet(env, "spawn", "w/main", "--agent", "fleet-standin")
    assert spawned.returncode == 0, spawned.stdout + spawned.stderr
    first.stop()
    moved = Daemon(fleet_env, "127.0.0.1:0")  # a daemon on another address: the channel cannot know
    moved.start()
    try:
        env["FLEET_DAEMON"] = moved.url
        again = fleet(env, "spawn", "w/main", "--agent", "fleet-standin")
        assert again.returncode == 1, again.stdout + again.stderr
        assert "ready (already running)" not in again.stdout
        assert "has not reached the daemon" in again.stderr
        assert "fleet respawn w/main alice --force" in again.stderr
    finally:
        moved.stop()


def test_a_real_claude_session_carries_on_across_a_sigkill_and_an_auto_start_with_nothing_replayed(
    tmp_path: Path, fleet_env: Paths, tmux_server: libtmux.Server
) -> None:
    """One real Claude Code session (and a real partner) over the scripted model: the local daemon
    is killed with SIGKILL mid-conversation and started again by the next command; the sessions'
    own transcripts show every blip of the others entering once, none twice."""
    from realclaude import RealFleet
    from test_receipts_real import reached

    env = dict(os.environ)
    started = fleet(env, "daemon", "start")
    assert started.returncode == 0, started.stderr
    first = read_endpoint(fleet_env)
    assert first is not None
    op = Client(first.url, fleet_env.operator_token.read_text().strip())
    script = Script(
        {
            "alice": [rule(on_message(author="operator"), post("{wavelet}", "bob: noted {n}"))],
            "bob": [rule(on_message(author="alice"), say("ok"))],
        }
    )
    real = RealFleet(tmp_path, fleet_env, op, tmux_server, channels=True, script=script)
    try:
        op.create_wave("w", ["alice", "bob"])
        real.spawn("w/main", real.layout(["alice", "bob"]))
        main = op.resolve("w/main").id

        def round_trip(n: int) -> None:
            op.post(main, f"alice: step {n}")
            answered = partial(lambda n: sum(b.author == "alice" for b in real.blips("w/main")) >= n, n)
            real.wait(answered, f"alice's answer {n}")

        round_trip(1)
        os.kill(first.pid, signal.SIGKILL)
        retry_until(lambda: not pid_alive(first.pid), 10, 0.02, "the daemon to die")
        again = fleet({k: v for k, v in env.items() if k != "FLEET_DAEMON"}, "whoami")  # auto-starts it
        assert again.returncode == 0, again.stderr
        second = read_endpoint(fleet_env)
        assert second is not None and second.url == first.url and second.pid != first.pid
        round_trip(2)
        round_trip(3)
        for who in ("alice", "bob"):
            others = [b.id for b in real.blips("w/main") if b.author != who]
            t = real.transcript(who)
            retry_until(
                lambda t=t, others=others: reached(t) == others,  # type: ignore[misc]
                120,
                0.2,
                f"{who}: every blip once",
            )
    finally:
        real.close()
        fleet(env, "daemon", "stop")
