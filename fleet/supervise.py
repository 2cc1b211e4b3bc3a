"""Supervision: who in a wave is working, idle or dead; bringing the dead back; tearing panes down.

fleet leaves process lifetime to tmux (docs/design.md §6). Everything here *asks* tmux and the daemon and
owns no process. What a caller may rely on:

- :func:`status` gives one :class:`StatusRow` per (wavelet, participant): every agent on a wavelet's
  roster, plus anyone whose pane lives in the wavelet's window but who left its roster (noted
  ``left: receives nothing``); rows of agents that wait on the operator (a permission, a dialog) or
  failed come first. Pane facts (id, alive or dead, exit status) come from tmux; what the agent
  does (``state``, one per session: :mod:`fleet.agentstate`) is what its channel reported to the
  daemon from the session's own transcript and hooks, except that a dead pane seen here is
  ``dead`` with its exit status and last lines, a permission request the store holds pending for
  it (:mod:`fleet.permissions`: its PermissionRequest hook recorded it) is ``permission`` with the
  tool and its input, and a live pane showing one of Claude Code's dialogs is ``dialog`` with its
  first line (the one fact read from a screen, :func:`fleet.dialogs.pane_dialog`; its window's
  ``@fleet_waiting`` flag follows what status saw); whether the channel is heard (``presence``:
  ``live`` / ``gone``) and blips delivered come from the daemon, never from a screen; the last
  blip from the store; the session id from the recorded session. **Cap use** lives only in the
  channel's delivery state file, which the daemon never sees: it is read when that file is on this
  machine (the channel runs here, against the same daemon URL), and is ``None`` otherwise.
- :func:`respawn` relaunches one participant with ``--resume`` of its recorded session (through
  :meth:`fleet.spawn.Spawner.respawn`), from any machine: everything it needs comes from the daemon.
  Its channel resumes from its saved cursors, so delivery picks up with no gap and no repeat.
- :class:`Supervisor` is ``fleet supervise``: a dead pane is respawned on a :class:`Ladder` (5 m,
  15 m, 45 m, the last rung repeating; back to the first once the participant posts again); an
  operator blip that mentions a dead participant respawns it at once. One per wave: it holds the
  wave's :class:`Lease` in the daemon, and stops acting once another takes it over. Each act is
  posted into the transcript as a ``system`` blip. A participant with no pane at all (killed,
  window closed) or on no roster is left alone: that was somebody's decision. Each round also runs
  the watchers it was given (:class:`fleet.seams.Watcher`: the resident's keeper; the wave's summary
  writer, which new blips poke in its own thread).
- :func:`kill` kills a wavelet's window or a wave's session, reports the participants in it
  ``gone``, and keeps every record: ``fleet spawn`` later resumes the same sessions.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, Field, PlainSerializer, PlainValidator

from fleet import agentstate, dialogs, errors
from fleet.agents import Kind, agent_words, kind_of
from fleet.client import Client
from fleet.delivery.rules import DEFAULT_CAP, mentions
from fleet.delivery.state import DeliveryState, StateFile, read_unlocked
from fleet.ids import request_key
from fleet.models import (
    OPERATOR,
    AgentState,
    PresenceReport,
    PresenceRow,
    PresenceState,
    SessionRecord,
    SupervisorClaim,
    SupervisorLease,
    Wave,
    Wavelet,
)
from fleet.paths import Paths
from fleet.procs import group_running, pid_alive, zombie_status
from fleet.records.permissions import PermissionRequest
from fleet.records.usage import Figures
from fleet.records.worktrees import Kept
from fleet.seams import StatusRead, status_columns
from fleet.spawn import PaneReport, Spawner
from fleet.tmux import PaneInfo, Tmux
from fleet.wire import RecordError, dump, load

if TYPE_CHECKING:
    from fleet.seams import Watcher

log = logging.getLogger(__name__)

LADDER: tuple[float, ...] = (300.0, 900.0, 2700.0)
"""Seconds a dead pane waits before each respawn: 5 m, 15 m, 45 m; the last rung repeats."""

TICK = 5.0
"""Seconds between looks at tmux when no blip arrives (a blip wakes the loop at once)."""

PaneState = Literal["alive", "dead", "none"]


def _agent(value: Any) -> AgentState:
    return value if isinstance(value, AgentState) else load(AgentState, value)


AgentField = Annotated[AgentState, PlainValidator(_agent), PlainSerializer(dump, return_type=dict)]
"""An :class:`~fleet.models.AgentState` (a wire record) inside these pydantic reports."""


# ---------------------------------------------------------------- status


class StatusRow(BaseModel):
    """One (wavelet, participant) of ``fleet status``."""

    wavelet: str
    """``WAVE/WAVELET``."""
    wavelet_id: str
    participant: str
    member: bool
    """On the wavelet's roster now. False: it left, but its pane still lives in this window."""
    pane_id: str | None = None
    """The participant's pane (one per participant per wave; it may live in another window)."""
    pane: PaneState = "none"
    exit: str | None = None
    """For a dead pane: ``status N``, ``signal N`` or ``unknown``."""
    pane_wavelet: str | None = None
    """``WAVE/WAVELET`` whose window holds the pane."""
    presence: PresenceState = "gone"
    """Whether its channel is heard by the daemon."""
    state: AgentField = Field(default_factory=lambda: agentstate.unknown("not known"))
    """What its session does (the same on every row of the participant: one state per session)."""
    state_text: str = ""
    """``state`` in words, as this row shows it (a turn woken in another wavelet says so)."""
    last_blip_at: str | None = None
    """When the participant last wrote in this wavelet (ISO 8601), from the store."""
    blips: int = 0
    """Blips it wrote in this wavelet."""
    delivered: int = 0
    """Blips its channel reported delivered in the whole wave since the daemon started."""
    last_delivery: float | None = None
    """Unix time of its channel's last delivery report (daemon clock)."""
    cap_used: int | None = None
    """Pushes in this wavelet since the cap last reset; None when the state file is not on this machine."""
    cap: int | None = None
    """The cap its deliverer runs with (0: none), as the state file records it (else the layout of its
    recorded spawn); None when neither tells."""
    capped: bool = False
    """The cap was reached here: further blips are not pushed until the operator posts here."""
    route: str | None = None
    """What wakes the session, as its delivery state tells (``channel``, ``hook``, ``unconfirmed``,
    ``unknown``); None when the state file is not on this machine."""
    route_why: str = ""
    unconfirmed: int | None = None
    """Frames handed out that the session's transcript does not yet show in its model's context."""
    oldest_unconfirmed: float | None = None
    """Age in seconds of the oldest of those."""
    receipts_problem: str = ""
    """Why receipts cannot be read ('' when they can, or are off)."""
    session_id: str | None = None
    """The Claude Code session id (recorded at launch; ``--resume`` uses it)."""
    host: str | None = None
    """Where its channel runs (from presence), else where it was launched."""
    worktree: str | None = None
    """The fleet git worktree its pane works in (None: none, or not on this machine)."""
    branch: str | None = None
    ahead: int | None = None
    """Commits on the worktree's branch that its base does not have."""
    dirty: bool | None = None
    """The worktree has changes not committed."""
    usage: Figures | None = None
    """Its tokens, turns and estimated cost in this wavelet (turns its blips woke), from its
    transcript on this machine; None when there is none here (``fleet usage`` says more)."""
    budget: str | None = None
    """The budget nearest to its limit of those that apply here (:mod:`fleet.budgets`), as
    ``spent/limit`` and ``held`` once it stopped deliveries; None: no budget applies."""
    note: str = ""
    agent: str | None = None
    """Its agent's kind (:mod:`fleet.agents`: ``claude``, ``codex``, ...), from its recorded session."""
    limits: list[str] = Field(default_factory=list)
    """What that kind cannot do that Claude Code does (docs/agents.md), said on every read."""


