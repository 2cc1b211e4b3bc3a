"""Budgets: how much a participant may spend before fleet stops delivering to it.

A **budget** is a limit in tokens (every token the model processed or wrote: input, output, cache
read, cache creation — :attr:`fleet.usage.Figures.tokens`) or in estimated USD (the price table of
:mod:`fleet.usage`) on one **scope** of a wave:

========================  ==========================================================================
wavelet ``""``, p ``P``   participant ``P``'s spend in the whole wave (a layout's per-participant
                          ``budget``; ``fleet budget set WAVE P``)
wavelet ``W``, p ``""``   what ``W``'s members spend on its turns *together* (a layout's top-level
                          ``budget``, for the wavelet it is spawned on; ``fleet budget set WAVE/W``)
wavelet ``W``, p ``P``    ``P``'s spend on ``W``'s turns (``fleet budget set WAVE/W P``)
wavelet ``""``, p ``""``  every participant's own spend in the wave (``fleet budget set WAVE``)
========================  ==========================================================================

A turn's spend belongs to the wavelet whose blip woke it (:mod:`fleet.usage`). Budgets live in the
store (event ``budget.set``, table ``budgets``), set by the operator only; a layout's budget is
applied at spawn unless the operator set that scope since (an operator's budget is never lowered
back by a respawn).

**Who measures, and where the check is:** the participant's own delivery engine (its channel), at
each delivery. It is the one process that runs whenever blips reach the session, it runs on the
machine where the session's transcript is (the daemon may be remote and never sees transcripts), and
it already reads that transcript incrementally for receipts; stopping delivery is its decision, like
the cap's. ``fleet supervise`` runs only when the operator runs it, so a budget kept there would hold
only then. What a caller may rely on (:class:`BudgetWatch`):

- Past a budget, blips of the scope are **held, not dropped**: the committed cursor stays where it
  is (the feed is asked past them so it does not return them again), and once the operator raises or
  clears the budget the next feed hands them out from the cursor, in order, nothing lost — a
  restarted channel holds them the same way, because nothing about them was committed.
- **One notice** to the participant and **one blip naming the operator** per budget as set: the
  channel reports the budget reached to the daemon, which records it (event ``budget.reached``) with
  a ``system`` blip (author ``system``, actor the participant: it wakes nobody) in the scope's
  wavelet, or in the wavelet the participant was spawned on; only the first report of a budget as
  set is accepted, so a restarted channel or a second report posts nothing more. Setting the budget
  again (``fleet budget set``) starts it over.
- A **wavelet budget is the members' sum**. Each member's channel, at each budget check while the
  wavelet has one, reports its session's own spend on the wavelet's turns (``POST
  …/budgets/spend``, table ``budget_spend``: one row per participant, session and wavelet, never
  lowered by a report, so a repeated or late report changes nothing) and is answered with the
  budgets carrying the sum (:attr:`Budget.spent_tokens`, :attr:`Budget.spent_cost`). Once the sum is
  at or over the limit every member is held at its next delivery and each gets its own one notice;
  the operator gets one blip for the budget as set, from the first member to report it. The rows
  are derived state, not in the event log: a member reports again at every check.
- A session without a transcript (the stand-in, other CLIs) spends nothing that fleet can see, so no
  budget stops it.
- **An unpriced model never counts as free.** A model the price table does not name has an unknown
  cost (:mod:`fleet.usage`), and a cost budget is never judged on a partial sum: spend in its scope
  with such a model counts as *passed* (:func:`passed`), so the channel holds the scope's deliveries
  and its one notice and one operator blip say the cost is unknown, name the model and the user's
  ``<config>/prices.toml`` (:func:`spent_text`). Where the model is known beforehand — the
  participant's recorded session has used it, or its layout profile names a full model id —
  :func:`check_priced` refuses the cost budget instead (``fleet budget set``, spawn). A member of a
  wavelet budget reports the models it could not price with its spend; the members' sum is unknown
  while any member's is (:attr:`Budget.spent_unpriced`, :func:`shared_cost`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from fleet import errors, seams
from fleet.records.budgets import (
    Budget,
    BudgetReport,
    SetBudget,
    Spend,
    SpendReport,
    applies,
    limit_text,
    passed,
    scope_text,
    shared_cost,
)

if TYPE_CHECKING:
    from fleet.client import Client
    from fleet.layouts import Layout
    from fleet.models import Wave, Wavelet
    from fleet.paths import Paths
    from fleet.usage import Counter, PriceTable

log = logging.getLogger(__name__)


def spent_text(
    b: Budget, tokens: int, cost: float | None, unpriced: Iterable[str] = (), prices_file: str = ""
) -> str:
    """What was spent, as the notice and the operator's blip say it (``"51,234 tokens"``, ``"$2.51"``,
    or for an unknown cost the models with no price and where to add one)."""
    if b.tokens is not None:
        return f"{tokens:,} tokens"
    if cost is None:
        named = ", ".join(sorted(set(unpriced))) or "a model"
        where = f" in {prices_file}" if prices_file else ""
        return (
            f"an unknown amount ({tokens:,} tokens of {named}, which has no price{where}: add one there"
            " and set the budget again, or budget tokens instead)"
        )
    return f"${cost:.2f}"


def notice_text(b: Budget, spent: str, wave: str, held_in: str) -> str:
    """The one notice a participant gets when it passes ``b``."""
    return (
        f"Budget reached: {limit_text(b)} for {scope_text(b, wave)} ({spent} spent). "
        f"fleet has stopped delivering blips to you {held_in}; they are held, not lost, and arrive "
        "when the operator raises the budget. The operator has been told. Do not post about it; "
        "finish what you are doing and stop."
    )


def scope_members(
    client: Client, wave: str, wavelet: str | None, participant: str | None
) -> tuple[str, list[str]]:
    """(wave id, the agents a budget of this scope applies to): ``participant``, else the agents on
    ``wavelet``'s roster, else on any roster of the wave."""
    w = client.get_wave(wave)
    if participant:
        return w.id, [participant]
    only = client.resolve(wavelet, wave=w.name).id if wavelet else None
    names = [m.name for wl in w.wavelets if only in (None, wl.id) for m in wl.roster if m.kind == "agent"]
    return w.id, list(dict.fromkeys(names))


