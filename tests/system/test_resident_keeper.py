"""The keeper's heartbeat rules, fast: a real daemon, real tmux, the resident seated by ``fleet
resident start``'s own code with fleet's stand-in agent as the mind (run as ``claude``: a mind of
Claude Code's kind, whose transcript a test writes as Claude Code would), and an injected clock.

``in-flight`` (the default) is exercised with the real Claude Code in test_resident_real.py; here
``always``, ``off`` and the daily budget, stepping the keeper through quiet time that only the
clock passes.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import libtmux
import pytest
from conftest import retry_until

from fleet.client import Client
from fleet.models import Wave
from fleet.paths import Paths
from fleet.resident import seat
from fleet.resident.keeper import Keeper
from fleet.spawn import Spawner
from fleet.tmux import Tmux

T0 = datetime(2026, 12, 1, 22, 0, tzinfo=UTC).timestamp()
"""The clock's start: two hours before a UTC midnight (the budget's day ends within the test)."""


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def seated(
    operator: Client, srv: libtmux.Server, paths: Paths, tmp_path: Path, frontmatter: str
) -> tuple[Wave, Tmux]:
    """A git repository whose wave/w/GOAL.md has ``frontmatter``; its resident seated (a stand-in)."""
    repo = tmp_path / "repo"
    (repo / "wave" / "w").mkdir(parents=True)
    (repo / "wave" / "w" / "GOAL.md").write_text(f"---\n{frontmatter}---\nKeep the wave.\n")
    commit = ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "init"]
    for args in (["init", "-q", "-b", "main"], commit):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    # the stand-in plays Claude Code: run as ``claude`` (it takes and ignores Claude Code's flags), so
    # the mind is of Claude Code's kind and its record is the transcript a test writes for it
    claude = tmp_path / "bin" / "claude"
    claude.parent.mkdir()
    claude.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m fleet.standin "$@"\n')
    claude.chmod(0o755)
    layout = tmp_path / "mind.toml"
    layout.write_text(f"[defaults]\nagent = {json.dumps(str(claude))}\n")
    tmux = Tmux(srv)
    spawner = Spawner(operator, tmux, paths, ready_timeout=20)
    report = seat.start(operator, spawner, paths, "w", agent=str(layout), cwd=repo)
    assert report.pane.ready, report.pane.why
    return operator.get_wave("w"), tmux


def heartbeat_texts(operator: Client, wave: Wave) -> list[str]:
    return [
        b.text
        for b in operator.read(wave.root_id, limit=1000).blips
        if b.kind == "system" and b.text.startswith("resident: heartbeat")
    ]


def typed_heartbeats(tmux: Tmux, wave: Wave) -> int:
    """How many heartbeat lines were typed into the mind's pane (its terminal echoes them)."""
    pane = seat.resident_pane(tmux, wave.id)
    assert pane is not None
    screen = "\n".join(tmux.srv.cmd("capture-pane", "-p", "-J", "-S", "-", "-t", pane.pane_id).stdout)
    return screen.count("[fleet] heartbeat:")


def test_heartbeat_always_beats_every_quiet_interval_with_nothing_in_flight_within_the_daily_budget(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, tmp_path: Path
) -> None:
    wave, tmux = seated(
        operator,
        tmux_server,
        fleet_env,
        tmp_path,
        "heartbeat: always\nheartbeat_every: 60s\nheartbeat_budget: 2\n",
    )
    clock = Clock()
    keeper = Keeper(operator, tmux, fleet_env, wave, clock=clock)
    assert keeper.step([]) == []
    clock.t += 59
    assert keeper.step([]) == [], "a heartbeat before the quiet interval passed"
    clock.t += 1
    (beat,) = keeper.step([])
    assert beat.kind == "heartbeat" and "no workers in flight" in beat.text
    clock.t += 30
    assert keeper.step([]) == [], "the quiet interval restarts at each heartbeat"
    clock.t += 30
    assert [e.kind for e in keeper.step([])] == ["heartbeat"]
    retry_until(lambda: typed_heartbeats(tmux, wave) == 2, what="two heartbeat lines typed into the pane")

    clock.t += 60
    (spent,) = keeper.step([])
    assert spent.kind == "budget" and "heartbeat budget spent: 2 of 2 today" in spent.text
    assert "no more heartbeats until 00:00 UTC" in spent.text
    due = keeper.next_due_in()
    assert due is not None and due == pytest.approx(T0 + 2 * 3600 - clock.t), "the next one: at midnight"
    for _ in range(3):
        clock.t += 600
        assert keeper.step([]) == [], "a heartbeat (or a second budget note) past the day's budget"
    assert len(heartbeat_texts(operator, wave)) == 3 and typed_heartbeats(tmux, wave) == 2
    assert sum("budget spent" in t for t in heartbeat_texts(operator, wave)) == 1

    clock.t = T0 + 2 * 3600 + 1  # 00:00:01 UTC the next day: a new budget
    assert [e.kind for e in keeper.step([])] == ["heartbeat"]
    again = Keeper(operator, tmux, fleet_env, wave, clock=clock)  # a restarted supervisor keeps the count
    clock.t += 61
    assert [e.kind for e in again.step([])] == []  # (its first step starts the quiet period)
    clock.t += 61
    assert [e.kind for e in again.step([])] == ["heartbeat"]
    clock.t += 61
    assert [e.kind for e in again.step([])] == ["budget"]


