"""Campaigns without sessions: STATE.md, the spawn table and guards, planning by headings, the CLI's
bad input (a clear message, its exit code, no traceback, nothing changed), the loop's one-per-campaign
lock and its overruling of the fields it owns, and the prompts shipped in the package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from campaignhelp import THREE_WAVES, git, init_repo, log

from fleet.campaign import disk, machine
from fleet.campaign import loop as lp
from fleet.campaign import state as st


def fleet(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fleet", *args], cwd=cwd, capture_output=True, text=True)


def planned(tmp_path: Path) -> disk.Campaign:
    root = tmp_path / "repo"
    init_repo(root)
    done = fleet(root, "campaign", "plan", "PLAN.md", "--by-headings")
    assert done.returncode == 0, done.stderr
    return disk.Campaign(root, f"three-wave-demo-{disk.today()}")


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file of the work tree but git's own and the loop's lock file (a runtime record)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git/" not in str(p) and p.name != "loop.lock"
    }


# ---------------------------------------------------------------- STATE.md


# ---------------------------------------------------------------- the spawn table and guards


def test_an_agent_cannot_write_the_loops_fields_or_lower_verify_count(tmp_path: Path) -> None:
    c = planned(tmp_path)
    s = c.read()
    lp.save_owned(c, lp.Owned(loop_state="armed", active_session_id="sess-1", active_session_kind="executor",
                              verify_floor=3))  # fmt: skip
    s.active_session_id, s.active_session_kind, s.loop_state, s.verify_count = None, "", "idle", 0
    c.write(s)  # what an agent wrote
    seen, _ = lp.read_state(c)
    assert (seen.active_session_id, seen.active_session_kind, seen.loop_state) == (
        "sess-1",
        "executor",
        "armed",
    )
    assert seen.verify_count == 3 and machine.decide(seen).spawn is None


# ---------------------------------------------------------------- planning and the CLI


def test_plan_by_headings_lays_the_campaign_out_and_commits_it(tmp_path: Path) -> None:
    c = planned(tmp_path)
    s = c.read()
    assert s.total_waves == 3 and s.plan_source == "PLAN.md" and s.executor_agent == "executor"
    assert [r.get("Title") for r in s.rows] == ["Scaffold", "Middle", "Finish"]
    assert (c.root / ".wave/active").read_text().strip() == c.id
    assert c.wave_dir(1).joinpath("WAVE.md").read_text().startswith("# Wave 1: Middle\n")
    assert "Three files, one per wave." in (c.plan / "OVERVIEW.md").read_text()
    assert "active_session_id" in (c.plan / "AGENT_INSTRUCTIONS.md").read_text()
    assert (c.dir / ".gitignore").read_text() == "artifacts/\n.loop/\n" and c.artifacts.is_dir()
    assert log(c.root)[-1] == f"wave plan: {c.id}" and not disk.dirty(c.root, ignore=())
    status = json.loads(fleet(c.root, "campaign", "status", "--json").stdout)
    assert status["done"] == 0 and status["total"] == 3 and status["attention"] is None
    text = fleet(c.root, "campaign", "status").stdout
    assert c.id in text and "loop idle (no loop process)" in text and "Scaffold" in text


@pytest.mark.parametrize(
    ("setup", "args", "code", "says"),
    [
        ("nogit", ["plan", "PLAN.md", "--by-headings"], 2, "is not in a git repository"),
        ("noh1", ["plan", "PLAN.md", "--by-headings"], 2, "has no H1"),
        ("planned", ["plan", "PLAN.md", "--by-headings"], 1, "already exists"),
        ("nogit", ["plan", "PLAN.md"], 2, "is not in a git repository"),
        ("noh1", ["plan", "PLAN.md"], 2, "has no H1"),
        ("planned", ["plan", "PLAN.md"], 1, "already exists"),
        ("planned", ["notes", "7"], 4, "has no wave 7: its waves are 0-2"),
        ("badstate", ["status"], 2, "STATE.md line 8: wave_status: 'sideways' is not one of"),
        ("badstate", ["run"], 2, "STATE.md line 8"),
        ("dirty", ["run"], 2, "uncommitted changes (stray.txt)"),
        ("planned", ["clear"], 2, "is not cancelled"),
        ("planned", ["dismiss"], 2, "no question to dismiss"),
        ("planned", ["next"], 2, "no loop runs"),
    ],
)
def test_bad_input_is_a_clear_error_and_changes_nothing(
    tmp_path: Path, setup: str, args: list[str], code: int, says: str
) -> None:
    root = tmp_path / "repo"
    if setup == "nogit":
        root.mkdir()
        (root / "PLAN.md").write_text(THREE_WAVES)
    elif setup == "noh1":
        init_repo(root, "no title\n\n## A\nx\n")
    else:
        c = planned(tmp_path)
        if setup == "badstate":
            text = c.state_file.read_text().replace("wave_status: pending", "wave_status: sideways")
            c.state_file.write_text(text)
        if setup == "dirty":
            (root / "stray.txt").write_text("x")
    before = snapshot(root)
    done = fleet(root, "campaign", *args)
    if "started the local daemon" in done.stderr:
        fleet(root, "daemon", "stop")
    # the planner's checks come before the daemon is reached: bad input starts nothing either
    assert "started the local daemon" not in done.stderr, done.stderr
    assert done.returncode == code, (done.stdout, done.stderr)
    assert says in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("fleet: error: ")
    assert snapshot(root) == before


def test_a_second_loop_on_the_same_campaign_is_refused(tmp_path: Path) -> None:
    c = planned(tmp_path)
    held = lp.LoopLock(c)
    held.acquire()
    try:
        before = snapshot(c.root)
        done = fleet(c.root, "campaign", "run")
        assert done.returncode == 1 and "a loop already runs for campaign" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and snapshot(c.root) == before
    finally:
        held.release()


def test_commands_without_a_loop_apply_to_state_md(tmp_path: Path) -> None:
    c = planned(tmp_path)
    assert fleet(c.root, "campaign", "pause").returncode == 0 and c.read().loop_state == "paused"
    s = c.read()
    s.wave_status, s.failure_kind = "awaiting_user", ""
    s.user_question = "which one?"
    c.write(s)
    git(c.root, "commit", "-qam", "paused")
    banner = fleet(c.root, "campaign", "status").stdout
    assert "USER ATTENTION NEEDED: which one?" in banner and "fleet campaign dismiss" in banner
    assert fleet(c.root, "campaign", "dismiss").returncode == 0
    s = c.read()
    assert (s.wave_status, s.failure_kind, s.loop_state, s.user_question) == (
        "failed",
        "cancelled",
        "idle",
        "",
    )
    assert machine.decide(s).spawn is None
    assert fleet(c.root, "campaign", "clear").returncode == 0
    assert (c.read().wave_status, c.read().failure_kind) == ("pending", "")


# ---------------------------------------------------------------- the cancelled guard


def test_a_cancelled_wave_stays_cancelled_whatever_an_agent_writes(tmp_path: Path) -> None:
    """The interrupted session may still write STATE.md after `interrupt` (a Bash child that outlives
    its pane, a write already under way): it cannot clear the cancellation, only `clear` can."""
    c = planned(tmp_path)
    done = fleet(c.root, "campaign", "interrupt")
    assert done.returncode == 0 and "wave 0 cancelled" in done.stdout, done.stderr
    # the interrupted agent's late write, as its protocol would make it on success
    s = c.read()
    s.wave_status, s.failure_kind, s.current_wave = "pending", "", 0
    c.write(s)
    assert fleet(c.root, "campaign", "resume").returncode == 0
    s, o = lp.read_state(c)
    assert (s.loop_state, s.wave_status, s.failure_kind) == ("armed", "failed", "cancelled")
    d = machine.decide(s)
    assert d.spawn is None and "cancelled" in d.why, d
    assert c.read().failure_kind == "cancelled"  # written back over the agent's edit
    status = json.loads(fleet(c.root, "campaign", "status", "--json").stdout)
    assert status["state"]["failure_kind"] == "cancelled"
    assert fleet(c.root, "campaign", "clear").returncode == 0
    s, o = lp.read_state(c)
    assert (s.wave_status, s.failure_kind, o.cancelled) == ("pending", "", False)
    assert machine.decide(s).spawn == "verifier"


def test_the_cancel_commit_carries_the_cancelled_state(tmp_path: Path) -> None:
    """It was made before STATE.md was written, so it held the state from before the interrupt."""
    c = planned(tmp_path)
    assert fleet(c.root, "campaign", "interrupt").returncode == 0
    assert log(c.root)[-1] == "wave 0 (failed): cancelled by the operator"
    committed = st.parse(git(c.root, "show", f"HEAD:{c.rel(c.state_file)}"))
    assert (committed.wave_status, committed.failure_kind) == ("failed", "cancelled")


def test_a_loop_that_does_not_answer_in_time_is_not_raced_by_an_offline_edit(tmp_path: Path) -> None:
    """A loop busy starting a session answers late: the CLI says so and edits nothing itself (it used
    to fall back to editing STATE.md on any socket error, a timeout included); the loop applies the
    command when it is free."""
    c = planned(tmp_path)
    loop = lp.Loop(c, lp.Launcher(None, None, None))  # listening, holding the lock, busy: not serving
    loop.start(arm=False)
    try:
        before = snapshot(c.root)
        done = subprocess.run(
            [sys.executable, "-m", "fleet", "campaign", "interrupt"], cwd=c.root, capture_output=True,
            text=True, env={**os.environ, "FLEET_CAMPAIGN_CONTROL_TIMEOUT": "0.5"},
        )  # fmt: skip
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert "did not answer `interrupt` within 0.5 s" in done.stderr, done.stderr
        assert "fleet campaign status" in done.stderr
        assert snapshot(c.root) == before
        loop._serve_one()  # free again: the queued command is applied by the loop, once
        s = c.read()
        assert (s.wave_status, s.failure_kind) == ("failed", "cancelled")
    finally:
        loop.close()


# ---------------------------------------------------------------- a loop that cannot spawn


def test_interrupt_without_a_loop_does_not_claim_it_ended_the_session(tmp_path: Path) -> None:
    """A loop killed with its session alive: `interrupt` cancels the wave on disk but holds no pane,
    so it says how to end the session instead of saying it did."""
    c = planned(tmp_path)
    s, o = lp.read_state(c)
    o.active_session_id, o.active_session_kind, o.participant = "s-1", "executor", "executor-w0-s1"
    o.wavelet = f"{c.id}/executor-w0-s1"
    lp.save_owned(c, o)
    done = fleet(c.root, "campaign", "interrupt")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"wave 0 cancelled; no loop runs to end session executor-w0-s1: end it with `fleet kill {o.wavelet}`"
    )
    s, o = lp.read_state(c)
    assert (s.failure_kind, o.active_session_id, o.cancelled) == ("cancelled", None, True)
