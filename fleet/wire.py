"""Typed records: the shapes that cross fleet's boundaries, checked on the way in.

A record is a stdlib dataclass declared with :func:`record`. :func:`load` turns decoded JSON into
one, checking every field against its annotation (and the constraints given with :func:`field`);
:func:`dump` turns one back into JSON-able data; :func:`schema` gives its JSON Schema (what the
channel's MCP tools declare). The annotations understood are ``str``, ``int``, ``float``, ``bool``,
``None``, ``Any``, ``Path``, enums, ``Literal[...]``, ``X | Y`` unions, ``list[X]``, ``dict[str, X]`` and
other records.

Why not pydantic for these: the records are on the start-up path of every short-lived ``fleet``
command and of every channel process (one per agent). A first pydantic model costs about 110 ms
and 10 MiB before it validates anything (``bench/cli.py`` prints the figures); a record costs
what a dataclass costs. pydantic stays where start-up does not matter and its richer validation
does: the daemon's event log (:mod:`fleet.store`), layout files, reports of long-running commands.

What a caller may rely on:

- :func:`load` never coerces: ``"5"`` is not an ``int``, ``1`` is not a ``bool``, ``1.0`` is not an
  ``int`` (an ``int`` is a ``float``). Unknown keys are ignored, or refused for a record declared
  ``record(extra="forbid")`` (request bodies, files fleet owns). Every problem found is reported at
  once in one :class:`RecordError` whose ``problems`` name the field path.
- :func:`dump` writes every field under its wire name (``key``), ``None`` included unless
  ``exclude_none``; ``Path`` becomes ``str``.
"""

from __future__ import annotations

import enum
import json
import re
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar, dataclass_transform, overload

T = TypeVar("T")


