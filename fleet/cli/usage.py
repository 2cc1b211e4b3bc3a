"""``fleet usage``: tokens, turns and estimated cost per participant, per wavelet and per wave."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated

import typer

from fleet.cli import render
from fleet.cli.common import JsonOpt, client, complete_wave
from fleet.cli.render import cost, token_count
from fleet.paths import get_paths

if TYPE_CHECKING:
    from fleet.records.usage import Figures
    from fleet.usage import WaveUsage


def _row(what: str, fig: Figures) -> list[str]:
    return [
        what, str(fig.turns), str(fig.requests), str(fig.input_tokens), str(fig.output_tokens),
        str(fig.cache_read_tokens), str(fig.cache_creation_tokens), cost(fig),
    ]  # fmt: skip


def show(u: WaveUsage) -> None:
    render.out(f"wave {u.wave}: {token_count(u.total.tokens)} tokens, {u.total.turns} turns, {cost(u.total)}")
    head = ["WHO / WAVELET", "TURNS", "REQUESTS", "INPUT", "OUTPUT", "CACHE READ", "CACHE WRITE", "COST"]
    rows: list[list[str]] = []
    for p in u.participants:
        rows.append(_row(p.participant, p.total))
        for label, fig in sorted(p.wavelets.items()):
            rows.append(_row(f"  {label or '(not woken by a blip)'}", fig))
    rows.append(_row("wave total", u.total))
    for label, fig in sorted(u.wavelets.items()):
        rows.append(_row(f"  {label or '(not woken by a blip)'}", fig))
    render.table(head, rows)
    for p in u.participants:
        if p.problem:
            render.note(f"{p.participant}: {p.problem}")
    if u.unpriced:
        render.note(u.unpriced_message)
    for st in u.budgets:
        limit = f"{st.tokens:,} tokens" if st.tokens is not None else f"${st.cost or 0:.2f}"
        where = st.wavelet or u.wave
        for s in st.spent:
            spent = f"{s.tokens:,} tokens" if st.tokens is not None else render.usd(s.cost_usd)
            state = " — deliveries held" if s.reached else (" — passed" if s.passed else "")
            render.out(
                f"budget {limit} ({st.participant or 'each'} in {where}):"
                f" {s.participant} spent {spent}{state}"
            )


def usage(
    wave: Annotated[
        str | None,
        typer.Argument(
            metavar="WAVE",
            help="The wave [default: FLEET_WAVE, else every wave].",
            autocompletion=complete_wave,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Tokens (input, output, cache read, cache write), turns and estimated cost of each participant,
    per wavelet (the wavelet whose blip woke each turn) and for the wave, from the sessions' own
    transcripts on this machine. Prices: fleet's table, overridden by <config>/prices.toml."""
    from fleet.usage import wave_usage

    c, paths = client(), get_paths()
    named = wave or os.environ.get("FLEET_WAVE")
    waves = [named] if named else [w.name for w in c.list_waves()]
    shown = [wave_usage(c, paths, w) for w in waves]
    if as_json:
        render.dump(shown[0] if named else shown)
        for u in shown:
            if u.unpriced:
                render.note(u.unpriced_message)
        return
    if not shown:
        render.note("no waves yet: create one with `fleet wave new NAME`")
    for i, u in enumerate(shown):
        if i:
            render.out()
        show(u)


def register(root: typer.Typer) -> None:
    root.command()(usage)
