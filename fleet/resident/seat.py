"""``fleet resident start|stop|status``: the wave's one mind, seated, stopped and looked at.

What a caller may rely on (docs/resident.md):

- :func:`start` checks everything it can before it changes anything: the git repository, GOAL.md
  (a bad frontmatter or cron is a :class:`~fleet.resident.goal.GoalError` naming the line), the
  agent profile, the seat. **One brain per wave**: an open seat whose process is alive (pid probe on
  this host, presence elsewhere) is a Conflict naming it unless ``force`` takes over (the old pane
  is killed, the store closes its seat as taken over); an open seat whose process is gone is closed
  (``dead: …``) and the start goes on.
- The resident is the participant ``resident`` on the wave's root wavelet, a Claude Code or Codex
  session in the wave's tmux session, in its own window, run in ``<repo>.<wave>``; its profile is
  (:func:`mind_profile`) an agent kind's name (``claude``, ``codex``: the default layout's
  ``resident`` profile run by that CLI) or the ``resident`` profile of a layout (``--agent``, else
  GOAL.md's ``mind:``, else fleet's default),
  written with the worktree as its cwd to the wave's resident state dir (0600: it holds the env);
  its operating prompt (GOAL.md, MEMORY.md and the discipline) is rendered there too and appended
  to its system prompt. A recorded session is resumed (``--resume``): the same mind comes back.
- :func:`status` reads the seat from the store, the pane from tmux, and the mind's state from its
  session's own record (Claude Code's transcript, Codex's rollout): ``none`` (no open seat),
  ``failed`` (its process is gone, or its last three turns failed), ``turning`` or ``idle``; turns
  completed, workers in flight, uptime, who supervises the wave (the daemon's lease; none: the note
  says heartbeats, crons and revival need one), and what a mind of its kind cannot do that a Claude
  Code mind does (``limits``, in the note too: never a silent "ready"). :func:`start` checks the
  mind's agent is on PATH before it makes anything.
- :class:`WorkerFold` is the worker fold, exact at any size: fed the supervisor's pages, or read
  from the wave's start in pages (:func:`workers`).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, Field

from fleet import errors
from fleet.agents import kind_of, named
from fleet.client import Client
from fleet.layouts import DEFAULT_LAYOUT, Layout, ResolvedProfile
from fleet.layouts import load as load_layout
from fleet.models import Blip, NewSeat, PresenceReport, Seat, SessionRecord, Wave
from fleet.paths import Paths, write_private
from fleet.procs import zombie_status
from fleet.resident import RESIDENT, WINDOW_TAG, goal, prompt_path, repo, state_dir
from fleet.resident.memory import read as read_memory
from fleet.resident.mind import Mind, MindFold
from fleet.spawn import PaneReport, Spawner, agent_words, require_agent
from fleet.supervise import AgentField, agent_state, row_text, supervised_by
from fleet.tmux import PaneInfo, Tmux

MindState = Literal[
    "starting", "idle", "turning", "permission", "dialog", "failed", "dead", "unknown", "none"
]
"""The mind's :class:`~fleet.models.AgentState` kind (what ``fleet status`` says of its session), or
``none``: the wave has no resident."""
FAILED_TURNS = 3
"""Consecutive failed turns after which the mind is failed (and its process is ended)."""

DISCIPLINE = """\
You are this wave's resident: its one long-lived mind. You orchestrate; you do not grind.
- Heavy work is dispatched to workers: fork a wavelet for it with wavelet_fork, passing `spawn` (a
  layout name) to start its workers, and a task they can finish. They report back with
  wavelet_surface, a blip naming you or one starting with "DONE:"; that wakes you (their other talk
  waits for it, as a digest).
- Lines typed into your terminal that start with "[fleet]" come from fleet's scheduler (a heartbeat
  while workers run, a cron falling due): act on them as the wave's mind, dispatching what is due.
