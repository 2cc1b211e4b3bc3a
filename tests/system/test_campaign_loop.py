"""The campaign loop with real tmux and the real daemon, its sessions stood in for: a loop that cannot
spawn pauses and says so in a blip; a settle while STATE.md does not parse is told and handled once it
does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import libtmux
from campaignhelp import git, log
from conftest import retry_until
from test_campaign import fleet, planned  # noqa: F401

from fleet.campaign import disk, registry
from fleet.campaign import loop as lp
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths
from fleet.tmux import Tmux


def test_a_loop_that_cannot_spawn_pauses_and_tells_the_operator_in_a_blip(
    tmp_path: Path, operator: Client, tmux_server: libtmux.Server, fleet_env: Paths
) -> None:
    c = planned(tmp_path)
    layout = tmp_path / "broken.toml"
    layout.write_text('arrangement = "tiled"\n[defaults]\nagent = "/nonexistent/agent"\n')
    assert registry.lookup(fleet_env.state, c.id) is not None  # `plan` recorded it for the console
    (fleet_env.state / "campaigns" / f"{c.id}.json").unlink()
    loop = lp.Loop(c, lp.Launcher(operator, Tmux(tmux_server), fleet_env), layout=str(layout))
    loop.start(arm=True)
    found = registry.lookup(fleet_env.state, c.id)  # and so does the loop
    assert found is not None and found.root == c.root.resolve()
    try:
        loop.step()
        first = lp.read_state(c)[1].last_error
        loop.command("resume")  # not fixed: the same error again (its wavelet is reused, not a conflict)
    finally:
        loop.close()
    s, o = lp.read_state(c)
    assert o.last_error == first
    assert (s.loop_state, s.wave_status, s.session_count) == ("paused", "pending", 0)
    assert s.active_session_id is None
    assert o.last_error.startswith("spawning the verifier failed: agent command '/nonexistent/agent'")
    blips = [b for b in operator.read_wave(c.id).blips if b.kind == "system"]
    told = [b.text for b in blips if "spawning the verifier failed" in b.text]
    assert len(told) == 2, [b.text for b in blips]  # one per failure
    assert told[0].startswith(f"operator: campaign {c.id}: spawning the verifier failed: agent command")
    assert f"fleet campaign resume --repo {c.root} --campaign {c.id}" in told[0]


def test_a_settle_while_state_md_does_not_parse_is_told_and_handled_once_it_does(
    tmp_path: Path, daemon: Daemon, operator: Client, tmux_server: libtmux.Server, fleet_env: Paths
) -> None:
    """An agent left STATE.md broken as its session settled: the loop (a real process) tells the
    operator, keeps running and keeps the settle; fixed, the next command handles it (it used to be
    counted as handled before it failed, so the session stayed active for ever)."""
    c = planned(tmp_path)
    pane = tmux_server.cmd("new-session", "-d", "-P", "-F", "#{pane_id}", "sleep 600").stdout[0]
    s, o = lp.read_state(c)
    s.verify_count, s.wave_status = 1, "running"
    o = lp.Owned(loop_state="armed", active_session_id="s-1", active_session_kind="executor",
                 participant="executor-w0-s1", pane_id=pane, head_at_spawn=disk.head(c.root),
                 spawned_on=lp.snapshot(s), verify_floor=1)  # fmt: skip
    lp.save_owned(c, o)
    c.write(lp.overrule(s, o))
    git(c.root, "commit", "-qam", "wave 0 running")
    env = {**os.environ, "FLEET_DAEMON": daemon.url, "FLEET_TOKEN": daemon.operator_token,
           "FLEET_TMUX_SOCKET": str(tmux_server.socket_name)}  # fmt: skip
    out = open(tmp_path / "loop.log", "w")  # noqa: SIM115
    loop = subprocess.Popen([sys.executable, "-m", "fleet", "campaign", "run", "--repo", str(c.root)],
                            env=env, stdout=out, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        retry_until(lambda: lp.running(c), timeout=30, what="the loop listening")
        good = c.state_file.read_text()
        c.state_file.write_text(good.replace("wave_status: running", "wave_status: sideways"))
        lp.report_settle(c.loop_dir, {"session_id": "s-1", "transcript_path": "", "hook_event_name": "Stop"})
        owned = retry_until(
            lambda: (x := lp.load_owned(c)) is not None and "STATE.md line 8" in x.last_error and x,
            what="the loop's error",
        )
        assert owned and owned.active_session_id == "s-1" and owned.handled_settles == 0
        told = [b.text for b in operator.read_wave(c.id).blips if "STATE.md line 8" in b.text]
        assert len(told) == 1 and told[0].startswith(f"operator: campaign {c.id}: the loop cannot go on")
        assert loop.poll() is None, (tmp_path / "loop.log").read_text()
        c.state_file.write_text(good)  # fixed
        done = subprocess.run([sys.executable, "-m", "fleet", "campaign", "pause"], cwd=c.root, env=env,
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr
        s, o = lp.read_state(c)
        assert (s.wave_status, s.failure_kind, s.retry_count) == ("failed", "crash", 1)
        assert s.loop_state == "paused"
        assert o.active_session_id is None and o.handled_settles == 1 and o.last_error == ""
        assert log(c.root)[-1] == "wave 0 (crashed): session ended without state update"
    finally:
        loop.terminate()
        loop.wait(10)
        out.close()
