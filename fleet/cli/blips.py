"""``fleet post``, ``fleet read``, ``fleet surface``, ``fleet replace``: the conversation itself."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from fleet import errors
from fleet.cli import render
from fleet.cli.common import (
    WAVELET_HELP,
    AsOpt,
    JsonOpt,
    WaveOpt,
    client,
    complete_wavelet,
    text_arg,
    wavelet,
)

if TYPE_CHECKING:  # a command's module loads typer only: its --help needs no records
    from fleet.client import Client
    from fleet.models import Blip, BlipPage

WaveletArg = Annotated[
    str, typer.Argument(metavar="WAVELET", help=WAVELET_HELP, autocompletion=complete_wavelet)
]
TextArg = Annotated[str, typer.Argument(metavar="TEXT", help="The text, or `-` to read it from stdin.")]

PAGE = 500
FOLLOW_WAIT = 30.0
"""Seconds one long-poll of ``read --follow`` waits before asking again."""


def post(
    wavelet_ref: WaveletArg,
    text: TextArg,
    as_: AsOpt = None,
    wave: WaveOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Post a message into WAVELET."""
    body = text_arg(text)
    wl = wavelet(wavelet_ref, wave)
    blip = client().post(wl.id, body, as_=as_)
    if as_json:
        render.dump(blip)
    else:
        render.posted(blip, wl)


def read(
    wavelet_ref: WaveletArg,
    after: Annotated[
        str | None, typer.Option(metavar="ID", help="Only blips after this blip (id or prefix).")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new blips until Ctrl-C.")
    ] = False,
    history: Annotated[
        bool, typer.Option("--history", help="Include replaced versions of edited blips.")
    ] = False,
    ids: Annotated[bool, typer.Option("--ids", help="Start each line with the blip's short id.")] = False,
    context: Annotated[
        bool,
        typer.Option(
            "--context",
            help="The assembled context instead: ancestors' summaries and blips up to each fork point,"
            " then WAVELET's summary and live tail, with the bytes the summaries saved.",
        ),
    ] = False,
    limit: Annotated[
        int | None,
        typer.Option("--limit", metavar="N", help="--context: only the newest N entries (one page)."),
    ] = None,
    wave: WaveOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print WAVELET's blips, oldest first.

    With --json: a BlipPage (blips + cursor); with --follow --json: one Blip object per line; with
    --context --json: a Context.
    """
    c = client()
    wl = wavelet(wavelet_ref, wave)
    if context:
        if follow or after or history:
            raise errors.UsageError(
                "--context reads the assembled context: drop --follow, --after and --history"
            )
        ctx = c.context(wl.id, limit=limit) if limit is not None else c.full_context(wl.id)
        if as_json:
            render.dump(ctx)
        else:
            render.context(ctx, with_ids=ids)
        return
    cursor = after
    if after and len(after) < 36:  # a prefix compares below its own blip: find the full id
        cursor = c.get_blip(after).id
    backlog: list[Blip] = []
    while True:
        page = c.read(wl.id, after=cursor, limit=PAGE, history=history)
        backlog += page.blips
        cursor = page.cursor or cursor
        if len(page.blips) < PAGE:
            break
    if not follow:
        if as_json:
            from fleet.models import BlipPage

            render.dump(BlipPage(blips=backlog, cursor=cursor or ""))
        else:
            render.blips(backlog, with_ids=ids)
        return
    try:
        while True:
            for blip in backlog:
                if as_json:
                    render.dump(blip, compact=True)
                else:
                    render.out(render.blip_line(blip, with_id=ids))
            c, page = _next_page(c, wl.id, cursor, history)
            backlog, cursor = page.blips, page.cursor or cursor
    except KeyboardInterrupt:
        return  # Ctrl-C is how --follow ends: not an error


def _next_page(c: Client, wavelet_id: str, cursor: str | None, history: bool) -> tuple[Client, BlipPage]:
    """The next long-poll of ``read --follow``, through a daemon outage: while the daemon is away
    it waits (jittered backoff to 5 s) and finds the daemon again as a new command would (the
    endpoint file, FLEET_DAEMON), never starting one; one line on stderr when it goes, one when it
    answers again. The page is asked from ``cursor``, so nothing is printed twice or skipped.
    Returns the client that answered."""
    from fleet.client import connect
    from fleet.delivery.engine import Backoff

    while True:
        try:
            return c, c.read(wavelet_id, after=cursor, wait=FOLLOW_WAIT, limit=PAGE, history=history)
        except errors.DaemonUnreachable as exc:
            render.note(f"daemon gone ({exc.message}); reconnecting… (Ctrl-C stops)")
        backoff = Backoff(first=0.2, limit=5.0)
        while True:  # the daemon this environment means now (its address may have changed)
            time.sleep(backoff.delay())
            try:
                c = connect(autostart=False)
                c.health()  # answering, not only announced (FLEET_DAEMON is not probed by connect)
                break
            except errors.DaemonUnreachable:
                continue  # none answers yet: wait on
        render.note(f"reconnected to the daemon at {c.url}; following from where it stopped")


def surface(
    wavelet_ref: WaveletArg,
    text: TextArg,
    source: Annotated[
        str | None, typer.Option(metavar="BLIP", help="The blip in WAVELET this conclusion comes from.")
    ] = None,
    as_: AsOpt = None,
    wave: WaveOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Report a conclusion from WAVELET into its parent wavelet.

    The parent gets a `surface` blip that references WAVELET (and --source, if given).
    """
    body = text_arg(text)
    wl = wavelet(wavelet_ref, wave)
    blip = client().surface(wl.id, body, source_blip_id=source, as_=as_)
    if as_json:
        render.dump(blip)
    else:
        render.out(f"surfaced {render.short(blip.id)} from {wl.path} into its parent")


def replace(
    blip_ref: Annotated[str, typer.Argument(metavar="BLIP", help="The blip's id or unique id prefix.")],
    text: TextArg,
    as_: AsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Replace a blip's text (the old version stays in its history)."""
    body = text_arg(text)
    blip = client().replace(blip_ref, body, as_=as_)
    if as_json:
        render.dump(blip)
    else:
        render.out(f"replaced {render.short(blip.replaces or blip_ref)} with {render.short(blip.id)}")


def register(root: typer.Typer) -> None:
    root.command()(post)
    root.command()(read)
    root.command()(surface)
    root.command()(replace)
