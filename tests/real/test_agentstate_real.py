"""What fleet says an agent does, with real Claude Code over the scripted model (tests/realclaude.py).

One session lives through the states a user sees: idle at its prompt; turning, woken by the blip
the operator posted; idle after its turn, since the turn's end as its transcript stamps it; failed with
the error once the model server answers 500s and Claude Code gives up; waiting for permission on
the Bash call it asks for (its ``Notification`` hook, injected by spawn); dead with the exit status
after ``kill -9``. At each step ``fleet status`` on this machine and on a second FLEET_HOME joined
as a remote show the same state.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from realclaude import RealFleet
from scripted_model import Fail, Held, Script, call, on_message, rule, say

from fleet.client import Client
from fleet.models import AgentState

RealFleetFactory = Callable[..., RealFleet]


def test_status_follows_one_real_session_through_idle_turning_failed_permission_and_dead(
    real_fleet: RealFleetFactory, operator: Client, tmp_path: Path
) -> None:
    # (the failure once: after a failed turn the next request carries the failed prompt too)
    # The job's turn lasts until the test has seen it turning here and on the remote (a fixed delay
    # raced a loaded machine: the turn could end before `fleet status` ran, or before its ends were
    # counted, and the test waited for an end that had already come).
    go_on = threading.Event()
    script = Script(
        {
            "alice": [
                rule(on_message(author="operator", contains="a job"), Held(go_on, say("done with the job"))),
                rule(on_message(author="operator", contains="run"),
                     call("Bash", command="touch state-check.txt", description="make a file")),
                rule(on_message(author="operator", contains="break"), Fail(500, "api_error", "an outage"),
                     times=1),
            ]
        }
    )  # fmt: skip
    real = real_fleet(channels=True, script=script)
    operator.create_wave("w", ["alice"])
    layout = real.layout(
        ["alice"],
        defaults={"permission_mode": "default"},  # (the TUI's auto mode would let its classifier decide)
        participants={"alice": {"env": {"CLAUDE_CODE_MAX_RETRIES": "0"}}},
    )
    real.spawn("w/main", layout)
    main = operator.resolve("w/main").id
    laptop = joined_remote(real, tmp_path)

    def agent() -> AgentState:
        (row,) = [p for p in operator.presence("w") if p.participant == "alice"]
        assert row.agent is not None
        return row.agent

    def reached(kind: str, what: str, also: Callable[[AgentState], bool] = lambda a: True) -> AgentState:
        got = real.wait(lambda: (a := agent()).kind == kind and also(a) and a, what)
        assert isinstance(got, AgentState)
        return got

    def rows(env: dict[str, str] | None = None) -> list[dict[str, Any]]:
        done = real.fleet("status", "w", "--json") if env is None else run(env, "status", "w", "--json")
        assert done.returncode == 0, done.stderr
        got: list[dict[str, Any]] = json.loads(done.stdout)["rows"]
        return got

    def same_everywhere(kind: str) -> dict[str, Any]:
        here = real.wait(lambda: (r := rows()[0])["state"]["kind"] == kind and r, f"{kind} here")
        there = rows(laptop)[0]
        assert there["state"] == here["state"], (here["state"], there["state"])
        return here

    real.wait(lambda: agent().kind == "idle", "idle at its prompt")
    same_everywhere("idle")

    job = operator.post(main, "alice: a job for you")
    # (the wave's opening blip may have woken a turn first: the job's turn is the one it opened)
    turning = reached("turning", "turning, woken by the job", lambda a: job.id in a.woken_by)
    assert turning.wavelets == ["w/main"], turning
    assert same_everywhere("turning")["state_text"].startswith("turning")
    transcript = real.transcript("alice")

    def ends() -> list[dict[str, Any]]:
        return [x for x in transcript.lines() if x.get("subtype") == "turn_duration"]

    before = len(ends())
    go_on.set()
    real.wait(lambda: ends()[before:], "the turn's end in the transcript")
    # idle from the moment the transcript says the turn ended (how soon: bench/state.py measures it);
    # the newest end, as Claude Code may write an earlier turn's end behind this one's wake
    reached(
        "idle",
        "idle since the turn's end",
        lambda a: a.since == pytest.approx(unix(ends()[-1]["timestamp"]), abs=0.001),
    )
    same_everywhere("idle")

    operator.post(main, "alice: break now")
    failed = reached("failed", "failed")
    assert "500" in failed.error or "an outage" in failed.error, failed
    # (the StopFailure hook can say so before Claude Code has written the failure to its transcript)
    real.wait(
        lambda: any(x.get("isApiErrorMessage") for x in transcript.lines()), "the failure in its transcript"
    )
    assert same_everywhere("failed")["state_text"].startswith("failed: ")

    operator.post(main, "alice: run the check")
    waiting = reached("permission", "waiting for permission")
    assert (waiting.tool, waiting.input) == ("Bash", "touch state-check.txt"), waiting
    here = same_everywhere("permission")
    assert rows()[0]["state_text"].startswith("waiting for permission: Bash (touch state-check.txt)"), here
    table = real.fleet("status", "w")
    assert "! waiting for permission: Bash (touch state-check.txt)" in table.stdout, table.stdout

    os.kill(real.pane_pid("alice"), signal.SIGKILL)
    real.wait(lambda: real.pane_dead("alice"), "alice's pane dead")
    dead = real.wait(lambda: (r := rows()[0])["state"]["kind"] == "dead" and r, "dead here")
    assert dead["state"]["exit"] == "signal 9" and dead["state_text"] == "dead (signal 9)", dead
    there = real.wait(lambda: rows(laptop)[0]["state"]["kind"] == "unknown" and rows(laptop)[0], "remote")
    assert "channel gone" in there["state"]["why"], there


def unix(timestamp: str) -> float:
    """A transcript line's ISO 8601 stamp (``2026-12-03T16:29:05.978Z``) as Unix time."""
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def run(env: dict[str, str], *args: str) -> Any:
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], env=env, capture_output=True, text=True, timeout=90
    )


def joined_remote(real: RealFleet, tmp_path: Path) -> dict[str, str]:
    """A second FLEET_HOME and HOME (its own tmux server: no panes, no transcripts) that reaches the
    daemon as another machine would: the daemon and a token named in its environment (the join
    string route needs HTTPS, which the test daemon on loopback does not serve; tests/system/test_remote.py
    covers it)."""
    home = tmp_path / "laptop"
    (home / "home").mkdir(parents=True)
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "TMUX"))},
        "FLEET_HOME": str(home / "fleet"),
        "HOME": str(home / "home"),
        "FLEET_TMUX_SOCKET": "fleet-test-state-laptop",
        "FLEET_DAEMON": real.op.base_url,
        "FLEET_TOKEN": real.op.token,
    }
