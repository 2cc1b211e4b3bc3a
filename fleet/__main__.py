"""``fleet`` and ``python -m fleet``: the entry point, in front of the CLI.

Three answers come from here without loading the CLI: ``fleet channel …`` (what every spawned session
runs) goes straight to the channel, so one channel per agent stays small; ``fleet watch --hook …``
(what a session with the hook runs at every turn's end) to :func:`fleet.watch.hook_main`, which
hands any command line it does not take back to the CLI; ``fleet --version`` prints
the version before typer or the command tree is imported (it used to register every command and
took 2.5× as long as ``fleet post``: ``bench/cli.py`` measures both). Everything else is
:func:`fleet.cli.main`.
"""

from __future__ import annotations

import os
import sys


def asks_version(args: list[str]) -> bool:
    """Whether ``args`` (argv without the program) ask for ``--version`` among the global options
    that come before any command (``fleet --remote hq --version`` too)."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--version":
            return True
        if arg == "--remote":
            i += 2
            continue
        if not arg.startswith("--remote="):
            return False
        i += 1
    return False


def arm(args: list[str]) -> None:
    """An arm of ``fleet watch --hook`` (:func:`fleet.watch.hook_main`), behind the CLI's error
    boundary (:func:`fleet.cli.main`: the same lines and exit codes; the CLI's renderer is imported
    only to write an error). Exits, or returns when hook_main hands the command line to the CLI."""
    from fleet import errors
    from fleet.features import load_channel
    from fleet.watch import hook_main

    load_channel()  # what plugs into delivery, as in a channel
    try:
        code = hook_main(args)
    except errors.FleetError as exc:
        _error(exc.message)
        code = exc.exit_code
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (as the CLI: Python flushes stdout at exit)
        code = 1
    except Exception as exc:
        if os.environ.get("FLEET_DEBUG"):
            raise
        _error(f"unexpected {type(exc).__name__}: {exc} (run with FLEET_DEBUG=1 for a traceback)")
        code = 1
    if code is not None:
        sys.exit(code)


def _error(message: str) -> None:
    from fleet.cli import render

    render.error(message)


def main() -> None:
    """The ``fleet`` script. Never returns."""
    args = sys.argv[1:]
    if args[:1] == ["channel"]:
        from fleet.channel import main as channel
        from fleet.features import load_channel

        load_channel()  # the features that plug into the channel, and no others
        sys.exit(channel(args[1:]))
    if args[:1] == ["watch"] and "--hook" in args:
        arm(args[1:])  # returns when the CLI is to run the command line
    if asks_version(args):
        import fleet

        sys.stdout.write(f"fleet {fleet.__version__}\n")
        sys.exit(0)
    from fleet.allocator import restart_for_the_daemon

    restart_for_the_daemon()  # before the CLI is imported: the restart costs an interpreter start only
    from fleet.cli import main as cli

    cli()


if __name__ == "__main__":
    main()
