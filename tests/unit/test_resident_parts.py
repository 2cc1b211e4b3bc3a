"""The resident's parts without a model or a daemon: GOAL.md and crons, the seat in the store, the mind's
fold of its transcript."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_resident_fold import NOW

from fleet import errors
from fleet.models import Blip, NewSeat, Wave, Wavelet
from fleet.resident import RESIDENT, goal, seat
from fleet.resident.goal import Cron, GoalError
from fleet.resident.mind import MindReader
from fleet.resident.seat import Worker, WorkerFold
from fleet.store import OPERATOR_PRINCIPAL as OP
from fleet.store import Principal, Store


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


WAVE_ID = "0wave"


ROOT = "0root"


WAVELETS = ["1a", "1b", "1c", "1d"]
"""Wavelets of the wave besides its root; the resident forked the first three."""


def _wave() -> Wave:
    def wl(i: str, by: str, parent: str | None) -> Wavelet:
        return Wavelet(
            id=i, wave_id=WAVE_ID, wave="w", name=i, parent_id=parent, private=False,
            created_by=by, created_at="2026-12-01T00:00:00Z",
        )  # fmt: skip

    forked = [wl(i, "bob" if i == "1d" else RESIDENT, ROOT) for i in WAVELETS]
    return Wave(
        id=WAVE_ID, name="w", created_at="2026-12-01T00:00:00Z", root_id=ROOT,
        wavelets=[wl(ROOT, "operator", None), *forked],
    )  # fmt: skip


def reference(wave: Wave, blips: list[Blip], now: float) -> list[Worker]:
    """The fold's meaning, over the whole list at once (what ``workers`` computed when it could
    still read every blip in one page)."""
    out = []
    for wl in wave.wavelets:
        if wl.created_by != RESIDENT or wl.id == wave.root_id:
            continue
        own = [b for b in blips if b.wavelet_id == wl.id and b.kind != "system"]
        surfaced = any(b.kind == "surface" and b.source_wavelet_id == wl.id for b in blips)
        done = surfaced or any(b.text.startswith("DONE:") and b.author != RESIDENT for b in own)
        last = own[-1] if own else None
        at = seat._ts(last.created_at if last else wl.created_at)
        out.append(
            Worker(
                wavelet=wl.path, status="done" if done else "running",
                last_blip=f"{last.author}: {last.text[:120]}" if last else "", age_seconds=max(0.0, now - at),
            )
        )  # fmt: skip
    return out


blip_st = st.tuples(
    st.sampled_from([ROOT, *WAVELETS]),
    st.sampled_from(["message", "message", "system", "surface"]),
    st.sampled_from([RESIDENT, "worker", "bob"]),
    st.sampled_from(["progress", "DONE: finished", "DONE:", "not DONE: yet", "x" * 200]),
    st.sampled_from([None, *WAVELETS]),
    st.integers(0, 59),
)


@settings(max_examples=300, deadline=None)
@given(
    specs=st.lists(blip_st, max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=12),
    back=st.lists(st.integers(0, 5), max_size=12),
)
def test_the_fold_fed_in_any_page_split_equals_the_fold_over_the_whole_list(
    specs: list[tuple[str, str, str, str, str | None, int]], cuts: list[int], back: list[int]
) -> None:
    """Pages as a reader's cursor gives them (each read after the previous page's end, or after an
    earlier id: an overlap); a fold fed them equals the fold of the whole list, at every page end."""
    blips = [
        Blip(
            id=f"b{i:05d}", wavelet_id=w, wave_id=WAVE_ID, author="system" if kind == "system" else author,
            kind=kind, text=text, source_wavelet_id=src if kind == "surface" else None,  # type: ignore[arg-type]
            created_at=f"2026-12-01T00:{sec:02d}:00Z",
        )
        for i, (w, kind, author, text, src, sec) in enumerate(specs)
    ]  # fmt: skip
    wave = _wave()
    ends = sorted({min(c, len(blips)) for c in cuts} | {len(blips)})
    fold = WorkerFold()
    start = 0
    for n, end in enumerate(ends):
        start = max(0, start - (back[n] if n < len(back) else 0))  # a page may overlap the last
        after = blips[start - 1].id if start else ""
        fold.feed(blips[start:end], after=after)
        assert fold.complete
        assert fold.workers(wave, now=NOW) == reference(wave, blips[:end], NOW)
        start = end
    assert fold.cursor == (blips[-1].id if blips else "")


def test_mind_names_an_agent_kind_with_the_default_profile_or_a_layout(tmp_path: Path) -> None:
    """``mind: codex`` is the Codex CLI with the default layout's resident profile (Claude Code's model,
    args and permission mode dropped); ``mind: claude`` is the default layout's own; any other word is
    a layout, as before."""
    from fleet.layouts import DEFAULT_LAYOUT
    from fleet.layouts import load as load_layout
    from fleet.paths import Paths

    paths = Paths(data=tmp_path / "d", state=tmp_path / "s", config=tmp_path / "c", logs=tmp_path / "l")
    default = seat.resident_profile(load_layout(DEFAULT_LAYOUT, paths))
    codex = seat.mind_profile("codex", paths)
    assert (codex.agent, codex.permission_mode, codex.args) == ("codex", None, [])
    assert codex.attention == default.attention and codex.cwd == default.cwd
    assert seat.mind_profile("claude", paths) == default.model_copy(update={"agent": "claude"})
    layout = tmp_path / "mine.toml"
    layout.write_text('[participants.resident]\nagent = "codex"\nmodel = "gpt-x"\n')
    own = seat.mind_profile(str(layout), paths)
    assert (own.agent, own.model) == ("codex", "gpt-x")
    assert seat.mind_profile("pair", paths).agent == "claude"  # a shipped layout by name
    with pytest.raises(errors.NotFound, match="no layout 'opencode'"):
        seat.mind_profile("opencode", paths)  # not a kind fleet runs: a layout, which is not there


def _rollout(n: int, kind: str, payload: Mapping[str, object]) -> str:
    return json.dumps({"timestamp": f"2026-12-06T00:26:{n:02d}.000Z", "type": kind, "payload": payload})


def test_a_codex_minds_turns_are_read_from_its_rollout_and_an_escape_ends_its_turn(tmp_path: Path) -> None:
    """A Codex mind's reader is its kind's: the thread the channel kept, the rollout under CODEX_HOME,
    translated. The lines are those codex-cli 0.169.0 wrote for a queued turn and for one ended by
    Escape (its ``<turn_aborted>`` message, then ``turn_aborted``)."""
    from fleet.delivery.rollout import thread_file
    from fleet.paths import Paths
    from fleet.resident.mind import Mind, steer_status

    paths = Paths(data=tmp_path / "d", state=tmp_path / "s", config=tmp_path / "c", logs=tmp_path / "l")
    thread = "01a248be-da0b-73f2-bab3-f6297e4db445"
    mind = Mind.of("codex", {"CODEX_HOME": str(tmp_path / ".codex")}, paths)
    reader = mind.reader("sid-1")
    assert reader.read().turns == 0 and "no Codex thread known yet" in reader.problem
    thread_file(paths.channels, "sid-1").parent.mkdir(parents=True)
    thread_file(paths.channels, "sid-1").write_text(thread + "\n")
    assert reader.read().turns == 0 and "no rollout yet" in reader.problem
    day = tmp_path / ".codex" / "sessions" / "2026" / "12" / "06"
    path = day / f"rollout-2026-12-06T00-26-50-{thread}.jsonl"
    path.parent.mkdir(parents=True)
    queued = {"type": "task_started", "turn_attribution": {"turn_trigger": "queue"}}
    started = _rollout(1, "event_msg", queued)
    text = [{"type": "input_text", "text": "[fleet] heartbeat"}]
    said = {"type": "message", "role": "user", "content": text}
    done = _rollout(3, "event_msg", {"type": "task_complete", "last_agent_message": "ok"})
    path.write_text(started + "\n" + _rollout(2, "response_item", said) + "\n")
    assert reader.read().turning and reader.problem == ""
    with path.open("a") as f:
        f.write(done + "\n" + started + "\n")
    fold = reader.read()
    assert (fold.turns, fold.turning) == (1, True)
    note = [{"type": "input_text", "text": "<turn_aborted>\nThe user interrupted the previous turn"}]
    aborted = {"type": "message", "role": "user", "content": note}
    with path.open("a") as f:
        f.write(_rollout(5, "response_item", aborted) + "\n")
        f.write(_rollout(6, "event_msg", {"type": "turn_aborted", "reason": "interrupted"}) + "\n")
    fold = reader.read()
    assert (fold.turns, fold.turning, fold.interrupted) == (1, False, 1)
    assert reader.offset == path.stat().st_size
    assert "never" in steer_status("sid-1", mind).text  # Codex takes a mid-turn blip as the next turn
