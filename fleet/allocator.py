"""The daemon runs on the C library's allocator, not CPython's: what a burst of connections used
goes back to the system when it ends.

CPython's small-object allocator (pymalloc) takes memory in 1 MiB arenas and gives an arena back
only once nothing in it is alive; a burst of connections (each with its parked request's objects:
the connection, its park, its buffers) spreads over new arenas, and the few objects that outlive it
(a cache entry replaced, a reader renewed) keep whole arenas: after 1,000 idle connections and 500
long-polls the daemon stayed at +14 to +24 % of its start whatever was collected and trimmed.
glibc's ``malloc`` keeps freed memory in its heap too, but ``malloc_trim`` (run after each burst,
:mod:`fleet.httpbase`) returns every free page of it, wherever it lies: +2 % after the same burst.
The price, measured in one run, alternated: 2,597–3,053 posts per daemon CPU-second on pymalloc,
2,500–2,837 on malloc (−4 %); the store layer in-process 12,650–13,256 against 11,637–11,980 posts
per CPU-second (−8 %).

The allocator is fixed when the interpreter starts (``PYTHONMALLOC``), so a daemon started without
it is started again in place (``execve``: the same pid) with it set, before anything runs; fleet's
own autostart sets it in the environment, so that costs nothing there. A ``PYTHONMALLOC`` already
set is the user's choice and is kept (``PYTHONMALLOC=pymalloc fleet daemon run`` opts out).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping, Sequence

VARIABLE = "PYTHONMALLOC"
DAEMON_ALLOCATOR = "malloc"


def daemon_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a daemon process: the system allocator unless ``env`` names one already."""
    out = dict(env)
    out.setdefault(VARIABLE, DAEMON_ALLOCATOR)
    return out


def runs_the_daemon(argv: Sequence[str]) -> bool:
    """Whether the command line ``argv`` (without the program) is ``… daemon run …``."""
    args = list(argv)
    return any(args[i : i + 2] == ["daemon", "run"] for i in range(len(args) - 1))


def restart_for_the_daemon() -> None:
    """If this process was started to run the daemon (its command line, ``sys.argv``: not what a
    caller in the same process passes the CLI) with no allocator chosen, replace it (same pid, same
    descriptors) by the same command line on the system allocator. Returns otherwise, or when it
    cannot exec (the daemon then runs on pymalloc)."""
    if VARIABLE in os.environ or not runs_the_daemon(sys.argv[1:]):
        return
    orig = list(getattr(sys, "orig_argv", []))
    if not orig or not sys.executable:
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    try:
        os.execve(sys.executable, orig, daemon_env(os.environ))
    except OSError:
        return
