"""The resident's parts without a model: GOAL.md and crons, the seat in the store, the CLI's refusals."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fleet import errors, seams
from fleet.client import Client
from fleet.models import MemoryOp, NewSeat, Seat
from fleet.paths import Paths

# ---------------------------------------------------------------- GOAL.md


# ---------------------------------------------------------------- the seat in the store


def test_the_seat_routes(operator: Client) -> None:
    operator.create_wave("w", ["resident"])
    assert operator.seat("w") is None
    sid = str(uuid.uuid4())
    seat = operator.claim_seat("w", NewSeat(participant="resident", session_id=sid, host="h", pid=7))
    assert operator.seat("w") == seat
    with pytest.raises(errors.Conflict):
        operator.claim_seat(
            "w", NewSeat(participant="resident", session_id=str(uuid.uuid4()), host="h", pid=8)
        )
    assert operator.close_seat("w", "done", session_id=str(uuid.uuid4())) == seat  # not that session's: kept
    closed = operator.close_seat("w", "stopped")
    assert closed is not None and closed.closed_why == "stopped" and closed.closed_at


# ---------------------------------------------------------------- the mind's transcript


# ---------------------------------------------------------------- the CLI's refusals


def run_fleet(
    operator: Client, cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, "FLEET_DAEMON": operator.base_url, "FLEET_TOKEN": operator.token, **(env or {})}
    cwd.mkdir(exist_ok=True)  # (not tmp_path itself: its fleet/ folder would shadow the package)
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_start_outside_a_git_repository_is_a_clear_error_and_changes_nothing(
    operator: Client, tmp_path: Path
) -> None:
    operator.create_wave("w", ["bob"])
    before = operator.get_wave("w")
    done = run_fleet(operator, tmp_path / "elsewhere", "resident", "start", "w")
    assert done.returncode == 2, done
    assert "is not in a git repository" in done.stderr and "Traceback" not in done.stderr
    assert operator.get_wave("w") == before and operator.seat("w") is None


def test_start_with_a_bad_goal_names_the_line_and_changes_nothing(operator: Client, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "wave" / "w").mkdir(parents=True)
    (repo / "wave" / "w" / "GOAL.md").write_text("---\ncrons:\n  - flow: x\n    schedule: 0 25 * * *\n---\n")
    done = run_fleet(operator, repo, "resident", "start", "w")
    assert done.returncode == 2, done
    assert "GOAL.md:4: invalid cron schedule '0 25 * * *'" in done.stderr and "Traceback" not in done.stderr
    assert operator.list_waves() == [] and not (tmp_path / "repo.w").exists()


def test_status_of_a_wave_without_a_resident(operator: Client, tmp_path: Path) -> None:
    operator.create_wave("w", ["bob"])
    done = run_fleet(operator, tmp_path / "x", "resident", "status", "w", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "none"
    missing = run_fleet(operator, tmp_path / "x", "resident", "status", "nope")
    assert missing.returncode == 4 and "no wave 'nope'" in missing.stderr


def seated_repo(operator: Client, tmp_path: Path) -> Path:
    """A git repository with the wave's worktree <repo>.w beside it, and wave w's seat recording it
    (as ``fleet resident start`` leaves them; no mind runs): the repository's path."""
    import socket

    repo = tmp_path / "repo"
    repo.mkdir()
    commit = ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "init"]
    worktree = ["worktree", "add", "-q", "-b", "wave/w", "../repo.w"]
    for args in (["init", "-q", "-b", "main"], commit, worktree):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    operator.create_wave("w", ["resident", "bob"])
    operator.claim_seat(
        "w",
        NewSeat(
            participant="resident", session_id=str(uuid.uuid4()), host=socket.gethostname(), pid=1,
            cwd=str(tmp_path / "repo.w"),
        ),
    )  # fmt: skip
    return repo


