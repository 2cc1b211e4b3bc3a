"""Permission prompts (docs/permissions.md): a hook asks, the operator answers, the hook waits."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet.console import presence_key
from fleet.daemon.request import Answer, Parking, Rebuild, Request
from fleet.daemon.wakes import permission_key
from fleet.records.permissions import PermissionAnswer, PermissionAsk, PermissionList, PermissionSettled
from fleet.store.events import Event, PermissionAnswered, PermissionAsked

if TYPE_CHECKING:
    from fleet.daemon.dispatch import Dispatcher


def permissions_changed(d: Dispatcher, wave_id: str) -> None:
    """Wake the hooks waiting on the wave's requests and the console's presence streams."""
    d.notifier.bump(permission_key(wave_id), presence_key(wave_id))


def ask_permission(d: Dispatcher, r: Request) -> Answer:
    req = d.s.permissions.ask(r.who, r.arg, r.model(PermissionAsk))
    permissions_changed(d, req.wave_id)
    return 201, req


def permissions(d: Dispatcher, r: Request) -> Answer:
    pending = r.flag("pending")
    got = d.s.permissions.list(
        r.who, r.arg, r.text("participant"), pending=pending, limit=r.q_int("limit", 100)
    )
    return 200, PermissionList(requests=got)


def permission(d: Dispatcher, r: Request) -> Parking[Answer]:
    """One request; with ``wait``, a long-poll until it is no longer pending (what the hook waits on)."""
    wave, request_id = r.args
    wait = r.q_float("wait", 0.0)
    wave_id = d.s.wave_id(r.who, wave)
    req = yield from d.long_poll(
        wait,
        lambda: d.s.permissions.get(r.who, wave_id, request_id),
        lambda got: got.state == "pending",
        lambda _got: (permission_key(wave_id),),
    )
    return 200, req


def answer_permission(d: Dispatcher, r: Request) -> Answer:
    req = d.s.permissions.answer(r.who, r.arg, r.model(PermissionAnswer))
    permissions_changed(d, req.wave_id)
    return 200, req


def settle_permission(d: Dispatcher, r: Request) -> Answer:
    wave, request_id = r.args
    req = d.s.permissions.settle(r.who, wave, request_id, r.model(PermissionSettled))
    permissions_changed(d, req.wave_id)
    return 200, req


HANDLERS = (
    ask_permission,
    permissions,
    permission,
    answer_permission,
    settle_permission,
)


def _permission_answer(status: int) -> Rebuild:
    def rebuild(d: Dispatcher, r: Request, e: Event) -> Answer:
        assert isinstance(e, PermissionAsked | PermissionAnswered)
        return status, d.s.permissions.get(r.who, e.wave_id, e.request_id)

    return rebuild


REBUILDS = {
    "ask_permission": _permission_answer(201),
    "answer_permission": _permission_answer(200),
    "settle_permission": _permission_answer(200),
}
