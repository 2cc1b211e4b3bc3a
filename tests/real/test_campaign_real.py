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
    HOLD,
    bash,
    commit_cmd,
    git,
    init_repo,
    log,
    notes_cmd,
    question_turn,
    sed_state,
    state_at,
    turn,
)
from realclaude import RealFleet
from scripted_model import Script, on_message, rule, steps

from fleet import procs
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
            found = self.real.wait(ok, what, timeout=timeout)
            assert found is not None
            return found
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
    def sp(**kw: Any) -> str:
        return sed_state(cid, **kw)

    def fail(n: int, k: int) -> Any:
        return turn(
            notes_cmd(cid, n, k, "failed (transient)", f"attempt {k}: the test suite was red"),
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
                        # it also writes the loop's fields (an old protocol did): overruled
                        sp(
                            current_wave=1,
                            wave_status="pending",
                            failure_kind="",
                            retry_count=0,
                            active_session_id=None,
                            active_session_kind="",
                            loop_state="idle",
                        ),
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
    detached = c.fleet("run", "--detach", "--layout", c.layout)  # the loop in its own tmux window
    assert detached.returncode == 0 and "campaign-loop" in detached.stdout, detached.stderr
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

    # the loop's last bookkeeping lands in a commit of its own after the state says all_complete
    done = f"campaign {cid}: all waves complete"
    c.real.wait(lambda: log(c.root)[-1] == done, "the loop's last commit")
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
        done,
    ], subjects
    # STATE.md as each outcome committed it (HEAD is the loop's last bookkeeping)
    seen = [state_at(c.root, f"HEAD~{n}", cid) for n in range(9, 0, -1)]
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
    windows = c.real.srv.cmd("list-windows", "-a", "-F", "#{window_name}").stdout
    assert "campaign-loop" in windows, windows  # tmux owns the loop's lifetime
    stopped = c.fleet("stop")
    assert stopped.returncode == 0 and c.state().loop_state == "idle", stopped.stderr


ONE_WAVE = "# One Wave Demo\n\nOne file.\n\n## Scaffold\nCreate a.txt.\n"


class OneWave(Campaign):
    """A one-wave campaign whose initial verifier already ran (seeded), for the fault tests."""

    def __init__(self, real: RealFleet, **seed: Any) -> None:
        self.real = real
        self.root = real.project
        init_repo(self.root, ONE_WAVE)
        done = real.fleet(
            "campaign", "plan", str(self.root / "PLAN.md"), "--by-headings", "--repo", str(self.root)
        )
        assert done.returncode == 0, done.stderr
        self.cid = f"one-wave-demo-{disk.today()}"
        c = disk.Campaign(self.root, self.cid)
        s = c.read()
        for k, v in {"verify_count": 1, **seed}.items():
            setattr(s, k, v)
        c.write(s)
        git(self.root, "commit", "-qam", "seed")
        (real.home / ".claude").mkdir(exist_ok=True)
        allow = {"permissions": {"allow": ["Bash", "Write", "Edit", "Read"]}}
        (real.home / ".claude" / "settings.json").write_text(json.dumps(allow))
        self.layout = real.layout(["executor", "verifier"], defaults={"permission_mode": "acceptEdits"})
        self.procs = []

    def complete_turn(self) -> Any:
        return turn(
            "printf a > a.txt",
            sed_state(self.cid, current_wave=1, wave_status="all_complete", failure_kind="", retry_count=0),
            commit_cmd("wave 0: scaffold"),
            phrase="WAVE COMPLETE",
        )

    def busy(self, who: str) -> None:
        """Wait until ``who`` is inside its (long) Bash call."""
        self.real.wait(
            lambda: any(r.reply and r.reply.tool_uses for r in self.real.requests(who)), f"{who} busy"
        )


ONE_CID = "one-wave-demo-"


@pytest.fixture
def one_wave(real_fleet: RealFleetFactory) -> Iterator[Callable[..., OneWave]]:
    made: list[OneWave] = []

    def make(script: Script, **seed: Any) -> OneWave:
        c = OneWave(real_fleet(channels=True, script=script), **seed)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


def session_pids(cid: str, wavelet: str) -> list[int]:
    """The processes of this test's session on ``cid/wavelet``: its FLEET_WAVELET, and this test's
    FLEET_HOME (a parallel worker runs the same campaign, so the same FLEET_WAVELET, in its own)."""
    home = set(procs.with_env("FLEET_HOME", os.environ["FLEET_HOME"]))
    return [p for p in procs.with_env("FLEET_WAVELET", f"{cid}/{wavelet}") if p in home]


