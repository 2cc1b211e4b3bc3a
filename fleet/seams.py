"""The extension points the core declares, which the features plug into (docs/design.md §8).

The core (store, daemon, client, delivery, channel, watch, spawn, supervise, models, layouts, tmux)
imports no feature (budgets, usage, worktrees, summaries, permissions, resident, campaigns:
tests/test_architecture.py). A feature adds its entries to a seam when its module is imported, and
:mod:`fleet.features` names the built-ins (:meth:`Seam.lazy`, imported when the core first
reaches the seam: the CLI names them all, the channel its own three). A third-party feature would
plug in the same way — llm's habit, whose built-in plugins register through the same hook specs as
the others — without pluggy: a seam is a typed, named list the core iterates in order.

Spawn: :data:`agent_kinds` (claude, codex, the stand-in: :mod:`fleet.agents`), :data:`prompt_parts`
(the resident's prompt), :data:`launch_settings` (the permission hook),
:data:`spawn_checks` (budgets), :data:`workspaces` (worktrees). The channel: :data:`hold_backs`
(budgets' watch; ``fleet watch --hook`` too), :data:`fork_spawners` (the resident's workers).
The delivery engine: :data:`policies` (the resident's attention). ``fleet status``:
:data:`status_columns` (worktrees, usage, budgets). The daemon: :data:`memory_pens` (the
resident's MEMORY.md, the file side of the memory routes). The supervisor takes its
:class:`Watcher` list from whoever makes it (the resident's keeper, the summary writer), and
:func:`fleet.supervise.kill` its ``Pruner`` (worktrees) the same way.

What a caller may rely on: a seam with no entry changes nothing (no hook, no hold, no prompt part,
no column) — except :data:`workspaces`, where a profile asking for a worktree with no planner
loaded is refused, named, rather than run in the wrong folder, and :data:`memory_pens`, where the
memory routes answer 404 naming the missing feature. An entry's exception is the
caller's (a spawn check's :class:`~fleet.errors.UsageError` stops the spawn before anything is
made). Adding under a name already there replaces (a module imported twice does not plug in twice).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

if TYPE_CHECKING:
    from fleet.agents import Kind
    from fleet.client import Client
    from fleet.delivery.frames import Frame
    from fleet.delivery.rules import Rule
    from fleet.layouts import Layout, ResolvedProfile
    from fleet.models import Blip, MemoryOp, Seat, SessionRecord, Wave, Wavelet
    from fleet.paths import Paths
    from fleet.records.budgets import Budget
    from fleet.spawn import PaneReport

T = TypeVar("T")


class Seam(Generic[T]):
    """An ordered list of named entries: the core iterates it, features :meth:`add` to it."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._entries: dict[str, T | str] = {}

    def add(self, name: str, entry: T) -> T:
        """Plug ``entry`` in as ``name`` (the feature's module name, say); the same name again replaces."""
        self._entries[name] = entry
        return entry

    def lazy(self, name: str, target: str) -> None:
        """Plug in ``target`` (``"module:attribute"``, an entry point's form), imported the first time
        the core iterates the seam, so a process that never reaches the seam (``fleet post``) loads
        no feature. Nothing changes when ``name`` is plugged in already (its module was imported)."""
        self._entries.setdefault(name, target)

    def get(self, name: str) -> T | None:
        """The entry plugged in as ``name`` (imported now if it was named lazily), or None."""
        entry = self._entries.get(name)
        if isinstance(entry, str):
            module, _, attr = entry.partition(":")
            entry = self._entries[name] = getattr(importlib.import_module(module), attr)
        return cast("T | None", entry)

    def remove(self, name: str) -> None:
        self._entries.pop(name, None)

    def names(self) -> list[str]:
        return list(self._entries)

    def __iter__(self) -> Iterator[T]:
        for name in list(self._entries):
            yield cast(T, self.get(name))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Seam({self.what!r}, {self.names()})"


# ---------------------------------------------------------------- spawn


class Launch:
    """One Claude session about to be launched in a pane: what a prompt part or a settings hook may
    read. ``token_file``: the participant's token (mode 0600), for a hook that calls the daemon as
    it; ``notify``: its layout asks for desktop notifications."""

    # (plain classes, not dataclasses: the channel imports this module, and a dataclass costs ~0.5 ms)
    __slots__ = ("base_url", "notify", "participant", "paths", "token_file", "wave", "wavelet")

    def __init__(
        self,
        paths: Paths,
        base_url: str,
        wave: Wave,
        wavelet: Wavelet,
        participant: str,
        token_file: Path,
        notify: bool = False,
    ) -> None:
        self.paths, self.base_url, self.wave, self.wavelet = paths, base_url, wave, wavelet
        self.participant, self.token_file, self.notify = participant, token_file, notify


PromptPart = Callable[[Launch], str]
"""Text appended to the session's system prompt (``""``: nothing), after the channel's instructions."""

SettingsHook = Callable[[Launch], "dict[str, list[dict[str, Any]]] | None"]
"""Claude Code ``--settings`` hooks for the session (merged with the others), or None."""


