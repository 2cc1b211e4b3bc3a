"""Spawning: a wavelet's roster materialised as tmux panes, each running an agent wired to the wave.

``Spawner.spawn(wavelet)`` is fleet's main job (docs/design.md §6). What a caller may rely on:

- One tmux session per wave, one window per wavelet, one pane per participant, found again by their
  ``@fleet_*`` options, never by names or indexes.
- Idempotent: a participant of the wave with a live pane anywhere in the wave's session is never
  launched twice (its one channel already delivers every wavelet it is on). A participant whose
  pane died is respawned in place with ``--resume`` of its recorded session; one with no pane at all
  (killed) but a session recorded for this wavelet gets a new pane that resumes it. Re-running spawn
  after an invite adds panes for the new members.
- Before launch each participant gets a fresh token in a 0600 file (the tokens spawn minted for its
  earlier panes are revoked; tokens minted by hand are not),
  and a Claude session id, recorded with the daemon so any machine can respawn it.
- The agent is the pane's own command, launched without a shell, with the profile's ``env`` set in
  the pane (never on the command line, never in a report). Its kind (:mod:`fleet.agents`: Claude
  Code, the Codex CLI, the stand-in, any other command) builds the command line; the report names
  the kind and what it cannot do that Claude Code does. Claude Code gets the channel as an
  inline ``--mcp-config`` (``=`` form: the flag is variadic) that names the token *file*, never the
  token. ``--transport hook`` injects ``fleet watch --hook`` as an ``asyncRewake`` hook instead of
  loading the development channel. The profile's ``cap`` is passed to the channel (or the hook).
  fleet's own tools are pre-allowed (``--allowedTools=mcp__fleet``); the profile's ``args`` add more.
- Each launched pane is then watched (bounded): ready once its channel pings the daemon; Claude
  Code's development-channels warning is accepted; a folder-trust prompt is accepted only with
  ``trust`` (its "Yes" chosen: the prompt's focus starts on "No, exit"); an agent that dies is
  reported with its exit status and last lines. Screens are read through :mod:`fleet.dialogs`, so
  this holds at any pane width (verified down to 18 columns). A pane left at a dialog is reported
  ``waiting at a dialog: <its first line>`` with what to do, and its window flagged
  (:data:`fleet.tmux.WAITING`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import shlex
import socket
import time
import uuid
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from fleet import dialogs, errors
from fleet.agents import STANDIN, Kind, Start, agent_words, channel_entry, kind_of, require_agent
from fleet.agents.claude import ALLOW_FLEET_TOOLS, agent_argv, mcp_config, settings_json, state_hooks
from fleet.client import Client
from fleet.layouts import DEFAULT_LAYOUT, Attention, Layout
from fleet.layouts import load as load_layout
from fleet.models import NewSession, SessionRecord, Wave, Wavelet
from fleet.paths import Paths, read_utf8, write_private
from fleet.procs import zombie_status
from fleet.seams import Launch, Workspace, spawn_checks, workspaces
from fleet.tmux import PaneInfo, PaneLaunch, Session, Tmux, check_length, session_name

log = logging.getLogger(__name__)

Transport = Literal["auto", "channel", "hook"]
"""``auto`` (the default): the channel pushes and an ``asyncRewake`` hook takes what Claude Code did
not; ``channel``: pushes only; ``hook``: the hook only (the channel serves tools)."""
__all__ = [  # the command line's parts, kept here for their callers (they live in fleet.agents)
    "ALLOW_FLEET_TOOLS", "STANDIN", "agent_argv", "agent_words", "channel_entry", "is_claude",
    "mcp_config", "require_agent", "settings_json", "state_hooks",
]  # fmt: skip

DEV_CHANNELS_PROMPT = dialogs.DEV_CHANNELS.accept
NO_CHANNELS = "Channels are not currently available"
"""What Claude Code shows at start when the account (or provider, or policy) has no channels."""
ROUTE_CHANNEL = "channel registered"
ROUTE_HOOK = "channels unavailable here — woken by the hook"
ROUTE_UNKNOWN = "unconfirmed so far"
VERDICT_WAIT = 3.0
RUNNING_WAIT = 3.0
"""Seconds an already running pane's channel has to show presence to this daemon (a channel pings
at once when it reaches a restarted daemon) before spawn says it cannot reach it."""
"""Seconds spawn keeps reading a ready Claude Code pane for its development-channels warning: Claude
Code shows it at every launch when channels are available to the account, and never otherwise."""
DEAD_LINE = re.compile(r"Pane is dead \((?:status (\d+)|signal (\d+))")
PRESS_AGAIN = {"Down": 0.3, "Up": 0.3, "Enter": 1.5}
"""Seconds after a key before spawn presses another at a dialog still showing: a moment for Claude
Code to redraw (a Down), or to close the dialog (an Enter: one still showing after that was missed)."""
PRESSES = 6
"""Keys spawn presses at one pane's dialogs before it leaves them to the operator."""
LOOK_EVERY = 0.4
"""Seconds before spawn's first read of tmux (the panes, and the screens of panes not yet heard from)
while it waits for channels' pings, growing by half each read up to :data:`LOOK_MAX`: a ping says a
pane is ready, only a screen that it waits at a dialog, and a dialog comes no sooner (Claude Code
draws its first a second or more after launch). After a key at a dialog the screen is read again
once the key may have taken effect (:data:`PRESS_AGAIN`)."""
LOOK_MAX = 1.0


