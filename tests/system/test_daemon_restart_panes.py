"""The local daemon's restart under spawned panes (real tmux, stand-in agents): they converse across a
SIGKILL and a stop/start, and spawn does not call ready a pane whose channel reaches no daemon."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import libtmux
from conftest import retry_until
from test_daemon_restart import fleet

from fleet.client import Client, read_endpoint
from fleet.daemon import Daemon
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
