"""Campaigns without git or sessions: STATE.md round trips and names a bad line, the spawn table, the three
guards, what a settled session did, the shipped prompts."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.campaign import machine, prompts
from fleet.campaign import state as st


def test_state_md_round_trips_and_keeps_the_table_and_its_surroundings(tmp_path: Path) -> None:
    text = (
        "---\ncampaign_id: x-2026-01-01\nplan_source: PLAN.md\nexecutor_agent: caveman\ncurrent_wave: 1\n"
        "wave_status: failed   # an agent's comment\nfailure_kind: transient\nretry_count: 2\n"
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