class HookSettingsFn(Protocol):
    """Builds the ``--settings`` JSON of ``--transport hook`` (:func:`fleet.watch.hook_settings`)."""

    def __call__(
        self,
        participant: str,
        wave: str,
        token_file: Path,
        attention: Attention,
        *,
        cap: int | None,
        gate: bool = False,
    ) -> str: ...


@dataclasses.dataclass
class _Start:
    """A participant ready to start: its report (the pane id filled in once tmux made the pane), what
    its pane runs, and the launch id its channel was given."""

    report: PaneReport
    pane: PaneLaunch
    launch: str
    kind: Kind


@dataclasses.dataclass
class _Window:
    """The wavelet's window as :meth:`Spawner._start` builds into it."""

    window_id: str
    focus: str
    """The pane left active after the build (the one a person there was looking at)."""
    arrangement: str
    main_size: str | None
    made: bool = False
    """Made by this spawn (its tags are set in the same invocation as its panes)."""
    tag_session: str = ""
    """A session made by this spawn, tagged with the wave in the same invocation."""


class PaneReport(BaseModel):
    """What spawn did for one participant (``fleet spawn --json`` prints these)."""

    participant: str
    pane_id: str
    action: Literal["launched", "respawned", "running", "skipped", "failed"]
    """``failed``: not started (its worktree's ``setup`` failed: ``why`` has its output); no pane."""
    ready: bool = False
    why: str = ""
    route: str = ""
    """What wakes this session, as far as spawn saw: ``channel registered``, ``channels unavailable
    here — woken by the hook``, ``unconfirmed so far`` ('' for a pane that was already running)."""
    session_id: str = ""
    argv: list[str] = Field(default_factory=list)
    worktree: str = ""
    """The git worktree the pane works in ('' without one)."""
    branch: str = ""
    kind: str = ""
    """The agent's kind (:mod:`fleet.agents`: ``claude``, ``codex``, ``standin``, ``command``; '' for
    a pane that was already running)."""
    limits: list[str] = Field(default_factory=list)
    """What this agent cannot do that Claude Code does (docs/agents.md), said plainly: never a silent
    "ready"."""


class SpawnReport(BaseModel):
    wave: str
    wavelet: str
    session_id: str
    window_id: str
    """'' when no window was made or used (every member already runs in another window)."""
    panes: list[PaneReport]
    attach: str
    session: str = ""
    """The tmux session's name (what ``tmux ls`` and a person see), '' for none."""
    window: str = ""
    """The wavelet's window's name, '' for none."""

    @property
    def all_ready(self) -> bool:
        return all(p.ready for p in self.panes if p.action != "skipped")


def is_claude(words: list[str]) -> bool:
    """Whether the agent command runs Claude Code (its receipts and system prompt apply)."""
    return kind_of(words).name == "claude"


