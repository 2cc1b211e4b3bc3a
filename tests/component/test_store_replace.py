"""Replacing a blip keeps its author and records who replaced it (docs/design.md §1): the author
is never locked out of her own blip, and the log replays to the same state."""

from __future__ import annotations

from pathlib import Path

from fleet import errors
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.delivery import Delivery, DeliveryState
from fleet.store import OPERATOR_PRINCIPAL, replay
from fleet.store.schema import connect, dump_tables


def test_bob_replaces_alices_blip_she_stays_its_author_and_can_replace_it(
    daemon: Daemon, operator: Client, tmp_path: Path
) -> None:
    operator.create_wave("w", ["alice", "bob"])
    main = operator.resolve("w/main").id
    alice = Client(daemon.url, operator.mint_token("w", "alice").token)
    bob = Client(daemon.url, operator.mint_token("w", "bob").token)
    with alice, bob:
        first = alice.post(main, "the plan: A")
        # bob, as a participant, may not replace alice's blip (only its author or the operator)
        try:
            bob.replace(first.id, "the plan: B")
            raise AssertionError("bob replaced alice's blip with his own token")
        except errors.Forbidden as exc:
            assert "alice" in exc.message
        # the operator replaces it speaking as bob: alice keeps it, bob is recorded as its writer
        by_bob = operator.replace(first.id, "the plan: B", as_="bob")
        assert (by_bob.author, by_bob.replaced_by, by_bob.replaces) == ("alice", "bob", first.id)
        # alice can still replace her blip (before: "only 'bob' (its author) … may replace")
        mine = alice.replace(by_bob.id, "the plan: A, final")
        assert (mine.author, mine.replaced_by, mine.replaces) == ("alice", "alice", by_bob.id)
        with_history = alice.read(main, history=True).blips
        versions = [b for b in with_history if b.kind == "message"]
        assert [(b.text, b.author, b.replaced_by) for b in versions] == [
            ("the plan: A", "alice", None),
            ("the plan: B", "alice", "bob"),
            ("the plan: A, final", "alice", "alice"),
        ]
        assert [b.text for b in alice.read(main).blips if b.kind == "message"] == ["the plan: A, final"]
        assert [b.writer for b in versions] == ["alice", "bob", "alice"]
        # delivery steps over what a participant wrote itself, not what was written over its blip
        for name, own in (("alice", [True, False, True]), ("bob", [False, True, False])):
            core = Delivery(name, DeliveryState(daemon=daemon.url, wave="w", participant=name))
            assert [core.own(b) for b in versions] == own, name
    # the log replays to the same state, replacer included
    store = daemon.store
    assert store is not None
    replay(store.path, tmp_path / "rebuilt.sqlite3")
    rebuilt = connect(tmp_path / "rebuilt.sqlite3")
    try:
        assert dump_tables(rebuilt) == store.dump(OPERATOR_PRINCIPAL)
    finally:
        rebuilt.close()
