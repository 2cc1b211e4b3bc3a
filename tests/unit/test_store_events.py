"""The event log's records (fleet.store.events): one declaration per noun with the reads' records,
and payload text that is stable for any event (encode, parse, encode again: the same bytes)."""

from __future__ import annotations

import importlib
import json
import pkgutil
import typing
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recordgen import records

import fleet
from fleet import wire
from fleet.models import Blip
from fleet.store import events


def _record_classes() -> dict[str, list[str]]:
    """Every record-like class fleet defines (a msgspec Struct, a pydantic model, or anything with
    annotated fields and no methods of its own beyond properties), by name: where each is defined."""
    where: dict[str, list[str]] = defaultdict(list)
    for m in pkgutil.walk_packages(fleet.__path__, "fleet."):
        module = importlib.import_module(m.name)
        for name, obj in vars(module).items():
            if not isinstance(obj, type) or obj.__module__ != m.name or name.startswith("_"):
                continue
            if issubclass(
                obj, (wire.Value, wire.FrozenValue)
            ):  # in-process values (what were dataclasses), not records
                continue
            kinds = {k.__module__.partition(".")[0] for k in obj.__mro__[1:]}
            if kinds & {"msgspec", "pydantic"} or hasattr(obj, "__record_fields__"):
                where[name].append(m.name)
    return where


def test_no_two_records_share_a_name() -> None:
    """One declaration per noun: a record's name says which one it is (there were two
    ``BudgetReached``: the reply to a channel's report, and the event)."""
    twice = {name: mods for name, mods in _record_classes().items() if len(mods) > 1}
    assert twice == {}


@pytest.mark.parametrize(
    ("event", "carries"),
    [
        (events.BlipPosted, Blip),
        (events.BlipReplaced, Blip),
        (events.WaveCreated, list[Blip]),
        (events.BudgetReached, Blip | None),
    ],
)
def test_events_carry_the_blip_the_reads_answer_with(event: type, carries: object) -> None:
    """No event-only copy of a blip: the ``blip.*`` events hold :class:`fleet.models.Blip`."""
    hints = typing.get_type_hints(event)
    assert hints["blip" if "blip" in hints else "blips"] == carries


def test_events_that_are_a_record_with_a_type_are_that_record() -> None:
    """A seat claim, a session record and a budget rule are declared once and logged as they are read."""
    from fleet.models import SeatClaim, SessionRecord
    from fleet.records.budgets import BudgetRule

    assert issubclass(events.SeatClaimed, SeatClaim)
    assert issubclass(events.SessionRecorded, SessionRecord)
    assert issubclass(events.BudgetSet, BudgetRule)


_CARRIED: dict[type, frozenset[str]] = {Blip: frozenset({"superseded_by"})}
"""What an event never holds: a blip's ``superseded_by`` is its table's (set by a later replace)."""


@pytest.mark.parametrize("model", events.MODELS, ids=lambda m: m.__name__)
@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
@given(data=st.data())
def test_any_event_parses_back_from_its_payload_and_the_text_is_stable(
    model: type, data: st.DataObject
) -> None:
    """For any event: its payload is compact ASCII JSON without ``type``, a blip's unset optional
    keys left out; parsing it gives the same event, and encoding that gives the same text."""
    event = data.draw(records(model, unset=_CARRIED))
    payload = events.payload_of(event)
    assert payload.isascii()
    decoded = json.loads(payload)
    assert "type" not in decoded
    for blip in decoded.get("blips", []) + ([decoded["blip"]] if decoded.get("blip") else []):
        assert None not in blip.values() and "superseded_by" not in blip
    again = events.parse(event.type, payload)
    assert again == event
    assert events.payload_of(again) == payload
    assert json.dumps(decoded, separators=(",", ":")) == payload  # json.dumps' own text: key order kept


def test_a_blip_with_a_key_no_blip_has_is_refused_in_the_log() -> None:
    """A blip is lenient on the wire (a newer daemon may add a field); the log is strict."""
    blip = {"id": "b", "wavelet_id": "l", "wave_id": "w", "author": "a", "kind": "message", "text": "t",
            "created_at": "c"}  # fmt: skip
    posted = events.parse("blip.posted", json.dumps({"blip": blip}))
    assert isinstance(posted, events.BlipPosted) and posted.blip == wire.load(Blip, blip)
    for extra in ({"mood": "x"}, {"superseded_by": "b2"}):
        with pytest.raises(fleet.errors.FleetError, match=f"blip.{next(iter(extra))}: unknown field"):
            events.parse("blip.posted", json.dumps({"blip": {**blip, **extra}}))
