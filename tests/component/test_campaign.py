"""Campaigns without sessions: STATE.md, the spawn table and guards, planning by headings, the CLI's
bad input (a clear message, its exit code, no traceback, nothing changed), the loop's one-per-campaign
lock and its overruling of the fields it owns, and the prompts shipped in the package."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from campaignhelp import THREE_WAVES, git, init_repo, log
from conftest import retry_until

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
    _s, o = lp.read_state(c)
    o.active_session_id, o.active_session_kind, o.participant = "s-1", "executor", "executor-w0-s1"
    lp.save_owned(c, o)
    (c.root / "half.txt").write_text("the interrupted session's work\n")
    assert fleet(c.root, "campaign", "interrupt").returncode == 0
    assert log(c.root)[-1] == "wave 0 (failed): cancelled by the operator"
    committed = st.parse(git(c.root, "show", f"HEAD:{c.rel(c.state_file)}"))
    assert (committed.wave_status, committed.failure_kind) == ("failed", "cancelled")
    assert "half.txt" in git(c.root, "show", "--name-only", "--format=", "HEAD")


def test_interrupt_with_nothing_running_commits_nothing(tmp_path: Path) -> None:
    """No session was ended, so no work is left to save: the wave is cancelled (the loop spawns
    nothing) without a commit; a second interrupt changes nothing and says so (it used to make a
    "cancelled" commit each time)."""
    c = planned(tmp_path)
    before = log(c.root)
    first = fleet(c.root, "campaign", "interrupt")
    assert first.returncode == 0 and "wave 0 cancelled" in first.stdout, first.stderr
    assert log(c.root) == before and c.read().failure_kind == "cancelled"
    state = c.state_file.read_bytes()
    second = fleet(c.root, "campaign", "interrupt")
    assert second.returncode == 0 and "already cancelled" in second.stdout, (second.stdout, second.stderr)
    assert log(c.root) == before and c.state_file.read_bytes() == state


def test_interrupting_the_initial_verifier_is_not_a_wave_0_failure(tmp_path: Path) -> None:
    """The verifier checks the plan, it does not run wave 0: wave 0 stays pending (row included),
    the commit is the verifier's, and `clear` runs the initial check again."""
    c = planned(tmp_path)
    _s, o = lp.read_state(c)
    o.active_session_id, o.active_session_kind, o.participant = "s-1", "verifier", "verifier-s1"
    lp.save_owned(c, o)
    (c.dir / "plan" / "OVERVIEW.md").write_text("half-patched\n")
    done = fleet(c.root, "campaign", "interrupt")
    assert done.returncode == 0 and "the verifier of wave 0 cancelled" in done.stdout, done.stderr
    s = c.read()
    assert (s.wave_status, s.failure_kind, s.row(0).get("Status")) == ("pending", "cancelled", "pending")
    assert log(c.root)[-1] == "wave verify: cancelled by the operator"
    assert machine.decide(lp.read_state(c)[0]).spawn is None
    assert fleet(c.root, "campaign", "clear").returncode == 0
    s, _o = lp.read_state(c)
    assert (s.wave_status, s.failure_kind) == ("pending", "") and machine.decide(s).spawn == "verifier"


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


# ---------------------------------------------------------------- hand edits that parse but make no sense


