"""Records (fleet.wire): strict loading, wire names, every problem reported, schemas for MCP tools."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet import errors, wire
from fleet.models import Blip, NewFork, Wave, Wavelet
from fleet.wire import RecordError, field, record


class Color(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


@record(extra="forbid")
class Inner:
    n: int
    tags: list[str] = field(default_factory=list)


@record(extra="forbid")
class Outer:
    name: str = field(min_length=1, doc="a name")
    with_: list[str] = field(default_factory=list, key="with")
    inner: Inner | None = None
    mode: Literal["a", "b"] = "a"
    color: Color = Color.RED
    ratio: float = 1.0
    where: Path | None = None
    flag: bool = False
    counts: dict[str, int] = field(default_factory=dict)


@record
class Lenient:
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
    }
    out = wire.load(Outer, data)
    assert out.with_ == ["a"] and out.inner == Inner(n=1, tags=["t"]) and out.color is Color.BLUE
    assert out.ratio == 2.0 and isinstance(out.ratio, float) and out.where == Path("/tmp/x")
    assert wire.dump(out) == {**data, "ratio": 2.0}
    assert wire.loads(Outer, wire.dumps(out)) == out


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"name": "n", "flag": 1}, ("flag", "expected a boolean, got a number")),
        ({"name": "n", "inner": {"n": "5"}}, ("inner.n", "expected an integer, got a string")),
        ({"name": "n", "inner": {"n": 1.0}}, ("inner.n", "expected an integer, got a number")),
        ({"name": "n", "mode": "c"}, ("mode", 'must be one of "a", "b"')),
        ({"name": "n", "color": "green"}, ("color", 'must be one of "red", "blue"')),
        ({"name": ""}, ("name", "must have at least 1 character")),
        ({}, ("name", "required")),
        ({"name": "n", "extra": 1}, ("extra", "unknown field")),
        ({"name": "n", "with": ["a", 2]}, ("with.1", "expected a string, got a number")),
        ({"name": "n", "counts": {"k": "x"}}, ("counts.k", "expected an integer, got a string")),
    ],
)
def test_nothing_is_coerced_and_the_problem_is_named(
    data: dict[str, object], problem: tuple[str, str]
) -> None:
    with pytest.raises(RecordError) as caught:
        wire.load(Outer, data)
    assert problem in caught.value.problems
    assert problem[0] in errors.describe(caught.value)


def test_every_problem_at_once_and_lenient_records_ignore_unknown_keys() -> None:
    with pytest.raises(RecordError) as caught:
        wire.load(Outer, {"name": 1, "flag": "x", "nope": 0})
    assert [loc for loc, _ in caught.value.problems] == ["name", "flag", "nope"]
    assert wire.load(Lenient, {"x": 1, "newer_field": "ok"}) == Lenient(x=1)
    with pytest.raises(RecordError):
        wire.loads(Lenient, b"{not json")


def test_records_construct_compare_and_default_like_dataclasses() -> None:
    a, b = Outer(name="n"), Outer(name="n")
    assert a == b and a is not b and a.with_ == [] and a.with_ is not b.with_
    assert "Outer(name='n'" in repr(a)
    with pytest.raises(TypeError):
        Outer()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Outer(name="n", bogus=1)  # type: ignore[call-arg]


def test_schema_is_self_contained_json_schema() -> None:
    s = wire.schema(Outer)
    assert s["type"] == "object" and s["additionalProperties"] is False and s["required"] == ["name"]
    props = s["properties"]
    assert props["name"] == {"type": "string", "description": "a name", "minLength": 1}
    assert props["with"] == {"type": "array", "items": {"type": "string"}, "default": []}
    assert props["inner"]["anyOf"][0]["properties"]["n"] == {"type": "integer"}
    assert props["mode"] == {"enum": ["a", "b"], "type": "string", "default": "a"}
    assert props["color"] == {"enum": ["red", "blue"], "default": "red"}


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
    assert wire.load(Blip, wire.dump(blip)) == blip


@record(extra="forbid")
class Mixed:
    value: int | str | None = None
    items: list[Inner] = field(default_factory=list)
    color: Color | Literal[0] = 0
    score: float = field(default=0.0, ge=0, le=1)


_ODD: list[object] = [None, True, False, 0, 1, -1, 0.5, 2.0, "", "a", "red", "blue", "/x", [], {}, ["a"], [1],
                      {"n": 1}, {"n": True}, [{"n": 1}], [{"n": "1"}], {"k": "v"}]  # fmt: skip
"""Values put in place of a field: each kind JSON has, and near misses of the records' shapes."""
_VALID: dict[type, dict[str, object]] = {
    Outer: {"name": "n", "with": ["a"], "inner": {"n": 1, "tags": ["t"]}, "mode": "b", "color": "blue",
            "ratio": 2, "where": "/x", "flag": True, "counts": {"k": 1}},
    Mixed: {"value": 3, "items": [{"n": 1}, {"n": 2, "tags": []}], "color": "red", "score": 0.5},
    Blip: {"id": "i", "wavelet_id": "w", "wave_id": "v", "author": "a", "kind": "message", "text": "t",
           "created_at": "t"},
}  # fmt: skip


def _variants(value: object) -> list[object]:
    """``value`` with one place in it (at any depth) replaced by each of :data:`_ODD`, and (in an
    object) a key removed or an unknown one added."""
    out: list[object] = []
    if isinstance(value, dict):
        for k, v in value.items():
            out += [{**value, k: x} for x in _variants(v)]
            out.append({key: x for key, x in value.items() if key != k})
        out.append({**value, "unknown": 1})
    elif isinstance(value, list):
        for n, v in enumerate(value):
            out += [[*value[:n], x, *value[n + 1 :]] for x in _variants(v)]
    return out + _ODD


@pytest.mark.parametrize("cls", [Outer, Mixed, Blip], ids=lambda c: c.__name__)
def test_the_compiled_load_agrees_with_the_exact_walk(cls: type) -> None:
    """Valid data with one place (at any depth) replaced, removed or added to: the compiled
    converters accept exactly what the walk accepts, with an equal record; what it refuses, the
    walk names."""
    variants = _variants(_VALID[cls])
    assert len(variants) > 100
    for raw in [_VALID[cls], *variants]:
        problems: list[tuple[str, str]] = []
        slow = wire._convert(cls, raw, "", problems)
        try:
            fast = wire._fast(cls)(raw)
        except wire._Misfit:
            assert problems, f"the compiled load refused what the walk accepts: {raw!r}"
            with pytest.raises(RecordError) as caught:
                wire.load(cls, raw)
            assert caught.value.problems == problems
        else:
            assert not problems, f"the compiled load accepted {raw!r}; the walk says {problems}"
            assert fast == slow and wire.load(cls, raw) == slow