def test_memory_show_update_add_go_through_the_daemon_which_writes_the_file_and_says_so(
    operator: Client, tmp_path: Path
) -> None:
    """The operator's writes (from anywhere: the CLI runs outside the repository) land in the seat's
    origin repository, each recorded by a blip that names the resident (so it wakes to re-read)."""
    seated_repo(operator, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    assert run_fleet(operator, elsewhere, "memory", "show", "w").stdout == "\n"
    done = run_fleet(operator, elsewhere, "memory", "update", "w", "The parser is in src/parse.py.")
    assert done.returncode == 0, done.stderr
    done = run_fleet(
        operator, elsewhere, "memory", "add", "w", "Tests run with make test.", "--summary", "how to test"
    )
    assert done.returncode == 0, done.stderr
    memory = tmp_path / "repo" / "wave" / "w" / "MEMORY.md"
    assert memory.read_text() == "The parser is in src/parse.py.\n\nTests run with make test.\n"
    assert not (tmp_path / "repo.w" / "wave").exists(), "written into the worktree, not beside GOAL.md"
    shown = json.loads(run_fleet(operator, elsewhere, "memory", "show", "w", "--json").stdout)
    assert shown["content"] == memory.read_text() and shown["path"] == str(memory)
    said = [(b.author, b.kind, b.text) for b in operator.read(operator.resolve("w/main").id).blips][-2:]
    reread = " — resident: re-read wave/w/MEMORY.md, the wave's memory"
    assert said == [
        ("operator", "message", "memory updated: The parser is in src/parse.py." + reread),
        ("operator", "message", "memory added: how to test" + reread),
    ]
    from fleet.delivery.rules import mentions

    assert all(mentions(text, "resident") for _a, _k, text in said)
    empty = run_fleet(operator, elsewhere, "memory", "add", "w", "  ")
    assert empty.returncode == 2 and "empty" in empty.stderr and "Traceback" not in empty.stderr
    assert memory.read_text().endswith("make test.\n")


def test_the_residents_token_holds_the_pen_and_another_participants_is_refused(
    operator: Client, tmp_path: Path
) -> None:
    seated_repo(operator, tmp_path)
    memory = tmp_path / "repo" / "wave" / "w" / "MEMORY.md"
    resident = Client(operator.base_url, operator.mint_token("w", "resident").token)
    got = resident.write_memory("w", "add", "Deploys go through make ship.")
    assert memory.read_text() == "Deploys go through make ship.\n" == got.content
    assert resident.memory("w").content == memory.read_text()
    last = operator.read(operator.resolve("w/main").id).blips[-1]
    assert (last.id, last.kind, last.text) == (
        got.blip_id, "system", "resident: memory added: Deploys go through make ship. (wave/w/MEMORY.md)",
    )  # fmt: skip
    bob = Client(operator.base_url, operator.mint_token("w", "bob").token)
    with pytest.raises(errors.Forbidden) as caught:
        bob.write_memory("w", "update", "bob was here")
    assert "only the operator and the wave's seated resident" in caught.value.message
    with pytest.raises(errors.Forbidden):
        bob.memory("w")
    done = run_fleet(bob, tmp_path / "x", "memory", "update", "w", "bob was here")
    assert done.returncode == 5 and "seated resident hold its pen" in done.stderr, done
    assert "Traceback" not in done.stderr
    assert memory.read_text() == "Deploys go through make ship.\n", "a refused write changed the file"
    assert operator.read(operator.resolve("w/main").id).blips[-1].id == got.blip_id
    with pytest.raises(errors.Forbidden) as caught:
        operator.write_memory("w", "add", "as bob", as_="bob")
    assert "not as 'bob'" in caught.value.message
    assert memory.read_text() == "Deploys go through make ship.\n"

    seated = operator.seat("w")
    assert seated is not None  # `fleet memory` in the resident's own shell: the resident's write
    mine = {"CLAUDE_CODE_SESSION_ID": seated.session_id}
    done = run_fleet(operator, tmp_path / "x", "memory", "add", "w", "Staging is at :8080.", env=mine)
    assert done.returncode == 0, done.stderr
    last = operator.read(operator.resolve("w/main").id).blips[-1]
    assert last.kind == "system"
    assert last.text == "resident: memory added: Staging is at :8080. (wave/w/MEMORY.md)"
    assert memory.read_text() == "Deploys go through make ship.\n\nStaging is at :8080.\n"

    operator.close_seat("w", "stopped")
    with pytest.raises(errors.Forbidden):
        resident.write_memory("w", "add", "after the seat closed")
    assert memory.read_text().endswith("Staging is at :8080.\n")


def test_memory_of_a_wave_that_never_had_a_resident_says_what_to_do(operator: Client, tmp_path: Path) -> None:
    operator.create_wave("w", ["bob"])
    before = operator.read(operator.resolve("w/main").id).blips
    done = run_fleet(operator, tmp_path / "x", "memory", "add", "w", "something")
    assert done.returncode == 4 and "has no resident yet" in done.stderr and "Traceback" not in done.stderr
    assert "fleet resident start w" in done.stderr
    assert operator.read(operator.resolve("w/main").id).blips == before


def test_memory_of_a_seat_whose_worktree_is_gone_or_on_another_host_says_so(
    operator: Client, tmp_path: Path
) -> None:
    import shutil

    seated_repo(operator, tmp_path)
    shutil.rmtree(tmp_path / "repo.w")
    done = run_fleet(operator, tmp_path / "x", "memory", "add", "w", "something")
    assert done.returncode == 1 and "records no worktree that exists" in done.stderr, done
    assert "fleet resident start w" in done.stderr and "Traceback" not in done.stderr
    operator.claim_seat(
        "w",
        NewSeat(participant="resident", session_id=str(uuid.uuid4()), host="elsewhere", pid=2, force=True),
    )
    done = run_fleet(operator, tmp_path / "x", "memory", "show", "w")
    assert done.returncode == 1 and "runs on elsewhere, not on this daemon's machine" in done.stderr, done
    assert not (tmp_path / "repo" / "wave").exists()


def test_the_keeper_rereads_goal_live_and_keeps_the_last_good_schedule(
    operator: Client, tmp_path: Path, fleet_env: Paths
) -> None:
    from fleet.resident import state_dir
    from fleet.resident.keeper import Keeper, KeeperEvent
    from fleet.tmux import Tmux

    operator.create_wave("w", ["resident"])
    wave = operator.get_wave("w")
    (tmp_path / "repo" / "wave" / "w").mkdir(parents=True)
    goal_md = tmp_path / "repo" / "wave" / "w" / "GOAL.md"
    goal_md.write_text("---\ncrons:\n  - flow: nightly\n    schedule: 0 3 * * *\n---\n")
    here = state_dir(fleet_env, wave.id)
    here.mkdir(parents=True)
    (here / "origin").write_text(str(tmp_path / "repo") + "\n")
    keeper = Keeper(operator, Tmux.__new__(Tmux), fleet_env, wave)  # (no tmux is touched here)
    events: list[KeeperEvent] = []
    keeper._read_goal(events)
    assert [c.flow for c in keeper.goal.crons] == ["nightly"] and events == []
    goal_md.write_text("---\ncrons:\n  - flow: nightly\n    schedule: 0 3 * *\n---\n")
    keeper._read_goal(events)
    keeper._read_goal(events)
    assert [c.flow for c in keeper.goal.crons] == ["nightly"], "the last good schedule was dropped"
    assert [e.kind for e in events] == ["goal"] and "GOAL.md:4: invalid cron schedule" in events[0].text
    said = [b.text for b in operator.read(wave.root_id).blips if b.kind == "system"]
    assert sum("keeping the last good schedule" in t for t in said) == 1


def test_resident_status_says_what_fleet_status_says_and_never_idle_turns_0_without_a_transcript(
    operator: Client, tmp_path: Path
) -> None:
    """Its state is the session's one state (the daemon's, as `fleet status` shows it), so the two
    agree; where the transcript is not on this machine, the turns are unknown, not 0."""
    from fleet.models import AgentState, PresenceReport

    operator.create_wave("w", ["resident", "bob"])
    elsewhere = NewSeat(
        participant="resident", session_id=str(uuid.uuid4()), host="laptop-b", pid=1, cwd="/x"
    )
    operator.claim_seat("w", elsewhere)  # (the mind runs on another machine: its transcript is there)

    def both() -> tuple[dict[str, Any], dict[str, Any]]:
        mind = run_fleet(operator, tmp_path / "x", "resident", "status", "w", "--json")
        wave = run_fleet(operator, tmp_path / "x", "status", "w", "--json")
        assert mind.returncode == 0 and wave.returncode == 0, (mind.stderr, wave.stderr)
        row = next(r for r in json.loads(wave.stdout)["rows"] if r["participant"] == "resident")
        return json.loads(mind.stdout), row

    mind, row = both()
    assert mind["state"] == "unknown" and mind["agent"] == row["state"], (mind, row)
    assert mind["turns"] is None and "turns unknown" in mind["note"], mind
    seat = operator.seat("w")
    assert seat is not None
    for agent in (
        AgentState(kind="turning", since=1.0, woken_by=["b-1"]),
        AgentState(kind="failed", error="API"),
    ):
        report = PresenceReport(participant="resident", event="ping", session_id=seat.session_id, agent=agent)
        operator.report_presence("w", report)
        mind, row = both()
        assert mind["state"] == agent.kind and mind["agent"] == row["state"], (mind, row)
    text = run_fleet(operator, tmp_path / "x", "resident", "status", "w")
    assert "failed: API" in text.stdout and "unknown (no transcript here)" in text.stdout, text.stdout


class _ThirdPartyPen:
    """A pen of another feature's: its memory is one file of its own, whatever the seat says."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def file(self, seat: Seat, wave: str) -> Path:
        return self.path

    def read(self, path: Path) -> str:
        return path.read_text(encoding="utf-8") if path.exists() else ""

    def write(self, path: Path, op: MemoryOp, content: str) -> str:
        path.write_text(content, encoding="utf-8")
        return content

    def note(
        self, op: MemoryOp, content: str, summary: str | None, wave: str, by_resident: bool, resident: str
    ) -> tuple[str, str]:
        return content, f"noted ({op}, resident={by_resident}): {content}"


def test_the_daemon_writes_memory_through_the_pen_on_its_seam_and_without_one_says_so(
    operator: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seated_repo(operator, tmp_path)
    residents = tmp_path / "repo" / "wave" / "w" / "MEMORY.md"
    mine = tmp_path / "elsewhere.md"
    monkeypatch.setattr(seams.memory_pens, "_entries", {"third.party": _ThirdPartyPen(mine)})
    got = operator.write_memory("w", "update", "kept by another pen")
    assert (got.path, got.content) == (str(mine), "kept by another pen") and mine.read_text() == got.content
    assert not residents.exists()
    last = operator.read(operator.resolve("w/main").id).blips[-1]
    assert (last.id, last.text) == (got.blip_id, "noted (update, resident=False): kept by another pen")
    assert operator.memory("w").content == "kept by another pen"

    monkeypatch.setattr(seams.memory_pens, "_entries", {})
    asks: list[Callable[[], object]] = [
        lambda: operator.memory("w"),
        lambda: operator.write_memory("w", "add", "lost"),
    ]
    for ask in asks:
        with pytest.raises(errors.NotFound) as caught:
            ask()
        assert "no memory pen" in caught.value.message and "fleet daemon start" in caught.value.message
    assert operator.read(operator.resolve("w/main").id).blips[-1].id == got.blip_id  # nothing recorded
    assert mine.read_text() == "kept by another pen" and not residents.exists()
