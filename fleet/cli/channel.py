"""``fleet channel``: run the stdio MCP server that makes a Claude Code session a wave participant.

Not for people at a terminal: Claude Code starts it from an inline ``--mcp-config`` entry (see
:mod:`fleet.channel` for the stable invocation). The arguments go unparsed to
:func:`fleet.channel.main`, the command's one parser (``python -m fleet channel`` reaches it without
this CLI at all).
"""

from __future__ import annotations

import typer


def channel(ctx: typer.Context) -> None:
    """Serve MCP on stdin/stdout as a participant of a wave (`fleet channel --help` for the options)."""
    from fleet.channel import main

    raise typer.Exit(main(list(ctx.args)))


def register(app: typer.Typer) -> None:
    """Add ``fleet channel`` to the root app."""
    app.command(
        "channel",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
        add_help_option=False,
    )(channel)
