"""A scratch world of real Claude Code sessions for a benchmark: its own daemon, tmux server and HOME.

The benchmarks that run real sessions (``bench/tokens.py``, ``bench/receipts.py``) each build one
per configuration: ``FLEET_HOME`` and ``HOME`` under ``home``, a ``fleet daemon run`` process, a tmux
server on its own socket and config file, and the scripted model (``tests/realclaude.py``'s
:class:`RealFleet`). Everything is torn down afterwards, the tmux socket file included.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import libtmux
from delivery import start_daemon  # bench/delivery.py
from realclaude import RealFleet  # tests/realclaude.py
from scripted_model import Script

from fleet.client import Client
from fleet.paths import get_paths

TMUX_CONF = "set -g default-shell /bin/sh\nset -g history-limit 5000\n"


@contextmanager
def real_world(home: Path, *, channels: bool, script: Script | None = None) -> Iterator[RealFleet]:
    """A :class:`RealFleet` on a fresh daemon under ``home`` (its ``op`` is the operator's client)."""
    (home / "home").mkdir(parents=True)
    (home / "fleet").mkdir()
    os.environ.update(FLEET_HOME=str(home / "fleet"), HOME=str(home / "home"), SHELL="/bin/sh")
    daemon, url, token = start_daemon(home / "fleet")
    conf = home / "tmux.conf"
    conf.write_text(TMUX_CONF)
    srv = libtmux.Server(socket_name=f"fleet-bench-{uuid.uuid4().hex[:8]}", config_file=str(conf))
    try:
        real = RealFleet(home, get_paths(), Client(url, token), srv, channels=channels, script=script)
        try:
            yield real
        finally:
            real.close()
    finally:
        Path(os.environ.get("TMUX_TMPDIR", "/tmp"), f"tmux-{os.geteuid()}", str(srv.socket_name)).unlink(
            missing_ok=True
        )
        daemon.terminate()
        daemon.wait(10)
