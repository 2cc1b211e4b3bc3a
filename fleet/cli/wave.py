"""``fleet wave new|list`` and ``fleet tree``: waves and their wavelet trees."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from fleet import errors
from fleet.cli import render
from fleet.cli.common import JsonOpt, client, complete_wave, names

app = typer.Typer(help="Create and list waves.", no_args_is_help=True)

WithOpt = Annotated[
    list[str] | None,
    typer.Option("--with", metavar="A,B", help="Participants on the roster (comma-separated, repeatable)."),
]


@app.command()
def new(
    name: Annotated[str, typer.Argument(help="The wave's name (lower case, no `/`).")],
    with_: WithOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a wave; its root wavelet `main` gets the --with roster."""
    wave = client().create_wave(name, names(with_))
    if as_json:
        render.dump(wave)
        return
    root = next((w for w in wave.wavelets if w.id == wave.root_id), None)
    members = render.roster(root.roster) if root else ", ".join(names(with_)) or "nobody"
    render.out(f"created wave {wave.name} ({render.short(wave.id)}): {wave.name}/main [{members}]")


@app.command("list")
def list_waves(as_json: JsonOpt = False) -> None:
    """List the waves you can see."""
    waves = client().list_waves()
    if as_json:
        render.dump(waves)
    else:
        render.wave_list(waves)


def tree(
    wave: Annotated[
        str | None,
        typer.Argument(
            help="A wave name or id [default: FLEET_WAVE, else every wave].",
            show_default=False,
            autocompletion=complete_wave,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show wavelet trees with their rosters (private ones marked).

    With --json: the Wave object (wavelets included), or an array of them when no wave is named.
    """
    c = client()
    wave = wave or os.environ.get("FLEET_WAVE") or None
    if wave is not None:
        one = c.get_wave(wave)
        if as_json:
            render.dump(one)
        else:
            render.wave_tree(one)
        return
    waves = [c.get_wave(w.id) for w in c.list_waves()]
    if as_json:
        render.dump(waves)
        return
    if not waves:
        render.note("no waves yet: create one with `fleet wave new NAME`")
    for w in waves:
        render.wave_tree(w)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="wave")
    root.command()(tree)
    root.command()(ls)


def ls(
    socket: Annotated[
        str | None,
        typer.Option("--socket", envvar="FLEET_TMUX_SOCKET", metavar="SOCKET", help="The tmux server."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Every wave at a glance: wavelets, agents, live and dead panes, and how to attach."""
    from fleet import supervise
    from fleet.tmux import Tmux
    from fleet.tmux import server as tmux_server

    tmux: Tmux | None = None
    try:
        tmux = Tmux(tmux_server(socket))
    except errors.ToolMissing:
        render.note("tmux is not installed: no panes to show")
    waves = supervise.overview(client(), tmux)
    if as_json:
        render.dump(waves)
    else:
        render.overview(waves)
