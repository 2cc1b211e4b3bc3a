"""Worktrees: a git worktree per participant (or one per wave), so agents never edit one checkout.

A layout profile's ``worktree`` (docs/worktrees.md) says where a participant's pane works:

- ``none`` (the default): its ``cwd``, as before;
- ``participant``: ``git worktree add <repo>.<wave>.<participant>`` on branch
  ``fleet/<wave>/<participant>``, from the checkout's ``HEAD`` (or the profile's ``base``);
- ``wave``: one worktree ``<repo>.<wave>`` on branch ``fleet/<wave>`` shared by every participant
  whose profile says ``wave``.

``<repo>`` is the top level of the git checkout holding the profile's ``cwd`` (else the spawning
process's); the pane starts at the same place inside the worktree as ``cwd`` is inside the checkout.

What a caller may rely on:

- :func:`plan` only reads (git queries) and raises a clear :class:`~fleet.errors.FleetError` for
  every refusal — not a git repository, a branch of that name taken (by another checkout, or
  existing without fleet's worktree), a path in the way, an unknown ``base``, uncommitted changes in
  the checkout a worktree would start from (``HEAD`` is all a worktree gets) — before anything is
  created. A worktree that already exists (a respawn, a second spawn) is reused as it is.
- :func:`create` makes one planned worktree. A failed ``git worktree add`` leaves no directory and no
  branch behind. Files named by the checkout's ``.worktreeinclude`` (gitignore syntax, matched by
  git itself against the untracked files) are copied in; then the profile's ``setup`` command runs
  there once (``/bin/sh -c``: it is the layout author's own shell command). A failed setup is
  returned (its status and last lines), and runs again on the next spawn; a successful one is marked
  in the worktree's git directory and never runs again.
- :func:`state` gives a worktree's branch, commits ahead of its base and whether it has changes;
  :func:`prune` removes a fleet worktree and its branch only when it has no changes and every
  commit on it is merged into its base branch, and otherwise says why it kept it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from pydantic import BaseModel

from fleet import errors, seams
from fleet.records.worktrees import Kept, WorktreeState

if TYPE_CHECKING:
    from fleet.client import Client
    from fleet.layouts import ResolvedProfile
    from fleet.models import SessionRecord, Wave, Wavelet
    from fleet.supervise import KillReport
    from fleet.tmux import Tmux

log = logging.getLogger(__name__)

Mode = Literal["participant", "wave", "none"]
T = TypeVar("T")
INCLUDE_FILE = ".worktreeinclude"
SETUP_TIMEOUT = 900.0
"""Seconds a ``setup`` command may run."""
SETUP_TAIL = 20
"""Lines of a failed setup's output kept for the spawn report."""
MARK_BASE = "fleet-base"
"""In the worktree's git dir: ``<base ref>\\n<base commit>\\n``; marks the worktree as fleet's."""
MARK_SETUP = "fleet-setup-done"
MARK_COPIED = "fleet-copied"
"""In the worktree's git dir: the paths copied in from ``.worktreeinclude``, one a line."""


