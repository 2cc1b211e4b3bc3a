"""``fleet spawn``, ``fleet attach``, ``fleet claude``, ``fleet demo``: the wave, in tmux."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from fleet import errors
from fleet.cli import render
from fleet.cli.common import (
    WAVELET_HELP,
    JsonOpt,
    WaveOpt,
    client,
    complete_layout,
    complete_wave,
    complete_wavelet,
)
from fleet.paths import get_paths

if TYPE_CHECKING:  # tmux and spawning are imported when a command needs them, not by every fleet run
    from fleet.spawn import Spawner, SpawnReport

DEFAULT_LAYOUT = "trio"
""":data:`fleet.layouts.DEFAULT_LAYOUT`, the options' default: fleet.layouts (pydantic) is imported
only by a command that reads a layout, not by ``--help`` (a unit test keeps the two equal)."""


def list_layouts(as_json: bool) -> None:
    """``fleet spawn --list-layouts``: each layout, shipped and the user's, with what it is for (a
    JSON array of ``{name, source, path, description, error}`` with ``--json``)."""
    from fleet import layouts

    paths = get_paths()
    found = []
    for name, path in layouts.available(paths).items():
        what, broken = "", ""
        try:
            what = layouts.load(name, paths).description
        except errors.FleetError as exc:
            broken = exc.message
        where = "yours" if path.parent == paths.layouts else "shipped"
        found.append({"name": name, "source": where, "path": str(path), "description": what, "error": broken})
    if as_json:
        render.dump(found)
        return
    rows = [
        [f["name"], f["source"], f"BROKEN: {f['error']}" if f["error"] else f["description"] or "-"]
        for f in found
    ]
    render.table(["LAYOUT", "FROM", "DESCRIPTION"], rows)
    render.note(f"your own layouts go in {paths.layouts} (a name there overrides a shipped one)")


ListLayoutsOpt = Annotated[
    bool,
    typer.Option("--list-layouts", help="List the layouts (shipped and yours) and exit (no WAVELET)."),
]
LayoutOpt = Annotated[
    str,
    typer.Option(
        "--layout",
        "-l",
        help="A layout name (`fleet spawn --list-layouts`) or a .toml path.",
        autocompletion=complete_layout,
    ),
]
AgentOpt = Annotated[
    str | None,
    typer.Option(
        "--agent", metavar="CMD", help="Run CMD instead of the layout's agent (e.g. fleet-standin)."
    ),
]
TransportOpt = Annotated[
    str,
    typer.Option(
        "--transport",
        help="auto: channel notifications, and an asyncRewake hook takes what Claude Code did not take "
        "(sessions without the channels preview are woken by it); channel: notifications only; "
        "hook: the hook only.",
    ),
]
SocketOpt = Annotated[
    str | None,
    typer.Option(
        "--socket",
        envvar="FLEET_TMUX_SOCKET",
        metavar="SOCKET",
        help="tmux socket name or path [env: FLEET_TMUX_SOCKET; default: the enclosing or default server].",
        show_envvar=False,
    ),
]
TrustOpt = Annotated[
    bool, typer.Option("--trust", help="Accept Claude Code's folder-trust prompt for the panes.")
]
WaitOpt = Annotated[float, typer.Option("--wait", metavar="SECONDS", help="How long to wait for each pane.")]


def _transport(value: str) -> Literal["auto", "channel", "hook"]:
    if value not in ("auto", "channel", "hook"):
        raise errors.UsageError(f"--transport is auto, channel or hook, not {value!r}")
    return value  # type: ignore[return-value]


def make_spawner(socket: str | None, agent: str | None, transport: str, trust: bool, wait: float) -> Spawner:
    """The spawner for the CLI's daemon and tmux server (``--transport hook`` panes get
    :func:`fleet.watch.hook_settings` for that daemon)."""
    from functools import partial

    from fleet.spawn import Spawner
    from fleet.tmux import Tmux
    from fleet.tmux import server as tmux_server
    from fleet.watch import hook_settings

    c = client()
    return Spawner(
        c,
        Tmux(tmux_server(socket)),
        get_paths(),
        agent=agent,
        transport=_transport(transport),
        trust=trust,
        ready_timeout=wait,
        hook_settings=partial(hook_settings, daemon=c.base_url),
    )


def report_and_exit(report: SpawnReport, as_json: bool) -> None:
    """Print the report; exit 1 if a pane is not ready (its reason is printed)."""
    if as_json:
        render.dump(report)
    else:
        render.spawn_report(report)
    failed = [p for p in report.panes if not p.ready]
    if failed:
        raise errors.FleetError(
            f"{len(failed)} of {len(report.panes)} panes are not ready: "
            + "; ".join(f"{p.participant}: {p.why}" for p in failed)
        )


def spawn(
    wavelet_ref: Annotated[
        str | None, typer.Argument(metavar="WAVELET", help=WAVELET_HELP, autocompletion=complete_wavelet)
    ] = None,
    layout: LayoutOpt = DEFAULT_LAYOUT,
    agent: AgentOpt = None,
    transport: TransportOpt = "auto",
    socket: SocketOpt = None,
    trust: TrustOpt = False,
    wait: WaitOpt = 30.0,
    wave: WaveOpt = None,
    as_json: JsonOpt = False,
    list_: ListLayoutsOpt = False,
) -> None:
    """Open WAVELET's roster in tmux: one window, one pane per participant, each an agent on the wave.

    Idempotent: live panes are left alone, dead ones resume their session, new members get panes.
    """
    if list_:
        list_layouts(as_json)
        return
    if wavelet_ref is None:
        raise errors.UsageError("which wavelet? `fleet spawn WAVE/WAVELET` (or `fleet spawn --list-layouts`)")
    from fleet import layouts

    lay = layouts.load(layout, get_paths())
    report = make_spawner(socket, agent, transport, trust, wait).spawn(wavelet_ref, lay, wave_hint=wave)
    report_and_exit(report, as_json)


def attach(
    wave: Annotated[
        str | None,
        typer.Argument(metavar="WAVE", help="The wave [default: FLEET_WAVE].", autocompletion=complete_wave),
    ] = None,
    socket: SocketOpt = None,
) -> None:
    """Attach to the wave's tmux session (or switch to it, inside tmux).

    Attaching needs a terminal: without one (a script, a pipe) it exits 2 saying what to do instead.
    """
    name = wave or os.environ.get("FLEET_WAVE")
    if not name:
        raise errors.UsageError("which wave? `fleet attach WAVE` (or set FLEET_WAVE)")
    from fleet.tmux import Tmux
    from fleet.tmux import server as tmux_server

    w = client().get_wave(name)
    srv = tmux_server(socket)
    session = Tmux(srv).find_session(w.id)
    if session is None:
        raise errors.NotFound(
            f"wave {w.name!r} has no tmux session: start one with `fleet spawn {w.name}/main`"
        )
    argv = ["tmux"]
    if srv.socket_path:
        argv += ["-S", str(srv.socket_path)]
    elif srv.socket_name:
        argv += ["-L", str(srv.socket_name)]
    inside = bool(os.environ.get("TMUX")) and not (socket or os.environ.get("FLEET_TMUX_SOCKET"))
    if not inside and not (sys.stdin.isatty() and sys.stdout.isatty()):
        # tmux would say only "open terminal failed: not a terminal"
        raise errors.UsageError(
            f"`fleet attach` needs a terminal, and this process's stdin or stdout is not one: run it"
            f" in a terminal to watch wave {w.name!r}; without one, `fleet status {w.name}` says what"
            f" each agent does and `fleet read {w.name}/main` what was said"
        )
    argv += ["switch-client", "-t", session] if inside else ["attach-session", "-t", session]
    os.execvp(argv[0], argv)


def claude(
    wave: WaveOpt = None,
    resume: Annotated[bool, typer.Option("--resume", help="Resume the operator's last session.")] = False,
    claude_bin: Annotated[
        str, typer.Option("--claude", metavar="CMD", help="The Claude Code command.")
    ] = "claude",
    claude_args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[-- CLAUDE_ARGS]...",
            help="More Claude Code flags, after `--` (e.g. -- --model opus).",
        ),
    ] = None,
) -> None:
    """Open Claude Code here as `operator`, with the wave's channel injected: your in-band voice."""
    name = wave or os.environ.get("FLEET_WAVE")
    if not name:
        raise errors.UsageError("which wave? `fleet claude --wave WAVE` (or set FLEET_WAVE)")
    from fleet.cli.claude import run

    code = run(client(), get_paths(), name, resume=resume, claude=claude_bin, args=claude_args or [])
    raise typer.Exit(code)


