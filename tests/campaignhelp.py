"""Helpers for campaign tests: a git project, plans, scripted agents that edit STATE.md and commit."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

from scripted_model import Answer, Call, Say, call, post, steps

from fleet.campaign import state as st

THREE_WAVES = """\
# Three Wave Demo

Three files, one per wave.

## Scaffold
Create a.txt with the text "a".

## Middle
Create b.txt with the text "b".

## Finish
Create c.txt in the format the operator picks.
"""
CID = "three-wave-demo-"


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def init_repo(root: Path, plan: str = THREE_WAVES) -> None:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "campaign@test")
    git(root, "config", "user.name", "campaign test")
    (root / "PLAN.md").write_text(plan)
    git(root, "add", "PLAN.md")
    git(root, "commit", "-qm", "the plan")


def log(root: Path) -> list[str]:
    """Commit subjects, oldest first."""
    return git(root, "log", "--reverse", "--format=%s").splitlines()


def state_at(root: Path, rev: str, cid: str) -> st.State:
    return st.parse(git(root, "show", f"{rev}:.wave/campaigns/{cid}/STATE.md"))


def sed_state(cid: str, **fields: Any) -> str:
    """A shell command that sets cursor fields of STATE.md (as an agent would edit it)."""
    exprs = []
    for k, v in fields.items():
        value = "null" if v is None else (f'"{v}"' if isinstance(v, str) and (not v or " " in v) else str(v))
        exprs += ["-e", f"s/^{k}: .*/{k}: {value}/"]
    return shlex.join(["sed", "-i", *exprs, f".wave/campaigns/{cid}/STATE.md"])


def notes_cmd(cid: str, wave: int, attempt: int, outcome: str, what: str) -> str:
    text = (
        f"## Attempt {attempt} — {outcome}\n**Session:** scripted\n**Commit:** -\n**Date:** today\n"
        f"**Decision on entry:** {'first attempt' if attempt == 1 else 'continue'}\n\n"
        f"### What happened\n{what}\n\n### What failed\n{what}\n\n### Diagnosis\nscripted\n\n"
        "### Tried in-session\nnothing\n\n### Recommendation\nretry\n\n---\n\n"
    )
    path = f".wave/campaigns/{cid}/plan/waves/wave_{wave}/NOTES.md"
    return f"printf %s {shlex.quote(text)} >> {path}"


def commit_cmd(message: str) -> str:
    return f"git add -A && git commit -qm {shlex.quote(message)}"


HOLD = "while [ $SECONDS -lt 300 ]; do sleep 0.2; done"
"""A Bash step that keeps the agent busy until its pane is killed (at most 5 minutes: a Bash child
of a session killed with -9 is not ended with it). Not ``sleep 600``: Claude Code refuses a command
that starts with a long sleep ("Blocked: standalone sleep 600 …") at once, so the turn would end on
its own and race whatever the test does next."""


def bash(*commands: str) -> Call:
    return call("Bash", command=" && ".join(commands), description="campaign step")


def turn(*commands: str, phrase: str) -> Answer:
    """One agent turn: a Bash step, then the set phrase as the turn's last line."""
    return steps(bash(*commands), Say(phrase))


def question_turn(cid: str, wavelet: str, question: str, summary: str, wave: int) -> Answer:
    return steps(
        post(wavelet, f"operator: {question}"),
        bash(
            sed_state(cid, wave_status="awaiting_user", user_question=summary),
            commit_cmd(f"wave {wave} (paused): user question"),
        ),
        Say(f"USER QUESTION: {summary}"),
    )
