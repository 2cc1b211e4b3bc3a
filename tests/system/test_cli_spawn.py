"""``fleet spawn``, ``fork --spawn``, ``attach`` and ``demo`` as a user runs them, on an isolated tmux.

The tmux server is started by the ``tmux_server`` fixture (own socket, own config file) and the CLI is
pointed at it with ``FLEET_TMUX_SOCKET``; the daemon is the fixture's, through FLEET_DAEMON/FLEET_TOKEN
(except for ``fleet demo``, which starts its own local daemon as a newcomer's first run would).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import libtmux
import pexpect
import pytest
from conftest import retry_until

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths
from fleet.tmux import Tmux

STANDIN = "fleet-standin --reply '{author}: yes ({name}).'"


def started(srv: libtmux.Server) -> str:
    """Start the fixture's server (with its own config) and return its socket name."""
    srv.cmd("new-session", "-d", "-s", "keepalive", "tail", "-f", "/dev/null")
    return str(srv.socket_name)


def run(env: dict[str, str], *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def env(daemon: Daemon, tmux_server: libtmux.Server) -> dict[str, str]:
    return {
        **os.environ,
        "FLEET_DAEMON": daemon.url,
        "FLEET_TOKEN": daemon.operator_token,
        "FLEET_TMUX_SOCKET": started(tmux_server),
    }


def test_spawn_prints_each_pane_and_is_idempotent(env: dict[str, str], operator: Client) -> None:
    operator.create_wave("w", ["alice", "bob"])
    first = run(env, "spawn", "w/main", "--agent", STANDIN, "--layout", "pair", "--json")
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert report["wavelet"] == "w/main" and report["attach"].endswith("fleet attach w")
    assert [(p["participant"], p["action"], p["ready"]) for p in report["panes"]] == [
        ("alice", "launched", True),
        ("bob", "launched", True),
    ]
    again = run(env, "spawn", "w/main", "--agent", STANDIN)
    assert again.returncode == 0, again.stderr
    for p in report["panes"]:
        assert f"{p['participant']}" in again.stdout and p["pane_id"] in again.stdout
    assert again.stdout.count("already running") == 2


def test_fork_spawn_staffs_the_new_wavelet_without_duplicating_running_members(
    env: dict[str, str], operator: Client, tmux_server: libtmux.Server
) -> None:
    operator.create_wave("w", ["alice", "bob"])
    assert run(env, "spawn", "w/main", "--agent", STANDIN).returncode == 0
    forked = run(
        env, "fork", "w/main", "--name", "side", "--with", "alice,dave", "--spawn", "--agent", STANDIN
    )
    assert forked.returncode == 0, forked.stderr
    assert "forked" in forked.stdout and "side" in forked.stdout
    panes = Tmux(tmux_server).fleet_panes(operator.get_wave("w").id)
    assert sorted(p.participant for p in panes) == ["alice", "bob", "dave"]
    dave = next(p for p in panes if p.participant == "dave")
    assert dave.wavelet == operator.resolve("w/side").id
    # alice's one channel delivers the fork too: a blip there that names her is answered
    operator.post(operator.resolve("w/side").id, "alice and dave: anything?")
    retry_until(
        lambda: {b.author for b in operator.read(operator.resolve("w/side").id).blips} >= {"alice", "dave"},
        timeout=20,
        what="answers in the fork",
    )


def test_spawn_errors_name_the_problem_with_documented_exit_codes(
    env: dict[str, str], operator: Client, tmp_path: Path
) -> None:
    operator.create_wave("w", ["alice"])
    unknown = run(env, "spawn", "w/nope", "--agent", STANDIN)
    assert unknown.returncode == 4 and "w/nope" in unknown.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[participants.alice]\nattention = 'sometimes'\n")
    layout = run(env, "spawn", "w/main", "--layout", str(bad))
    assert (
        layout.returncode == 2
        and str(bad) in layout.stderr
        and "participants.alice.attention" in layout.stderr
    )
    only_tmux = tmp_path / "bin"
    only_tmux.mkdir()
    (only_tmux / "tmux").symlink_to(shutil.which("tmux") or "/usr/bin/tmux")
    no_claude = run({**env, "PATH": str(only_tmux)}, "spawn", "w/main")
    assert no_claude.returncode == 6 and "claude" in no_claude.stderr and "--agent" in no_claude.stderr
    no_tmux = run({**env, "PATH": str(tmp_path)}, "spawn", "w/main", "--agent", STANDIN)
    assert no_tmux.returncode == 6 and "tmux" in no_tmux.stderr and "install" in no_tmux.stderr
    for r in (unknown, layout, no_claude, no_tmux):
        assert "Traceback" not in r.stderr


def test_attach_hands_the_terminal_to_the_waves_session(
    env: dict[str, str], operator: Client, tmux_server: libtmux.Server
) -> None:
    operator.create_wave("w", ["alice"])
    assert run(env, "spawn", "w/main", "--agent", STANDIN).returncode == 0
    child = pexpect.spawn(
        sys.executable, ["-m", "fleet", "attach", "w"], env=env, encoding="utf-8", dimensions=(40, 160)
    )
    try:
        child.expect("fleet stand-in alice ready", timeout=20)
        retry_until(lambda: tmux_server.cmd("list-clients").stdout, what="an attached client")
    finally:
        child.terminate(force=True)


def test_demo_runs_from_a_fresh_home_with_no_daemon(tmux_server: libtmux.Server, fleet_env: Paths) -> None:
    env = {**os.environ, "FLEET_TMUX_SOCKET": started(tmux_server)}
    try:
        t0 = time.monotonic()
        demo = run(env, "demo")
        took = time.monotonic() - t0
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert "started the local daemon" in demo.stderr
        assert demo.stdout.count("DONE:") == 3
        assert "all three agents finished" in demo.stdout and "fleet attach demo" in demo.stdout
        print(f"fleet demo took {took:.1f}s")
        again = run(env, "demo")  # a second run gets its own wave
        assert again.returncode == 0 and "created wave demo-2" in again.stdout
        transcript = run(env, "read", "demo/plan", "--json")
        blips = json.loads(transcript.stdout)
        authors = {b["author"] for b in blips["blips"] if b["text"].startswith("DONE:")}
        assert authors == {"alice", "bob", "carol"}
    finally:
        run(env, "daemon", "stop")


def test_ls_shows_every_wave_with_its_live_and_dead_panes(
    env: dict[str, str], operator: Client, tmux_server: libtmux.Server
) -> None:
    operator.create_wave("w", ["alice", "bob"])
    operator.create_wave("idle", ["carol"])
    assert run(env, "spawn", "w/main", "--agent", STANDIN, "--layout", "pair").returncode == 0
    bob = next(p for p in Tmux(tmux_server).fleet_panes(operator.get_wave("w").id) if p.participant == "bob")
    tmux_server.cmd("respawn-pane", "-k", "-t", bob.pane_id, "sh", "-c", "exit 3")  # bob's agent dies
    rows = retry_until(
        lambda: [r for r in json.loads(run(env, "ls", "--json").stdout) if r["dead"]],
        what="bob's pane seen dead",
    )
    listed = {r["wave"]: r for r in json.loads(run(env, "ls", "--json").stdout)}
    assert rows[0]["wave"] == "w"
    assert (listed["w"]["live"], listed["w"]["dead"], listed["w"]["agents"]) == (
        ["alice"],
        ["bob"],
        ["alice", "bob"],
    )
    assert listed["w"]["attach"].endswith("fleet attach w") and listed["idle"]["tmux_session"] is None
    human = run(env, "ls")
    assert human.returncode == 0
    line = next(ln for ln in human.stdout.splitlines() if ln.startswith("w "))
    assert "1 live, 1 dead (bob)" in line and "fleet attach w" in line


def test_list_layouts_names_shipped_and_own_layouts(env: dict[str, str], fleet_env: Paths) -> None:
    fleet_env.layouts.mkdir(parents=True)
    (fleet_env.layouts / "mine.toml").write_text('description = "my own"\n')
    (fleet_env.layouts / "broken.toml").write_text("arrangement = 'spiral'\n")
    listed = run(env, "spawn", "--list-layouts")
    assert listed.returncode == 0, listed.stderr
    rows = {ln.split()[0]: ln for ln in listed.stdout.splitlines()[1:]}
    assert {"demo", "lead", "pair", "review", "trio", "mine", "broken"} <= set(rows)
    assert "shipped" in rows["trio"] and "yours" in rows["mine"] and "my own" in rows["mine"]
    assert "BROKEN" in rows["broken"] and "arrangement" in rows["broken"]


def test_shell_completion_is_offered(env: dict[str, str]) -> None:
    shown = run(env, "--show-completion", "bash")
    assert shown.returncode == 0, shown.stderr
    assert "_FLEET_COMPLETE" in shown.stdout


def test_spawn_and_fork_reports_name_the_tmux_session_and_window(
    env: dict[str, str], operator: Client, tmux_server: libtmux.Server
) -> None:
    operator.create_wave("w", ["alice", "bob"])
    first = run(env, "spawn", "w/main", "--agent", STANDIN)
    assert first.returncode == 0, first.stderr
    head = first.stdout.splitlines()[0]
    assert head == "w/main in tmux session w, window main:", first.stdout
    # a fork whose members all run already gets no window: said in words, not "window -"
    forked = run(env, "fork", "w/main", "--name", "side", "--with", "alice", "--spawn", "--agent", STANDIN)
    assert forked.returncode == 0, forked.stderr
    assert "w/side: no window of its own: every member already runs in tmux session w" in forked.stdout
    fork2 = run(env, "fork", "w/main", "--name", "desk", "--with", "carol", "--spawn", "--agent", STANDIN)
    assert "w/desk in tmux session w, window desk:" in fork2.stdout, fork2.stdout + fork2.stderr
    for said in (first.stdout, forked.stdout, fork2.stdout):
        assert not re.search(r"session \$\d|window @\d|window -", said), said


def test_attach_without_a_terminal_says_what_to_do(
    env: dict[str, str], operator: Client, tmux_server: libtmux.Server
) -> None:
    operator.create_wave("w", ["alice"])
    assert run(env, "spawn", "w/main", "--agent", STANDIN).returncode == 0
    got = subprocess.run(
        [sys.executable, "-m", "fleet", "attach", "w"], env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert got.returncode == 2, got.stderr
    assert "needs a terminal" in got.stderr and "fleet status w" in got.stderr, got.stderr
    assert "open terminal failed" not in got.stderr and "Traceback" not in got.stderr
    assert not tmux_server.cmd("list-clients").stdout


def test_list_layouts_json_is_json(env: dict[str, str], fleet_env: Paths) -> None:
    fleet_env.layouts.mkdir(parents=True)
    (fleet_env.layouts / "mine.toml").write_text('description = "my own"\n')
    (fleet_env.layouts / "broken.toml").write_text("arrangement = 'spiral'\n")
    listed = run(env, "spawn", "--list-layouts", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert {"demo", "lead", "pair", "review", "trio", "mine", "broken"} <= set(rows)
    assert rows["mine"] == {
        "name": "mine", "source": "yours", "path": str(fleet_env.layouts / "mine.toml"),
        "description": "my own", "error": "",
    }  # fmt: skip
    assert rows["trio"]["source"] == "shipped" and rows["trio"]["error"] == ""
    assert "arrangement" in rows["broken"]["error"]
    missing = run(env, "spawn")
    assert missing.returncode == 2 and "WAVELET" in missing.stderr and "--list-layouts" in missing.stderr


def complete(env: dict[str, str], line: str) -> subprocess.CompletedProcess[str]:
    """What bash completion offers for ``line`` (the words typed so far, the last one incomplete)."""
    asked = {"_FLEET_COMPLETE": "complete_bash", "COMP_WORDS": line, "COMP_CWORD": str(line.count(" "))}
    return subprocess.run(
        [sys.executable, "-m", "fleet"], capture_output=True, text=True, timeout=30, env={**env, **asked}
    )


def test_completion_offers_waves_wavelets_and_layouts(
    env: dict[str, str], operator: Client, tmp_path: Path
) -> None:
    operator.create_wave("shop", ["alice"])
    operator.fork(operator.resolve("shop/main").id, "design", ["alice"])
    operator.create_wave("shed", ["bob"])
    assert complete(env, "fleet post shop/").stdout.split() == ["shop/design", "shop/main"]
    assert complete(env, "fleet read sh").stdout.split() == ["shed/main", "shop/design", "shop/main"]
    assert complete(env, "fleet attach sh").stdout.split() == ["shed", "shop"]
    assert complete(env, "fleet summary run s").stdout.split() == ["shed", "shop"]
    assert complete(env, "fleet spawn shop/main --layout tr").stdout.split() == ["trio"]
    assert "shop/design" in complete(env, "fleet fork shop/").stdout.split()
    # another home with no daemon: nothing offered, nothing said, and none started
    home = tmp_path / "elsewhere"
    alone = {k: v for k, v in env.items() if k not in ("FLEET_DAEMON", "FLEET_TOKEN")} | {
        "FLEET_HOME": str(home)
    }
    t0 = time.monotonic()
    quiet = complete(alone, "fleet post sh")
    assert (quiet.returncode, quiet.stdout.split(), quiet.stderr) == (0, [], "")
    assert time.monotonic() - t0 < 10 and not list(home.rglob("daemon.json"))
    assert complete(alone, "fleet spawn w/main --layout pa").stdout.split() == ["pair"]
