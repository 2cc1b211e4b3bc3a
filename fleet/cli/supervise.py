"""``fleet status``, ``fleet respawn``, ``fleet supervise``, ``fleet kill``: a running fleet, looked after."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Annotated

import typer

from fleet import errors
from fleet.cli import render
from fleet.cli.common import WAVELET_HELP, JsonOpt, WaveOpt, client, complete_wave, complete_wavelet
from fleet.cli.spawn import SocketOpt, TrustOpt, WaitOpt, make_spawner
from fleet.paths import get_paths

if TYPE_CHECKING:  # tmux and the supervisor load when a command runs, not with every fleet process
    from fleet.tmux import Tmux

WaveArg = Annotated[
    str | None,
    typer.Argument(
        metavar="WAVE", help="The wave [default: FLEET_WAVE, else every wave].", autocompletion=complete_wave
    ),
]
NameArg = Annotated[str, typer.Argument(metavar="NAME", help="The participant.")]


def _tmux(socket: str | None) -> Tmux:
    from fleet.tmux import Tmux
    from fleet.tmux import server as tmux_server

    return Tmux(tmux_server(socket))


def _wave_name(wave: str | None, what: str) -> str:
    name = wave or os.environ.get("FLEET_WAVE")
    if not name:
        raise errors.UsageError(f"which wave? `fleet {what} WAVE` (or set FLEET_WAVE)")
    return name


def status(
    wave: WaveArg = None,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Redraw every --interval until Ctrl-C.")
    ] = False,
    interval: Annotated[float, typer.Option("--interval", metavar="SECONDS", help="--watch's period.")] = 2.0,
    socket: SocketOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One row per (wavelet, participant): pane, presence, last blip, deliveries, cap, session, host.

    With --json: a WaveStatus object for one wave, an array of them for every wave; with --watch
    --json, one line per redraw.
    """
    if interval <= 0:
        raise errors.UsageError("--interval must be a positive number of seconds")
    from fleet import supervise

    c, tmux, paths = client(), _tmux(socket), get_paths()
    named = wave or os.environ.get("FLEET_WAVE")
    waves = [named] if named else [w.name for w in c.list_waves()]

    def frame() -> list[supervise.WaveStatus]:
        return [supervise.status(c, tmux, paths, w) for w in waves]

    if not watch:
        shown = frame()
        if as_json:
            render.dump(shown[0] if named else shown)
        else:
            render.status_tables(shown)
        return
    try:
        while True:
            shown = frame()
            if as_json:
                render.dump(shown[0] if named else shown, compact=True)
            else:
                render.status_frame(shown, interval, clear=sys.stdout.isatty())
            time.sleep(interval)
    except KeyboardInterrupt:
        return


