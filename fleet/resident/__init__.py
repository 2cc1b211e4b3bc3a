"""The resident: one long-lived mind per wave (docs/resident.md).

A Claude Code or Codex session (GOAL.md's ``mind:``) in its own tmux window, in the wave's sibling
git worktree ``<repo>.<wave>``, seeded from the wave's ``GOAL.md`` and ``MEMORY.md``, whose input is
the wave (operator blips and workers' reports through its channel), which dispatches workers rather
than grinding, is nudged by a heartbeat while work is in flight, opens turns on cron deadlines, and
is revived by ``fleet supervise`` when it fails. Its seat is recorded in the store: one brain per
wave.

Modules: :mod:`.goal` (GOAL.md and cron expressions), :mod:`.repo` (the origin repository and the
worktree), :mod:`.mind` (the mind's state from its record: a transcript or a rollout), :mod:`.seat`
(start, stop, status), :mod:`.keeper` (heartbeats, crons, failure; run by ``fleet supervise``).

This package's ``__init__`` stays light: :mod:`.plug` (the resident on the core's seams, loaded by
the channel) reads :func:`prompt_path` from it.
"""

from __future__ import annotations

from pathlib import Path

from fleet.paths import Paths

RESIDENT = "resident"
"""The participant name of every wave's mind."""
WINDOW_TAG = "resident"
"""The ``@fleet_wavelet`` of the resident's own window (its pane is tagged with the root wavelet),
so ``fleet spawn WAVE/main`` never puts panes in it."""


def state_dir(paths: Paths, wave_id: str) -> Path:
    """Where fleet keeps a wave's resident files (its layout, its prompt, the keeper's state)."""
    return paths.state / "resident" / wave_id


def prompt_path(paths: Paths, wave_id: str) -> Path:
    """The resident's operating prompt (GOAL.md, MEMORY.md, the discipline), rendered at start;
    spawn appends it to the system prompt of the wave's ``resident`` participant."""
    return state_dir(paths, wave_id) / "prompt.md"
