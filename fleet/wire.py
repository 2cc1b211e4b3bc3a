"""Typed records: a thin adapter over msgspec ``Struct``s, the one record system of every boundary.

A record subclasses :class:`Record`; bounds and descriptions go in its annotations (``Annotated[str,
Meta(max_length=200, description=...)]``), a wire name or a default factory in :func:`field`. Why
msgspec (``bench/records.py``): a C extension, strict, 5–8 ms to import beside what a channel imports
anyway, 2–5× faster than pydantic at decoding, and none of pydantic's ~100 ms first-model cost on
every short ``fleet`` command and channel. Why this module still exists: fleet's promises kept in one place
(no coercion, ``Path`` fields, errors in fleet's words, schemas an MCP client takes).

What a caller may rely on:

- :func:`load` / :func:`loads` never coerce: ``"5"`` is not an ``int``, ``1`` is not a ``bool``,
  ``true`` is not an ``int``; an ``int`` is a ``float``. Unknown keys are ignored, or refused for a
  record declared ``forbid_unknown_fields=True`` (request bodies, files fleet owns). A misfit is one
  :class:`RecordError` naming the field path of the *first* problem (msgspec stops there).
- :func:`dump` writes every field under its wire name (a None one left out with ``exclude_none``),
  ``Path`` as ``str``; :func:`dumps` is ``json.dumps``' compact ASCII text, :func:`encode` UTF-8 bytes.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, TypeVar

# msgspec looks for typing_extensions first and falls back to typing, which has all fleet uses
# (fleet declares no typing_extensions types). Kept out while msgspec loads, typing_extensions costs
# a channel 10 ms of CPU and 1.8 MiB (a third of its whole budget over a bare interpreter). Already
# loaded (pydantic's commands), it is used as before; the block is lifted at once for later imports.
_BLOCKED = "typing_extensions" not in sys.modules
if _BLOCKED:
    sys.modules["typing_extensions"] = None  # type: ignore[assignment]
try:
    import msgspec
    from msgspec import Meta, field
finally:
    if _BLOCKED:
        del sys.modules["typing_extensions"]

__all__ = [
    "FrozenValue",
    "Meta",
    "Record",
    "RecordError",
    "Value",
    "copy",
    "copy_into",
    "dump",
    "dumps",
    "encode",
    "field",
    "load",
    "loads",
    "schema",
]  # fmt: skip

T = TypeVar("T")


class Record(msgspec.Struct, kw_only=True):
    """The base of every record: ``__init__``, ``__eq__``, ``__repr__``, unhashable. msgspec applies
    ``kw_only`` to a class's own fields, so each record says ``kw_only=True`` again (fields with and
    without defaults then mix in the wire's order); ``forbid_unknown_fields=True`` makes it refuse
    unknown keys. :data:`Meta` and :func:`field` are msgspec's."""


class Value(msgspec.Struct):
    """The base of an in-process value: ``__init__``, ``__eq__``, ``__repr__``, like a dataclass,
    without dataclasses' import (it brings ``inspect``: ~6 ms of a channel's start) or its per-class
    code generation. Not a record: it never crosses a boundary, so it has no wire form and may hold
    anything (callables, records). Fields are declared by annotation; :func:`field` gives a default
    factory; only declared attributes can be set."""


class FrozenValue(msgspec.Struct, frozen=True):
    """A :class:`Value` that is immutable and hashable (a frozen dataclass). A subclass says
    ``frozen=True`` again (type checkers read each class's own flag)."""