def _looks_like_model_id(model: str | None) -> bool:
    """A full model id (``claude-sonnet-4-5-20250929``), not an alias Claude Code resolves itself
    (``sonnet``, ``opus``): only an id can be looked up in the price table before it runs."""
    return bool(model) and "-" in str(model)


def check_priced(
    client: Client,
    paths: Paths,
    wave_id: str,
    participants: Iterable[str],
    *,
    where: str,
    instead: str,
    declared: Mapping[str, str | None] | None = None,
) -> list[str]:
    """Refuse a cost budget that cannot be judged: :class:`~fleet.errors.UsageError` naming the
    participant, the model and the user's ``<config>/prices.toml`` when a model a participant is known
    to use has no price — one its recorded session's transcript (on this machine) shows, or the full
    model id its layout profile names (``declared``). Returns the participants whose model is not
    known yet (no session, no model id): their budget is judged once their first response is seen,
    and held while its model has no price."""
    from fleet.usage import add_price_text, prices, read_session, session_env, user_prices

    table = prices(paths)
    records = {r.participant: r for r in client.sessions(wave_id)}
    declared = declared or {}
    unknown: list[str] = []
    for name in dict.fromkeys(participants):
        models: set[str] = set()
        rec = records.get(name)
        if rec is not None:
            got = read_session(paths, rec.session_id, session_env(rec.layout, name, paths))
            models |= {m for (_w, m) in got.counter.tallies}
        model = declared.get(name)
        if _looks_like_model_id(model):
            models.add(str(model))
        if not models:
            unknown.append(name)
            continue
        missing = sorted(m for m in models if table.price(m) is None)
        if missing:
            raise errors.UsageError(
                f"{where}: {name} uses model {', '.join(missing)}, which has no price: its cost is unknown,"
                f" so a cost budget could never be judged; {add_price_text(missing, user_prices(paths))},"
                f" or budget tokens instead ({instead})"
            )
    return unknown


def apply_layout_budgets(
    client: Client, wave_id: str, wavelet_id: str, layout: Layout, roster: Iterable[str]
) -> None:
    """Record a layout's budgets at spawn (``source="layout"``): its top-level ``budget`` for the
    wavelet spawned, each participant's own for that participant in the wave. The store keeps a
    budget the operator set over a layout's, and an unchanged one as it is (so a respawn neither
    lowers a raised budget nor forgets who reached one)."""
    if layout.budget is not None:
        client.set_budget(
            wave_id,
            SetBudget(
                wavelet=wavelet_id, tokens=layout.budget.tokens, cost=layout.budget.cost, source="layout"
            ),
        )
    for name in roster:
        own = layout.profile(name).budget
        if own is not None:
            client.set_budget(
                wave_id, SetBudget(participant=name, tokens=own.tokens, cost=own.cost, source="layout")
            )


# ---------------------------------------------------------------- the channel's watch


