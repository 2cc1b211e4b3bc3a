"""The agent-state fold (:mod:`fleet.agentstate`): examples of what Claude Code writes, and
properties over generated transcripts (tens of thousands of lines): the fold never fails, a turn's
end is idle (or failed) whatever came before, reading in pieces folds the same as at once, and a
prompt's wait ends with its tool."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.agentstate import Fold, Pending, describe, state_of
from fleet.resident.mind import MindReader

BLOCK = '<channel source="fleet" wavelet="w/main" blip_id="b-1">go</channel>'
WAKE = {"type": "user", "origin": {"kind": "channel"}, "message": {"role": "user", "content": BLOCK}}
TYPED = {"type": "user", "message": {"role": "user", "content": "do the thing"}}
ENQUEUE = {
    "type": "queue-operation",
    "operation": "enqueue",
    "content": '<channel source="fleet" blip_id="b-2">x</channel>',
}
DEQUEUE = {"type": "queue-operation", "operation": "dequeue"}
REMOVE = {"type": "queue-operation", "operation": "remove"}
REQUEST = {"type": "api-request", "querySource": "repl_main_thread"}
DONE = {"type": "system", "subtype": "turn_duration", "durationMs": 5}
ERROR = {
    "type": "assistant",
    "isApiErrorMessage": True,
    "message": {"content": [{"type": "text", "text": "API Error: 500"}]},
}
INTERRUPT = {
    "type": "user",
    "message": {"content": [{"type": "text", "text": "[Request interrupted by user]"}]},
}
ABSORBED = {"type": "attachment", "attachment": {"type": "queued_command", "prompt": "x"}}
TEXT = {"type": "assistant", "message": {"content": [{"type": "text", "text": "ok"}]}}
PERMISSION = {
    "hook_event_name": "Notification",
    "notification_type": "permission_prompt",
    "message": "needs you",
}


def tool_use(n: int, name: str = "Bash") -> dict[str, Any]:
    return {"type": "assistant", "message": {"content": [{"type": "tool_use", "id": f"t{n}", "name": name,
                                                          "input": {"command": f"echo {n}"}}]}}  # fmt: skip


def tool_result(n: int) -> dict[str, Any]:
    return {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": f"t{n}"}]}}


def fold_of(*lines: dict[str, Any]) -> Fold:
    f = Fold()
    for line in lines:
        f.take(line, 1.0)
    return f


# ---------------------------------------------------------------- examples


def test_a_turn_turns_runs_tools_and_ends_idle() -> None:
    f = fold_of(WAKE, tool_use(1))
    s = state_of(f)
    assert (s.kind, s.woken_by, s.wavelets, s.tool) == ("turning", ["b-1"], ["w/main"], "Bash")
    f.take(tool_result(1), 2.0)
    assert state_of(f).tool == ""
    f.take(DONE, 3.0)
    assert state_of(f).kind == "idle" and f.turns == 1


def test_a_failed_turn_says_its_error_and_the_next_turn_clears_it() -> None:
    f = fold_of(WAKE, ERROR)
    s = state_of(f)
    assert (s.kind, s.error) == ("failed", "API Error: 500")
    assert describe(s) == "failed: API Error: 500"
    f.take(TYPED, 2.0)
    assert state_of(f).kind == "turning"


def test_a_permission_prompt_waits_on_the_running_tool_until_its_result() -> None:
    f = fold_of(WAKE, tool_use(7))
    f.hook(PERMISSION, 5.0)
    s = state_of(f)
    assert (s.kind, s.tool, s.input, s.since) == ("permission", "Bash", "echo 7", 5.0)
    assert describe(s, now=15.0) == "waiting for permission: Bash (echo 7) 10s"
    f.take(tool_result(7), 6.0)
    assert state_of(f).kind == "turning"


def test_a_prompt_notification_with_nothing_running_is_no_wait() -> None:
    """Answered before the hook's line was read: the transcript already shows the result."""
    f = fold_of(WAKE, tool_use(1), tool_result(1))
    f.hook(PERMISSION, 5.0)
    assert state_of(f).kind == "turning"


def test_a_fed_permission_request_wins_over_the_hooks() -> None:
    f = fold_of(WAKE, TEXT)
    s = state_of(f, permission=Pending(tool="Write", input="/etc/passwd", since=3.0))
    assert (s.kind, s.tool, s.input) == ("permission", "Write", "/etc/passwd")


