"""Supervision's rules without tmux or a daemon: the respawn ladder (5, 15, 45, 45 minutes, starting over
after a post) and word-bounded or bracketed mentions."""

from __future__ import annotations

import pytest

from fleet import errors
from fleet.delivery.rules import mentions
from fleet.supervise import (
    LADDER,
    Ladder,
)


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_the_ladder_waits_5_15_45_45_minutes_and_starts_over_after_a_post() -> None:
    clock = FakeClock()
    ladder = Ladder(clock=clock)
    assert LADDER == (300.0, 900.0, 2700.0)
    assert ladder.next_due_in() is None

    def waited(name: str) -> float:
        """Let ``name`` die now; the seconds until it is due, checked one second short of it."""
        assert ladder.dead(name) and not ladder.dead(name)  # the same death is noticed once
        wait = ladder.remaining(name)
        assert wait is not None and ladder.next_due_in() == wait
        clock.t += wait - 1
        assert not ladder.due(name)
        clock.t += 1
        assert ladder.due(name) and ladder.next_due_in() == 0.0
        ladder.respawned(name)
        return wait

    assert [waited("bob") for _ in range(5)] == [300, 900, 2700, 2700, 2700]
    ladder.posted("bob")
    assert waited("bob") == 300
    assert waited("bob") == 900
    # a pane seen alive again stops the wait but keeps the rung until it posts
    ladder.dead("bob")
    ladder.alive("bob")
    assert ladder.remaining("bob") is None and ladder.delay("bob") == 2700
    # participants climb their own ladders
    assert waited("carol") == 300
    with pytest.raises(errors.UsageError):
        Ladder(rungs=())


def test_mentions_are_word_bounded_or_bracketed() -> None:
    assert mentions("bob, are you there?", "bob") and mentions("ask [[bob]]", "bob")
    assert mentions("Bob: back?", "bob")
    assert not mentions("bobby and bob-2 and robob", "bob")