class BudgetWatch:
    """One participant's budgets at delivery time (the engine's ``hold_back``).

    Called with the participant's wavelets (id -> WAVE/WAVELET) before each delivery, it returns the
    wavelet ids whose blips must be held now. It asks the daemon for the budgets that apply to the
    participant, and only when there are some reads the session's usage (incrementally, the
    transcript of :mod:`fleet.usage`); it reports each budget passed once, and pushes the one notice
    through ``who.notify`` when the daemon says the report was the first.
    """

    def __init__(self, who: seams.Participant) -> None:
        self.client = who.client
        self.wave = who.wave
        self.participant = who.participant
        self.session_id = who.session_id
        self.paths = who.paths
        self.notify = who.notify
        self.held: frozenset[str] = frozenset()
        """The wavelet ids held at the last look."""
        self._reported: set[tuple[str, str, str]] = set()
        self._prices: PriceTable | None = None
        self._prices_stamp: int | None = None

    def _counter(self) -> Counter | None:
        if not self.session_id:
            return None
        from fleet.usage import read_session

        return read_session(self.paths, self.session_id).counter

    def _table(self) -> PriceTable:
        """The price table, read again when the user's own file changes (a price added while a
        budget holds is used at the next delivery). One that cannot be read prices nothing: every
        cost is unknown, so a cost budget holds rather than counting $0."""
        from fleet.usage import PriceTable, prices, user_prices

        try:
            stamp = user_prices(self.paths).stat().st_mtime_ns
        except OSError:
            stamp = None
        if self._prices is None or stamp != self._prices_stamp:
            self._prices_stamp = stamp
            try:
                self._prices = prices(self.paths)
            except errors.FleetError as exc:
                log.warning("budgets: %s; every cost is unknown until it is fixed", exc.message)
                self._prices = PriceTable()
        return self._prices

    def __call__(self, labels: Mapping[str, str], given: list[Budget] | None = None) -> frozenset[str]:
        """``given``: the budgets the feed answer carried (:attr:`fleet.models.Feed.budgets`); None
        (an empty answer, an older daemon): asked for."""
        try:
            if given is None:
                given = self.client().budgets(self.wave, self.participant)
            budgets = [b for b in given if applies(b, self.participant)]
        except errors.FleetError as exc:  # keep what was held: an outage is no reason to deliver
            log.warning("budgets unavailable (%s): holding what was held", exc.message)
            return self.held & frozenset(labels)
        held: set[str] = set()
        counter = self._counter() if budgets else None
        if counter is not None and any(b.shared for b in budgets):
            budgets = self._report_spend(budgets, counter)
        if counter is not None:
            # here, not at the top: most participants have no budget, and fleet.usage (pydantic, its
            # price table) cost each channel ~100 ms and 15 MiB at its first delivery
            from fleet.usage import spent_of, user_prices

            table = self._table()
            for b in budgets:
                if b.shared:
                    tokens, cost, unpriced = b.spent_tokens or 0, shared_cost(b), b.spent_unpriced or []
                else:
                    tokens, cost, unpriced = spent_of(b, counter, table)
                if not passed(b, tokens, cost):
                    continue
                scope = {b.wavelet_id} & set(labels) if b.wavelet_id else set(labels)
                held |= scope
                spent = spent_text(b, tokens, cost, unpriced, str(user_prices(self.paths)))
                self._report(b, spent, labels, scope)
        self.held = frozenset(held)
        log.debug("budgets of %s: %d apply, holding %s", self.participant, len(budgets), sorted(held))
        return self.held

    def start(self) -> None:
        """The channel's start: :meth:`report_spend`."""
        self.report_spend()

    def report_spend(self) -> None:
        """Report this session's spend on the wavelets with a shared budget now (the channel does at
        its start, so the members' sum counts a member before its next delivery)."""
        try:
            budgets = [
                b for b in self.client().budgets(self.wave, self.participant) if applies(b, self.participant)
            ]
        except errors.FleetError as exc:
            log.warning("budgets unavailable (%s): spend reported at the next delivery", exc.message)
            return
        counter = self._counter() if any(b.shared for b in budgets) else None
        if counter is not None:
            self._report_spend(budgets, counter)

    def _report_spend(self, budgets: list[Budget], counter: Counter) -> list[Budget]:
        """Report this session's spend on each wavelet with a shared budget; the budgets as the
        daemon answers (with the members' sums). On failure, the budgets as they were (the sums
        of the last look)."""
        from fleet.usage import spent_of

        table = self._table()
        spend = []
        for wid in sorted({b.wavelet_id for b in budgets if b.shared}):
            probe = Budget(wave_id="", wavelet_id=wid, participant=self.participant)
            tokens, cost, unpriced = spent_of(probe, counter, table)
            spend.append(Spend(wavelet_id=wid, tokens=tokens, cost=cost or 0.0, unpriced=unpriced))
        report = SpendReport(participant=self.participant, session_id=self.session_id, spend=spend)
        try:
            got = self.client().report_spend(self.wave, report)
        except errors.FleetError as exc:
            log.warning("could not report spend (%s); judging on the sums of the last look", exc.message)
            return budgets
        return [b for b in got if applies(b, self.participant)]

    def _report(self, b: Budget, spent: str, labels: Mapping[str, str], scope: Iterable[str]) -> None:
        key = (b.wavelet_id, b.participant, b.set_at)
        if key in self._reported:
            return
        report = BudgetReport(
            participant=self.participant,
            wavelet_id=b.wavelet_id,
            scope=b.participant,
            set_at=b.set_at,
            spent=spent,
        )
        try:
            got = self.client().budget_reached(self.wave, report)
        except errors.FleetError as exc:
            log.warning(
                "could not report budget reached (%s); trying again at the next delivery", exc.message
            )
            return
        self._reported.add(key)
        log.info(
            "budget %s for %s reached (%s); first report: %s",
            limit_text(b),
            self.participant,
            spent,
            got.first,
        )
        if not got.first:
            return
        from fleet.delivery.frames import Frame

        wid = b.wavelet_id or next(iter(sorted(scope)), "")
        label = labels.get(wid, "")
        held_in = f"in {b.wavelet}" if b.wavelet_id else f"in wave {self.wave}"
        self.notify(
            Frame(
                id="",
                wavelet=label,
                wavelet_id=wid,
                author="fleet",
                kind="budget",
                text=notice_text(b, spent, self.wave, held_in),
                created_at="",
            )
        )