def test_dialogs_stop_failure_and_session_end_come_from_hooks() -> None:
    f = fold_of(WAKE, TEXT, DONE)
    f.hook({"hook_event_name": "Notification", "notification_type": "idle_prompt", "message": "waiting"}, 1.0)
    assert state_of(f).kind == "idle", "idle_prompt: at the prompt, nothing asked"
    f.hook({"hook_event_name": "Notification", "notification_type": "elicitation_dialog",
            "message": "Pick one\nA or B"}, 2.0)  # fmt: skip
    assert (state_of(f).kind, state_of(f).dialog) == ("dialog", "Pick one")
    f.take(WAKE, 3.0)
    assert state_of(f).kind == "turning", "the session moved on past the dialog"
    f.hook({"hook_event_name": "StopFailure", "error": "rate_limit"}, 4.0)
    assert (state_of(f).kind, state_of(f).error) == ("failed", "rate_limit")
    f.take(WAKE, 4.5)
    f.hook(
        {
            "hook_event_name": "StopFailure",
            "error": "server_error",
            "last_assistant_message": "API Error: 500 x",
        },
        4.6,
    )
    assert (state_of(f).kind, state_of(f).error) == ("failed", "API Error: 500 x"), "(as 2.1.332 sends it)"
    f.hook({"hook_event_name": "SessionEnd", "reason": "prompt_input_exit"}, 5.0)
    assert (state_of(f).kind, state_of(f).exit) == ("dead", "session ended: prompt_input_exit")


def test_what_fleet_cannot_see_is_unknown_and_says_why() -> None:
    assert state_of(Fold(), problem="no transcript yet (…)", started=2.0).kind == "starting"
    at_prompt = state_of(Fold(), problem="no transcript yet (…)", started=2.0, ready=3.0)
    assert (at_prompt.kind, at_prompt.since) == ("idle", 3.0), "handshaken, nothing written: at its prompt"
    s = state_of(fold_of(WAKE, DONE), problem="cannot read /x: Permission denied")
    assert (s.kind, s.why) == ("unknown", "no transcript access: cannot read /x: Permission denied")
    old = state_of(fold_of({**WAKE, "version": "2.1.100"}))
    assert old.kind == "unknown" and "2.1.100 is older than 2.1.332" in old.why


# ---------------------------------------------------------------- properties

TRANSCRIPT_LINES = st.one_of(
    st.sampled_from([WAKE, TYPED, ENQUEUE, DEQUEUE, REMOVE, REQUEST, DONE, ERROR, INTERRUPT, ABSORBED, TEXT]),
    st.integers(0, 5).map(tool_use),
    st.integers(0, 5).map(tool_result),
    st.just({"type": "user"}),
    st.just({"type": "assistant", "message": "not a dict"}),
    st.just({"no": "type"}),
)
LINES = st.one_of(TRANSCRIPT_LINES, st.just(PERMISSION))  # (a hook event: fed to hook())
TERMINAL = (DONE, ERROR, INTERRUPT)


def check(f: Fold, line: dict[str, Any], taken_before: int) -> None:
    """What holds after every line, whatever came before."""
    s = state_of(f)
    assert s.kind in ("starting", "idle", "turning", "permission", "failed")
    assert f.queued >= 0 and f.taken >= 0
    if line in TERMINAL:
        assert not f.running and f.wait is None
        if taken_before == 0 or line is INTERRUPT:
            assert s.kind == ("failed" if line is ERROR else "idle"), (line, s)
    if s.kind == "permission":
        assert f.wait is not None and f.wait_tools & f.running.keys()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(LINES, min_size=60, max_size=140))
def test_the_fold_never_fails_and_every_turns_end_is_idle_or_failed(lines: list[dict[str, Any]]) -> None:
    """About 12,000 generated lines in all (120 transcripts)."""
    f = Fold()
    done = errors = 0
    for t, line in enumerate(lines):
        taken = f.taken
        if line is PERMISSION:
            f.hook(line, float(t))
        else:
            f.take(line, float(t))
        done += line is DONE
        errors += line is ERROR
        check(f, line, taken)
    assert (f.turns, f.failed_total) == (done, errors)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(TRANSCRIPT_LINES, min_size=20, max_size=120), st.data())
