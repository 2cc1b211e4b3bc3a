"""The built-in features on the core's seams (:mod:`fleet.seams`): the one place that names them.

Each entry is named, not imported (``"module:attribute"``, the form of a package entry point): a
feature's module is imported the first time the core reaches its seam, and a feature imported
before that plugs itself in under the same name (each feature's module adds its own entries at
import, so an in-process user — the resident's dispatch spawning from a channel — gets them too).
So the core never imports a feature (tests/test_architecture.py), and a short-lived process loads
only what it reaches: ``fleet post`` no feature at all, a channel budgets once its engine starts
(and the resident's dispatch only when a fork asks to spawn).

The agent kinds (:data:`fleet.seams.agent_kinds`: claude, codex, the stand-in) are not features:
spawn cannot launch a pane without one, so :mod:`fleet.agents` names the built-ins itself, lazily,
in the same ``"module:attribute"`` form.

The CLI calls :func:`load` before any command; the channel's entry point :func:`load_channel`.
Summaries and campaigns plug into no seam: the CLI makes them and hands them to the core (the
summary writer is a supervisor's watcher) or calls them itself.
"""

from __future__ import annotations

from fleet import seams


def load_channel() -> None:
    """What plugs into the channel: budgets' hold-back, the resident's worker per forked wavelet
    and its attention (the delivery policy ``resident``)."""
    seams.hold_backs.lazy("fleet.budgets", "fleet.budgets:hold_back")
    seams.policies.lazy("resident", "fleet.resident.attention:policy")
    seams.fork_spawners.lazy("fleet.resident.plug", "fleet.resident.plug:fork_spawner")


def load() -> None:
    """Every built-in: the channel's, spawn's prompt parts (the resident), settings hooks
    (permissions), checks (budgets) and workspaces (worktrees), the status columns, and the
    daemon's memory pen (the resident's MEMORY.md)."""
    load_channel()
    seams.prompt_parts.lazy("fleet.resident.plug", "fleet.resident.plug:prompt_part")
    seams.launch_settings.lazy("fleet.permissions", "fleet.permissions:settings")
    seams.spawn_checks.lazy("fleet.budgets", "fleet.budgets:before_spawn")
    seams.workspaces.lazy("fleet.worktrees", "fleet.worktrees:planner")
    seams.memory_pens.lazy("fleet.resident.memory", "fleet.resident.memory:pen")
    for name in ("fleet.worktrees", "fleet.usage", "fleet.budgets"):
        seams.status_columns.lazy(name, f"{name}:StatusColumns")
