"""``fleet fork``, ``fleet invite``, ``fleet leave``, ``fleet wavelet topic``: the wavelet tree, its
rosters and its topics."""

from __future__ import annotations

from typing import Annotated

import typer

from fleet import errors
from fleet.cli import render
from fleet.cli.common import WAVELET_HELP, AsOpt, JsonOpt, WaveOpt, client, complete_wavelet, names, wavelet
from fleet.cli.spawn import DEFAULT_LAYOUT, AgentOpt, LayoutOpt, SocketOpt, make_spawner, report_and_exit
from fleet.cli.wave import WithOpt
from fleet.paths import get_paths

WaveletArg = Annotated[
    str, typer.Argument(metavar="WAVELET", help=WAVELET_HELP, autocompletion=complete_wavelet)
]
NameArg = Annotated[str, typer.Argument(metavar="NAME", help="A participant name.")]


def fork(
    parent: Annotated[
        str, typer.Argument(metavar="PARENT", help=WAVELET_HELP, autocompletion=complete_wavelet)
    ],
    name: Annotated[str, typer.Option("--name", help="The new wavelet's name (unique in its wave).")],
    with_: WithOpt = None,
    private: Annotated[
        bool, typer.Option("--private", help="Invisible to anyone not on its roster.")
    ] = False,
    as_: AsOpt = None,
    wave: WaveOpt = None,
    spawn: Annotated[
        bool, typer.Option("--spawn", help="Staff it at once: open the new wavelet's roster in tmux.")
    ] = False,
    layout: LayoutOpt = DEFAULT_LAYOUT,
    agent: AgentOpt = None,
    socket: SocketOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Fork a child wavelet with its own roster (and, with --spawn, open it in tmux).

    The child's context is PARENT's blips up to now; a private child is invisible to anyone not on
    its roster. With --spawn, members already running elsewhere in the wave keep their one session
    (their channel delivers the new wavelet too); the others get panes in the new window.
    """
    c = client()
    from fleet.layouts import load as load_layout

    lay = load_layout(layout, get_paths()) if spawn else None
    child = c.fork(wavelet(parent, wave).id, name, names(with_), private=private, as_=as_)
    if as_json and not spawn:
        render.dump(child)
    elif not as_json:
        render.wavelet(child, "forked")
    if lay is not None:
        report = make_spawner(socket, agent, "auto", False, 30.0).spawn(child.id, lay)
        report_and_exit(report, as_json)


def invite(
    wavelet_ref: WaveletArg,
    name: NameArg,
    as_: AsOpt = None,
    wave: WaveOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add NAME to WAVELET's roster."""
    wl = client().invite(wavelet(wavelet_ref, wave).id, name, as_=as_)
    if as_json:
        render.dump(wl)
    else:
        render.wavelet(wl, f"invited {name} to")


def leave(
    wavelet_ref: WaveletArg,
    name: NameArg,
    as_: AsOpt = None,
    wave: WaveOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Take NAME off WAVELET's roster; deliveries to NAME stop."""
    wl = client().leave(wavelet(wavelet_ref, wave).id, name, as_=as_)
    if as_json:
        render.dump(wl)
    else:
        render.wavelet(wl, f"{name} left")


app = typer.Typer(name="wavelet", help="One wavelet's own settings: its topic.", no_args_is_help=True)


@app.command()
def topic(
    wavelet_ref: WaveletArg,
    text: Annotated[
        str | None,
        typer.Argument(metavar="[TEXT]", help="The new topic: one line, at most 200 characters."),
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Remove the topic.")] = False,
    as_: AsOpt = None,
    wave: WaveOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show WAVELET's one-line topic, set it to TEXT, or remove it with --clear.

    Anyone on its roster (and the operator) may set it; each change writes a system blip into the
    wavelet. With --json: the wavelet (its `topic` '' when it has none).
    """
    if clear and text is not None:
        raise errors.UsageError("give TEXT or --clear, not both")
    if text == "":
        raise errors.UsageError("the topic is empty: to remove it, use --clear")
    c = client()
    wl = wavelet(wavelet_ref, wave)
    if clear or text is not None:
        wl = c.set_topic(wl.id, "" if clear else str(text), as_=as_)
    if as_json:
        render.dump(wl)
    elif clear:
        render.note(f"{wl.path} has no topic now")
    elif wl.topic:
        render.out(wl.topic)
    else:
        render.note(f"{wl.path} has no topic: set one with `fleet wavelet topic {wl.path} TEXT`")


def register(root: typer.Typer) -> None:
    root.command()(fork)
    root.command()(invite)
    root.command()(leave)
    root.add_typer(app)
