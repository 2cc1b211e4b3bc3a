"""The daemon itself: its health, who a token is, and the event log (``fleet export``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from fleet import __version__
from fleet.daemon.request import Answer, Request
from fleet.models import Health, Whoami

if TYPE_CHECKING:
    from fleet.daemon.dispatch import Dispatcher


def health(d: Dispatcher, r: Request) -> Answer:
    return 200, Health(
        ok=True,
        version=__version__,
        pid=os.getpid(),
        store_id=d.s.store_id,
        parked=d.notifier.parked,
    )


def whoami(d: Dispatcher, r: Request) -> Answer:
    wave = d.s.wave_name(r.who, r.who.wave_id) if r.who.wave_id else None
    waves = None
    if r.who.waves is not None:
        waves = [w.name for w in d.s.list_waves(r.who)]
    return 200, Whoami(
        principal=r.who.name, wave_id=r.who.wave_id, wave=wave, daemon_version=__version__,
        machine=r.who.machine, waves=waves, can_mint=r.who.is_operator,
    )  # fmt: skip


def events(d: Dispatcher, r: Request) -> Answer:
    """A page of the event log (``fleet export``): the full operator only."""
    from fleet.store.artifact import PAGE_ROWS, export_page

    wave = r.text("wave")
    tokens = r.flag("tokens")
    return 200, export_page(
        d.s, r.who, wave, after=r.q_int("after", 0), limit=r.q_int("limit", PAGE_ROWS), tokens=tokens
    )


HANDLERS = (
    health,
    whoami,
    events,
)
