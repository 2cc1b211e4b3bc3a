"""The resident's parts without a model or a daemon: GOAL.md and crons, the seat in the store, the mind's
fold of its transcript."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fleet import errors
from fleet.models import NewSeat
from fleet.resident import goal
from fleet.resident.goal import Cron, GoalError
from fleet.resident.mind import MindReader
from fleet.store import OPERATOR_PRINCIPAL, Principal, Store

OP = OPERATOR_PRINCIPAL


def test_goal_frontmatter_is_read_with_defaults_for_what_it_leaves_out() -> None:
    g = goal.parse(
        "---\nmind: my-layout   # the profile\nheartbeat: always\nheartbeat_every: 90s\nheartbeat_budget: 3\n"
        'crons:\n  - flow: nightly\n    schedule: "0 3 * * *"\n  - flow: hourly\n    schedule: 15 * * * *\n'
        "---\nShip it.\n"
    )
    assert (g.mind, g.heartbeat, g.heartbeat_every, g.heartbeat_budget, g.body) == (
        "my-layout", "always", 90.0, 3, "Ship it.",
    )  # fmt: skip
    assert [(c.flow, c.schedule.expr, c.line) for c in g.crons] == [
        ("nightly", "0 3 * * *", 8), ("hourly", "15 * * * *", 10),
    ]  # fmt: skip
    inline = goal.parse('---\ncrons: [{"flow": "x", "schedule": "*/5 * * * *"}]\n---\n')
    assert [c.flow for c in inline.crons] == ["x"]
    plain = goal.parse("Just a goal.\n")
    assert (plain.body, plain.heartbeat, plain.heartbeat_every, plain.crons) == (
        "Just a goal.",
        "in-flight",
        300.0,
        (),
    )
    assert plain.turn_stall == 900.0  # the janitor's default bound: 15 minutes
    assert goal.parse("---\nturn_stall: 2m\n---\n").turn_stall == 120.0
    assert goal.parse("---\nturn_stall: off\n---\n").turn_stall is None


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("---\nmind: x\n", "1", "never closed"),
        ("---\nmood: happy\n---\n", "2", "unknown key 'mood'"),
        ("---\nheartbeat: sometimes\n---\n", "2", "in-flight, always or off"),
        ("---\nheartbeat_every: soon\n---\n", "2", "not a duration"),
        (
            "---\ncrons:\n  - flow: x\n    schedule: 61 * * * *\n---\n",
            "4",
            "minute field '61' is outside 0-59",
        ),
        ("---\ncrons:\n  - flow: x\n    schedule: '* * *'\n---\n", "4", "5 fields"),
        ("---\ncrons:\n  - flow: x\n---\n", "3", "needs exactly flow: and schedule:"),
        ("---\nheartbeat_budget: -1\n---\n", "2", "whole number"),
        ("---\nturn_stall: 0\n---\n", "2", "turn_stall must be more than 0 (or off)"),
        ("---\nturn_stall: never\n---\n", "2", "not a duration"),
    ],
)
def test_a_bad_goal_is_an_error_naming_the_line(text: str, line: str, words: str) -> None:
    with pytest.raises(GoalError) as caught:
        goal.parse(text, "wave/w/GOAL.md")
    assert caught.value.message.startswith(f"wave/w/GOAL.md:{line}: ") and words in caught.value.message
    assert caught.value.exit_code == 2


def test_cron_occurrences() -> None:
    at = datetime(2026, 12, 1, 13, 30, tzinfo=UTC)  # a Tuesday
    nightly = Cron.parse("0 3 * * *")
    assert nightly.last_at_or_before(at, datetime(2026, 11, 30, tzinfo=UTC)) == datetime(
        2026, 12, 1, 3, 0, tzinfo=UTC
    )
    assert nightly.last_at_or_before(at, datetime(2026, 12, 1, 3, 1, tzinfo=UTC)) is None
    every5 = Cron.parse("*/5 * * * *")
    assert every5.last_at_or_before(at, at) == at
    weekdays = Cron.parse("0 9 * * 1-5")
    assert weekdays.last_at_or_before(at, datetime(2026, 11, 28, tzinfo=UTC)) == datetime(
        2026, 12, 1, 9, 0, tzinfo=UTC
    )
    sundays = Cron.parse("0 0 * * 7")
    assert sundays.last_at_or_before(at, datetime(2026, 11, 1, tzinfo=UTC)) == datetime(
        2026, 11, 29, tzinfo=UTC
    )


def test_one_seat_per_wave_force_takes_over_and_the_same_session_refreshes(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    store.create_wave(OP, "w", ["resident", "bob"])
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    first = store.claim_seat(OP, "w", NewSeat(participant="resident", session_id=a, host="h", pid=10))
    with pytest.raises(errors.Conflict) as caught:
        store.claim_seat(OP, "w", NewSeat(participant="resident", session_id=b, host="h", pid=11))
    assert (
        a in caught.value.message
        and "pid 10 on h" in caught.value.message
        and "--force" in caught.value.message
    )
    assert store.seat(OP, "w") == first
    revived = store.claim_seat(OP, "w", NewSeat(participant="resident", session_id=a, host="h", pid=12))
    assert revived.pid == 12 and revived.closed_at is None
    taken = store.claim_seat(
        OP, "w", NewSeat(participant="resident", session_id=b, host="h", pid=13, force=True)
    )
    assert (taken.session_id, taken.pid) == (b, 13)
    kinds = [e.type for e in store.events(OP)][-4:]
    assert kinds == ["seat.claimed", "seat.claimed", "seat.closed", "seat.claimed"]
    bob = Principal("bob", store.get_wave(OP, "w").id)
    assert store.seat(bob, "w") == taken  # a participant of the wave may read the seat
    with pytest.raises(errors.Forbidden):
        store.claim_seat(bob, "w", NewSeat(participant="resident", session_id=b, host="h", pid=1, force=True))
    with pytest.raises(errors.UsageError):
        store.claim_seat(OP, "w", NewSeat(participant="resident", session_id="nope", host="h", pid=1))
    store.close()


def test_the_mind_fold_reads_turns_and_failures_incrementally(tmp_path: Path) -> None:
    sid = str(uuid.uuid4())
    path = tmp_path / ".claude" / "projects" / "-x" / f"{sid}.jsonl"
    path.parent.mkdir(parents=True)
    wake = {
        "type": "user",
        "origin": {"kind": "channel"},
        "message": {"role": "user", "content": "<channel>"},
    }
    done = {"type": "system", "subtype": "turn_duration", "durationMs": 5}
    fail = {
        "type": "assistant",
        "isApiErrorMessage": True,
        "message": {"content": [{"type": "text", "text": "API Error: 529"}]},
    }
    reader = MindReader(sid, {"HOME": str(tmp_path)})
    assert reader.read().turns == 0
    path.write_text(json.dumps(wake) + "\n")
    assert reader.read().turning
    with path.open("a") as f:
        f.write(
            json.dumps(done)
            + "\n"
            + json.dumps(wake)
            + "\n"
            + json.dumps(fail)
            + "\n"
            + json.dumps(wake)
            + "\n"
        )
        f.write(json.dumps(fail)[:20])  # a line being written
    fold = reader.read()
    assert (fold.turns, fold.failed_streak, fold.turning, fold.last_error) == (1, 1, True, "API Error: 529")
    with path.open("a") as f:
        f.write(json.dumps(fail)[20:] + "\n")
    assert reader.read().failed_streak == 2 and not reader.fold.turning


def test_a_push_taken_at_a_turns_end_keeps_the_mind_turning_until_its_own_turn_ends(tmp_path: Path) -> None:
    """The order Claude Code 2.1.332 writes a blip pushed during a turn: ``enqueue`` at once, its
    ``dequeue`` before the running turn's ``turn_duration``, and its user line only with the next
    turn's answer. Between those, the mind is turning (status said idle for the whole turn)."""
    sid = str(uuid.uuid4())
    path = tmp_path / ".claude" / "projects" / "-x" / f"{sid}.jsonl"
    path.parent.mkdir(parents=True)
    path.touch()
    reader = MindReader(sid, {"HOME": str(tmp_path)})

    def line(**obj: object) -> dict[str, object]:
        return obj

    def seen(*lines: dict[str, object]) -> bool:
        with path.open("a") as f:
            f.writelines(json.dumps(x) + "\n" for x in lines)
        return reader.read().turning

    wake = line(  # a push's user line is meta
        type="user", isMeta=True, origin={"kind": "channel"}, message={"role": "user", "content": "<channel>"}
    )
    answer = line(type="assistant", message={"content": [{"type": "text", "text": "ok"}]})
    done = line(type="system", subtype="turn_duration", durationMs=5)
    queue = [line(type="queue-operation", operation=op) for op in ("enqueue", "dequeue", "remove")]
    reminder = line(type="user", message={"role": "user", "content": "<system-reminder>x</system-reminder>"})
    assert seen(queue[0], queue[1], reminder, wake, answer)  # a wake while idle
    assert seen(queue[0])  # another pushed mid-turn
    assert seen(queue[1], answer, done), "its dequeue came before the turn's end: the next turn began"
    assert seen(wake, answer)  # its user line, written with the answer
    assert not seen(done)
    assert seen(queue[0]) and not seen(queue[2], done), "a withdrawn input never enters"
    assert reader.fold.turns == 3 and (reader.fold.queued, reader.fold.taken) == (0, 0)
    assert not seen(line(type="api-request", querySource="generate_session_title"))  # a side request
    assert seen(line(type="api-request", querySource="repl_main_thread"))  # the main thread's request
    absorbed = line(type="attachment", attachment={"type": "queued_command", "prompt": "<channel>"})
    assert seen(queue[0], queue[1], absorbed, answer)  # taken into the running turn at a tool boundary
    assert not seen(done), "an input the running turn absorbed opens no further turn"
