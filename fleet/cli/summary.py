"""``fleet summary show|check|write|run`` and ``fleet pin``: rolling summaries and what they must keep."""

from __future__ import annotations

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
    complete_wave,
    complete_wavelet,
    wavelet,
)
from fleet.paths import get_paths

app = typer.Typer(
    help="Rolling summaries: deep forks stay cheap, and every summary is checked.", no_args_is_help=True
)
WaveletArg = Annotated[
    str, typer.Argument(metavar="WAVELET", help=WAVELET_HELP, autocompletion=complete_wavelet)
]
CommandOpt = Annotated[
    str | None,
    typer.Option(
        "--command",
        metavar="CMD",
        help="The summarizer: reads the blips to cover as JSON on stdin, prints "
        '{"text": ..., "cites": [ids]}. Default: fleet\'s extractive summary (no model).',
    ),
]
TimeoutOpt = Annotated[
    float, typer.Option("--timeout", metavar="S", help="Seconds a summarizer run may take.")
]

SUMMARIZER = "summarizer"
"""The participant name the summary lines of a summarizer's routing log are written under."""


if TYPE_CHECKING:  # imported where a command runs (delivery records, the summarizer): not by --help
    from fleet.delivery.attention import RoutingLog, SummaryEntry
    from fleet.summaries import Summarizer

BYTES, EVERY, SUMMARIZER_TIMEOUT = 64 * 1024, 50, 30.0
""":data:`fleet.summaries.BYTES`, ``EVERY`` and ``SUMMARIZER_TIMEOUT``, the defaults ``--help`` shows (a
unit test keeps them equal)."""


def _routing(wave: str) -> RoutingLog:
    from fleet.delivery.attention import RoutingLog, routing_log_path
    from fleet.delivery.state import StateFile

    c = client()
    state = StateFile(get_paths().channels, c.base_url, wave, SUMMARIZER)
    return RoutingLog(routing_log_path(state), SUMMARIZER, wave)


def _summarizer(command: str | None, timeout: float) -> Summarizer | None:
    if command is None:
        return None
    if timeout <= 0:
        raise errors.UsageError("--timeout must be a positive number of seconds")
    from fleet.summaries import Summarizer

    try:
        return Summarizer(command, timeout)
    except ValueError as exc:
        raise errors.UsageError(f"--command {command!r} cannot be split into words: {exc}") from None


@app.command()
def show(wavelet_ref: WaveletArg, wave: WaveOpt = None, as_json: JsonOpt = False) -> None:
    """Print WAVELET's summaries, oldest first: range, author, what it cites, and its text."""
    wl = wavelet(wavelet_ref, wave)
    items = client().summaries(wl.id)
    if as_json:
        render.dump(items)
        return
    if not items:
        render.out(f"{wl.path}: no summary yet (its context is the full text)")
    for s in items:
        render.out(
            f"{render.short(s.id)} {wl.path} up to {render.short(s.upto)} · {s.covered_blips} blip(s),"
            f" {s.covered_bytes} bytes · by {s.author} ({s.author_kind}) · cites {len(s.cites)}"
        )
        for line in s.text.splitlines():
            render.out(f"    {line}")


@app.command()
def check(wavelet_ref: WaveletArg, wave: WaveOpt = None, as_json: JsonOpt = False) -> None:
    """Check WAVELET's latest summary against the load-bearing blips of its range as they are now.

    Exit 1 when it misses any (blips pinned after it was written: they stay in full in a context).
    """
    wl = wavelet(wavelet_ref, wave)
    got = client().summary_check(wl.id)
    if as_json:
        render.dump(got)
    elif got.summary is None:
        render.out(f"{wl.path}: no summary; {got.pending_blips} blip(s), {got.pending_bytes} bytes in full")
    else:
        render.out(
            f"{wl.path}: summary up to {render.short(got.summary.upto)} cites"
            f" {len(got.load_bearing) - len(got.missing)} of {len(got.load_bearing)} load-bearing blip(s);"
            f" {got.pending_blips} blip(s), {got.pending_bytes} bytes after it"
        )
        for m in got.missing:
            render.out(f"    not cited: {m}")
    if got.missing:
        raise typer.Exit(1)


