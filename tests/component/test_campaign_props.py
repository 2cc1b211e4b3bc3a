"""Properties of the campaign state machine and of STATE.md under hand edits (hypothesis).

- A stateful machine drives the real :class:`fleet.campaign.loop.Loop` (real files, real git, its
  owned.json and settle handler) with stand-in sessions through random settles (complete, failed,
  undoable, crashed, verified, a question), operator commands (pause, resume, interrupt, clear,
  dismiss), restarts, and kills in the middle of starting a session; after every step: STATE.md
  parses (so its rows agree with the cursor), the cursor is within bounds, no session was started
  twice, at most one runs and it is the one the loop calls active, every start was a legal decision.
- Random edits of a valid STATE.md: each is either refused naming a line (StateError, exit 2) or
  parses into a consistent state that renders and parses back the same; never another exception.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from campaignhelp import init_repo
from hypothesis import HealthCheck, settings
from hypothesis import strategies as hs
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fleet import errors
from fleet.campaign import disk, machine
from fleet.campaign import loop as lp
from fleet.campaign import state as st

WAVES = "# Prop Plan\n\nTwo waves.\n\n## One\nfirst\n\n## Two\nsecond\n"
_TEMPLATE: list[Path] = []


def template() -> Path:
    """A planned two-wave campaign in a git repository, made once and copied for each example."""
    if not _TEMPLATE:
        root = Path(tempfile.mkdtemp(prefix="fleet-campaign-props-")) / "repo"
        init_repo(root, WAVES)
        done = subprocess.run([sys.executable, "-m", "fleet", "campaign", "plan", "PLAN.md", "--by-headings"],
                              cwd=root, capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr
        _TEMPLATE.append(root)
    return _TEMPLATE[0]


class Killed(BaseException):
    """The loop process dying (kill -9) in the middle of starting a session."""


class Sessions(lp.Launcher):
    """Stand-in sessions: a start is recorded once per participant; one started before the loop was
    killed is adopted, as the real launcher adopts a pane that runs it."""

    def __init__(self) -> None:
        self.starts: Counter[str] = Counter()
        self.live: set[str] = set()
        self.kill_next: str = ""  # "before" / "after" the pane starts, or ""
        self.illegal: list[str] = []

    def launch(
        self, c: disk.Campaign, s: st.State, kind: str, layout_ref: str, *, kickoff: str = ""
    ) -> lp.Started:
        name = lp.participant_name(kind, s)
        if s.failure_kind == "cancelled" or s.wave_status in ("awaiting_user", "all_complete", "complete"):
            self.illegal.append(f"{name} spawned on {s.wave_status}/{s.failure_kind}")
        if kind == "executor" and (s.wave_status != "running" or not 0 <= s.current_wave < s.total_waves):
            self.illegal.append(f"{name} spawned for wave {s.current_wave} {s.wave_status}")
        when, self.kill_next = self.kill_next, ""
        if when == "before":
            raise Killed
        adopted = name in self.live
        if not adopted:
            self.starts[name] += 1
            self.live.add(name)
        if when == "after":
            raise Killed
        return lp.Started(f"sid-{name}", name, f"{c.id}/{name}", "", adopted=adopted)

    def end(self, o: lp.Owned) -> None:
        self.live.discard(o.participant)

    def tell(self, c: disk.Campaign, text: str) -> None:
        pass

    def last_phrase(self, transcript: str | None, o: lp.Owned) -> str:
        return ""


class CampaignMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="fleet-campaign-machine-"))
        root = self.tmp / "repo"
        shutil.copytree(template(), root, symlinks=True)
        self.c = disk.Campaign(root, f"prop-plan-{disk.today()}")
        assert self.c.state_file.exists(), list(root.rglob("*"))
        self.sessions = Sessions()
        self.loop = lp.Loop(self.c, self.sessions)
        self.loop.start(arm=True)
        self.n = 0
        self.step()

    def teardown(self) -> None:
        self.loop.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------ helpers

    def step(self) -> None:
        try:
            self.loop.step()
        except Killed:
            self.restart()

    def restart(self) -> None:
        """The loop process dies and is started again: a new Loop over the same files, doing what
        ``run`` does before it serves."""
        self.loop.close()
        self.loop = lp.Loop(self.c, self.sessions)
        self.loop.start(arm=False)
        self.loop.catch_up()
        self.loop.step()

    def active(self, kind: str | None = None) -> str | None:
        _s, o = lp.read_state(self.c)
        if not o.active_session_id or (kind and o.active_session_kind != kind):
            return None
        return o.active_session_id

    def agent(self, **cursor: object) -> None:
        """The active session's end: it edits STATE.md, commits, and its turn ends."""
        sid = self.active()
        s = self.c.read()
        wave = s.current_wave
        for k, v in cursor.items():
            if k == "row":
                s.row(wave).set("Status", str(v))
            else:
                setattr(s, k, v)
        self.c.write(s)
        self.n += 1
        (self.c.root / "work.txt").write_text(f"{self.n}\n")
        disk.commit_all(self.c.root, f"session work {self.n}")
        self.hook(sid)
        try:
            self.loop.command("poke")
        except Killed:
            self.restart()

    def hook(self, sid: str | None) -> None:
        """What the Stop hook appends (``report_settle`` without its poke: this loop serves no socket)."""
        with (self.c.loop_dir / "settles.log").open("a") as f:
            f.write(json.dumps({"session_id": sid or "", "transcript_path": ""}) + "\n")

    def op(self, name: str) -> None:
        try:
            self.loop.command(name)
        except errors.UsageError:
            pass  # a refusal (nothing to clear or dismiss) is a legal answer
        except Killed:
            self.restart()

    # ------------------------------------------------------------ sessions ending

    @precondition(lambda self: self.active("executor"))
    @rule()
    def wave_complete(self) -> None:
        s = self.c.read()
        last = s.current_wave + 1 >= s.total_waves
        self.agent(row="complete", current_wave=s.current_wave + 1, failure_kind="", retry_count=0,
                   wave_status="all_complete" if last else "pending")  # fmt: skip

    @precondition(lambda self: self.active("executor"))
    @rule()
    def wave_failed(self) -> None:
        s = self.c.read()
        self.agent(
            row="failed", wave_status="failed", failure_kind="transient", retry_count=s.retry_count + 1
        )

    @precondition(lambda self: self.active("executor"))
    @rule()
    def wave_undoable(self) -> None:
        self.agent(row="undoable", wave_status="plan_undoable", failure_kind="undoable")

    @precondition(lambda self: self.active("verifier"))
    @rule()
    def plan_ok(self) -> None:
        s = self.c.read()
        self.agent(verify_count=s.verify_count + 1, wave_status="pending", failure_kind="", retry_count=0)

    @precondition(lambda self: self.active())
    @rule()
    def question(self) -> None:
        self.agent(wave_status="awaiting_user", user_question="which one?")

    @precondition(lambda self: self.active())
    @rule(pane_exited=hs.booleans())
    def crash(self, pane_exited: bool) -> None:
        sid = self.active()
        if pane_exited:
            self.loop.settle(sid or "", pane_exited=True)
            self.step()
        else:
            self.hook(sid)
            self.op("poke")

    # ------------------------------------------------------------ the operator, restarts, kills

    @rule(name=hs.sampled_from(["pause", "resume", "interrupt", "clear", "dismiss", "next"]))
    def command(self, name: str) -> None:
        if name == "next":
            try:
                self.loop.command("next")
            except errors.Conflict:
                pass  # nothing to spawn: a legal answer
            except Killed:
                self.restart()
            return
        self.op(name)

    @rule()
    def restart_loop(self) -> None:
        self.restart()

    @rule(when=hs.sampled_from(["before", "after"]))
    def kill_while_starting(self, when: str) -> None:
        self.sessions.kill_next = when
        self.op("resume")
        self.sessions.kill_next = ""

    # ------------------------------------------------------------ invariants

    @invariant()
    def consistent(self) -> None:
        s, o = lp.read_state(self.c)  # parses: rows agree with the cursor, failure_kind with status
        st.check(s)
        assert 0 <= s.current_wave <= s.total_waves
        assert not self.sessions.illegal, self.sessions.illegal
        assert all(n == 1 for n in self.sessions.starts.values()), self.sessions.starts  # nothing run twice
        assert s.session_count == sum(self.sessions.starts.values()) + (
            1 if o.launching and o.launching.get("participant") not in self.sessions.starts else 0
        ), (s.session_count, self.sessions.starts, o.launching)
        if o.active_session_id:
            assert self.sessions.live == {o.participant}, (self.sessions.live, o.participant)
        elif not o.launching:
            assert not self.sessions.live, self.sessions.live
        if o.cancelled:
            assert s.failure_kind == "cancelled" and machine.decide(s).spawn is None


CampaignMachine.TestCase.settings = settings(
    max_examples=15, stateful_step_count=16, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)  # fmt: skip
test_the_campaign_state_machine = CampaignMachine.TestCase


# ---------------------------------------------------------------- STATE.md hand edits