demo_app = typer.Typer(
    name="demo",
    help="Run a three-agent conversation with scripted stand-in agents (no Claude, no model needed);"
    " `fleet demo resident` and `fleet demo campaign` show those systems the same way.",
    invoke_without_command=True,
)


@demo_app.callback()
def demo(
    ctx: typer.Context,
    socket: SocketOpt = None,
    wait: WaitOpt = 60.0,
) -> None:
    """Run a three-agent conversation with scripted stand-in agents (no Claude, no model needed)."""
    if ctx.invoked_subcommand is not None:
        return
    from fleet.cli.demo import run
    from fleet.tmux import Tmux
    from fleet.tmux import server as tmux_server

    raise typer.Exit(run(client(), Tmux(tmux_server(socket)), get_paths(), timeout=wait))


SmokeOpt = Annotated[
    bool,
    typer.Option("--smoke", help="No narration, no pauses: assert each milestone and exit (0: all reached)."),
]
KeepOpt = Annotated[
    bool,
    typer.Option(
        "--keep", help="Leave the demo's private fleet running at the end, to explore (how is printed)."
    ),
]


def _guided(name: str, smoke: bool, keep: bool) -> None:
    import sys

    from fleet.demos import campaign, resident, sandboxed

    script = {"resident": resident.run, "campaign": campaign.run}[name]
    try:
        with sandboxed(name, keep=keep) as box:
            code = script(box, smoke=smoke, pause=sys.stdin.isatty() and sys.stdout.isatty())
    except KeyboardInterrupt:
        render.note("demo interrupted: everything it started is gone")
        raise typer.Exit(130) from None
    raise typer.Exit(code)


@demo_app.command("resident")
def demo_resident(smoke: SmokeOpt = False, keep: KeepOpt = False) -> None:
    """A wave's resident with stand-ins, step by step: its seat, a job forked to a worker, the worker's
    DONE: reaching the mind, a cron and a heartbeat, `fleet resident status` (a private fleet, removed
    at the end)."""
    _guided("resident", smoke, keep)


@demo_app.command("campaign")
def demo_campaign(smoke: SmokeOpt = False, keep: KeepOpt = False) -> None:
    """A three-wave campaign in a temporary repository with stand-in sessions, step by step: the
    verifier, each wave's executor, a deliberate failure and its retry, the commits, `fleet campaign
    status` (a private fleet, removed at the end)."""
    _guided("campaign", smoke, keep)


def register(root: typer.Typer) -> None:
    root.command()(spawn)
    root.command()(attach)
    root.command()(claude)
    root.add_typer(demo_app)
