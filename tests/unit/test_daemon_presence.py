"""The presence book (fleet.daemon.presence): it keeps the PresenceRow it answers with, and judges
state and agent against the clock at each read."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fleet.daemon.presence import PresenceBook
from fleet.models import AgentState, PresenceReport, PresenceRow


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_book_holds_presence_rows_and_answers_with_copies_judged_now() -> None:
    clock = Clock()
    book = PresenceBook(ping_ttl=10, clock=clock)
    turning = AgentState(kind="turning")
    book.report(
        "w", PresenceReport(participant="a", event="delivered", count=2, session_id="s1", agent=turning)
    )
    (row,) = book.rows("w", ["a"])
    assert isinstance(row, PresenceRow) and (row.state, row.agent, row.delivered) == ("live", turning, 2)
    # no mirror of the record (there was a _Seen with the same fields): the book keeps PresenceRows
    assert [type(kept) for kept in book._rows.values()] == [PresenceRow]
    row.delivered = 99  # a copy: the book is not changed through it
    assert book.rows("w", ["a"])[0].delivered == 2
    clock.t += 11
    (row,) = book.rows("w", ["a"])
    assert row.state == "gone" and row.agent is not None and row.agent.kind == "unknown"
    assert row.agent.why.endswith("silent for 10s, last turning") and row.agent.since == 1010.0
    book.report("w", PresenceReport(participant="a", event="gone"))
    (row,) = book.rows("w", ["a"])
    assert row.state == "gone" and row.agent is not None and "said gone" in row.agent.why
    assert row.agent.since == clock.t
    book.report("w", PresenceReport(participant="a", event="ping", session_id="s2"))
    (row,) = book.rows("w", ["a"])
    assert row.state == "live" and row.session_id == "s2" and row.agent is not None
    assert row.agent.why == "its channel reports no state (an older fleet)"  # another session: forgotten
    assert book.rows("w", ["nobody"])[0].agent == AgentState(
        kind="unknown", why="no channel has reported to this daemon"
    )


@given(st.lists(st.tuples(st.sampled_from(["ping", "delivered", "gone"]), st.floats(0, 30)), max_size=30))
def test_state_is_live_exactly_while_the_last_report_was_a_ping_within_the_ttl(
    steps: list[tuple[str, float]],
) -> None:
    clock = Clock()
    book = PresenceBook(ping_ttl=10, clock=clock)
    last: tuple[str, float] | None = None
    delivered = 0
    for event, wait in steps:
        book.report("w", PresenceReport(participant="a", event=event, count=1))  # type: ignore[arg-type]
        last = (event, clock.t)
        delivered += event == "delivered"
        clock.t += wait
        (row,) = book.rows("w", ["a"])
        live = last[0] != "gone" and clock.t - last[1] <= 10
        assert row.state == ("live" if live else "gone")
        assert row.delivered == delivered
        assert row.agent is not None and (row.agent.kind == "unknown") is True
