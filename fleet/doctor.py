"""``fleet doctor``: what this machine has and lacks for fleet, each with what to do about it.

Checks are read-only and quick: nothing is started (the daemon is only asked if one is configured or
its endpoint file names a live one). A check is ``ok``, ``warn`` (fleet works, something is missing
for part of it) or ``fail`` (fleet's main job cannot work until it is fixed).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel

from fleet import errors, layouts
from fleet.agents import kinds
from fleet.client import Client, live_endpoint
from fleet.paths import Paths

Level = Literal["ok", "warn", "fail"]


class Check(BaseModel):
    name: str
    level: Level
    detail: str
    fix: str = ""


def _version(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({exc})"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else "?"


def check_python() -> Check:
    v = sys.version_info
    ok = v >= (3, 11)
    return Check(
        name="python",
        level="ok" if ok else "fail",
        detail=f"{sys.executable} {v.major}.{v.minor}.{v.micro}",
        fix="" if ok else "fleet needs Python 3.11 or newer",
    )


def check_tmux() -> Check:
    path = shutil.which("tmux")
    if path is None:
        return Check(
            name="tmux",
            level="fail",
            detail="not found on PATH",
            fix="install tmux (Debian/Ubuntu: sudo apt-get install tmux; macOS: brew install tmux)",
        )
    return Check(name="tmux", level="ok", detail=f"{path}: {_version([path, '-V'])}")


def check_agents() -> list[Check]:
    """Each agent kind's CLI (:data:`fleet.seams.agent_kinds`: claude, codex, ...): its binary and
    version, or what to install. A kind with nothing to check (the stand-in) is left out."""
    out: list[Check] = []
    for kind in kinds():
        got = kind.doctor()
        if got is not None:
            level, detail, fix = got
            out.append(Check(name=kind.name, level=level, detail=detail, fix=fix))
    return out


def check_channels(paths: Paths) -> Check:
    """What fleet knows of Claude Code's channels here: the routes its sessions' receipts found."""
    from fleet.delivery.state import read_unlocked
    from fleet.wire import RecordError

    routes: dict[str, list[str]] = {}
    for path in sorted(paths.channels.glob("*.json")):
        try:
            state = read_unlocked(path)
        except (OSError, RecordError):
            continue
        routes.setdefault(state.route, []).append(f"{state.participant}@{state.wave}")
    explain = (
        "channels (Claude Code's way to push a blip into a running session) are a research preview: "
        "accounts without it, Bedrock/Vertex and other third-party providers, and some org policies "
        "drop every push. fleet checks each session's own transcript: a blip counts as delivered only "
        "when it is in the model's context; with --transport auto (spawn's default) a push that is not "
        "taken is delivered by an asyncRewake hook instead, and a session without channels is woken "
        "by the hook alone."
    )
    seen = "; ".join(f"{route}: {', '.join(who)}" for route, who in sorted(routes.items()))
    if routes.get("unconfirmed"):
        return Check(
            name="channels",
            level="warn",
            detail=f"{explain} Sessions here: {seen}.",
            fix="respawn the unconfirmed sessions with --transport auto or hook (`fleet respawn`)",
        )
    return Check(
        name="channels", level="ok", detail=f"{explain}" + (f" Sessions here: {seen}." if seen else "")
    )


def check_daemon(paths: Paths) -> Check:
    url = os.environ.get("FLEET_DAEMON")
    if url:
        token = os.environ.get("FLEET_TOKEN", "")
        try:
            if "://" not in url:  # a joined daemon's name (`fleet remote join`)
                from fleet.client import load_remote

                remote = load_remote(paths, url)
                url, token = remote.url, token or remote.token
            who = Client(url, token, retries=1, timeout=5).whoami()
        except errors.FleetError as exc:
            return Check(name="daemon", level="fail", detail=f"FLEET_DAEMON={url}: {exc}", fix=exc.message)
        return Check(name="daemon", level="ok", detail=f"{url} (remote), you are {who.principal}")
    ep = live_endpoint(paths)
    if ep is None:
        return Check(
            name="daemon",
            level="ok",
            detail="no local daemon running; the first command that needs one starts it",
        )
    return Check(name="daemon", level="ok", detail=f"{ep.url} (local, pid {ep.pid})")


def check_private_files(paths: Paths) -> Check:
    loose = []
    for path in (paths.operator_token, *sorted(paths.tokens.rglob("*.token"))):
        if path.exists() and stat.S_IMODE(path.stat().st_mode) & 0o077:
            loose.append(str(path))
    if loose:
        return Check(
            name="secrets",
            level="fail",
            detail=f"readable by others: {', '.join(loose)}",
            fix="chmod 600 " + " ".join(loose),
        )
    return Check(name="secrets", level="ok", detail="token files are private (0600)")


def check_layouts(paths: Paths) -> Check:
    bad = []
    found = layouts.available(paths)
    for name in found:
        try:
            layouts.load(name, paths)
        except errors.FleetError as exc:
            bad.append(exc.message)
    if bad:
        return Check(name="layouts", level="fail", detail="; ".join(bad), fix="fix the named file and field")
    return Check(name="layouts", level="ok", detail=f"{len(found)} valid: {', '.join(found)}")


CHECKS: list[Callable[[Paths], Check]] = [
    lambda _p: check_python(),
    lambda _p: check_tmux(),
    check_channels,
    check_daemon,
    check_private_files,
    check_layouts,
]


def run(paths: Paths) -> list[Check]:
    checks = [check(paths) for check in CHECKS]
    return checks[:2] + check_agents() + checks[2:]