def test_an_executor_killed_mid_wave_is_a_crash_commit_and_a_retry(one_wave: Callable[..., OneWave]) -> None:
    script = Script()
    c = one_wave(script)
    script.add("executor-w0-s1", rule(kickoff("executor-w0-s1"), turn("printf partial > a.txt", HOLD,
                                                                       phrase="never")))  # fmt: skip
    script.add("executor-w0-s2", rule(kickoff("executor-w0-s2"), c.complete_turn()))
    c.run()
    c.busy("executor-w0-s1")
    c.real.wait(lambda: (c.root / "a.txt").exists(), "the partial work on disk")
    assert len(session_pids(c.cid, "executor-w0-s1")) > 1  # Claude Code and its Bash
    os.kill(c.real.pane_pid("executor-w0-s1"), signal.SIGKILL)
    final = c.wait_state(
        lambda s: s.wave_status == "all_complete" and not s.active_session_id, "the retry done"
    )
    assert final.session_count == 2
    done = f"campaign {c.cid}: all waves complete"  # the loop's last bookkeeping, after all_complete
    c.real.wait(lambda: log(c.root)[-1] == done, "the loop's last commit")
    subjects = log(c.root)
    assert subjects[-3:-1] == ["wave 0 (crashed): session ended without state update", "wave 0: scaffold"], (
        subjects
    )
    crashed = state_at(c.root, "HEAD~2", c.cid)
    assert (crashed.wave_status, crashed.failure_kind, crashed.retry_count) == ("failed", "crash", 1)
    assert git(c.root, "show", "HEAD~2:a.txt") == "partial"  # the dirty tree, committed by the loop
    # what the killed session left running (its Bash command's own process group) was ended too
    left = session_pids(c.cid, "executor-w0-s1")
    c.real.wait(lambda: not [p for p in left if procs.pid_alive(p)], "the killed session's Bash ended")
    notes = c.fleet("notes", "0").stdout
    assert "## Attempt 1 — crashed" in notes and "executor-w0-s1" in notes
    # the retry was a fresh session, told it is attempt 2
    t = c.real.transcript("executor-w0-s2", c.cid)
    c.real.wait(lambda: any("attempt 2" in b.text for b in [*t.delivered(), *t.hook_blocks()]), "the kickoff")


def test_a_loop_killed_mid_wave_resumes_exactly_when_started_again(one_wave: Callable[..., OneWave]) -> None:
    script = Script()
    c = one_wave(script)
    go = c.real.tmp / "go"
    script.add(
        "executor-w0-s1",
        rule(
            kickoff("executor-w0-s1"),
            steps(bash(f"while [ ! -e {go} ]; do sleep 0.1; done"), c.complete_turn()),
        ),
    )
    loop = c.run()
    c.busy("executor-w0-s1")
    loop.kill()  # kill -9: no clean-up of any kind
    loop.wait()
    running = c.state()
    assert running.active_session_kind == "executor" and running.wave_status == "running"
    go.touch()  # the session finishes its turn while no loop runs
    settles = c.root / f".wave/campaigns/{c.cid}/.loop/settles.log"
    c.real.wait(
        lambda: settles.exists() and str(running.active_session_id) in settles.read_text(), "the Stop hook"
    )
    assert c.state().active_session_id == running.active_session_id  # nobody handled it yet
    c.run()
    final = c.wait_state(lambda s: s.wave_status == "all_complete" and not s.active_session_id, "resumed")
    assert final.session_count == 1, "the wave was not run twice"
    done = f"campaign {c.cid}: all waves complete"  # the loop's last bookkeeping, after all_complete
    c.real.wait(lambda: log(c.root)[-1] == done, "the loop's last commit")
    subjects = log(c.root)
    assert subjects[-2] == "wave 0: scaffold" and "crashed" not in " ".join(subjects)


def test_interrupt_cancels_and_nothing_spawns_until_clear(one_wave: Callable[..., OneWave]) -> None:
    script = Script()
    c = one_wave(script)
    script.add("executor-w0-s1", rule(kickoff("executor-w0-s1"), turn(HOLD, phrase="never")))
    script.add("executor-w0-s2", rule(kickoff("executor-w0-s2"), c.complete_turn()))
    c.run()
    c.busy("executor-w0-s1")
    # its first turn carried the kickoff (posted before the session started, not raced by the
    # fork's system blip arriving alone as a turn of its own)
    first = next(r for r in c.real.requests("executor-w0-s1") if r.kind == "turn")
    assert "executor-w0-s1: you are the executor" in json.dumps(first.messages)
    pane = c.real.pane("executor-w0-s1")
    done = c.fleet("interrupt")
    assert done.returncode == 0 and "wave 0 cancelled (session executor-w0-s1 ended)" in done.stdout, done
    s = c.state()
    assert (s.wave_status, s.failure_kind, s.loop_state, s.active_session_id) == (
        "failed",
        "cancelled",
        "idle",
        None,
    )
    # it was the busy session that was cancelled (not a retry spawned after it settled on its own)
    assert s.session_count == 1 and s.row(0).get("Session") == "executor-w0-s1", s
    panes = c.real.srv.cmd("list-panes", "-a", "-F", "#{pane_id}").stdout
    assert pane not in panes, "the interrupted session was ended"
    assert c.fleet("resume").returncode == 0
    s = c.state()
    assert s.loop_state == "armed" and s.session_count == 1 and s.active_session_id is None
    status = json.loads(c.fleet("status", "--json").stdout)
    assert status["rows"][0]["status"] == "cancelled"
    cleared = c.fleet("clear")
    assert cleared.returncode == 0, cleared.stderr
    final = c.wait_state(
        lambda s: s.wave_status == "all_complete" and not s.active_session_id, "done after clear"
    )
    assert final.session_count == 2


def test_a_third_verifier_crash_asks_the_user(one_wave: Callable[..., OneWave]) -> None:
    script = Script()
    c = one_wave(script, wave_status="plan_undoable", failure_kind="undoable", verify_count=2)
    script.add("verifier-s1", rule(kickoff("verifier-s1"), turn(HOLD, phrase="never")))
    c.run()
    c.busy("verifier-s1")
    os.kill(c.real.pane_pid("verifier-s1"), signal.SIGKILL)
    s = c.wait_state(lambda s: s.wave_status == "awaiting_user" and not s.active_session_id, "the escalation")
    assert s.verify_count == 3 and s.user_question.startswith("wave 0: the verifier session ended")
    assert s.session_count == 1
    banner = c.fleet("status").stdout
    assert "USER ATTENTION NEEDED: wave 0: the verifier session ended" in banner, banner
    # resumed, the loop still spawns nothing: the question is open, and the cap holds after `dismiss`
    assert c.fleet("resume").returncode == 0 and c.state().session_count == 1