def test_heartbeat_off_never_beats_even_with_a_worker_running(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, tmp_path: Path
) -> None:
    wave, tmux = seated(operator, tmux_server, fleet_env, tmp_path, "heartbeat: off\nheartbeat_every: 60s\n")
    operator.fork(wave.root_id, "job", ["worker"], as_="resident")
    st = seat.status(operator, tmux, fleet_env, "w")
    assert st.in_flight == 1 and st.workers[0].status == "running"
    clock = Clock()
    keeper = Keeper(operator, tmux, fleet_env, wave, clock=clock)
    for _ in range(10):
        assert keeper.step([]) == []
        clock.t += 3600
    assert keeper.next_due_in() is None
    assert heartbeat_texts(operator, wave) == [] and typed_heartbeats(tmux, wave) == 0


def test_in_flight_with_nothing_running_sets_no_deadline_and_a_worker_brings_the_heartbeat(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, tmp_path: Path
) -> None:
    """Nothing in flight: the due heartbeat is held with no deadline (the supervisor does not spin
    on it); once the resident forks a worker, the next look beats, carrying the fold."""
    wave, tmux = seated(operator, tmux_server, fleet_env, tmp_path, "heartbeat_every: 60s\n")
    clock = Clock()
    keeper = Keeper(operator, tmux, fleet_env, wave, clock=clock)
    keeper.step([])
    assert keeper.next_due_in() == pytest.approx(60)
    clock.t += 120
    assert keeper.step([]) == []
    assert keeper.next_due_in() is None, "a due heartbeat with nothing in flight keeps the loop busy"
    operator.fork(wave.root_id, "job", ["worker"], as_="resident")
    clock.t += 1
    (beat,) = keeper.step([])
    assert beat.kind == "heartbeat" and "1 in flight — w/job: running" in beat.text
    assert keeper.next_due_in() == pytest.approx(60)


def test_a_cron_due_during_a_turn_opens_at_its_end(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, tmp_path: Path
) -> None:
    """The mind's transcript (written here as Claude Code writes it: a wake, later the turn's end)
    says it is turning when the cron falls due: nothing is typed then; the next look after the turn
    ended opens it, once."""
    import json
    import os

    from fleet.resident.keeper import write_state

    wave, tmux = seated(
        operator, tmux_server, fleet_env, tmp_path,
        'heartbeat: off\ncrons:\n  - flow: nightly\n    schedule: "30 22 * * *"\n',
    )  # fmt: skip
    write_state(fleet_env, wave.id, T0)
    mind = operator.seat("w")
    assert mind is not None
    transcript = Path(os.environ["HOME"]) / ".claude" / "projects" / "-x" / f"{mind.session_id}.jsonl"
    transcript.parent.mkdir(parents=True)
    wake = {"type": "user", "origin": {"kind": "channel"}, "message": {"role": "user", "content": "<c>"}}
    transcript.write_text(json.dumps(wake) + "\n")
    clock = Clock(T0 + 30 * 60 + 10)  # 22:30:10, the cron due ten seconds ago
    keeper = Keeper(operator, tmux, fleet_env, wave, clock=clock)
    assert keeper.step([]) == [], "a cron opened while the mind was turning"
    clock.t += 60
    assert keeper.step([]) == []
    with transcript.open("a") as f:
        f.write(json.dumps({"type": "system", "subtype": "turn_duration", "durationMs": 5}) + "\n")
    clock.t += 5
    (due,) = keeper.step([])
    assert due.kind == "cron"
    assert due.text.startswith("cron due: nightly — dispatch it (due at 2026-12-01 22:30")
    clock.t += 5
    assert keeper.step([]) == [], "the cron opened twice"

    def typed() -> int:
        pane = seat.resident_pane(tmux, wave.id)
        assert pane is not None
        screen = "\n".join(tmux.srv.cmd("capture-pane", "-p", "-J", "-S", "-", "-t", pane.pane_id).stdout)
        return screen.count("[fleet] cron due: nightly")

    retry_until(lambda: typed() == 1, what="the cron's line typed into the pane once")


