"""Waves: create, list, read one, its activity and its whole-wave stream."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet.console import tree_key
from fleet.daemon.request import Answer, Parking, Rebuild, Request
from fleet.models import BlipPage, NewWave, WaveList
from fleet.store.events import Event, WaveCreated

if TYPE_CHECKING:
    from fleet.daemon.dispatch import Dispatcher


def create_wave(d: Dispatcher, r: Request) -> Answer:
    body = r.model(NewWave)
    wave = d.s.create_wave(r.who, body.name, body.with_)
    d.notifier.bump(wave.id, tree_key(wave.id))
    return 201, wave


def list_waves(d: Dispatcher, r: Request) -> Answer:
    return 200, WaveList(waves=d.s.list_waves(r.who))


def get_wave(d: Dispatcher, r: Request) -> Answer:
    return 200, d.s.get_wave(r.who, r.arg)


def activity(d: Dispatcher, r: Request) -> Answer:
    return 200, d.s.activity(r.who, r.arg)


def read_wave(d: Dispatcher, r: Request) -> Parking[Answer]:
    """Every blip of the wave after ``after`` (long-poll): the operator's whole-wave stream."""
    after = r.text("after") or ""
    limit = r.q_int("limit", 500)
    wait = r.q_float("wait", 0.0)
    wave_id = str(d.s.access.wave(r.who, r.arg)["id"]) if wait > 0 else ""
    blips = yield from d.long_poll(
        wait,
        lambda: d.s.read_wave_after(r.who, r.arg, after, limit=limit),
        lambda got: not got,
        lambda _got: (wave_id,),
    )
    return 200, BlipPage(blips=blips, cursor=blips[-1].id if blips else after)


HANDLERS = (
    create_wave,
    list_waves,
    get_wave,
    activity,
    read_wave,
)


def _wave_answer(d: Dispatcher, r: Request, e: Event) -> Answer:
    assert isinstance(e, WaveCreated)
    return 201, d.s.get_wave(r.who, e.wave_id)


REBUILDS: dict[str, Rebuild] = {"create_wave": _wave_answer}
