"""`fleet campaign plan PLAN.md` with a planner session: real Claude Code over the scripted model,
real tmux, the real daemon, a temporary git repository (docs/campaigns.md).

The scripted planner (participant ``planner-s1``) reads STATE.md and writes the campaign with
Write tool calls; fleet validates it and commits, or refuses naming the file and line.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from campaignhelp import init_repo, log
from realclaude import RealFleet
from scripted_model import Answer, Say, Script, call, on_message, rule, steps

from fleet import errors
from fleet.campaign import disk
from fleet.campaign import state as st

RealFleetFactory = Callable[..., RealFleet]

PLAN = """\
# Two Wave Plan

Build a greeting: first the file, then its test.
"""


def state_text(cid: str, waves: list[str], **fields: Any) -> str:
    s = st.State(campaign_id=cid, total_waves=len(waves), **fields)
    s.before_table = ["", f"# Campaign {cid}", ""]
    for n, title in enumerate(waves):
        r = s.row(n)
        r.set("Title", title)
        r.set("Status", "pending")
    return st.render(s)


def planner_turn(root: Path, cid: str, state_md: str, waves: list[str], outside: Path) -> Answer:
    d = root / ".wave" / "campaigns" / cid
    writes = [
        # outside .wave/: the planner's rules deny it (the file must never appear)
        call("Write", file_path=str(outside), content="not allowed\n"),
        call("Read", file_path=str(d / "STATE.md")),
        call("Write", file_path=str(d / "STATE.md"), content=state_md),
        call("Write", file_path=str(d / "plan" / "OVERVIEW.md"), content="# Two Wave Plan\n\nA greeting.\n"),
    ]
    for n, title in enumerate(waves):
        wave_md = f"# Wave {n}: {title}\n\nDo {title.lower()}.\n"
        writes.append(
            call("Write", file_path=str(d / "plan" / "waves" / f"wave_{n}" / "WAVE.md"), content=wave_md)
        )
    first, *rest = writes
    return steps(first, *rest, Say(f"PLAN WRITTEN: {len(waves)}"))


def setup(real_fleet: RealFleetFactory, state_for: Callable[[str], str]) -> tuple[RealFleet, Path, str, str]:
    cid = f"two-wave-plan-{disk.today()}"
    holder: dict[str, Any] = {}
    waves = ["Greeting file", "Greeting test"]

    def answer() -> Answer:
        return planner_turn(holder["root"], cid, state_for(cid), waves, holder["root"] / "outside.txt")

    # the script is built before the fleet exists: the project folder is known only then
    script = Script()
    real = real_fleet(channels=True, script=script)
    root = real.project
    holder["root"] = root
    script.add(
        "planner-s1",
        rule(on_message(author="operator", contains="planner-s1: you are the planner"), answer()),
    )
    init_repo(root, PLAN)
    layout = real.layout(["executor", "planner"])
    return real, root, cid, layout


def test_a_planner_session_writes_a_valid_two_wave_campaign(real_fleet: RealFleetFactory) -> None:
    real, root, cid, layout = setup(
        real_fleet, lambda cid: state_text(cid, ["Greeting file", "Greeting test"])
    )
    done = real.fleet(
        "campaign", "plan", str(root / "PLAN.md"), "--executor", "executor", "--model", "m1",
        "--layout", layout, "--repo", str(root), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    assert f"planned campaign {cid}: 2 waves" in done.stdout
    status = real.fleet("campaign", "status", "--json", "--repo", str(root))
    assert status.returncode == 0, status.stderr
    view = json.loads(status.stdout)
    assert view["total"] == 2 and [r["wave"] for r in view["rows"]] == [0, 1], view
    s = disk.Campaign(root, cid).read()
    assert (s.total_waves, s.executor_agent, s.executor_model, s.plan_source) == (
        2,
        "executor",
        "m1",
        "PLAN.md",
    )
    assert [r.get("Title") for r in s.rows] == ["Greeting file", "Greeting test"]
    assert log(root) == ["the plan", f"wave plan: {cid}"]
    assert disk.dirty(root, ignore=()) == []
    assert (root / ".wave" / "active").read_text().strip() == cid
    # the write outside .wave/ was refused by the planner's rules, as its transcript shows
    assert not (root / "outside.txt").exists()
    results = [
        b
        for line in real.transcript("planner-s1", cid).lines()
        if line.get("type") == "user"
        for b in (line.get("message") or {}).get("content") or []
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]
    assert results and results[0].get("is_error"), results[:1]
    assert "Permission to use Write has been denied" in str(results[0].get("content")), results[0]
    # the kickoff was posted before the planner started (its session is recorded just before its
    # pane runs it), so its first turn carried it: not the fork's system blip arriving alone
    (kick,) = [b for b in real.blips(f"{cid}/planner-s1") if b.kind != "system"]
    (rec,) = real.op.sessions(cid, "planner-s1")
    assert kick.text.startswith("planner-s1: you are the planner") and kick.created_at <= rec.updated_at, (
        kick,
        rec,
    )
    first = next(r for r in real.requests("planner-s1") if r.kind == "turn")
    assert "planner-s1: you are the planner" in json.dumps(first.messages), first.messages


def test_a_planner_that_writes_a_bad_state_md_is_refused_naming_the_line(
    real_fleet: RealFleetFactory,
) -> None:
    def bad(cid: str) -> str:
        text = state_text(cid, ["Greeting file", "Greeting test"])
        return text.replace("wave_status: pending", "wave_status: sideways")

    real, root, cid, layout = setup(real_fleet, bad)
    done = real.fleet(
        "campaign", "plan", str(root / "PLAN.md"), "--layout", layout, "--repo", str(root), timeout=300
    )
    assert done.returncode == 2, done.stderr + done.stdout
    assert f".wave/campaigns/{cid}/STATE.md line 8: wave_status: 'sideways'" in done.stderr, done.stderr
    assert "nothing was committed" in done.stderr
    assert "Traceback" not in done.stderr
    assert log(root) == ["the plan"]
    # the planner's files are left to read, not activated; its window is closed
    assert "wave_status: sideways" in (root / ".wave" / "campaigns" / cid / "STATE.md").read_text()
    assert not (root / ".wave" / "active").exists()
    panes = real.srv.cmd("list-panes", "-a", "-F", "#{@fleet_participant}").stdout
    assert "planner-s1" not in panes, panes


# ---------------------------------------------------------------- without a session


def prepared(tmp_path: Path) -> tuple[Path, disk.Campaign]:
    from fleet.campaign import planner

    root = tmp_path / "repo"
    init_repo(root, PLAN)
    c, _state = planner.prepare(root, root / "PLAN.md", executor="executor", model="")
    return root, c


def test_a_change_outside_wave_is_refused_naming_the_files_and_nothing_is_restored(tmp_path: Path) -> None:
    from fleet.campaign import planner

    root, c = prepared(tmp_path)
    (root / "src.py").write_text("print('planner')\n")
    (root / "PLAN.md").write_text("# Two Wave Plan\n\nrewritten\n")
    try:
        planner.check_tree(c)
    except errors.UsageError as exc:
        assert "outside .wave/: PLAN.md, src.py" in exc.message, exc.message
        assert "nothing was restored" in exc.message
    else:
        raise AssertionError("a change outside .wave/ was accepted")
    assert (root / "src.py").read_text() == "print('planner')\n"
    assert log(root) == ["the plan"]


def test_validation_names_each_problem_with_its_file_and_line(tmp_path: Path) -> None:
    from fleet.campaign import planner

    _root, c = prepared(tmp_path)
    c.state_file.write_text(state_text(c.id, ["One", "Two", "Three"], current_wave=1))
    for n, body in ((0, "# Wave 0: caf\u00e9\n"), (2, "  \n")):
        c.wave_dir(n).mkdir(parents=True)
        (c.wave_dir(n) / "WAVE.md").write_bytes(body.encode("latin-1"))  # wave_0's: not UTF-8
    (c.plan / "AGENT_INSTRUCTIONS.md").write_bytes(b"\xff\xfe")
    try:
        planner.validate(c)
    except errors.UsageError as exc:
        msg = exc.message
    else:
        raise AssertionError("an invalid campaign validated")
    rel = f".wave/campaigns/{c.id}"
    assert f"{rel}/STATE.md line 7: current_wave is 1; a new campaign starts with 0" in msg, msg
    assert f"{rel}/plan/waves/: waves must be contiguous from wave_0; missing wave_1" in msg, msg
    assert f"{rel}/plan/waves/wave_2/WAVE.md line 1: empty" in msg, msg
    assert f"{rel}/plan/OVERVIEW.md: missing" in msg, msg
    assert f"{rel}/plan/waves/wave_0/WAVE.md: not UTF-8 text (byte 0xe9 at offset 13)" in msg, msg
    assert f"{rel}/plan/AGENT_INSTRUCTIONS.md: not UTF-8 text (byte 0xff at offset 0)" in msg, msg
    assert f"{rel}/STATE.md line 16: total_waves is 3, but there are 2 wave directories" in msg, msg
    assert "nothing was committed" in msg