@app.command()
def write(
    wavelet_ref: WaveletArg,
    command: CommandOpt = None,
    timeout: TimeoutOpt = SUMMARIZER_TIMEOUT,
    wave: WaveOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Roll WAVELET's summary forward now (operator): the summarizer's, or the extractive default.

    Exit 1 when no summary was recorded (rejected, or the summarizer failed): the full text stays.
    """
    from fleet.summaries import roll

    c = client()
    wl = wavelet(wavelet_ref, wave)
    entry = roll(c, wl.wave, wl.id, wl.path, _routing(wl.wave), _summarizer(command, timeout))
    if as_json:
        render.dump(entry)
    elif entry is None:
        render.out(f"{wl.path}: nothing new to summarize")
    else:
        extra = f": missing {', '.join(entry.missing)}" if entry.missing else ""
        upto = render.short(entry.upto)
        render.out(f"{wl.path}: {entry.outcome} ({entry.author_kind}) up to {upto}{extra}")
        if entry.detail and entry.outcome != "accepted":
            render.note(entry.detail)
    if entry is not None and entry.outcome != "accepted":
        raise typer.Exit(1)


@app.command()
def run(
    wave: Annotated[
        str,
        typer.Argument(
            metavar="WAVE", help="The wave whose wavelets to summarize.", autocompletion=complete_wave
        ),
    ],
    command: CommandOpt = None,
    every: Annotated[int, typer.Option("--every", metavar="N", help="Roll after N new blips.")] = EVERY,
    bytes_: Annotated[
        int, typer.Option("--bytes", metavar="M", help="Or after M new bytes of text.")
    ] = BYTES,
    timeout: TimeoutOpt = SUMMARIZER_TIMEOUT,
    once: Annotated[bool, typer.Option("--once", help="One pass over the wave, then exit.")] = False,
) -> None:
    """Keep WAVE's summaries rolling (operator): after N new blips or M bytes since a wavelet's last
    summary, run the summarizer (or the extractive default) and offer its summary. Fallback-open:
    a failing summarizer leaves the full text; each outcome is a line of the routing log."""
    if every < 1 or bytes_ < 1:
        raise errors.UsageError("--every and --bytes must be at least 1")
    name = client().get_wave(wave).name
    summarizer = _summarizer(command, timeout)
    from fleet.summaries import Runner

    runner = Runner(client(), name, _routing(name), summarizer, every, bytes_)
    if once:
        for entry in runner.once():
            render.out(_rolled(entry))
        return
    by = f"`{command}`" if command is not None else "fleet's extractive summary"
    render.note(
        f"rolling the summaries of wave {name}: a wavelet's, once {every} new blips or {bytes_} new"
        f" bytes arrived since its last, written by {by}; each one is printed here. Ctrl-C stops."
    )
    try:
        runner.forever(lambda entry: render.out(_rolled(entry)))
    except KeyboardInterrupt:
        render.note(f"stopped rolling the summaries of wave {name}")


def _rolled(entry: SummaryEntry) -> str:
    """One line per summary offered: what an accepted one covers and saves, or why none was written."""
    if entry.outcome == "accepted":
        return (
            f"{entry.wavelet}: summarized {entry.covered_blips} blip(s) up to {render.short(entry.upto)},"
            f" {entry.saved_bytes} bytes saved ({entry.author_kind})"
        )
    why = (
        f": missing {', '.join(entry.missing)}"
        if entry.missing
        else (f": {entry.detail}" if entry.detail else "")
    )
    return f"{entry.wavelet}: not summarized, {entry.outcome} ({entry.author_kind}){why}; its full text stays"


def pin(
    blip_ref: Annotated[str, typer.Argument(metavar="BLIP", help="The blip's id or unique id prefix.")],
    as_: AsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Pin a blip: load-bearing from now on, so every summary of its wavelet must cite it."""
    blip = client().pin(blip_ref, as_=as_)
    if as_json:
        render.dump(blip)
    else:
        render.out(f"pinned {render.short(blip.id)}")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="summary")
    root.command()(pin)
