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
:data:`hold_backs`        the channel, per delivery: wavelets       budgets (the watch)
                          whose blips are held, not dropped
:data:`fork_spawners`     the channel's ``wavelet_fork`` tool,      the resident (a worker per
                          when it is asked to ``spawn``             forked wavelet)
========================  ========================================  ===========================

What a caller may rely on: a seam with no entry changes nothing (the core runs as if the feature
were absent: no hook, no hold, no prompt part); an entry's exception is the caller's to name (the
core does not swallow a feature's refusal: a spawn check's :class:`~fleet.errors.UsageError` stops the
spawn before anything is made). Registering twice under the same name replaces (a reloaded module
does not run twice).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from fleet.client import Client
    from fleet.delivery.frames import Frame
    from fleet.layouts import Layout
    from fleet.models import Wave, Wavelet
    from fleet.paths import Paths
    from fleet.records.budgets import Budget

T = TypeVar("T")


class Seam(Generic[T]):
    """An ordered list of named entries: the core iterates it, features :meth:`add` to it."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        """Plug ``entry`` in as ``name`` (the feature's module name, say); the same name again replaces."""
        self._entries[name] = entry
        return entry

    def remove(self, name: str) -> None:
        self._entries.pop(name, None)

    def names(self) -> list[str]:
        return list(self._entries)

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._entries.values()))

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


prompt_parts: Seam[PromptPart] = Seam("spawn: system prompt parts")
launch_settings: Seam[SettingsHook] = Seam("spawn: settings hooks")
spawn_checks: Seam[SpawnCheck] = Seam("spawn: checks before anything is made")


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


def first(seam: Seam[T]) -> T | None:
    """The first entry of a seam that takes one provider (:data:`fork_spawners`), or None."""
    return next(iter(seam), None)
