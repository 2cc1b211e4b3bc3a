"""Rows to records: how the store's tables become the :mod:`fleet.models` shapes it answers with.

Builders only: no visibility decisions (those are :mod:`fleet.store.access`'s) and no writes. A
record that points at another wavelet (a wavelet's parent, a blip's source) is built for one reader
and takes that reader's :class:`~fleet.store.access.Sight`: the ids it may not be told of are
withheld (None; a wavelet then says ``parent_withheld``). Every builder of such a record requires
one, so no answer can forget to.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from fleet.models import Blip, Member, Seat, SessionRecord, TokenInfo, Wave, Wavelet
from fleet.records.budgets import Budget
from fleet.store.access import Sight
from fleet.store.schema import Conn, Row

R = TypeVar("R", bound=msgspec.Struct)

_COLUMNS: dict[tuple[type, tuple[str, ...]], tuple[str, ...]] = {}


def of_row(cls: type[R], row: Row, **values: Any) -> R:
    """The ``cls`` record of ``row``: each field from the column of its name, ``values`` for those
    a column does not hold as is (a field with neither keeps its default, a column no field names is
    left). The one conversion every builder below goes through."""
    keys = tuple(row.keys())
    names = _COLUMNS.get((cls, keys))
    if names is None:  # once per record and query shape: a read builds hundreds of blips
        names = _COLUMNS[(cls, keys)] = tuple(
            f for f in cls.__struct_fields__ if f in keys and f not in values
        )
    return cls(**{f: row[f] for f in names}, **values)


def blip(b: Row, sight: Sight) -> Blip:
    """Every field from the row, the source withheld where ``sight`` may not be told of it."""
    return shown(of_row(Blip, b), sight)


def shown(b: Blip, sight: Sight) -> Blip:
    """``b`` as ``sight``'s reader may see it: ``b`` itself, or a copy with its source withheld
    (``b`` may be shared between readers, as a feed's generation memo shares it: never changed).
    Also what an event's blip, just written, reads as (nothing supersedes it yet)."""
    if b.source_wavelet_id is None or sight.sees(b.source_wavelet_id):
        return b
    return msgspec.structs.replace(b, source_wavelet_id=None, source_blip_id=None)


def members(conn: Conn, wavelet_id: str) -> list[Member]:
    """A wavelet's roster, in the order members joined."""
    return [
        of_row(Member, m)
        for m in conn.execute(
            "SELECT * FROM members WHERE wavelet_id = ? ORDER BY joined_at, name", (wavelet_id,)
        )
    ]


def parent(wl: Row, sight: Sight) -> tuple[str | None, str | None, bool]:
    """(``parent_id``, ``fork_blip_id``, ``parent_withheld``) of wavelet row ``wl`` for ``sight``'s
    reader: the parent's ids, or (None, None, True) where it may not be told of the parent."""
    if wl["parent_id"] is None or sight.sees(wl["parent_id"]):
        return wl["parent_id"], wl["fork_blip_id"], False
    return None, None, True


def wavelet(
    conn: Conn,
    wl: Row,
    sight: Sight,
    wave_name: str | None = None,
    roster: list[Member] | None = None,
) -> Wavelet:
    """A wavelet with its roster (read unless given), for ``sight``'s reader (``wave_name`` saves a
    lookup when the caller has it)."""
    if wave_name is None:
        wave_name = conn.execute("SELECT name FROM waves WHERE id = ?", (wl["wave_id"],)).fetchone()[0]
    parent_id, fork_blip_id, withheld = parent(wl, sight)
    return of_row(
        Wavelet,
        wl,
        wave=wave_name,
        parent_id=parent_id,
        fork_blip_id=fork_blip_id,
        private=bool(wl["private"]),
        roster=members(conn, wl["id"]) if roster is None else roster,
        parent_withheld=withheld,
    )


def wave(w: Row, wavelets: list[Wavelet] | None = None) -> Wave:
    """A wave; with ``wavelets`` (those its reader may see), the whole tree."""
    return of_row(Wave, w, wavelets=wavelets or [])


def token_info(t: Row) -> TokenInfo:
    """A token row joined with its wave's name (``AS wave``); ``waves`` is the caller's to set."""
    return of_row(TokenInfo, t, waves=None)


def session(s: Row) -> SessionRecord:
    return of_row(SessionRecord, s)


def seat(s: Row) -> Seat:
    return of_row(Seat, s)


def budget(b: Row, wavelet: str, reached: list[str]) -> Budget:
    return of_row(Budget, b, wavelet=wavelet, reached=reached)
