"""``fleet budget set|clear|show``: what a participant may spend before deliveries to it stop."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated

import typer

from fleet import errors
from fleet.cli import render
from fleet.cli.common import JsonOpt, client, complete_wave, complete_wavelet
from fleet.cli.render import token_count
from fleet.paths import get_paths

if TYPE_CHECKING:
    from fleet.usage import BudgetStatus

app = typer.Typer(
    name="budget",
    help="Budgets in tokens or estimated USD per participant and per wavelet (operator only to set).",
    no_args_is_help=True,
)

TargetArg = Annotated[
    str,
    typer.Argument(
        metavar="TARGET",
        help="WAVE (the whole wave) or WAVE/WAVELET (its members' spend on its turns, summed).",
        show_default=False,
        autocompletion=complete_wavelet,
    ),
]
ParticipantArg = Annotated[
    str | None,
    typer.Argument(metavar="[PARTICIPANT]", help="Only this participant [default: every participant]."),
]


def _target(target: str) -> tuple[str, str | None]:
    """(wave, wavelet reference or None) of a TARGET."""
    wave, slash, name = target.partition("/")
    if not wave or (slash and not name):
        raise errors.UsageError(f"budget target {target!r}: give WAVE or WAVE/WAVELET")
    return wave, target if slash else None


def _limit(st: BudgetStatus) -> str:
    if st.tokens is not None:
        return f"{st.tokens:,} tokens"
    return f"${st.cost:.2f}" if st.cost is not None else "none"


def _scope(wave: str, wavelet: str, participant: str) -> str:
    if wavelet and not participant:
        return f"the members of {wavelet} together"
    return f"{participant or 'each participant'} in {wavelet or wave}"


@app.command("set")
def set_(
    target: TargetArg,
    participant: ParticipantArg = None,
    tokens: Annotated[
        int | None, typer.Option("--tokens", metavar="N", help="Tokens (input, output and cache).")
    ] = None,
    cost: Annotated[float | None, typer.Option("--cost", metavar="USD", help="Estimated USD.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Set a budget (raising one resumes the deliveries it held, nothing lost). Operator only."""
    from fleet.budgets import check_priced, scope_members
    from fleet.records.budgets import SetBudget, check_limit
    from fleet.usage import user_prices

    if tokens is None and cost is None:
        raise errors.UsageError("give --tokens N or --cost USD (to remove a budget: fleet budget clear)")
    check_limit(tokens, cost, "fleet budget set")
    wave, wavelet = _target(target)
    c = client()
    unknown: list[str] = []
    if cost is not None:  # an unpriced model's cost is unknown: refuse what could never be judged
        wave_id, names = scope_members(c, wave, wavelet, participant)
        unknown = check_priced(
            c, get_paths(), wave_id, names, where="fleet budget set",
            instead=f"fleet budget set {target}{' ' + participant if participant else ''} --tokens N",
        )  # fmt: skip
    got = c.set_budget(wave, SetBudget(wavelet=wavelet, participant=participant, tokens=tokens, cost=cost))
    if unknown:
        render.note(
            f"{', '.join(unknown)}: no session on this machine yet, so its model is not known yet; if that"
            " model has no price, its first response holds deliveries (cost unknown, never $0) until you"
            f" add one to {user_prices(get_paths())} and set the budget again"
        )
    if as_json:
        render.dump(got)
        return
    assert got is not None
    limit = f"{got.tokens:,} tokens" if got.tokens is not None else f"${got.cost:.2f}"
    render.out(f"budget for {_scope(wave, got.wavelet, got.participant)}: {limit}")


@app.command("clear")
def clear(target: TargetArg, participant: ParticipantArg = None) -> None:
    """Remove a budget (what it held is delivered). Operator only."""
    from fleet.records.budgets import SetBudget

    wave, wavelet = _target(target)
    client().set_budget(wave, SetBudget(wavelet=wavelet, participant=participant))
    render.out(f"no budget for {_scope(wave, wavelet or '', participant or '')}")


@app.command("show")
def show(
    wave: Annotated[
        str | None,
        typer.Argument(metavar="WAVE", help="The wave [default: FLEET_WAVE].", autocompletion=complete_wave),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Each budget of the wave and what every participant it applies to spent (from the sessions'
    transcripts on this machine); `held` marks deliveries stopped by it."""
    from fleet.usage import no_price_text, wave_usage

    named = wave or os.environ.get("FLEET_WAVE")
    if not named:
        raise errors.UsageError("which wave? give WAVE or set FLEET_WAVE")
    u = wave_usage(client(), get_paths(), named)
    if as_json:
        render.dump(u.budgets)
        return
    if not u.budgets:
        render.out(f"no budgets in {u.wave}: set one with `fleet budget set {u.wave} PARTICIPANT --tokens N`")
        return
    rows: list[list[str]] = []
    for st in u.budgets:
        scope = _scope(u.wave, st.wavelet, st.participant)
        if not st.spent:
            rows.append([scope, _limit(st), st.source, "-", "no session yet"])
        for s in st.spent:
            spent = token_count(s.tokens) if st.tokens is not None else render.usd(s.cost_usd)
            state = "held" if s.reached else ("passed" if s.passed else "ok")
            rows.append([scope, _limit(st), st.source, f"{s.participant} {spent}", state])
    render.table(["SCOPE", "BUDGET", "SET BY", "SPENT", "DELIVERY"], rows)
    unknown = sorted({m for st in u.budgets if st.cost is not None for s in st.spent for m in s.unpriced})
    if unknown:
        render.note(no_price_text(unknown, u.prices_file))


def register(root: typer.Typer) -> None:
    root.add_typer(app)