def test_the_janitor_waits_out_turn_stall_without_progress_spares_a_wait_on_a_person_and_tries_once(
    operator: Client,
    tmux_server: libtmux.Server,
    fleet_env: Paths,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The janitor's decisions with the clock injected (the interrupt itself, Escape then the
    force-close, runs with the real Claude Code in test_resident_real.py): a turning transcript
    that grows is left alone; one that stops growing for turn_stall is interrupted once per bound;
    a mind whose channel reports it waiting at a permission prompt is not."""
    import json

    import fleet.resident.interrupt as interrupt_mod
    from fleet.models import AgentState, PresenceRow
    from fleet.resident.interrupt import InterruptReport

    wave, tmux = seated(operator, tmux_server, fleet_env, tmp_path, "heartbeat: off\nturn_stall: 60s\n")
    seat_ = operator.seat(wave.id)
    assert seat_ is not None
    home = tmp_path / "home"
    transcript = home / ".claude" / "projects" / "-x" / f"{seat_.session_id}.jsonl"
    transcript.parent.mkdir(parents=True)

    def write(*lines: dict[str, object]) -> None:
        with transcript.open("a") as f:
            f.writelines(json.dumps(x) + "\n" for x in lines)

    calls: list[str] = []

    def fake_interrupt(*args: object, who: str = "", **kw: object) -> InterruptReport:
        calls.append(who)
        return InterruptReport(
            wave="w", was_turning=True, interrupted=True, ended_by="cooperative", text="ok"
        )

    monkeypatch.setattr(interrupt_mod, "interrupt", fake_interrupt)
    clock = Clock()
    keeper = Keeper(operator, tmux, fleet_env, wave, clock=clock, env={"HOME": str(home)}, spawner=object())  # type: ignore[arg-type]
    write(
        {"type": "queue-operation", "operation": "enqueue"},
        {"type": "queue-operation", "operation": "dequeue"},
    )
    assert keeper.step([]) == []
    for _ in range(3):  # a minute at a time, each with a new line: progress
        clock.t += 59
        write({"type": "assistant", "message": {"content": [{"type": "tool_use", "id": "t", "name": "x"}]}})
        assert keeper.step([]) == []
    assert calls == [], "the janitor cut a turn that progresses"
    clock.t += 59
    assert keeper.step([]) == [] and calls == [], "before turn_stall"
    waiting = PresenceRow(
        wave_id=wave.id,
        participant="resident",
        state="live",
        agent=AgentState(kind="permission", tool="Bash"),
    )
    real_presence = operator.presence
    monkeypatch.setattr(operator, "presence", lambda w: [waiting])
    clock.t += 2
    assert keeper.step([]) == [] and calls == [], "a mind waiting at a permission prompt is not stalled"
    monkeypatch.setattr(operator, "presence", real_presence)
    clock.t += 1
    (event,) = keeper.step([])
    assert event.kind == "janitor" and len(calls) == 1
    assert "no transcript progress for 62s" in calls[0] and "turn_stall 60s" in calls[0], calls
    clock.t += 30
    assert keeper.step([]) == [] and len(calls) == 1, "one try per stall bound"
    clock.t += 31
    assert [e.kind for e in keeper.step([])] == ["janitor"] and len(calls) == 2


def test_a_force_close_that_cannot_resume_says_what_was_done_and_one_that_can_says_force(
    operator: Client,
    tmux_server: libtmux.Server,
    fleet_env: Paths,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The force stage with fleet's stand-in as the mind and a transcript that stays turning (the
    Escape changes nothing in it): past the deadline the process is ended and the session resumed
    (ended_by force, a new pid, the seat on it); when the resume fails, InterruptFailed says what
    was done and why, and the text is not typed."""
    import json

    from fleet.resident.interrupt import InterruptFailed, interrupt

    wave, tmux = seated(operator, tmux_server, fleet_env, tmp_path, "heartbeat: off\n")
    seat_ = operator.seat(wave.id)
    assert seat_ is not None
    home = tmp_path / "home"
    transcript = home / ".claude" / "projects" / "-x" / f"{seat_.session_id}.jsonl"
    transcript.parent.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    turning = [{"type": "queue-operation", "operation": op} for op in ("enqueue", "dequeue")]
    transcript.write_text("".join(json.dumps(x) + "\n" for x in turning))
    spawner = Spawner(operator, tmux, fleet_env, ready_timeout=20)
    old_pid = seat.resident_pane(tmux, wave.id).pid  # type: ignore[union-attr]

    report = interrupt(operator, spawner, fleet_env, "w", deadline=0.5)
    assert (report.ended_by, report.session_id) == ("force", seat_.session_id)
    assert report.pid not in (None, old_pid) and operator.seat(wave.id).pid == report.pid  # type: ignore[union-attr]
    assert "did not end within 0.5s of the Escape, so its process was ended (SIGTERM" in report.text

    transcript.write_text(
        transcript.read_text() + json.dumps(turning[0]) + "\n" + json.dumps(turning[1]) + "\n"
    )
    from fleet import errors

    def cannot(*args: object, **kw: object) -> None:  # the resume fails (say, its worktree is gone)
        raise errors.FleetError("resident was not respawned: its worktree is gone")

    monkeypatch.setattr(spawner, "respawn", cannot)
    with pytest.raises(InterruptFailed) as failed:
        interrupt(operator, spawner, fleet_env, "w", "never typed", deadline=0.5)
    msg = failed.value.message
    assert "did not end its turn within 0.5s of the Escape" in msg and "its process was ended (" in msg
    assert f"session {seat_.session_id} could not be resumed: resident was not respawned" in msg, msg
    assert "the next turn was not typed" in msg and "`fleet supervise w` revives it" in msg
    assert failed.value.exit_code == 1
    blips = [b.text for b in operator.read(wave.root_id, limit=100).blips if b.kind == "system"]
    assert any(t.startswith("resident: failed: did not end its turn") for t in blips)
    retry_until(lambda: seat.resident_pane(tmux, wave.id).dead, what="the ended process's pane dead")  # type: ignore[union-attr]