class PermissionWait(BaseModel):
    """A permission prompt a participant waits on now (:class:`fleet.permissions.PermissionRequest`)."""

    participant: str
    tool: str
    preview: str
    since: str
    """When it was asked (ISO 8601)."""
    request_id: str
    session_id: str
    expires_at: str

    @classmethod
    def of(cls, req: PermissionRequest) -> PermissionWait:
        return cls(
            participant=req.participant, tool=req.tool, preview=req.preview, since=req.asked_at,
            request_id=req.id, session_id=req.session_id, expires_at=req.expires_at,
        )  # fmt: skip


class WaveStatus(BaseModel):
    """``fleet status WAVE --json``."""

    wave: str
    wave_id: str
    tmux_session: str | None = None
    """tmux's id of the wave's session (``$0``): what scripts target."""
    tmux_session_name: str | None = None
    """Its name, for people (``fleet status`` prints it)."""
    generated_at: str
    topics: dict[str, str] = Field(default_factory=dict)
    """``WAVE/WAVELET`` -> its topic, for each wavelet the reader sees that has one, oldest first."""
    rows: list[StatusRow] = Field(default_factory=list)
    permissions: list[PermissionWait] = Field(default_factory=list)
    """The permission requests waiting now, newest first (docs/permissions.md); their participants'
    rows come first, noted ``waiting for permission: TOOL (PREVIEW)``."""
    unpriced: list[str] = Field(default_factory=list)
    """Models the sessions used that have no price: why a cost shows "?" (:mod:`fleet.usage`)."""
    prices_file: str = ""
    """The user's own price table, where a price for them is added."""


def exit_of(pane: PaneInfo) -> str | None:
    """How a dead pane's process ended, as tmux (or, for tmux 3.3a's lost SIGCHLD, /proc) tells it."""
    if not pane.dead:
        return None
    if pane.dead_status is not None:
        return f"status {pane.dead_status}"
    if pane.dead_signal is not None:
        return f"signal {pane.dead_signal}"
    zombie = zombie_status(pane.pid) if pane.pid else None
    if zombie:
        return zombie if zombie.startswith("signal") else f"status {zombie}"
    return "unknown"


def settled_exit(tmux: Tmux, pane: PaneInfo, timeout: float = 2.0) -> str | None:
    """:func:`exit_of`, after giving tmux up to ``timeout`` s to record it (it may mark a pane dead a
    moment before it records how its process ended)."""
    deadline = time.monotonic() + timeout
    while exit_of(pane) == "unknown" and time.monotonic() < deadline:
        time.sleep(0.05)
        pane = next((p for p in tmux.panes() if p.pane_id == pane.pane_id), pane)
    return exit_of(pane)