def git(cwd: Path | str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``git -C cwd ARGS`` (argv, no shell), its output captured; a failure raises with git's words."""
    try:
        done = subprocess.run(
            ["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=120, check=False,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"},
        )  # fmt: skip
    except FileNotFoundError:
        raise errors.ToolMissing("git is not installed or not on PATH: worktrees need it") from None
    if check and done.returncode != 0:
        raise errors.FleetError(f"git {' '.join(args[:2])} failed in {cwd}: {done.stderr.strip()}")
    return done


def toplevel(cwd: Path) -> Path | None:
    """The top level of the git checkout holding ``cwd``, or None when it is not in one."""
    if not cwd.is_dir():
        return None
    done = git(cwd, "rev-parse", "--show-toplevel", check=False)
    return Path(done.stdout.strip()) if done.returncode == 0 else None


def git_dir(worktree: Path) -> Path:
    """The worktree's own git directory (``.git/worktrees/<name>`` of its repository)."""
    out = git(worktree, "rev-parse", "--absolute-git-dir").stdout.strip()
    return Path(out)


def branch_name(wave: str, participant: str | None) -> str:
    return f"fleet/{wave}/{participant}" if participant else f"fleet/{wave}"


def worktree_path(repo: Path, wave: str, participant: str | None) -> Path:
    return repo.parent / (f"{repo.name}.{wave}.{participant}" if participant else f"{repo.name}.{wave}")


@dataclass
class Plan:
    """One worktree a spawn needs: to reuse (``exists``) or to create."""

    repo: Path
    path: Path
    branch: str
    base: str
    """What the worktree starts from: the profile's ``base``, else the checkout's current branch
    (or ``HEAD`` when it is detached)."""
    exists: bool
    subdir: str = ""
    """Where the pane starts inside the worktree (the profile's cwd, relative to the checkout)."""
    setup: str | None = None
    env: dict[str, str] = field(default_factory=dict, repr=False)
    participants: list[str] = field(default_factory=list)
    commit: str = ""
    """The base's commit (planned worktrees)."""
    includes: list[str] = field(default_factory=list)
    """The checkout's untracked files ``.worktreeinclude`` names (planned worktrees)."""

    @property
    def cwd(self) -> Path:
        return self.path / self.subdir if self.subdir else self.path

    def make(self) -> str | None:
        """:func:`create` it: why its setup failed, or None once it is ready (spawn's
        :class:`fleet.seams.Workspace`)."""
        bad = create(self)
        return bad.why(self.setup or "") if bad is not None else None


def _registered(repo: Path) -> dict[Path, str]:
    """Worktrees git knows for ``repo``: path -> branch ref ('' when detached)."""
    out: dict[Path, str] = {}
    current: Path | None = None
    for line in git(repo, "worktree", "list", "--porcelain").stdout.splitlines():
        if line.startswith("worktree "):
            current = Path(line.removeprefix("worktree "))
            out[current] = ""
        elif line.startswith("branch ") and current is not None:
            out[current] = line.removeprefix("branch ")
    return out


def _memo(facts: dict[tuple[str, ...], Any] | None, key: tuple[str, ...], compute: Callable[[], T]) -> T:
    """``compute()``, once per ``key`` in ``facts`` (one spawn's git answers: its plans share them)."""
    if facts is None:
        return compute()
    if key not in facts:
        facts[key] = compute()
    return cast(T, facts[key])


def plan(
    cwd: Path,
    mode: Mode,
    wave: str,
    participant: str,
    *,
    base: str | None = None,
    setup: str | None = None,
    env: dict[str, str] | None = None,
    facts: dict[tuple[str, ...], Any] | None = None,
) -> Plan | None:
    """The worktree ``participant`` works in (None for ``mode="none"``); raises for every refusal.

    ``facts``: a dict shared by the plans of one spawn, so each repository is asked once (nothing is
    created between the plans)."""
    if mode == "none":
        return None
    repo = _memo(facts, ("top", str(cwd)), lambda: toplevel(cwd))
    if repo is None:
        raise errors.UsageError(
            f"{participant}: worktree = {mode!r} needs a git repository, and {cwd} is not in one:"
            ' set the layout\'s cwd to a checkout (or `git init` it), or worktree = "none"'
        )
    owner = participant if mode == "participant" else None
    path = worktree_path(repo, wave, owner)
    branch = branch_name(wave, owner)
    subdir = os.path.relpath(cwd.resolve(), repo.resolve())
    subdir = "" if subdir == "." else subdir
    registered = _memo(facts, ("registered", str(repo)), lambda: _registered(repo))
    holder = next((p for p, ref in registered.items() if ref == f"refs/heads/{branch}"), None)
    if path in registered:
        if holder != path:
            raise errors.Conflict(
                f"{participant}: {path} is a worktree of {repo} but not on branch {branch}:"
                f" move it aside (`git worktree remove {path}`) and spawn again"
            )
        return Plan(repo, path, branch, _recorded_base(path) or "HEAD", True, subdir, setup, env or {})
    if holder is not None:
        raise errors.Conflict(
            f"{participant}: branch {branch} is already checked out in {holder}: remove that worktree"
            f" (`git worktree remove {holder}`) or rename the wave"
        )
    if git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False).returncode == 0:
        raise errors.Conflict(
            f"{participant}: branch {branch} already exists in {repo}: delete it"
            f" (`git branch -D {branch}`) or rename the wave"
        )
    if path.exists():
        raise errors.Conflict(
            f"{participant}: {path} already exists and is not fleet's worktree: move it aside and spawn again"
        )
    if base is None:
        head_ok = _memo(facts, ("head", str(repo)), lambda: _commit(repo, "HEAD"))
        if not head_ok:
            raise errors.UsageError(f"{participant}: {repo} has no commit yet: commit something first")
        dirty = _memo(
            facts, ("dirty", str(repo)),
            lambda: git(repo, "status", "--porcelain", "--untracked-files=no").stdout.strip(),
        )  # fmt: skip
        if dirty:
            first = dirty.splitlines()[0].strip()
            raise errors.Conflict(
                f"{participant}: {repo} has uncommitted changes ({first}, ...): a new worktree starts"
                " from HEAD and would not have them; commit or stash them, or set the layout's base"
            )
        head = _memo(
            facts, ("branch", str(repo)),
            lambda: git(repo, "symbolic-ref", "--quiet", "--short", "HEAD", check=False).stdout.strip(),
        )  # fmt: skip
        base = head or "HEAD"
    commit = _memo(facts, ("commit", str(repo), base), lambda: _commit(repo, base))
    if not commit:
        raise errors.UsageError(
            f"{participant}: base {base!r} is not a commit of {repo}: fix the layout's base"
        )
    out = Plan(repo, path, branch, base, False, subdir, setup, env or {})
    out.commit = commit
    out.includes = _memo(facts, ("includes", str(repo)), lambda: included(repo))
    return out


