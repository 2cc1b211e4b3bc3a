"""The resident's place on disk: the origin repository, the wave's folder in it, the sibling worktree.

- The **origin repository** is the main checkout of the git repository the command runs in (from a
  linked worktree, its main checkout): GOAL.md and MEMORY.md live there, under ``wave/<name>/``.
- The **worktree** is ``<repo>.<wave>`` beside it, on branch ``wave/<wave>`` (made from HEAD the
  first time): the mind never runs in the main checkout.

Errors say what to do: not a git repository, a repository with no commit, a path in the way.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from fleet import errors


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise errors.ToolMissing("git is not installed or not on PATH: the resident needs git") from None


def origin(cwd: Path) -> Path:
    """The main checkout of the git repository ``cwd`` is in; UsageError when there is none."""
    done = _git(cwd, "rev-parse", "--path-format=absolute", "--git-common-dir")
    if done.returncode != 0:
        raise errors.UsageError(
            f"{cwd} is not in a git repository: the resident works in a worktree of the wave's"
            " repository; run `fleet resident start` inside it (or `git init` and commit first)"
        )
    common = Path(done.stdout.strip())
    return common.parent if common.name == ".git" else common


def wave_dir(repo: Path, wave: str) -> Path:
    """``<repo>/wave/<wave>``: GOAL.md and MEMORY.md."""
    return repo / "wave" / wave


def worktree(repo: Path, wave: str) -> Path:
    """``<repo>.<wave>``, made (``git worktree add``, branch ``wave/<wave>``) if it is not there."""
    path = repo.parent / f"{repo.name}.{wave}"
    listed = _git(repo, "worktree", "list", "--porcelain").stdout
    if any(line == f"worktree {path}" for line in listed.splitlines()):
        return path
    if path.exists():
        raise errors.Conflict(
            f"{path} exists and is not a worktree of {repo}: move it away, the resident's worktree goes there"
        )
    if _git(repo, "rev-parse", "--verify", "-q", "HEAD").returncode != 0:
        raise errors.UsageError(f"{repo} has no commit yet: commit something, a worktree is made from HEAD")
    branch = f"wave/{wave}"
    exists = _git(repo, "rev-parse", "--verify", "-q", f"refs/heads/{branch}").returncode == 0
    args = ["worktree", "add", str(path), branch] if exists else ["worktree", "add", "-b", branch, str(path)]
    done = _git(repo, *args)
    if done.returncode != 0:
        raise errors.FleetError(f"git worktree add {path} failed: {done.stderr.strip()}")
    return path
