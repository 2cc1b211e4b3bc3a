"""The resident with the real Claude Code over the scripted model: seat, one mind, failure, revival.

Each test makes a git repository (the wave's origin), runs ``fleet resident …`` as a user would
(a subprocess, in the repository), and asserts from the store, tmux, the session's own transcript
and the scripted model's request log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from realclaude import STARTUP, RealFleet
from scripted_model import Script, on_message, post, rule, say

from fleet.client import Client

RealFleetFactory = Callable[..., RealFleet]


def git_repo(real: RealFleet) -> Path:
    """The project folder as a git repository with one commit; its worktree trusted in Claude's home."""
    repo = real.project
    commit = ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "init"]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], commit):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    config = json.loads((real.home / ".claude.json").read_text())
    config["projects"][str(repo.parent / f"{repo.name}.w")] = {"hasTrustDialogAccepted": True}
    (real.home / ".claude.json").write_text(json.dumps(config))
    return repo


def fleet_in(
    real: RealFleet, cwd: Path, *args: str, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], env=real.env, cwd=cwd, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def start(real: RealFleet, repo: Path, layout: str, *extra: str) -> dict[str, Any]:
    done = fleet_in(
        real, repo, "resident", "start", "w", "--agent", layout, "--wait", str(STARTUP), "--json", *extra
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def status(real: RealFleet, repo: Path) -> dict[str, Any]:
    done = fleet_in(real, repo, "resident", "status", "w", "--json")
    assert done.returncode == 0, done.stderr
    got: dict[str, Any] = json.loads(done.stdout)
    return got


def test_start_seats_one_mind_refuses_a_second_and_force_takes_over(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """start: a Claude Code session in <repo>.w, seated in the store; it hears the operator; a
    second start is refused naming it; --force takes over; stop leaves no seat."""
    script = Script(
        {"resident": [rule(on_message(author="operator"), post("{wavelet}", "operator: on it."))]}
    )
    real = real_fleet(channels=True, script=script)
    repo = git_repo(real)
    (repo / "wave" / "w").mkdir(parents=True)
    (repo / "wave" / "w" / "GOAL.md").write_text("---\nheartbeat: off\n---\nShip the parser.\n")
    (repo / "wave" / "w" / "MEMORY.md").write_text("The parser lives in src/parse.py.\n")
    layout = real.layout(["resident"])
    report = start(real, repo, layout)
    worktree = repo.parent / "project.w"
    assert report["worktree"] == str(worktree) and (worktree / ".git").is_file()
    seat = operator.seat("w")
    assert seat is not None and seat.closed_at is None
    assert (seat.session_id, seat.pid, seat.cwd) == (report["session_id"], report["pid"], str(worktree))
    assert report["pid"] == real.pane_pid("resident")
    st = status(real, repo)
    assert st["state"] == "idle" and st["session_id"] == report["session_id"] and st["turns"] == 0, st

    operator.post(operator.resolve("w/main").id, "resident: what is the plan?")
    real.wait(lambda: any(b.author == "resident" for b in real.blips("w/main")), "the resident's answer")
    (req,) = [r for r in real.requests("resident") if r.reply and r.reply.tool_uses]
    system = json.dumps((req.body or {}).get("system"))
    assert "Ship the parser." in system and "src/parse.py" in system, "GOAL.md and MEMORY.md seed the mind"
    real.wait(lambda: status(real, repo)["turns"] >= 1, "a completed turn in status")

    again = fleet_in(real, repo, "resident", "start", "w", "--agent", layout)
    assert again.returncode == 1, again  # Conflict
    assert report["session_id"] in again.stderr and str(report["pid"]) in again.stderr, again.stderr
    assert "--force" in again.stderr and "Traceback" not in again.stderr
    assert operator.seat("w") == seat, "a refused start changed the seat"

    old_pid = report["pid"]
    taken = start(real, repo, layout, "--force")
    assert taken["closed"].startswith("took over") and taken["pid"] != old_pid
    real.wait(lambda: not _alive(old_pid), "the old resident's process gone")
    seat2 = operator.seat("w")
    assert seat2 is not None and seat2.pid == taken["pid"] and seat2.closed_at is None

    done = fleet_in(real, repo, "resident", "stop", "w", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["stopped"], done
    assert status(real, repo)["state"] == "none"
    closed = operator.seat("w")
    assert closed is not None and closed.closed_why == "stopped by the operator"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    from fleet.procs import zombie_status

    return zombie_status(pid) is None


def test_a_dead_seat_is_closed_at_the_next_start_which_resumes_the_same_session(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    real = real_fleet(
        channels=True, script=Script({"resident": [rule(on_message(author="operator"), say("ok"))]})
    )
    repo = git_repo(real)
    layout = real.layout(["resident"])
    report = start(real, repo, layout)
    operator.post(operator.resolve("w/main").id, "resident: hello")
    real.wait(lambda: status(real, repo)["turns"] >= 1, "a first turn (so the session is saved)")
    os.kill(report["pid"], signal.SIGKILL)
    real.wait(lambda: real.pane_dead("resident"), "the resident's pane dead")
    st = status(real, repo)
    assert st["state"] == "failed" and "supervise" in st["note"], st
    again = start(real, repo, layout)
    assert again["closed"].startswith("closed the dead seat") and str(report["pid"]) in again["closed"]
    assert again["session_id"] == report["session_id"] and again["resumed"], again
    assert status(real, repo)["state"] == "idle"
