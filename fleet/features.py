"""The built-in features, loaded onto the core's seams (:mod:`fleet.seams`).

Importing a feature's module plugs it in; this is the one place that imports them for that, so the
core never does (tests/test_architecture.py says so). The CLI loads every built-in (:func:`load`)
before it runs a command; the channel — one per agent, started with every session — loads only the
features that plug into it (:func:`load_channel`), none of the rest.

A feature that plugs into no seam (summaries, campaigns: the edges make them and hand them to the
core, or call them directly) needs no line here.
"""

from __future__ import annotations


def load_channel() -> None:
    """What plugs into the channel: budgets' hold-back, the resident's worker per forked wavelet."""
    import fleet.budgets
    import fleet.resident.plug  # noqa: F401


def load() -> None:
    """Every built-in feature with a seam entry: the channel's, and spawn's settings hooks
    (permissions), prompt parts (the resident), checks (budgets) and workspaces (worktrees), and
    the status columns (worktrees, usage, budgets)."""
    load_channel()
    import fleet.permissions  # noqa: F401
    from fleet import seams

    # named, not imported: usage and worktrees load pydantic, which `fleet post` never needs
    # (tests/test_startup.py); each is imported when the core first reaches its seam
    seams.workspaces.lazy("fleet.worktrees", "fleet.worktrees:planner")
    seams.status_columns.lazy("fleet.worktrees", "fleet.worktrees:StatusColumns")
    seams.status_columns.lazy("fleet.usage", "fleet.usage:StatusColumns")
