"""Blips: post (message, system, surface), replace, read a wavelet (long-poll), one blip and its history."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet.daemon.request import Answer, Parking, Rebuild, Request
from fleet.models import BlipList, BlipPage, NewBlip, NewSurface, NewSystemBlip
from fleet.store.events import BlipPosted, BlipReplaced, BlipSurfaced, Event
from fleet.store.rows import shown

if TYPE_CHECKING:
    from fleet.daemon.dispatch import Dispatcher


def post(d: Dispatcher, r: Request) -> Answer:
    body = r.model(NewBlip)
    blip = d.s.post(r.who, r.arg, body.text, as_=body.as_)
    d.wrote(blip.wave_id, blip.author, blip.wavelet_id)
    return 201, blip


def post_system(d: Dispatcher, r: Request) -> Answer:
    body = r.model(NewSystemBlip)
    blip = d.s.post_system(r.who, r.arg, body.text)
    d.wrote(blip.wave_id, blip.author, blip.wavelet_id)
    return 201, blip


def surface(d: Dispatcher, r: Request) -> Answer:
    body = r.model(NewSurface)
    blip = d.s.surface(r.who, r.arg, body.text, source_blip_id=body.source_blip_id, as_=body.as_)
    d.wrote(blip.wave_id, blip.author, blip.wavelet_id)
    return 201, blip


def replace(d: Dispatcher, r: Request) -> Answer:
    body = r.model(NewBlip)
    blip = d.s.replace(r.who, r.arg, body.text, as_=body.as_)
    d.wrote(blip.wave_id, blip.writer, blip.wavelet_id)
    return 201, blip


def read(d: Dispatcher, r: Request) -> Parking[Answer]:
    wl = d.s.resolve(r.who, r.arg)
    after = r.text("after") or ""
    limit = r.q_int("limit", 500)
    history = r.flag("history")
    wait = r.q_float("wait", 0.0)
    blips = yield from d.long_poll(
        wait,
        lambda: d.s.read_resolved(r.who, wl.id, after=after, limit=limit, history=history),
        lambda got: not got,
        lambda _got: (wl.id,),
    )
    return 200, BlipPage(blips=blips, cursor=blips[-1].id if blips else after)


def get_blip(d: Dispatcher, r: Request) -> Answer:
    return 200, d.s.get_blip(r.who, r.arg)


def history(d: Dispatcher, r: Request) -> Answer:
    return 200, BlipList(blips=d.s.history(r.who, r.arg))


HANDLERS = (
    post,
    post_system,
    surface,
    replace,
    read,
    get_blip,
    history,
)


def _blip_answer(d: Dispatcher, r: Request, e: Event) -> Answer:
    """The blip the write recorded, as its writer was shown it (the same sight of its sources)."""
    assert isinstance(e, BlipPosted | BlipSurfaced | BlipReplaced)
    return 201, shown(e.blip, d.s.access.sight(r.who))


REBUILDS: dict[str, Rebuild] = dict.fromkeys(("post", "post_system", "surface", "replace"), _blip_answer)