def _commit(repo: Path, ref: str) -> str:
    """The commit ``ref`` names in ``repo``, or '' when it names none."""
    done = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def existing(cwd: str | Path, *, setup: str | None = None, env: dict[str, str] | None = None) -> Plan | None:
    """The fleet worktree a recorded ``cwd`` is in, to reuse as it is (None: it is not in one, or
    the worktree is gone)."""
    top = fleet_worktree(cwd)
    if top is None:
        return None
    common = git(top, "rev-parse", "--path-format=absolute", "--git-common-dir").stdout.strip()
    branch = git(top, "symbolic-ref", "--quiet", "--short", "HEAD", check=False).stdout.strip()
    sub = os.path.relpath(Path(cwd).resolve(), top.resolve())
    return Plan(
        Path(common).parent, top, branch, _recorded_base(top), True,
        "" if sub == "." else sub, setup, env or {},
    )  # fmt: skip


def _recorded_base(path: Path) -> str:
    with contextlib.suppress(OSError, errors.FleetError):
        return (git_dir(path) / MARK_BASE).read_text().split("\n")[0]
    return ""


class SetupFailed(BaseModel):
    status: str
    output: str

    def why(self, setup: str) -> str:
        return f"setup `{setup}` failed ({self.status}) in the new worktree: {self.output}"


def create(p: Plan) -> SetupFailed | None:
    """Make (or finish) the planned worktree; returns a failed setup, or None when it is ready."""
    if not p.exists:
        _add(p)
        p.exists = True
    gd = git_dir(p.path)
    if p.setup and not (gd / MARK_SETUP).exists():
        failed = _run_setup(p)
        if failed is not None:
            return failed
        (gd / MARK_SETUP).write_text("ok\n")
    return None


