"""``fleet watch`` and ``fleet hook-config``: waking a session without channel notifications
(docs/design.md §5).

The logic is in :mod:`fleet.watch`; these commands parse, call it, and print. In ``--hook`` mode
stdout stays empty (Claude Code reads stderr) and logging goes to stderr only when ``FLEET_DEBUG``.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from fleet import errors
from fleet.cli import render
from fleet.paths import get_paths

CAP = 40
""":data:`fleet.delivery.rules.DEFAULT_CAP`, the default ``--help`` shows (the delivery rules load the
records: the hook imports them where it runs; a test keeps them equal)."""

ParticipantOpt = Annotated[
    str | None,
    typer.Option(envvar="FLEET_PARTICIPANT", metavar="NAME", help="Whose blips to watch."),
]
WaveOpt = Annotated[str | None, typer.Option(envvar="FLEET_WAVE", metavar="WAVE", help="The wave.")]
DaemonOpt = Annotated[
    str | None,
    typer.Option(envvar="FLEET_DAEMON", metavar="URL", help="The store daemon [default: the local one]."),
]
TokenFileOpt = Annotated[
    Path | None,
    typer.Option(
        envvar="FLEET_TOKEN_FILE",
        metavar="PATH",
        help="A file holding the participant's token [default: FLEET_TOKEN, else the local operator token].",
    ),
]
AttentionOpt = Annotated[
    str,  # fleet.delivery.rules.Attention
    typer.Option(
        metavar="full|targeted|POLICY",
        help="full: every blip. targeted: only blips naming you, the operator's and surfaces in full; "
        "the rest as one digest per wavelet batch (docs/design.md §4). resident: a wave's resident "
        "(full on the root wavelet, DONE: reports in full elsewhere; docs/attention.md).",
    ),
]
StateDirOpt = Annotated[
    Path | None,
    typer.Option(
        metavar="DIR", help="Where the channel keeps delivery state [default: the fleet state dir]."
    ),
]


def watch(
    participant: ParticipantOpt = None,
    wave: WaveOpt = None,
    wavelet: Annotated[
        list[str] | None,
        typer.Option(
            "--wavelet", metavar="WAVELET", help="Only this wavelet (repeatable) [default: all of yours]."
        ),
    ] = None,
    after: Annotated[
        str | None,
        typer.Option(metavar="VALUE", help="Resume from the after=VALUE line a previous watch printed."),
    ] = None,
    hook: Annotated[
        bool,
        typer.Option(
            "--hook",
            help="Run as a Claude Code asyncRewake hook: position in the channel's state file, blips on "
            "stderr, exit 2 = wake, 0 = nothing.",
        ),
    ] = False,
    daemon: DaemonOpt = None,
    token_file: TokenFileOpt = None,
    state_dir: StateDirOpt = None,
    cap: Annotated[
        int, typer.Option(min=0, help="Blips handed out per wavelet before one cap notice (0: no cap).")
    ] = CAP,
    wait: Annotated[
        float | None,
        typer.Option(
            min=0,
            metavar="SECONDS",
            help="Give up after this long with nothing new (0: never) [default: never; --hook: 7 days "
            "less 10 minutes, inside the hook's timeout].",
        ),
    ] = None,
    unreachable_after: Annotated[
        float,
        typer.Option(
            min=0,
            metavar="SECONDS",
            help="How long the daemon may be unreachable before watch gives up (--hook: wakes to say so).",
        ),
    ] = 30.0,
    as_json: Annotated[
        bool, typer.Option("--json", help='One JSON object per blip, then {"after": VALUE}.')
    ] = False,
    attention: AttentionOpt = "full",
    digest_hold: Annotated[
        float | None,
        typer.Option(
            min=0,
            metavar="SECONDS",
            help="Targeted only: how long a digest with nothing addressed to you waits for more chatter "
            "before it is handed out (0: at once) [default: 30 with --hook, 0 otherwise].",
        ),
    ] = None,
    attendant: Annotated[
        str | None,
        typer.Option(
            metavar="CMD",
            help="Targeted only: a command given each digest batch as JSON on stdin; it may answer "
            '{"promote": [blip ids]} to deliver those in full (as the channel\'s --attendant).',
        ),
    ] = None,
    attendant_timeout: Annotated[
        float | None,
        typer.Option(metavar="SECONDS", help="How long the attendant may take per batch [default: 2]."),
    ] = None,
    gate: Annotated[
        bool,
        typer.Option(
            "--gate",
            help="--hook beside a channel (spawn --transport auto): wait at the session's channel for the "
            "frames it routes to the hook; deliver alone when no channel answers.",
        ),
    ] = False,
    receipts: Annotated[
        str,
        typer.Option(
            metavar="auto|transcript|none",
            help="--hook: hand out again what Claude Code's transcript shows never entered the context "
            "(auto: when Claude Code names its transcript on the hook's stdin).",
        ),
    ] = "auto",
) -> None:
    """Block until a blip lands for PARTICIPANT, print what is new and an `after=` line, and exit 0.

    Re-arm with the printed value: `eval "$(fleet watch … | tail -n 1)"; fleet watch --after "$after"`.
    With --hook (for Claude Code's asyncRewake hooks; see `fleet hook-config`): the position is the
    channel's state file, a second arm exits 0 at once, exit 2 wakes the session with the blips on
    stderr, and a daemon unreachable for --unreachable-after seconds also exits 2.
    """
    from fleet import watch as core

    if hook and (after or as_json):
        raise errors.UsageError("--hook keeps its position in the state file: drop --after and --json")
    if not hook and state_dir is not None:
        raise errors.UsageError("--state-dir is for --hook only (plain watch keeps its position in --after)")
    config = core.watch_config(
        hook=hook,
        participant=participant,
        wave=wave,
        daemon=daemon,
        token_file=token_file,
        state_dir=state_dir,
        cap=cap,
        wavelets=list(wavelet or []),
        wait=wait,
        unreachable_after=unreachable_after,
        attention=attention,
        digest_hold=digest_hold,
        attendant=attendant,
        attendant_timeout=attendant_timeout,
        receipts=receipts,
    )
    if hook:
        if not os.environ.get("FLEET_DEBUG"):  # stderr is read by the model on a wake: no stray logs
            logging.getLogger("fleet").setLevel(logging.ERROR)
        raise typer.Exit(core.run_hook(config, gate=gate, given=core.hook_input()))
    frames, next_after = core.watch(config, after)
    if as_json:
        for frame in frames:
            render.dump(frame, compact=True)
        render.dump(core.AfterLine(after=next_after), compact=True)
    else:
        from fleet.delivery.frames import block

        for frame in frames:
            render.out(block(frame))
            render.out()
        render.out(f"after={next_after}")
    sys.stdout.flush()


def hook_config(
    participant: ParticipantOpt = None,
    wave: WaveOpt = None,
    daemon: DaemonOpt = None,
    token_file: TokenFileOpt = None,
    state_dir: StateDirOpt = None,
    attention: AttentionOpt = "full",
) -> None:
    """Print the Claude Code `--settings` JSON that delivers PARTICIPANT's blips through `fleet watch --hook`.

    Launch with `claude --settings="$(fleet hook-config …)"`, or merge its "hooks" into a settings
    file. `fleet spawn --transport hook` injects exactly this.
    """
    from fleet import watch as core
    from fleet.delivery.config import resolve

    config = resolve(
        participant=participant,
        wave=wave,
        daemon=daemon,
        token_file=token_file,
        state_dir=state_dir,
        need_token_file=True,
    )
    tokens = config.token_file or get_paths().operator_token  # no file: only the operator gets here
    render.out(
        core.hook_settings(
            config.participant,
            config.wave,
            tokens,
            attention,
            daemon=config.daemon,
            state_dir=config.state_dir,
        )
    )


def register(app: typer.Typer) -> None:
    """Add ``fleet watch`` and ``fleet hook-config`` to the root app."""
    app.command("watch")(watch)
    app.command("hook-config")(hook_config)
