"""A posted blip wakes an idle real Claude Code session through the hook (``fleet watch --hook``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import libtmux
import pytest
from conftest import retry_until
from test_channel_real import CLAUDE, offline_claude_project
from test_watch import HISTORY

from fleet import layouts
from fleet.client import Client
from fleet.delivery import StateFile
from fleet.paths import Paths
from fleet.spawn import Spawner
from fleet.tmux import Tmux
from fleet.watch import hook_settings


@pytest.mark.skipif(CLAUDE is None, reason="no claude binary (set FLEET_CLAUDE_BIN)")
def test_a_posted_blip_wakes_an_idle_real_claude_code_session_through_the_hook(
    operator: Client,
    tmux_server: libtmux.Server,
    fleet_env: Paths,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert CLAUDE is not None
    project = offline_claude_project(tmp_path, monkeypatch)
    layout_file = tmp_path / "real.toml"
    layout_file.write_text(f'arrangement = "tiled"\n[defaults]\nagent = "{CLAUDE}"\ncwd = "{project}"\n')
    operator.create_wave("w", ["alice"])
    sp = Spawner(
        operator,
        Tmux(tmux_server),
        fleet_env,
        transport="hook",
        ready_timeout=60,
        hook_settings=partial(hook_settings, daemon=operator.base_url),
    )
    main = operator.resolve("w/main").id
    state = StateFile(fleet_env.channels, operator.base_url, "w", "alice")
    # alice has read the wave's history already, so the session starts idle with nothing pending
    operator.post(main, HISTORY)  # (its creation alone would wake nobody)
    history = subprocess.run(
        [sys.executable, "-m", "fleet", "watch", "--hook", "--participant", "alice", "--wave", "w",
         "--daemon", operator.base_url, "--token-file", str(fleet_env.operator_token)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert history.returncode == 2, history.stderr
    (pane,) = sp.spawn("w/main", layouts.load(str(layout_file), fleet_env)).panes
    assert pane.ready, pane.why  # the tools-only channel pinged from inside Claude Code
    assert "--no-deliver" in pane.argv[1] and any(a.startswith("--settings=") for a in pane.argv)

    def screen() -> str:
        return "\n".join(tmux_server.cmd("capture-pane", "-p", "-S", "-", "-t", pane.pane_id).stdout)

    def armed() -> bool:
        probe = StateFile(fleet_env.channels, operator.base_url, "w", "alice")
        if probe.acquire():
            probe.release()
            return False
        return True

    def transcript() -> str:  # what the model was given: ~/.claude/projects/<cwd>/<session>.jsonl
        found = list((Path(os.environ["HOME"]) / ".claude" / "projects").glob(f"*/{pane.session_id}.jsonl"))
        lines = found[0].read_text(errors="replace").splitlines() if found else []
        contents = []
        for line in lines:
            try:  # the last line may be half written
                contents.append(str(json.loads(line).get("message", {}).get("content", "")))
            except (ValueError, AttributeError):
                continue
        return "\n".join(contents)

    for n, text in enumerate(["alice: wake up", "alice: and again"], start=1):
        # SessionStart armed the hook; after a wake the (offline, failing) turn ends in StopFailure,
        # whose handler arms it again: each time the idle session waits with the lock held
        retry_until(armed, timeout=60, what=f"the idle session's armed hook before wake {n}")
        blip = operator.post(main, text)
        retry_until(
            partial(lambda text: text in transcript(), text), timeout=60, what=f"wake {n} reaching the model"
        )
        retry_until(
            partial(lambda b: state.load().cursors.get(main) == b.id, blip), what=f"wake {n}'s cursor saved"
        )
    assert "fleet: new blips" in screen()  # the hook's wake, as the terminal shows it
    assert "New blips from the fleet wave w for alice" in transcript() and 'author="operator"' in transcript()
    retry_until(lambda: "Not logged in" in screen(), timeout=60, what="the woken turn (offline)")
