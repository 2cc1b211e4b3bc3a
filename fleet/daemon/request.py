"""One API call as a handler sees it: the route it matched, who makes it, its path segments, its
query and its body, parsed strictly (:meth:`Request.model`), and what a handler answers.

What a handler may rely on: a body that is not UTF-8, not JSON, not an object, holds a lone surrogate
or an integer over :data:`MAX_INT`, or does not fit the record, is a UsageError naming what is wrong,
before the handler runs anything; a query parameter is read only if the route declares it
(:attr:`fleet.routes.Route.query`: reading another is the daemon's bug, a 500 naming it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from fleet import errors
from fleet.httpbase import Park
from fleet.routes import Route
from fleet.store import Principal
from fleet.store.events import Event
from fleet.wire import RecordError, load

if TYPE_CHECKING:
    from fleet.daemon.dispatch import Dispatcher

M = TypeVar("M")

NOBODY = Principal("nobody", "")
"""The principal of a route that needs no token (``/v1/health``): it sees nothing (no wave has id '')."""


@dataclass
class Request:
    """One API call: the route it matched, the path's ``{…}`` segments (unquoted) in ``args``, and who
    makes it."""

    route: Route[object]
    method: str
    path: str
    query: dict[str, str]
    body: bytes
    who: Principal
    args: tuple[str, ...] = ()

    @property
    def arg(self) -> str:
        """The path's one ``{…}`` segment."""
        return self.args[0]

    def _raw(self, name: str) -> str | None:
        if name not in self.route.query:
            raise errors.FleetError(
                f"the daemon's handler {self.route.name} reads the query parameter {name!r}, which"
                " fleet/routes.py does not declare for it"
            )
        return self.query.get(name)

    def text(self, name: str) -> str | None:
        """The query parameter ``name``, None when absent or empty."""
        return self._raw(name) or None

    def flag(self, name: str) -> bool:
        """The query parameter ``name`` as a switch: anything but absent, '', ``0`` or ``false`` is on."""
        return (self._raw(name) or "0") not in ("", "0", "false")

    def model(self, cls: type[M]) -> M:
        """The body as ``cls``, the record the route declares (another is the daemon's bug, a 500
        naming both), or UsageError naming what is wrong with it."""
        if self.route.request is not cls:
            declared = self.route.request.__name__ if self.route.request is not None else "no body"
            raise errors.FleetError(
                f"the daemon's handler {self.route.name} reads its body as {cls.__name__}, but"
                f" fleet/routes.py declares {declared}"
            )
        try:
            text = self.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise errors.UsageError(
                f"the request body is not valid JSON: it is not UTF-8: byte 0x{self.body[exc.start]:02x}"
                f" at offset {exc.start} ({exc.reason}): send the text as UTF-8"
            ) from None
        # JSON's own reading of bytes (json.detect_encoding) is UTF-8 when the body starts with "{"
        # and no NUL: then the text decoded above reads the same, without a second decoding
        raw: str | bytes = text if self.body[:1] == b"{" and self.body[1:2] != b"\x00" else self.body
        try:
            data = json.loads(raw or b"{}")
        except (ValueError, UnicodeDecodeError) as exc:  # ValueError: also a 5,000-digit integer
            raise errors.UsageError(f"the request body is not valid JSON: {exc}") from None
        except RecursionError:
            raise errors.UsageError("the request body is not valid JSON: nested too deeply") from None
        if not isinstance(data, dict):
            raise errors.UsageError("the request body must be a JSON object")
        _check_integers(data)
        # JSON's \ud800 escapes decode to lone surrogates, which no UTF-8 text (or SQLite) takes
        # (and only they, in a body read as the UTF-8 it is).
        bad = _lone_surrogate(data) if raw is not text or "\\u" in text else None
        if bad is not None:
            where, char = bad
            code = ord(char)
            byte = (
                f" (the non-UTF-8 byte 0x{code - 0xDC00:02x}, as a client's surrogateescape carries it)"
                if 0xDC80 <= code <= 0xDCFF
                else ""
            )
            what = f"field {where}" if where else "the request body"
            raise errors.UsageError(
                f"{what} is not valid UTF-8: it has the lone surrogate \\u{code:04x}{byte}: send UTF-8 text"
            )
        try:
            return load(cls, data)
        except RecordError as exc:
            raise errors.UsageError("invalid request: " + errors.describe(exc)) from None

    def q_float(self, name: str, default: float) -> float:
        raw = self._raw(name)
        if raw is None or raw == "":
            return default
        try:
            value = float(raw)
        except ValueError:
            raise errors.UsageError(f"query parameter {name}={raw!r} is not a number") from None
        if value != value or value < 0:
            raise errors.UsageError(f"query parameter {name} must be a non-negative number")
        return value

    def q_int(self, name: str, default: int) -> int:
        raw = self._raw(name)
        if raw is None or raw == "":
            return default
        try:
            value = int(raw) if len(raw) <= 20 else None
        except ValueError:
            value = None
        if value is None or not -MAX_INT <= value <= MAX_INT:
            raise errors.UsageError(
                f"query parameter {name}={raw[:40]!r} is not an integer of at most 15 digits"
            ) from None
        return value


