"""Hypothesis strategies for any record, read off its msgspec declaration (``msgspec.inspect``).

``records(cls)`` draws instances of a :class:`fleet.wire.Record` (or an event) that fit every
constraint it declares (lengths, bounds, literals, enums, nested records, ``Path``), so a property
can range over every record fleet declares without a strategy written per class.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi
from hypothesis import strategies as st

_JSON_SCALARS = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)


def records(
    cls: type, *, unset: dict[type, frozenset[str]] | None = None, depth: int = 3
) -> st.SearchStrategy[Any]:
    """Instances of ``cls``. ``unset``: per record class, fields always left at their default (what
    a carrier never holds, such as a blip's ``superseded_by`` in an event)."""
    return _of(mi.type_info(cls), unset or {}, depth)


def _sized(inner: st.SearchStrategy[Any], t: Any, kind: type, depth: int) -> st.SearchStrategy[Any]:
    low = t.min_length or 0
    high = t.max_length if t.max_length is not None else low + (3 if depth > 0 else 0)
    return st.lists(inner, min_size=low, max_size=min(high, low + 3)).map(kind)


def _of(t: mi.Type, unset: dict[type, frozenset[str]], depth: int) -> st.SearchStrategy[Any]:
    if isinstance(t, mi.Metadata):  # a description: the type under it
        return _of(t.type, unset, depth)
    if isinstance(t, mi.StrType):
        if t.pattern is not None:
            return st.from_regex(t.pattern, fullmatch=True).filter(
                lambda s: (t.min_length or 0) <= len(s) <= (t.max_length or len(s))
            )
        return st.text(
            min_size=t.min_length or 0, max_size=min(t.max_length or 12, 12) if t.max_length else 12
        ).filter(lambda s: len(s) >= (t.min_length or 0))
    if isinstance(t, mi.BoolType):
        return st.booleans()
    if isinstance(t, mi.IntType):
        low = t.ge if t.ge is not None else (t.gt + 1 if t.gt is not None else -(2**40))
        high = t.le if t.le is not None else (t.lt - 1 if t.lt is not None else 2**40)
        return st.integers(int(low), int(high))
    if isinstance(t, mi.FloatType):
        return st.floats(
            min_value=t.ge if t.ge is not None else t.gt,
            max_value=t.le if t.le is not None else t.lt,
            allow_nan=False,
            allow_infinity=False,
            exclude_min=t.gt is not None,
            exclude_max=t.lt is not None,
        )
    if isinstance(t, mi.NoneType):
        return st.none()
    if isinstance(t, mi.AnyType):
        return _JSON_SCALARS
    if isinstance(t, mi.LiteralType):
        return st.sampled_from(list(t.values))
    if isinstance(t, mi.EnumType):
        return st.sampled_from(list(t.cls))
    if isinstance(t, mi.CustomType) and t.cls is Path:
        return st.text(alphabet="abc/", min_size=1, max_size=8).map(lambda s: Path("/" + s))
    if isinstance(t, mi.UnionType):
        options = [o for o in t.types if depth > 0 or not isinstance(o, mi.StructType | mi.ListType)]
        return st.one_of(*[_of(o, unset, depth) for o in options or t.types])
    if isinstance(t, mi.ListType | mi.VarTupleType):
        return _sized(_of(t.item_type, unset, depth - 1), t, list, depth)
    if isinstance(t, mi.DictType):
        pairs = st.tuples(_of(t.key_type, unset, depth - 1), _of(t.value_type, unset, depth - 1))
        return _sized(pairs, t, dict, depth)
    if isinstance(t, mi.StructType):
        fixed = unset.get(t.cls, frozenset())
        fields = {
            f.name: _of(f.type, unset, depth - 1)
            for f in t.fields
            if f.name not in fixed and (f.required or depth > 0)
        }
        return st.fixed_dictionaries(fields).map(lambda values: t.cls(**values))
    raise TypeError(f"no strategy for {t!r}")


def every_record() -> list[type]:
    """Every record class fleet declares (imported with every fleet module)."""
    import importlib
    import pkgutil

    import fleet

    for m in pkgutil.walk_packages(fleet.__path__, "fleet."):
        importlib.import_module(m.name)

    def below(c: type) -> list[type]:
        subs: list[type] = c.__subclasses__()
        return [d for sub in subs for d in (sub, *below(sub))]

    from fleet.wire import FrozenValue, Value  # in-process values, not records: they never cross a boundary

    found = {
        c
        for c in below(msgspec.Struct)
        if c.__module__.startswith("fleet.") and not issubclass(c, (Value, FrozenValue))
    }
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))