def _add(p: Plan) -> None:
    commit = p.commit or git(p.repo, "rev-parse", "--verify", f"{p.base}^{{commit}}").stdout.strip()
    done = git(p.repo, "worktree", "add", "--quiet", "-b", p.branch, str(p.path), commit, check=False)
    if done.returncode != 0:  # nothing half-created: no branch, no directory, no registration
        with contextlib.suppress(errors.FleetError):
            git(p.repo, "worktree", "remove", "--force", str(p.path), check=False)
            git(p.repo, "worktree", "prune", check=False)
            git(p.repo, "branch", "-D", p.branch, check=False)
        shutil.rmtree(p.path, ignore_errors=True)
        raise errors.FleetError(
            f"git worktree add {p.path} failed: {done.stderr.strip()}; nothing was created"
        )
    gd = git_dir(p.path)
    (gd / MARK_BASE).write_text(f"{p.base}\n{commit}\n")
    copied = copy_includes(p.repo, p.path, p.includes if p.commit else None)
    (gd / MARK_COPIED).write_text("".join(f"{c}\n" for c in copied))


def included(repo: Path) -> list[str]:
    """The checkout's untracked files that its ``.worktreeinclude`` names (relative paths).

    Matching is git's own (``ls-files --others --ignored --exclude-from``): gitignore syntax exactly.
    """
    include = repo / INCLUDE_FILE
    if not include.is_file():
        return []
    out = git(repo, "ls-files", "-z", "--others", "--ignored", f"--exclude-from={include}").stdout
    return sorted(filter(None, out.split("\0")))


def copy_includes(repo: Path, dest: Path, names: list[str] | None = None) -> list[str]:
    """Copy the checkout's untracked files that ``.worktreeinclude`` names into ``dest``; returns them."""
    copied = []
    for rel in included(repo) if names is None else names:
        src = repo / rel
        if src.is_symlink() or not src.is_file():
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
        copied.append(rel)
    return copied


def _run_setup(p: Plan) -> SetupFailed | None:
    assert p.setup is not None
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", p.setup], cwd=p.cwd if p.cwd.is_dir() else p.path,
            env={**os.environ, **p.env}, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, errors="replace", timeout=SETUP_TIMEOUT, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout if isinstance(exc.stdout, str) else ""
        return SetupFailed(status=f"timed out after {SETUP_TIMEOUT:g}s", output=_tail(out))
    if done.returncode == 0:
        return None
    return SetupFailed(status=f"status {done.returncode}", output=_tail(done.stdout))


def _tail(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()][-SETUP_TAIL:]
    return " | ".join(lines) or "(no output)"


# ---------------------------------------------------------------- state and pruning


def fleet_worktree(cwd: str | Path) -> Path | None:
    """The fleet worktree holding ``cwd`` (one fleet created: its git dir carries fleet's mark)."""
    top = toplevel(Path(cwd))
    if top is None:
        return None
    try:
        return top if (git_dir(top) / MARK_BASE).is_file() else None
    except errors.FleetError:
        return None


def state(path: Path) -> WorktreeState:
    gd = git_dir(path)
    base_ref, _, rest = (gd / MARK_BASE).read_text().partition("\n")
    base_commit = rest.strip()
    branch = git(path, "symbolic-ref", "--quiet", "--short", "HEAD", check=False).stdout.strip() or "HEAD"
    ahead = int(git(path, "rev-list", "--count", f"{base_commit}..HEAD").stdout.strip() or 0)
    return WorktreeState(path=str(path), branch=branch, base=base_ref, ahead=ahead, dirty=_dirty(path, gd))


def _dirty(path: Path, gd: Path) -> bool:
    copied = set()
    with contextlib.suppress(OSError):
        copied = set((gd / MARK_COPIED).read_text().splitlines())
    for line in git(path, "status", "--porcelain", "-z").stdout.split("\0"):
        if not line:
            continue
        if line.startswith("?? ") and line[3:] in copied:
            continue
        return True
    return False


