"""Worktrees' records: what fleet status and ``fleet kill --prune`` show of a fleet worktree
(:mod:`fleet.worktrees` reads and prunes them)."""

from __future__ import annotations

from pydantic import BaseModel


class WorktreeState(BaseModel):
    """What ``fleet status`` shows of a fleet worktree."""

    path: str
    branch: str
    base: str
    ahead: int
    """Commits on the branch that its base commit does not have."""
    dirty: bool
    """Changes not committed (tracked, or untracked files other than the ones fleet copied in)."""


class Kept(BaseModel):
    path: str
    branch: str
    why: str