MAX_INT = 10**15
"""The largest integer a request may carry (JSON body or query): every count and limit is far below."""


def _lone_surrogate(data: Any, where: str = "") -> tuple[str, str] | None:
    """The field path and the first lone surrogate of a string in ``data`` (keys included), if any."""
    if isinstance(data, str):
        # in C, not a loop over the characters (a 200 KB text: 19.8 ms that way, 0.2 ms this way):
        # the only characters UTF-8 cannot encode are surrogates
        if data.isascii():
            return None
        try:
            data.encode("utf-8")
        except UnicodeEncodeError as exc:
            return where, data[exc.start]
        return None
    if isinstance(data, dict):
        for k, v in data.items():
            found = _lone_surrogate(k, where) or _lone_surrogate(v, f"{where}.{k}" if where else str(k))
            if found is not None:
                return found
    elif isinstance(data, list):
        for i, v in enumerate(data):
            found = _lone_surrogate(v, f"{where}[{i}]")
            if found is not None:
                return found
    return None


def _check_integers(data: Any, depth: int = 0) -> None:
    """UsageError for an integer in a request body over :data:`MAX_INT` (in magnitude)."""
    if isinstance(data, bool):
        return
    if isinstance(data, int):
        if not -MAX_INT <= data <= MAX_INT:
            raise errors.UsageError(f"an integer in the request body is out of range (at most {MAX_INT})")
    elif isinstance(data, dict):
        for v in data.values():
            _check_integers(v, depth + 1)
    elif isinstance(data, list):
        for v in data:
            _check_integers(v, depth + 1)


Answer = tuple[int, Any]
"""A status and the record answered with (or :class:`Raw`: the JSON bytes of one)."""


class Raw(bytes):
    """An answer already in JSON (a request key's stored answer), sent as it is."""


Parking = Generator[Park, bool, M]
"""A long-poll's ``M``, on its way: it yields its parks to the HTTP loop (holding no thread) and is
sent, at each resumption, whether the client hung up (:meth:`Dispatcher.long_poll`)."""

Answered = Answer | Parking[Answer]
"""What a handler gives back: its answer, or (a long-poll) the answer on its way."""

Handler = Callable[["Dispatcher", Request], Answered]
"""What serves a route: bound to it by name (:func:`fleet.daemon.dispatch.bind`)."""


def at_once(got: Answered) -> Answer:
    """The answer of a handler that must not park (a keyed write, a rebuild): a FleetError (500)
    naming the daemon's bug if it does."""
    if isinstance(got, tuple):
        return got
    try:
        next(got)
    except StopIteration as stop:
        answer: Answer = stop.value
        return answer
    got.close()
    raise errors.FleetError("the daemon's handler waited where it cannot (a keyed write): the daemon's bug")


Rebuild = Callable[["Dispatcher", Request, Event], Answer]
"""How a write's answer is rebuilt from the event it recorded, when the daemon died before storing it."""
