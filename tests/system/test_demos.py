"""``fleet demo resident`` and ``fleet demo campaign``: each smoke run end to end (the real CLI in a
subprocess, its own real daemon, real tmux on its own socket, real git), and Ctrl-C in the middle of
a guided run, which must leave no tmux server, no daemon, no process and no directory behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import retry_until

from fleet import procs
from fleet.paths import Paths

SANDBOX = re.compile(r"(?:sandbox |private fleet in )(/\S+) (?:tmux |\(tmux socket )(fleet-demo-\d+)")


def tmux_alive(socket: str) -> bool:
    return subprocess.run(["tmux", "-L", socket, "list-sessions"], capture_output=True).returncode == 0


def leftovers(sandbox: Path) -> list[int]:
    """Processes still running in the sandbox's fleet (its FLEET_HOME in their environment)."""
    return [p for p in procs.with_env("FLEET_HOME", str(sandbox / "home")) if p != os.getpid()]


def assert_nothing_left(sandbox: Path, socket: str, user: Paths) -> None:
    assert not tmux_alive(socket), f"the demo's tmux server {socket} still runs"
    assert not sandbox.exists(), f"{sandbox} was left behind"
    retry_until(lambda: not leftovers(sandbox), timeout=5, what="no process of the demo's fleet left")
    assert not user.state.exists() and not user.data.exists(), "the user's own fleet was touched"


@pytest.mark.parametrize(
    ("demo", "milestones"),
    [
        (
            "resident",
            [
                "the resident's seat is claimed in the store",
                "a cron fell due and the mind took it",
                "the mind forked demo/job-1 and dispatched it to a worker",
                "the keeper sent a heartbeat with the job in flight",
                "the worker's DONE: reached the mind, which told the operator",
                "demo resident smoke: ok (demo/job-1 done)",
            ],
        ),
        (
            "campaign",
            [
                "the verifier checked the plan",
                "wave 0's executor completed it",
                "wave 1's first attempt failed and was committed",
                "a fresh session retried wave 1 and completed it",
                "wave 2 completed: the campaign is done",
                "demo campaign smoke: ok (6 commits)",
            ],
        ),
    ],
)
def test_the_smoke_run_reaches_every_milestone_and_leaves_nothing(
    demo: str, milestones: list[str], fleet_env: Paths
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fleet", "demo", demo, "--smoke"], capture_output=True, text=True, timeout=150
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for line in milestones:
        assert line in done.stdout, f"{line!r} missing:\n{done.stdout}"
    assert "Traceback" not in done.stderr
    found = SANDBOX.search(done.stdout)
    assert found, done.stdout
    assert_nothing_left(Path(found[1]), found[2], fleet_env)


@pytest.mark.parametrize(
    ("demo", "after"),
    [
        ("resident", "✓ the mind forked demo/job-1"),  # the mind, a worker and supervise are running
        ("campaign", "✓ wave 0's executor completed it"),  # the loop and its next session are running
    ],
)
def test_ctrl_c_mid_demo_leaves_no_tmux_server_daemon_or_directory(
    demo: str, after: str, fleet_env: Paths
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleet", "demo", demo], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    out: list[str] = []
    reached = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line)
            if line.startswith(after):
                reached.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        retry_until(lambda: reached.is_set() or proc.poll() is not None, timeout=90, interval=0.1,
                    what=f"the demo reaching {after!r}")  # fmt: skip
        assert reached.is_set(), "".join(out) + (proc.stderr.read() if proc.stderr else "")
        found = SANDBOX.search("".join(out))
        assert found, "".join(out)
        sandbox, socket = Path(found[1]), found[2]
        assert tmux_alive(socket) and sandbox.exists() and leftovers(sandbox)
        daemon = (sandbox / "home" / "state" / "daemon.json").read_text()
        pid = int(re.search(r'"pid":\s*(\d+)', daemon)[1])  # type: ignore[index]
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in its terminal sends: its whole group
        assert proc.wait(60) == 130, "".join(out)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(5)
    stderr = proc.stderr.read() if proc.stderr else ""
    assert "demo interrupted: everything it started is gone" in stderr and "Traceback" not in stderr, stderr
    assert not Path(f"/proc/{pid}").exists(), f"the demo's daemon (pid {pid}) still runs"
    assert_nothing_left(sandbox, socket, fleet_env)


def test_without_tmux_the_demo_says_so_and_makes_nothing(tmp_path: Path, fleet_env: Paths) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    git = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True).stdout.strip()
    (bin_dir / "git").symlink_to(git)
    # its own temp dir: another test's demo (a parallel worker) makes and removes fleet-demo-* in /tmp
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "fleet", "demo", "resident", "--smoke"],
        env={**os.environ, "PATH": str(bin_dir), "TMPDIR": str(tmp)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 6, done.stdout + done.stderr
    assert "tmux is not installed" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp.iterdir()) == [] and not fleet_env.state.exists()


# ---------------------------------------------------------------- the stand-in mind's script
