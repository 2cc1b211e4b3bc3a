"""The wave's MEMORY.md, read and written by the daemon (:mod:`fleet.resident.memory`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet.daemon.request import Answer, Request
from fleet.models import MemoryAnswer, MemoryWrite
from fleet.store import OPERATOR_PRINCIPAL

if TYPE_CHECKING:
    from fleet.daemon.dispatch import Dispatcher


def memory(d: Dispatcher, r: Request) -> Answer:
    from fleet.resident import memory as pen

    seat, wave = d.s.memory_seat(r.who, r.arg)
    path = pen.memory_file(seat, wave.name)
    return 200, MemoryAnswer(wave=wave.name, path=str(path), content=pen.read(path))


def write_memory(d: Dispatcher, r: Request) -> Answer:
    """The daemon holds the pen (:mod:`fleet.resident.memory`): it writes the file, then one blip
    records the write (the operator's wakes the resident to re-read it)."""
    from fleet.resident import memory as pen

    body = r.model(MemoryWrite)
    seat, wave = d.s.memory_seat(r.who, r.arg)
    author = d.s.access.memory_author(r.who, seat, wave.name, body.as_)
    path = pen.memory_file(seat, wave.name)
    content = pen.apply(path, body.op, body.content)
    said = pen.summary_of(body.content, body.summary)
    by_resident = author == seat.participant
    text = pen.blip_text(body.op, said, wave.name, by_resident, seat.participant)
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