class SpawnCheck(Protocol):
    """Run by :meth:`fleet.spawn.Spawner.spawn` once the roster is known, before any window or pane
    is made: raise a :class:`~fleet.errors.FleetError` to refuse the spawn (nothing is made)."""

    def __call__(
        self,
        client: Client,
        paths: Paths,
        wave: Wave,
        wavelet: Wavelet,
        layout: Layout,
        roster: list[str],
    ) -> None: ...


class Workspace(Protocol):
    """Where one or more panes work (a git worktree): planned before any pane exists, then made."""

    path: Path
    branch: str
    participants: list[str]
    """Who works in it (a wave's shared worktree is planned, and made, once)."""

    @property
    def cwd(self) -> Path:
        """Where the pane starts, inside :attr:`path`."""
        ...

    def make(self) -> str | None:
        """Make it ready (or reuse it); why it failed (its ``setup``'s output), or None."""
        ...


class WorkspacePlanner(Protocol):
    """The workspace of ``name``, whose profile asks for one (``worktree`` is not ``"none"``): reused
    from its recorded session's ``cwd`` on a respawn, else planned; raise a
    :class:`~fleet.errors.FleetError` to refuse the spawn before anything is made (not a repository,
    a branch taken). None: this planner makes none for it (the next one is asked)."""

    def __call__(
        self,
        wave: Wave,
        profile: ResolvedProfile,
        name: str,
        record: SessionRecord | None,
        facts: dict[tuple[str, ...], Any] | None,
    ) -> Workspace | None: ...


agent_kinds: Seam[Kind] = Seam("spawn: the CLIs a pane can run (claude, codex, the stand-in)")
"""The agent kinds (:mod:`fleet.agents`), asked in order which runs an agent command: the built-ins
are named by :mod:`fleet.agents` itself (spawn cannot launch anything without one, so they are the
core's, not features); a kind added here is asked before the generic command."""
prompt_parts: Seam[PromptPart] = Seam("spawn: system prompt parts")
launch_settings: Seam[SettingsHook] = Seam("spawn: settings hooks")
spawn_checks: Seam[SpawnCheck] = Seam("spawn: checks before anything is made")
workspaces: Seam[WorkspacePlanner] = Seam("spawn: where a pane works (a worktree)")


# ---------------------------------------------------------------- the channel


class Participant:
    """The channel's participant, as a hold-back is made for it. ``notify`` hands one notice to the
    participant on the route that wakes it."""

    __slots__ = ("client", "notify", "participant", "paths", "session_id", "wave")

    def __init__(
        self,
        client: Callable[[], Client],
        wave: str,
        participant: str,
        session_id: str,
        paths: Paths,
        notify: Callable[[Frame], object],
    ) -> None:
        self.client, self.wave, self.participant, self.session_id = client, wave, participant, session_id
        self.paths, self.notify = paths, notify


class HoldBack(Protocol):
    """Asked before each delivery: the wavelet ids (of ``labels``: id -> WAVE/WAVELET) whose blips
    are held now (not committed, handed out again once released). ``given``: what the feed answer
    carried for it (None: not carried, ask)."""

    def __call__(self, labels: Mapping[str, str], given: list[Budget] | None = None) -> frozenset[str]: ...

    def start(self) -> None:
        """Once, when the channel starts (before its first delivery)."""


HoldBackFactory = Callable[[Participant], "HoldBack | None"]
"""Makes the participant's hold-back, or None when it has nothing to hold (no session to measure)."""

hold_backs: Seam[HoldBackFactory] = Seam("channel: delivery hold-backs")


def hold_back_for(who: Participant) -> HoldBack | None:
    """The participant's hold-back: every feature's as one (a wavelet is held while any holds it),
    or None when none has anything to hold (the engine then asks nothing)."""
    made = [hb for factory in hold_backs if (hb := factory(who)) is not None]
    return made[0] if len(made) == 1 else (_Every(made) if made else None)


class _Every:
    def __init__(self, parts: list[HoldBack]) -> None:
        self.parts = parts

    def __call__(self, labels: Mapping[str, str], given: list[Budget] | None = None) -> frozenset[str]:
        return frozenset().union(*(hb(labels, given) for hb in self.parts))

    def start(self) -> None:
        for hb in self.parts:
            hb.start()


class ForkSpawn(Protocol):
    """A checked request to start a worker on a wavelet about to be forked."""

    def spawn(self, wavelet: Wavelet) -> str:
        """Start it on the forked ``wavelet``; the line the tool's answer adds."""
        ...


class ToolHost(Protocol):
    """What a channel tool's extension may use of the channel that serves it."""

    participant: str
    wave: str
    daemon: str
    session_id: str

    def client(self) -> Client: ...


ForkSpawner = Callable[[ToolHost, str, list[str]], ForkSpawn]
"""(the channel, the ``spawn`` argument, the fork's other members) -> a checked request; raises a
:class:`~fleet.errors.FleetError` to refuse before anything is forked."""

fork_spawners: Seam[ForkSpawner] = Seam("channel: wavelet_fork's spawn")


# ---------------------------------------------------------------- the delivery engine


