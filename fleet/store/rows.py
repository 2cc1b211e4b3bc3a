"""Rows to records: how the store's tables become the :mod:`fleet.models` shapes it answers with.

Builders only: no visibility decisions (those are :mod:`fleet.store.access`'s) and no writes. A
record that points at another wavelet (a wavelet's parent, a blip's source) is built for one reader
and takes that reader's :class:`~fleet.store.access.Sight`: the ids it may not be told of are
withheld (None; a wavelet then says ``parent_withheld``). Every builder of such a record requires
one, so no answer can forget to.
"""

from __future__ import annotations

import sqlite3

from fleet.models import Blip, Member, Seat, SessionRecord, TokenInfo, Wave, Wavelet
from fleet.records.budgets import Budget
from fleet.store.access import Sight
from fleet.store.events import BlipData
from fleet.wire import built

Row = sqlite3.Row


def blip(b: Row, sight: Sight) -> Blip:
    """Every field from the row (:func:`fleet.wire.built`: reads build hundreds of these), the
    source withheld where ``sight`` may not be told of it."""
    values = {k: b[k] for k in BLIP_FIELDS}
    source = values["source_wavelet_id"]
    if source is not None and not sight.sees(source):
        values["source_wavelet_id"] = values["source_blip_id"] = None
    return built(Blip, values)


def shown(b: Blip, sight: Sight) -> Blip:
    """``b`` as ``sight``'s reader may see it: ``b`` itself, or a copy with its source withheld
    (``b`` may be shared between readers, as a feed's generation memo shares it: never changed)."""
    if b.source_wavelet_id is None or sight.sees(b.source_wavelet_id):
        return b
    return built(Blip, {**vars(b), "source_wavelet_id": None, "source_blip_id": None})


BLIP_FIELDS = tuple(f.name for f in Blip.__record_fields__)  # type: ignore[attr-defined]
"""Blip's fields, each a column of the ``blips`` table of the same name."""


def blip_of(b: BlipData, sight: Sight) -> Blip:
    """The blip an event just wrote, as a read by ``sight``'s reader would show it (nothing
    supersedes it yet)."""
    return shown(_written(b), sight)


def _written(b: BlipData) -> Blip:
    return Blip(
        id=b.id,
        wavelet_id=b.wavelet_id,
        wave_id=b.wave_id,
        author=b.author,
        kind=b.kind,
        text=b.text,
        replaces=b.replaces,
        source_wavelet_id=b.source_wavelet_id,
        source_blip_id=b.source_blip_id,
        created_at=b.created_at,
        actor=b.actor,
        replaced_by=b.replaced_by,
    )


def members(conn: sqlite3.Connection, wavelet_id: str) -> list[Member]:
    """A wavelet's roster, in the order members joined."""
    return [
        Member(name=m["name"], kind=m["kind"], joined_at=m["joined_at"], since=m["since"])
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


def wavelet(conn: sqlite3.Connection, wl: Row, sight: Sight, wave_name: str | None = None) -> Wavelet:
    """A wavelet with its roster, for ``sight``'s reader (``wave_name`` saves a lookup when the
    caller has it)."""
    if wave_name is None:
        wave_name = conn.execute("SELECT name FROM waves WHERE id = ?", (wl["wave_id"],)).fetchone()[0]
    parent_id, fork_blip_id, withheld = parent(wl, sight)
    return Wavelet(
        id=wl["id"],
        wave_id=wl["wave_id"],
        wave=wave_name,
        name=wl["name"],
        parent_id=parent_id,
        fork_blip_id=fork_blip_id,
        private=bool(wl["private"]),
        created_by=wl["created_by"],
        created_at=wl["created_at"],
        roster=members(conn, wl["id"]),
        parent_withheld=withheld,
        topic=wl["topic"],
    )


def wave(w: Row, wavelets: list[Wavelet] | None = None) -> Wave:
    """A wave; with ``wavelets`` (those its reader may see), the whole tree."""
    return Wave(
        id=w["id"], name=w["name"], created_at=w["created_at"], root_id=w["root_id"], wavelets=wavelets or []
    )


def token_info(t: Row) -> TokenInfo:
    """A token row joined with its wave's name (``AS wave``)."""
    return TokenInfo(
        id=t["id"],
        wave_id=t["wave_id"],
        wave=t["wave"],
        participant=t["participant"],
        created_at=t["created_at"],
        revoked_at=t["revoked_at"],
    )


def session(s: Row) -> SessionRecord:
    return SessionRecord(
        participant=s["participant"],
        session_id=s["session_id"],
        wavelet_id=s["wavelet_id"],
        layout=s["layout"],
        agent=s["agent"],
        transport=s["transport"],
        cwd=s["cwd"],
        host=s["host"],
        updated_at=s["updated_at"],
    )


def seat(s: Row) -> Seat:
    return Seat(
        wave_id=s["wave_id"],
        participant=s["participant"],
        session_id=s["session_id"],
        host=s["host"],
        pid=s["pid"],
        pane_id=s["pane_id"],
        cwd=s["cwd"],
        claimed_at=s["claimed_at"],
        closed_at=s["closed_at"],
        closed_why=s["closed_why"],
    )


def budget(b: Row, wavelet: str, reached: list[str]) -> Budget:
    return Budget(
        wave_id=b["wave_id"],
        wavelet_id=b["wavelet_id"],
        participant=b["participant"],
        tokens=b["tokens"],
        cost=b["cost"],
        source=b["source"],
        set_by=b["set_by"],
        set_at=b["set_at"],
        wavelet=wavelet,
        reached=reached,
    )