class RecordError(ValueError):
    """Data that does not fit a record. ``problems`` holds (field path, what is wrong) pairs;
    :func:`fleet.errors.describe` puts them into words."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{loc or 'body'}: {msg}" for loc, msg in problems[:5]))


def _dec_hook(kind: type, value: Any) -> Any:
    if kind is Path and isinstance(value, str):
        return Path(value)
    raise TypeError(f"Expected `{getattr(kind, '__name__', kind)}`, got `{_JSON.get(type(value), 'null')}`")


def _enc_hook(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "model_dump"):  # a pydantic model inside a record (a layout file's parts)
        return value.model_dump(mode="json", by_alias=True)
    raise TypeError(f"fleet.wire cannot encode {type(value).__name__}")


_JSON = {str: "str", int: "int", float: "float", bool: "bool", list: "array", dict: "object"}
_WORDS = {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean",
          "object": "an object", "array": "an array", "null": "null", "Path": "a path"}  # fmt: skip
_AT = re.compile(r"(.*) - at `\$(.*)`$", re.S)


def _error(exc: msgspec.DecodeError) -> RecordError:
    """msgspec's ``Expected `int`, got `str` - at `$.a[0]``` as ("a.0", "expected an integer, got a…")."""
    text, where = str(exc), ""
    if m := _AT.match(text):
        text, where = m.group(1), re.sub(r"\[(\d+)\]", r".\1", m.group(2)).replace("[...]", ".*").lstrip(".")
    if m := re.match(r"Object (missing required|contains unknown) field `(.*)`$", text):
        where = f"{where}.{m.group(2)}".lstrip(".")
        return RecordError([(where, "required" if m.group(1).startswith("missing") else "unknown field")])
    if text.startswith("JSON is malformed") or text.startswith("Input data was truncated"):
        return RecordError([("", f"not valid JSON ({text})")])
    if m := re.match(r"Invalid enum value (.*)$", text):
        return RecordError([(where, f"{m.group(1)} is not one of the allowed values")])
    words = re.sub(
        r"`([^`]+)`", lambda t: " or ".join(_WORDS.get(w, w) for w in t.group(1).split(" | ")), text
    )
    return RecordError([(where, words[:1].lower() + words[1:])])


def load(cls: type[T], data: Any) -> T:
    """``data`` (decoded JSON) as a ``cls``; raises :class:`RecordError` if it does not fit."""
    try:
        return msgspec.convert(data, cls, strict=True, dec_hook=_dec_hook)
    except msgspec.ValidationError as exc:
        raise _error(exc) from None


def loads(cls: type[T], raw: str | bytes) -> T:
    """:func:`load` of JSON text; text that is not JSON is a :class:`RecordError` too."""
    try:
        out: T = msgspec.json.decode(raw, type=cls, strict=True, dec_hook=_dec_hook)
    except msgspec.DecodeError as exc:
        raise _error(exc) from None
    return out


def _drop_none(obj: Any) -> Any:
    """``obj`` with its records' None fields left out (a plain dict's None values stay)."""
    if isinstance(obj, msgspec.Struct):
        values = zip(obj.__struct_encode_fields__, msgspec.structs.astuple(obj), strict=True)
        return {k: _drop_none(v) for k, v in values if v is not None}
    if isinstance(obj, dict):
        return {k: _drop_none(v) for k, v in obj.items()}
    return [_drop_none(v) for v in obj] if isinstance(obj, list | tuple) else obj


def dump(obj: Any, *, exclude_none: bool = False) -> Any:
    """``obj`` (a record, or lists and dicts of them) as JSON-able data, fields under their wire names."""
    return msgspec.to_builtins(_drop_none(obj) if exclude_none else obj, enc_hook=_enc_hook)


def dumps(obj: Any, *, exclude_none: bool = False, indent: int | None = None) -> str:
    """:func:`dump` as compact JSON text (or indented with ``indent``)."""
    separators = (",", ":") if indent is None else None
    return json.dumps(dump(obj, exclude_none=exclude_none), separators=separators, indent=indent)


def encode(obj: Any) -> bytes:
    """``obj`` as compact UTF-8 JSON bytes, straight from msgspec (the daemon's answers: no
    intermediate dicts; not ASCII-escaped, unlike :func:`dumps`)."""
    return msgspec.json.encode(obj, enc_hook=_enc_hook)


def copy(obj: T) -> T:
    """A deep copy of a record (through its wire form: plain data only)."""
    return load(type(obj), dump(obj))


def copy_into(target: T, source: T) -> None:
    """Set every field of the record ``target`` to ``source``'s (in place: who holds it sees the change)."""
    for name in target.__struct_fields__:  # type: ignore[attr-defined]
        setattr(target, name, getattr(source, name))


def _schema_hook(kind: type) -> dict[str, Any]:
    if kind is Path:
        return {"type": "string"}
    raise NotImplementedError


def schema(cls: type) -> dict[str, Any]:
    """The JSON Schema of a record, self-contained (every ``$ref`` inlined: MCP clients want no
    ``$defs``), objects closed (``additionalProperties: false``), descriptions from ``Meta``."""
    root = msgspec.json.schema(cls, schema_hook=_schema_hook)
    defs = root.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, list):
            return [inline(n) for n in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return inline(defs[node["$ref"].rpartition("/")[2]])
        out = {k: inline(v) for k, v in node.items() if k not in ("title", "properties")}
        if "properties" in node:
            out["properties"] = {name: inline(sub) for name, sub in node["properties"].items()}
        if out.get("type") == "object" and "properties" in out:
            out["additionalProperties"] = False
        return out

    result: dict[str, Any] = inline(root)
    return result
