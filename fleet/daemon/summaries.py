"""Summaries: a wavelet's summaries, offering one, checking the latest, what one must cover, and pins."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet.daemon.request import Answer, Request
from fleet.models import NewPin, NewSummary, SummaryList
from fleet.store.summaries import INPUT_MAX as SUMMARY_INPUT_MAX

if TYPE_CHECKING:
    from fleet.daemon.dispatch import Dispatcher


def summaries(d: Dispatcher, r: Request) -> Answer:
    return 200, SummaryList(summaries=d.s.summaries.of(r.who, r.arg))


def summarize(d: Dispatcher, r: Request) -> Answer:
    verdict = d.s.summaries.summarize(r.who, r.arg, r.model(NewSummary))
    return (201 if verdict.accepted else 200), verdict


def summary_check(d: Dispatcher, r: Request) -> Answer:
    return 200, d.s.summaries.check(r.who, r.arg)


def summary_pending(d: Dispatcher, r: Request) -> Answer:
    return 200, d.s.summaries.pending(r.who, r.arg, limit=r.q_int("limit", SUMMARY_INPUT_MAX))


def pin(d: Dispatcher, r: Request) -> Answer:
    return 200, d.s.summaries.pin(r.who, r.arg, as_=r.model(NewPin).as_)


HANDLERS = (
    summaries,
    summarize,
    summary_check,
    summary_pending,
    pin,
)
