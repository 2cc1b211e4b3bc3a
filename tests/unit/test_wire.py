"""Records (fleet.wire over msgspec): strict loading, wire names, the first problem named, schemas for
MCP tools, and every record fleet declares round-tripping through its wire form."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recordgen import every_record, records

from fleet import errors, wire
from fleet.models import Blip, NewFork, Wave, Wavelet
from fleet.wire import Meta, Record, RecordError, field


class Color(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


class Inner(Record, kw_only=True, forbid_unknown_fields=True):
    n: int
    tags: list[str] = field(default_factory=list)


class Outer(Record, kw_only=True, forbid_unknown_fields=True):
    name: Annotated[str, Meta(min_length=1, description="a name")]
    with_: list[str] = field(default_factory=list, name="with")
    inner: Inner | None = None
    mode: Literal["a", "b"] = "a"
    color: Color = Color.RED
    ratio: float = 1.0
    where: Path | None = None
    flag: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    small: Annotated[int, Meta(ge=0, le=5)] = 0


class Lenient(Record, kw_only=True):
    x: int


def test_round_trip_with_wire_names_and_nesting() -> None:
    data = {
        "name": "n",
        "with": ["a"],
        "inner": {"n": 1, "tags": ["t"]},
        "mode": "b",
        "color": "blue",
        "ratio": 2,
        "where": "/tmp/x",
        "flag": True,
        "counts": {"k": 3},
        "small": 5,
    }
    out = wire.load(Outer, data)
    assert out.with_ == ["a"] and out.inner == Inner(n=1, tags=["t"]) and out.color is Color.BLUE
    assert out.ratio == 2.0 and isinstance(out.ratio, float) and out.where == Path("/tmp/x")
    assert wire.dump(out) == {**data, "ratio": 2.0}
    assert wire.loads(Outer, wire.dumps(out)) == out
    assert wire.loads(Outer, wire.encode(out)) == out


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"name": "n", "flag": 1}, ("flag", "expected a boolean, got an integer")),
        ({"name": "n", "inner": {"n": "5"}}, ("inner.n", "expected an integer, got a string")),
        ({"name": "n", "inner": {"n": 1.0}}, ("inner.n", "expected an integer, got a number")),
        ({"name": "n", "inner": {"n": True}}, ("inner.n", "expected an integer, got a boolean")),
        ({"name": "n", "mode": "c"}, ("mode", "'c' is not one of the allowed values")),
        ({"name": "n", "color": "green"}, ("color", "'green' is not one of the allowed values")),
        ({"name": ""}, ("name", "expected a string of length >= 1")),
        ({"name": "n", "small": 6}, ("small", "expected an integer <= 5")),
        ({}, ("name", "required")),
        ({"name": "n", "inner": {}}, ("inner.n", "required")),
        ({"name": "n", "extra": 1}, ("extra", "unknown field")),
        ({"name": "n", "with": ["a", 2]}, ("with.1", "expected a string, got an integer")),
        ({"name": "n", "counts": {"k": "x"}}, ("counts.*", "expected an integer, got a string")),
        ({"name": "n", "where": 5}, ("where", "expected a path, got an integer")),
        ({"name": "n", "inner": []}, ("inner", "expected an object or null, got an array")),
        ([], ("", "expected an object, got an array")),
    ],
)
def test_nothing_is_coerced_and_the_problem_is_named(data: Any, problem: tuple[str, str]) -> None:
    with pytest.raises(RecordError) as caught:
        wire.load(Outer, data)
    assert caught.value.problems == [problem]
    assert f"{problem[0] or 'body'}: {problem[1]}" == errors.describe(caught.value)
    with pytest.raises(RecordError) as again:  # the same words from JSON text
        wire.loads(Outer, json.dumps(data))
    assert again.value.problems == [problem]


def test_the_first_problem_only_and_lenient_records_ignore_unknown_keys() -> None:
    """msgspec stops at the first misfit: one problem, in field order."""
    with pytest.raises(RecordError) as caught:
        wire.load(Outer, {"name": 1, "flag": "x", "nope": 0})
    assert [loc for loc, _ in caught.value.problems] == ["name"]
    assert wire.load(Lenient, {"x": 1, "newer_field": "ok"}) == Lenient(x=1)
    for raw in (b"{not json", b"", b'{"x": 1'):
        with pytest.raises(RecordError) as bad:
            wire.loads(Lenient, raw)
        assert bad.value.problems[0][1].startswith("not valid JSON")


def test_records_construct_compare_and_default_like_dataclasses() -> None:
    a, b = Outer(name="n"), Outer(name="n")
    assert a == b and a is not b and a.with_ == [] and a.with_ is not b.with_
    assert "Outer(name='n'" in repr(a)
    with pytest.raises(TypeError):
        Outer()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Outer(name="n", bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        hash(a)
    c = Outer(name="m", inner=Inner(n=2))
    wire.copy_into(a, c)
    assert a == c and a.inner is c.inner
    assert wire.copy(c) == c and wire.copy(c).inner is not c.inner


def test_dumps_is_ascii_json_and_exclude_none_leaves_out_unset_fields() -> None:
    out = Outer(name="é", where=Path("/x"))
    assert wire.dumps(out).startswith('{"name":"\\u00e9","with":[],"inner":null')
    assert json.loads(wire.encode(out)) == json.loads(wire.dumps(out))
    assert "inner" not in wire.dump(out, exclude_none=True)
    assert wire.dump(out, exclude_none=True)["where"] == "/x"
    # only a record's None fields: a plain map's None values are data (an MCP tool's structured result)
    assert wire.dump({"a": None, "r": Inner(n=1)}, exclude_none=True) == {
        "a": None,
        "r": {"n": 1, "tags": []},
    }


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [k for k in node if k in ("$ref", "$defs")] + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_schema_is_self_contained_json_schema() -> None:
    s = wire.schema(Outer)
    assert s["type"] == "object" and s["additionalProperties"] is False and s["required"] == ["name"]
    props = s["properties"]
    assert props["name"] == {"type": "string", "description": "a name", "minLength": 1}
    assert props["with"] == {"type": "array", "items": {"type": "string"}, "default": []}
    inner = props["inner"]["anyOf"][0]
    assert inner["properties"]["n"] == {"type": "integer"} and inner["additionalProperties"] is False
    assert props["mode"] == {"enum": ["a", "b"], "default": "a"}
    assert props["small"] == {"type": "integer", "minimum": 0, "maximum": 5, "default": 0}
    assert props["where"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert _refs(s) == [] and "title" not in json.dumps(s)


def test_wire_models_keep_their_wire_names() -> None:
    fork = NewFork(name="x", with_=["a"], as_="bob")
    assert wire.dump(fork, exclude_none=True) == {"name": "x", "with": ["a"], "private": False, "as": "bob"}
    wave = wire.load(
        Wave,
        {
            "id": "1",
            "name": "w",
            "created_at": "t",
            "root_id": "2",
            "wavelets": [
                {
                    "id": "2",
                    "wave_id": "1",
                    "wave": "w",
                    "name": "main",
                    "parent_id": None,
                    "private": False,
                    "created_by": "operator",
                    "created_at": "t",
                    "roster": [],
                }
            ],
        },
    )
    assert isinstance(wave.wavelets[0], Wavelet) and wave.wavelets[0].path == "w/main"


@given(st.text(), st.text(min_size=1), st.sampled_from(["message", "system", "surface"]))
def test_blips_round_trip_any_text(text: str, author: str, kind: str) -> None:
    raw = {"id": "i", "wavelet_id": "w", "wave_id": "v", "author": author, "kind": kind, "text": text,
           "created_at": "t"}  # fmt: skip
    blip = wire.load(Blip, raw)
    assert wire.load(Blip, wire.dump(blip)) == blip == wire.loads(Blip, wire.encode(blip))


RECORDS = every_record()


def test_every_record_is_a_msgspec_struct_that_decodes_and_has_a_schema() -> None:
    """Every shape fleet declares is one record system: a msgspec Struct whose annotations msgspec
    can decode (a union it cannot tell apart fails here, not on the first request) and describe."""
    assert len(RECORDS) > 100
    for cls in RECORDS:
        msgspec.json.Decoder(cls)
        assert _refs(wire.schema(cls)) == [], cls


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
@given(data=st.data())
def test_any_record_round_trips_through_its_wire_form(cls: type, data: st.DataObject) -> None:
    """load(dump(x)) == x and loads(dumps(x)) == x for any instance of any record fleet declares."""
    x = data.draw(records(cls))
    assert wire.load(cls, wire.dump(x)) == x
    assert wire.loads(cls, wire.dumps(x)) == x
    assert wire.loads(cls, wire.encode(x)) == x
