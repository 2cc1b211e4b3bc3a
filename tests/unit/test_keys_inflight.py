"""Requests with the same Idempotency-Key never run at once (fleet.store.keys.Keys.running): a second
one waits for the first to end, then runs (and would find its key); one still waiting after its
patience is a Conflict; other keys never wait. A real store; threads, not a daemon."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet import errors
from fleet.store import Store
from fleet.store.keys import Claim, Keys


@pytest.fixture
def keys(tmp_path: Path) -> Iterator[Keys]:
    s = Store(tmp_path / "fleet.sqlite3")
    try:
        yield s.keys
    finally:
        s.close()


def claim(key: str) -> Claim:
    return Claim("alice|w|", key, "fp")


def test_a_second_request_with_the_key_waits_for_the_first_then_runs(keys: Keys) -> None:
    first_in, first_out, second_in = threading.Event(), threading.Event(), threading.Event()
    order: list[str] = []

    def first() -> None:
        with keys.running(claim("k")):
            first_in.set()
            first_out.wait(5)
            order.append("first ends")

    def second() -> None:
        with keys.running(claim("k"), wait=10):
            order.append("second runs")
            second_in.set()

    a = threading.Thread(target=first)
    a.start()
    assert first_in.wait(5)
    b = threading.Thread(target=second)
    b.start()
    assert not second_in.wait(0.3)  # still waiting while the first runs
    with keys.running(claim("other"), wait=0):  # another key is let in at once
        pass
    first_out.set()
    a.join(5)
    b.join(5)
    assert order == ["first ends", "second runs"]


def test_one_still_waiting_after_its_patience_is_a_conflict(keys: Keys) -> None:
    with keys.running(claim("k")):
        started = time.monotonic()
        got: list[BaseException] = []

        def late() -> None:
            try:
                with keys.running(claim("k"), wait=0.2):
                    pass
            except errors.Conflict as exc:
                got.append(exc)

        t = threading.Thread(target=late)
        t.start()
        t.join(5)
        assert len(got) == 1 and "still running" in str(got[0])
        assert time.monotonic() - started >= 0.2
    with keys.running(claim("k"), wait=0):  # ended: let in at once, nothing left behind
        pass


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from("abc"), min_size=1, max_size=12))
def test_runs_of_one_key_never_overlap_whatever_the_threads(keys: Keys, plan: list[str]) -> None:
    spans: dict[str, list[tuple[float, float]]] = {}
    lock = threading.Lock()

    def run(key: str) -> None:
        with keys.running(claim(key), wait=10):
            began = time.monotonic()
            time.sleep(0.002)
            ended = time.monotonic()
        with lock:
            spans.setdefault(key, []).append((began, ended))

    threads = [threading.Thread(target=run, args=(k,)) for k in plan]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sum(len(v) for v in spans.values()) == len(plan)
    for runs in spans.values():
        runs.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(runs))
    assert keys._inflight == {}
