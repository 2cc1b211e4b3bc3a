"""fleet.ids: the digest that names state files and gate sockets is SHA-256, whichever module computes it."""

from __future__ import annotations

import hashlib
import uuid
from types import SimpleNamespace
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet import errors, ids
from fleet.ids import _order, _text, digest


@given(st.text())
def test_digest_is_hashlibs_sha256_of_the_utf8_text(text: str) -> None:
    """Names made from it (a channel's state file, its gate's socket) stay what earlier versions made,
    though a channel no longer loads hashlib (OpenSSL) to compute it."""
    assert digest(text) == hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------- the daemon's ids (IdMinter)

# (milliseconds up to a million before the field's end in the year 10889: room for the ids after)
V7 = st.integers(0, (1 << 48) - 1 - (1 << 20)).flatmap(
    lambda ms: st.integers(0, (1 << 74) - 1).map(lambda r: _text((ms << 74) | r))
)


@settings(deadline=None)
@given(st.lists(V7, min_size=2, max_size=20))
def test_an_ids_text_and_its_order_number_sort_alike_and_round_trip(texts: list[str]) -> None:
    for t in texts:
        u = uuid.UUID(t)
        assert u.version == 7 and u.variant == uuid.RFC_4122 and _text(_order(t)) == t
    assert sorted(texts) == sorted(texts, key=_order)


@settings(deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("mint"), st.integers(-5, 5), st.binary(min_size=10, max_size=10)),
            st.tuples(st.just("observe"), V7, st.just(b"")),
        ),
        max_size=60,
    )
)
def test_ids_strictly_increase_and_carry_the_clocks_millisecond(
    steps: list[tuple[str, object, bytes]],
) -> None:
    """Whatever the clock does (the same millisecond many times, steps back) and whatever the store's
    largest id is said to be: every id exceeds every id before it and every id observed, and its
    millisecond is the clock's, or one past the last id's when the clock has not moved past it."""
    clock = {"ms": 1_700_000_000_000}
    rand = {"bytes": b"\0" * 10}
    fake_time = SimpleNamespace(time_ns=lambda: clock["ms"] * 1_000_000 + 999_999)
    fake_os = SimpleNamespace(urandom=lambda n: rand["bytes"][:n])
    with patch.object(ids, "time", fake_time), patch.object(ids, "os", fake_os):
        m = ids.IdMinter()
        floor = ""
        for op, arg, noise in steps:
            if op == "observe":
                assert isinstance(arg, str)
                m.observe(arg)
                floor = max(floor, arg)
                continue
            assert isinstance(arg, int)
            clock["ms"] += arg
            rand["bytes"] = noise
            made = m.mint()
            assert made > floor and uuid.UUID(made).version == 7
            ms = _order(made) >> 74
            before = _order(floor) >> 74 if floor else -1
            assert ms == max(clock["ms"], before + 1)
            floor = made


def test_a_burst_of_ids_each_has_a_millisecond_of_its_own() -> None:
    """Minted faster than one a millisecond, each id still has its own first 13 characters: the
    short id the CLI shows names it alone (one a millisecond from the clock, as uuid6 counted)."""
    m = ids.IdMinter()
    made = [m.mint() for _ in range(5_000)]
    assert made == sorted(set(made))
    assert len({x[:13] for x in made}) == len(made)


def test_a_largest_id_that_is_not_uuid7_text_is_a_storage_fault_naming_it() -> None:
    m = ids.IdMinter()
    with pytest.raises(errors.StorageFault, match=r"'zz-by-hand'.*edited by hand"):
        m.observe("zz-by-hand")
    m.observe("01a249a0-f2c9-7324-8ccd-38507f38f538")  # one fleet mints is taken as before
    assert m.mint() > "01a249a0-f2c9-7324-8ccd-38507f38f538"
