"""Campaigns end to end: the real loop process, real Claude Code sessions over the scripted model,
real tmux, the real daemon, a temporary git repository (docs/campaigns.md).

The scripted model plays each session by its participant name (``verifier-s1``, ``executor-w0-s2``
…: the loop names them by kind, wave and session count); each agent turn edits STATE.md and
commits with Bash, as the protocols ask, and ends with its set phrase. What is asserted comes from
STATE.md, NOTES.md, the git log, and the sessions' own transcripts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from campaignhelp import (
    commit_cmd,
    init_repo,
    log,
    notes_cmd,
    question_turn,
    sed_state,
    state_at,
    turn,
)
from realclaude import RealFleet
from scripted_model import Script, on_message, rule

from fleet.campaign import disk
from fleet.campaign import state as st

RealFleetFactory = Callable[..., RealFleet]
CAMPAIGN = float(os.environ.get("CAMPAIGN_TIMEOUT", "600"))
"""Seconds a whole scripted campaign may take (each session is a real Claude Code start)."""


def kickoff(name: str) -> Any:
    return on_message(author="operator", contains=f"{name}: you are the")


class Campaign:
    """A planned campaign in the real fleet's project folder, and its loop process."""

    def __init__(self, real: RealFleet) -> None:
        self.real = real
        self.root = real.project
        init_repo(self.root)
        done = real.fleet(
            "campaign", "plan", str(self.root / "PLAN.md"), "--by-headings", "--repo", str(self.root)
        )
        assert done.returncode == 0, done.stderr
        self.cid = f"three-wave-demo-{disk.today()}"
        # the agents run Bash and edit files without asking (the user's permission rules)
        (real.home / ".claude").mkdir(exist_ok=True)
        allow = {"permissions": {"allow": ["Bash", "Write", "Edit", "Read"]}}
        (real.home / ".claude" / "settings.json").write_text(json.dumps(allow))
        self.layout = real.layout(["executor", "verifier"], defaults={"permission_mode": "acceptEdits"})
        self.procs: list[subprocess.Popen[str]] = []

    def run(self) -> subprocess.Popen[str]:
        out = open(self.real.tmp / f"loop-{len(self.procs)}.log", "w")  # noqa: SIM115
        p = subprocess.Popen(
            [sys.executable, "-m", "fleet", "campaign", "run", "--repo", str(self.root),
             "--layout", self.layout],
            env=self.real.env, stdout=out, stderr=subprocess.STDOUT, text=True, cwd=self.root,
        )  # fmt: skip
        self.procs.append(p)
        return p

    def loop_log(self) -> str:
        return "\n".join(p.read_text() for p in sorted(self.real.tmp.glob("loop-*.log")))

    def state(self) -> st.State:
        return disk.Campaign(self.root, self.cid).read()

    def wait_state(self, pred: Callable[[st.State], bool], what: str, timeout: float = CAMPAIGN) -> st.State:
        def ok() -> st.State | None:
            try:
                s = self.state()
            except st.StateError:
                return None
            owned = self.root / f".wave/campaigns/{self.cid}/.loop/owned.json"
            error = json.loads(owned.read_text()).get("last_error") if owned.exists() else ""
            assert not error, f"the loop reports: {error}"
            return s if pred(s) else None

        try:
            return self.real.wait(ok, what, timeout=timeout)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\nSTATE.md: {self.state()}\nloop log:\n{self.loop_log()[-3000:]}\n"
                f"screens:\n{self.screens()}"
            ) from None

    def screens(self) -> str:
        out = self.real.srv.cmd("list-panes", "-a", "-F", "#{pane_id} #{@fleet_participant}").stdout
        shots = []
        for line in out:
            pane, _, who = line.partition(" ")
            if who:
                screen = self.real.srv.cmd("capture-pane", "-p", "-t", pane).stdout
                shots.append(f"--- {who}\n" + "\n".join(ln for ln in screen if ln.strip())[-1500:])
        return "\n".join(shots)

    def fleet(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.real.fleet("campaign", *args, "--repo", str(self.root))

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


@pytest.fixture
def campaign(real_fleet: RealFleetFactory) -> Iterator[Callable[[Script], Campaign]]:
    made: list[Campaign] = []

    def make(script: Script) -> Campaign:
        c = Campaign(real_fleet(channels=True, script=script))
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


def three_wave_script(cid: str) -> Script:
    sp = lambda **kw: sed_state(cid, **kw)  # noqa: E731
    fail = lambda n, k: turn(  # noqa: E731
        notes_cmd(cid, 0, k, "failed (transient)", f"attempt {k}: the test suite was red"),
        sp(wave_status="failed", failure_kind="transient", retry_count=k),
        commit_cmd("wave 0 (failed): the test suite was red"),
        phrase="WAVE FAILED",
    )
    return Script(
        {
            "verifier-s1": [
                rule(
                    kickoff("verifier-s1"),
                    turn(sp(verify_count=1), commit_cmd("wave verify: plan ok"), phrase="PLAN OK"),
                )
            ],
            "executor-w0-s2": [rule(kickoff("executor-w0-s2"), fail(0, 1))],
            "executor-w0-s3": [rule(kickoff("executor-w0-s3"), fail(0, 2))],
            "executor-w0-s4": [
                rule(
                    kickoff("executor-w0-s4"),
                    turn(
                        "printf a > a.txt",
                        sp(current_wave=1, wave_status="pending", failure_kind="", retry_count=0),
                        commit_cmd("wave 0: scaffold"),
                        phrase="WAVE COMPLETE",
                    ),
                )
            ],
            "executor-w1-s5": [
                rule(
                    kickoff("executor-w1-s5"),
                    turn(
                        notes_cmd(cid, 1, 1, "plan_undoable", "WAVE.md asks for a tool that does not exist"),
                        sp(wave_status="plan_undoable", failure_kind="undoable"),
                        commit_cmd("wave 1 (undoable): WAVE.md asks for a missing tool"),
                        phrase="PLAN UNDOABLE",
                    ),
                )
            ],
            "verifier-s6": [
                rule(
                    kickoff("verifier-s6"),
                    turn(
                        f"printf '%s\\n' 'Patched: use printf.'"
                        f" >> .wave/campaigns/{cid}/plan/waves/wave_1/WAVE.md",
                        sp(wave_status="pending", failure_kind="", retry_count=0, verify_count=2),
                        commit_cmd("wave verify: patched wave 1 to use printf"),
                        phrase="PLAN PATCHED",
                    ),
                )
            ],
            "executor-w1-s7": [
                rule(
                    kickoff("executor-w1-s7"),
                    turn(
                        "printf b > b.txt",
                        sp(current_wave=2, wave_status="pending"),
                        commit_cmd("wave 1: middle"),
                        phrase="WAVE COMPLETE",
                    ),
                )
            ],
            "executor-w2-s8": [
                rule(
                    kickoff("executor-w2-s8"),
                    question_turn(
                        cid,
                        "{wavelet}",
                        "c.txt as A) plain, B) json or C) yaml?",
                        "which format for c.txt",
                        2,
                    ),
                ),
                rule(
                    on_message(author="operator", contains="executor-w2-s8: B"),
                    turn(
                        "printf '{\"c\": 1}' > c.txt",
                        sp(current_wave=3, wave_status="all_complete", user_question=""),
                        commit_cmd("wave 2: finish"),
                        phrase="WAVE COMPLETE",
                    ),
                ),
            ],
        }
    )


def test_a_three_wave_campaign_retries_patches_asks_and_completes(
    campaign: Callable[[Script], Campaign],
) -> None:
    """PLAN OK; wave 0 fails twice then completes; wave 1 is undoable, the verifier patches it, it
    completes; wave 2 asks the operator, who answers with `fleet post`; the same session finishes."""
    cid = f"three-wave-demo-{disk.today()}"
    c = campaign(three_wave_script(cid))
    c.run()
    asked = c.wait_state(
        lambda s: s.wave_status == "awaiting_user" and s.row(2).get("Status") == "paused",
        "wave 2's user question, settled",
    )
    assert asked.current_wave == 2 and asked.user_question == "which format for c.txt"
    view = json.loads(c.fleet("status", "--json").stdout)
    att = view["attention"]
    assert att["question"] == "which format for c.txt" and att["session"] == "executor-w2-s8", view
    banner = c.fleet("status").stdout
    assert "USER ATTENTION NEEDED: which format for c.txt" in banner, banner
    assert f"fleet post {cid}/executor-w2-s8" in banner, banner
    # the question reached the operator as a blip of the session naming it
    asked_blips = [b for b in c.real.blips(f"{cid}/executor-w2-s8") if b.author == "executor-w2-s8"]
    assert [b.text for b in asked_blips] == ["operator: c.txt as A) plain, B) json or C) yaml?"]
    sid = c.real.session_id("executor-w2-s8", cid)

    posted = c.real.fleet("post", f"{cid}/executor-w2-s8", "executor-w2-s8: B")
    assert posted.returncode == 0, posted.stderr
    final = c.wait_state(
        lambda s: s.wave_status == "all_complete" and not s.active_session_id, "all_complete, settled"
    )
    assert final.current_wave == 3 and final.active_session_id is None and final.session_count == 8

    # the same session resumed with the answer in its own context
    assert c.real.session_id("executor-w2-s8", cid) == sid
    t = c.real.transcript("executor-w2-s8", cid)
    c.real.wait(lambda: any("executor-w2-s8: B" in b.text for b in [*t.delivered(), *t.hook_blocks()]),
                "the answer in the asking session's context")  # fmt: skip
    # eight fresh sessions, each kicked off once
    names = ["verifier-s1", "executor-w0-s2", "executor-w0-s3", "executor-w0-s4", "executor-w1-s5",
             "verifier-s6", "executor-w1-s7", "executor-w2-s8"]  # fmt: skip
    assert len({c.real.session_id(n, cid) for n in names}) == 8

    subjects = log(c.root)
    assert subjects == [
        "the plan",
        f"wave plan: {cid}",
        "wave verify: plan ok",
        "wave 0 (failed): the test suite was red",
        "wave 0 (failed): the test suite was red",
        "wave 0: scaffold",
        "wave 1 (undoable): WAVE.md asks for a missing tool",
        "wave verify: patched wave 1 to use printf",
        "wave 1: middle",
        "wave 2 (paused): user question",
        "wave 2: finish",
    ], subjects
    # STATE.md as each outcome committed it
    seen = [state_at(c.root, f"HEAD~{n}", cid) for n in range(8, -1, -1)]
    got = [(s.current_wave, s.wave_status, s.failure_kind, s.retry_count) for s in seen]
    assert got == [
        (0, "pending", "", 0),
        (0, "failed", "transient", 1),
        (0, "failed", "transient", 2),
        (1, "pending", "", 0),
        (1, "plan_undoable", "undoable", 0),
        (1, "pending", "", 0),
        (2, "pending", "", 0),
        (2, "awaiting_user", "", 0),
        (3, "all_complete", "", 0),
    ], got
    assert [s.verify_count for s in seen][-1] == 2
    notes0 = (c.root / f".wave/campaigns/{cid}/plan/waves/wave_0/NOTES.md").read_text()
    assert notes0.count("## Attempt ") == 2 and "## Attempt 2 — failed (transient)" in notes0
    notes1 = c.fleet("notes", "1").stdout
    assert "## Attempt 1 — plan_undoable" in notes1
    assert "Patched: use printf." in (c.root / f".wave/campaigns/{cid}/plan/waves/wave_1/WAVE.md").read_text()
    rows = {r["wave"]: r for r in json.loads(c.fleet("status", "--json").stdout)["rows"]}
    assert [rows[n]["status"] for n in (0, 1, 2)] == ["complete"] * 3, rows
    assert rows[2]["session"] == "executor-w2-s8"
    assert (c.root / "c.txt").read_text() == '{"c": 1}'
    assert os.path.exists(c.root / f".wave/campaigns/{cid}/.gitignore")
