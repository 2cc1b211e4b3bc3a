"""The built-in features, loaded onto the core's seams (:mod:`fleet.seams`).

Importing a feature's module plugs it in; this is the one place that imports them for that, so the
core never does (tests/test_architecture.py says so). The CLI loads every built-in (:func:`load`)
before it runs a command; the channel — one per agent, started with every session — loads only the
features that plug into it (:func:`load_channel`), none of the rest.

A feature that plugs into no seam (usage, worktrees, summaries, campaigns: the edges call them
directly) needs no line here.
"""

from __future__ import annotations


def load_channel() -> None:
    """What plugs into the channel: budgets' hold-back, the resident's worker per forked wavelet."""
    import fleet.budgets
    import fleet.resident.plug  # noqa: F401


def load() -> None:
    """Every built-in feature with a seam entry: the channel's, and spawn's settings hooks
    (permissions), prompt parts (the resident) and checks (budgets)."""
    load_channel()
    import fleet.permissions  # noqa: F401