class RecordError(ValueError):
    """Data that does not fit a record. ``problems`` holds (field path, what is wrong) pairs;
    :func:`fleet.errors.describe` puts them into words."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{loc or 'body'}: {msg}" for loc, msg in problems[:5]))


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


_MISSING: Any = _Missing()


class _Spec:
    """What :func:`field` puts in a class body; :func:`record` turns it into a :class:`_Field`."""

    __slots__ = ("default", "factory", "meta")

    def __init__(self, default: Any, factory: Any, meta: dict[str, Any]) -> None:
        self.default, self.factory, self.meta = default, factory, meta


def field(
    *,
    default: Any = _MISSING,
    default_factory: Callable[[], Any] | Any = _MISSING,
    key: str | None = None,
    doc: str = "",
    min_length: int | None = None,
    max_length: int | None = None,
    ge: float | None = None,
    le: float | None = None,
    pattern: str | None = None,
) -> Any:
    """A record field with a wire name (``key``), a description (for :func:`schema`) and constraints."""
    meta = {
        k: v
        for k, v in (
            ("key", key),
            ("doc", doc),
            ("min_length", min_length),
            ("max_length", max_length),
            ("ge", ge),
            ("le", le),
            ("pattern", pattern),
        )
        if v not in (None, "")
    }
    return _Spec(default, default_factory, meta)


class _Field:
    __slots__ = ("default", "factory", "key", "meta", "name")

    def __init__(self, name: str, default: Any, factory: Any, meta: dict[str, Any]) -> None:
        self.name, self.default, self.factory, self.meta = name, default, factory, meta
        self.key: str = meta.get("key", name)

    @property
    def required(self) -> bool:
        return self.default is _MISSING and self.factory is _MISSING


@overload
def record(cls: type[T], /) -> type[T]: ...
@overload
def record(*, extra: Literal["ignore", "forbid"] = "ignore") -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(kw_only_default=True, field_specifiers=(field,))
def record(cls: type[T] | None = None, /, *, extra: Literal["ignore", "forbid"] = "ignore") -> Any:
    """Declare a record: keyword-only ``__init__``, ``__eq__`` and ``__repr__`` from the annotated
    fields (base records' first). ``extra="forbid"`` makes :func:`load` refuse unknown keys.

    Deliberately not :func:`dataclasses.dataclass`: its code generation costs about half a
    millisecond a class at import, which every ``fleet`` command and channel would pay for each.
    """

    def wrap(c: type[T]) -> type[T]:
        fields: dict[str, _Field] = {}
        for base in reversed(c.__mro__[1:]):
            for f in getattr(base, "__record_fields__", ()):
                fields[f.name] = f
        own = c.__dict__.get("__annotations__", {})  # noqa: RUF063 (inspect costs 6 ms to import)
        for name, hint in own.items():
            if str(hint).startswith(("ClassVar", "typing.ClassVar")):
                continue
            value = c.__dict__.get(name, _MISSING)
            if isinstance(value, _Spec):
                fields[name] = _Field(name, value.default, value.factory, value.meta)
                if value.default is _MISSING:
                    delattr(c, name)
                else:
                    setattr(c, name, value.default)
            else:
                fields[name] = _Field(name, value, _MISSING, {})
        c.__record_fields__ = tuple(fields.values())  # type: ignore[attr-defined]
        c.__record_extra__ = extra  # type: ignore[attr-defined]
        c.__init__ = _init  # type: ignore[method-assign]
        c.__eq__ = _eq  # type: ignore[method-assign]
        c.__repr__ = _repr  # type: ignore[method-assign]
        c.__hash__ = None  # type: ignore[assignment]
        return c

    return wrap if cls is None else wrap(cls)


def _init(self: Any, **values: Any) -> None:
    for f in self.__record_fields__:
        if f.name in values:
            value = values.pop(f.name)
        elif f.factory is not _MISSING:
            value = f.factory()
        elif f.default is not _MISSING:
            value = f.default
        else:
            raise TypeError(f"{type(self).__name__}() is missing the field {f.name!r}")
        object.__setattr__(self, f.name, value)
    if values:
        raise TypeError(f"{type(self).__name__}() got unexpected fields: {', '.join(values)}")


def built(cls: type[T], values: dict[str, Any]) -> T:
    """The record ``cls(**values)`` makes, when ``values`` names every field of ``cls`` (no default
    is applied and nothing is checked): the builder of hot read paths, such as a context's few
    hundred blips, where the keyword loop of ``__init__`` was most of the time."""
    obj: T = object.__new__(cls)
    obj.__dict__.update(values)
    return obj


def _eq(self: Any, other: Any) -> Any:
    if type(other) is not type(self):
        return NotImplemented
    return all(getattr(self, f.name) == getattr(other, f.name) for f in self.__record_fields__)


def _repr(self: Any) -> str:
    inner = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in self.__record_fields__)
    return f"{type(self).__name__}({inner})"


def is_record(obj: Any) -> bool:
    """True for a record class or instance."""
    return hasattr(obj, "__record_fields__")


# ---------------------------------------------------------------- introspection (cached per class)

_HINTS: dict[type, dict[str, Any]] = {}


def _fields(cls: type) -> tuple[_Field, ...]:
    fields: tuple[_Field, ...] = cls.__record_fields__  # type: ignore[attr-defined]
    return fields


def copy_into(target: T, source: T) -> None:
    """Set every field of the record ``target`` to ``source``'s (in place: who holds ``target``
    sees the change)."""
    for f in _fields(type(target)):
        setattr(target, f.name, getattr(source, f.name))


def _hints(cls: type) -> dict[str, Any]:
    """The fields' annotations, evaluated (once per class, on first use)."""
    got = _HINTS.get(cls)
    if got is None:
        module = sys.modules.get(cls.__module__)
        got = _HINTS[cls] = typing.get_type_hints(cls, globalns=vars(module) if module else None)
    return got


# ---------------------------------------------------------------- load


def load(cls: type[T], data: Any) -> T:
    """``data`` (decoded JSON) as a ``cls`` record; raises :class:`RecordError` if it does not fit.

    Data that fits goes through converters compiled once per annotation (:func:`_fast`), which stop
    at the first misfit; only then does the exact walk below run, to name every problem with its
    path. A channel loads a feed answer per delivery: the walk's per-value introspection was most of
    a channel's CPU in a 64-agent burst (``bench/store.py``)."""
    try:
        return typing.cast(T, _fast(cls)(data))
    except _Misfit:
        pass
    problems: list[tuple[str, str]] = []
    out = _convert(cls, data, "", problems)
    if problems:
        raise RecordError(problems)
    return typing.cast(T, out)


def json_lines(buffered: bytes) -> tuple[list[dict[str, Any]], bytes]:
    """The JSON objects on the complete lines of ``buffered`` (a line that is not one is skipped),
    and what follows the last newline: the line still being written, for the next read to finish.
    What every tail of an appended JSONL file (a transcript, a hook's log) reads with."""
    *lines, rest = buffered.split(b"\n")
    out: list[dict[str, Any]] = []
    for raw in lines:
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out, rest