# ---------------------------------------------------------------- on the core's seams


def hold_back(who: seams.Participant) -> BudgetWatch | None:
    """A session with a transcript only: without one, fleet sees no spend."""
    if not who.session_id:
        return None
    return BudgetWatch(who)


def before_spawn(
    client: Client, paths: Paths, wave: Wave, wavelet: Wavelet, layout: Layout, roster: list[str]
) -> None:
    """A cost budget over a model with no price is refused before anything is made; then the
    layout's budgets are recorded, before any pane delivers."""
    costed = list(roster) if layout.budget and layout.budget.cost is not None else []
    costed += [n for n in roster if (b := layout.profile(n).budget) and b.cost is not None]
    if costed:
        check_priced(
            client, paths, wave.id, costed, where=f"layout {layout.source or layout.name}",
            instead="budget = { tokens = N }", declared={n: layout.profile(n).model for n in costed},
        )  # fmt: skip
    apply_layout_budgets(client, wave.id, wavelet.id, layout, roster)


class StatusColumns:
    """``fleet status``'s budget column (:data:`fleet.seams.status_columns`): for each row, the
    applicable budget nearest its limit as ``spent/limit`` (``held`` once it stopped deliveries)."""

    def __init__(self, read: seams.StatusRead) -> None:
        self.paths, self.records = read.paths, read.records
        self.budgets = read.client.budgets(read.wave.id)
        self._counters: dict[str, Counter | None] = {}
        self._table: PriceTable | None = None

    def _counter(self, name: str) -> Counter | None:
        from fleet.usage import read_session, session_env

        if name not in self._counters:
            rec = self.records.get(name)
            env = session_env(rec.layout, name, self.paths) if rec else {}
            self._counters[name] = read_session(self.paths, rec.session_id, env).counter if rec else None
        return self._counters[name]

    def row(self, wavelet: Wavelet, participant: str) -> dict[str, object]:
        from fleet.supervise import render_count
        from fleet.usage import prices, spent_of

        name, best = participant, None
        for b in self.budgets:
            if not applies(b, name) or b.wavelet_id not in ("", wavelet.id):
                continue
            counter = self._counter(name)
            tokens: int = 0
            cost: float | None = 0.0
            if counter is not None:
                if self._table is None:
                    self._table = prices(self.paths)
                tokens, cost, _ = spent_of(b, counter, self._table)
            if b.shared:  # judged on the members' sum
                tokens, cost = b.spent_tokens or 0, shared_cost(b)
            if b.tokens is not None:
                text, share = f"{render_count(tokens)}/{render_count(b.tokens)} tok", tokens / b.tokens
            else:
                limit = b.cost or 1.0
                # an unpriced model's cost is unknown: "?", and as past the limit as it can be
                text, share = (
                    (f"?/${limit:.2f}", 1e6) if cost is None else (f"${cost:.2f}/${limit:.2f}", cost / limit)
                )
            if name in (b.reached or []):
                text, share = text + " held", share + 1e9
            if best is None or share > best[0]:
                best = (share, text)
        return {"budget": best[1] if best else None}

    def wave(self) -> dict[str, object]:
        return {}


seams.hold_backs.add(__name__, hold_back)
seams.status_columns.add(__name__, StatusColumns)
seams.spawn_checks.add(__name__, before_spawn)
