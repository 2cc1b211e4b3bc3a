"""Process facts fleet asks the kernel for: is a pid alive, how did a zombie end, does a group run.

The one place ``/proc/<pid>/stat`` is parsed (Linux). Elsewhere the answers fall back to signals
(``kill(pid, 0)``), which cannot tell a zombie from a live process; fleet's supported platform is
Linux, where tmux 3.3a sometimes leaves an agent that exited at once unreaped (a zombie whose exit
status only the kernel still has).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class Stat:
    """The fields of ``/proc/<pid>/stat`` fleet uses."""

    state: str
    """``R``, ``S``, ``D``, ``Z`` (zombie), ``X`` (dead), …"""
    ppid: int
    pgrp: int
    exit_code: int | None
    """The raw wait status of a zombie (field 52), None when the kernel does not say."""
    start: int = 0
    """When the process started, in clock ticks since boot (field 22): with the pid, its identity."""


def stat(pid: int) -> Stat | None:
    """``pid``'s stat, or None when there is no such process (or no ``/proc``)."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # after "pid (comm) ": state, ppid, pgrp, …
    if len(fields) < 3:
        return None
    exit_code = int(fields[49]) if len(fields) > 49 and fields[49].lstrip("-").isdigit() else None
    start = int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else 0
    return Stat(state=fields[0], ppid=int(fields[1]), pgrp=int(fields[2]), exit_code=exit_code, start=start)


def identity(pid: int) -> str:
    """``pid`` and its start time: the same string for the life of that process, never for another."""
    s = stat(pid)
    return f"{pid}:{s.start if s else 0}"


def pid_alive(pid: int) -> bool:
    """True if process ``pid`` exists and is not a zombie (a dead process nobody reaped yet)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    s = stat(pid)
    return s is None or s.state != "Z"


def zombie_status(pid: int) -> str | None:
    """How an unreaped child ended (``"0"``, ``"3"``, ``"signal 9"``), if ``pid`` is a zombie."""
    s = stat(pid)
    if s is None or s.state != "Z" or s.exit_code is None:
        return None
    if os.WIFEXITED(s.exit_code):
        return str(os.WEXITSTATUS(s.exit_code))
    if os.WIFSIGNALED(s.exit_code):
        return f"signal {os.WTERMSIG(s.exit_code)}"
    return None


def group_running(pgid: int) -> bool:
    """Whether a live (not zombie) process of process group ``pgid`` exists."""
    if not (PROC / "self" / "stat").exists():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            s = stat(int(entry.name))
            if s is not None and s.pgrp == pgid and s.state not in ("Z", "X"):
                return True
    return False


def looks_like_fleet(pid: int) -> bool:
    """Whether ``pid``'s command line mentions fleet (before signalling a pid read from a file)."""
    try:
        return b"fleet" in (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return False


def with_env(name: str, value: str) -> list[int]:
    """The pids (of this user, readable) whose environment has ``name=value``."""
    want = f"{name}={value}".encode()
    found = []
    for entry in PROC.iterdir() if PROC.is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if want in env.split(b"\0"):
            found.append(int(entry.name))
    return found