def prune(path: Path) -> Kept | None:
    """Remove fleet's worktree at ``path`` and its branch if it has no changes and nothing unmerged
    (every commit on it is in its base branch); else say why it is kept."""
    st = state(path)
    if st.dirty:
        return Kept(path=st.path, branch=st.branch, why="uncommitted changes")
    gd = git_dir(path)
    base_commit = (gd / MARK_BASE).read_text().split("\n")[1].strip()
    target = st.base if st.base != "HEAD" else base_commit
    into = git(path, "rev-parse", "--verify", "--quiet", f"{target}^{{commit}}", check=False).stdout.strip()
    merged = git(path, "merge-base", "--is-ancestor", "HEAD", into or base_commit, check=False)
    if merged.returncode != 0:
        return Kept(path=st.path, branch=st.branch, why=f"{st.ahead} commit(s) not merged into {st.base}")
    repo = Path(git(path, "rev-parse", "--path-format=absolute", "--git-common-dir").stdout.strip()).parent
    git(repo, "worktree", "remove", "--force", str(path))
    if st.branch.startswith("fleet/"):
        git(repo, "branch", "-D", st.branch, check=False)
    return None


# ---------------------------------------------------------------- on the core's seams


def planner(
    wave: Wave,
    profile: ResolvedProfile,
    name: str,
    record: SessionRecord | None,
    facts: dict[tuple[str, ...], Any] | None,
) -> Plan | None:
    """spawn's workspace (:data:`fleet.seams.workspaces`, named lazily by :mod:`fleet.features`):
    a respawn reuses the worktree its recorded session ran in, else one is planned."""
    if record is not None and record.cwd:
        found = existing(record.cwd, setup=profile.setup, env=profile.env)
        if found is not None:
            return found
    cwd = Path(os.path.expanduser(profile.cwd)) if profile.cwd else Path.cwd()
    return plan(
        cwd, profile.worktree, wave.name, name, base=profile.base, setup=profile.setup, env=profile.env,
        facts=facts,
    )  # fmt: skip


def prune_killed(client: Client, tmux: Tmux, wave: Wave, wl: Wavelet | None, report: KillReport) -> None:
    """``fleet kill --prune``: the target's fleet worktrees that no live pane works in."""
    live = {p.participant for p in tmux.fleet_panes(wave.id) if p.alive}
    records = client.sessions(wave.id)
    if wl is not None:
        on = {m.name for m in wl.roster} | {r.participant for r in records if r.wavelet_id == wl.id}
        records = [r for r in records if r.participant in on]
    tops: set[Path] = set()
    for rec in records:
        top = fleet_worktree(rec.cwd) if rec.cwd else None
        if top is not None:
            tops.add(top)
    every = client.sessions(wave.id)
    for top in sorted(tops):
        users = {r.participant for r in every if r.cwd and Path(r.cwd).is_relative_to(top)}
        if users & live:
            report.kept.append(
                Kept(path=str(top), branch=state(top).branch,
                     why=f"{', '.join(sorted(users & live))} still running in it")
            )  # fmt: skip
            continue
        kept = prune(top)
        if kept is None:
            report.pruned.append(str(top))
        else:
            report.kept.append(kept)


class StatusColumns:
    """``fleet status``'s worktree columns (:data:`fleet.seams.status_columns`): the fleet worktree
    each recorded session works in, if it is on this machine."""

    def __init__(self, read: seams.StatusRead) -> None:
        self.records = read.records
        self._seen: dict[str, WorktreeState | None] = {}

    def _of(self, name: str) -> WorktreeState | None:
        if name not in self._seen:
            record = self.records.get(name)
            self._seen[name] = None
            if record is not None and record.cwd:
                try:
                    top = fleet_worktree(record.cwd)
                    self._seen[name] = state(top) if top is not None else None
                except (OSError, errors.FleetError) as exc:
                    log.debug("cannot read the worktree of %s: %s", record.cwd, exc)
        return self._seen[name]

    def row(self, wavelet: Wavelet, participant: str) -> dict[str, object]:
        tree = self._of(participant)
        if tree is None:
            return {"worktree": None, "branch": None, "ahead": None, "dirty": None}
        return {"worktree": tree.path, "branch": tree.branch, "ahead": tree.ahead, "dirty": tree.dirty}

    def wave(self) -> dict[str, object]:
        return {}


seams.workspaces.add(__name__, planner)
seams.status_columns.add(__name__, StatusColumns)
