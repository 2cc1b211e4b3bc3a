"""The ``fleet`` command line: typer sub-apps per noun, and the one place errors become exit codes.

Each command parses its arguments, calls :mod:`fleet.client`, and hands the result to
:mod:`fleet.cli.render`. :func:`main` is the error boundary (docs/design.md §7): a
:class:`~fleet.errors.FleetError` prints ``fleet: error: <message>`` and exits with its code; usage
errors exit 2; Ctrl-C exits 130; anything unexpected prints one line (``FLEET_DEBUG=1`` shows the
traceback) and exits 1.

Start-up is part of the interface: ``fleet post`` is typed many times a minute by people and
agents. :data:`COMMANDS` says which module registers each command, and :func:`build` imports only
the module of the command on the command line (none for ``fleet --help``, whose command list is
:data:`SUMMARIES`; all of them for completion or an unknown command), so a command pays for nothing
but itself, and a command module imports only typer at its top: the client and the records are
imported in the bodies that use them (``bench/cli.py`` measures every command's ``--help``).
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer
from typer import _click
from typer.core import TyperGroup
from typer.models import CommandInfo, TyperInfo

import fleet
from fleet import errors
from fleet.cli import render
from fleet.cli.common import JsonOpt, check_utf8_args
from fleet.features import load as load_features
from fleet.paths import get_paths

load_features()  # every built-in feature on the core's seams before any command runs (fleet.seams)


class _Root(TyperGroup):
    """The root group: lists every command in its help from :data:`SUMMARIES` while the commands'
    modules are not imported (``fleet --help`` then costs what ``fleet post --help`` does)."""

    def format_commands(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        if _every_added():  # typer's own listing
            super().format_commands(ctx, formatter)
            return
        from typer._click.utils import make_default_short_help

        limit = formatter.width - 6 - max(len(name) for name, _ in SUMMARIES)
        rows = [(name, make_default_short_help(text, limit)) for name, text in SUMMARIES]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    name="fleet",
    cls=_Root,
    help="Spawn and supervise fleets of Claude Code agents in tmux, coordinated through a wave store.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    add_completion=True,
)


def _version(value: bool) -> None:
    if value:
        render.out(f"fleet {fleet.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
    remote: Annotated[
        str | None,
        typer.Option(
            "--remote",
            metavar="NAME",
            help="Talk to the daemon joined as NAME (`fleet remote join`); same as FLEET_DAEMON=NAME.",
        ),
    ] = None,
) -> None:
    """Spawn and supervise fleets of Claude Code agents in tmux, coordinated through a wave store."""
    _log_to_stderr()  # here, where a command is about to run: a --help exits before, and loads no logging
    if remote:
        os.environ["FLEET_DAEMON"] = remote  # read by fleet.client.connect, and inherited by what it starts
        render.GLOBALS[:] = ["--remote", remote]  # every printed hint repeats it, to run as printed


COMMANDS: dict[str, str] = {
    "daemon": "daemon",
    "wave": "wave",
    "tree": "wave",
    "ls": "wave",
    "fork": "wavelet",
    "invite": "wavelet",
    "leave": "wavelet",
    "wavelet": "wavelet",
    "post": "blips",
    "read": "blips",
    "surface": "blips",
    "replace": "blips",
    "token": "tokens",
    "whoami": "tokens",
    "channel": "channel",
    "spawn": "spawn",
    "attach": "spawn",
    "claude": "spawn",
    "demo": "spawn",
    "status": "supervise",
    "respawn": "supervise",
    "supervise": "supervise",
    "kill": "supervise",
    "watch": "watch",
    "hook-config": "watch",
    "remote": "remote",
    "campaign": "campaign",
    "usage": "usage",
    "budget": "budget",
    "resident": "resident",
    "memory": "resident",
    "backup": "store",
    "export": "store",
    "import": "store",
    "replay": "store",
    "summary": "summary",
    "pin": "summary",
    "approve": "permission",
    "deny": "permission",
    "permissions": "permission",
}
"""Command name -> the ``fleet.cli`` module whose ``register(app)`` adds it (``paths`` and ``doctor``
are defined here)."""

SUMMARIES: tuple[tuple[str, str], ...] = (
    ("tree", "Show wavelet trees with their rosters (private ones marked)."),
    ("ls", "Every wave at a glance: wavelets, agents, live and dead panes, and how to attach."),
    ("fork", "Fork a child wavelet with its own roster (and, with --spawn, open it in tmux)."),
    ("invite", "Add NAME to WAVELET's roster."),
    ("leave", "Take NAME off WAVELET's roster; deliveries to NAME stop."),
    ("post", "Post a message into WAVELET."),
    ("read", "Print WAVELET's blips, oldest first."),
    ("surface", "Report a conclusion from WAVELET into its parent wavelet."),
    ("replace", "Replace a blip's text (the old version stays in its history)."),
    ("whoami", "Who the daemon takes you for, and which daemon that is."),
    (
        "channel",
        "Serve MCP on stdin/stdout as a participant of a wave (`fleet channel --help` for the options).",
    ),
    (
        "spawn",
        "Open WAVELET's roster in tmux: one window, one pane per participant, each an agent on the wave.",
    ),
    ("attach", "Attach to the wave's tmux session (or switch to it, inside tmux)."),
    ("claude", "Open Claude Code here as `operator`, with the wave's channel injected: your in-band voice."),
    (
        "status",
        "One row per (wavelet, participant): pane, presence, last blip, deliveries, cap, session, host.",
    ),
    ("respawn", "Relaunch NAME's agent resuming its recorded session, in its pane (works from any machine)."),
    (
        "supervise",
        "Watch WAVE and bring dead agents back: on a ladder (5m, 15m, 45m, ...), or at once when the "
        "operator mentions them.",
    ),
    ("kill", "Kill a wavelet's window or a wave's tmux session; keep all data (`fleet spawn` resumes them)."),
    (
        "watch",
        "Block until a blip lands for PARTICIPANT, print what is new and an `after=` line, and exit 0.",
    ),
    (
        "hook-config",
        "Print the Claude Code `--settings` JSON that delivers PARTICIPANT's blips through `fleet "
        "watch --hook`.",
    ),
    (
        "usage",
        "Tokens (input, output, cache read, cache write), turns and estimated cost of each "
        "participant, per wavelet (the wavelet whose blip woke each turn) and for the wave, from the "
        "sessions' own transcripts on this machine.",
    ),
    (
        "backup",
        "Copy the store to FILE with SQLite's online backup: safe while the daemon runs and others post.",
    ),
    (
        "export",
        "Write the event log to stdout as JSON lines (the whole store, or WAVE's events): replayable "
        "with `fleet import`.",
    ),
    (
        "import",
        "Add the waves of an export to this machine's store: the same ids, the same state, all or nothing.",
    ),
    (
        "replay",
        "Rebuild the store's tables from its event log in a scratch database and compare them with "
        "the live store (--check); prints what differs and exits 1 if anything does.",
    ),
    ("pin", "Pin a blip: load-bearing from now on, so every summary of its wavelet must cite it."),
    ("approve", "Allow the tool NAME waits to run (its PermissionRequest hook passes the answer on)."),
    ("deny", "Refuse the tool NAME waits to run (Claude Code tells the model it was denied)."),
    ("permissions", "List the wave's permission requests, newest first: who asked what, and who answered."),
    ("paths", "Show where fleet keeps its files (FLEET_HOME moves them all)."),
    ("doctor", "Check this machine for what fleet needs (python, tmux, claude, daemon, secrets, layouts)."),
    ("daemon", "Run, start, stop and inspect the store daemon."),
    ("wave", "Create and list waves."),
    ("wavelet", "One wavelet's own settings: its topic."),
    ("token", "Mint, list and revoke participant tokens (operator only)."),
    (
        "demo",
        "Run a three-agent conversation with scripted stand-in agents (no Claude, no model needed); "
        "`fleet demo resident` and `fleet demo campaign` show those systems the same way.",
    ),
    ("remote", "Join another machine's daemon in one line; list and revoke machines."),
    ("campaign", "Carry out a plan in waves of fresh sessions, with the state machine in .wave/."),
    ("budget", "Budgets in tokens or estimated USD per participant and per wavelet (operator only to set)."),
    (
        "resident",
        "The wave's one long-lived mind: a Claude Code or Codex session in <repo>.<wave> (docs/resident.md).",
    ),
    (
        "memory",
        "The wave's MEMORY.md (wave/WAVE/MEMORY.md), through the daemon: the operator and the seated "
        "resident only.",
    ),
    ("summary", "Rolling summaries: deep forks stay cheap, and every summary is checked."),
)
"""``fleet --help``'s command list without importing the commands: each visible command's name and
its help's first paragraph, in typer's order (tests/unit/test_cli_summaries.py checks it against the
commands themselves, and prints the table to paste after a change)."""

_MODULES = tuple(dict.fromkeys(COMMANDS.values()))
_loaded: set[str] = set()
"""The command modules imported (their commands are on the shelf or on the app)."""
_shelf: dict[str, tuple[tuple[int, int], CommandInfo | TyperInfo]] = {}
"""Commands and groups registered by a loaded module but not added to the app yet, by name, with
their place in the full listing (module, position): typer builds every command on the app at
each run (its parameters read from the signature), so a run adds only the one it runs."""
_root_commands: list[CommandInfo] = []
"""``paths`` and ``doctor``, defined here (added at the first build)."""
_place: dict[int, tuple[int, int]] = {}
"""id(info) -> its place, for the infos on the app."""


def build(argv: list[str] | None = None) -> typer.Typer:
    """The app with the commands ``argv`` needs (every command when it names none we know, or for
    completion; none for the root's help, whose list is :data:`SUMMARIES`); returns :data:`app`."""
    args = sys.argv[1:] if argv is None else argv
    first = _command_in(args)
    completing = any(k.startswith("_FLEET_COMPLETE") for k in os.environ)
    if completing or (first is not None and first not in COMMANDS and first not in ("paths", "doctor")):
        _add(None)  # completion, and an unknown command's suggestions, need every name
    elif first in COMMANDS:
        _add(first)
    if not _root_commands:
        app.command("paths")(paths_)
        app.command("doctor")(doctor)
        _root_commands.extend(app.registered_commands[-2:])
        for n, info in enumerate(_root_commands):
            _place[id(info)] = (len(_MODULES), n)  # after every module's, as typer lists them
    return app


def _add(name: str | None) -> None:
    """Put command ``name`` (None: every command) on the app, in the full listing's order."""
    import importlib

    from typer.main import get_command_name, solve_typer_info_defaults

    for index, module in enumerate(_MODULES):
        if module in _loaded or (name is not None and COMMANDS[name] != module):
            continue
        scratch = typer.Typer()
        importlib.import_module(f"fleet.cli.{module}").register(scratch)
        infos: list[CommandInfo | TyperInfo] = [*scratch.registered_commands, *scratch.registered_groups]
        for n, info in enumerate(infos):
            if isinstance(info, CommandInfo):
                key = info.name or get_command_name(info.callback.__name__)  # type: ignore[union-attr]
            else:
                key = solve_typer_info_defaults(info).name or ""
            _shelf[key] = ((index, n), info)
        _loaded.add(module)
    for key in [name] if name is not None else list(_shelf):
        if key not in _shelf:
            continue
        place, info = _shelf.pop(key)
        _place[id(info)] = place
        if isinstance(info, CommandInfo):
            app.registered_commands.append(info)
        else:
            app.registered_groups.append(info)
    app.registered_commands.sort(key=lambda i: _place[id(i)])
    app.registered_groups.sort(key=lambda i: _place[id(i)])


def _every_added() -> bool:
    return len(_loaded) == len(_MODULES) and not _shelf


def _command_in(args: list[str]) -> str | None:
    """The command named on a command line: the first word that is not a root option (or the
    ``--remote`` option's value)."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--remote":
            i += 2
            continue
        if not arg.startswith("-"):
            return arg
        i += 1
    return None


def paths_(as_json: JsonOpt = False) -> None:
    """Show where fleet keeps its files (FLEET_HOME moves them all).

    FLEET_STORE puts the store on PostgreSQL: `store` shows its URL with the password hidden.
    """
    paths = get_paths().as_dict()
    if as_json:
        render.dump(paths)
    else:
        render.pairs(list(paths.items()))


def doctor(as_json: JsonOpt = False) -> None:
    """Check this machine for what fleet needs (python, tmux, claude, daemon, secrets, layouts)."""
    from fleet import doctor as checks

    results = checks.run(get_paths())
    if as_json:
        render.dump(results)
    else:
        render.checks(results)
    failed = [c.name for c in results if c.level == "fail"]
    if failed:
        raise errors.FleetError(f"fleet doctor found problems: {', '.join(failed)} (see the fixes above)")


def _log_to_stderr() -> None:
    """Log lines as ``fleet: NAME: MESSAGE`` on stderr, warnings and up (all with ``FLEET_DEBUG``)."""
    import logging

    debug = bool(os.environ.get("FLEET_DEBUG"))
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING, format="fleet: %(name)s: %(message)s"
    )


def main(argv: list[str] | None = None) -> None:
    """Run the CLI and exit with the code docs/design.md §7 assigns to what happened. Never returns."""
    debug = bool(os.environ.get("FLEET_DEBUG"))
    if any(k.startswith("_FLEET_COMPLETE") for k in os.environ):
        _log_to_stderr()  # completion runs no callback; its completers log why they offer nothing
    try:
        check_utf8_args(sys.argv[1:] if argv is None else argv)
        code = build(argv)(args=argv, prog_name="fleet", standalone_mode=False)
    except errors.FleetError as exc:
        render.error(exc.message)
        code = exc.exit_code
    except typer.TyperException as exc:  # click's usage errors (typer vendors click)
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            render.error(exc.format_message())
        code = exc.exit_code
    except (KeyboardInterrupt, typer.Abort):
        code = 130
    except BrokenPipeError:
        # The reader went away (`fleet read --follow | head`): stop quietly, and keep Python from
        # complaining again when it flushes stdout at exit.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        code = 1
    except Exception as exc:
        if debug:
            raise
        render.error(f"unexpected {type(exc).__name__}: {exc} (run with FLEET_DEBUG=1 for a traceback)")
        code = 1
    sys.exit(code if isinstance(code, int) else 0)
