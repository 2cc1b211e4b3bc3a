"""``fleet channel``: run the stdio MCP server that makes a Claude Code session a wave participant.

Not for people at a terminal: Claude Code starts it from an inline ``--mcp-config`` entry (see
:mod:`fleet.channel` for the stable invocation). stdout carries MCP only from the first line on.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Literal

import typer

from fleet.delivery import DEFAULT_CAP, DIGEST_HOLD

Attention = Literal["full", "targeted"]


def channel(
    participant: Annotated[
        str | None,
        typer.Option(envvar="FLEET_PARTICIPANT", metavar="NAME", help="Who this session is in the wave."),
    ] = None,
    wave: Annotated[
        str | None, typer.Option(envvar="FLEET_WAVE", metavar="WAVE", help="The wave to take part in.")
    ] = None,
    daemon: Annotated[
        str | None,
        typer.Option(envvar="FLEET_DAEMON", metavar="URL", help="The store daemon [default: the local one]."),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            envvar="FLEET_TOKEN_FILE",
            metavar="PATH",
            help="A file holding the participant's token (never pass a token itself on a command line).",
        ),
    ] = None,
    cap: Annotated[
        int, typer.Option(min=0, help="Blips pushed per wavelet before one cap notice (0: no cap).")
    ] = DEFAULT_CAP,
    state_dir: Annotated[
        Path | None,
        typer.Option(metavar="DIR", help="Where delivery cursors are kept [default: the fleet state dir]."),
    ] = None,
    attention: Annotated[
        Attention,
        typer.Option(
            help="full: every blip is pushed. targeted: only blips naming you, the operator's and "
            "surfaces; the rest as one digest per wavelet batch (DESIGN §4)."
        ),
    ] = "full",
    attendant: Annotated[
        str | None,
        typer.Option(
            metavar="CMD",
            help="Targeted only: a command given each digest batch as JSON on stdin; it may answer "
            '{"promote": [blip ids]} to deliver those in full. Errors never suppress anything.',
        ),
    ] = None,
    attendant_timeout: Annotated[
        float | None,
        typer.Option(metavar="SECONDS", help="How long the attendant may take per batch [default: 2]."),
    ] = None,
    digest_hold: Annotated[
        float,
        typer.Option(
            metavar="SECONDS",
            help="Targeted only: how long a digest with nothing addressed to you waits for more "
            "chatter before it is pushed (0: at once). A full blip takes it along earlier.",
        ),
    ] = DIGEST_HOLD,
    deliver: Annotated[
        bool,
        typer.Option(
            "--deliver/--no-deliver",
            help="--no-deliver: serve tools only; `fleet watch --hook` delivers (spawn --transport hook).",
        ),
    ] = True,
) -> None:
    """Serve MCP on stdin/stdout as PARTICIPANT of WAVE: participant tools plus channel delivery."""
    from fleet.channel import default_config, run

    config = default_config(
        participant,
        wave,
        daemon,
        token_file,
        cap,
        state_dir,
        attention=attention,
        attendant=attendant,
        attendant_timeout=attendant_timeout,
        digest_hold=digest_hold,
    )
    config.deliver = deliver
    logging.getLogger("fleet").setLevel(logging.INFO)
    raise typer.Exit(run(config))


def register(app: typer.Typer) -> None:
    """Add ``fleet channel`` to the root app."""
    app.command("channel")(channel)
