"""One test world for the transports: a real daemon, a wave, token files, channels and watches.

The channel, watch and attention tests all need the same things — the operator's client, a token
file per participant, real ``fleet channel`` processes spoken to over raw MCP, real ``fleet watch``
processes, the participant's state file and routing log — so they share :class:`World`.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mcphelp import RawMcp, channel_argv, minted_token_file

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.delivery.attention import LogEntry, RouteEntry, parse_entry, routing_log_path
from fleet.delivery.state import StateFile
from fleet.paths import Paths


@dataclass
class World:
    """Wave ``wave`` on a real daemon; ``main`` is its root wavelet's id. Processes started through
    the world are killed when the test ends (:func:`world`)."""

    daemon: Daemon
    op: Client
    paths: Paths
    tmp: Path
    wave: str
    main: str
    tokens: dict[str, Path] = field(default_factory=dict)
    channels: list[RawMcp] = field(default_factory=list)
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def token_file(self, who: str) -> Path:
        """``who``'s token, minted on first use, in a 0600 file."""
        if who not in self.tokens:
            self.tokens[who] = minted_token_file(self.op, self.wave, who, self.tmp)
        return self.tokens[who]

    # -- channels

    def channel_argv(self, who: str, *extra: str) -> list[str]:
        return channel_argv(who, self.wave, self.daemon.url, self.token_file(who), *extra)

    def channel(
        self, who: str, *extra: str, env: dict[str, str] | None = None, init: bool = True, pongs: bool = False
    ) -> RawMcp:
        """A real ``fleet channel`` for ``who`` (its stderr in ``tmp``), handshaken unless ``init`` is off;
        ``pongs``: its client answers pings."""
        n = sum(1 for p in self.channels if p.who == who)
        stderr = self.tmp / f"{who}-{n}.stderr"
        proc = RawMcp(self.channel_argv(who, *extra), env=env, stderr=stderr, who=who, pongs=pongs)
        self.channels.append(proc)
        if init:
            proc.handshake()
        return proc

    # -- watches

    def watch_argv(self, who: str, *extra: str, daemon: str | None = None) -> list[str]:
        return [sys.executable, "-m", "fleet", "watch", "--participant", who, "--wave", self.wave,
                "--daemon", daemon or self.daemon.url, "--token-file", str(self.token_file(who)),
                *extra]  # fmt: skip

    def run(self, who: str, *extra: str, daemon: str | None = None) -> subprocess.CompletedProcess[str]:
        """``fleet watch`` for ``who`` to its end."""
        return subprocess.run(
            self.watch_argv(who, *extra, daemon=daemon), capture_output=True, text=True, timeout=60
        )

    def start(self, who: str, *extra: str) -> subprocess.Popen[str]:
        """``fleet watch`` for ``who`` in the background."""
        proc = subprocess.Popen(
            self.watch_argv(who, *extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.procs.append(proc)
        return proc

    # -- the wave and the participant's files

    def post(self, text: str, who: str = "bob", wavelet: str | None = None) -> str:
        """Post as ``who`` (the operator's token acting as them); returns the blip id."""
        return self.op.post(wavelet or self.main, text, as_=who).id

    def state_file(self, who: str) -> StateFile:
        return StateFile(self.paths.channels, self.daemon.url, self.wave, who)

    def lock_held(self, who: str) -> bool:
        """Whether some process holds ``who``'s state-file lock (probed, not kept)."""
        probe = self.state_file(who)
        if probe.acquire():
            probe.release()
            return False
        return True

    def log(self, who: str) -> list[LogEntry]:
        """``who``'s routing log, parsed (empty when there is none)."""
        path = routing_log_path(self.state_file(who))
        if not path.exists():
            return []
        lines = path.read_bytes().split(b"\n")[:-1]  # whole lines: the channel may be appending one
        return [parse_entry(line) for line in lines if line]

    def routes(self, who: str) -> list[RouteEntry]:
        return [e for e in self.log(who) if isinstance(e, RouteEntry)]

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.communicate()
        for c in self.channels:
            c.kill()


def world(
    daemon: Daemon, op: Client, paths: Paths, tmp: Path, wave: str, people: list[str] | None = None
) -> Iterator[World]:
    """A fixture body: ``wave`` created (with ``people`` on ``main``, when given), then the world;
    every process it started is killed afterwards."""
    if people is not None:
        op.create_wave(wave, with_=people)
    w = World(daemon, op, paths, tmp, wave, op.resolve(f"{wave}/main").id)
    try:
        yield w
    finally:
        w.close()
