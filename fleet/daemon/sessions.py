"""Agent sessions a participant runs, and the resident's seat."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet.daemon.request import Answer, Request
from fleet.models import CloseSeat, NewSeat, NewSession, SeatAnswer, SessionList

if TYPE_CHECKING:
    from fleet.daemon.dispatch import Dispatcher


def record_session(d: Dispatcher, r: Request) -> Answer:
    return 200, d.s.record_session(r.who, r.arg, r.model(NewSession))


def sessions(d: Dispatcher, r: Request) -> Answer:
    participant = r.text("participant")
    return 200, SessionList(sessions=d.s.sessions(r.who, r.arg, participant))


def seat(d: Dispatcher, r: Request) -> Answer:
    return 200, SeatAnswer(seat=d.s.seat(r.who, r.arg))


def claim_seat(d: Dispatcher, r: Request) -> Answer:
    return 200, SeatAnswer(seat=d.s.claim_seat(r.who, r.arg, r.model(NewSeat)))


def close_seat(d: Dispatcher, r: Request) -> Answer:
    return 200, SeatAnswer(seat=d.s.close_seat(r.who, r.arg, r.model(CloseSeat)))


HANDLERS = (
    record_session,
    sessions,
    seat,
    claim_seat,
    close_seat,
)