def _edit(c: disk.Campaign, line: int, text: str) -> None:
    lines = c.state_file.read_text().splitlines()
    lines[line - 1] = text
    c.state_file.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("edits", "line", "says"),
    [
        ({7: "current_wave: 9"}, 7, "current_wave: 9 is past the last wave (2; total_waves 3)"),
        ({16: "total_waves: 5"}, 16, "total_waves: 5 but the wave table has 3 rows"),
        ({7: "current_wave: 2"}, 28, "wave 0 never ran (Status pending) but current_wave is 2"),
        ({30: "| 2 | Finish | complete |  |  |  |"}, 30, "wave 2 is complete but current_wave is 0"),
        ({28: "| 0 | Scaffold | done |  |  |  |"}, 28, "wave 0's Status 'done' is not one of"),
        ({29: "| 7 | Middle | pending |  |  |  |"}, 29, "row 2 is numbered '7', not 1"),
        ({9: "failure_kind: crash"}, 9, "failure_kind: crash does not go with wave_status pending"),
        ({8: "wave_status: failed"}, 9, "wave_status failed needs a failure_kind"),
        ({8: "wave_status: all_complete"}, 8, "wave_status: all_complete but current_wave 0 of 3"),
        ({14: "active_session_id: abc"}, 15, "active_session_id and active_session_kind go together"),
        ({28: "| 0 | Scaffold | complete |  |  |  |"}, 28, "wave 0 is complete but it is current_wave"),
    ],
)
def test_a_hand_edit_that_parses_but_makes_no_sense_is_refused_naming_its_line(
    tmp_path: Path, edits: dict[int, str], line: int, says: str
) -> None:
    """`current_wave: 9` of 3 waves used to read as "complete" without waves 0-2 run; `total_waves: 5`
    spawned an executor for a wave with no WAVE.md. Each such edit is refused (exit 2), naming its
    line, and the loop starts nothing."""
    c = planned(tmp_path)
    for n, text in edits.items():
        _edit(c, n, text)
    before = snapshot(c.root)
    for args in (["status"], ["run"]):
        done = fleet(c.root, "campaign", *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stderr.startswith(f"fleet: error: STATE.md line {line}: "), done.stderr
        assert says in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert snapshot(c.root) == before


def test_total_waves_past_the_plans_waves_is_refused(tmp_path: Path) -> None:
    """A table of five rows but WAVE.md for three: the wave without one is named."""
    c = planned(tmp_path)
    _edit(c, 16, "total_waves: 5")
    text = (
        c.state_file.read_text().rstrip("\n")
        + "\n| 3 | More | pending |  |  |  |\n| 4 | Last | pending |  |  |  |\n"
    )
    c.state_file.write_text(text)
    for args in (["status"], ["run"]):  # status first: an old loop would run and start a daemon
        done = fleet(c.root, "campaign", *args)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "STATE.md line 16: total_waves: 5 but" in done.stderr, done.stderr
        assert "wave_3/WAVE.md does not exist" in done.stderr


# ---------------------------------------------------------------- a STATE.md that does not parse


def _break(c: disk.Campaign) -> bytes:
    _edit(c, 8, "wave_status: sideways")
    return c.state_file.read_bytes()


class Stub(lp.Launcher):
    """Sessions that are only ids: launched, ended and killed as the loop says (no pane, no daemon)."""

    def __init__(self) -> None:
        self.launched: list[str] = []
        self.ended: list[str] = []

    def launch(
        self, c: disk.Campaign, s: st.State, kind: str, layout_ref: str, *, kickoff: str = ""
    ) -> lp.Started:
        name = (
            f"executor-w{s.current_wave}-s{s.session_count}"
            if kind == "executor"
            else f"{kind}-s{s.session_count}"
        )
        self.launched.append(name)
        return lp.Started(f"sid-{name}", name, f"{c.id}/{name}", "")

    def end(self, o: lp.Owned) -> None:
        self.ended.append(o.participant)

    def tell(self, c: disk.Campaign, text: str) -> None:
        pass

    def last_phrase(self, transcript: str | None, o: lp.Owned) -> str:
        return ""


def test_control_commands_reach_the_loop_whatever_state_md_holds(tmp_path: Path) -> None:
    """pause, interrupt and stop used to parse STATE.md before reaching the loop and exit 2: the
    operator lost control exactly when something went wrong. Now each reaches the loop; interrupt
    ends the session; STATE.md is left as it is (the cancellation is the loop's record)."""
    c = planned(tmp_path)
    stub = Stub()
    loop = lp.Loop(c, stub)
    loop.start(arm=True)
    try:
        s, _o = lp.read_state(c)
        s.verify_count = 1
        c.write(s)
        loop.step()
        assert stub.launched == ["executor-w0-s1"] and loop.sock is not None
        broken = _break(c)
        for op, says in (("pause", "paused"), ("interrupt", "wave cancelled"), ("stop", "stopped")):
            cli = subprocess.Popen([sys.executable, "-m", "fleet", "campaign", op], cwd=c.root,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
            ready, _, _ = select.select([loop.sock], [], [], 30)
            if ready:
                loop._serve_one()
            out, err = cli.communicate(timeout=30)
            assert cli.returncode == 0 and says in out and "Traceback" not in err, (op, out, err)
            assert "STATE.md line 8" in out, out
            assert c.state_file.read_bytes() == broken
        owned = lp.load_owned(c)
        assert owned is not None
        assert (owned.loop_state, owned.cancelled, owned.active_session_id) == ("idle", True, None)
        assert stub.ended == ["executor-w0-s1"] and loop.quit
    finally:
        loop.close()
    _edit(c, 8, "wave_status: running")
    s, _o = lp.read_state(c)  # fixed: the cancellation holds
    assert (s.wave_status, s.failure_kind) == ("failed", "cancelled")


def test_pause_and_stop_without_a_loop_need_no_state_md(tmp_path: Path) -> None:
    c = planned(tmp_path)
    broken = _break(c)
    for op, want in (("pause", "paused"), ("stop", "idle")):
        done = fleet(c.root, "campaign", op)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (op, done.stderr)
        o = lp.load_owned(c)
        assert o is not None and o.loop_state == want
    assert c.state_file.read_bytes() == broken
    assert fleet(c.root, "campaign", "clear").returncode == 2  # it needs the wave's state: refused


def test_invalid_utf8_is_named_by_line(tmp_path: Path) -> None:
    c = planned(tmp_path)
    data = c.state_file.read_bytes().replace(b"plan_source: PLAN.md", b"plan_source: PL\xffAN.md")
    c.state_file.write_bytes(data)
    done = fleet(c.root, "campaign", "status")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("fleet: error: STATE.md line 3: byte 0xff at column 16 is not UTF-8")


def test_status_watch_shows_the_parse_error_and_keeps_watching(tmp_path: Path) -> None:
    c = planned(tmp_path)
    good = c.state_file.read_text()
    _break(c)
    proc = subprocess.Popen([sys.executable, "-m", "fleet", "campaign", "status", "--watch"], cwd=c.root,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        retry_until(lambda: any("STATE.md line 8" in ln for ln in seen), timeout=20, what="the error shown")
        assert proc.poll() is None, seen
        c.state_file.write_text(good)
        retry_until(lambda: any("Scaffold" in ln for ln in seen), timeout=20, what="the table once fixed")
        assert proc.poll() is None and not any("Traceback" in ln for ln in seen), seen
    finally:
        proc.terminate()
        proc.wait(10)


# ---------------------------------------------------------------- what the loop commits


def _armed(tmp_path: Path, stub: Stub | None = None, **cursor: object) -> tuple[disk.Campaign, lp.Loop, Stub]:
    c = planned(tmp_path)
    s = c.read()
    for k, v in {"verify_count": 1, **cursor}.items():
        setattr(s, k, v)
    for n in range(s.current_wave):
        s.row(n).set("Status", "complete")
    c.write(s)
    git(c.root, "commit", "-qam", "seed")
    stub = stub or Stub()
    loop = lp.Loop(c, stub)
    loop.start(arm=True)
    return c, loop, stub


def test_the_last_waves_bookkeeping_is_committed(tmp_path: Path) -> None:
    """After the last wave the loop's final STATE.md (all_complete, the row complete) used to be left
    uncommitted."""
    c, loop, stub = _armed(tmp_path, current_wave=2)
    try:
        loop.step()
        s = c.read()
        s.current_wave, s.wave_status = 3, "all_complete"
        c.write(s)
        (c.root / "c.txt").write_text("c\n")
        git(c.root, "add", "-A")
        git(c.root, "commit", "-qm", "wave 2: Finish")
        loop.settle(f"sid-{stub.launched[-1]}", pane_exited=False)
    finally:
        loop.close()
    s = c.read()
    assert s.wave_status == "all_complete" and s.row(2).get("Status") == "complete"
    assert disk.dirty(c.root, ignore=()) == [], disk.dirty(c.root, ignore=())
    assert log(c.root)[-2:] == ["wave 2: Finish", f"campaign {c.id}: all waves complete"]


def test_the_crash_note_names_the_crash_commit(tmp_path: Path) -> None:
    c, loop, stub = _armed(tmp_path)
    try:
        loop.step()
        (c.root / "half.txt").write_text("partial\n")
        loop.settle(f"sid-{stub.launched[-1]}", pane_exited=True)
    finally:
        loop.close()
    crash = git(c.root, "log", "--format=%h %s").splitlines()
    sha = next(ln.split()[0] for ln in crash if "(crashed): session ended without state update" in ln)
    notes = c.notes(0).read_text()
    assert f"**Commit:** {sha}" in notes and "this attempt's crash commit" not in notes, notes
    # the note (and the loop's STATE.md bookkeeping) lands with the next outcome's commit
    assert disk.dirty(c.root) == [] and disk.dirty(c.root, ignore=()) == [
        c.rel(c.state_file),
        c.rel(c.notes(0)),
    ]
    assert c.read().row(0).get("Commit") == sha


def test_the_loops_commit_leaves_out_what_was_changed_before_the_session_started(tmp_path: Path) -> None:
    """The loop's commits used to stage `git add -A`: the user's uncommitted edits landed in a wave's
    crash commit. Paths already changed when the session started, and unchanged since, stay out."""
    c, loop, stub = _armed(tmp_path)
    try:
        (c.root / "mine.txt").write_text("the user's draft\n")  # between waves: not the session's
        (c.root / "PLAN.md").write_text("the user's edit of the plan\n")
        loop.step()
        shown = fleet(c.root, "campaign", "status").stdout
        assert "left out of this session's commit (changed before it started): PLAN.md, mine.txt" in shown
        (c.root / "work.txt").write_text("the session's work\n")
        loop.settle(f"sid-{stub.launched[-1]}", pane_exited=True)
    finally:
        loop.close()
    committed = git(c.root, "show", "--name-only", "--format=", "HEAD").split()
    assert log(c.root)[-1] == "wave 0 (crashed): session ended without state update"
    assert "work.txt" in committed and "mine.txt" not in committed and "PLAN.md" not in committed
    assert set(disk.dirty(c.root)) == {"mine.txt", "PLAN.md"}
    assert (c.root / "mine.txt").read_text() == "the user's draft\n"


class Quick(Stub):
    """A session quick off the mark: it writes STATE.md while the loop's launch is still running
    (a real one may, a few seconds after its channel connects, before the launch returns)."""

    def launch(
        self, c: disk.Campaign, s: st.State, kind: str, layout_ref: str, *, kickoff: str = ""
    ) -> lp.Started:
        started = super().launch(c, s, kind, layout_ref, kickoff=kickoff)
        mine = c.read()
        mine.row(mine.current_wave).set("Notes", "seen by the session")
        c.write(mine)
        return started


def test_what_a_session_writes_to_state_md_during_its_launch_is_kept(tmp_path: Path) -> None:
    """The loop wrote back the STATE.md it had read before the launch once the launch returned: a
    session's edits made meanwhile were lost (its settle then read as a crash). Now the loop puts its
    own fields into the file as it is after the launch."""
    c, loop, quick = _armed(tmp_path, Quick())
    try:
        loop.step()
        assert quick.launched == ["executor-w0-s1"]
        after = c.read()
        assert after.row(0).get("Notes") == "seen by the session"
        assert after.row(0).get("Session") == "executor-w0-s1"
        assert after.active_session_id == "sid-executor-w0-s1" and after.wave_status == "running"
    finally:
        loop.close()


def test_keep_out_keeps_what_the_user_edits_while_a_session_runs_out_of_every_commit(tmp_path: Path) -> None:
    """A path changed while a session runs used to be committed with the session's work, with no way
    out. `fleet campaign run --keep-out GLOB` names the user's own: never staged, not a dirty tree
    for arming, kept across a restart of the loop, shown in status."""
    c = planned(tmp_path)
    s = c.read()
    s.verify_count = 1
    c.write(s)
    git(c.root, "commit", "-qam", "seed")
    (c.root / "notes").mkdir()
    (c.root / "notes" / "draft.md").write_text("dirty before the loop is armed\n")
    refused = fleet(c.root, "campaign", "run", "--wait", "1")
    assert refused.returncode == 2 and "notes/draft.md" in refused.stderr and "--keep-out" in refused.stderr
    stub = Stub()
    loop = lp.Loop(c, stub, keep_out=["notes/", "*.scratch"])
    loop.start(arm=True)  # the dirty notes/ no longer stop it
    try:
        loop.step()
        (c.root / "notes" / "draft.md").write_text("edited while the session runs\n")
        (c.root / "todo.scratch").write_text("mine too\n")
        (c.root / "work.txt").write_text("the session's work\n")
        shown = fleet(c.root, "campaign", "status").stdout
        assert "never committed (--keep-out): notes/, *.scratch" in shown, shown
        loop.settle(f"sid-{stub.launched[-1]}", pane_exited=True)
    finally:
        loop.close()
    committed = git(c.root, "show", "--name-only", "--format=", "HEAD").split()
    assert "work.txt" in committed and "notes/draft.md" not in committed and "todo.scratch" not in committed
    assert set(disk.dirty(c.root)) == {"notes/draft.md", "todo.scratch"}
    again = lp.Loop(c, Stub())  # a restart without --keep-out keeps the list
    again.start(arm=False)
    again.close()
    owned = lp.load_owned(c)
    assert owned is not None and owned.keep_out == ["notes/", "*.scratch"]


def test_ending_a_sessions_leftovers_ends_only_this_fleets(tmp_path: Path) -> None:
    """What a crashed session left running is found by its wavelet's id, not its path: another fleet
    on this machine (another FLEET_HOME or daemon) running a campaign of the same id has wavelets of
    the same paths, and its sessions used to be ended too (two test workers running one campaign
    file ended each other's stand-ins)."""
    path = "three-wave-demo/executor-w0-s1"

    def sleeper(wavelet_id: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "FLEET_WAVELET": path, "FLEET_WAVELET_ID": wavelet_id}
        return subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)

    mine, theirs = (
        sleeper("01aaaaaa-0000-7000-8000-000000000001"),
        sleeper("01bbbbbb-0000-7000-8000-000000000002"),
    )
    try:
        ended = lp.end_leftovers("01aaaaaa-0000-7000-8000-000000000001")
        assert ended == [mine.pid]
        assert mine.wait(10) == -15
        assert theirs.poll() is None, "another fleet's session was ended"
        assert lp.end_leftovers("") == []
    finally:
        for p in (mine, theirs):
            p.kill()
            p.wait(10)


def test_a_loop_killed_leaves_no_control_socket_behind_and_the_next_one_serves(tmp_path: Path) -> None:
    """The control socket lives in the abstract namespace: a loop killed with SIGKILL leaves no file
    in the temp folder (they piled up there), and the next loop binds the same name and answers."""
    import signal
    import tempfile

    c = planned(tmp_path)
    folder = Path(tempfile.gettempdir()) / f"fleet-{os.geteuid()}"  # where the socket files were

    def socket_files() -> list[Path]:
        return [p for p in folder.glob("campaign-*.sock")] if folder.is_dir() else []

    for stale in socket_files():  # (left by loops killed before this change)
        stale.unlink(missing_ok=True)
    ready_r, ready_w = os.pipe()
    child = os.fork()
    if child == 0:  # the first loop, in a process of its own
        try:
            os.close(ready_r)
            lp.Loop(c, Stub()).start(arm=True)
            os.write(ready_w, b"up")
            signal.pause()
        finally:
            os._exit(0)
    os.close(ready_w)
    try:
        assert os.read(ready_r, 2) == b"up"
        assert socket_files() == []  # nothing on disk
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        os.close(ready_r)
    loop = lp.Loop(c, Stub())
    loop.start(arm=True)
    try:
        answers: list[dict[str, object]] = []
        asker = threading.Thread(target=lambda: answers.append(lp.send(c, {"op": "ping"}, timeout=30)))
        asker.start()
        assert loop.sock is not None and select.select([loop.sock], [], [], 30)[0]
        loop._serve_one()
        asker.join(30)
        assert answers and answers[0].get("ok") is not False, answers
    finally:
        loop.close()