- Report to the operator in the wave's main wavelet when a job is done.
- MEMORY.md below is the wave's memory; `fleet memory add|update` edits it.
"""


class Worker(BaseModel):
    """One wavelet the resident forked for work, as its fold shows it."""

    wavelet: str
    status: Literal["running", "done"]
    last_blip: str = ""
    age_seconds: float = 0.0
    """Since its last blip (or since it was forked)."""


class ResidentStatus(BaseModel):
    """``fleet resident status WAVE --json``."""

    wave: str
    state: MindState
    agent: AgentField | None = None
    """The mind's session state, the same that ``fleet status`` shows (None: no resident)."""
    state_text: str = ""
    participant: str = RESIDENT
    kind: str | None = None
    """The mind's agent kind (``claude``, ``codex``, …; None: no resident, or its layout is gone)."""
    limits: list[str] = Field(default_factory=list)
    """What this mind cannot do that a Claude Code mind does (its kind's, as spawn and ``fleet status``
    say them for any agent, then the resident's own); empty for Claude Code."""
    session_id: str | None = None
    host: str | None = None
    pid: int | None = None
    pane_id: str | None = None
    cwd: str | None = None
    since: str | None = None
    uptime_seconds: float | None = None
    turns: int | None = 0
    """Turns completed by the session (its whole transcript); None when its transcript is not
    readable here (another machine: ``note`` says so)."""
    failed_turns: int | None = 0
    """Consecutive failed turns at the end of the transcript."""
    last_error: str = ""
    workers: list[Worker] = Field(default_factory=list)
    in_flight: int = 0
    closed_why: str = ""
    supervisor: str | None = None
    """``pid N on HOST`` of the ``fleet supervise`` keeping the wave (its lease in the daemon); None:
    none runs, so no heartbeat, cron or revival happens (``note`` says how to start one)."""
    note: str = ""


class StartReport(BaseModel):
    wave: str
    session_id: str
    pane_id: str
    pid: int
    worktree: str
    layout: str
    resumed: bool
    closed: str = ""
    """What happened to a previous seat ('' when there was none)."""
    pane: PaneReport
    kind: str = ""
    """The mind's agent kind (``claude``, ``codex``, …)."""
    limits: list[str] = Field(default_factory=list)
    """What this mind cannot do that a Claude Code mind does (as ``status`` says it)."""
    supervisor: str | None = None
    """``pid N on HOST`` of the ``fleet supervise`` keeping the wave; None: none runs."""
    supervise_window: str | None = None
    """The tmux window ``--supervise`` started it in (None: it did not)."""