def loads(cls: type[T], raw: str | bytes) -> T:
    """:func:`load` of JSON text; text that is not JSON is a :class:`RecordError` too."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise RecordError([("", f"not valid JSON ({exc})")]) from None
    return load(cls, data)


def _join(path: str, key: str | int) -> str:
    return f"{path}.{key}" if path else str(key)


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number" if isinstance(value, int | float) else "?"
    )


def _convert(hint: Any, value: Any, path: str, problems: list[tuple[str, str]]) -> Any:
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin is typing.Union or origin is types.UnionType:
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:  # X | None: a value that is there must be an X (its own problems show)
            return _convert(options[0], value, path, problems)
        for arg in options:
            trial: list[tuple[str, str]] = []
            out = _convert(arg, value, path, trial)
            if not trial:
                return out
        names = " or ".join(_hint_name(a) for a in args)
        problems.append((path, f"expected {names}, got {_type_name(value)}"))
        return None
    if origin is Literal:
        allowed = typing.get_args(hint)
        if any(value == a and type(value) is type(a) for a in allowed):
            return value
        problems.append((path, f"must be one of {', '.join(json.dumps(a) for a in allowed)}"))
        return None
    if origin is list:
        if not isinstance(value, list):
            problems.append((path, f"expected an array, got {_type_name(value)}"))
            return []
        (item,) = typing.get_args(hint) or (Any,)
        return [_convert(item, v, _join(path, i), problems) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            problems.append((path, f"expected an object, got {_type_name(value)}"))
            return {}
        _k, item = typing.get_args(hint) or (str, Any)
        return {str(k): _convert(item, v, _join(path, k), problems) for k, v in value.items()}
    if hint is str:
        if isinstance(value, str):
            return value
    elif hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif hint is type(None):
        if value is None:
            return None
    elif hint is Path:
        if isinstance(value, str):
            return Path(value)
    elif isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            values = ", ".join(json.dumps(m.value) for m in hint)
            problems.append((path, f"must be one of {values}"))
            return None
    elif isinstance(hint, type) and is_record(hint):
        if isinstance(value, hint):
            return value
        if isinstance(value, dict):
            return _record(hint, value, path, problems)
    else:  # pragma: no cover - a record declared with an annotation this module does not know
        raise TypeError(f"fleet.wire cannot load {hint!r}")
    problems.append((path, f"expected {_hint_name(hint)}, got {_type_name(value)}"))
    return None


def _record(cls: type, value: dict[str, Any], path: str, problems: list[tuple[str, str]]) -> Any:
    kwargs: dict[str, Any] = {}
    known = set()
    hints = _hints(cls)
    for f in _fields(cls):
        known.add(f.key)
        if f.key not in value:
            if f.required:
                problems.append((_join(path, f.key), "required"))
            continue
        where = _join(path, f.key)
        before = len(problems)
        v = _convert(hints[f.name], value[f.key], where, problems)
        if len(problems) == before:
            _check(f.meta, v, where, problems)
        kwargs[f.name] = v
    if getattr(cls, "__record_extra__", "ignore") == "forbid":
        for key in value:
            if key not in known:
                problems.append((_join(path, str(key)), "unknown field"))
    if len(problems):
        return None
    return cls(**kwargs)


# ---------------------------------------------------------------- load, compiled


class _Misfit(Exception):
    """Raised by a compiled converter at the first value that does not fit (no path, no words)."""


_Conv = Callable[[Any], Any]
_FAST: dict[Any, _Conv] = {}


def _fast(hint: Any) -> _Conv:
    """The compiled converter of ``hint``: what :func:`_convert` returns for data that fits, or
    :class:`_Misfit` exactly where :func:`_convert` would report a problem."""
    try:
        return _FAST[hint]
    except KeyError:
        conv = _FAST[hint] = _compile(hint)
        return conv
    except TypeError:  # an unhashable annotation: compiled each time
        return _compile(hint)


def _misfit(value: Any) -> Any:
    raise _Misfit


def _compile(hint: Any) -> _Conv:  # one branch per annotation kind, as in _convert
    origin = typing.get_origin(hint)
    if hint is Any:
        return lambda v: v
    if origin is typing.Union or origin is types.UnionType:
        args = typing.get_args(hint)
        none_ok = type(None) in args
        options = [_fast(a) for a in args if a is not type(None)]
        if len(options) == 1:
            (only,) = options

            def optional(v: Any) -> Any:
                return None if v is None and none_ok else only(v)

            return optional

        def union(v: Any) -> Any:
            if v is None and none_ok:
                return None
            for option in options:
                try:
                    return option(v)
                except _Misfit:
                    continue
            raise _Misfit

        return union
    if origin is Literal:
        allowed = typing.get_args(hint)

        def literal(v: Any) -> Any:
            if any(v == a and type(v) is type(a) for a in allowed):
                return v
            raise _Misfit

        return literal
    if origin is list:
        (item_hint,) = typing.get_args(hint) or (Any,)
        if item_hint is str:

            def strings(v: Any) -> Any:
                if isinstance(v, list) and all(isinstance(x, str) for x in v):
                    return list(v)
                raise _Misfit

            return strings
        item = _fast(item_hint)

        def array(v: Any) -> Any:
            if isinstance(v, list):
                return [item(x) for x in v]
            raise _Misfit

        return array
    if origin is dict:
        _k, item_hint = typing.get_args(hint) or (str, Any)
        value_of = _fast(item_hint)

        def obj(v: Any) -> Any:
            if isinstance(v, dict):
                return {str(k): value_of(x) for k, x in v.items()}
            raise _Misfit

        return obj
    if hint is str:
        return lambda v: v if isinstance(v, str) else _misfit(v)
    if hint is bool:
        return lambda v: v if isinstance(v, bool) else _misfit(v)
    if hint is int:
        return lambda v: v if isinstance(v, int) and not isinstance(v, bool) else _misfit(v)
    if hint is float:
        return lambda v: float(v) if isinstance(v, int | float) and not isinstance(v, bool) else _misfit(v)
    if hint is type(None):
        return lambda v: None if v is None else _misfit(v)
    if hint is Path:
        return lambda v: Path(v) if isinstance(v, str) else _misfit(v)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        members = hint

        def member(v: Any) -> Any:
            try:
                return members(v)
            except ValueError:
                raise _Misfit from None

        return member
    if isinstance(hint, type) and is_record(hint):
        return _compile_record(hint)
    return _misfit  # an annotation this module does not know: the exact walk raises TypeError


def _compile_record(cls: type) -> _Conv:
    plan: list[tuple[str, str, _Conv, Any, Any, typing.Mapping[str, Any]]] | None = None
    forbid = getattr(cls, "__record_extra__", "ignore") == "forbid"
    known: frozenset[str] = frozenset()

    def build() -> list[tuple[str, str, _Conv, Any, Any, typing.Mapping[str, Any]]]:
        nonlocal plan, known
        hints = _hints(cls)
        fields = _fields(cls)
        known = frozenset(f.key for f in fields)
        plan = [
            (
                f.key,
                f.name,
                _fast(hints[f.name]),
                f.default,
                f.factory,
                {k: f.meta[k] for k in _LIMITS & f.meta.keys()},
            )
            for f in fields
        ]
        return plan

    def rec(v: Any) -> Any:
        if isinstance(v, cls):
            return v
        if not isinstance(v, dict):
            raise _Misfit
        values: dict[str, Any] = {}
        for key, name, conv, default, factory, meta in plan or build():  # built on first use (cycles)
            if key in v:
                x = conv(v[key])
                if meta and x is not None and _misfits(meta, x):
                    raise _Misfit
                values[name] = x
            elif factory is not _MISSING:
                values[name] = factory()
            elif default is not _MISSING:
                values[name] = default
            else:
                raise _Misfit
        if forbid and not known.issuperset(v):
            raise _Misfit
        return built(cls, values)

    return rec


_LIMITS = frozenset({"min_length", "max_length", "ge", "le", "pattern"})
"""The constraints :func:`_check` applies (a field's other meta is its key and doc)."""


def _misfits(meta: typing.Mapping[str, Any], v: Any) -> bool:
    problems: list[tuple[str, str]] = []
    _check(meta, v, "", problems)
    return bool(problems)


def _check(meta: typing.Mapping[str, Any], v: Any, where: str, problems: list[tuple[str, str]]) -> None:
    if v is None:
        return
    if "min_length" in meta and len(v) < meta["min_length"]:
        n = meta["min_length"]
        problems.append((where, f"must have at least {n} {'character' if isinstance(v, str) else 'item'}"
                         f"{'' if n == 1 else 's'}"))  # fmt: skip
    if "max_length" in meta and len(v) > meta["max_length"]:
        problems.append((where, f"must have at most {meta['max_length']}"
                         f" {'characters' if isinstance(v, str) else 'items'}"))  # fmt: skip
    if "ge" in meta and v < meta["ge"]:
        problems.append((where, f"must be at least {meta['ge']:g}"))
    if "le" in meta and v > meta["le"]:
        problems.append((where, f"must be at most {meta['le']:g}"))
    if "pattern" in meta and not re.fullmatch(meta["pattern"], v):
        problems.append((where, f"must match {meta['pattern']}"))


def _hint_name(hint: Any) -> str:
    if hint is type(None):
        return "null"
    if typing.get_origin(hint) is Literal:
        return " or ".join(json.dumps(a) for a in typing.get_args(hint))
    names = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", Path: "a path"}
    if hint in names:
        return names[hint]
    origin = typing.get_origin(hint)
    if origin is list:
        return "an array"
    if origin is dict or is_record(hint):
        return "an object"
    return str(hint)


# ---------------------------------------------------------------- dump


_SCALARS = frozenset({str, int, float, bool})


def dump(obj: Any, *, exclude_none: bool = False) -> Any:
    """``obj`` (a record, or lists and dicts of them) as JSON-able data, fields under their wire names."""
    if obj is None or type(obj) in _SCALARS:  # most calls (a record's fields): the cheap test first
        return obj
    if is_record(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in _fields(type(obj)):
            v = getattr(obj, f.name)
            if v is None and exclude_none:
                continue
            out[f.key] = dump(v, exclude_none=exclude_none)
        return out
    if isinstance(obj, list | tuple):
        return [dump(v, exclude_none=exclude_none) for v in obj]
    if isinstance(obj, dict):
        return {k: dump(v, exclude_none=exclude_none) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, enum.Enum):
        return obj.value
    if hasattr(obj, "model_dump"):  # a pydantic model inside a record (reports of long commands)
        return obj.model_dump(mode="json", by_alias=True)
    return obj


def dumps(obj: Any, *, exclude_none: bool = False, indent: int | None = None) -> str:
    """:func:`dump` as compact JSON text (or indented with ``indent``)."""
    separators = (",", ":") if indent is None else None
    return json.dumps(dump(obj, exclude_none=exclude_none), separators=separators, indent=indent)


def copy(obj: T) -> T:
    """A deep copy of a record (through its wire form: plain data only)."""
    return load(type(obj), dump(obj))


# ---------------------------------------------------------------- schema


def schema(cls: type) -> dict[str, Any]:
    """The JSON Schema of a record: inlined, ``additionalProperties: false``, descriptions from ``doc``."""
    return _schema(cls)


def _schema(hint: Any, meta: typing.Mapping[str, Any] | None = None) -> dict[str, Any]:
    meta = meta or {}
    origin = typing.get_origin(hint)
    out: dict[str, Any]
    if hint is Any:
        out = {}
    elif origin is typing.Union or origin is types.UnionType:
        out = {"anyOf": [_schema(a) for a in typing.get_args(hint)]}
    elif origin is Literal:
        values = list(typing.get_args(hint))
        out = {"enum": values}
        if all(isinstance(v, str) for v in values):
            out["type"] = "string"
    elif isinstance(hint, type) and issubclass(hint, enum.Enum):
        out = {"enum": [m.value for m in hint]}
    elif origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        out = {"type": "array", "items": _schema(item)}
    elif origin is dict:
        _k, item = typing.get_args(hint) or (str, Any)
        out = {"type": "object", "additionalProperties": _schema(item)}
    elif is_record(hint):
        props: dict[str, Any] = {}
        required: list[str] = []
        hints = _hints(hint)
        for f in _fields(hint):
            props[f.key] = _schema(hints[f.name], f.meta)
            if f.required:
                required.append(f.key)
            else:
                props[f.key]["default"] = dump(f.factory() if f.default is _MISSING else f.default)
        out = {"type": "object", "properties": props, "additionalProperties": False}
        if required:
            out["required"] = required
    else:
        out = {
            "type": {str: "string", int: "integer", float: "number", bool: "boolean", Path: "string"}.get(
                hint, "null"
            )
        }
    if meta.get("doc"):
        out["description"] = meta["doc"]
    for key, name in (
        ("min_length", "minLength" if hint is str else "minItems"),
        ("max_length", "maxLength" if hint is str else "maxItems"),
        ("ge", "minimum"),
        ("le", "maximum"),
        ("pattern", "pattern"),
    ):
        if key in meta:
            out[name] = meta[key]
    return out