def panes_by_participant(panes: Iterable[PaneInfo]) -> dict[str, PaneInfo]:
    """Each participant's pane: a live one if any, else the first dead one."""
    out: dict[str, PaneInfo] = {}
    for p in panes:
        if p.participant not in out or (p.alive and out[p.participant].dead):
            out[p.participant] = p
    return out


def delivery_state(paths: Paths, daemon_url: str, wave: str, participant: str) -> DeliveryState | None:
    """The channel's delivery state file for (daemon, wave name, participant), if it is on this machine."""
    sf = StateFile(paths.channels, daemon_url, wave, participant)
    path = sf.path if sf.path.exists() else sf.legacy_path
    try:
        return read_unlocked(path)
    except FileNotFoundError:
        return None
    except (OSError, RecordError) as exc:
        log.debug("cannot read delivery state %s: %s", path, exc)
        return None


def _note(
    wl: Wavelet,
    name: str,
    member: bool,
    pane: PaneInfo | None,
    record: SessionRecord | None,
    rosters: set[str],
    dialog: str | None = None,
) -> str:
    if not member:
        return "left: receives nothing" if name not in rosters else "left: receives nothing from here"
    if pane is None:
        if record is None:
            return f"not spawned: `fleet spawn {wl.path}`"
        return f"no pane: `fleet spawn {wl.path}` resumes it" if record.wavelet_id == wl.id else "no pane"
    if pane.dead:
        return f"dead: `fleet respawn {wl.path} {name}`"
    return f"waiting at a dialog: {dialog}" if dialog else ""


def _cap_of(state: DeliveryState, record: SessionRecord | None, name: str, paths: Paths) -> int | None:
    """The cap the participant's deliverer runs with: as its state file records it, else (a file
    from before that) the cap the layout of its recorded spawn gave its channel, else unknown."""
    if state.cap is not None:
        return state.cap
    if record is None or not record.layout:
        return None
    from fleet.layouts import load

    try:
        cap = load(record.layout, paths).profile(name).cap
    except errors.FleetError:
        return None
    return DEFAULT_CAP if cap is None else cap  # spawn passes no --cap then: the channel's default


def render_count(n: int) -> str:
    """``950``, ``12.3k``, ``4.56M`` (as the CLI shows token counts)."""
    if n < 1000:
        return str(n)
    return f"{n / 1000:.1f}k" if n < 1_000_000 else f"{n / 1_000_000:.2f}M"


def _dialogs(tmux: Tmux, panes: Iterable[PaneInfo]) -> dict[str, str]:
    """The first line of the dialog each live pane shows, by pane id (read from its screen); each
    window's ``dialog:`` flag is set or cleared to match what was seen."""
    seen: dict[str, str] = {}
    windows: dict[str, str | None] = {}
    for p in panes:
        first = dialogs.pane_dialog(tmux, p.pane_id) if p.alive else None
        if first is not None:
            seen[p.pane_id] = first
        windows[p.window_id] = windows.get(p.window_id) or first
    for window, first in windows.items():
        dialogs.flag(tmux, window, first)
    return seen


def status(client: Client, tmux: Tmux, paths: Paths, wave_ref: str) -> WaveStatus:
    """The rows of ``fleet status`` for one wave (see the module docstring for where each fact comes from)."""
    wave = client.get_wave(wave_ref)
    records = {r.participant: r for r in client.sessions(wave.id)}
    presence: dict[str, PresenceRow] = {p.participant: p for p in client.presence(wave.id)}
    activity = {(a.wavelet_id, a.participant): a for a in client.activity(wave.id).activity}
    all_panes = tmux.fleet_panes(wave.id)
    panes = panes_by_participant(all_panes)
    path_of = {wl.id: wl.path for wl in wave.wavelets}
    rosters = {m.name for wl in wave.wavelets for m in wl.roster if m.kind == "agent"}
    states: dict[str, DeliveryState | None] = {}
    read = StatusRead(client, paths, wave, records)
    columns = [make(read) for make in status_columns]  # worktrees, usage, budgets (fleet.seams)
    rows: list[StatusRow] = []
    now = time.time()
    at_dialog = _dialogs(tmux, panes.values())
    try:
        waiting = client.permissions(wave.id, pending=True)
    except errors.NotFound:  # a daemon older than permission requests: none to show
        waiting = []
    asking: dict[str, PermissionRequest] = {}
    for req in waiting:  # newest first: each participant's newest
        asking.setdefault(req.participant, req)
    agents: dict[str, AgentState] = {}
    for wl in wave.wavelets:
        members = [m.name for m in wl.roster if m.kind == "agent"]
        left = sorted({p.participant for p in all_panes if p.wavelet == wl.id} - set(members))
        for name in members + left:
            member = name in members
            pane, record, seen = panes.get(name), records.get(name), presence.get(name)
            if name not in states:
                states[name] = delivery_state(paths, client.base_url, wave.name, name)
            state, act = states[name], activity.get((wl.id, name))
            if name not in agents:
                dialog = at_dialog.get(pane.pane_id, "") if pane else ""
                agents[name] = agent_state(tmux, pane, seen, record, dialog=dialog, asking=asking.get(name))
            agent = agents[name]
            kind = _kind_of(record)
            rows.append(
                StatusRow(
                    wavelet=wl.path,
                    wavelet_id=wl.id,
                    participant=name,
                    member=member,
                    pane_id=pane.pane_id if pane else None,
                    pane="none" if pane is None else ("dead" if pane.dead else "alive"),
                    exit=exit_of(pane) if pane else None,
                    pane_wavelet=path_of.get(pane.wavelet, pane.wavelet) if pane else None,
                    presence=seen.state if seen else "gone",
                    state=agent,
                    state_text=row_text(agent, wl.path, now),
                    last_blip_at=act.last_blip_at if act else None,
                    blips=act.blips if act else 0,
                    delivered=seen.delivered if seen else 0,
                    last_delivery=seen.last_delivery if seen else None,
                    cap_used=state.delivered.get(wl.id, 0) if state else None,
                    cap=_cap_of(state, record, name, paths) if state else None,
                    capped=bool(state and wl.id in state.exhausted),
                    route=state.route if state else None,
                    route_why=state.route_why if state else "",
                    unconfirmed=len(state.pending) if state else None,
                    oldest_unconfirmed=(
                        now - min(p.handed_at for p in state.pending) if state and state.pending else None
                    ),
                    receipts_problem=state.receipts_problem if state else "",
                    session_id=(record.session_id if record else None) or (seen.session_id if seen else None),
                    host=(seen.host if seen else None) or (record.host if record else None),
                    note=_note(
                        wl, name, member, pane, record, rosters, at_dialog.get(pane.pane_id) if pane else None
                    ),
                    agent=kind.name if kind else None,
                    limits=list(kind.limits) if kind else [],
                    **{k: v for col in columns for k, v in col.row(wl, name).items()},
                )
            )
    rows.sort(key=lambda r: not agentstate.needs_operator(r.state))  # (stable: roster order kept)
    session = tmux.wave_session(wave.id)
    return WaveStatus(
        wave=wave.name,
        wave_id=wave.id,
        tmux_session=session.session_id if session else None,
        tmux_session_name=session.name if session else None,
        generated_at=datetime.now(UTC).isoformat(),
        topics={wl.path: wl.topic for wl in wave.wavelets if wl.topic},
        rows=rows,
        permissions=[PermissionWait.of(p) for p in waiting],
        **{k: v for col in columns for k, v in col.wave().items()},
    )


