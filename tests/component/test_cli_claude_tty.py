"""``fleet claude`` without a terminal: a clear usage error (exit 2), no traceback, nothing recorded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths

REPO = Path(__file__).resolve().parents[2]


def test_fleet_claude_without_a_terminal_says_it_needs_one(
    daemon: Daemon, operator: Client, fleet_env: Paths
) -> None:
    operator.create_wave("w", ["alice"])
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "FLEET_DAEMON": daemon.url,
        "FLEET_TOKEN": daemon.operator_token,
    }
    env.pop("FLEET_DEBUG", None)
    for stdin in (subprocess.DEVNULL, subprocess.PIPE):
        r = subprocess.run(
            [sys.executable, "-m", "fleet", "claude", "--wave", "w", "--claude", "fleet-standin"],
            env=env,
            stdin=stdin,
            input=None,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2, r.stderr
        assert "needs a terminal" in r.stderr and "fleet spawn" in r.stderr
        assert "Traceback" not in r.stderr and "ioctl" not in r.stderr
    assert operator.sessions("w", "operator") == []
    assert not (fleet_env.tokens).exists() or not any(fleet_env.tokens.rglob("operator.token"))