class Spawner:
    """Spawns wavelets into one tmux server against one daemon (``client`` must hold the operator token)."""

    def __init__(
        self,
        client: Client,
        tmux: Tmux,
        paths: Paths,
        *,
        agent: str | None = None,
        transport: Transport = "auto",
        trust: bool = False,
        ready_timeout: float = 30.0,
        hook_settings: HookSettingsFn | None = None,
    ) -> None:
        self.client = client
        self.tmux = tmux
        self.paths = paths
        self.agent = agent
        self.transport: Transport = transport
        self.trust = trust
        self.ready_timeout = ready_timeout
        if hook_settings is None:  # the hook of this fleet, for this daemon
            from functools import partial

            from fleet.watch import hook_settings as fleet_hook

            # its state dir is the channel's (Start.paths.channels): the spawner's, not the pane's guess
            hook_settings = partial(fleet_hook, daemon=client.base_url, state_dir=paths.channels)
        self.hook_settings: HookSettingsFn = hook_settings
        self._taken: set[str] = set()
        """The session names on the server at the last :meth:`_find_window` (names are unique in tmux)."""
        self._launches: dict[str, str] = {}
        """Pane id -> the launch id its channel was given (``FLEET_LAUNCH``): readiness is its ping."""

    # ---------------------------------------------------------------- helpers

    def require_minting(self, wave: Wave) -> None:
        """Forbidden, before anything is made, unless the client's token can mint participant tokens
        in ``wave`` (each spawned agent gets its own): the operator's, or a machine token for it."""
        me = self.client.whoami()
        if me.can_mint:
            return
        raise errors.Forbidden(
            f"spawning needs a token that mints the agents' own tokens, and this is a participant"
            f" token ({me.principal} in wave {me.wave or wave.name}): use the operator token on the"
            " daemon's machine, or on another machine a machine token for this wave (on the daemon's"
            f" machine: `fleet remote mint MACHINE --wave {wave.name}`, here: `fleet remote join STRING`)"
        )

    def token_file(self, wave: Wave, participant: str) -> Path:
        return self.paths.tokens / wave.id / f"{participant}.token"

    def minted_file(self, wave: Wave, participant: str) -> Path:
        """The ids of the tokens spawn minted for ``participant``'s panes (0600, one a line)."""
        return self.paths.tokens / wave.id / f"{participant}.minted"

    def _fresh_token(self, wave: Wave, participant: str) -> Path:
        """Revoke the tokens spawn minted for the participant's earlier panes (its pane is dead or
        new), mint one, write it 0600 and remember its id. Tokens minted otherwise (by hand with
        `fleet token mint`, for a remote machine) are not spawn's to revoke and stay live."""
        ids = self.minted_file(wave, participant)
        try:
            earlier = [line.strip() for line in read_utf8(ids).splitlines() if line.strip()]
        except FileNotFoundError:
            earlier = []
        except OSError as exc:  # which tokens to revoke cannot be told: none is minted beside them
            raise errors.CorruptState(
                f"{ids} cannot be read ({exc.strerror or exc}): the tokens spawn minted for"
                f" {participant}'s earlier panes cannot be told; revoke them (`fleet token list"
                f" {wave.name}`, `fleet token revoke ID`), remove the file, and spawn again"
            ) from None
        for token_id in earlier:
            with contextlib.suppress(errors.NotFound):  # revoked or gone already
                self.client.revoke_token(token_id=token_id)
        minted = self.client.mint_token(wave.id, participant)
        path = self.token_file(wave, participant)
        write_private(path, minted.token + "\n")
        write_private(ids, minted.id + "\n")
        return path

    def _prepare(
        self,
        pane_id: str,
        wave: Wave,
        wl: Wavelet,
        layout: Layout,
        participant: str,
        record: SessionRecord | None,
        resume: bool,
        tree: Workspace | None = None,
    ) -> _Start:
        """Everything a participant's launch needs but tmux: its token, session record, argv, cwd and
        env (``pane_id``: the pane it goes into, '' for a new one)."""
        profile = layout.profile(participant)
        agent = self.agent or (record.agent if resume and record and record.agent else profile.agent)
        words = agent_words(agent)
        kind = kind_of(words)
        kind.require(words)
        transport: Transport = (record.transport if resume and record else self.transport) or "auto"
        session_id = record.session_id if resume and record else str(uuid.uuid4())
        token_file = self._fresh_token(wave, participant)
        if resume and not kind.resumable(session_id, profile.env, self.paths):
            # a session that never had a conversation cannot be resumed (Claude Code: "No conversation
            # found"); it starts again under the same id, losing nothing
            resume = False
        if tree is not None:
            cwd = str(tree.cwd)
        else:
            cwd = (
                os.path.expanduser(profile.cwd)
                if profile.cwd
                else (record.cwd if record and resume else os.getcwd())
            )
        launch = str(uuid.uuid4())
        seen = Launch(
            self.paths, self.client.base_url, wave, wl, participant, token_file, notify=profile.notify
        )
        hook_settings = self.hook_settings

        def watch_hook(gate: bool) -> str:
            return hook_settings(
                participant, wave.name, token_file, profile.attention, cap=profile.cap, gate=gate
            )

        command = kind.command(
            Start(
                words=words, profile=profile, participant=participant, wave=wave, wavelet=wl,
                session_id=session_id, resume=resume, transport=transport, token_file=token_file,
                paths=self.paths, daemon_url=self.client.base_url, launch=launch, cwd=cwd,
                trust=self.trust, seen=seen, watch_hook=watch_hook,
            )
        )  # fmt: skip
        argv = command.argv
        check_length(argv, participant)
        self.client.record_session(
            wave.id,
            NewSession(
                participant=participant, session_id=session_id, wavelet_id=wl.id,
                layout=layout.ref or layout.name, agent=agent, transport=transport, cwd=cwd,
                host=socket.gethostname(),
            ),
        )  # fmt: skip
        # values never logged; FLEET_WAVELET_ID tells this fleet's processes from another's (another
        # FLEET_HOME or daemon on this machine may hold a wavelet of the same path)
        env = {**profile.env, "FLEET_WAVELET": wl.path, "FLEET_WAVELET_ID": wl.id, "FLEET_WAVE": wave.name}
        report = PaneReport(
            participant=participant,
            pane_id=pane_id,
            action="respawned" if resume else "launched",
            session_id=session_id,
            argv=argv,
            route=command.route or ROUTE_UNKNOWN,
            worktree=str(tree.path) if tree else "",
            branch=tree.branch if tree else "",
            kind=kind.name,
            limits=list(kind.limits),
        )
        return _Start(report, PaneLaunch(pane_id, participant, argv, cwd, env), launch, kind)

    def _start(self, wave: Wave, wl: Wavelet, starts: list[_Start], window: _Window | None) -> None:
        """Start ``starts`` in tmux (one invocation for a wavelet, or as few as tmux's length limit
        allows): each in its pane, or a new one split off ``window``, which is laid out after. Fills in
        each report's pane id."""
        pane_ids = self.tmux.launch(
            wave.id, wl.id, [s.pane for s in starts],
            window_id=window.window_id if window else "",
            tag_session=window.tag_session if window else "", tag_window=bool(window and window.made),
            focus=window.focus if window else "",
            arrangement=window.arrangement if window else "", main_size=window.main_size if window else None,
        )  # fmt: skip
        for start, pane_id in zip(starts, pane_ids, strict=True):
            start.report.pane_id = pane_id
            self._launches[pane_id] = start.launch

    # ---------------------------------------------------------------- the job

    def spawn(self, wavelet_ref: str, layout: Layout, *, wave_hint: str | None = None) -> SpawnReport:
        wl = self.client.resolve(wavelet_ref, wave=wave_hint)
        wave = self.client.get_wave(wl.wave_id)
        self.require_minting(wave)
        roster = [m.name for m in wl.roster if m.kind == "agent"]
        if not roster:
            raise errors.UsageError(
                f"{wl.path} has no agents on its roster: invite some (`fleet invite {wl.path} NAME`)"
            )
        records = {r.participant: r for r in self.client.sessions(wave.id)}
        if self.agent:
            require_agent(agent_words(self.agent))
        else:  # a resumed session runs its recorded agent
            for name in roster:
                rec = records.get(name)
                require_agent(agent_words(rec.agent if rec and rec.agent else layout.profile(name).agent))
        main = layout.main_pane(roster)
        order = sorted(roster, key=lambda n: (n != main, roster.index(n)))
        for check in spawn_checks:  # before anything is made (budgets: a cost budget over no price)
            check(self.client, self.paths, wave, wl, layout, roster)

        every = self.tmux.panes()
        panes = [p for p in every if p.wave == wave.id and p.participant]
        live_names = {p.participant for p in panes if p.alive}
        trees, failed = self._worktrees(wave, layout, [n for n in order if n not in live_names], records)
        order = [n for n in order if n not in failed]
        session, found = self._find_window(wave, wl)
        session_id = session.session_id if session else None
        if not order:  # nothing to start: no window either
            return SpawnReport(
                wave=wave.name, wavelet=wl.path, session_id=session_id or "", window_id="",
                panes=list(failed.values()), attach=attach_hint(wave.name),
                session=session.name if session else "",
            )  # fmt: skip
        before = {p.participant: p.last_ping for p in self.client.presence(wave.id)}
        window_id = found[0] if found else ""
        reports, starts = self._prepare_all(wave, wl, layout, order, panes, records, trees, window_id)
        window: _Window | None = None
        if found is not None:
            window = _Window(found[0], found[1], layout.arrangement, layout.main_size)
        elif any(not s.pane.pane_id for s in starts):  # the wavelet's window, made for its new panes
            session_id, window = self._open_window(wave, wl, layout, session_id, starts)
        try:
            self._start(wave, wl, starts, window)
        except BaseException:
            # Nothing stays half made: a window made just now goes, as do panes added to an old one.
            with contextlib.suppress(errors.FleetError):
                if window is not None and window.made:
                    self.tmux.kill_window(window.window_id)
                elif window is not None:
                    had = {p.pane_id for p in every}
                    for pane_id in self.tmux.window_panes(window.window_id):
                        if pane_id not in had:
                            self.tmux.kill_pane(pane_id)
            raise
        window_id = window.window_id if window else ""
        self._await_ready(wave, [r for r in reports if r.action in ("launched", "respawned")], before)
        self._check_running(wave, wl, [r for r in reports if r.action == "running"])
        named_session, window_name = self.tmux.names(window_id or session_id or "")
        return SpawnReport(
            wave=wave.name,
            wavelet=wl.path,
            session_id=session_id or "",
            window_id=window_id,
            panes=reports + list(failed.values()),
            attach=attach_hint(wave.name),
            session=named_session,
            window=window_name if window_id else "",
        )

    def _prepare_all(
        self,
        wave: Wave,
        wl: Wavelet,
        layout: Layout,
        order: list[str],
        panes: list[PaneInfo],
        records: dict[str, SessionRecord],
        trees: dict[str, Workspace],
        window_id: str,
    ) -> tuple[list[PaneReport], list[_Start]]:
        """Each member in ``order``: reported running (a live pane anywhere in the wave), or prepared
        to start in its dead pane (the one in this window first) or in a new pane ('' pane id)."""
        reports: list[PaneReport] = []
        starts: list[_Start] = []
        for name in order:
            mine = [p for p in panes if p.participant == name]
            live = next((p for p in mine if p.alive), None)
            if live is not None:
                where = "" if live.window_id == window_id else f" (in another window, {live.wavelet[:8]})"
                reports.append(
                    PaneReport(
                        participant=name,
                        pane_id=live.pane_id,
                        action="running",
                        ready=True,
                        why=f"already running{where}",
                    )
                )
                continue
            dead = next((p for p in mine if p.window_id == window_id), None) or (mine[0] if mine else None)
            record = records.get(name)
            if dead is not None:
                resume = record is not None
            else:  # no pane at all (`fleet kill`, a closed window): a session recorded here resumes
                resume = record is not None and record.wavelet_id == wl.id
            start = self._prepare(
                dead.pane_id if dead else "",
                wave,
                wl,
                layout,
                name,
                record,
                resume=resume,
                tree=trees.get(name),
            )
            reports.append(start.report)
            starts.append(start)
        return reports, starts

    def _worktrees(
        self, wave: Wave, layout: Layout, names: list[str], records: dict[str, SessionRecord]
    ) -> tuple[dict[str, Workspace], dict[str, PaneReport]]:
        """The worktree each of ``names`` works in, made ready before any pane exists.

        Every refusal (not a repository, a branch taken, a dirty base) raises before anything is
        created; a failed ``setup`` is that participant's report (its pane is not started)."""
        plans: dict[str, Workspace] = {}
        by_path: dict[Path, Workspace] = {}
        facts: dict[tuple[str, ...], Any] = {}
        for name in names:
            p = self._plan(wave, layout, name, records.get(name), facts)
            if p is None:
                continue
            p = by_path.setdefault(p.path, p)  # the wave's shared worktree: planned (and made) once
            p.participants.append(name)
            plans[name] = p
        failed: dict[str, PaneReport] = {}
        for p in by_path.values():
            bad = p.make()
            if bad is not None:
                for name in p.participants:
                    failed[name] = PaneReport(
                        participant=name, pane_id="", action="failed", why=bad,
                        worktree=str(p.path), branch=p.branch,
                    )  # fmt: skip
                    del plans[name]
        return plans, failed

    def _plan(
        self,
        wave: Wave,
        layout: Layout,
        name: str,
        record: SessionRecord | None,
        facts: dict[tuple[str, ...], Any] | None = None,
    ) -> Workspace | None:
        profile = layout.profile(name)
        if profile.worktree == "none":
            return None
        for planner in workspaces:  # fleet.worktrees: a respawn reuses the worktree it ran in
            got = planner(wave, profile, name, record, facts)
            if got is not None:
                return got
        raise errors.UsageError(
            f"{name}'s profile asks for a worktree ({profile.worktree}), but no feature here makes one"
            " (fleet.worktrees is not loaded: run it through the `fleet` command)"
        )

    def _find_window(self, wave: Wave, wl: Wavelet) -> tuple[Session | None, tuple[str, str] | None]:
        """The wave's session (``None``: none yet; its name came with it) and the wavelet's window
        in it with its active pane."""
        sessions = self.tmux.sessions()
        self._taken = {s.name for s in sessions}  # a new session's name is picked from these
        session = next((s for s in sessions if s.wave == wave.id), None)
        return session, (self.tmux.window_of(session.session_id, wl.id) if session else None)

    def _open_window(
        self, wave: Wave, wl: Wavelet, layout: Layout, session_id: str | None, starts: list[_Start]
    ) -> tuple[str, _Window]:
        """The wavelet's window, made now (in a new session when the wave has none), whose placeholder
        pane the first start needing a new pane takes: (session id, window)."""
        sid, wid, first = self.tmux.open_window(
            wl.name, session_id=session_id, new_session_name=session_name(wave.name, self._taken)
        )
        start = next(s for s in starts if not s.pane.pane_id)
        start.pane = dataclasses.replace(start.pane, pane_id=first)
        window = _Window(wid, first, layout.arrangement, layout.main_size, made=True)
        window.tag_session = "" if session_id else sid
        return sid, window

    def respawn(self, wave_ref: str, participant: str, *, force: bool = False) -> PaneReport:
        """Relaunch ``participant``'s agent with ``--resume`` of its recorded session, where it was.

        A dead pane is respawned in place; a live one only with ``force``, after its screen is saved
        to the state dir (the path is in the report). With no pane at all (killed), a new one is made
        in the recorded wavelet's window. Works from any machine: everything comes from the daemon.
        """
        wave = self.client.get_wave(wave_ref)
        self.require_minting(wave)
        records = {r.participant: r for r in self.client.sessions(wave.id)}
        record = records.get(participant)
        if record is None:
            raise errors.NotFound(
                f"no recorded session for {participant!r} in wave {wave.name!r}:"
                " spawn it first (`fleet spawn`)"
            )
        wl = self.client.get_wavelet(record.wavelet_id)
        layout = _layout_named(record.layout, self.paths)
        tree = self._plan(wave, layout, participant, record)
        if tree is not None:
            bad = tree.make()
            if bad is not None:
                raise errors.FleetError(f"{participant} was not respawned: {bad}")
        mine = [p for p in self.tmux.fleet_panes(wave.id) if p.participant == participant]
        pane = next((p for p in mine if p.alive), None) or (mine[0] if mine else None)
        saved = ""
        if pane is not None and pane.alive:
            if not force:
                raise errors.Conflict(
                    f"{participant} is alive in pane {pane.pane_id}: use --force to restart it"
                    " (its screen is saved first)"
                )
            saved = str(self.save_screen(wave, participant, pane.pane_id))
        before = {p.participant: p.last_ping for p in self.client.presence(wave.id)}
        start = self._prepare(
            pane.pane_id if pane else "", wave, wl, layout, participant, record, resume=True, tree=tree
        )
        window: _Window | None = None
        if pane is None:  # a new pane in the recorded wavelet's window (made if it is gone too)
            session, found = self._find_window(wave, wl)
            if found is not None:
                window = _Window(found[0], found[1], layout.arrangement, layout.main_size)
            else:
                sid = session.session_id if session else None
                _sid, window = self._open_window(wave, wl, layout, sid, [start])
        self._start(wave, wl, [start], window)
        report = start.report
        self._await_ready(wave, [report], before)
        if saved:
            report.why = f"{report.why}; previous screen saved to {saved}"
        return report

    def launch(
        self, pane_id: str, wave: Wave, wl: Wavelet, layout: Layout, participant: str, *, resume: bool
    ) -> PaneReport:
        """Launch one participant into ``pane_id`` (a placeholder or dead pane) and wait until it is
        ready, as :meth:`spawn` does for each member (``resume``: its recorded session)."""
        record = next((r for r in self.client.sessions(wave.id, participant)), None)
        before = {p.participant: p.last_ping for p in self.client.presence(wave.id)}
        start = self._prepare(
            pane_id, wave, wl, layout, participant, record, resume=resume and record is not None
        )
        self._start(wave, wl, [start], None)
        report = start.report
        self._await_ready(wave, [report], before)
        return report

    def save_screen(self, wave: Wave, participant: str, pane_id: str) -> Path:
        """Write a pane's whole screen and history to a file in the state dir; returns its path."""
        lines = self.tmux.capture(pane_id, history=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = self.paths.state / "screens" / wave.name / f"{participant}-{stamp}.txt"
        write_private(path, "\n".join(lines) + "\n")
        return path

    # ---------------------------------------------------------------- readiness

    def _check_running(self, wave: Wave, wl: Wavelet, reports: list[PaneReport]) -> None:
        """An already running pane is ready only if its channel is heard by this daemon (presence
        not ``gone`` within :data:`RUNNING_WAIT`): a pane whose channel talks to an address nobody
        answers any more is not "ready (already running)"."""
        deadline = time.monotonic() + RUNNING_WAIT
        while reports:
            states = {p.participant: p.state for p in self.client.presence(wave.id)}
            reports = [r for r in reports if states.get(r.participant, "gone") == "gone"]
            if not reports or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        for r in reports:
            r.ready = False
            r.why = (
                f"{r.why}, but its channel has not reached the daemon at {self.client.base_url} "
                f"within {RUNNING_WAIT:g}s: restart it with `fleet respawn {wl.path} {r.participant} --force`"
            )

    def _await_ready(self, wave: Wave, reports: list[PaneReport], before: dict[str, float | None]) -> None:
        """Watch launched panes until each is ready, dead, or stuck at a dialog (bounded).

        Ready means the daemon heard a presence ping from the participant's new session after launch
        (a newer ``last_ping`` than before it, so no clock is compared across machines). A pane at a
        dialog spawn does not answer (the folder-trust prompt without ``trust``, any dialog but the
        two it knows how to accept), or still at one after :data:`PRESSES` keys, is reported at once
        ``waiting at a dialog: <first line>``, as is one at a dialog at the deadline, and its window
        is flagged; a window whose panes all got past their dialogs is unflagged.
        """
        pending = {r.participant: r for r in reports}
        accepted: set[str] = set()
        verdicts: dict[str, float] = {}
        """Ready Claude Code panes whose channels verdict spawn is still reading: until when."""
        dead_since: dict[str, float] = {}
        keys: dict[str, tuple[int, str, float]] = {}
        """Per pane: keys pressed at its dialogs, the last one, and when."""
        waiting: dict[str, dialogs.Found] = {}
        """Panes at a dialog spawn leaves to the operator, by participant."""
        start = time.monotonic()
        deadline = start + self.ready_timeout
        every = LOOK_EVERY
        look_at = start + every
        delay = 0.05
        while pending and time.monotonic() < deadline:
            round_at = time.monotonic()
            presence = {p.participant: p for p in self.client.presence(wave.id)}
            # tmux is read only for what no ping says: whether a pane that has not pinged died or waits
            # at a dialog, and a ready Claude Code pane's channels verdict. One invocation per look.
            look = time.monotonic() >= look_at
            panes: dict[str, PaneInfo] = {}
            screens: dict[str, list[str]] = {}
            if look:
                listed, screens = self.tmux.screens([r.pane_id for r in pending.values()])
                panes = {p.pane_id: p for p in listed if p.wave == wave.id and p.participant}
                every = min(every * 1.5, LOOK_MAX)
                look_at = time.monotonic() + every
            for name, rep in list(pending.items()):
                pane: PaneInfo | None = panes.get(rep.pane_id)
                row = presence.get(name)
                fresh = row and row.last_ping and row.last_ping != before.get(name)
                # this launch's channel, not the one it replaced (a respawn keeps the session id); a
                # channel that names no launch (an older fleet) is taken at its word, as before
                ours = row is not None and row.launch in (None, self._launches.get(rep.pane_id))
                if row and fresh and ours and row.session_id == rep.session_id and not rep.ready:
                    rep.ready, rep.why = True, "channel connected"
                    waiting.pop(name, None)
                    if name in accepted:
                        rep.route = ROUTE_CHANNEL
                    if name in accepted or not _offers_channel(rep):
                        del pending[name]
                    else:
                        verdicts[name] = time.monotonic() + VERDICT_WAIT
                elif not look:
                    continue
                elif rep.ready:
                    screen = screens.get(rep.pane_id, [])
                    found = dialogs.find(screen)
                    if dialogs.shows(screen, NO_CHANNELS):
                        self._no_channels(rep)
                        del pending[name]
                    elif found and found.dialog is dialogs.DEV_CHANNELS and name not in accepted:
                        if self._press(rep.pane_id, screen, found.dialog, keys):
                            accepted.add(name)
                            rep.route = ROUTE_CHANNEL
                            del pending[name]
                    elif time.monotonic() >= verdicts[name]:
                        self._no_channels(rep)  # no warning: Claude Code will not load the channel
                        del pending[name]
                elif pane is None or pane.dead:
                    why = self._death(rep.pane_id, pane, dead_since.setdefault(name, time.monotonic()))
                    if why:
                        rep.why = why
                        waiting.pop(name, None)
                        del pending[name]
                else:
                    screen = screens.get(rep.pane_id, [])
                    found = dialogs.find(screen)
                    waiting.pop(name, None)
                    if found is None:
                        continue
                    answers = found.dialog.accept and (found.dialog is not dialogs.TRUST or self.trust)
                    count, last, at = keys.get(rep.pane_id, (0, "", 0.0))
                    if answers and count < PRESSES:
                        if self._press(rep.pane_id, screen, found.dialog, keys) and (
                            found.dialog is dialogs.DEV_CHANNELS
                        ):
                            accepted.add(name)
                    elif answers and time.monotonic() - at < PRESS_AGAIN[last]:
                        pass  # the last key spent: a moment for it to take effect before giving up
                    else:  # the operator's to answer, and no dialog goes away by itself: said at once
                        waiting[name] = found
                        del pending[name]
            due = [at + PRESS_AGAIN[key] for _n, key, at in keys.values() if at >= round_at]
            if due:  # a key pressed at a dialog just now: its screen again once it may have been redrawn
                look_at = min(look_at, max(due))
            if pending:
                time.sleep(max(0.0, min(delay, look_at - time.monotonic())))
                delay = min(delay * 2, 0.5)
        for name, rep in pending.items():
            if rep.ready:
                continue
            found = waiting.get(name) or dialogs.find(self._screen(rep.pane_id))
            if found is not None:
                waiting[name] = found
            else:
                rep.why = f"not connected after {self.ready_timeout:g}s: attach to see its screen"
        for name, found in waiting.items():
            rep = next(r for r in reports if r.participant == name)
            rep.ready = False
            rep.why = waiting_why(found, wave.name)
        self._flag_windows(reports, waiting)

    def _press(
        self, pane_id: str, screen: list[str], dialog: dialogs.Dialog, keys: dict[str, tuple[int, str, float]]
    ) -> bool:
        """One key toward accepting ``dialog``: Enter once its accepting option has the focus, else
        Down or Up toward it; none while the last key may not have been drawn yet
        (:data:`PRESS_AGAIN`), nor before the focus is drawn, nor once :data:`PRESSES` were spent.
        True when Enter was pressed."""
        count, last, at = keys.get(pane_id, (0, "", 0.0))
        now = time.monotonic()
        if (last and now - at < PRESS_AGAIN[last]) or count >= PRESSES:
            return False
        key = dialogs.toward(screen, dialog.accept)
        if key is None:
            return False
        self.tmux.send_key(pane_id, key)
        keys[pane_id] = (count + 1, key, now)
        return key == "Enter"

    def _screen(self, pane_id: str) -> list[str]:
        try:
            return self.tmux.capture(pane_id)
        except errors.FleetError:  # the pane is gone: nothing on its screen
            return []

    def _flag_windows(self, reports: list[PaneReport], waiting: dict[str, dialogs.Found]) -> None:
        """Flag each window of ``reports`` whose pane was left at a dialog, or where another live
        pane shows one (launched earlier); unflag (of a dialog) the rest."""
        panes = self.tmux.panes()
        window_of = {p.pane_id: p.window_id for p in panes}
        flags: dict[str, str | None] = {}
        for rep in reports:
            window = window_of.get(rep.pane_id)
            if window is not None:
                found = waiting.get(rep.participant)
                flags[window] = flags.get(window) or (found.first_line if found else None)
        mine = {r.pane_id for r in reports}
        for p in panes:
            if p.window_id in flags and flags[p.window_id] is None and p.alive and p.pane_id not in mine:
                flags[p.window_id] = dialogs.pane_dialog(self.tmux, p.pane_id)
        for window, first_line in flags.items():
            dialogs.flag(self.tmux, window, first_line)

    @staticmethod
    def _no_channels(rep: PaneReport) -> None:
        """Claude Code has no channels here: the hook wakes this session, or nothing does."""
        if " watch --hook " in " ".join(rep.argv):
            rep.route = ROUTE_HOOK
            return
        rep.route = "channels unavailable here and no hook installed"
        rep.ready = False
        rep.why = (
            "nothing can wake this session: Claude Code has no channels here (research preview) and "
            "--transport channel installs no hook; spawn with --transport auto (the default) or hook"
        )

    def _death(self, pane_id: str, pane: PaneInfo | None, since: float) -> str:
        """Why a dead pane's agent stopped (status and last lines), or '' while tmux settles it.

        tmux may mark a pane dead (its pty closed) a moment before it records the exit status, and
        under load sometimes only its "Pane is dead (status N …)" line carries the status.
        """
        if pane is None:
            return "the pane is gone (killed, or its window was closed)"
        lines = [ln for ln in self.tmux.capture(pane_id, history=True) if ln.strip()]
        status: str | None = str(pane.dead_status) if pane.dead_status is not None else None
        if status is None and pane.pid:
            status = zombie_status(pane.pid)
        for ln in reversed(lines):
            m = DEAD_LINE.search(ln)
            if m and status is None:
                status = m[1] or f"signal {m[2]}"
        if status is None and time.monotonic() - since < 2.0:
            return ""
        tail = [ln for ln in lines if not DEAD_LINE.search(ln)][-5:]
        return f"the agent exited with status {status or 'unknown'}" + (
            ": " + " | ".join(tail) if tail else ""
        )


def _offers_channel(rep: PaneReport) -> bool:
    """A pane whose channels verdict is worth waiting for (Claude Code with the development channel)."""
    return bool(rep.argv) and kind_of(rep.argv).offers_channel(rep.argv)


def _layout_named(name: str, paths: Paths) -> Layout:
    """The recorded layout (a name, or the path of a layout file), or the default one if it is gone
    (a respawn must not fail on that)."""
    try:
        return load_layout(name or DEFAULT_LAYOUT, paths)
    except errors.FleetError:
        return load_layout(DEFAULT_LAYOUT, paths)


def waiting_why(found: dialogs.Found, wave: str) -> str:
    """A report's ``why`` for a pane left at a dialog: its first line and what to do."""
    remedy = f", {found.dialog.remedy}" if found.dialog.remedy else ""
    return f"waiting at a dialog: {found.first_line}: attach and answer it (`{attach_hint(wave)}`){remedy}"


def attach_hint(wave: str) -> str:
    sock = os.environ.get("FLEET_TMUX_SOCKET")
    prefix = f"FLEET_TMUX_SOCKET={shlex.quote(sock)} " if sock else ""
    return f"{prefix}fleet attach {wave}"