def test_reading_the_file_in_pieces_folds_the_same_as_at_once(
    tmp_path_factory: Any, lines: list[dict[str, Any]], data: st.DataObject
) -> None:
    home = tmp_path_factory.mktemp("home")
    sid = str(uuid.uuid4())
    path = home / ".claude" / "projects" / "-x" / f"{sid}.jsonl"
    path.parent.mkdir(parents=True)
    blob = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(blob)), max_size=8)))
    reader = MindReader(sid, {"HOME": str(home)})
    start = 0
    with path.open("wb") as f:
        for cut in [*cuts, len(blob)]:
            f.write(blob[start:cut])
            f.flush()
            start = cut
            reader.read()
    whole = fold_of(*lines)
    got = reader.fold
    fields = ("turns", "turning", "failed_total", "woken_by", "running", "queued", "taken", "woken_in")
    assert [getattr(got, k) for k in fields] == [getattr(whole, k) for k in fields]
    assert state_of(got).kind == state_of(whole).kind


def test_a_long_session_of_20000_lines_keeps_every_invariant() -> None:
    """The long horizon: one session, 20,000 lines of turns with tools, queued pushes, prompts,
    failures and interrupts; the invariants hold after every line and the counts add up."""
    rng = random.Random(25)
    f = Fold()
    done = errors = lines = n = 0
    while lines < 20_000:
        turn: list[dict[str, Any]] = [rng.choice([WAKE, TYPED, ENQUEUE])]
        if turn[0] is ENQUEUE:
            turn.append(DEQUEUE)
        for _ in range(rng.randint(0, 4)):
            n += 1
            turn.append(tool_use(n, rng.choice(["Bash", "Edit", "Read"])))
            if rng.random() < 0.2:
                turn.append(PERMISSION)
            if rng.random() < 0.1:
                turn += [ENQUEUE, rng.choice([DEQUEUE, REMOVE])]
            turn.append(tool_result(n))
        ends: list[dict[str, Any]] = [DONE, ERROR, INTERRUPT]
        end = rng.choices(ends, [0.85, 0.1, 0.05])[0]
        turn.append(end)
        for line in turn:
            taken = f.taken
            if line is PERMISSION:
                f.hook(line, float(lines))
                assert state_of(f).kind == "permission"
            else:
                f.take(line, float(lines))
            done += line is DONE
            errors += line is ERROR
            lines += 1
            check(f, line, taken)
    assert (f.turns, f.failed_total) == (done, errors)


def test_spawns_settings_add_the_state_hooks_beside_the_watch_hooks_on_any_transport(tmp_path: Path) -> None:
    """The state hooks go into every Claude Code launch (``--settings``), beside fleet's watch hook
    on the same events (an event's matchers add up), and alone on the channel transport."""
    from fleet.layouts import ResolvedProfile
    from fleet.paths import Paths
    from fleet.spawn import agent_argv, settings_json, state_hooks
    from fleet.watch import hook_settings

    paths = Paths(data=tmp_path / "d", state=tmp_path / "s", config=tmp_path / "c", logs=tmp_path / "l")
    mine = state_hooks(paths, "sid-1")
    watch = hook_settings("bob", "w", Path("/t/bob.token"), daemon="http://h:1", gate=True)
    merged = json.loads(settings_json(watch, mine))["hooks"]
    assert len(merged["StopFailure"]) == 2 and "fleet watch" in json.dumps(merged["StopFailure"][0])
    assert set(merged) == {"SessionStart", "Stop", "StopFailure", "Notification", "SessionEnd"}
    assert str(paths.channels / "hooks" / "sid-1.jsonl") in merged["Notification"][0]["hooks"][0]["command"]
    alone = settings_json(None, mine)
    argv = agent_argv(["claude"], ResolvedProfile(), "bob", "sid-1", "{}", resume=False, transport="channel",
                      hook_settings=alone)  # fmt: skip
    assert f"--settings={alone}" in argv


def test_a_dialog_read_from_the_pane_is_fed_in_and_wins() -> None:
    s = state_of(
        fold_of(WAKE, DONE), dialog="\n  Do you trust the files in this folder?\n 1. Yes", dialog_since=9.0
    )
    assert (s.kind, s.dialog, s.since) == ("dialog", "Do you trust the files in this folder?", 9.0)
    assert describe(s, now=10.0) == "waiting at a dialog: Do you trust the files in this folder? 1s"


def test_a_resumed_session_starts_at_its_prompt_whatever_its_history_left_open() -> None:
    """A process killed mid-turn, or after a failed turn: the resumed one is idle, not turning or failed."""
    for history in ((WAKE, tool_use(1)), (WAKE, ERROR), (ENQUEUE, DEQUEUE)):
        f = fold_of(*history)
        assert state_of(f).kind in ("turning", "failed")
        f.restarted()
        assert state_of(f, ready=5.0).kind == "idle", history
        f.take(WAKE, 6.0)
        assert state_of(f).kind == "turning"
