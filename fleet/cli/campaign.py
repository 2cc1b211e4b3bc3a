"""``fleet campaign …``: a plan carried out in waves of fresh sessions (docs/campaigns.md)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fleet import errors
from fleet.cli import render
from fleet.cli.common import JsonOpt

if TYPE_CHECKING:
    from fleet.campaign.disk import Campaign
    from fleet.campaign.state import State

app = typer.Typer(
    name="campaign",
    help="Carry out a plan in waves of fresh sessions, with the state machine in .wave/.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

CampaignOpt = Annotated[
    str | None,
    typer.Option("--campaign", "-c", metavar="ID", help="The campaign (default: the one in .wave/active)."),
]
RepoOpt = Annotated[
    Path | None,
    typer.Option(
        "--repo", "-C", metavar="DIR", help="The git repository (default: the current directory's)."
    ),
]
SocketOpt = Annotated[
    str | None,
    typer.Option("--socket", envvar="FLEET_TMUX_SOCKET", metavar="SOCKET", show_envvar=False,
                 help="tmux socket name or path [env: FLEET_TMUX_SOCKET]."),
]  # fmt: skip


def _campaign(repo: Path | None, campaign: str | None) -> Campaign:
    from fleet.campaign import disk

    return disk.find(disk.repo_root(repo), campaign)


@app.command("plan")
def plan(
    plan_file: Annotated[Path, typer.Argument(metavar="PLAN.md", help="The plan, in markdown, with an H1.")],
    by_headings: Annotated[
        bool,
        typer.Option(
            "--by-headings", help="One wave per `##` section, no model (plans already written as waves)."
        ),
    ] = False,
    executor: Annotated[
        str, typer.Option("--executor", metavar="PROFILE", help="The layout profile executors run as.")
    ] = "executor",
    model: Annotated[
        str, typer.Option("--model", metavar="M", help="The executors' model ('' = the profile's).")
    ] = "",
    layout: Annotated[
        str,
        typer.Option("--layout", "-l", help="The layout whose `planner` (else executor) profile plans."),
    ] = "",
    socket: SocketOpt = None,
    wait: Annotated[
        float, typer.Option("--wait", metavar="SECONDS", help="How long the planner may take to start.")
    ] = 90.0,
    timeout: Annotated[
        float, typer.Option("--timeout", metavar="SECONDS", help="How long the planner may take in all.")
    ] = 1800.0,
    repo: RepoOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Decompose PLAN.md into a campaign under .wave/campaigns/<id>/ (committed as `wave plan: <id>`):
    a fresh planner session writes it (read-only outside .wave/) and fleet validates it, or
    --by-headings makes one wave per `##` section with no model."""
    import json

    from fleet.campaign import disk

    root = disk.repo_root(repo)
    if by_headings:
        c, state = disk.plan_by_headings(root, plan_file, executor=executor, model=model)
    else:
        c, state = _plan_with_planner(root, plan_file, executor, model, layout, socket, wait, timeout)
    _remember(c)
    if as_json:
        render.out(json.dumps({"campaign_id": c.id, "dir": str(c.dir), "total_waves": state.total_waves}))
    else:
        render.out(f"planned campaign {c.id}: {state.total_waves} waves in {c.dir}")
        render.note("arm it with `fleet campaign run` (add --detach to give the loop its own tmux window)")


def _remember(c: Campaign) -> None:
    """Record where the campaign lives, for the console's campaign view (fleet.campaign.registry)."""
    from fleet.campaign import registry
    from fleet.paths import get_paths

    try:
        registry.remember(get_paths().state, c)
    except OSError as exc:
        render.note(
            f"the console will not find campaign {c.id} ({exc}); `fleet campaign run` records it again"
        )


def _plan_with_planner(
    root: Path, plan_file: Path, executor: str, model: str, layout: str, socket: str | None, wait: float,
    timeout: float,
) -> tuple[Campaign, State]:  # fmt: skip
    from fleet.campaign import loop as lp
    from fleet.campaign import planner
    from fleet.cli.common import client
    from fleet.paths import get_paths
    from fleet.tmux import Tmux
    from fleet.tmux import server as tmux_server

    planner.check(root, plan_file, executor=executor, model=model)  # bad input starts no daemon
    cl = client()
    cl.list_waves()  # the daemon is there before anything is written
    launcher = lp.Launcher(cl, Tmux(tmux_server(socket)), get_paths(), ready_timeout=wait)
    c, state = planner.prepare(root, plan_file, executor=executor, model=model)
    render.note(f"planner session for campaign {c.id} starting (`fleet attach {c.id}` to watch it)")
    phrase = planner.run_planner(c, state, launcher, layout, timeout=timeout)
    planner.check_tree(c)
    written = planner.validate(c)
    done = planner.finish(c, written, plan_rel=state.plan_source, executor=executor, model=model)
    if phrase and not phrase.startswith("PLAN WRITTEN"):
        render.note(f"the planner ended with {phrase[:60]!r}, not `PLAN WRITTEN: N`; its files validate")
    return c, done


