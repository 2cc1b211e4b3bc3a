"""``fleet resident start`` that cannot start leaves nothing behind; start and status say when no
``fleet supervise`` keeps the wave; ``--supervise`` starts one. Real CLI, daemon, git and tmux."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import libtmux
from conftest import retry_until

from fleet.client import Client
from fleet.resident import RESIDENT


def git_repo(path: Path) -> Path:
    commit = ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "init"]
    path.mkdir()
    for args in (["init", "-q", "-b", "main"], commit):
        subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True)
    (path / "wave" / "w").mkdir(parents=True)
    (path / "wave" / "w" / "GOAL.md").write_text("Keep the wave.\n")
    return path


def fleet(
    operator: Client, srv: libtmux.Server, cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = {
        **os.environ, "FLEET_DAEMON": operator.base_url, "FLEET_TOKEN": operator.token,
        "FLEET_TMUX_SOCKET": str(srv.socket_name), **(env or {}),
    }  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=120
    )


def path_without_claude(tmp_path: Path) -> str:
    """A PATH with git and tmux (and a shell) but no claude."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "tmux", "sh"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def windows(srv: libtmux.Server) -> list[str]:
    done = srv.cmd("list-windows", "-a", "-F", "#{window_name}")
    return list(done.stdout) if not done.stderr else []


def test_start_without_claude_on_path_fails_first_and_leaves_no_worktree_roster_entry_or_window(
    operator: Client, tmux_server: libtmux.Server, tmp_path: Path
) -> None:
    repo = git_repo(tmp_path / "repo")
    operator.create_wave("w", ["bob"])
    before = operator.get_wave("w")
    no_claude = {"PATH": path_without_claude(tmp_path)}
    done = fleet(operator, tmux_server, repo, "resident", "start", "w", env=no_claude)
    assert done.returncode == 6, done
    assert "claude (Claude Code) is not installed or not on PATH" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "repo.w").exists(), "the wave's worktree was made"
    listed = subprocess.run(["git", "-C", str(repo), "branch", "--list", "wave/w"], capture_output=True, text=True)
    assert listed.stdout.strip() == "", "the wave's branch was made"
    assert operator.get_wave("w") == before, "the roster changed"
    assert operator.seat("w") is None and operator.sessions(before.id) == []
    assert windows(tmux_server) == [], "a tmux window was left behind"
    # a wave the store has never seen is not created either
    done = fleet(operator, tmux_server, repo, "resident", "start", "v", env=no_claude)
    assert done.returncode == 6 and [w.name for w in operator.list_waves()] == ["w"], done