DEAD_LINES = 5
"""Last lines of a dead pane's screen its state carries."""


def _kind_of(record: SessionRecord | None) -> Kind | None:
    """The kind of a recorded session's agent (None: no record, or a command that cannot be split)."""
    if record is None or not record.agent:
        return None
    try:
        return kind_of(agent_words(record.agent))
    except (errors.FleetError, ValueError):
        return None


def agent_state(
    tmux: Tmux,
    pane: PaneInfo | None,
    seen: PresenceRow | None,
    record: SessionRecord | None,
    *,
    dialog: str = "",
    asking: PermissionRequest | None = None,
) -> AgentState:
    """One participant's state: a dead pane seen here is ``dead`` (exit status, last lines, read
    from tmux as ``fleet status`` always has); a prompt the store holds pending for it (``asking``:
    its PermissionRequest hook's record) is ``permission``; a ``dialog`` its live pane shows (its
    first line, as a reader of the pane found it: spawn's dialog handling) is ``dialog``; otherwise what its
    channel reported to the daemon (``unknown`` with why while it is not heard)."""
    if pane is not None and pane.dead:
        try:
            lines = tmux.capture(pane.pane_id)
        except errors.FleetError:
            lines = []
        screen = [ln for ln in lines if ln.strip() and not ln.startswith("Pane is dead")]
        return agentstate.dead(exit_of(pane) or "unknown", screen[-DEAD_LINES:])
    if asking is not None:  # the store's record of the prompt (the hook's): what it asks, since when
        since = datetime.fromisoformat(asking.asked_at.replace("Z", "+00:00")).timestamp()
        return AgentState(kind="permission", tool=asking.tool, input=asking.preview, since=since)
    if agentstate.first_line(dialog) and pane is not None:
        return AgentState(kind="dialog", dialog=agentstate.first_line(dialog))
    if seen is not None and seen.agent is not None:
        if record is not None and seen.session_id and seen.session_id != record.session_id:
            why = f"its channel reports session {seen.session_id[:8]}, not the recorded one"
            return agentstate.unknown(why)
        return seen.agent
    if seen is None:
        return agentstate.unknown("the daemon has no presence for it")
    return agentstate.unknown("the daemon reports no state (an older fleet)")


def row_text(state: AgentState, wavelet: str, now: float) -> str:
    """The state as one (wavelet, participant) row says it: a turn woken by blips of other
    wavelets only reads ``turning for OTHER`` in this one, not plain turning."""
    text = agentstate.describe(state, now)
    if state.kind == "turning" and state.wavelets and wavelet not in state.wavelets:
        return f"turning for {', '.join(state.wavelets)}"
    return text


# ---------------------------------------------------------------- the overview


class WaveOverview(BaseModel):
    """One wave in ``fleet ls``: its size and its panes, at a glance."""

    wave: str
    wave_id: str
    wavelets: int
    agents: list[str]
    """Every agent on any roster of the wave, by name."""
    live: list[str]
    """Participants whose pane is alive."""
    dead: list[str]
    """Participants whose pane is dead (``fleet respawn`` or ``fleet spawn`` brings them back)."""
    waiting: list[str] = Field(default_factory=list)
    """Agents that wait on the operator (a permission, a dialog) or failed, each as
    ``NAME: its state``."""
    tmux_session: str | None = None
    attach: str = ""


