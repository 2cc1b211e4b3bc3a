"""Budgets (docs/budgets.md): read, set, a channel's spend and its report of one passed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet.daemon.request import Answer, Request
from fleet.records.budgets import BudgetList, BudgetReport, SetBudget, SpendReport

if TYPE_CHECKING:
    from fleet.daemon.dispatch import Dispatcher


def budgets(d: Dispatcher, r: Request) -> Answer:
    return 200, BudgetList(budgets=d.s.budgets(r.who, r.arg, r.text("participant")))


def set_budget(d: Dispatcher, r: Request) -> Answer:
    got = d.s.set_budget(r.who, r.arg, r.model(SetBudget))
    return 200, BudgetList(budgets=[got] if got is not None else [])


def report_spend(d: Dispatcher, r: Request) -> Answer:
    return 200, BudgetList(budgets=d.s.report_spend(r.who, r.arg, r.model(SpendReport)))


def budget_reached(d: Dispatcher, r: Request) -> Answer:
    got = d.s.budget_reached(r.who, r.arg, r.model(BudgetReport))
    if got.first and got.wavelet_id:
        wave = d.s.get_wave(r.who, r.arg)
        d.wrote(wave.id, "system", got.wavelet_id)
    return 200, got


HANDLERS = (
    budgets,
    set_budget,
    report_spend,
    budget_reached,
)
