"""Spawn with the real Claude Code (offline, no login): the channel connects over the legacy era and
channel registration gets past the capability and era checks (claude-code.md §2, §5).

``claude`` is found as in test_channel_real.py (FLEET_CLAUDE_BIN, the pinned copy that
scripts/test.sh installs under .ci/node, then PATH); CI always has one.
"""

from __future__ import annotations

from pathlib import Path

import libtmux
import pytest
from conftest import retry_until
from test_channel_real import CLAUDE, offline_claude_project

from fleet import layouts
from fleet.client import Client
from fleet.paths import Paths
from fleet.spawn import Spawner
from fleet.tmux import Tmux

pytestmark = pytest.mark.skipif(CLAUDE is None, reason="no claude binary (set FLEET_CLAUDE_BIN)")


def test_spawned_claude_connects_the_fleet_channel(
    operator: Client,
    tmux_server: libtmux.Server,
    fleet_env: Paths,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert CLAUDE is not None
    project = offline_claude_project(tmp_path, monkeypatch)
    debug = tmp_path / "claude-debug.txt"
    layout_file = tmp_path / "real.toml"
    layout_file.write_text(
        f'arrangement = "tiled"\n[defaults]\nagent = "{CLAUDE}"\ncwd = "{project}"\n'
        f'args = ["--debug-file", "{debug}"]\n'
    )
    operator.create_wave("w", ["alice"])
    sp = Spawner(operator, Tmux(tmux_server), fleet_env, ready_timeout=60)
    report = sp.spawn("w/main", layouts.load(str(layout_file), fleet_env))
    (pane,) = report.panes
    assert pane.ready, pane.why  # the channel pinged the daemon from inside Claude Code

    def log() -> str:
        return debug.read_text(errors="replace") if debug.exists() else ""

    retry_until(
        lambda: "Channel notifications" in log(), timeout=60, what="the channel gate in the debug log"
    )
    text = log()
    connected = [ln for ln in text.splitlines() if 'MCP server "fleet": Connection established' in ln]
    assert connected, text[-3000:]
    assert '"protocolEra":"legacy"' in connected[0]
    assert '"negotiatedProtocolVersion":"2025-11-25"' in connected[0]
    gate = [ln for ln in text.splitlines() if 'MCP server "fleet": Channel notifications' in ln]
    # past the capability check and the era check: the offline stop is the feature flag
    assert gate and "channels feature is not currently available" in gate[0], gate
    assert "did not declare claude/channel" not in text and "modern protocol revision" not in text
    assert pane.argv[0] == CLAUDE and "--dangerously-load-development-channels=server:fleet" in pane.argv
    assert any(a.startswith("--mcp-config={") for a in pane.argv)
