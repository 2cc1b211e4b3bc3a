"""The keeper: the resident's deadlines and its failure rule, one :meth:`Keeper.step` at a time.

``fleet supervise WAVE`` runs it beside its respawn ladder (the listener's supervisor half, in the
seed's words). Nothing here polls a model: each step reads the store, tmux and the appended tail of
the mind's transcript, and only a due deadline opens a turn. What a caller may rely on:

- **Failure is a dead process.** Three consecutive failed turns (API errors in the transcript) end
  the mind's process; its pane stays (dead) and the supervisor's ladder revives it with
  ``--resume``. A system blip says so.
- **Heartbeat, only with work in flight** (GOAL.md ``heartbeat: in-flight``, the default): after
  ``heartbeat_every`` (5 min) with the mind idle, nothing new for it, and at least one of its
  workers running, one turn carrying the in-flight fold (each worker: wavelet, status, last blip,
  age). ``always``: every quiet interval; ``off``: never. At most ``heartbeat_budget`` a UTC day;
  the spent budget is said once that day in a system blip.
- **Crons are deadlines**: GOAL.md is re-read at every step (a bad one keeps the last good schedule
  and is reported once); an occurrence since the last look opens a turn "cron due: <flow> —
  dispatch it" when the mind is idle, or at its turn's end; one older than 24 h is missed, not
  replayed.
- **The janitor**: a turn whose transcript has not grown for GOAL.md's ``turn_stall`` (15 min by
  default; ``off`` disables it) is interrupted as ``fleet resident interrupt`` does it — Escape,
  then past 10 s the force-close and resume (:mod:`fleet.resident.interrupt`) — unless the mind
  waits on a person (a permission prompt or a dialog, as its channel reports). The interrupt's
  system blip says the janitor did it, why, and which stage ended the turn. One try per stall. A
  mind whose kind holds its wakes after an Escape until a line is typed (Codex) gets a line saying
  why as its next turn, so the operator's blips reach it again.
- Every heartbeat, cron and miss is a ``system`` blip in the wave's root wavelet (provenance); the
  turn itself is opened by putting the line, prefixed ``[fleet]``, to the mind its kind's way
  (:meth:`fleet.agents.Kind.enter`: typed into a Claude Code pane, ``codex queue`` for a Codex
  mind; system blips alone never wake a session).

The keeper's own state (when it last looked at the crons, the day's heartbeat count) is a small
JSON file in the wave's resident state dir, so a restarted supervisor neither replays nor skips.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from fleet import errors
from fleet.client import Client
from fleet.models import Blip, Wave
from fleet.paths import Paths, read_utf8, write_private
from fleet.resident import RESIDENT, goal, state_dir
from fleet.resident.interrupt import one_line
from fleet.resident.mind import Mind, MindReader
from fleet.resident.seat import (
    FAILED_TURNS,
    Worker,
    WorkerFold,
    _ts,
    mind_of,
    reseat,
    resident_pane,
    workers,
)
from fleet.spawn import PaneReport, Spawner
from fleet.tmux import Tmux

log = logging.getLogger(__name__)

MISSED_AFTER = 24 * 3600.0
"""An occurrence older than this when first seen is missed, not replayed."""
PREFIX = "[fleet] "

KeeperKind = Literal["heartbeat", "budget", "cron", "missed", "failed", "goal", "janitor", "state"]
"""``state``: a file of the resident's that was edited into something that does not load."""


class KeeperEvent(BaseModel):
    kind: KeeperKind
    text: str


class KeeperState(BaseModel):
    cron_seen: float
    """Unix time of the last look at the crons: occurrences after it are new."""
    day: str = ""
    heartbeats: int = 0
    """Heartbeats on ``day`` (UTC)."""
    budget_said: str = ""
    """The day (UTC) the spent heartbeat budget was reported in a system blip (once a day)."""


def fold_text(ws: list[Worker]) -> str:
    running = [w for w in ws if w.status == "running"]
    if not running:
        return "no workers in flight"
    lines = [f"{w.wavelet}: {w.status}, last: {w.last_blip or '(nothing yet)'}, {w.age_seconds:.0f}s ago"
             for w in running]  # fmt: skip
    return f"{len(running)} in flight — " + "; ".join(lines)


