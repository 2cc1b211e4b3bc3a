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
from fleet.paths import Paths
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
    listed = subprocess.run(
        ["git", "-C", str(repo), "branch", "--list", "wave/w"], capture_output=True, text=True
    )
    assert listed.stdout.strip() == "", "the wave's branch was made"
    assert operator.get_wave("w") == before, "the roster changed"
    assert operator.seat("w") is None and operator.sessions(before.id) == []
    assert windows(tmux_server) == [], "a tmux window was left behind"
    # a wave the store has never seen is not created either
    done = fleet(operator, tmux_server, repo, "resident", "start", "v", env=no_claude)
    assert done.returncode == 6 and [w.name for w in operator.list_waves()] == ["w"], done


def test_status_says_when_no_supervisor_keeps_the_wave_and_who_does_when_one_does(
    operator: Client, tmux_server: libtmux.Server, tmp_path: Path
) -> None:
    import uuid

    from fleet.models import NewSeat, SupervisorClaim

    operator.create_wave("w", [RESIDENT])
    seat = NewSeat(participant=RESIDENT, session_id=str(uuid.uuid4()), host="laptop-b", pid=1, cwd="/x")
    operator.claim_seat("w", seat)
    cwd = tmp_path / "x"
    cwd.mkdir()
    done = fleet(operator, tmux_server, cwd, "resident", "status", "w", "--json")
    assert done.returncode == 0, done.stderr
    st = json.loads(done.stdout)
    assert st["supervisor"] is None and "no `fleet supervise w` runs" in st["note"], st
    assert "heartbeats, crons and revival need one" in st["note"] and "--supervise" in st["note"]
    text = fleet(operator, tmux_server, cwd, "resident", "status", "w").stdout
    assert "supervisor" in text and "no `fleet supervise w` runs" in text, text

    operator.claim_supervisor("w", SupervisorClaim(holder="h1", pid=4242, host="laptop-c"))
    st = json.loads(fleet(operator, tmux_server, cwd, "resident", "status", "w", "--json").stdout)
    assert st["supervisor"] == "pid 4242 on laptop-c" and "no `fleet supervise" not in st["note"], st


def test_start_says_no_supervisor_runs_and_supervise_starts_one_in_a_tmux_window(
    operator: Client, tmux_server: libtmux.Server, tmp_path: Path
) -> None:
    repo = git_repo(tmp_path / "repo")
    layout = tmp_path / "mind.toml"
    layout.write_text('[defaults]\nagent = "fleet-standin"\n')
    done = fleet(operator, tmux_server, repo, "resident", "start", "w", "--agent", str(layout))
    assert done.returncode == 0, done.stderr
    assert "no `fleet supervise w` runs: heartbeats, crons and revival need one" in done.stderr, done.stderr
    assert "`fleet resident start w --supervise`" in done.stderr

    done = fleet(operator, tmux_server, repo, "resident", "start", "v", "--agent", str(layout), "--supervise")
    assert done.returncode == 0, done.stderr
    lease = operator.supervisor("v")
    assert lease is not None, done.stderr
    assert (
        f"supervised by `fleet supervise` pid {lease.pid} on {lease.host} (tmux window supervise)"
        in done.stderr
    )
    assert "supervise" in windows(tmux_server)
    cmdline = Path(f"/proc/{lease.pid}/cmdline").read_bytes().split(b"\0")
    assert cmdline[-4:-1] == [b"fleet", b"supervise", b"v"], cmdline
    st = json.loads(fleet(operator, tmux_server, repo, "resident", "status", "v", "--json").stdout)
    assert (
        st["supervisor"] == f"pid {lease.pid} on {lease.host}" and "no `fleet supervise" not in st["note"]
    ), st
    # a second --supervise (the seat is taken over: --force) starts no second supervisor
    again = fleet(
        operator,
        tmux_server,
        repo,
        "resident",
        "start",
        "v",
        "--agent",
        str(layout),
        "--force",
        "--supervise",
    )
    assert again.returncode == 0, again.stderr
    held = operator.supervisor("v")
    assert held is not None and held.pid == lease.pid and windows(tmux_server).count("supervise") == 1
    # its window stays when it stops (taken over from elsewhere: it says so there); the next
    # --supervise replaces that dead window with a live one
    from fleet.models import SupervisorClaim

    operator.claim_supervisor("v", SupervisorClaim(holder="h-elsewhere", pid=7, host="elsewhere", force=True))

    def dead_supervise_pane() -> str:
        lines = tmux_server.cmd("list-panes", "-a", "-F", "#{window_name} #{pane_dead} #{pane_id}").stdout
        return next((ln.split()[2] for ln in lines if ln.startswith("supervise 1 ")), "")

    pane = retry_until(
        dead_supervise_pane, timeout=30, what="the supervisor taken over stopped, its pane kept"
    )
    screen = "\n".join(tmux_server.cmd("capture-pane", "-p", "-t", pane).stdout)
    assert "taken over by pid 7 on elsewhere" in screen, screen
    operator.release_supervisor("v", "h-elsewhere")
    third = fleet(
        operator,
        tmux_server,
        repo,
        "resident",
        "start",
        "v",
        "--agent",
        str(layout),
        "--force",
        "--supervise",
    )
    assert third.returncode == 0, third.stderr
    latest = operator.supervisor("v")
    assert latest is not None and latest.pid not in (lease.pid, 7)
    assert windows(tmux_server).count("supervise") == 1 and dead_supervise_pane() == ""


