"""Process facts fleet asks the kernel for: is a pid alive, how did a zombie end, does a group run.

The one place ``/proc/<pid>/stat`` is parsed (Linux). Elsewhere the answers fall back to signals
(``kill(pid, 0)``), which cannot tell a zombie from a live process; fleet's supported platform is
Linux, where tmux 3.3a sometimes leaves an agent that exited at once unreaped (a zombie whose exit
status only the kernel still has).

Also the one runner of the external commands fleet can do without (the attendant, the summarizer):
:func:`run_fail_open` turns every way such a command can fail into a :class:`Ran`, never an
exception or a hang.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal

from fleet.wire import FrozenValue

if TYPE_CHECKING:  # imported where a command runs: a channel asks /proc, and never loads it (2.5 ms)
    import subprocess

PROC = Path("/proc")


class Stat(FrozenValue, frozen=True):
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


# ---------------------------------------------------------------- running a command fail-open

RanKind = Literal["ok", "error", "timeout", "exit", "too-large"]
"""``error``: it could not be started; ``exit``: a non-zero exit status; ``too-large``: more stdout
than allowed."""


class Ran(FrozenValue, frozen=True):
    """How one :func:`run_fail_open` ended."""

    kind: RanKind
    output: bytes | None = None
    """Its stdout (``ok`` only; else None)."""
    detail: str = ""
    """Why it is not ``ok``, for a log line (empty when it is)."""


def run_fail_open(
    argv: list[str],
    payload: bytes,
    *,
    timeout: float,
    out_max: int,
    err_max: int = 4096,
    what: str = "answer",
    running: Callable[[subprocess.Popen[bytes] | None], object] | None = None,
) -> Ran:
    """Run ``argv`` (no shell, in its own process group) with ``payload`` on stdin; its stdout.

    Fail-open: a command that cannot start, outlives ``timeout`` seconds (then its whole process
    group is killed; the detail says no ``what`` came in time), exits non-zero (the detail keeps the
    tail of its stderr, of which ``err_max`` bytes are read), or writes more than ``out_max`` bytes is
    a :class:`Ran` saying so. A command that does not read its stdin is no error. ``running`` is
    told the process once it started and None once it ended, so that another thread can
    :func:`kill_group` it meanwhile.
    """
    import subprocess

    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        return Ran("error", detail=f"cannot run {argv[0]!r}: {exc.strerror or exc}")
    if running is not None:
        running(proc)
    out, err = bytearray(), bytearray()
    pumps = [
        threading.Thread(target=_feed, args=(proc.stdin, payload), daemon=True),
        threading.Thread(target=_drain, args=(proc.stdout, out, out_max), daemon=True),
        threading.Thread(target=_drain, args=(proc.stderr, err, err_max), daemon=True),
    ]
    for t in pumps:
        t.start()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        return Ran("timeout", detail=f"no {what} within {timeout:g}s; killed")
    finally:
        if running is not None:
            running(None)
        for t in pumps:  # the pipes close with the process (a grandchild may keep one: no wait)
            t.join(1.0)
    if proc.returncode != 0:
        tail = err.decode("utf-8", "replace").strip()[-300:]
        return Ran("exit", detail=f"exit status {proc.returncode}" + (f": {tail}" if tail else ""))
    if len(out) > out_max:
        return Ran("too-large", detail=f"more than {out_max} bytes of output")
    return Ran("ok", output=bytes(out))


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc``'s process group (it leads one: ``start_new_session``); reap it (2 s at most)."""
    import subprocess

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(2.0)


def _feed(stream: IO[bytes] | None, data: bytes) -> None:
    """Write the payload and close stdin (a command that does not read it is no error)."""
    if stream is None:
        return
    with contextlib.suppress(OSError):
        stream.write(data)
    with contextlib.suppress(OSError):
        stream.close()


def _drain(stream: IO[bytes] | None, into: bytearray, limit: int) -> None:
    """Read a pipe to its end, keeping at most ``limit`` + 1 bytes (the rest is read and dropped, so
    a chatty command neither blocks nor fills memory)."""
    if stream is None:
        return
    with contextlib.suppress(OSError, ValueError):
        while chunk := os.read(stream.fileno(), 65536):
            if len(into) <= limit:
                into += chunk[: limit + 1 - len(into)]