def test_a_layout_broken_by_hand_is_said_once_and_nothing_beats_on_a_guess_until_it_is_mended(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, tmp_path: Path
) -> None:
    """Which agent the mind is (and so how its turns read) comes from the layout its start wrote; a
    hand edit that breaks it stops the keeper's deadlines with one system blip naming the file, not a
    heartbeat timed by a transcript read the wrong way; mended, the keeper goes on."""
    from fleet.resident import state_dir

    wave, tmux = seated(
        operator, tmux_server, fleet_env, tmp_path, "heartbeat: always\nheartbeat_every: 60s\n"
    )
    layout = state_dir(fleet_env, wave.id) / "layout.toml"
    good = layout.read_text()
    layout.write_text(good.replace("]", "", 1))  # `[defaults` : no longer TOML
    clock = Clock()
    keeper = Keeper(operator, tmux, fleet_env, wave, clock=clock)
    (said,) = keeper.step([])
    assert said.kind == "state" and str(layout) in said.text and "does not load" in said.text, said
    assert "fleet resident start w --force" in said.text
    for _ in range(3):
        clock.t += 120
        assert keeper.step([]) == [], "a heartbeat on a guess, or the same words again"
    told = [b.text for b in operator.read(wave.root_id, limit=1000).blips if "does not load" in b.text]
    assert len(told) == 1 and heartbeat_texts(operator, wave) == [], told
    layout.write_text(good)
    assert keeper.step([]) == []  # (its first step with a mind starts the quiet period)
    clock.t += 61
    assert [e.kind for e in keeper.step([])] == ["heartbeat"]


def test_a_keeper_state_broken_by_hand_is_said_once_and_counted_afresh(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, tmp_path: Path
) -> None:
    """keeper.json holds the day's heartbeat count and when crons were last looked at; one cut short
    or edited into nonsense is not read as "nothing counted yet" in silence: the keeper says once what
    it lost and counts afresh, and writes the file whole again."""
    from fleet.resident import state_dir

    wave, tmux = seated(
        operator, tmux_server, fleet_env, tmp_path, "heartbeat: always\nheartbeat_every: 60s\n"
    )
    state = state_dir(fleet_env, wave.id) / "keeper.json"
    state.write_text('{"cron_seen": 17')  # cut short
    clock = Clock()
    keeper = Keeper(operator, tmux, fleet_env, wave, clock=clock)
    (said,) = keeper.step([])
    assert said.kind == "state" and str(state) in said.text and "counted afresh" in said.text, said
    assert json.loads(state.read_text())["cron_seen"] == T0
    clock.t += 60
    assert [e.kind for e in keeper.step([])] == ["heartbeat"]
    assert json.loads(state.read_text())["heartbeats"] == 1
    again = Keeper(operator, tmux, fleet_env, wave, clock=clock)  # the file loads: nothing to say
    assert again.step([]) == []
    told = [b.text for b in operator.read(wave.root_id, limit=1000).blips if "did not load" in b.text]
    assert len(told) == 1, told
    state.write_bytes(b"\xff\xfe{")  # not even UTF-8
    (said,) = Keeper(operator, tmux, fleet_env, wave, clock=clock).step([])
    assert said.kind == "state" and "did not load" in said.text, said
