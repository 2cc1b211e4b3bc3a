"""The delivery state file's lock across processes: one holder at a time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from test_delivery_rules import DAEMON

from fleet.delivery import (
    StateFile,
)


def test_lock_has_one_holder_at_a_time(tmp_path: Path) -> None:
    first = StateFile(tmp_path, DAEMON, "w", "alice", store="")
    second = StateFile(tmp_path, DAEMON, "w", "alice", store="")
    other = StateFile(tmp_path, DAEMON, "w", "bob", store="")
    assert first.acquire()
    assert not second.acquire()
    assert other.acquire()
    assert first.lock_path.exists() and first.lock_path.parent == first.path.parent
    # another process sees the lock too
    probe = (
        "import fcntl, sys; f = open(sys.argv[1], 'rb');\n"
        "try:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError:\n    sys.exit(7)"
    )
    assert subprocess.run([sys.executable, "-c", probe, str(first.lock_path)]).returncode == 7
    first.release()
    assert second.acquire()