def respawn(
    wavelet_ref: Annotated[
        str, typer.Argument(metavar="WAVELET", help=WAVELET_HELP, autocompletion=complete_wavelet)
    ],
    name: NameArg,
    force: Annotated[
        bool, typer.Option("--force", help="Restart a live agent too (its screen is saved first).")
    ] = False,
    socket: SocketOpt = None,
    wait: WaitOpt = 30.0,
    trust: TrustOpt = False,
    wave: WaveOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Relaunch NAME's agent resuming its recorded session, in its pane (works from any machine)."""
    from fleet import supervise

    spawner = make_spawner(socket, None, "auto", trust, wait)
    report = supervise.respawn(client(), spawner, wavelet_ref, name, force=force, wave_hint=wave)
    if as_json:
        render.dump(report)
    else:
        render.pane_report(report)
    if not report.ready:
        raise errors.FleetError(f"{name} was respawned but is not ready: {report.why}")


def supervise_(
    wave: Annotated[
        str | None,
        typer.Argument(metavar="WAVE", help="The wave [default: FLEET_WAVE].", autocompletion=complete_wave),
    ] = None,
    socket: SocketOpt = None,
    wait: WaitOpt = 30.0,
    ladder: Annotated[
        str | None,
        typer.Option(
            "--ladder",
            metavar="WAITS",
            help="The respawn ladder, e.g. 5m,15m,45m (s, m, h; the last repeats).",
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Take over from the `fleet supervise` already keeping WAVE (it stops)."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Watch WAVE and bring dead agents back: on a ladder (5m, 15m, 45m, ...), or at once when the
    operator mentions them. Keeps the wave's resident too: its heartbeats, crons and failure rule,
    and any operator blip revives it at once. Every act is posted as a system blip. Rolls the wave's
    summaries when its layouts name a summarizer (their `summarizer` key). Runs until Ctrl-C."""
    from fleet import supervise
    from fleet.cli.summary import _routing
    from fleet.resident.keeper import Keeper
    from fleet.summaries import Background

    name = _wave_name(wave, "supervise")
    spawner = make_spawner(socket, None, "auto", True, wait)
    rungs_given = supervise.Ladder(_waits(ladder)) if ladder else None
    c = client()
    the_wave = c.get_wave(name)
    lease = supervise.Lease(c, the_wave.id)
    held = lease.claim(force)  # one supervisor per wave: a Conflict names the one there is
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _n, _f: stop.set())  # (a --force elsewhere on this host sends it)
    lease.start()
    keeper = Keeper(c, spawner.tmux, get_paths(), the_wave, spawner=spawner)
    summaries = Background(c, get_paths(), the_wave.name, _routing(the_wave.name))
    sup = supervise.Supervisor(
        c, spawner.tmux, spawner, name, ladder=rungs_given, watchers=[keeper, summaries], lease=lease
    )
    rungs = ", ".join(supervise.span(r) for r in sup.ladder.rungs)
    if held.took_over:
        c.post_system(
            sup.wave.root_id,
            f"supervise: pid {held.pid} on {held.host} took over wave {sup.wave.name} from {held.took_over}",
        )
        render.note(f"took over from {held.took_over}, which stops")
    render.note(f"supervising wave {sup.wave.name} (respawn ladder {rungs}, ...); Ctrl-C stops")

    def show(event: supervise.SupervisorEvent) -> None:
        if as_json:
            render.dump(event, compact=True)
        else:
            render.supervisor_event(event)

    try:
        sup.run(stop, on_event=show, on_outage=lambda why: render.note(f"{why}; retrying"))
    except KeyboardInterrupt:
        return
    finally:
        summaries.close()
        lease.release()
    if lease.lost.is_set():
        render.note(f"stopped supervising wave {sup.wave.name}: {lease.why} (`fleet supervise --force`)")
    elif stop.is_set():
        render.note(f"stopped supervising wave {sup.wave.name} (SIGTERM)")


def _waits(text: str) -> list[float]:
    out = []
    for part in text.split(","):
        part = part.strip()
        unit = {"s": 1, "m": 60, "h": 3600}.get(part[-1:], 0)
        number = part[:-1] if unit else part
        try:
            value = float(number) * (unit or 1)
        except ValueError:
            raise errors.UsageError(f"--ladder: {part!r} is not a wait (e.g. 90s, 5m, 1h)") from None
        if not value > 0:
            raise errors.UsageError(f"--ladder: {part!r} must be more than 0")
        out.append(value)
    return out


def kill(
    target: Annotated[
        str,
        typer.Argument(
            metavar="WAVELET|WAVE",
            help="WAVE/WAVELET (its window) or a wave (its session).",
            autocompletion=complete_wavelet,
        ),
    ],
    socket: SocketOpt = None,
    wave: WaveOpt = None,
    prune: Annotated[
        bool,
        typer.Option(
            "--prune",
            help="Then remove the killed participants' git worktrees (and branches) that have no changes"
            " and nothing unmerged; list the ones kept.",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Kill a wavelet's window or a wave's tmux session; keep all data (`fleet spawn` resumes them)."""
    from fleet import supervise

    pruner: supervise.Pruner | None = None
    if prune:  # the worktrees no live pane works in (fleet.worktrees)
        from fleet.worktrees import prune_killed as pruner
    report = supervise.kill(client(), _tmux(socket), target, wave_hint=wave, prune=pruner)
    if as_json:
        render.dump(report)
    else:
        render.kill_report(report)


def register(root: typer.Typer) -> None:
    root.command()(status)
    root.command()(respawn)
    root.command("supervise")(supervise_)
    root.command()(kill)