@app.command("status")
def status(
    campaign: CampaignOpt = None,
    repo: RepoOpt = None,
    watch: Annotated[bool, typer.Option("--watch", help="Redraw whenever STATE.md changes.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """The dashboard: header, loop strip, USER ATTENTION banner, the wave table."""
    import json

    from fleet.campaign import view

    c = _campaign(repo, campaign)
    if as_json:
        render.out(json.dumps(view.status(c), indent=2))
        return
    colour = sys.stdout.isatty()
    if not watch:
        for ln in view.lines(view.status(c), colour=colour):
            render.out(ln)
        return
    seen: float | None = -1.0
    while True:  # a viewer for a person; the loop itself never polls
        try:
            mtime: float | None = c.state_file.stat().st_mtime
        except FileNotFoundError:
            mtime = None
        if mtime != seen:
            seen = mtime
            try:
                shown = view.lines(view.status(c), colour=colour)
            except errors.FleetError as exc:  # an agent or a hand broke the file: say so, keep watching
                shown = [
                    f"campaign {c.id}: {exc.message}",
                    "(still watching: the dashboard comes back once it is fixed)",
                ]
            if colour:
                typer.echo("\x1b[H\x1b[2J", nl=False)
            for ln in shown:
                render.out(ln)
        time.sleep(0.5)


@app.command("notes")
def notes(
    wave: Annotated[int, typer.Argument(metavar="N", help="The wave index.")],
    campaign: CampaignOpt = None,
    repo: RepoOpt = None,
) -> None:
    """Print wave N's NOTES.md (its append-only attempt log)."""
    c = _campaign(repo, campaign)
    c.check_wave(wave, c.read())
    path = c.notes(wave)
    if not path.exists():
        render.note(f"wave {wave} has no NOTES.md yet (written on a failure): {c.rel(path)}")
        return
    typer.echo(path.read_bytes().decode("utf-8", "replace"), nl=False)  # (the sessions' writing, shown)


@app.command("run")
def run(
    campaign: CampaignOpt = None,
    repo: RepoOpt = None,
    layout: Annotated[
        str,
        typer.Option("--layout", "-l", help="The layout whose profiles sessions run as (kept for restarts)."),
    ] = "",
    detach: Annotated[bool, typer.Option("--detach", help="Run the loop in its own tmux window.")] = False,
    socket: SocketOpt = None,
    wait: Annotated[
        float, typer.Option("--wait", metavar="SECONDS", help="How long a session may take to start.")
    ] = 90.0,
    keep_out: Annotated[
        list[str] | None,
        typer.Option(
            "--keep-out",
            metavar="GLOB",
            help="Never commit paths matching GLOB (repeatable; DIR/ for all under it): files you edit "
            "while the campaign runs. Kept for restarts; `--keep-out ''` clears the list.",
        ),
    ] = None,
) -> None:
    """Arm the loop and run it (in the foreground, or --detach into a tmux window)."""
    from fleet.campaign import loop as lp

    globs = None if keep_out is None else [g for g in keep_out if g]
    c = _campaign(repo, campaign)
    _preflight(c, globs)
    if detach:
        _detach(c, layout, socket, wait, globs)
        return
    from fleet.cli.common import client
    from fleet.paths import get_paths
    from fleet.tmux import Tmux
    from fleet.tmux import server as tmux_server

    launcher = lp.Launcher(client(), Tmux(tmux_server(socket)), get_paths(), ready_timeout=wait)
    loop = lp.Loop(c, launcher, layout=layout, keep_out=globs, say=render.out)
    loop.start(arm=True)
    render.note(f"loop armed for campaign {c.id} (pid {os.getpid()}); `fleet campaign stop` ends it")
    try:
        loop.run()
    finally:
        loop.close()
        render.out(f"loop of campaign {c.id} ended")


def _preflight(c: Campaign, keep_out: list[str] | None) -> None:
    """What `run` refuses before it starts anything: a STATE.md that does not parse, a loop that
    already runs, a dirty work tree (checked again by the loop under its lock)."""
    from fleet.campaign import loop as lp

    _s, o = lp.read_state(c)
    probe = lp.LoopLock(c)
    probe.acquire()
    probe.release()
    if keep_out is not None:
        o.keep_out = keep_out
    dirty = lp.dirty_outside(c, o)
    if dirty and not o.active_session_id and not o.launching:
        raise errors.UsageError(lp.dirty_message(c, dirty))


def _detach(c: Campaign, layout: str, socket: str | None, wait: float, keep_out: list[str] | None) -> None:
    from fleet.campaign import loop as lp
    from fleet.cli.common import client
    from fleet.tmux import Tmux
    from fleet.tmux import server as tmux_server

    cl = client()
    try:
        wave = cl.get_wave(c.id)
    except errors.NotFound:
        wave = cl.create_wave(c.id, [])
    main = cl.resolve(f"{wave.name}/main")
    tmux = Tmux(tmux_server(socket))
    sid = tmux.find_session(wave.id)
    if sid is None:
        sid, _wid, pane = tmux.new_session(wave.id, wave.name, "campaign-loop", main.id)
    else:
        _wid, pane = tmux.new_window(sid, wave.id, "campaign-loop", main.id)
    argv = [sys.executable, "-m", "fleet", "campaign", "run", "--repo", str(c.root), "--campaign", c.id,
            "--wait", str(wait)] + (["--layout", layout] if layout else [])  # fmt: skip
    if keep_out is not None:
        argv += [a for g in keep_out or [""] for a in ("--keep-out", g)]
    env = {k: os.environ[k] for k in ("FLEET_HOME", "FLEET_DAEMON", "FLEET_TOKEN", "FLEET_TOKEN_FILE",
                                      "FLEET_TMUX_SOCKET", "PATH") if os.environ.get(k)}  # fmt: skip
    if socket:
        env["FLEET_TMUX_SOCKET"] = socket
    tmux.respawn(pane, argv, cwd=str(c.root), env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if lp.running(c):
            render.out(
                f"loop for campaign {c.id} runs in tmux pane {pane} (window campaign-loop of {wave.name})"
            )
            return
        time.sleep(0.1)
    screen = " | ".join(ln for ln in tmux.capture(pane, history=True) if ln.strip())[-400:]
    raise errors.FleetError(f"the loop did not start in pane {pane}: {screen or 'no output'}")


def _control(op: str, campaign: str | None, repo: Path | None) -> None:
    from fleet.campaign import loop as lp

    c = _campaign(repo, campaign)  # STATE.md is not read here: a broken one must not lock the operator out
    try:
        answer = lp.send(c, {"op": op}, timeout=lp.CONTROL_TIMEOUT)
    except TimeoutError:
        # the loop is there but busy (starting a session): it still applies the command when it
        # is free, so editing STATE.md behind its back here would race it
        raise errors.FleetError(
            f"the loop of campaign {c.id} did not answer `{op}` within {lp.CONTROL_TIMEOUT:g} s (it may"
            " be starting a session): it may still apply it when it is free, so check `fleet campaign"
            " status` before you repeat it (STATE.md was not edited here)"
        ) from None
    except (FileNotFoundError, ConnectionRefusedError):  # no loop listens: edit STATE.md ourselves
        if op == "next":
            raise errors.UsageError(
                f"no loop runs for campaign {c.id}: `next` spawns through the loop; start it with"
                " `fleet campaign run` (it arms) or resume one"
            ) from None
        msg = lp.offline(c, op)
        render.out(msg + (" (no loop runs: `fleet campaign run` starts it)" if op == "resume" else ""))
        return
    except OSError as exc:  # the loop went away mid-command: what it did is on disk
        raise errors.FleetError(
            f"the loop of campaign {c.id} broke off `{op}` ({exc}): check `fleet campaign status`"
        ) from None
    if not answer.get("ok"):
        raise errors.from_kind(str(answer.get("kind", "error")), str(answer.get("error", "the loop refused")))
    render.out(str(answer.get("message", "ok")))


def _make_control(op: str, doc: str) -> None:
    def command(campaign: CampaignOpt = None, repo: RepoOpt = None) -> None:
        _control(op, campaign, repo)

    command.__doc__ = doc
    app.command(op)(command)


for _op, _doc in (
    ("pause", "Spawn nothing new; the active session carries on."),
    ("resume", "Arm the loop again (and spawn per the state)."),
    ("next", "Spawn the next session now, armed or not."),
    ("interrupt", "End the active session and mark the wave cancelled (no spawn until `clear`)."),
    ("clear", 'Clear a cancelled wave back to pending ("try again").'),
    ("dismiss", "Dismiss the open user question: the wave is cancelled and the loop stops."),
    ("stop", "Stop the loop: disarm it and end its process (an active session carries on)."),
):
    _make_control(_op, _doc)


@app.command("settled", hidden=True)
def settled(
    loop_dir: Annotated[Path, typer.Option("--loop-dir", help="The campaign's .loop directory.")],
) -> None:
    """The Stop hook of campaign sessions: report that the session's turn ended (reads the hook's stdin)."""
    import json

    from fleet.campaign import loop as lp

    try:
        data = json.loads(sys.stdin.read() or "{}")
    except ValueError:
        data = {}
    payload = {k: data.get(k, "") for k in ("session_id", "transcript_path", "hook_event_name")}
    payload["at"] = time.time()
    lp.report_settle(loop_dir, payload)


def register(root: typer.Typer) -> None:
    root.add_typer(app)