class Policy(Protocol):
    """A variant of targeted attention, chosen by its name in :data:`policies` (``--attention NAME``,
    a profile's ``attention``): the delivery rules route each blip of others as targeted attention
    does (:func:`fleet.delivery.rules.route`), then ask the policy. Pure, as the rules are: it is
    called under the transport's lock on every blip."""

    def route(self, blip: Blip, participant: str, root: bool, rule: Rule) -> Rule:
        """The rule for ``blip`` (someone else's; ``root``: in the wave's root wavelet), given
        targeted attention's ``rule``. A :class:`~fleet.delivery.rules.Rule` whose ``full`` is
        True sends it in full; the routing log records the rule's name."""
        ...

    def holds(self, root: bool) -> bool:
        """Whether a wavelet's batch with digested blips and none in full waits, with no deadline,
        for a full blip there (or :data:`~fleet.delivery.rules.HOLD_MAX_LINES` digested ones, or
        the cap): chatter that never wakes the session alone. False: the digest hold's deadline."""
        ...

    def instructions(self, participant: str) -> str:
        """The paragraph the channel's instructions give the session on its attention."""
        ...


policies: Seam[Policy] = Seam("delivery: attention policies beyond full and targeted")


# ---------------------------------------------------------------- the supervisor


class WatchEvent(Protocol):
    """One thing a watcher did, posted like the supervisor's own acts."""

    @property
    def kind(self) -> str: ...

    @property
    def text(self) -> str: ...


class Watcher(Protocol):
    """Run by :class:`fleet.supervise.Supervisor` each round, after the panes, with the round's page
    of the wave's blips (the resident's keeper; the summary writer). Given to the supervisor by
    whoever makes it (``fleet supervise``): the supervisor imports none of them."""

    @property
    def keeps(self) -> str:
        """The participant it looks after (``""``: none): an operator blip brings it back at once,
        its events are that participant's, a turn it completed resets that one's respawn ladder,
        and it is told when that one is respawned (:meth:`revived`)."""
        ...

    @property
    def completed_turn(self) -> bool:
        """The last :meth:`step` saw its participant complete a turn."""
        ...

    def step(self, blips: list[Blip], after: str | None = None) -> Sequence[WatchEvent]:
        """One round; ``after``: the cursor the page was read after (None: not fed pages)."""
        ...

    def revived(self, report: PaneReport) -> None:
        """The supervisor respawned :attr:`keeps` (ready)."""
        ...

    def next_due_in(self) -> float | None:
        """Seconds until it wants a round whatever happens (a deadline), or None."""
        ...


class StatusRead:
    """One ``fleet status`` read of a wave, as a feature's columns are made for it (``records``: the
    wave's recorded sessions by participant)."""

    __slots__ = ("client", "paths", "records", "wave")

    def __init__(self, client: Client, paths: Paths, wave: Wave, records: dict[str, SessionRecord]) -> None:
        self.client, self.paths, self.wave, self.records = client, paths, wave, records


class StatusColumns(Protocol):
    """A feature's columns of :class:`fleet.supervise.StatusRow` (and fields of ``WaveStatus``)."""

    def row(self, wavelet: Wavelet, participant: str) -> Mapping[str, Any]:
        """The row's fields this feature fills (``worktree``, ``usage``, ``budget``...), by name."""
        ...

    def wave(self) -> Mapping[str, Any]:
        """The wave's fields this feature fills, once every row is made (``{}``: none)."""
        ...


StatusColumnsFactory = Callable[[StatusRead], StatusColumns]
status_columns: Seam[StatusColumnsFactory] = Seam("status: columns of a wave's rows")


# ---------------------------------------------------------------- the daemon


class MemoryPen(Protocol):
    """The file side of a wave's memory (``GET``/``POST /v1/waves/{wave}/memory``). The daemon's
    handlers check who may hold the pen (:mod:`fleet.store.access`, before any of this is called),
    ask the pen for the file and its text, and post the blip that records a write."""

    def file(self, seat: Seat, wave: str) -> Path:
        """Where ``wave``'s memory is, located by its resident's ``seat``; a
        :class:`~fleet.errors.FleetError` when this daemon cannot reach it (nothing changed)."""
        ...

    def read(self, path: Path) -> str:
        """What the memory holds (``""``: nothing written yet)."""
        ...

    def write(self, path: Path, op: MemoryOp, content: str) -> str:
        """Apply one write (one at a time per file, atomic) and return what the file now holds;
        a :class:`~fleet.errors.UsageError` for an empty ``content`` (nothing written)."""
        ...

    def note(
        self, op: MemoryOp, content: str, summary: str | None, wave: str, by_resident: bool, resident: str
    ) -> tuple[str, str]:
        """(the write's summary, the text of the blip recording it in the wave's root wavelet)."""
        ...


memory_pens: Seam[MemoryPen] = Seam("daemon: the wave's MEMORY.md")


def first(seam: Seam[T]) -> T | None:
    """The first entry of a seam that takes one provider (:data:`fork_spawners`), or None."""
    return next(iter(seam), None)
