"""The resident with the real Claude Code over the scripted model: seat, one mind, failure, revival.

Each test makes a git repository (the wave's origin), runs ``fleet resident …`` as a user would
(a subprocess, in the repository), and asserts from the store, tmux, the session's own transcript
and the scripted model's request log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from realclaude import STARTUP, RealFleet
from scripted_model import (
    Fail,
    Held,
    Request,
    Script,
    Slow,
    call,
    on_channel,
    on_message,
    on_prompt,
    post,
    rule,
    say,
    steps,
    surface,
)

from fleet.client import Client
from fleet.paths import Paths
from fleet.resident.keeper import write_state

RealFleetFactory = Callable[..., RealFleet]
BEAT = 6
"""Seconds of quiet before a heartbeat in these tests (GOAL.md ``heartbeat_every``)."""


def git_repo(real: RealFleet) -> Path:
    """The project folder as a git repository with one commit; its worktree trusted in Claude's home."""
    repo = real.project
    commit = ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "init"]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], commit):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    config = json.loads((real.home / ".claude.json").read_text())
    config["projects"][str(repo.parent / f"{repo.name}.w")] = {"hasTrustDialogAccepted": True}
    (real.home / ".claude.json").write_text(json.dumps(config))
    return repo


def fleet_in(
    real: RealFleet, cwd: Path, *args: str, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], env=real.env, cwd=cwd, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def start(real: RealFleet, repo: Path, layout: str, *extra: str) -> dict[str, Any]:
    done = fleet_in(
        real, repo, "resident", "start", "w", "--agent", layout, "--wait", str(STARTUP), "--json", *extra
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def status(real: RealFleet, repo: Path) -> dict[str, Any]:
    done = fleet_in(real, repo, "resident", "status", "w", "--json")
    assert done.returncode == 0, done.stderr
    got: dict[str, Any] = json.loads(done.stdout)
    return got


def test_start_seats_one_mind_refuses_a_second_and_force_takes_over(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """start: a Claude Code session in <repo>.w, seated in the store; it hears the operator; a
    second start is refused naming it; --force takes over; stop leaves no seat."""
    script = Script(
        {"resident": [rule(on_message(author="operator"), post("{wavelet}", "operator: on it."))]}
    )
    real = real_fleet(channels=True, script=script)
    repo = git_repo(real)
    (repo / "wave" / "w").mkdir(parents=True)
    (repo / "wave" / "w" / "GOAL.md").write_text("---\nheartbeat: off\n---\nShip the parser.\n")
    (repo / "wave" / "w" / "MEMORY.md").write_text("The parser lives in src/parse.py.\n")
    layout = real.layout(["resident"])
    report = start(real, repo, layout)
    worktree = repo.parent / "project.w"
    assert report["worktree"] == str(worktree) and (worktree / ".git").is_file()
    seat = operator.seat("w")
    assert seat is not None and seat.closed_at is None
    assert (seat.session_id, seat.pid, seat.cwd) == (report["session_id"], report["pid"], str(worktree))
    assert report["pid"] == real.pane_pid("resident")
    st = status(real, repo)
    assert st["state"] == "idle" and st["session_id"] == report["session_id"] and st["turns"] == 0, st

    operator.post(operator.resolve("w/main").id, "resident: what is the plan?")
    real.wait(lambda: any(b.author == "resident" for b in real.blips("w/main")), "the resident's answer")
    (req,) = [r for r in real.requests("resident") if r.reply and r.reply.tool_uses]
    system = json.dumps((req.body or {}).get("system"))
    assert "Ship the parser." in system and "src/parse.py" in system, "GOAL.md and MEMORY.md seed the mind"
    real.wait(lambda: status(real, repo)["turns"] >= 1, "a completed turn in status")

    def agree() -> bool:  # `fleet status` and `fleet resident status` say the same of the mind
        wave = json.loads(fleet_in(real, repo, "status", "w", "--json").stdout)["rows"]
        row = next(r for r in wave if r["participant"] == "resident")
        mind = status(real, repo)
        return bool(mind["agent"] == row["state"] and row["state"]["kind"] == "idle")

    real.wait(agree, "fleet status and fleet resident status agree: idle")

    again = fleet_in(real, repo, "resident", "start", "w", "--agent", layout)
    assert again.returncode == 1, again  # Conflict
    assert report["session_id"] in again.stderr and str(report["pid"]) in again.stderr, again.stderr
    assert "--force" in again.stderr and "Traceback" not in again.stderr
    assert operator.seat("w") == seat, "a refused start changed the seat"

    old_pid = report["pid"]
    taken = start(real, repo, layout, "--force")
    assert taken["closed"].startswith("took over") and taken["pid"] != old_pid
    real.wait(lambda: not _alive(old_pid), "the old resident's process gone")
    seat2 = operator.seat("w")
    assert seat2 is not None and seat2.pid == taken["pid"] and seat2.closed_at is None

    done = fleet_in(real, repo, "resident", "stop", "w", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["stopped"], done
    assert status(real, repo)["state"] == "none"
    closed = operator.seat("w")
    assert closed is not None and closed.closed_why == "stopped by the operator"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    from fleet.procs import zombie_status

    return zombie_status(pid) is None


def test_a_dead_seat_is_closed_at_the_next_start_which_resumes_the_same_session(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    real = real_fleet(
        channels=True, script=Script({"resident": [rule(on_message(author="operator"), say("ok"))]})
    )
    repo = git_repo(real)
    layout = real.layout(["resident"])
    report = start(real, repo, layout)
    operator.post(operator.resolve("w/main").id, "resident: hello")
    real.wait(lambda: status(real, repo)["turns"] >= 1, "a first turn (so the session is saved)")
    os.kill(report["pid"], signal.SIGKILL)
    real.wait(lambda: real.pane_dead("resident"), "the resident's pane dead")
    st = status(real, repo)
    assert st["state"] == "dead" and "supervise" in st["note"], st
    again = start(real, repo, layout)
    assert again["closed"].startswith("closed the dead seat") and str(report["pid"]) in again["closed"]
    assert again["session_id"] == report["session_id"] and again["resumed"], again
    assert status(real, repo)["state"] == "idle"


class Supervise:
    """``fleet supervise w`` as a user runs it (a subprocess in the repository), stopped at the end."""

    def __init__(self, real: RealFleet, repo: Path, *args: str) -> None:
        self.out = real.tmp / "supervise.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fleet", "supervise", "w", "--json", *args],
            env=real.env, cwd=repo, stdout=self.out.open("w"), stderr=subprocess.STDOUT,
        )  # fmt: skip

    def events(self) -> list[dict[str, Any]]:
        lines = self.out.read_text().splitlines() if self.out.exists() else []
        return [json.loads(ln) for ln in lines if ln.startswith("{")]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def system_blips(real: RealFleet, prefix: str) -> list[str]:
    return [b.text for b in real.blips("w/main") if b.kind == "system" and b.text.startswith(prefix)]


def test_the_resident_dispatches_a_worker_is_nudged_while_it_runs_and_reports_back(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """The operator asks for a job → the resident forks and spawns a worker → a heartbeat while it
    runs (one) → the worker surfaces → the resident is woken and reports; then, nothing in flight,
    no heartbeat and zero model requests over a quiet period."""
    real = real_fleet(channels=True)
    layout = real.layout(["resident", "worker"])
    real.script.add(
        "resident",
        rule(
            on_message(author="operator", contains="build"),
            steps(
                call(
                    "wavelet_fork", {"wavelet": "w/main", "name": "job", "with": ["worker"], "spawn": layout}
                ),
                post("w/job", "worker: build the widget"),
            ),
        ),
        rule(on_prompt(contains="heartbeat"), post("w/job", "worker: wrap up and surface")),
        rule(on_channel(blip_kind="surface"), post("w/main", "operator: the widget is built")),
    )
    real.script.add(
        "worker",
        rule(on_message(author="resident", contains="build the widget"), say("working on it")),
        rule(on_message(author="resident", contains="wrap up"), surface("w/job", "widget built")),
    )
    repo = git_repo(real)
    goal_dir = repo / "wave" / "w"
    goal_dir.mkdir(parents=True)
    (goal_dir / "GOAL.md").write_text(f"---\nheartbeat_every: {BEAT}s\n---\nBuild what the operator asks.\n")
    start(real, repo, layout)
    sup = Supervise(real, repo)
    try:
        operator.post(operator.resolve("w/main").id, "resident: build the widget, please")
        real.wait(
            lambda: any(b.text == "operator: the widget is built" for b in real.blips("w/main")),
            "the resident's report to the operator",
            timeout=180,
        )
        job = real.blips("w/job")
        assert [(b.author, b.text) for b in job if b.kind != "system"] == [
            ("resident", "worker: build the widget"), ("resident", "worker: wrap up and surface"),
        ]  # fmt: skip
        (surfaced,) = [b for b in real.blips("w/main") if b.kind == "surface"]
        assert (surfaced.author, surfaced.text) == ("worker", "widget built")
        beats = system_blips(real, "resident: heartbeat:")
        assert len(beats) == 1 and "w/job: running" in beats[0], beats
        (nudge,) = [r for r in real.requests("resident") if any(e.kind == "prompt" for e in r.events)]
        assert any("heartbeat" in e.text and "w/job: running" in e.text for e in nudge.events)
        worker_t = real.transcript("worker")
        wanted = ["worker: build the widget", "worker: wrap up and surface"]
        real.wait(  # (Claude Code writes its transcript behind the session: the lines may lag)
            lambda: [c.text for c in worker_t.delivered() if c.author == "resident"] == wanted,
            "the resident's two blips in the worker's transcript",
        )
        st = status(real, repo)
        assert st["in_flight"] == 0 and st["workers"][0]["status"] == "done", st
        real.wait(lambda: real.transcript("resident").settled(), "the resident's report turn ended")
        before = len(real.model.log)
        time.sleep(3 * BEAT)  # a quiet period of three heartbeat intervals: absence can only be waited out
        assert real.model.log[before:] == [], "a model request while nothing was in flight"
        assert len(system_blips(real, "resident: heartbeat:")) == 1
    finally:
        sup.stop()


def test_blips_during_a_turn_are_taken_together_and_a_bad_spawn_is_refused_to_the_mind(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """Two blips that arrive while the mind is turning reach it in one wake at the turn's end (what
    Claude Code does with queued input); a fork with an unknown layout, or with a worker whose
    worktree cannot be made (``wave``: the path the resident's own worktree holds), returns the
    error to the mind and forks nothing."""
    # The thinking turn lasts until both blips are in Claude Code's queue (a fixed 6 s turn raced a
    # loaded machine: `fleet resident status` saying "turning" and the two posts took longer than
    # the turn, the blips came after its end, and each woke a turn of its own).
    go_on = threading.Event()
    real = real_fleet(channels=True)
    shared = real.layout(["worker"], "shared", participants={"worker": {"worktree": "wave"}})
    real.script.add(
        "resident",
        rule(on_message(author="operator", contains="think"), Held(go_on, say("thought it through"))),
        rule(
            on_message(author="operator", contains="spawn"),
            call(
                "wavelet_fork", {"wavelet": "w/main", "name": "job", "with": ["worker"], "spawn": "no-such"}
            ),
        ),
        rule(
            on_message(author="operator", contains="shared tree"),
            call("wavelet_fork", {"wavelet": "w/main", "name": "job", "with": ["worker"], "spawn": shared}),
        ),
    )
    repo = git_repo(real)
    start(real, repo, real.layout(["resident"]))
    main = operator.resolve("w/main").id
    operator.post(main, "resident: think about it")
    real.wait(lambda: status(real, repo)["state"] == "turning", "the resident turning")
    one, two = operator.post(main, "resident: one more thing"), operator.post(main, "resident: and another")
    t = real.transcript("resident")
    real.wait(lambda: {one.id, two.id} <= {c.blip_id for c in t.enqueued()}, "both queued during the turn")
    go_on.set()

    def carried(r: Request) -> set[str]:
        return {e.blip_id for e in r.channel_events()}

    real.wait(
        lambda: any({one.id, two.id} <= carried(r) for r in real.requests("resident")), "one wake for both"
    )
    assert [r for r in real.requests("resident") if carried(r) & {one.id, two.id}] == [
        r for r in real.requests("resident") if {one.id, two.id} <= carried(r)
    ], "the two blips came in separate wakes"
    operator.post(main, "resident: spawn a worker")
    refused = real.wait(lambda: [x for x in t.tool_results() if x.is_error], "the refused fork's result")
    assert "cannot spawn with layout 'no-such'" in refused[0].text and "nothing was forked" in refused[0].text
    assert [wl.name for wl in operator.get_wave("w").wavelets] == ["main"]
    operator.post(main, "resident: fork a worker in the shared tree")  # its worktree cannot be made
    refused = real.wait(lambda: [x for x in t.tool_results() if x.is_error][1:], "the second refusal")
    assert f"{repo.parent / 'project.w'} is a worktree of {repo} but not on branch fleet/w" in refused[0].text
    assert refused[0].text.endswith("nothing was forked"), refused[0].text
    assert [wl.name for wl in operator.get_wave("w").wavelets] == ["main"]
    assert not [p for p in repo.parent.iterdir() if p.name.startswith("project.w.")]


def test_a_cron_due_while_idle_opens_one_turn_and_one_25_hours_overdue_opens_none(
    real_fleet: RealFleetFactory, operator: Client, fleet_env: Paths
) -> None:
    real = real_fleet(channels=True)
    real.script.add("resident", rule(on_prompt(contains="cron due"), say("dispatching")))
    repo = git_repo(real)
    now = datetime.now(UTC)
    fresh, stale = now - timedelta(minutes=1), now - timedelta(hours=25)

    def at(t: datetime) -> str:
        return f"{t.minute} {t.hour} {t.day} {t.month} *"

    (repo / "wave" / "w").mkdir(parents=True)
    (repo / "wave" / "w" / "GOAL.md").write_text(
        f"---\nheartbeat: off\ncrons:\n  - flow: fresh\n    schedule: {at(fresh)}\n"
        f"  - flow: stale\n    schedule: {at(stale)}\n---\nKeep the crons.\n"
    )
    start(real, repo, real.layout(["resident"]))
    write_state(fleet_env, operator.get_wave("w").id, (now - timedelta(hours=26)).timestamp())
    sup = Supervise(real, repo)
    try:
        t = real.transcript("resident")
        real.wait(lambda: t.prompts(), "the cron's turn in the transcript")
        real.wait(lambda: system_blips(real, "resident: cron missed"), "the missed cron's system blip")
        real.wait(lambda: t.settled() and status(real, repo)["turns"] == 1, "the cron's turn ended")
        assert t.prompts() == ["[fleet] cron due: fresh — dispatch it"]
        (due,) = system_blips(real, "resident: cron due")
        assert due.startswith("resident: cron due: fresh — dispatch it")
        (missed,) = system_blips(real, "resident: cron missed")
        assert "stale" in missed and "more than 24 h ago; not replayed" in missed
        assert not [r for r in real.requests("resident") if r.contains("stale")]
        assert len(real.requests("resident")) == 1
    finally:
        sup.stop()


def test_failed_turns_and_a_killed_mind_are_revived_resuming_the_same_session(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """Three scripted API failures → failed (its process ended), shown in status → revived on a
    short ladder, the same session; kill -9 → an operator blip revives it at once (the ladder's next
    rung is an hour) → the same session, which answers."""
    real = real_fleet(channels=True)
    real.script.add(
        "resident",
        rule(
            on_message(author="operator", contains="fail"),
            Fail(400, "invalid_request_error", "scripted failure"),
        ),
        rule(on_message(author="operator", contains="there?"), post("w/main", "operator: here, same mind.")),
    )
    repo = git_repo(real)
    (repo / "wave" / "w").mkdir(parents=True)
    (repo / "wave" / "w" / "GOAL.md").write_text("---\nheartbeat: off\n---\n")
    first = start(real, repo, real.layout(["resident"]))
    sid = first["session_id"]
    sup = Supervise(real, repo, "--ladder", "3s,1h")
    try:
        main = operator.resolve("w/main").id
        for n in (1, 2, 3):
            operator.post(main, f"resident: fail, please ({n})")
            real.wait(lambda n=n: status(real, repo)["failed_turns"] >= n, f"failed turn {n}")  # type: ignore[misc]
        real.wait(lambda: system_blips(real, "resident: failed:"), "the keeper's failure blip")
        # the keeper ended its process: the session's state is dead (or, its channel gone, unknown),
        # and the note says why
        real.wait(
            lambda: (
                (s := status(real, repo))["state"] in ("dead", "unknown", "failed")
                and "3 turns failed" in s["note"]
            ),
            "status: its turns failed",
        )
        real.wait(lambda: system_blips(real, "supervise: respawned resident"), "revived on the ladder")
        revived = real.wait(
            lambda: (s := status(real, repo))["state"] == "idle" and s, "the revived mind idle"
        )
        assert revived["session_id"] == sid and revived["pid"] != first["pid"]
        assert revived["pid"] == real.pane_pid("resident")
        os.kill(revived["pid"], signal.SIGKILL)
        real.wait(
            lambda: any(e["event"] == "died" for e in sup.events()[1:]) and real.pane_dead("resident"), "died"
        )
        operator.post(main, "resident: are you there?")
        real.wait(
            lambda: any(b.text == "operator: here, same mind." for b in real.blips("w/main")), "its answer"
        )
        again = status(real, repo)
        assert again["session_id"] == sid and again["pid"] not in (first["pid"], revived["pid"]), again
        respawns = [e for e in sup.events() if e["event"] == "respawned"]
        assert len(respawns) == 2 and "the operator mentioned it" in respawns[1]["text"], respawns
        (asked,) = [
            r
            for r in real.requests("resident")
            if r.contains("are you there?") and r.reply and r.reply.tool_uses
        ]
        assert asked.contains("fail, please (1)"), "the revived mind lacks its history: not the same session"
    finally:
        sup.stop()


def test_interrupt_ends_a_long_turn_and_its_text_becomes_the_next(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    real = real_fleet(channels=True)
    real.script.add(
        "resident",
        rule(on_message(author="operator", contains="ponder"), Slow(120, say("pondered")), times=1),
        rule(on_prompt(contains="summarise instead"), say("summary: nothing yet")),
    )
    repo = git_repo(real)
    start(real, repo, real.layout(["resident"]))
    operator.post(operator.resolve("w/main").id, "resident: ponder the universe")
    real.wait(lambda: status(real, repo)["state"] == "turning", "the long turn running")
    done = fleet_in(real, repo, "resident", "interrupt", "w", "summarise instead", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["interrupted"] is True and report["ended_by"] == "cooperative", report
    assert system_blips(real, "resident: the operator interrupted its turn (it ended at the Escape)")
    t = real.transcript("resident")
    real.wait(lambda: t.prompts() == ["summarise instead"], "the text as the next turn")
    real.wait(
        lambda: any(r.reply and r.reply.text == "summary: nothing yet" for r in real.requests("resident")),
        "it",
    )
    assert not [m for m in t.assistant_messages() if "pondered" in json.dumps(m)], "the long turn was not cut"


def test_a_turn_the_escape_does_not_end_is_force_closed_and_the_same_session_carries_on(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """A mind that does not end its turn at the Escape (its pane's input is off, so the key never
    reaches it) is force-closed at the deadline: its process group signalled, the same session
    resumed in the same pane, the seat on the new pid; the report and the system blip say the force
    stage ended it, and the text becomes the next turn of the same conversation."""
    real = real_fleet(channels=True)
    real.script.add(
        "resident",
        rule(on_message(author="operator", contains="ponder"), Slow(120, say("pondered")), times=1),
        rule(on_prompt(contains="carry on"), say("carried on")),
    )
    repo = git_repo(real)
    first = start(real, repo, real.layout(["resident"]))
    pane = real.pane("resident")
    operator.post(operator.resolve("w/main").id, "resident: ponder the universe")
    t = real.transcript("resident")

    def asked_and_written() -> bool:  # the model was asked, and the transcript shows the turn
        asked = any(r.contains("ponder the universe") for r in real.requests("resident"))
        return asked and any(
            ln.get("type") == "api-request" or ln.get("operation") == "dequeue" for ln in t.lines()
        )

    real.wait(asked_and_written, "the long turn running, in the transcript")
    real.srv.cmd("select-pane", "-d", "-t", pane)  # the pane ignores keys: the Escape never arrives
    done = fleet_in(real, repo, "resident", "interrupt", "w", "carry on", "--deadline", "2", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["ended_by"], report["session_id"]) == ("force", first["session_id"]), report
    assert report["pid"] not in (None, first["pid"]) and report["pid"] == real.pane_pid("resident")
    assert real.pane("resident") == pane, "not resumed in the same pane"
    real.wait(lambda: not _alive(first["pid"]), "the hung process gone")
    (said,) = system_blips(real, "resident: the operator interrupted its turn")
    assert "did not end within 2s of the Escape, so its process was ended" in said, said
    assert f"session {first['session_id']} resumed in pane {pane}" in said
    seat = operator.seat("w")
    assert seat is not None and seat.pid == report["pid"] and seat.session_id == first["session_id"]
    # the first request of the next turn: under load it is looked for late, and a later request of
    # the session (with the conversation, so with "carry on") may have come already
    asked = real.wait(
        lambda: [r for r in real.requests("resident") if r.contains("carry on")], "the next turn"
    )[0]
    assert asked.contains("ponder the universe"), "the resumed session lost its conversation"
    real.wait(lambda: t.settled() and status(real, repo)["state"] == "idle", "the next turn ended")
    assert t.prompts() == ["carry on"]
    assert not [m for m in t.assistant_messages() if "pondered" in json.dumps(m)]


def test_the_keepers_janitor_interrupts_a_turn_that_stalls_and_not_one_that_progresses(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """GOAL.md turn_stall 6s: a 10 s turn whose tool calls write to the transcript every ~3 s is
    left alone; a turn whose model answer never comes is interrupted by the janitor (a system blip
    saying so and which stage ended it), and the mind is idle again."""
    real = real_fleet(channels=True)
    real.script.add(
        "resident",
        rule(
            on_message(author="operator", contains="step through"),
            steps(
                call("wavelet_read", wavelet="w/main"),
                Slow(3, call("wavelet_read", wavelet="w/main")),
                Slow(3, call("wavelet_read", wavelet="w/main")),
                Slow(3, call("wavelet_read", wavelet="w/main")),
                say("stepped through"),
            ),
        ),
        rule(on_message(author="operator", contains="hang"), Slow(120, say("hung")), times=1),
    )
    repo = git_repo(real)
    (repo / "wave" / "w").mkdir(parents=True)
    (repo / "wave" / "w" / "GOAL.md").write_text("---\nheartbeat: off\nturn_stall: 6s\n---\n")
    start(real, repo, real.layout(["resident"]))
    sup = Supervise(real, repo)
    try:
        main = operator.resolve("w/main").id
        t = real.transcript("resident")
        operator.post(main, "resident: step through it")
        real.wait(lambda: t.settled() and status(real, repo)["turns"] == 1, "the progressing turn ended")
        assert any(r.reply and r.reply.text == "stepped through" for r in real.requests("resident"))
        assert system_blips(real, "resident: the keeper's janitor") == [], "the janitor cut a live turn"
        operator.post(main, "resident: hang on")
        (said,) = real.wait(lambda: system_blips(real, "resident: the keeper's janitor"), "the janitor")
        assert "no transcript progress for" in said and "turn_stall 6s" in said, said
        assert "interrupted its turn (it ended at the Escape)" in said, said
        real.wait(lambda: status(real, repo)["state"] == "idle", "the mind idle after the janitor")
        assert not [m for m in t.assistant_messages() if "hung" in json.dumps(m)]
        real.wait(lambda: [e for e in sup.events() if e["event"] == "janitor"], "supervise says so")
    finally:
        sup.stop()


def test_heartbeat_always_stops_at_its_daily_budget_and_a_memory_update_reaches_the_mind(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """The operator's `fleet memory update` (run outside the repository) rewrites MEMORY.md and
    wakes the mind to re-read it; then `heartbeat: always` with nothing in flight beats every quiet
    interval until the day's budget (2) is spent, says so once, and the model hears nothing more."""
    real = real_fleet(channels=True)
    real.script.add(
        "resident",
        rule(on_message(author="operator", contains="re-read"), say("noted the new memory")),
        rule(on_prompt(contains="heartbeat"), say("all quiet")),
    )
    repo = git_repo(real)
    (repo / "wave" / "w").mkdir(parents=True)
    (repo / "wave" / "w" / "GOAL.md").write_text(
        f"---\nheartbeat: always\nheartbeat_every: {BEAT}s\nheartbeat_budget: 2\n---\nKeep watch.\n"
    )
    (repo / "wave" / "w" / "MEMORY.md").write_text("Nothing learnt yet.\n")
    start(real, repo, real.layout(["resident"]))
    elsewhere = real.tmp / "elsewhere"
    elsewhere.mkdir()
    done = fleet_in(real, elsewhere, "memory", "update", "w", "The API lives in api/.")
    assert done.returncode == 0, done.stderr
    assert (repo / "wave" / "w" / "MEMORY.md").read_text() == "The API lives in api/.\n"
    t = real.transcript("resident")
    (note,) = real.wait(
        lambda: [b for b in t.delivered() if b.author == "operator" and "memory updated" in b.text],
        "the memory update in the mind's transcript",
    )
    assert "The API lives in api/." in note.text and "re-read wave/w/MEMORY.md" in note.text
    real.wait(lambda: t.settled() and status(real, repo)["turns"] == 1, "the re-read turn ended")
    assert len(real.requests("resident")) == 1

    sup = Supervise(real, repo)
    try:
        spent_said = "the spent budget said"
        real.wait(lambda: system_blips(real, "resident: heartbeat budget spent"), spent_said, timeout=120)
        real.wait(lambda: t.settled() and status(real, repo)["turns"] == 3, "the two heartbeat turns ended")
        before = len(real.model.log)
        time.sleep(3 * BEAT)  # three quiet intervals past the budget: absence can only be waited out
        assert real.model.log[before:] == [], "a model request after the day's heartbeat budget was spent"
        beats = system_blips(real, "resident: heartbeat: ")
        assert len(beats) == 2 and all("no workers in flight" in b for b in beats), beats
        (spent,) = system_blips(real, "resident: heartbeat budget spent")
        assert "2 of 2 today" in spent and "until 00:00 UTC" in spent
        assert (
            t.prompts()
            == ["[fleet] heartbeat: no workers in flight; check on them and dispatch the next step"] * 2
        )
        assert len(real.requests("resident")) == 3
    finally:
        sup.stop()


def test_the_minds_own_memory_write_from_its_bash_is_the_residents_and_wakes_no_one(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """The mind runs `fleet memory add` in its Bash tool: Claude Code gives that shell the session's
    CLAUDE_CODE_SESSION_ID, so the write is the resident's (a system blip naming no one), not the
    operator's (whose write wakes the mind to re-read): the one turn it ran in is the only one."""
    real = real_fleet(channels=True)
    remember = f"{sys.executable} -m fleet memory add w 'Deploys go through CI.'"
    real.script.add(
        "resident",
        rule(
            on_message(author="operator", contains="remember"),
            steps(call("Bash", command=remember, description="remember it"), say("remembered")),
        ),
        rule(on_message(contains="re-read"), say("re-read the memory")),  # (it must not come)
    )
    repo = git_repo(real)
    (repo / "wave" / "w").mkdir(parents=True)
    (repo / "wave" / "w" / "GOAL.md").write_text("Keep watch.\n")
    (repo / "wave" / "w" / "MEMORY.md").write_text("Nothing learnt yet.\n")
    (real.home / ".claude").mkdir(exist_ok=True)
    (real.home / ".claude" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Bash"]}}))
    # (Bash runs without asking: the user's permission rule, and a mode that needs no classifier)
    start(real, repo, real.layout(["resident"], defaults={"permission_mode": "acceptEdits"}))
    operator.post(operator.resolve("w/main").id, "resident: remember that deploys go through CI")
    t = real.transcript("resident")
    real.wait(lambda: t.settled() and status(real, repo)["turns"] == 1, "the remembering turn ended")
    assert "Deploys go through CI." in (repo / "wave" / "w" / "MEMORY.md").read_text()
    (said,) = system_blips(real, "resident: memory added: ")
    assert "Deploys go through CI." in said
    assert not [b for b in real.blips("w/main") if b.kind != "system" and "memory added" in b.text]
    time.sleep(2 * BEAT)  # a wake that should not come can only be waited out
    # (the resident's attention brings the root's provenance as a digest, with the operator's blip)
    digests = [b for b in t.delivered() if b.kind == "digest"]
    assert all(ln.startswith("system (system): ") for d in digests for ln in d.text.splitlines()), digests
    assert [b.author for b in t.delivered() if b.author != "system" and b.kind != "digest"] == ["operator"]
    assert not [b for b in t.delivered() if "memory added" in b.text]
    assert len(real.requests("resident")) == 2  # the operator's blip, then the Bash result: one turn


def test_a_worker_the_resident_dispatches_with_a_participant_worktree_works_in_its_own(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """A layout whose worker says worktree = "participant" (and no cwd): the resident's fork puts
    the worker in <repo>.w.worker on branch fleet/w/worker, made from the origin (not from the
    resident's own worktree); the worker's transcript records that cwd; the main checkout is
    untouched."""
    real = real_fleet(channels=True)
    layout = real.layout(["resident", "worker"], participants={"worker": {"worktree": "participant"}})
    text = Path(layout).read_text()
    Path(layout).write_text("\n".join(ln for ln in text.splitlines() if not ln.startswith("cwd =")) + "\n")
    real.script.add(
        "resident",
        rule(
            on_message(author="operator", contains="build"),
            steps(
                call(
                    "wavelet_fork", {"wavelet": "w/main", "name": "job", "with": ["worker"], "spawn": layout}
                ),
                post("w/job", "worker: build it"),
            ),
        ),
        rule(on_channel(blip_kind="surface"), say("the worker is done")),
    )
    real.script.add(
        "worker", rule(on_message(author="resident", contains="build it"), surface("w/job", "built"))
    )
    repo = git_repo(real)
    worktree = repo.parent / "project.w.worker"
    config = json.loads((real.home / ".claude.json").read_text())
    config["projects"][str(worktree)] = {"hasTrustDialogAccepted": True}
    (real.home / ".claude.json").write_text(json.dumps(config))

    def git(cwd: Path, *args: str) -> str:
        done = subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True)
        return done.stdout

    main_before = (git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD"))
    start(real, repo, layout)
    operator.post(operator.resolve("w/main").id, "resident: build the thing")
    real.wait(
        lambda: any(b.kind == "surface" and b.text == "built" for b in real.blips("w/main")),
        "the worker's surface",
        timeout=180,
    )
    assert git(worktree, "branch", "--show-current").strip() == "fleet/w/worker"
    listed = git(repo, "worktree", "list", "--porcelain")
    assert f"worktree {worktree}\n" in listed and f"worktree {repo.parent / 'project.w'}\n" in listed
    assert not (repo.parent / "project.w.w.worker").exists(), "branched off the resident's worktree"
    (rec,) = operator.sessions("w", "worker")
    assert rec.cwd == str(worktree)
    worker_t = real.transcript("worker")
    cwds = real.wait(lambda: {ln["cwd"] for ln in worker_t.lines() if "cwd" in ln}, "the worker's cwd")
    assert cwds == {str(worktree)}, cwds
    resident_cwds = {ln["cwd"] for ln in real.transcript("resident").lines() if "cwd" in ln}
    assert resident_cwds == {str(repo.parent / "project.w")}
    assert (git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD")) == main_before
    assert git(repo, "branch", "--show-current").strip() == "main"


def test_an_operator_blip_during_a_turn_steers_it_at_the_next_tool_boundary(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """Steer: an operator blip pushed while the mind runs a multi-step turn enters that same turn
    at its next tool boundary (the next request of the turn carries it, beside the tool result,
    before the turn's end in the transcript), and `fleet resident status` says it was steered. A
    blip during a turn that has no tool boundary left opens the next turn instead, and status says
    that."""
    real = real_fleet(channels=True)
    real.script.add(
        "resident",
        rule(
            on_message(author="operator", contains="count the blips"),
            steps(
                call("wavelet_read", wavelet="w/main"),
                Slow(5, call("wavelet_read", wavelet="w/main")),
                Slow(2, call("wavelet_read", wavelet="w/main")),
                say("counted"),
            ),
        ),
        rule(on_message(author="operator", contains="ponder"), Slow(8, say("pondered"))),
    )
    repo = git_repo(real)
    (repo / "wave" / "w").mkdir(parents=True)
    (repo / "wave" / "w" / "GOAL.md").write_text("---\nheartbeat: off\n---\n")
    start(real, repo, real.layout(["resident"]))
    main = operator.resolve("w/main").id
    t = real.transcript("resident")
    operator.post(main, "resident: count the blips")
    real.wait(lambda: len(t.tool_results()) >= 1, "the turn's first tool result")
    steer = operator.post(main, "resident: count only yours")
    (carrier,) = real.wait(
        lambda: [r for r in real.requests("resident") if r.contains("count only yours")], "the steer sent on"
    )
    kinds = {e.kind for e in carrier.events}
    assert "tool_result" in kinds, f"the steer did not ride the running turn: {carrier.events}"
    assert carrier.contains("A message arrived from fleet while you were working")
    assert steer.id in {e.blip_id for e in carrier.channel_events()}
    real.wait(lambda: t.settled() and status(real, repo)["turns"] == 1, "the steered turn ended")
    lines = t.lines()
    absorbed = next(
        i for i, ln in enumerate(lines)
        if ln.get("type") == "attachment" and steer.id in json.dumps(ln.get("attachment"))
    )  # fmt: skip
    ends = [i for i, ln in enumerate(lines) if ln.get("subtype") == "turn_duration"]
    assert ends == [ends[0]] and absorbed < ends[0], "the steer entered after its turn ended"
    st = status(real, repo)
    assert st["steer"]["last"]["blip_id"] == steer.id, st["steer"]
    assert st["steer"]["last"]["outcome"] == "steered" and st["steer"]["last"]["reached_turn"] is True
    plain = fleet_in(real, repo, "resident", "status", "w")
    assert "last steer" in plain.stdout and "reached the running turn" in plain.stdout, plain.stdout

    operator.post(main, "resident: ponder this")
    real.wait(lambda: status(real, repo)["state"] == "turning", "the one-request turn running")
    late = operator.post(main, "resident: and that")
    (after,) = real.wait(
        lambda: [r for r in real.requests("resident") if r.contains("and that")], "the late blip sent on"
    )
    assert "tool_result" not in {e.kind for e in after.events}, "a turn with no tool boundary took it"
    real.wait(lambda: t.settled() and status(real, repo)["turns"] == 3, "the next turn ended")
    last = status(real, repo)["steer"]["last"]
    assert (last["blip_id"], last["outcome"], last["reached_turn"]) == (late.id, "next turn", False), last
