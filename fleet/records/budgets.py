"""Budgets' records: what the operator sets, a channel reports and the store keeps.

The wire side of :mod:`fleet.budgets` (the rules of spend, the layout's budgets and the channel's
watch stay there): the models, the store, the daemon and the client use these without loading the
feature. :func:`check_limit` and the texts are here because the store applies the one and writes the
other in the same transaction as the event (``budget.set``, ``budget.reached``).
"""

from __future__ import annotations

import math
from typing import Literal

from fleet import errors
from fleet.wire import Record, field

# ---------------------------------------------------------------- records (the wire)


BudgetSource = Literal["operator", "layout"]


class BudgetRule(Record, kw_only=True):
    """A budget as it is set: what the ``budget.set`` event carries and a :class:`Budget` starts with."""

    wave_id: str
    wavelet_id: str
    """``""``: the whole wave."""
    participant: str
    """``""``: every participant (each measured on its own spend)."""
    tokens: int | None = None
    cost: float | None = None
    """USD, estimated from the price table."""
    source: BudgetSource = "operator"
    """``operator`` (``fleet budget set``) or ``layout`` (applied at spawn)."""
    set_by: str = ""
    set_at: str = ""


class Budget(BudgetRule, kw_only=True):
    """One budget as the store keeps it, with what its readers need beside it."""

    wavelet: str = ""
    """WAVE/WAVELET of ``wavelet_id`` (``""`` for the whole wave)."""
    reached: list[str] | None = None
    """Participants that reached it since it was set (their deliveries in the scope are held)."""
    spent_tokens: int | None = None
    """A wavelet budget (``participant`` ``""``): what its members spent together on its turns, as
    their channels last reported (None for the other scopes)."""
    spent_cost: float | None = None
    """The same in estimated USD, of the priced models (see :attr:`spent_unpriced`)."""
    spent_unpriced: list[str] | None = None
    """A wavelet budget: the models with no price some member reported spending on its turns (while
    any is, the members' cost is unknown: :func:`shared_cost`)."""

    @property
    def shared(self) -> bool:
        """Judged on the members' sum: a wavelet's budget for everyone on it."""
        return bool(self.wavelet_id) and not self.participant


class SetBudget(Record, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/waves/{wave}/budgets`` (operator only). Neither ``tokens`` nor ``cost``: clear it."""

    wavelet: str | None = None
    """A wavelet reference (WAVE/NAME, NAME in this wave, or id); None: the whole wave."""
    participant: str | None = None
    tokens: int | None = None
    cost: float | None = None
    source: str = "operator"


class BudgetReport(Record, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/waves/{wave}/budgets/reached``: a participant's channel says it passed a budget."""

    participant: str
    wavelet_id: str
    """The budget's scope (``""``: the whole wave)."""
    scope: str
    """The budget's participant field (``""``: everyone)."""
    set_at: str
    """Which setting of the budget was passed (a report about an older one is ignored)."""
    spent: str
    """What was spent, as the notice says it (``"51,234 tokens"``)."""


class Spend(Record, kw_only=True, forbid_unknown_fields=True):
    """One session's spend on one wavelet's turns."""

    wavelet_id: str
    tokens: int
    cost: float = 0.0
    """USD of the priced models."""
    unpriced: list[str] = field(default_factory=list)
    """Models counted in ``tokens`` that have no price: the session's cost there is unknown."""


class SpendReport(Record, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/waves/{wave}/budgets/spend``: a member's channel reports its session's spend on the
    wavelets that have a shared budget; answered with :class:`BudgetList` (the budgets that apply to
    ``participant``, sums included)."""

    participant: str
    session_id: str
    spend: list[Spend]


class BudgetList(Record, kw_only=True):
    budgets: list[Budget]


class BudgetReachedAnswer(Record, kw_only=True):
    first: bool
    """True only for the first report of this budget as set: the one that posted the blip."""
    blip_id: str | None = None
    wavelet_id: str | None = None
    """Where the blip naming the operator went."""


# ---------------------------------------------------------------- values


def applies(b: Budget, participant: str) -> bool:
    return b.participant in ("", participant)


def shared_cost(b: Budget) -> float | None:
    """A wavelet budget's members' cost together: None (unknown) while a member reported a model with
    no price."""
    return None if b.spent_unpriced else (b.spent_cost or 0.0)


def passed(b: Budget, tokens: int, cost: float | None) -> bool:
    """Whether spending (``tokens``, ``cost``) passed ``b`` (reaching it exactly counts as passed). An
    unknown ``cost`` (None) has passed any cost budget: it is never counted as under it."""
    if b.tokens is not None:
        return tokens >= b.tokens
    return b.cost is not None and (cost is None or cost >= b.cost)


def check_limit(tokens: int | None, cost: float | None, where: str = "a budget") -> None:
    """UsageError unless at most one of ``tokens`` (a whole number > 0) and ``cost`` (USD > 0) is set."""
    if tokens is not None and cost is not None:
        raise errors.UsageError(f"{where}: give tokens or cost, not both")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0):
        raise errors.UsageError(f"{where}: tokens must be a whole number above 0, not {tokens!r}")
    if cost is not None and (
        isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost) or cost <= 0
    ):
        raise errors.UsageError(f"{where}: cost must be a number of USD above 0, not {cost!r}")


def limit_text(b: Budget) -> str:
    if b.tokens is not None:
        return f"{b.tokens:,} tokens"
    return f"${b.cost:.2f}" if b.cost is not None else "none"


def scope_text(b: Budget, wave: str) -> str:
    where = b.wavelet or wave
    if b.participant:
        return f"{b.participant} in {where}"
    if b.shared:
        return f"the members of {where} together"
    return f"each participant in {where}"


def operator_text(participant: str, b: Budget, spent: str, wave: str) -> str:
    """The one blip naming the operator when ``participant`` passes ``b``."""
    target = b.wavelet or wave
    who = "" if b.shared else f" {b.participant or participant}"
    if b.shared:
        return (
            f"operator: the members of {target} reached their budget together ({limit_text(b)}; "
            f"{spent} spent, by {participant}'s report). Deliveries to each member there are paused; "
            f"their blips are held and delivered once you raise it: fleet budget set {target} "
            "--tokens N (or --cost USD)."
        )
    return (
        f"operator: {participant} reached its budget ({limit_text(b)} for {scope_text(b, wave)}; "
        f"{spent} spent). Deliveries to {participant} there are paused; its blips are held and "
        f"delivered once you raise it: fleet budget set {target}{who} --tokens N (or --cost USD)."
    )
