"""The ``fleet`` command line: typer sub-apps per noun, and the one place errors become exit codes.

Each command parses its arguments, calls :mod:`fleet.client`, and hands the result to
:mod:`fleet.cli.render`. :func:`main` is the error boundary (docs/design.md §7): a
:class:`~fleet.errors.FleetError` prints ``fleet: error: <message>`` and exits with its code; usage
errors exit 2; Ctrl-C exits 130; anything unexpected prints one line (``FLEET_DEBUG=1`` shows the
traceback) and exits 1.

Start-up is part of the interface: ``fleet post`` is typed many times a minute by people and
agents. :data:`COMMANDS` says which module registers each command, and :func:`build` imports only
the module of the command on the command line (all of them for ``--help``, completion, or an
unknown command), so a command pays for nothing but itself (``bench/cli.py`` measures it).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Annotated

import typer

import fleet
from fleet import errors
from fleet.cli import render
from fleet.cli.common import JsonOpt, check_utf8_args
from fleet.features import load as load_features
from fleet.paths import get_paths

load_features()  # every built-in feature on the core's seams before any command runs (fleet.seams)

log = logging.getLogger(__name__)

app = typer.Typer(
    name="fleet",
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

_registered: set[str] = set()


def build(argv: list[str] | None = None) -> typer.Typer:
    """The app with the commands ``argv`` needs registered (every command when it names none we
    know, asks for help or completion); returns :data:`app`."""
    import importlib

    args = sys.argv[1:] if argv is None else argv
    first = next((a for a in args if not a.startswith("-")), None)
    completing = any(k.startswith("_FLEET_COMPLETE") for k in os.environ)
    every = set(COMMANDS.values())
    wanted = {COMMANDS[first]} if first in COMMANDS and not completing else every
    for name in dict.fromkeys(COMMANDS.values()):
        if name in wanted and name not in _registered:
            importlib.import_module(f"fleet.cli.{name}").register(app)
            _registered.add(name)
    if "" not in _registered:
        app.command("paths")(paths_)
        app.command("doctor")(doctor)
        _registered.add("")
    return app


def paths_(as_json: JsonOpt = False) -> None:
    """Show where fleet keeps its files (FLEET_HOME moves them all)."""
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


def main(argv: list[str] | None = None) -> None:
    """Run the CLI and exit with the code docs/design.md §7 assigns to what happened. Never returns."""
    debug = bool(os.environ.get("FLEET_DEBUG"))
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING, format="fleet: %(name)s: %(message)s"
    )
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
