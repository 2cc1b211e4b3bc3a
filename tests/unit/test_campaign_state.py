"""Campaigns without git or sessions: STATE.md round trips and names a bad line, the spawn table, the three
guards, what a settled session did, the shipped prompts."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from fleet.campaign import machine, prompts
from fleet.campaign import state as st


def test_state_md_round_trips_and_keeps_the_table_and_its_surroundings(tmp_path: Path) -> None:
    text = (
        "---\ncampaign_id: x-2026-01-01\nplan_source: PLAN.md\nexecutor_agent: caveman\ncurrent_wave: 1\n"
        "wave_status: failed   # an agent's comment\nfailure_kind: transient\nretry_count: 2\n"
        "total_waves: 2\n"
        'user_question: "a: b"\nactive_session_id: null\nmy_note: kept\n---\n\nintro line\n\n'
        "| # | Title | Status | Owner | Session | Commit | Notes |\n|---|---|---|---|---|---|---|\n"
        "| 0 | A | complete | ann | s1 | abc123 | ok |\n| 1 | B | failed | bob | s2 |  | flaky |\n\ntrailer\n"
    )
    s = st.parse(text)
    assert (s.current_wave, s.wave_status, s.retry_count, s.user_question) == (1, "failed", 2, "a: b")
    assert s.extra == {"my_note": "kept"} and s.row(1).get("Owner") == "bob"
    out = st.render(s)
    again = st.parse(out)
    assert again.cursor() == s.cursor() and again.headers == s.headers
    assert [r.cells for r in again.rows] == [r.cells for r in s.rows]
    assert out.index("intro line") < out.index("| # | Title | Status | Owner |") < out.index("trailer")
    assert "my_note: kept" in out


@pytest.mark.parametrize(
    ("line", "bad", "says"),
    [
        (8, "wave_status: runing", "wave_status: 'runing' is not one of"),
        (7, "current_wave: two", "current_wave: expected a whole number"),
        (3, "not yaml at all", "expected `key: value`"),
        (9, 'user_question: "open', "not closed"),
    ],
)
def test_a_state_md_that_does_not_parse_names_its_line(line: int, bad: str, says: str) -> None:
    lines = st.render(st.State(campaign_id="x", total_waves=1)).splitlines()
    lines[line - 1] = bad
    with pytest.raises(st.StateError) as exc:
        st.parse("\n".join(lines))
    assert exc.value.message.startswith(f"STATE.md line {line}: ") and says in exc.value.message


def S(**kw: object) -> st.State:
    return st.State(campaign_id="x", total_waves=3, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("state", "spawn"),
    [
        (S(), "verifier"),  # the initial sanity check
        (S(verify_count=1), "executor"),
        (S(current_wave=1), "executor"),
        (S(verify_count=1, wave_status="failed", retry_count=2), "executor"),
        (S(verify_count=1, wave_status="failed", retry_count=3), "verifier"),
        (S(verify_count=1, wave_status="plan_undoable"), "verifier"),
        (S(verify_count=1, wave_status="awaiting_user"), None),
        (S(verify_count=1, wave_status="all_complete"), None),
        (S(verify_count=1, wave_status="running"), None),
    ],
)
def test_the_spawn_table(state: st.State, spawn: str | None) -> None:
    assert machine.decide(state).spawn == spawn


def test_the_three_guards() -> None:
    busy = machine.decide(S(verify_count=1, active_session_id="abc", active_session_kind="executor"))
    assert busy.spawn is None and "active" in busy.why
    cancelled = machine.decide(S(verify_count=1, wave_status="failed", failure_kind="cancelled"))
    assert cancelled.spawn is None and "clear" in cancelled.why
    capped = S(verify_count=3, wave_status="plan_undoable")
    d = machine.decide(capped)
    assert d.spawn is None and d.escalate
    machine.escalate(capped)
    assert capped.wave_status == "awaiting_user" and capped.user_question


def test_what_a_settled_session_did() -> None:
    before = S(verify_count=1, wave_status="running")
    assert (
        machine.outcome("executor", before, S(verify_count=1, wave_status="running"), pane_exited=True)
        == "crashed"
    )
    assert machine.outcome("executor", before, S(current_wave=1), pane_exited=False) == "complete"
    assert machine.outcome("executor", before, S(wave_status="failed"), pane_exited=False) == "failed"
    assert machine.outcome("executor", before, S(wave_status="awaiting_user"), pane_exited=False) == "paused"
    vb = S(verify_count=1, wave_status="plan_undoable")
    assert machine.outcome(
        "verifier", vb, S(verify_count=1, wave_status="plan_undoable"), pane_exited=True
    ) == ("verifier_crashed")
    assert machine.outcome("verifier", vb, S(verify_count=2), pane_exited=False) == "verified"


def test_the_prompts_are_shipped_in_the_package() -> None:
    for name in prompts.NAMES:
        assert Path(prompts.path(name)).is_file()
    executor = prompts.text("executor")
    phrases = [
        "WAVE COMPLETE",
        "WAVE FAILED",
        "PLAN UNDOABLE",
        "WAVES DONE",
        "USER QUESTION:",
        "WAITING FOR USER:",
        "UNEXPECTED RESPAWN:",
        "wave N (failed):",
        "wave N (paused): user question",
    ]
    for phrase in phrases:  # fmt: skip
        assert phrase in executor, phrase
    verifier = prompts.text("verifier")
    for phrase in ("PLAN OK", "PLAN PATCHED", "PLAN REWRITTEN", "USER QUESTION:", "wave verify:"):
        assert phrase in verifier, phrase


def _row(n: str, title: str, status: str, commit: str) -> st.Row:
    return st.Row({"#": n, "Title": title, "Status": status, "Session": "", "Commit": commit, "Notes": ""})


VALID = st.render(
    st.State(
        campaign_id="c-2026-01-01", plan_source="PLAN.md", executor_agent="executor", current_wave=1,
        wave_status="failed", failure_kind="transient", retry_count=1, verify_count=1, total_waves=3,
        session_count=3, created="2026-01-01", last_updated="2026-01-02",
        rows=[_row("0", "A", "complete", "abc"), _row("1", "B", "failed", ""), _row("2", "C", "pending", "")],
    )
)  # fmt: skip


LINES = VALID.splitlines()


values = hs.one_of(
    hs.integers(-3, 12).map(str),
    hs.sampled_from(["pending", "running", "complete", "failed", "plan_undoable", "awaiting_user",
                     "all_complete", "transient", "undoable", "crash", "cancelled", "armed", "idle",
                     "executor", "verifier", "null", '""', "'x'", '"open', "x # c", ""]),
    hs.text(max_size=8),
)  # fmt: skip


cursor_line = hs.builds(lambda k, v: f"{k}: {v}", hs.sampled_from([*st.FIELDS, "extra_key"]), values)


row_line = hs.builds(
    lambda n, status, extra: f"| {n} | T | {status} | s | c | n |" + extra,
    hs.integers(-1, 4),
    hs.sampled_from([*sorted(st.ROW_STATUSES), "done", ""]),
    hs.sampled_from(["", " x |"]),
)


edit = hs.tuples(
    hs.sampled_from(["replace", "insert", "delete"]),
    hs.integers(0, len(LINES) + 1),
    hs.one_of(cursor_line, row_line, hs.text(max_size=12), hs.just("---")),
)


@settings(max_examples=1000, deadline=None)
@given(
    edits=hs.lists(edit, min_size=1, max_size=3), junk=hs.one_of(hs.none(), hs.binary(min_size=1, max_size=2))
)
def test_a_hand_edit_is_refused_naming_its_line_or_parses_into_a_consistent_state(
    edits: list[tuple[str, int, str]], junk: bytes | None
) -> None:
    lines = list(LINES)
    for how, at, text in edits:
        at = min(at, len(lines))
        if how == "replace" and at < len(lines):
            lines[at] = text
        elif how == "insert":
            lines.insert(at, text)
        elif how == "delete" and at < len(lines):
            del lines[at]
    data = "\n".join(lines).encode()
    if junk is not None:
        data = data[: len(data) // 2] + junk + data[len(data) // 2 :]
    try:
        s = st.parse(st.decode(data))
    except st.StateError as exc:
        assert exc.exit_code == 2
        head = exc.message.split(":", 1)[0]
        assert head.startswith("STATE.md line "), exc.message
        assert 1 <= int(head.removeprefix("STATE.md line ")) <= data.count(b"\n") + 2, exc.message
        return
    st.check(s)
    again = st.parse(st.render(s))
    assert again.cursor() == s.cursor() and again.extra == s.extra and again.headers == s.headers
    assert [r.cells for r in again.rows] == [r.cells for r in s.rows]
    assert st.render(again) == st.render(s)


@pytest.mark.parametrize("text", [VALID])
def test_the_valid_file_parses(text: str) -> None:
    st.check(st.parse(text))