class Keeper:
    """One wave's resident scheduler (see the module docstring). ``clock``: Unix time, injectable.

    A supervisor's watcher (:class:`fleet.seams.Watcher`) keeping the participant ``resident``."""

    keeps = RESIDENT

    def __init__(
        self,
        client: Client,
        tmux: Tmux,
        paths: Paths,
        wave: Wave,
        *,
        clock: Callable[[], float] = time.time,
        env: Mapping[str, str] | None = None,
        spawner: Spawner | None = None,
    ) -> None:
        self.client, self.tmux, self.paths, self.wave = client, tmux, paths, wave
        self.spawner = spawner
        """What the janitor's force-close resumes the session with (None: no janitor)."""
        self.progress_offset = -1
        self.progress_at = clock()
        """The transcript's size when the keeper last saw it grow, and when (the janitor's measure)."""
        self.clock = clock
        self.env = env
        self.reader: MindReader | None = None
        self.mind: Mind | None = None
        """The agent running the mind (read with the reader, from the layout its start wrote)."""
        self.unknown = ""
        """Why the mind cannot be told (its layout broken by hand), as said once; empty once it can."""
        self.goal = goal.Goal()
        self.goal_problem = ""
        self.quiet_since = clock()
        self.failed_at_turn: int | None = None
        self.turns_seen = 0
        self.completed_turn = False
        """Set by :meth:`step` when the mind completed a turn since the last step (resets the ladder)."""
        self.nothing_at: float | None = None
        """The quiet period (its ``quiet_since``) whose heartbeat fell due with nothing in flight: no
        deadline until something changes (a blip wakes the supervisor, its tick looks again)."""
        self.state_file = state_dir(paths, wave.id) / "keeper.json"
        self.lost = ""
        """What a keeper.json that did not load was (said once by the next :meth:`step`)."""
        self.state = self._load_state()
        self.fold = WorkerFold()
        """The resident's workers, folded from the pages the supervisor feeds :meth:`step`."""
        self.fed = False
        """The last step was fed a page (its ``after`` given): the fold is as fresh as the feeder."""

    # ------------------------------------------------------------ state

    def _load_state(self) -> KeeperState:
        """What the keeper counted (keeper.json); none yet: from now. One that is there but does not
        load (edited by hand) is counted afresh too, and :meth:`step` says so once (:attr:`lost`)."""
        try:
            data = self.state_file.read_bytes()
        except FileNotFoundError:
            return KeeperState(cron_seen=self.clock())
        except OSError as exc:
            why = exc.strerror or str(exc)
        else:
            try:
                return KeeperState.model_validate_json(data)
            except ValueError as exc:  # (not UTF-8 text included)
                why = str(exc).splitlines()[0]
        self.lost = (
            f"the keeper's state {self.state_file} did not load ({why}): counted afresh from now —"
            " today's heartbeats from 0, crons due from now (one due meanwhile is not run)"
        )
        return KeeperState(cron_seen=self.clock())

    def _save(self) -> None:
        write_private(self.state_file, self.state.model_dump_json() + "\n")

    def _origin(self) -> Path | None:
        try:
            return Path(read_utf8(state_dir(self.paths, self.wave.id) / "origin").strip())
        except OSError:
            return None

    def _read_goal(self, events: list[KeeperEvent]) -> None:
        origin = self._origin()
        if origin is None:
            return
        try:
            self.goal = goal.load(origin / "wave" / self.wave.name / "GOAL.md")
            self.goal_problem = ""
        except goal.GoalError as exc:
            if exc.message != self.goal_problem:
                self.goal_problem = exc.message
                events.append(
                    self._say("goal", f"GOAL.md is not valid, keeping the last good schedule: {exc.message}")
                )

    # ------------------------------------------------------------ acts

    def _say(self, kind: KeeperKind, text: str) -> KeeperEvent:
        try:
            self.client.post_system(self.wave.root_id, f"resident: {text}")
        except errors.DaemonUnreachable:
            raise
        except errors.FleetError as exc:
            log.warning("could not post %r: %s", text, exc)
        return KeeperEvent(kind=kind, text=text)

    def _type(self, pane_id: str, text: str) -> None:
        """Open the mind's next turn with ``text`` (a heartbeat, crons due), its kind's way."""
        assert self.mind is not None and self.reader is not None
        try:
            self.mind.enter(self.tmux, pane_id, self.reader.session_id, one_line(PREFIX + text))
        except errors.FleetError as exc:  # (its system blip says what was due)
            log.warning("could not open the mind's turn: %s", exc.message)
            self._say("failed", f"could not open the mind's turn ({text[:80]}): {exc.message}")

    # ------------------------------------------------------------ the step

    def step(self, blips: list[Blip], after: str | None = None) -> list[KeeperEvent]:
        """One look: failure, crons, heartbeat. ``blips``: what the supervisor read since its last
        step (anything for the mind resets its quiet time), read after the id ``after``: the page
        goes into the worker fold, so the heartbeat never reads the wave again. ``after`` None: the
        caller feeds no pages, and the fold reads what is new itself when the heartbeat needs it."""
        self.fed = after is not None
        if after is not None:
            self.fold.feed(blips, after)
        events: list[KeeperEvent] = []
        self.completed_turn = False
        now = self.clock()
        seat = self.client.seat(self.wave.id)
        if seat is None or seat.closed_at is not None:
            self.reader = None
            return events
        if self.reader is None or self.reader.session_id != seat.session_id:
            try:
                self.mind = mind_of(self.paths, self.wave, self.env)
            except errors.CorruptState as exc:  # its turns cannot be read: nothing is due on a guess
                if self.unknown != exc.message:  # said once, not every round
                    self.unknown = exc.message
                    events.append(self._say("state", exc.message))
                return events
            self.unknown = ""
            self.reader = self.mind.reader(seat.session_id)
            self.turns_seen = self.reader.read().turns
            self.quiet_since = now
        fold = self.reader.read()
        if fold.turns > self.turns_seen:
            self.completed_turn = True
            self.turns_seen = fold.turns
        if fold.turning or any(b.author != RESIDENT and b.kind != "system" for b in blips):
            self.quiet_since = now
        elif fold.last_end is not None:
            self.quiet_since = max(self.quiet_since, fold.last_end)
        pane = resident_pane(self.tmux, self.wave.id)
        if pane is None or pane.dead:
            return events  # the supervisor's ladder has it
        failed = fold.failed_since(_ts(seat.claimed_at))  # a revived mind starts afresh
        if failed >= FAILED_TURNS:
            if self.failed_at_turn != fold.failed_total:
                self.failed_at_turn = fold.failed_total
                if pane.pid:
                    try:
                        os.kill(pane.pid, signal.SIGTERM)
                    except OSError as exc:
                        log.warning("could not end the failed resident (pid %s): %s", pane.pid, exc)
                events.append(
                    self._say(
                        "failed",
                        f"failed: its last {failed} turns failed ({fold.last_error}); its"
                        " process was ended and `fleet supervise` revives it on the ladder (an operator"
                        " blip does at once)",
                    )
                )
            return events
        if self.lost:
            events.append(self._say("state", self.lost))
            self.lost = ""
            self._save()  # counted afresh: what is said once is written so
        self._read_goal(events)
        if self._janitor(now, fold.turning, events):
            return events
        idle = not fold.turning
        events += self._crons(now, idle, pane.pane_id)
        if idle:
            events += self._heartbeat(now, pane.pane_id)
        return events

    def _janitor(self, now: float, turning: bool, events: list[KeeperEvent]) -> bool:
        """Interrupt a turn with no transcript progress for ``turn_stall``; True when it did."""
        assert self.reader is not None
        stall = self.goal.turn_stall
        if not turning or self.reader.offset != self.progress_offset:
            self.progress_offset, self.progress_at = self.reader.offset, now
            return False
        if stall is None or now - self.progress_at < stall or self.spawner is None:
            return False
        seen = next((p for p in self.client.presence(self.wave.id) if p.participant == RESIDENT), None)
        if seen is not None and seen.agent is not None and seen.agent.kind in ("permission", "dialog"):
            return False  # it waits on a person, not a hang
        from fleet.resident.interrupt import interrupt

        quiet = now - self.progress_at
        self.progress_at = now  # one try per stall bound, whatever comes of it
        who = f"the keeper's janitor (no transcript progress for {quiet:.0f}s, GOAL.md turn_stall {stall:g}s)"
        # a mind that takes no wake after an Escape until a line is typed (Codex) is told why at once
        told = PREFIX + f"{who} ended your turn: carry on with what is due" if self._held() else ""
        try:
            report = interrupt(
                self.client, self.spawner, self.paths, self.wave.id, told, who=who, reader=self.reader
            )
        except errors.DaemonUnreachable:
            raise
        except errors.FleetError as exc:  # (its system blip is posted)
            events.append(KeeperEvent(kind="janitor", text=exc.message))
            return True
        self.progress_offset = self.reader.offset
        events.append(KeeperEvent(kind="janitor", text=report.text))
        return True

    def _held(self) -> bool:
        """Whether the mind's kind holds its wakes after an Escape until a line is typed (Codex)."""
        return self.mind is not None and bool(self.mind.kind.after_interrupt)

    def _crons(self, now: float, idle: bool, pane_id: str) -> list[KeeperEvent]:
        if not idle:
            return []  # due dates wait for the turn's end: the next look sees them
        events: list[KeeperEvent] = []
        seen = datetime.fromtimestamp(self.state.cron_seen, UTC) + timedelta(microseconds=1)
        at = datetime.fromtimestamp(now, UTC)
        due: list[str] = []
        for entry in self.goal.crons:
            occurrence = entry.schedule.last_at_or_before(at, seen)
            if occurrence is None:
                continue
            when = occurrence.strftime("%Y-%m-%d %H:%M UTC")
            if now - occurrence.timestamp() > MISSED_AFTER:
                events.append(
                    self._say(
                        "missed",
                        f"cron missed: {entry.flow} was due at {when}, more than 24 h ago; not replayed",
                    )
                )
            else:
                events.append(self._say("cron", f"cron due: {entry.flow} — dispatch it (due at {when})"))
                due.append(entry.flow)
        self.state.cron_seen = now
        self._save()
        if due:
            self._type(pane_id, "; ".join(f"cron due: {flow} — dispatch it" for flow in due))
            self.quiet_since = now
        return events

    def _heartbeat(self, now: float, pane_id: str) -> list[KeeperEvent]:
        g = self.goal
        if g.heartbeat == "off" or now - self.quiet_since < g.heartbeat_every:
            return []
        ws = self.workers(self.client.get_wave(self.wave.id), now)
        running = [w for w in ws if w.status == "running"]
        if g.heartbeat == "in-flight" and not running:
            self.nothing_at = self.quiet_since
            return []
        self.nothing_at = None
        day = _day(now)
        if self.state.day != day:
            self.state.day, self.state.heartbeats = day, 0
        if self.state.heartbeats >= g.heartbeat_budget:
            if self.state.budget_said == day:
                return []
            self.state.budget_said = day
            self._save()
            return [
                self._say(
                    "budget",
                    f"heartbeat budget spent: {self.state.heartbeats} of {g.heartbeat_budget} today"
                    " (GOAL.md heartbeat_budget); no more heartbeats until 00:00 UTC",
                )
            ]
        self.state.heartbeats += 1
        self._save()
        self.quiet_since = now
        text = f"heartbeat: {fold_text(ws)}; check on them and dispatch the next step"
        event = self._say("heartbeat", text)
        self._type(pane_id, text)
        return [event]

    def workers(self, wave: Wave, now: float | None = None) -> list[Worker]:
        """The resident's workers, from the fold: read on from where it stands only when it was not
        fed the supervisor's pages up to now (a step without ``after``, or a gap)."""
        if not self.fed:
            self.fold.complete = False  # nobody feeds it: what came since is read here
        return workers(self.client, wave, self.fold, now)

    def revived(self, report: PaneReport) -> None:
        """The supervisor brought the mind back: the seat follows the new process."""
        reseat(self.client, self.tmux, self.client.get_wave(self.wave.id), report)
        self.failed_at_turn = None

    def next_due_in(self) -> float | None:
        """Seconds until the heartbeat could fall due. None: no deadline (it is off, or it fell due
        with nothing in flight and nothing has changed since); the day's budget spent: until the
        next UTC day."""
        g, now = self.goal, self.clock()
        if g.heartbeat == "off" or self.nothing_at == self.quiet_since:
            return None
        if self.state.day == _day(now) and self.state.heartbeats >= g.heartbeat_budget:
            midnight = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
            return (midnight + timedelta(days=1)).timestamp() - now
        return max(0.0, self.quiet_since + g.heartbeat_every - now)


def _day(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d")


def write_state(paths: Paths, wave_id: str, cron_seen: float) -> None:
    """Set when the keeper last looked at the crons (``fleet resident`` tools and tests)."""
    write_private(state_dir(paths, wave_id) / "keeper.json", json.dumps({"cron_seen": cron_seen}) + "\n")
