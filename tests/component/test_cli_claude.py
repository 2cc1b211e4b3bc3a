"""``fleet claude``: the operator's own session in this terminal, channel injected, warning accepted."""

from __future__ import annotations

import json
import os
import signal
import sys

import pexpect
from conftest import retry_until
from test_spawn import _prompting_agent, argv_received, standin_log

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths
from fleet.procs import pid_alive


def test_fleet_claude_accepts_the_warning_and_hands_over_the_terminal(
    daemon: Daemon, operator: Client, fleet_env: Paths
) -> None:
    operator.create_wave("w", ["alice"])
    env = {**os.environ, "FLEET_DAEMON": daemon.url, "FLEET_TOKEN": daemon.operator_token}
    agent = _prompting_agent("WARNING: Loading development channels. I am using this for local development")

    def session(*extra: str) -> list[str]:
        child = pexpect.spawn(
            sys.executable,
            ["-m", "fleet", "claude", "--wave", "w", "--claude", agent, *extra],
            env=env,
            encoding="utf-8",
            dimensions=(40, 160),
        )
        try:
            child.expect("fleet stand-in operator ready", timeout=30)  # past the warning, in control
            child.sendline("hello")  # the terminal is the user's now: keys reach the agent
        finally:
            child.terminate(force=True)
        return argv_received(fleet_env, "operator")[-1]

    first = session()
    sid = first[first.index("--session-id") + 1]
    assert "--dangerously-load-development-channels=server:fleet" in first
    entry = json.loads(next(a for a in first if a.startswith("--mcp-config=")).split("=", 1)[1])
    args = entry["mcpServers"]["fleet"]["args"]
    assert args[args.index("--participant") + 1] == "operator"
    assert daemon.operator_token not in json.dumps(first)  # the token travels in a 0600 file
    assert [s.session_id for s in operator.sessions("w", "operator")] == [sid]
    resumed = session("--resume")
    assert resumed[resumed.index("--resume") + 1] == sid and "--session-id" not in resumed


def test_a_terminal_that_goes_away_ends_the_agent_and_its_channel_even_with_hang_ups_ignored(
    daemon: Daemon, operator: Client, fleet_env: Paths
) -> None:
    """Run under ``nohup`` (SIGHUP ignored, inherited): when the terminal goes, the agent still ends, as
    Claude Code does, and its channel with it — nothing is left running without a terminal."""
    operator.create_wave("w", ["alice"])
    env = {**os.environ, "FLEET_DAEMON": daemon.url, "FLEET_TOKEN": daemon.operator_token}
    agent = _prompting_agent("WARNING: Loading development channels. I am using this for local development")
    child = pexpect.spawn(
        sys.executable,
        ["-m", "fleet", "claude", "--wave", "w", "--claude", agent],
        env=env,
        encoding="utf-8",
        dimensions=(40, 160),
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    try:
        child.expect("fleet stand-in operator ready", timeout=30)
    finally:
        child.terminate(force=True)
    log = standin_log(fleet_env, "operator")
    pids = [e["pid"] for e in log if e["event"] in ("start", "server")]
    assert len(pids) == 2, log
    retry_until(lambda: not any(pid_alive(p) for p in pids), 15, 0.05, "the agent and its channel ended")
