"""Wavelets: resolve a reference, read one, fork, invite, leave, set its topic, and its assembled
context."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet import errors
from fleet.daemon.request import Answer, Rebuild, Request
from fleet.models import NewFork, NewTopic, RosterChange
from fleet.store.events import Event, RosterInvited, RosterLeft, WaveletForked, WaveletTopicSet
from fleet.store.summaries import CONTEXT_PAGE

if TYPE_CHECKING:
    from fleet.daemon.dispatch import Dispatcher


def resolve(d: Dispatcher, r: Request) -> Answer:
    ref = r.text("ref")
    if not ref:
        raise errors.UsageError("resolve needs ?ref=WAVE/WAVELET, a wavelet name with &wave=, or an id")
    return 200, d.s.resolve(r.who, ref, r.text("wave"))


def get_wavelet(d: Dispatcher, r: Request) -> Answer:
    return 200, d.s.resolve(r.who, r.arg)


def fork(d: Dispatcher, r: Request) -> Answer:
    body = r.model(NewFork)
    wl = d.s.fork(r.who, r.arg, body.name, body.with_, private=body.private, as_=body.as_)
    d.roster_changed(wl, *(m.name for m in wl.roster))
    return 201, wl


def invite(d: Dispatcher, r: Request) -> Answer:
    body = r.model(RosterChange)
    wl = d.s.invite(r.who, r.arg, body.name, as_=body.as_)
    d.roster_changed(wl, body.name)
    return 200, wl


def leave(d: Dispatcher, r: Request) -> Answer:
    body = r.model(RosterChange)
    wl = d.s.leave(r.who, r.arg, body.name, as_=body.as_)
    d.roster_changed(wl, body.name)
    return 200, wl


def set_topic(d: Dispatcher, r: Request) -> Answer:
    body = r.model(NewTopic)
    wl = d.s.set_topic(r.who, r.arg, body.topic, as_=body.as_)
    d.roster_changed(wl)  # its readers (the system blip), its wave's feeds and the tree (the console)
    return 200, wl


def context(d: Dispatcher, r: Request) -> Answer:
    """One page of the assembled context: ``limit`` entries (default 500), older than ``before``."""
    limit = r.q_int("limit", CONTEXT_PAGE)
    if limit < 1:
        raise errors.UsageError(f"limit={limit} must be at least 1")
    return 200, d.s.context(r.who, r.arg, limit=limit, before=r.text("before"))


HANDLERS = (
    resolve,
    get_wavelet,
    fork,
    invite,
    leave,
    set_topic,
    context,
)


def _wavelet_answer(status: int) -> Rebuild:
    def rebuild(d: Dispatcher, r: Request, e: Event) -> Answer:
        assert isinstance(e, WaveletForked | RosterInvited | RosterLeft | WaveletTopicSet)
        return status, d.s.resolve(r.who, e.wavelet_id)

    return rebuild


REBUILDS = {
    "fork": _wavelet_answer(201),
    "invite": _wavelet_answer(200),
    "leave": _wavelet_answer(200),
    "set_topic": _wavelet_answer(200),
}
