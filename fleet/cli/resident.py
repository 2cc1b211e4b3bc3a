"""``fleet resident start|stop|status|interrupt`` and ``fleet memory show|update|add``: a wave's mind."""

from __future__ import annotations

from typing import Annotated

import typer

from fleet.cli import render
from fleet.cli.common import JsonOpt, client, complete_wave
from fleet.cli.spawn import SocketOpt, WaitOpt, make_spawner
from fleet.paths import get_paths

WaveArg = Annotated[str, typer.Argument(metavar="WAVE", help="The wave.", autocompletion=complete_wave)]

resident_app = typer.Typer(
    name="resident",
    help="The wave's one long-lived mind: a Claude Code or Codex session in <repo>.<wave>"
    " (docs/resident.md).",
    no_args_is_help=True,
)


@resident_app.command("start")
def start(
    wave: WaveArg,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            metavar="PROFILE",
            help="claude or codex (that CLI with the default layout's profile), or a layout (name or"
            " .toml) whose `resident` profile runs the mind [default: GOAL.md's mind:, else the default"
            " layout].",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Take the seat over from a live resident.")] = False,
    supervise: Annotated[
        bool,
        typer.Option(
            "--supervise",
            help="Also start `fleet supervise WAVE` (heartbeats, crons, revival) in a tmux window"
            " `supervise` of the wave's session, unless one keeps the wave already.",
        ),
    ] = False,
    socket: SocketOpt = None,
    wait: WaitOpt = 90.0,
    as_json: JsonOpt = False,
) -> None:
    """Seat WAVE's resident: its own tmux window, in the sibling worktree <repo>.<wave>, seeded from
    wave/WAVE/GOAL.md and MEMORY.md; one per wave (a second start is refused unless --force). Says
    when no `fleet supervise` keeps the wave (--supervise starts one)."""
    from fleet.resident import seat

    spawner = make_spawner(socket, None, "auto", True, wait)
    c = client()
    report = seat.start(c, spawner, get_paths(), wave, agent=agent, force=force)
    if supervise:
        the_wave = c.get_wave(report.wave)
        report.supervisor, window = seat.supervise_in_window(c, spawner.tmux, get_paths(), the_wave)
        report.supervise_window = window or None
    if as_json:
        render.dump(report)
        return
    render.out(
        f"resident of {report.wave}: session {report.session_id} ({'resumed' if report.resumed else 'new'}),"
        f" pid {report.pid}, pane {report.pane_id}, in {report.worktree}"
    )
    if report.closed:
        render.note(report.closed)
    if report.limits:
        render.note(f"a {report.kind} mind: " + "; ".join(report.limits))
    if report.supervisor is None:
        render.note(seat.unsupervised(report.wave))
    else:
        where = f" (tmux window {seat.SUPERVISE_WINDOW})" if report.supervise_window else ""
        render.note(f"supervised by `fleet supervise` {report.supervisor}{where}")


@resident_app.command("stop")
def stop(wave: WaveArg, socket: SocketOpt = None, as_json: JsonOpt = False) -> None:
    """Close WAVE's seat and end its resident (its session is kept: start resumes it)."""
    from fleet.resident import seat

    spawner = make_spawner(socket, None, "auto", False, 0)
    report = seat.stop(client(), spawner.tmux, wave)
    if as_json:
        render.dump(report)
    elif report.stopped:
        render.out(f"stopped the resident of {report.wave} (session {report.session_id})")
    else:
        render.out(f"{report.wave}: {report.note}")


