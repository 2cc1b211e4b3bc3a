"""The core's seams (fleet/seams.py) and who loads the features onto them (fleet/features.py).

A seam keeps its entries in order, a name added again replaces, a lazy entry (``module:attr``) is
imported only when the seam is first used; the hold-backs of several features hold a wavelet while
any of them holds it. The channel's entry point loads the features that plug into the channel and
none of the others (measured on a real ``python -X importtime -m fleet channel`` run).
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet import errors, seams
from fleet.client import Client
from fleet.paths import get_paths
from fleet.records.budgets import Budget


def test_a_seam_keeps_order_replaces_by_name_and_removes() -> None:
    seam: seams.Seam[int] = seams.Seam("test")
    assert list(seam) == [] and seams.first(seam) is None
    seam.add("a", 1)
    seam.add("b", 2)
    seam.add("a", 3)  # the same module imported again does not plug in twice
    assert list(seam) == [3, 2] and seam.names() == ["a", "b"] and len(seam) == 2
    seam.remove("a")
    seam.remove("nothing")
    assert list(seam) == [2]


def test_a_lazy_entry_is_imported_when_the_seam_is_first_used() -> None:
    seam: seams.Seam[object] = seams.Seam("test")
    seam.lazy("json", "json:dumps")
    import json

    assert list(seam) == [json.dumps]
    assert seam._entries["json"] is json.dumps  # resolved once, kept


class _Holds:
    def __init__(self, held: set[str]) -> None:
        self.held = frozenset(held)
        self.started = 0

    def __call__(self, labels: Mapping[str, str], given: list[Budget] | None = None) -> frozenset[str]:
        return self.held & frozenset(labels)

    def start(self) -> None:
        self.started += 1


def _factory(hb: _Holds) -> seams.HoldBackFactory:
    return lambda _who: hb


def _no_client() -> Client:
    raise AssertionError("a hold-back under test asks no daemon")


@given(st.lists(st.sets(st.sampled_from("abcdef")), max_size=4), st.sets(st.sampled_from("abcdef")))
def test_hold_backs_hold_a_wavelet_while_any_holds_it(parts: list[set[str]], labels: set[str]) -> None:
    saved = dict(seams.hold_backs._entries)
    made = [_Holds(p) for p in parts]
    try:
        seams.hold_backs._entries.clear()
        for i, hb in enumerate(made):
            seams.hold_backs.add(f"f{i}", _factory(hb))
        who = seams.Participant(_no_client, "w", "alice", "s", get_paths(), print)
        got = seams.hold_back_for(who)
        if not made:
            assert got is None  # no feature: the engine asks nothing
            return
        assert got is not None
        got.start()
        assert all(hb.started == 1 for hb in made)
        expected = frozenset().union(*parts) & frozenset(labels)
        assert got({w: w for w in labels}) == expected
    finally:
        seams.hold_backs._entries.clear()
        seams.hold_backs._entries.update(saved)


def test_the_cli_loads_every_built_in_onto_its_seam() -> None:
    import fleet.cli  # noqa: F401  (loads the features, as `fleet` does)

    assert "fleet.budgets" in seams.spawn_checks.names()
    assert "fleet.budgets" in seams.hold_backs.names()
    assert "fleet.permissions" in seams.launch_settings.names()
    assert "fleet.resident.plug" in seams.prompt_parts.names()
    assert "fleet.resident.plug" in seams.fork_spawners.names()
    assert "fleet.worktrees" in seams.workspaces.names()
    assert {"fleet.budgets", "fleet.usage", "fleet.worktrees"} <= set(seams.status_columns.names())


def test_a_worktree_asked_for_with_no_planner_loaded_is_refused_by_name() -> None:
    """Spawn never runs a pane in the wrong folder because the worktrees feature is not plugged in."""
    from fleet.layouts import parse
    from fleet.models import Wave
    from fleet.spawn import Spawner

    layout = parse('[participants.alice]\nworktree = "participant"\n', "test.toml", "test")
    wave = Wave(id="w1", name="w", root_id="r1", created_at="", wavelets=[])
    spawner = Spawner.__new__(Spawner)  # (_plan reads the layout and the seams only)
    saved = dict(seams.workspaces._entries)
    try:
        seams.workspaces._entries.clear()
        with pytest.raises(errors.UsageError, match=r"alice's profile asks for a worktree \(participant\)"):
            spawner._plan(wave, layout, "alice", None)
        assert spawner._plan(wave, layout, "bob", None) is None  # no worktree asked: nothing to plan
    finally:
        seams.workspaces._entries.update(saved)
