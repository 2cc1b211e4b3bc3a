"""Worktrees per participant (or per wave), as a user spawns them: real git, real tmux, real daemon.

Every test works in a temporary git repository ``repo`` (one commit, an ignored ``.env``, a
``.worktreeinclude`` naming it) beside which fleet creates ``repo.<wave>.<participant>`` worktrees;
the agents are scripted stand-ins that write a file at start (``--write``), as an agent editing its
checkout would. ``fleet`` runs as a subprocess against the fixture's daemon and isolated tmux server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import libtmux
import pytest
from conftest import retry_until

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.tmux import Tmux

WRITER = "fleet-standin --write 'notes/{name}.txt={name} was here'"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True).stdout


def branches(repo: Path) -> list[str]:
    return git(repo, "branch", "--format=%(refname:short)").split()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    home = Path(os.environ["HOME"])
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Test\n\temail = test@example.com\n[init]\n\tdefaultBranch = main\n"
    )
    r = tmp_path / "src" / "repo"
    r.mkdir(parents=True)
    git(r, "init", "-q")
    (r / "README").write_text("hello\n")
    (r / ".gitignore").write_text(".env\nbuild/\n")
    (r / ".worktreeinclude").write_text("# env files the agents need\n.env\n")
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "first")
    (r / ".env").write_text("SECRET=1\n")  # untracked, ignored, named by .worktreeinclude
    (r / "build").mkdir()
    (r / "build" / "out.o").write_text("x")  # untracked, ignored, not named: not copied
    return r


@pytest.fixture
def env(daemon: Daemon, tmux_server: libtmux.Server) -> dict[str, str]:
    tmux_server.cmd("new-session", "-d", "-s", "keepalive", "tail", "-f", "/dev/null")
    return {
        **os.environ,
        "FLEET_DAEMON": daemon.url,
        "FLEET_TOKEN": daemon.operator_token,
        "FLEET_TMUX_SOCKET": str(tmux_server.socket_name),
    }


def layout(tmp_path: Path, repo: Path, *, agent: str = WRITER, extra: str = "", per: str = "") -> str:
    path = tmp_path / "wt.toml"
    path.write_text(
        f'arrangement = "tiled"\n[defaults]\nagent = {json.dumps(agent)}\ncwd = {json.dumps(str(repo))}\n'
        f'worktree = "participant"\n{extra}\n{per}\n'
    )
    return str(path)


def fleet(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], env=env, capture_output=True, text=True, timeout=120
    )


def spawn_json(env: dict[str, str], *args: str) -> dict[str, Any]:
    done = fleet(env, "spawn", *args, "--json")
    assert done.stdout, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def test_two_agents_write_concurrently_each_in_its_own_worktree_and_the_checkout_is_untouched(
    env: dict[str, str], operator: Client, repo: Path, tmp_path: Path, tmux_server: libtmux.Server
) -> None:
    operator.create_wave("w", ["alice", "bob"])
    setup = "echo ran >> ../setup-count-$(basename $PWD)"
    report = spawn_json(
        env, "w/main", "--layout", layout(tmp_path, repo, extra=f"setup = {json.dumps(setup)}")
    )
    assert [(p["participant"], p["ready"]) for p in report["panes"]] == [("alice", True), ("bob", True)]
    for name in ("alice", "bob"):
        tree = repo.parent / f"repo.w.{name}"
        pane = next(p for p in report["panes"] if p["participant"] == name)
        assert pane["worktree"] == str(tree) and pane["branch"] == f"fleet/w/{name}"
        # the agent ran inside its own worktree: its file is there, written by its own process
        note = tree / "notes" / f"{name}.txt"
        retry_until(note.exists, what=f"{name}'s file")
        assert (tree / "notes" / f"{name}.txt").read_text() == f"{name} was here\n"
        other = "bob" if name == "alice" else "alice"
        assert not (tree / "notes" / f"{other}.txt").exists()
        assert (tree / ".env").read_text() == "SECRET=1\n"  # named by .worktreeinclude: copied
        assert not (tree / "build").exists()  # ignored but not named: not copied
        assert git(tree, "rev-parse", "--abbrev-ref", "HEAD").strip() == f"fleet/w/{name}"
        assert (repo.parent / f"setup-count-repo.w.{name}").read_text() == "ran\n"
    # the main checkout is untouched
    assert not (repo / "notes").exists()
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"

    # status: branch, commits ahead of base, a dirty mark (the written file is not committed)
    alice = repo.parent / "repo.w.alice"
    git(alice, "add", "notes")
    git(alice, "commit", "-q", "-m", "alice's notes")
    st = json.loads(fleet(env, "status", "w", "--json").stdout)
    rows = {r["participant"]: r for r in st["rows"]}
    assert (rows["alice"]["branch"], rows["alice"]["ahead"], rows["alice"]["dirty"]) == (
        "fleet/w/alice",
        1,
        False,
    )
    assert (rows["bob"]["branch"], rows["bob"]["ahead"], rows["bob"]["dirty"]) == ("fleet/w/bob", 0, True)
    table = fleet(env, "status", "w").stdout
    assert "fleet/w/alice +1" in table and "fleet/w/bob +0*" in table

    # respawn reuses the worktree (same cwd, setup not run again)
    bob_pane = next(p["pane_id"] for p in report["panes"] if p["participant"] == "bob")
    Tmux(tmux_server).kill_pane(bob_pane)
    again = fleet(env, "respawn", "w/main", "bob", "--json")
    assert again.returncode == 0, again.stderr
    (rec,) = operator.sessions("w", "bob")
    assert rec.cwd == str(repo.parent / "repo.w.bob")
    assert (repo.parent / "setup-count-repo.w.bob").read_text() == "ran\n"
    assert branches(repo) == ["fleet/w/alice", "fleet/w/bob", "main"]


def test_a_shared_wave_worktree_and_a_participant_override(
    env: dict[str, str], operator: Client, repo: Path, tmp_path: Path
) -> None:
    operator.create_wave("w", ["alice", "bob", "carol"])
    lay = layout(tmp_path, repo, extra='worktree = "wave"', per='[participants.carol]\nworktree = "none"')
    lay_text = Path(lay).read_text().replace('worktree = "participant"\n', "", 1)
    Path(lay).write_text(lay_text)
    report = spawn_json(env, "w/main", "--layout", lay)
    assert all(p["ready"] for p in report["panes"]), report
    shared = repo.parent / "repo.w"
    where = {p["participant"]: p["worktree"] for p in report["panes"]}
    assert where == {"alice": str(shared), "bob": str(shared), "carol": ""}
    retry_until(lambda: (shared / "notes" / "bob.txt").exists() and (shared / "notes" / "alice.txt").exists())
    retry_until(lambda: (repo / "notes" / "carol.txt").exists(), what="carol writes in the checkout")
    assert branches(repo) == ["fleet/w", "main"]


def test_a_failing_setup_is_reported_and_that_pane_not_started(
    env: dict[str, str], operator: Client, repo: Path, tmp_path: Path, tmux_server: libtmux.Server
) -> None:
    operator.create_wave("w", ["alice", "bob"])
    per = '[participants.bob]\nsetup = "echo installing; echo npm ERR missing lockfile >&2; exit 3"'
    done = fleet(env, "spawn", "w/main", "--layout", layout(tmp_path, repo, per=per), "--json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    bob = next(p for p in report["panes"] if p["participant"] == "bob")
    assert bob["action"] == "failed" and not bob["ready"] and bob["pane_id"] == ""
    assert "status 3" in bob["why"] and "installing | npm ERR missing lockfile" in bob["why"]
    assert "bob" in done.stderr and "npm ERR missing lockfile" in done.stderr
    panes = Tmux(tmux_server).fleet_panes(operator.get_wave("w").id)
    assert [p.participant for p in panes] == ["alice"]  # bob's pane was never started
    assert not operator.sessions("w", "bob")
    # the next spawn runs the setup again (it never succeeded)
    fixed = layout(tmp_path, repo, per='[participants.bob]\nsetup = "touch setup-ok"')
    again = spawn_json(env, "w/main", "--layout", fixed)
    assert {p["participant"]: p["action"] for p in again["panes"]} == {"alice": "running", "bob": "launched"}
    assert (repo.parent / "repo.w.bob" / "setup-ok").exists()


def test_kill_prune_removes_clean_merged_worktrees_and_keeps_one_with_a_commit(
    env: dict[str, str], operator: Client, repo: Path, tmp_path: Path
) -> None:
    operator.create_wave("w", ["alice", "bob", "carol"])
    quiet = "fleet-standin"
    report = spawn_json(env, "w/main", "--layout", layout(tmp_path, repo, agent=quiet))
    assert all(p["ready"] for p in report["panes"]), report
    alice, bob, carol = (repo.parent / f"repo.w.{n}" for n in ("alice", "bob", "carol"))
    (bob / "work.txt").write_text("unmerged\n")
    git(bob, "add", "work.txt")
    git(bob, "commit", "-q", "-m", "bob's work")
    (carol / "merged.txt").write_text("merged\n")
    git(carol, "add", "merged.txt")
    git(carol, "commit", "-q", "-m", "carol's work")
    git(repo, "merge", "-q", "--ff-only", "fleet/w/carol")
    # a running pane's worktree is never pruned: kill first
    done = fleet(env, "kill", "w", "--prune", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert sorted(out["pruned"]) == [str(alice), str(carol)]
    assert [(k["path"], k["branch"]) for k in out["kept"]] == [(str(bob), "fleet/w/bob")]
    assert "not merged into main" in out["kept"][0]["why"]
    assert not alice.exists() and not carol.exists() and bob.exists()
    assert branches(repo) == ["fleet/w/bob", "main"]
    # and in words, the second time: the kept one is listed again
    text = fleet(env, "kill", "w", "--prune")
    assert f"kept worktree {bob} (fleet/w/bob): 1 commit(s) not merged into main" in text.stdout


def test_refusals_are_clear_and_leave_nothing_half_created(
    env: dict[str, str], operator: Client, repo: Path, tmp_path: Path, tmux_server: libtmux.Server
) -> None:
    operator.create_wave("w", ["alice", "bob"])
    wave_id = operator.get_wave("w").id

    def nothing_made() -> None:
        assert Tmux(tmux_server).fleet_panes(wave_id) == []
        assert branches(repo) == ["main"]
        assert sorted(p.name for p in repo.parent.iterdir()) == ["repo"]
        assert not operator.sessions("w")

    plain = tmp_path / "plain"
    plain.mkdir()
    done = fleet(env, "spawn", "w/main", "--layout", layout(tmp_path, plain))
    assert done.returncode == 2 and "needs a git repository" in done.stderr and str(plain) in done.stderr
    assert "Traceback" not in done.stderr
    nothing_made()

    (repo / "README").write_text("changed\n")
    done = fleet(env, "spawn", "w/main", "--layout", layout(tmp_path, repo))
    assert done.returncode == 1 and "uncommitted changes" in done.stderr and "README" in done.stderr
    nothing_made()
    git(repo, "checkout", "README")

    git(repo, "branch", "fleet/w/bob")
    done = fleet(env, "spawn", "w/main", "--layout", layout(tmp_path, repo))
    assert done.returncode == 1 and "branch fleet/w/bob already exists" in done.stderr
    git(repo, "branch", "-D", "fleet/w/bob")
    nothing_made()  # alice's worktree was not made either: every refusal comes before anything

    done = fleet(env, "spawn", "w/main", "--layout", layout(tmp_path, repo, extra='base = "nope"'))
    assert done.returncode == 2 and "base 'nope' is not a commit" in done.stderr
    nothing_made()

    (repo.parent / "repo.w.alice").mkdir()
    done = fleet(env, "spawn", "w/main", "--layout", layout(tmp_path, repo))
    assert done.returncode == 1 and "already exists and is not fleet's worktree" in done.stderr
    (repo.parent / "repo.w.alice").rmdir()
    nothing_made()

    # a worktree add that git itself fails (a post-checkout hook refusing) leaves no branch, no
    # directory, no pane
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text("#!/bin/sh\necho the hook says no >&2\nexit 1\n")
    hook.chmod(0o755)
    done = fleet(env, "spawn", "w/main", "--layout", layout(tmp_path, repo))
    assert done.returncode == 1 and "the hook says no" in done.stderr and "nothing was created" in done.stderr
    nothing_made()
    assert "repo.w" not in git(repo, "worktree", "list")
