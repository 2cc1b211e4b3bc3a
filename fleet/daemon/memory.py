"""The wave's MEMORY.md, read and written through the daemon: the routes' handlers.

Who may hold the pen is the store's rule (:meth:`fleet.store.Store.memory_seat`,
:mod:`fleet.store.access`); the file itself is a feature's (:data:`fleet.seams.memory_pens`, the
resident's by default): the daemon imports none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet import errors, seams
from fleet.daemon.request import Answer, Request
from fleet.models import MemoryAnswer, MemoryWrite
from fleet.store import OPERATOR_PRINCIPAL

if TYPE_CHECKING:
    from fleet.daemon.dispatch import Dispatcher


def _pen() -> seams.MemoryPen:
    pen = seams.first(seams.memory_pens)
    if pen is None:
        raise errors.NotFound(
            "this daemon holds no memory pen (no feature plugged into fleet.seams.memory_pens):"
            " start it with `fleet daemon start`, which loads the resident's"
        )
    return pen


def memory(d: Dispatcher, r: Request) -> Answer:
    seat, wave = d.s.memory_seat(r.who, r.arg)
    pen = _pen()
    path = pen.file(seat, wave.name)
    return 200, MemoryAnswer(wave=wave.name, path=str(path), content=pen.read(path))


def write_memory(d: Dispatcher, r: Request) -> Answer:
    """The daemon holds the pen: it writes the file, then one blip records the write (the
    operator's wakes the resident to re-read it)."""
    body = r.model(MemoryWrite)
    seat, wave = d.s.memory_seat(r.who, r.arg)
    author = d.s.access.memory_author(r.who, seat, wave.name, body.as_)
    pen = _pen()
    path = pen.file(seat, wave.name)
    content = pen.write(path, body.op, body.content)
    by_resident = author == seat.participant
    said, text = pen.note(body.op, body.content, body.summary, wave.name, by_resident, seat.participant)
    if by_resident:
        blip = d.s.post_system(OPERATOR_PRINCIPAL, wave.root_id, text)
    else:
        blip = d.s.post(r.who, wave.root_id, text)
    d.wrote(blip.wave_id, blip.author, blip.wavelet_id)
    return 200, MemoryAnswer(wave=wave.name, path=str(path), content=content, summary=said, blip_id=blip.id)


HANDLERS = (
    memory,
    write_memory,
)
