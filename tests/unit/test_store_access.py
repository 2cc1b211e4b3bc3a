"""The access rules inside one read (fleet.store.access): a leave, a post or a revocation that lands while
a read or a feed is being assembled never reaches the reader."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pg import StoreAt

from fleet import errors
from fleet.models import FeedWavelet
from fleet.store import OPERATOR_PRINCIPAL, Principal, Store


@pytest.fixture
def store_world(store_at: StoreAt) -> Iterator[tuple[Store, Principal, str, str]]:
    """A store with wave w (alice), a private ``room`` with alice; alice's principal from her token."""
    store = Store(store_at("s.sqlite3"))
    store.create_wave(OPERATOR_PRINCIPAL, "w", ["alice"])
    room = store.fork(OPERATOR_PRINCIPAL, "w/main", "room", ["alice"], private=True)
    store.mint_token(OPERATOR_PRINCIPAL, "w", "alice", "alice-secret")
    alice = store.authenticate("alice-secret")
    assert alice is not None
    head = store.read(alice, room.id)[-1].id
    yield store, alice, room.id, head
    store.close()


def test_a_leave_and_a_post_landing_inside_a_read_never_reach_the_reader(
    store_world: tuple[Store, Principal, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the read's visibility check and its query, alice is removed and a blip posted (on
    another connection, as another request would): the read answers from the state it checked."""
    store, alice, room, head = store_world
    check = store.access.wavelet_by_id
    late: list[str] = []

    def check_then_race(who: Principal, wavelet_id: str) -> object:
        row = check(who, wavelet_id)
        if not late:
            store.leave(OPERATOR_PRINCIPAL, room, "alice")
            late.append(store.post(OPERATOR_PRINCIPAL, room, "after alice left").id)
        return row

    monkeypatch.setattr(store.access, "wavelet_by_id", check_then_race)
    got = store.read_resolved(alice, room, after=head)
    assert late and late[0] not in [b.id for b in got]


def test_a_leave_and_a_post_landing_inside_a_feed_never_reach_the_one_who_left(
    store_world: tuple[Store, Principal, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import fleet.store

    store, alice, room, head = store_world
    late: list[str] = []
    real = FeedWavelet

    def membership_then_race(**kw: Any) -> object:  # between the roster query and the blips'
        if not late:
            store.leave(OPERATOR_PRINCIPAL, room, "alice")
            late.append(store.post(OPERATOR_PRINCIPAL, room, "after alice left").id)
        return real(**kw)

    monkeypatch.setattr(fleet.store, "FeedWavelet", membership_then_race)
    feed = store.feed(alice, "w", "alice", {room: head})
    assert late and late[0] not in [b.id for b in feed.blips]


def test_a_token_revoked_inside_a_read_is_refused(
    store_world: tuple[Store, Principal, str, str],
) -> None:
    store, alice, room, head = store_world
    store.revoke_tokens(OPERATOR_PRINCIPAL, wave="w", participant="alice")
    with pytest.raises(errors.Unauthorized):
        store.read_resolved(alice, room, after=head)
    with pytest.raises(errors.Unauthorized):
        store.feed(alice, "w", "alice", {})
