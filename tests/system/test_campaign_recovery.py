"""Campaign loops killed with -9 while starting a session, and the foreground loop's progress lines:
real loop processes (``fleet campaign run``), a real daemon, a real tmux server, stand-in agents
(fleet/standin.py) as the sessions; the tests play each session's end as its Stop hook would
(STATE.md edited and committed, the settle reported through ``report_settle``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import libtmux
import pytest
from campaignhelp import git, init_repo, log
from conftest import retry_until

from fleet.campaign import disk
from fleet.campaign import loop as lp
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths
from fleet.tmux import Tmux

STANDIN = 'arrangement = "tiled"\n[defaults]\nagent = "fleet-standin"\n'


def fleet(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def standin_starts(paths: Paths, name: str) -> int:
    """How many times a stand-in process started as ``name`` (it records its MCP server first)."""
    path = paths.state / "standin" / f"{name}.jsonl"
    if not path.exists():
        return 0
    return sum(json.loads(ln)["event"] == "spawn-server" for ln in path.read_text().splitlines() if ln)


class World:
    def __init__(self, tmp_path: Path, daemon: Daemon, operator: Client, tmux_server: libtmux.Server,
                 paths: Paths) -> None:  # fmt: skip
        self.tmp = tmp_path
        self.operator = operator
        self.tmux = Tmux(tmux_server)
        self.paths = paths
        root = tmp_path / "repo"
        init_repo(root)
        self.env = {**os.environ, "FLEET_DAEMON": daemon.url, "FLEET_TOKEN": daemon.operator_token,
                    "FLEET_TMUX_SOCKET": str(tmux_server.socket_name)}  # fmt: skip
        done = fleet(root, self.env, "campaign", "plan", "PLAN.md", "--by-headings")
        assert done.returncode == 0, done.stderr
        self.c = disk.Campaign(root, f"three-wave-demo-{disk.today()}")
        s = self.c.read()
        s.verify_count = 1  # the initial check is done: the first spawn is wave 0's executor
        self.c.write(s)
        git(root, "commit", "-qam", "wave verify: plan ok")
        self.layout = tmp_path / "standin.toml"  # outside the repository: the tree stays clean
        self.layout.write_text(STANDIN)
        self.logs: list[Any] = []

    def loop(self, **env: str) -> subprocess.Popen[str]:
        out = open(self.tmp / f"loop{len(self.logs)}.log", "w")  # noqa: SIM115
        self.logs.append(out)
        argv = [sys.executable, "-m", "fleet", "campaign", "run", "--repo", str(self.c.root),
                "--layout", str(self.layout)]  # fmt: skip
        return subprocess.Popen(
            argv, env={**self.env, **env}, stdout=out, stderr=subprocess.STDOUT, text=True
        )

    def live(self) -> list[str]:
        wave = self.operator.get_wave(self.c.id)
        return sorted(p.participant for p in self.tmux.fleet_panes(wave.id) if p.alive)

    def kickoffs(self, participant: str) -> int:
        try:
            wl = self.operator.resolve(f"{self.c.id}/{participant}")
        except Exception:
            return 0
        return sum(b.kind == "message" and b.author == "operator" for b in self.operator.read(wl.id).blips)

    def settle_complete(self, session_id: str, wave: int, title: str) -> None:
        """What wave ``wave``'s executor does at its end: STATE.md says complete, it commits, its Stop
        hook reports the settle."""
        s = self.c.read()
        s.wave_status = "complete"
        self.c.write(s)
        (self.c.root / f"w{wave}.txt").write_text(f"{wave}\n")
        git(self.c.root, "add", "-A")
        git(self.c.root, "commit", "-qm", f"wave {wave}: {title}")
        lp.report_settle(self.c.loop_dir, {"session_id": session_id, "transcript_path": "",
                                          "hook_event_name": "Stop"})  # fmt: skip

    def close(self) -> None:
        for f in self.logs:
            f.close()


@pytest.fixture
def world(
    tmp_path: Path, daemon: Daemon, operator: Client, tmux_server: libtmux.Server, fleet_env: Paths
) -> Any:
    w = World(tmp_path, daemon, operator, tmux_server, fleet_env)
    yield w
    w.close()


@pytest.mark.parametrize("point", ["marked", "forked", "kicked", "spawned", "recorded"])
def test_a_loop_killed_while_starting_a_session_carries_on_and_runs_nothing_twice(
    world: World, point: str
) -> None:
    """kill -9 at each step of starting wave 0's executor (its marks on disk, its wavelet forked, its
    kickoff posted, its pane started, the start recorded): the loop started again ends up with that
    one session active (adopted if it runs, started if it never did), one kickoff, one process, no
    error, and carries on to wave 1. It used to sit pending and paused, the row `running`, advising
    a `fleet respawn --force`."""
    c = world.c
    first = world.loop(FLEET_CAMPAIGN_DIE_AT=point)
    assert first.wait(60) == -signal.SIGKILL, (world.tmp / "loop0.log").read_text()
    status = fleet(c.root, world.env, "campaign", "status")
    assert status.returncode == 0 and "respawn" not in status.stdout, status.stdout
    assert "fleet campaign run carries on" in status.stdout.replace("`", ""), status.stdout
    assert "starting executor-w0-s1" in status.stdout, status.stdout

    again = world.loop()
    try:
        o = retry_until(
            lambda: (x := lp.load_owned(c)) is not None and x.active_session_id and not x.launching and x,
            timeout=60, what="the restarted loop with wave 0's executor active",
        )  # fmt: skip
        assert o and o.participant == "executor-w0-s1" and o.last_error == ""
        s = c.read()
        assert (s.session_count, s.wave_status, s.row(0).get("Status")) == (1, "running", "running")
        assert s.row(0).get("Session") == "executor-w0-s1"
        assert world.live() == ["executor-w0-s1"]
        record = world.operator.sessions(world.operator.get_wave(c.id).id, "executor-w0-s1")
        assert [r.session_id for r in record] == [o.active_session_id]
        assert world.kickoffs("executor-w0-s1") == 1
        retry_until(lambda: standin_starts(world.paths, "executor-w0-s1") == 1, what="one process")
        assert "respawn" not in fleet(c.root, world.env, "campaign", "status").stdout

        world.settle_complete(o.active_session_id or "", 0, "Scaffold")
        o = retry_until(
            lambda: (x := lp.load_owned(c)) is not None and x.participant == "executor-w1-s2" and x,
            timeout=60, what="wave 1's executor",
        )  # fmt: skip
        s = c.read()
        assert (s.current_wave, s.session_count, s.row(0).get("Status")) == (1, 2, "complete")
        retry_until(lambda: world.live() == ["executor-w1-s2"], what="wave 0's window closed")
        assert standin_starts(world.paths, "executor-w0-s1") == 1
        assert log(c.root)[-1] == "wave 0: Scaffold"
    finally:
        again.terminate()
        again.wait(10)


def test_the_foreground_loop_prints_each_spawn_settle_commit_and_the_end(world: World) -> None:
    """`fleet campaign run` used to print one line and then nothing for the whole campaign."""
    c = world.c
    s = c.read()
    s.current_wave = 2
    for n in (0, 1):
        s.row(n).set("Status", "complete")
    c.write(s)
    git(c.root, "commit", "-qam", "waves 0-1 done by hand")
    loop = world.loop()
    out = world.tmp / "loop0.log"
    try:
        o = retry_until(lambda: (x := lp.load_owned(c)) is not None and x.active_session_id and x, timeout=60,
                        what="wave 2's executor")  # fmt: skip
        assert o
        retry_until(lambda: "spawned executor-w2-s1 for wave 2" in out.read_text(), what="the spawn line")
        world.settle_complete(o.active_session_id or "", 2, "Finish")
        retry_until(lambda: "all 3 waves done" in out.read_text(), timeout=30, what="the end line")
        assert disk.dirty(c.root, ignore=()) == []  # the last bookkeeping is committed too
        done = fleet(c.root, world.env, "campaign", "stop")
        assert done.returncode == 0, done.stderr
        assert loop.wait(30) == 0
    finally:
        if loop.poll() is None:
            loop.terminate()
            loop.wait(10)
    lines = [ln for ln in out.read_text().splitlines() if not ln.startswith("fleet: ")]
    sha = git(c.root, "rev-parse", "--short", "HEAD~1").strip()
    last = git(c.root, "rev-parse", "--short", "HEAD").strip()
    assert lines == [
        "spawned executor-w2-s1 for wave 2",
        f"{sha} committed by the session: wave 2: Finish",
        "settled executor-w2-s1: complete (wave 2; now wave 3 all_complete)",
        f"committed {last} campaign {c.id}: all waves complete",
        f"campaign {c.id} complete: all 3 waves done",
        "stopped",
        f"loop of campaign {c.id} ended",
    ], lines