# ---------------------------------------------------------------- probes


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs on this machine (a zombie does not count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return zombie_status(pid) is None


def resident_pane(tmux: Tmux, wave_id: str) -> PaneInfo | None:
    """The resident's pane in the wave's tmux session (a live one first)."""
    mine = [p for p in tmux.fleet_panes(wave_id) if p.participant == RESIDENT]
    return next((p for p in mine if p.alive), None) or (mine[0] if mine else None)


def seat_alive(client: Client, tmux: Tmux, seat: Seat) -> bool:
    """An open seat's process is alive: by pid (and its pane) on this host, by presence elsewhere."""
    if seat.host == socket.gethostname():
        if not pid_alive(seat.pid):
            return False
        pane = resident_pane(tmux, seat.wave_id)
        return pane is None or pane.alive  # a pane on another tmux server: the pid speaks
    rows = [p for p in client.presence(seat.wave_id) if p.participant == seat.participant]
    return bool(rows) and rows[0].state != "gone"


# ---------------------------------------------------------------- start


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    return "[" + ", ".join(_toml(v) for v in value) + "]"


def resident_profile(layout: Layout) -> ResolvedProfile:
    """``layout``'s ``resident`` profile; unless it names an ``attention`` (for the resident or in
    its defaults), the resident's own: full on the wave's root wavelet, targeted on its workers'
    wavelets with their ``DONE:`` reports in full (:mod:`fleet.delivery.rules`)."""
    profile = layout.profile(RESIDENT)
    own = layout.participants.get(RESIDENT)
    if (own is None or own.attention is None) and layout.defaults.attention is None:
        profile = profile.model_copy(update={"attention": "resident"})
    return profile


def mind_profile(ref: str, paths: Paths) -> ResolvedProfile:
    """The resident's profile for ``mind:`` (or ``--agent``) ``ref``: an agent kind's name (``claude``,
    ``codex``: :func:`fleet.agents.named`) is the default layout's ``resident`` profile run by that
    CLI — as it is when its agent is that CLI already, else with ``agent`` the word and the model,
    args and permission mode (another kind's) dropped; any other
    word is a layout (name or ``.toml`` file) whose ``resident`` profile it is."""
    kind = named(ref)
    if kind is None:
        return resident_profile(load_layout(ref, paths))
    profile = resident_profile(load_layout(DEFAULT_LAYOUT, paths))
    if kind_of(agent_words(profile.agent)) is kind:
        return profile  # (its own command for that CLI kept: a path, a wrapper's words)
    return profile.model_copy(update={"agent": ref, "model": None, "args": [], "permission_mode": None})


def write_layout(path: Path, profile: ResolvedProfile, cwd: Path) -> None:
    """The resident's own layout: ``profile`` with the worktree as its cwd (0600: it holds env)."""
    data = profile.model_dump(exclude_none=True)
    data["cwd"] = str(cwd)
    lines = ['description = "the wave\'s resident (written by fleet resident start)"', "[defaults]"]
    lines += [f"{k} = {_toml(v)}" for k, v in data.items() if v not in ([], {})]
    write_private(path, "\n".join(lines) + "\n")


def render_prompt(g: goal.Goal, memory: str, wave: str) -> str:
    parts = [
        f"# The resident of wave {wave}\n",
        DISCIPLINE,
        "## GOAL.md\n",
        g.body or "(no goal written yet)",
    ]
    parts += ["\n## MEMORY.md\n", memory.strip() or "(empty)"]
    return "\n".join(parts) + "\n"


def _wave(client: Client, ref: str) -> Wave:
    try:
        return client.get_wave(ref)
    except errors.NotFound:
        client.create_wave(ref, [RESIDENT])
        return client.get_wave(ref)


def _require_agent(spawner: Spawner, profile: ResolvedProfile, recorded: list[SessionRecord]) -> None:
    """The agent the mind would run (a resumed session's recorded one) is on PATH: checked before
    start makes anything (a wave, a worktree, a roster entry, a window). ToolMissing (exit 6)."""
    rec = recorded[0] if recorded else None
    require_agent(agent_words(spawner.agent or (rec.agent if rec and rec.agent else profile.agent)))


def _pane_for(tmux: Tmux, wave: Wave) -> str:
    """A pane for the resident: its old one (dead) if any, else a new window of its own."""
    old = resident_pane(tmux, wave.id)
    if old is not None:
        return old.pane_id
    session = tmux.find_session(wave.id)
    if session is None:
        _s, _w, pane = tmux.new_session(wave.id, wave.name, RESIDENT, WINDOW_TAG)
        return pane
    _w, pane = tmux.new_window(session, wave.id, RESIDENT, WINDOW_TAG)
    return pane


def start(
    client: Client,
    spawner: Spawner,
    paths: Paths,
    wave_ref: str,
    *,
    agent: str | None = None,
    force: bool = False,
    cwd: Path | None = None,
) -> StartReport:
    """Seat the wave's resident (see the module docstring). ``spawner`` launches it (its tmux is
    where the window goes); ``cwd``: where to look for the repository (default: this process's)."""
    tmux = spawner.tmux
    origin = repo.origin(cwd or Path.cwd())
    folder = repo.wave_dir(origin, wave_ref)
    g = goal.load(folder / "GOAL.md")
    memory_path = folder / "MEMORY.md"  # read before anything is made: one that cannot be is named first
    memory = read_memory(memory_path) if memory_path.is_file() else ""
    layout_ref = agent or g.mind or DEFAULT_LAYOUT
    profile = mind_profile(layout_ref, paths)
    try:
        known: Wave | None = client.get_wave(wave_ref)
    except errors.NotFound:
        known = None
    _require_agent(spawner, profile, client.sessions(known.id, RESIDENT) if known else [])
    wave = known or _wave(client, wave_ref)
    closed = ""
    seat = client.seat(wave.id)
    if seat is not None and seat.closed_at is None:
        if seat_alive(client, tmux, seat):
            if not force:
                raise errors.Conflict(
                    f"wave {wave.name!r} already has a live resident: session {seat.session_id}, pid"
                    f" {seat.pid} on {seat.host}, pane {seat.pane_id or '?'}, since {seat.claimed_at}:"
                    f" `fleet resident stop {wave.name}` first, or take over with --force"
                )
            pane = resident_pane(tmux, wave.id)
            if pane is not None and pane.alive:
                tmux.kill_pane(pane.pane_id)
            closed = f"took over from session {seat.session_id} (pid {seat.pid} on {seat.host})"
        else:
            why = f"dead: pid {seat.pid} on {seat.host} is gone (closed at the next start)"
            client.close_seat(wave.id, why, session_id=seat.session_id)
            closed = f"closed the dead seat of session {seat.session_id} ({why})"
    root = next(wl for wl in wave.wavelets if wl.id == wave.root_id)
    if not any(m.name == RESIDENT for m in root.roster):
        client.invite(root.id, RESIDENT)
        root = client.get_wavelet(root.id)
    worktree = repo.worktree(origin, wave.name)
    here = state_dir(paths, wave.id)
    layout_file = here / "layout.toml"
    write_layout(layout_file, profile, worktree)
    write_private(prompt_path(paths, wave.id), render_prompt(g, memory, wave.name))
    write_private(here / "origin", str(origin) + "\n")
    layout = load_layout(str(layout_file), paths)
    recorded = client.sessions(wave.id, RESIDENT)
    made = resident_pane(tmux, wave.id) is None
    pane_id = _pane_for(tmux, wave)
    try:
        report = spawner.launch(pane_id, wave, root, layout, RESIDENT, resume=bool(recorded))
    except errors.FleetError:
        if made:
            tmux.kill_pane(pane_id)  # the window this start made goes with it
        raise
    if not report.ready:
        raise errors.FleetError(
            f"the resident did not start: {report.why} (its pane is {pane_id}: `fleet attach {wave.name}`)"
        )
    pane = next((p for p in tmux.panes() if p.pane_id == pane_id), None)
    pid = pane.pid if pane and pane.pid else 0
    mind = mind_of(paths, wave)
    try:
        client.claim_seat(
            wave.id,
            NewSeat(
                participant=RESIDENT, session_id=report.session_id, host=socket.gethostname(),
                pid=pid, pane_id=pane_id, cwd=str(worktree), force=force,
            ),
        )  # fmt: skip
    except errors.Conflict:
        tmux.kill_pane(pane_id)  # somebody seated another mind meanwhile: this one goes
        raise
    client.post_system(
        root.id,
        f"resident: seated session {report.session_id} (pid {pid} on {socket.gethostname()}) in {worktree}"
        + (f"; {closed}" if closed else ""),
    )
    return StartReport(
        wave=wave.name, session_id=report.session_id, pane_id=pane_id, pid=pid, worktree=str(worktree),
        layout=layout_ref, resumed=report.action == "respawned", closed=closed, pane=report,
        kind=mind.kind.name, limits=[*mind.kind.limits, *mind.kind.mind_limits],
        supervisor=supervised_by(client, wave.id),
    )  # fmt: skip


def unsupervised(wave: str) -> str:
    """What ``resident start`` and ``status`` say when no ``fleet supervise`` keeps the wave."""
    return (
        f"no `fleet supervise {wave}` runs: heartbeats, crons and revival need one; run it (another"
        f" terminal, a service), or `fleet resident start {wave} --supervise` starts one in a tmux window"
    )


SUPERVISE_WINDOW = "supervise"
"""The tmux window ``resident start --supervise`` runs ``fleet supervise`` in (in the wave's
session); also its ``@fleet_wavelet`` tag, which names no wavelet (as the resident's own window's)."""
SUPERVISE_WAIT = 30.0
"""Seconds ``--supervise`` waits for the supervisor it started to hold the wave's lease."""


def supervise_in_window(client: Client, tmux: Tmux, paths: Paths, wave: Wave) -> tuple[str, str]:
    """Start ``fleet supervise WAVE`` in a window of the wave's tmux session, unless one keeps the
    wave already; returns (``pid N on HOST`` of the one keeping it, the window's id or ''). The new
    one talks to this daemon with this process's token (a 0600 file in the wave's resident state
    dir, named by ``FLEET_TOKEN_FILE``: no secret on a command line). Its window stays when it
    exits (a refusal is readable there); a dead one is replaced. FleetError if it does not hold the
    lease within :data:`SUPERVISE_WAIT` s, naming the window to look at."""
    held = supervised_by(client, wave.id)
    if held is not None:
        return held, ""
    session = tmux.find_session(wave.id)
    if session is None:
        raise errors.FleetError(f"wave {wave.name!r} has no tmux session to start `fleet supervise` in")
    old = tmux.find_window(session, SUPERVISE_WINDOW)
    if old is not None:
        tmux.kill_window(old)  # it holds no lease (dead, or stuck): its successor takes the name
    token = state_dir(paths, wave.id) / "supervise.token"
    write_private(token, client.token + "\n")
    env = {"FLEET_DAEMON": client.base_url, "FLEET_TOKEN_FILE": str(token)}
    if os.environ.get("FLEET_HOME"):
        env["FLEET_HOME"] = os.environ["FLEET_HOME"]
    where = tmux.srv.socket_path or tmux.srv.socket_name
    if where:
        env["FLEET_TMUX_SOCKET"] = str(where)
    # a placeholder first, then the command: the window stays when it exits (a refusal is readable)
    window, pane = tmux.new_window(session, wave.id, SUPERVISE_WINDOW, SUPERVISE_WINDOW)
    tmux.srv.cmd("set-option", "-p", "-t", pane, "remain-on-exit", "on")
    tmux.respawn(pane, [sys.executable, "-m", "fleet", "supervise", wave.name], env=env)
    deadline = time.monotonic() + SUPERVISE_WAIT
    while (held := supervised_by(client, wave.id)) is None:
        if time.monotonic() > deadline:
            raise errors.FleetError(
                f"`fleet supervise {wave.name}` started in tmux window {window} ({SUPERVISE_WINDOW}) but"
                f" holds no lease after {SUPERVISE_WAIT:g}s: look at that window (`fleet attach {wave.name}`)"
            )
        time.sleep(0.1)
    return held, window


def reseat(client: Client, tmux: Tmux, wave: Wave, report: PaneReport) -> None:
    """After a revival (``fleet supervise``): the seat follows the new process of the same session;
    a new session is recorded as an explicit break."""
    seat = client.seat(wave.id)
    if seat is None or seat.closed_at is not None:
        return
    pane = next((p for p in tmux.panes() if p.pane_id == report.pane_id), None)
    pid = pane.pid if pane and pane.pid else seat.pid
    new = report.session_id != seat.session_id
    client.claim_seat(
        wave.id,
        NewSeat(
            participant=RESIDENT, session_id=report.session_id, host=socket.gethostname(), pid=pid,
            pane_id=report.pane_id, cwd=seat.cwd, force=new,
        ),
    )  # fmt: skip
    if new:
        client.post_system(
            wave.root_id,
            f"resident: a new session {report.session_id} replaces {seat.session_id}: the mind's"
            " conversation starts again (an explicit break)",
        )


# ---------------------------------------------------------------- stop


class StopReport(BaseModel):
    wave: str
    stopped: bool
    session_id: str | None = None
    pane_id: str | None = None
    note: str = ""


def stop(client: Client, tmux: Tmux, wave_ref: str) -> StopReport:
    """Close the seat and end the resident's process (its session stays recorded: a later start
    resumes it). Idempotent: with no open seat, nothing is done and the report says so."""
    wave = client.get_wave(wave_ref)
    seat = client.seat(wave.id)
    pane = resident_pane(tmux, wave.id)
    if seat is None or seat.closed_at is not None:
        if pane is not None:
            tmux.kill_pane(pane.pane_id)
        return StopReport(wave=wave.name, stopped=False, note="no resident is seated")
    client.close_seat(wave.id, "stopped by the operator", session_id=seat.session_id)
    if pane is not None:
        tmux.kill_pane(pane.pane_id)
    elif seat.host == socket.gethostname() and pid_alive(seat.pid):
        with contextlib.suppress(OSError):
            os.kill(seat.pid, 15)
    client.report_presence(wave.id, PresenceReport(participant=RESIDENT, event="gone"))
    client.post_system(wave.root_id, f"resident: stopped by the operator (session {seat.session_id})")
    return StopReport(wave=wave.name, stopped=True, session_id=seat.session_id, pane_id=seat.pane_id)


# ---------------------------------------------------------------- status


class _Last(NamedTuple):
    author: str
    text: str
    created_at: str


class WorkerFold:
    """Which wavelets the resident forked still run, folded from the wave's blips as they come.

    What a caller may rely on: fed every page of the wave's stream (:meth:`feed`, each with the
    cursor it was read after, as ``fleet supervise`` reads them), :meth:`workers` is exactly what a
    read of the whole wave would say, at any size, and costs nothing more to ask. A page read after
    an id the fold has not reached (a gap) is not folded: :attr:`complete` turns False and
    :func:`workers` reads the wave from :attr:`cursor` before it answers. Overlapping pages are
    fine (a blip at or below the cursor is skipped). It keeps one entry per wavelet, not the blips.

    The rule (docs/resident.md): a worker is ``running`` until a ``surface`` from its wavelet lands
    anywhere, or a blip in it not by the resident starts with ``DONE:``; its last blip is its
    wavelet's newest blip that is not ``system`` (replaced versions included, as the stream has them).
    """

    def __init__(self) -> None:
        self.cursor = ""
        """The greatest blip id folded ("" before any)."""
        self.complete = False
        """The fold is as far as the last page it was fed (or read): False before any, and after a
        gap. Either way it is the exact fold of the wave up to :attr:`cursor`: it only ever moves on
        by a page that starts at or before it."""
        self._last: dict[str, _Last] = {}
        self._done: set[str] = set()

    def feed(self, blips: Iterable[Blip], after: str) -> None:
        """Fold one page: ``blips`` as read after the id ``after``, oldest first."""
        if after > self.cursor:
            self.complete = False  # a gap: what lies between is not folded; read() fills it in
            return
        self.complete = True
        for b in blips:
            if b.id <= self.cursor:
                continue
            self.cursor = b.id
            if b.kind == "surface" and b.source_wavelet_id:
                self._done.add(b.source_wavelet_id)
            if b.kind == "system":
                continue
            self._last[b.wavelet_id] = _Last(b.author, b.text[:120], b.created_at)
            if b.author != RESIDENT and b.text.startswith("DONE:"):
                self._done.add(b.wavelet_id)

    def read(self, client: Client, wave_id: str) -> None:
        """Read and fold the wave from :attr:`cursor` to its end, in the largest pages the daemon
        gives; afterwards :attr:`complete` is True."""
        while True:
            after = self.cursor
            page = client.read_wave(wave_id, after=after, limit=READ_PAGE)
            self.feed(page.blips, after=after)
            self.complete = True
            if len(page.blips) < READ_PAGE:
                return

    def workers(self, wave: Wave, now: float | None = None) -> list[Worker]:
        """The resident's workers in ``wave`` (its wavelets, as the store has them now), as folded."""
        now = time.time() if now is None else now
        out = []
        for wl in wave.wavelets:
            if wl.created_by != RESIDENT or wl.id == wave.root_id:
                continue
            last = self._last.get(wl.id)
            out.append(
                Worker(
                    wavelet=wl.path,
                    status="done" if wl.id in self._done else "running",
                    last_blip=f"{last.author}: {last.text}" if last else "",
                    age_seconds=max(0.0, now - _ts(last.created_at if last else wl.created_at)),
                )
            )
        return out


READ_PAGE = 5000
"""Blips a page of :meth:`WorkerFold.read` asks for (the daemon's largest page)."""


def workers(
    client: Client, wave: Wave, fold: WorkerFold | None = None, now: float | None = None
) -> list[Worker]:
    """The wavelets the resident forked, each ``running`` until it surfaces or posts ``DONE:``
    (:class:`WorkerFold`). ``fold``: one kept up by its caller, read on from where it stands when it
    is not complete; without one, the whole wave is read in pages from the start. A wave whose
    resident forked nothing is not read at all."""
    if not any(wl.created_by == RESIDENT and wl.id != wave.root_id for wl in wave.wavelets):
        return []
    fold = fold if fold is not None else WorkerFold()
    if not fold.complete:
        fold.read(client, wave.id)
    return fold.workers(wave, now)


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(UTC).timestamp()


def status(
    client: Client, tmux: Tmux, paths: Paths, wave_ref: str, env: Mapping[str, str] | None = None
) -> ResidentStatus:
    wave = client.get_wave(wave_ref)
    seat = client.seat(wave.id)
    if seat is None or seat.closed_at is not None:
        return ResidentStatus(
            wave=wave.name,
            state="none",
            session_id=seat.session_id if seat else None,
            closed_why=seat.closed_why if seat else "",
            note=f"no resident: `fleet resident start {wave.name}`",
        )
    mind: Mind | None
    try:
        mind = mind_of(paths, wave, env)
    except errors.CorruptState as exc:
        mind, unknown = None, exc.message
    if mind is not None:
        reader = mind.reader(seat.session_id)
        fold = reader.read()
        # no file yet where the mind runs: it has had no turn (Claude Code writes it with the first
        # message); on another machine, nothing here says anything of its turns
        readable = not reader.problem or (
            reader.record is not None and reader.path is None and seat.host == socket.gethostname()
        )
        unknown = reader.problem
    else:
        fold, readable = MindFold(), False  # nothing read: turns and failures are unknown
    alive = seat_alive(client, tmux, seat)
    # the state is the one `fleet status` shows (the channel's report, a dead pane seen here): the
    # two never disagree; the transcript here adds the counts
    pane = next((p for p in tmux.panes() if p.pane_id == seat.pane_id), None) if seat.pane_id else None
    seen = next((p for p in client.presence(wave.id) if p.participant == RESIDENT), None)
    record = next((r for r in client.sessions(wave.id) if r.participant == RESIDENT), None)
    agent = agent_state(tmux, pane, seen, record)
    failed = fold.failed_since(_ts(seat.claimed_at)) if readable else None
    ws = workers(client, wave)
    supervisor = supervised_by(client, wave.id)
    notes = []
    if supervisor is None:
        notes.append(unsupervised(wave.name))
    if not alive:
        notes.append("its process is gone: `fleet supervise` revives it (an operator blip does at once)")
    if failed is not None and failed >= FAILED_TURNS:
        notes.append(f"its last {failed} turns failed: {fold.last_error}")
    if not readable:
        notes.append(f"turns unknown: {unknown}")
    kind = mind.kind if mind is not None else None
    limits = [*kind.limits, *kind.mind_limits] if kind is not None else []
    if kind is not None and limits:
        notes.append(f"a {kind.name} mind: " + "; ".join(limits))
    return ResidentStatus(
        wave=wave.name, state=agent.kind, agent=agent, state_text=row_text(agent, "", time.time()),
        kind=kind.name if kind is not None else None, limits=limits,
        session_id=seat.session_id, host=seat.host, pid=seat.pid,
        pane_id=seat.pane_id, cwd=seat.cwd, since=seat.claimed_at,
        uptime_seconds=max(0.0, time.time() - _ts(seat.claimed_at)) if alive else None,
        turns=fold.turns if readable else None, failed_turns=failed,
        last_error=fold.last_error if readable else "", workers=ws,
        in_flight=sum(w.status == "running" for w in ws), supervisor=supervisor, note="; ".join(notes),
    )  # fmt: skip


def mind_of(paths: Paths, wave: Wave, env: Mapping[str, str] | None = None) -> Mind:
    """The agent the wave's resident runs (:class:`~fleet.resident.mind.Mind`), from the layout its
    start wrote (the profile every respawn runs); without one (a resident started on another
    machine), Claude Code in this environment.

    Raises CorruptState for a layout that is there but does not load (edited by hand): what the mind
    is, and so how its turns are read, cannot be told — never guessed."""
    base = dict(env if env is not None else os.environ)
    file = state_dir(paths, wave.id) / "layout.toml"
    if not file.exists():
        return Mind.of("claude", base, paths)
    try:
        profile = load_layout(str(file), paths).profile(RESIDENT)
    except errors.FleetError as exc:
        raise errors.CorruptState(
            f"the resident's layout {file} does not load ({exc.message}): which agent the mind is"
            f" cannot be told; `fleet resident start {wave.name} --force` writes it again"
        ) from None
    return Mind.of(profile.agent, {**base, **profile.env}, paths)
