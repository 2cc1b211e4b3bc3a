"""A waiting agent's tmux window is flagged, rings and notifies (docs/permissions.md), on a real isolated
tmux server."""

from __future__ import annotations

from pathlib import Path

import libtmux
import pytest
from conftest import retry_until


def test_a_waiting_agent_flags_its_window_rings_and_notifies(
    tmux_server: libtmux.Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from fleet.permissions import WAITING_OPTION, flag_window

    tmux_server.cmd("new-session", "-d", "-s", "s", "sleep 600")
    tmux_server.cmd("new-window", "-d", "-t", "s:9", "sleep 600")
    out = tmux_server.cmd(
        "list-panes", "-s", "-t", "s", "-F", "#{pane_id} #{window_id} #{socket_path}"
    ).stdout
    (first, _w1, sock), (second, window, _s) = (line.split() for line in out)
    tmux_server.cmd("set-option", "-w", "-t", second, "monitor-bell", "on")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    said = tmp_path / "notified"
    (bin_dir / "notify-send").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {said}\n')
    (bin_dir / "notify-send").chmod(0o755)
    env = {
        **os.environ,
        "TMUX": f"{sock},1,0",
        "TMUX_PANE": second,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
    }
    monkeypatch.setenv("PATH", env["PATH"])

    def option() -> list[str]:
        return tmux_server.cmd("show-options", "-w", "-v", "-t", window, WAITING_OPTION).stdout

    flag_window("Bash;#(touch /tmp/x)", env=env, notify="alice in w: waiting for permission: Bash (ls)")
    # only the safe characters: nothing for tmux to expand or run
    assert option() == ["permission: Bashtouchtmpx"]

    def bell() -> list[str]:
        return list(tmux_server.cmd("display-message", "-p", "-t", window, "#{window_bell_flag}").stdout)

    retry_until(lambda: bell() == ["1"], what="the window's bell flag")
    assert said.read_text().splitlines()[-1] == "alice in w: waiting for permission: Bash (ls)"
    # the status-line snippet of docs/permissions.md shows it
    snippet = "#I#{?@fleet_waiting, [waits: #{@fleet_waiting}],}"
    shown = tmux_server.cmd("display-message", "-p", "-t", window, snippet).stdout
    assert shown == ["9 [waits: permission: Bashtouchtmpx]"]
    flag_window(None, env=env)
    assert option() == []
    assert tmux_server.cmd("show-options", "-w", "-v", "-t", first, WAITING_OPTION).stdout == []
