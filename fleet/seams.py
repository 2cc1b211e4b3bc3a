"""The extension points the core declares, and the features that plug into them (docs/design.md, "Seams").

The core (store, daemon, client, delivery, channel, spawn, supervise, models, layouts, tmux) never
imports a feature (budgets, usage, worktrees, summaries, permissions, resident, campaigns); each
feature appends its entries here when its module is imported, and one place imports the built-in
features (:mod:`fleet.features`, called by the CLI and the channel's entry point). A third-party
feature would plug in the same way — the habit of llm, whose built-in commands register through the
same hook specs as its plugins — without pluggy: a seam is a typed list the core iterates, in the
order features were loaded.

========================  ========================================  ===========================
seam                      the core calls it                         plugged in by
========================  ========================================  ===========================
:data:`prompt_parts`      spawn, building a Claude session's        the resident (its operating
                          system prompt after the channel's          prompt, for ``resident``)
                          instructions
:data:`launch_settings`   spawn, building a Claude session's        permissions (the
                          ``--settings`` hooks                      PermissionRequest hook)
:data:`spawn_checks`      spawn, before any pane is made            budgets (a cost budget over
                          (a refusal leaves nothing made)           an unpriced model; the
                                                                    layout's budgets recorded)
:data:`workspaces`        spawn, for a profile that asks for a      worktrees (a git worktree
                          worktree, before any pane is made          per participant or wave)
:data:`hold_backs`        the channel, per delivery: wavelets       budgets (the watch)
                          whose blips are held, not dropped
:data:`fork_spawners`     the channel's ``wavelet_fork`` tool,      the resident (a worker per
                          when it is asked to ``spawn``             forked wavelet)
:data:`status_columns`    ``fleet status`` (and the console),       worktrees, usage, budgets
                          each row's feature columns
:class:`Watcher`          the supervisor, each round, with the      the resident's keeper, the
                          round's blips (given by its maker)        summary writer
========================  ========================================  ===========================

What a caller may rely on: a seam with no entry changes nothing (the core runs as if the feature
were absent: no hook, no hold, no prompt part); an entry's exception is the caller's to name (the
core does not swallow a feature's refusal: a spawn check's :class:`~fleet.errors.UsageError` stops the
spawn before anything is made). Registering twice under the same name replaces (a reloaded module
does not run twice).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

if TYPE_CHECKING:
    from fleet.client import Client
    from fleet.delivery.frames import Frame
    from fleet.layouts import Layout, ResolvedProfile
    from fleet.models import Blip, SessionRecord, Wave, Wavelet
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
        the core iterates the seam: a feature whose module is costly to import (pydantic) is not
        loaded by a process that never reaches the seam (``fleet post``)."""
        self._entries[name] = target

    def remove(self, name: str) -> None:
        self._entries.pop(name, None)

    def names(self) -> list[str]:
        return list(self._entries)

    def __iter__(self) -> Iterator[T]:
        for name, entry in list(self._entries.items()):
            if isinstance(entry, str):
                module, _, attr = entry.partition(":")
                entry = self._entries[name] = getattr(importlib.import_module(module), attr)
            yield cast(T, entry)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Seam({self.what!r}, {self.names()})"


# ---------------------------------------------------------------- spawn


@dataclass(frozen=True)
class Launch:
    """One Claude session about to be launched in a pane: what a prompt part or a settings hook may read."""

    paths: Paths
    base_url: str
    wave: Wave
    wavelet: Wavelet
    participant: str
    token_file: Path
    """The participant's token (mode 0600), for a hook that calls the daemon as it."""
    notify: bool = False
    """The participant's layout asks for desktop notifications."""


PromptPart = Callable[[Launch], str]
"""Text appended to the session's system prompt (``""``: nothing), after the channel's instructions."""

SettingsHook = Callable[[Launch], "dict[str, list[dict[str, Any]]] | None"]
"""Claude Code ``--settings`` hooks for the session (merged with the others), or None."""


class SpawnCheck(Protocol):
    """Run by :meth:`fleet.spawn.Spawner.spawn` once the roster is known, before any window or pane
    is made: raise a :class:`~fleet.errors.FleetError` to refuse the spawn (nothing is made)."""

    def __call__(
        self, client: Client, paths: Paths, wave: Wave, wavelet: Wavelet, layout: Layout, roster: list[str]
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


prompt_parts: Seam[PromptPart] = Seam("spawn: system prompt parts")
launch_settings: Seam[SettingsHook] = Seam("spawn: settings hooks")
spawn_checks: Seam[SpawnCheck] = Seam("spawn: checks before anything is made")
workspaces: Seam[WorkspacePlanner] = Seam("spawn: where a pane works (a worktree)")


# ---------------------------------------------------------------- the channel


@dataclass(frozen=True)
class Participant:
    """The channel's participant, as a hold-back is made for it."""

    client: Callable[[], Client]
    wave: str
    participant: str
    session_id: str
    paths: Paths
    notify: Callable[[Frame], object]
    """Hands one notice to the participant on the route that wakes it."""


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


@dataclass(frozen=True)
class StatusRead:
    """One ``fleet status`` read of a wave, as a feature's columns are made for it."""

    client: Client
    paths: Paths
    wave: Wave
    records: dict[str, SessionRecord]
    """The wave's recorded sessions by participant."""


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


def first(seam: Seam[T]) -> T | None:
    """The first entry of a seam that takes one provider (:data:`fork_spawners`), or None."""
    return next(iter(seam), None)