def test_status_says_the_mind_is_unknown_when_its_layout_was_broken_by_hand(
    operator: Client, tmux_server: libtmux.Server, tmp_path: Path, fleet_env: Paths
) -> None:
    """The layout a start wrote says what the mind is (Claude Code, Codex, …) and so how its turns are
    read; edited into something that does not load, status does not guess Claude Code: it says the
    kind and the turns are unknown, naming the file and what to do."""
    import socket
    import uuid

    from fleet.models import NewSeat
    from fleet.resident import state_dir

    wave = operator.create_wave("w", [RESIDENT])
    seat = NewSeat(
        participant=RESIDENT, session_id=str(uuid.uuid4()), host=socket.gethostname(), pid=1, cwd="/x"
    )
    operator.claim_seat("w", seat)
    layout = state_dir(fleet_env, wave.id) / "layout.toml"
    layout.parent.mkdir(parents=True)
    layout.write_text('[defaults]\nagent = "codex\n')  # an unterminated string
    cwd = tmp_path / "x"
    cwd.mkdir()
    for args in (["--json"], []):
        done = fleet(operator, tmux_server, cwd, "resident", "status", "w", *args)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done
        for word in (str(layout), "does not load", "fleet resident start w --force"):
            assert word in done.stdout, (word, done.stdout)
    st = json.loads(fleet(operator, tmux_server, cwd, "resident", "status", "w", "--json").stdout)
    assert st["kind"] is None and st["turns"] is None and st["failed_turns"] is None, st


def test_a_memory_md_that_is_not_text_is_named_before_anything_is_made(
    operator: Client, tmux_server: libtmux.Server, tmp_path: Path
) -> None:
    repo = git_repo(tmp_path / "repo")
    memory = repo / "wave" / "w" / "MEMORY.md"
    memory.write_bytes(b"- decided: \xff\n")
    layout = tmp_path / "mind.toml"
    layout.write_text('[defaults]\nagent = "fleet-standin"\n')
    done = fleet(operator, tmux_server, repo, "resident", "start", "w", "--agent", str(layout))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done
    for word in (str(memory), "not UTF-8 text (byte 0xff at offset 11)", "fleet memory update"):
        assert word in done.stderr, (word, done.stderr)
    assert [w.name for w in operator.list_waves()] == [] and windows(tmux_server) == []
    assert not (tmp_path / "repo.w").exists(), "the wave's worktree was made"