def overview(client: Client, tmux: Tmux | None) -> list[WaveOverview]:
    """Every wave the caller sees with its live and dead panes (one tmux query for all of them;
    ``tmux`` None: tmux is not installed, so there are none)."""
    from fleet.spawn import attach_hint

    panes = tmux.panes() if tmux is not None else []
    sessions = {p.wave: p.session_name for p in panes if p.wave}
    out = []
    for w in client.list_waves():
        full = client.get_wave(w.id)
        mine = panes_by_participant(p for p in panes if p.wave == w.id and p.participant)
        now = time.time()
        waiting = [
            f"{p.participant}: {agentstate.describe(p.agent, now)}"
            for p in client.presence(w.id)
            if agentstate.needs_operator(p.agent)
        ]
        out.append(
            WaveOverview(
                wave=w.name,
                wave_id=w.id,
                wavelets=len(full.wavelets),
                agents=sorted({m.name for wl in full.wavelets for m in wl.roster if m.kind == "agent"}),
                live=sorted(n for n, p in mine.items() if p.alive),
                dead=sorted(n for n, p in mine.items() if p.dead),
                waiting=waiting,
                tmux_session=sessions.get(w.id),
                attach=attach_hint(w.name) if w.id in sessions else "",
            )
        )
    return out


# ---------------------------------------------------------------- respawn


def respawn(
    client: Client, spawner: Spawner, wavelet_ref: str, participant: str, *, force: bool = False,
    wave_hint: str | None = None,
) -> PaneReport:  # fmt: skip
    """Relaunch ``participant`` of ``wavelet_ref`` resuming its recorded session (``fleet respawn``).

    The participant must be on the wavelet's roster, or have its pane recorded there (one who left
    keeps its pane). A live pane needs ``force`` (its screen is saved first). Raises
    :class:`~fleet.errors.NotFound` for an unknown wavelet or participant.
    """
    wl = client.resolve(wavelet_ref, wave=wave_hint)
    records = client.sessions(wl.wave_id, participant)
    on_roster = any(m.name == participant for m in wl.roster)
    if not on_roster and not any(r.wavelet_id == wl.id for r in records):
        raise errors.NotFound(
            f"{participant!r} is not on the roster of {wl.path} and has no pane there:"
            f" `fleet status {wl.wave}` shows who runs where"
        )
    return spawner.respawn(wl.wave_id, participant, force=force)


# ---------------------------------------------------------------- the ladder


@dataclass
class _Rung:
    attempts: int = 0
    dead_since: float | None = None


class Ladder:
    """When a dead participant is due: ``rungs[n]`` seconds after its pane is seen dead for the n-th
    time since it last posted (the last rung repeating). Time comes from ``clock`` (injectable).
    """

    def __init__(self, rungs: Sequence[float] = LADDER, clock: Callable[[], float] = time.monotonic) -> None:
        if not rungs:
            raise errors.UsageError("the respawn ladder needs at least one rung")
        self.rungs = tuple(rungs)
        self.clock = clock
        self._rungs: dict[str, _Rung] = {}

    def _r(self, name: str) -> _Rung:
        return self._rungs.setdefault(name, _Rung())

    def delay(self, name: str) -> float:
        """The wait before ``name``'s next respawn."""
        return self.rungs[min(self._r(name).attempts, len(self.rungs) - 1)]

    def dead(self, name: str) -> bool:
        """Note that ``name``'s pane is dead; True when this is a new death (the wait starts now)."""
        r = self._r(name)
        if r.dead_since is not None:
            return False
        r.dead_since = self.clock()
        return True

    def remaining(self, name: str) -> float | None:
        """Seconds until ``name`` is due (0 when due), or None when it is not known dead."""
        r = self._r(name)
        if r.dead_since is None:
            return None
        return max(0.0, r.dead_since + self.delay(name) - self.clock())

    def due(self, name: str) -> bool:
        return self.remaining(name) == 0.0

    def next_due_in(self) -> float | None:
        """Seconds until the first dead participant is due, or None when nobody is waiting."""
        waits = [w for w in (self.remaining(n) for n in self._rungs) if w is not None]
        return min(waits, default=None)

    def respawned(self, name: str) -> None:
        """A respawn was attempted: the next death waits one rung longer."""
        r = self._r(name)
        r.attempts += 1
        r.dead_since = None

    def alive(self, name: str) -> None:
        """Its pane is alive (or gone): no wait runs; the rung is kept until it posts."""
        self._r(name).dead_since = None

    def posted(self, name: str) -> None:
        """It posted: back to the first rung."""
        self._r(name).attempts = 0

    def attempts(self, name: str) -> int:
        return self._r(name).attempts


