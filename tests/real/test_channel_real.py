"""The real Claude Code binary connects to ``fleet channel`` (offline: no login needed).

``claude`` is found through ``FLEET_CLAUDE_BIN``, then ``.ci/node/node_modules/.bin/claude`` under the
repository (where ``scripts/test.sh`` installs the pinned version), then ``PATH``. The test skips only
when none exists; CI always has one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcphelp import RawMcp, channel_argv

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths

REPO = Path(__file__).resolve().parents[2]


def find_claude() -> str | None:
    candidates = [os.environ.get("FLEET_CLAUDE_BIN", ""), str(REPO / ".ci/node/node_modules/.bin/claude")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("claude")


CLAUDE = find_claude()


def offline_claude_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder the offline Claude Code TUI will open without dialogs (claude-code.md §5):
    $HOME/.claude.json marks onboarding done and the folder trusted; no autoupdate, no traffic.
    Call before the tmux server starts, so its panes inherit the environment."""
    home = Path(os.environ["HOME"])
    project = tmp_path / "project"
    project.mkdir()
    (home / ".claude.json").write_text(
        json.dumps(
            {
                "hasCompletedOnboarding": True,
                "theme": "dark",
                "projects": {str(project): {"hasTrustDialogAccepted": True}},
            }
        )
    )
    monkeypatch.setenv("DISABLE_AUTOUPDATER", "1")
    monkeypatch.setenv("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
    return project


pytestmark = pytest.mark.skipif(CLAUDE is None, reason="no claude binary (set FLEET_CLAUDE_BIN)")


def claude(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    assert CLAUDE is not None
    env = {
        "HOME": str(home),
        "PATH": os.environ["PATH"],
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    return subprocess.run([CLAUDE, *args], env=env, capture_output=True, text=True, timeout=timeout)


def test_claude_mcp_list_reports_the_channel_connected(
    daemon: Daemon, operator: Client, fleet_env: Paths, tmp_path: Path
) -> None:
    operator.create_wave("w", with_=["alice", "bob"])
    token = tmp_path / "alice.token"
    token.write_text(operator.mint_token("w", "alice").token)
    token.chmod(0o600)
    argv = channel_argv("alice", "w", daemon.url, token)
    config = {
        "type": "stdio",
        "command": argv[0],
        "args": argv[1:],
        "env": {"FLEET_HOME": os.environ["FLEET_HOME"]},
    }
    home = tmp_path / "claude-home"
    home.mkdir()

    added = claude(home, "mcp", "add-json", "-s", "user", "fleet", json.dumps(config))
    assert added.returncode == 0, added.stderr

    listed = claude(home, "mcp", "list")
    # `mcp list` exits 0 even when a server fails: the verdict is in the text
    lines = [line for line in listed.stdout.splitlines() if line.startswith("fleet: ")]
    assert len(lines) == 1, listed.stdout + listed.stderr
    assert re.search(r" - ✔ Connected$", lines[0]), lines[0]
    assert "--token-file" in lines[0] and token.read_text() not in lines[0]

    got = claude(home, "mcp", "get", "fleet")
    assert "Status: ✔ Connected" in got.stdout, got.stdout

    # the health checks took no delivery: a real session still gets the wave's first blip (its
    # creation, which rides with the first blip that wakes)
    operator.post(operator.resolve("w/main").id, "alice: hello", as_="bob")
    with RawMcp([sys.executable, *argv[1:]], stderr=tmp_path / "after.stderr") as alice:
        alice.handshake()
        first = alice.wait_notes(lambda notes: notes and notes[0], what="the first delivery")
        assert first["content"].startswith("operator created wave w")
