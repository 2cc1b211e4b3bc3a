"""The notifier's parks (fleet.daemon.wakes): a bump wakes exactly the parks on a key it touched
(or on everything), never one that was disarmed, and a park armed after a commit it did not see
refuses to wait."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.daemon.wakes import Notifier, Parked

KEYS = ["a", "b", "c", "d"]

keysets = st.one_of(st.none(), st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True))
steps = st.lists(
    st.one_of(
        st.tuples(st.just("park"), keysets),
        st.tuples(st.just("bump"), st.lists(st.sampled_from(KEYS), max_size=3, unique=True)),
        st.tuples(st.just("disarm"), st.integers(0, 30)),
    ),
    max_size=40,
)


@settings(max_examples=500)
@given(steps=steps)
def test_a_bump_wakes_exactly_the_parks_on_what_it_touched(steps: list[tuple[str, object]]) -> None:
    n = Notifier()
    woken: list[int] = []
    armed: dict[int, tuple[Parked, list[str] | None]] = {}  # park number -> (park, keys)
    expected: list[int] = []
    made = 0
    for op, arg in steps:
        if op == "park":
            keys = arg if arg is None else list(arg)  # type: ignore[call-overload]
            park = n.park(n.seen(keys), 30.0, keys)
            k = made
            made += 1
            assert park.arm(lambda k=k: woken.append(k))  # type: ignore[misc]
            armed[k] = (park, keys)
        elif op == "bump":
            touched = list(arg)  # type: ignore[call-overload]
            due = [
                k
                for k, (_p, keys) in armed.items()
                if keys is None or not touched or set(keys) & set(touched)
            ]
            before = len(woken)
            n.bump(*touched)
            assert sorted(woken[before:]) == sorted(due)
            for k in due:  # the loop disarms a park as it resumes it
                armed.pop(k)[0].disarm()
            expected += due
        elif op == "disarm" and armed:
            k = sorted(armed)[int(arg) % len(armed)]  # type: ignore[call-overload]
            armed.pop(k)[0].disarm()
        assert n.parked == n.settled == len(armed)
    assert sorted(woken) == sorted(expected)


def test_a_park_woken_and_not_yet_resumed_is_not_settled() -> None:
    n = Notifier()
    parks = [n.park(n.seen(keys), 30.0, keys) for keys in (["a"], ["b"], None)]
    for p in parks:
        assert p.arm(lambda: None)
    assert n.parked == n.settled == 3
    n.bump("a")  # wakes the park on a and the one on everything; the loop has not resumed them
    assert (n.parked, n.settled) == (3, 1)
    parks[0].disarm()
    parks[2].disarm()
    assert n.parked == n.settled == 1


def test_a_park_on_keys_that_moved_since_it_was_seen_does_not_wait() -> None:
    n = Notifier()
    seen = n.seen(["a"])
    n.bump("b")
    assert n.park(seen, 1.0, ["a"]).arm(lambda: None)  # b is not a's: still current
    seen = n.seen(["a"])
    n.bump("a")
    assert not n.park(seen, 1.0, ["a"]).arm(lambda: None)
    assert not n.park(n.seq - 1, 1.0, None).arm(lambda: None)  # on everything: any commit


def test_close_wakes_every_park_and_refuses_new_ones() -> None:
    n = Notifier()
    woken: list[str] = []
    for keys in (["a"], ["b", "c"], None):
        assert n.park(n.seen(keys), 5.0, keys).arm(lambda k=str(keys): woken.append(k))  # type: ignore[misc]
    n.close()
    assert sorted(woken) == sorted(["['a']", "['b', 'c']", "None"])
    assert not n.park(n.seen(["a"]), 5.0, ["a"]).arm(lambda: None)