@resident_app.command("status")
def status(wave: WaveArg, socket: SocketOpt = None, as_json: JsonOpt = False) -> None:
    """The mind's state (the one `fleet status` shows: idle, turning, waiting, failed, dead, unknown
    and why; none), turns, workers in flight, uptime."""
    import json

    from fleet.resident import seat
    from fleet.resident.mind import steer_status

    spawner = make_spawner(socket, None, "auto", False, 0)
    c, paths = client(), get_paths()
    st = seat.status(c, spawner.tmux, paths, wave)
    steer = None
    if st.session_id and st.state != "none" and st.kind is not None:  # (None: its layout is broken)
        steer = steer_status(st.session_id, seat.mind_of(paths, c.get_wave(wave)))
    if as_json:
        from fleet import wire

        data = wire.dump(st)
        data["steer"] = wire.dump(steer) if steer is not None else None
        render.out(json.dumps(data, indent=2))
        return
    rows = [("wave", st.wave), ("state", st.state_text or st.state)]
    if st.state != "none":
        rows += [
            ("kind", st.kind or "?"),
            ("session", st.session_id or ""),
            ("pid", f"{st.pid} on {st.host}"),
            ("uptime", render.span(st.uptime_seconds) if st.uptime_seconds is not None else "-"),
            (
                "turns",
                "unknown (no transcript here)"
                if st.turns is None
                else str(st.turns) + (f" ({st.failed_turns} failed in a row)" if st.failed_turns else ""),
            ),
            ("in flight", str(st.in_flight)),
            ("supervisor", st.supervisor or "none"),
        ]
        rows += [(f"  {w.wavelet}", f"{w.status}, {w.last_blip[:60]}") for w in st.workers]
        if steer is not None and (steer.last is not None or st.limits):
            rows.append(("last steer", steer.text))
    if st.note:
        rows.append(("note", st.note))
    render.pairs(rows)


@resident_app.command("interrupt")
def interrupt_(
    wave: WaveArg,
    text: Annotated[
        str, typer.Argument(metavar="[TEXT]", help="The next turn, typed in once the turn ends.")
    ] = "",
    deadline: Annotated[
        float,
        typer.Option("--deadline", metavar="SECONDS", min=0, help="How long the turn has to end."),
    ] = 10.0,
    socket: SocketOpt = None,
    wait: WaitOpt = 90.0,
    as_json: JsonOpt = False,
) -> None:
    """Cancel the mind's turn: Escape in its pane; if the turn has not ended by the deadline, its
    process group is ended and the same session resumed in its pane (the conversation carries on).
    Says which ended the turn. TEXT, if given, becomes its next turn."""
    from fleet.resident.interrupt import interrupt

    spawner = make_spawner(socket, None, "auto", True, wait)  # (a force-close resumes the session)
    report = interrupt(client(), spawner, get_paths(), wave, text, deadline=deadline)
    if as_json:
        render.dump(report)
    else:
        render.out(f"{report.wave}: {report.text}")


memory_app = typer.Typer(
    name="memory",
    help="The wave's MEMORY.md (wave/WAVE/MEMORY.md), through the daemon: the operator and the seated"
    " resident only.",
    no_args_is_help=True,
)
TextArg = Annotated[str, typer.Argument(metavar="TEXT|-", help="The text (- reads stdin).")]
SummaryOpt = Annotated[
    str | None, typer.Option("--summary", help="What the system blip says [default: its first line].")
]


def _text(text: str) -> str:
    import sys

    return sys.stdin.read() if text == "-" else text


@memory_app.command("show")
def memory_show(wave: WaveArg, as_json: JsonOpt = False) -> None:
    """Print the wave's MEMORY.md."""
    from fleet.resident import memory

    report = memory.show(client(), wave)
    if as_json:
        render.dump(report)
    else:
        render.out(report.content.rstrip("\n"))


@memory_app.command("update")
def memory_update(wave: WaveArg, text: TextArg, summary: SummaryOpt = None, as_json: JsonOpt = False) -> None:
    """Replace the wave's MEMORY.md with TEXT (the resident is told to re-read it)."""
    from fleet.resident import memory

    report = memory.write(client(), wave, "update", _text(text), summary)
    render.dump(report) if as_json else render.out(f"updated {report.path}: {report.summary}")


@memory_app.command("add")
def memory_add(wave: WaveArg, text: TextArg, summary: SummaryOpt = None, as_json: JsonOpt = False) -> None:
    """Append TEXT to the wave's MEMORY.md as a new paragraph (the resident is told to re-read it)."""
    from fleet.resident import memory

    report = memory.write(client(), wave, "add", _text(text), summary)
    render.dump(report) if as_json else render.out(f"added to {report.path}: {report.summary}")


def register(root: typer.Typer) -> None:
    root.add_typer(resident_app)
    root.add_typer(memory_app)