def span(seconds: float) -> str:
    """``45s``, ``5m``, ``1h30m``: a wait as people say it."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m" + (f"{s % 60}s" if s % 60 else "")
    return f"{s // 3600}h" + (f"{s % 3600 // 60}m" if s % 3600 // 60 else "")


# ---------------------------------------------------------------- the supervisor


LEASE_TTL = 30.0
"""Seconds a supervisor's lease lasts without a renewal (another machine may take the wave once it
lapses: a supervisor killed with -9 there holds it this long at most)."""

RENEW_EVERY = 5.0
"""Seconds between renewals of the lease (its own thread: a long respawn never lets it lapse)."""


class Lease:
    """One supervisor per wave: the daemon's lease (:class:`~fleet.models.SupervisorLease`).

    What a caller may rely on: :meth:`claim` raises :class:`~fleet.errors.Conflict` naming the live
    holder (pid, host) unless ``force``; a holder on this machine whose process is gone is taken
    over without ``force``; a forced claim signals (SIGTERM) a displaced holder on this machine, and
    one elsewhere finds out at its next renewal. :meth:`start` renews it every ``every`` seconds in
    a thread; :attr:`lost` is set once a renewal finds another holder, and the supervisor stops
    acting. A daemon outage is not a loss: the renewal retries, and once a restarted daemon (which
    kept no lease) answers, it claims the lease again. :meth:`release` gives it up."""

    def __init__(self, client: Client, wave_id: str, *, ttl: float = LEASE_TTL, every: float = RENEW_EVERY):
        self.client, self.wave_id, self.ttl, self.every = client, wave_id, ttl, every
        self.holder = request_key()
        self.lost = threading.Event()
        self.why = ""
        """Who took it over (once :attr:`lost`)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _claim(self, force: bool) -> SupervisorLease:
        req = SupervisorClaim(
            holder=self.holder, pid=os.getpid(), host=socket.gethostname(), ttl=self.ttl, force=force
        )
        return self.client.claim_supervisor(self.wave_id, req)

    def claim(self, force: bool = False) -> SupervisorLease:
        here = socket.gethostname()
        held = self.client.supervisor(self.wave_id)
        gone = held is not None and held.host == here and not pid_alive(held.pid)
        got = self._claim(force or gone)
        if got.took_over and held is not None and held.host == here and pid_alive(held.pid):
            try:
                os.kill(held.pid, signal.SIGTERM)  # it would stop at its next renewal: this is at once
            except OSError as exc:
                log.warning("could not signal the supervisor taken over (pid %s): %s", held.pid, exc)
        return got

    def start(self) -> None:
        self._thread = threading.Thread(target=self._renew, name="supervise-lease", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self._claim(False)
            except errors.Conflict:
                try:
                    held = self.client.supervisor(self.wave_id)
                except errors.FleetError:
                    held = None
                self.why = f"taken over by pid {held.pid} on {held.host}" if held else "taken over"
                self.lost.set()
                return
            except errors.FleetError as exc:  # the daemon away, or restarting: next time
                log.info("could not renew the supervisor lease: %s", exc.message)

    def release(self) -> None:
        """Stop renewing and give the lease up (unless it was lost). Never raises."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if not self.lost.is_set():
            try:
                self.client.release_supervisor(self.wave_id, self.holder)
            except errors.FleetError as exc:
                log.info("could not release the supervisor lease: %s", exc.message)


def supervised_by(client: Client, wave_id: str) -> str | None:
    """``pid N on HOST`` of the ``fleet supervise`` holding the wave's lease; None: none does."""
    held = client.supervisor(wave_id)
    return f"pid {held.pid} on {held.host}" if held else None


class SupervisorEvent(BaseModel):
    """One thing ``fleet supervise`` noticed or did (also posted as a ``system`` blip)."""

    at: str
    participant: str
    event: str
    """``died``, ``respawned``, ``failed``, or a watcher's own kind (:class:`fleet.seams.Watcher`; the
    resident's keeper: ``heartbeat``, ``budget``, ``cron``, ``missed``, ``goal``, ``janitor``,
    ``state``)."""
    text: str
    pane_id: str | None = None
    session_id: str | None = None


class Supervisor:
    """``fleet supervise WAVE``: watches the wave's blips (long-poll) and its panes (tmux), and respawns.

    :meth:`step` does one round and returns what it did; :meth:`run` loops until stopped. The
    supervisor starts at the wave's newest blip: blips written before it started are history.
    """

    def __init__(
        self,
        client: Client,
        tmux: Tmux,
        spawner: Spawner,
        wave: str,
        *,
        ladder: Ladder | None = None,
        tick: float = TICK,
        watchers: Sequence[Watcher] = (),
        lease: Lease | None = None,
    ) -> None:
        self.client = client
        self.tmux = tmux
        self.spawner = spawner
        self.wave: Wave = client.get_wave(wave)
        self.ladder = ladder or Ladder()
        self.tick = tick
        self.cursor = client.activity(self.wave.id).head
        self.watchers = list(watchers)
        """Run each round after the panes (:class:`fleet.seams.Watcher`): the wave's resident keeper
        (heartbeats, crons, its failure rule; docs/resident.md), its summary writer (the layouts'
        ``summarizer`` key)."""
        self.lease = lease
        """One supervisor per wave: once it is lost (taken over), :meth:`step` acts no more."""
        self._stop = threading.Event()

    def step(self, wait: float = 0.0) -> list[SupervisorEvent]:
        """Read new blips (waiting up to ``wait`` s for one), look at the panes, act. Never raises for
        one participant's failure; raises :class:`~fleet.errors.DaemonUnreachable` when the daemon is."""
        after = self.cursor
        page = self.client.read_wave(self.wave.id, after=after, wait=wait)
        self.cursor = page.cursor
        if self._stop.is_set() or (self.lease is not None and self.lease.lost.is_set()):
            return []  # stopping, or another supervisor holds the wave now: it acts, this one does not
        self.wave = self.client.get_wave(self.wave.id)
        agents = {m.name for wl in self.wave.wavelets for m in wl.roster if m.kind == "agent"}
        mentioned: set[str] = set()
        for blip in page.blips:
            if blip.kind == "system":
                continue
            if blip.author == OPERATOR:
                mentioned |= {n for n in agents if mentions(blip.text, n)}
                # talking to the wave brings back what a watcher keeps (the resident: its mind)
                mentioned |= {w.keeps for w in self.watchers if w.keeps in agents}
            else:
                self.ladder.posted(blip.author)
        records = {r.participant: r for r in self.client.sessions(self.wave.id)}
        panes = panes_by_participant(self.tmux.fleet_panes(self.wave.id))
        events: list[SupervisorEvent] = []
        for name in sorted(records):
            pane = panes.get(name)
            if pane is None or pane.alive or name not in agents:
                self.ladder.alive(name)
                continue
            rec = records[name]
            if self.ladder.dead(name):
                # its channel may have died without a word (SIGHUP): say so now, not at the ping TTL
                await_exit([pane])
                how = settled_exit(self.tmux, pane)
                # dead, with how: what a status read on another machine (no pane there) shows too
                dead = agent_state(self.tmux, pane, None, rec)
                report = PresenceReport(participant=name, event="gone", session_id=rec.session_id, agent=dead)
                self.client.report_presence(self.wave.id, report)
                events.append(
                    self._event(
                        rec, "died", pane.pane_id,
                        f"{name}'s pane {pane.pane_id} died ({how}); respawning it in"
                        f" {span(self.ladder.delay(name))}, or at once if the operator mentions {name}",
                    )
                )  # fmt: skip
            if name in mentioned:
                got = self._respawn(rec, "the operator mentioned it")
            elif self.ladder.due(name):
                got = self._respawn(rec, f"after {span(self.ladder.delay(name))} dead")
            else:
                continue
            if got is not None:
                events.append(got)
        for w in self.watchers:
            for kev in w.step(page.blips, after=after):  # the same page feeds the resident's worker fold
                if w.keeps in records:
                    events.append(
                        SupervisorEvent(
                            at=datetime.now(UTC).isoformat(),
                            participant=w.keeps,
                            event=kev.kind,
                            text=kev.text,
                        )
                    )
            if w.keeps and w.completed_turn:
                self.ladder.posted(w.keeps)  # a completed turn resets the resident's ladder
        return events

    def _respawn(self, rec: SessionRecord, why: str) -> SupervisorEvent | None:
        name = rec.participant
        try:
            report = self.spawner.respawn(self.wave.id, name)
        except errors.DaemonUnreachable:
            raise
        except errors.Conflict:  # somebody brought it back meanwhile
            self.ladder.alive(name)
            return None
        except errors.FleetError as exc:
            self.ladder.respawned(name)
            return self._event(
                rec, "failed", None,
                f"could not respawn {name} ({why}): {exc.message}; next try {span(self.ladder.delay(name))}"
                " after it is seen dead again",
            )  # fmt: skip
        self.ladder.respawned(name)
        if report.ready:
            for w in self.watchers:
                if w.keeps == name:
                    w.revived(report)
        if report.ready:
            return self._event(
                rec, "respawned", report.pane_id,
                f"respawned {name} in pane {report.pane_id} ({why}), resuming session {report.session_id}",
                session_id=report.session_id,
            )  # fmt: skip
        return self._event(
            rec, "failed", report.pane_id,
            f"respawned {name} in pane {report.pane_id} ({why}) but it is not connected: {report.why}",
            session_id=report.session_id,
        )  # fmt: skip

    def _event(
        self,
        rec: SessionRecord,
        kind: Literal["died", "respawned", "failed"],
        pane_id: str | None,
        text: str,
        session_id: str | None = None,
    ) -> SupervisorEvent:
        event = SupervisorEvent(
            at=datetime.now(UTC).isoformat(),
            participant=rec.participant,
            event=kind,
            text=text,
            pane_id=pane_id,
            session_id=session_id,
        )
        try:
            self.client.post_system(rec.wavelet_id, f"supervise: {text}")
        except errors.DaemonUnreachable:
            raise
        except errors.FleetError as exc:  # the act happened; the transcript just misses it
            log.warning("could not post %r as a system blip: %s", text, exc)
        return event

    def run(
        self,
        stop: threading.Event | None = None,
        on_event: Callable[[SupervisorEvent], None] | None = None,
        on_outage: Callable[[str], None] | None = None,
    ) -> None:
        """Loop until ``stop`` is set. A blip wakes a round at once; otherwise tmux is looked at
        every ``tick`` seconds (sooner when a respawn falls due). A daemon outage is reported to
        ``on_outage`` and retried with backoff, never fatal."""
        stop = self._stop = stop or threading.Event()
        backoff = 1.0
        while not stop.is_set() and not (self.lease is not None and self.lease.lost.is_set()):
            due = self.ladder.next_due_in()
            for w in self.watchers:
                if (beat := w.next_due_in()) is not None:
                    due = beat if due is None else min(due, beat)
            wait = self.tick if due is None else min(self.tick, due)
            try:
                events = self.step(wait=wait)
            except errors.DaemonUnreachable as exc:
                if on_outage is not None:
                    on_outage(exc.message)
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            backoff = 1.0
            for event in events:
                log.info("%s", event.text)
                if on_event is not None:
                    on_event(event)


# ---------------------------------------------------------------- kill


class KillReport(BaseModel):
    """What ``fleet kill`` did (``--json``)."""

    wave: str
    target: str
    """The wave's name, or ``WAVE/WAVELET``."""
    scope: Literal["wave", "wavelet"]
    killed: str | None = None
    """The tmux session (wave) or window (wavelet) killed, by name (``SESSION`` or
    ``SESSION:WINDOW``, as ``tmux attach -t`` takes it); None when nothing was running."""
    killed_id: str | None = None
    """Its tmux id (``$3``, ``@7``)."""
    panes: list[str] = Field(default_factory=list)
    participants: list[str] = Field(default_factory=list)
    """Reported ``gone``. Their sessions stay recorded: ``fleet spawn`` resumes them."""
    pruned: list[str] = Field(default_factory=list)
    """``--prune``: worktrees removed (with their branches): no changes, nothing unmerged."""
    kept: list[Kept] = Field(default_factory=list)
    """``--prune``: worktrees kept, and why."""


def resolve_target(client: Client, ref: str, wave_hint: str | None) -> tuple[Wave, Wavelet | None]:
    """What ``fleet kill`` names: ``WAVE/WAVELET`` or a wavelet of the current wave is a wavelet;
    otherwise a wave (name or id); otherwise a wavelet id. (wave, None) means the whole wave."""
    if "/" not in ref:
        if wave_hint:
            try:
                wl = client.resolve(ref, wave=wave_hint)
                return client.get_wave(wl.wave_id), wl
            except errors.NotFound:
                pass
        try:
            return client.get_wave(ref), None
        except errors.NotFound:
            pass
    try:
        wl = client.resolve(ref, wave=wave_hint)
    except errors.NotFound:
        raise errors.NotFound(
            f"no wave or wavelet {ref!r}: `fleet wave list` shows the waves, `fleet tree WAVE` their wavelets"
        ) from None
    return client.get_wave(wl.wave_id), wl


def await_exit(panes: Iterable[PaneInfo], timeout: float = 5.0) -> bool:
    """Wait (bounded) until no process of the panes' process groups runs; True if none does.

    A pane's agent leads its own session and process group, and its channel is in that group. tmux
    hangs them up asynchronously, so a channel can outlive ``kill-pane`` by a moment and report one
    last delivery; a ``gone`` sent before it is really gone would be overwritten.
    """
    groups = {p.pid for p in panes if p.pid}
    deadline = time.monotonic() + timeout
    while groups:
        groups = {g for g in groups if group_running(g)}
        if not groups:
            break
        if time.monotonic() > deadline:
            log.warning("process groups %s still run %.0fs after their panes were killed", groups, timeout)
            return False
        time.sleep(0.02)
    return True


Pruner = Callable[[Client, Tmux, Wave, "Wavelet | None", "KillReport"], None]
"""Run by :func:`kill` after the kill, with its report to fill (``fleet kill --prune``:
:func:`fleet.worktrees.prune_killed`)."""


def kill(
    client: Client, tmux: Tmux, ref: str, *, wave_hint: str | None = None, prune: Pruner | None = None
) -> KillReport:
    """Kill a wavelet's window or a wave's whole session; mark the participants in it gone; keep all data.

    Idempotent: with nothing running it kills nothing and reports so. What was killed is posted as a
    ``system`` blip (into the wavelet, or the wave's root). ``prune``: then called with the target
    and the report (``--prune`` gives :func:`fleet.worktrees.prune_killed`: the fleet worktrees of the
    target's participants whose panes no longer run go, with their branches, when they have no
    changes and nothing unmerged; the others are listed as kept).
    """
    wave, wl = resolve_target(client, ref, wave_hint)
    found = tmux.wave_session(wave.id)
    session = found.session_id if found else None
    panes = tmux.fleet_panes(wave.id) if session else []
    killed: str | None = None
    killed_name: str | None = None
    if wl is not None:
        window = tmux.find_window(session, wl.id) if session else None
        victims = [p for p in panes if p.window_id == window] if window else []
        if window:
            labels = tmux.names(window)  # (before the kill: then tmux no longer knows it)
            tmux.kill_window(window)
            killed, killed_name = window, ":".join(n for n in labels if n) or window
    else:
        victims = [p for p in panes if p.session_id == session]
        if found:
            tmux.kill_session(found.session_id)
            killed, killed_name = found.session_id, found.name
    await_exit(victims)
    names = sorted({p.participant for p in victims})
    for name in names:
        client.report_presence(wave.id, PresenceReport(participant=name, event="gone"))
    report = KillReport(
        wave=wave.name,
        target=wl.path if wl else wave.name,
        scope="wavelet" if wl else "wave",
        killed=killed_name,
        killed_id=killed,
        panes=[p.pane_id for p in victims],
        participants=names,
    )
    if killed:
        where = f"the tmux window of {wl.path}" if wl else f"the tmux session of wave {wave.name}"
        who = ", ".join(names) or "no agents"
        again = f"fleet spawn {wl.path}" if wl else f"fleet spawn {wave.name}/WAVELET"
        client.post_system(
            wl.id if wl else wave.root_id,
            f"kill: the operator killed {where} ({who}); their sessions are kept: `{again}` resumes them",
        )
    if prune is not None:
        prune(client, tmux, wave, wl, report)
    return report
