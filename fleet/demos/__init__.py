"""Guided demos of the resident and of campaigns (``fleet demo resident|campaign``), with stand-ins.

Each demo runs in a :class:`Sandbox`: a private fleet made for it and taken down after it — its own
``FLEET_HOME`` (a temporary directory that also holds the demo's git repository and layouts), its
own daemon and its own tmux server (a socket named ``fleet-demo-<pid>``), so the user's fleet is
never touched. Every step runs the real ``fleet`` command a user would type (a subprocess with the
sandbox's environment) and shows it; a :class:`Guide` narrates, waits for each milestone with a
deadline and, with ``smoke``, asserts them without narration or pauses. What a caller may rely on:

- :meth:`Sandbox.close` ends everything the demo started — the helper processes, the tmux server
  (every stand-in agent and channel in it), the daemon — and removes the directory. It runs on a
  normal end, a failed milestone, Ctrl-C (SIGINT) and SIGTERM; ``keep`` leaves it all running for
  the user to explore and prints how to reach it and how to take it down.
- A milestone not reached by its deadline is a :class:`~fleet.errors.FleetError` naming it (exit 1).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import TypeVar

from fleet import errors
from fleet.cli import render
from fleet.client import Client, read_endpoint
from fleet.models import Blip
from fleet.paths import Paths

T = TypeVar("T")

DROPPED = ("FLEET_DAEMON", "FLEET_TOKEN", "FLEET_TOKEN_FILE", "FLEET_WAVE", "FLEET_WAVELET",
           "FLEET_PARTICIPANT", "TMUX", "TMUX_PANE")  # fmt: skip
"""The user's fleet as the environment names it: never seen by the sandbox's commands."""


class Sandbox:
    """A private fleet: ``dir`` holds ``home/`` (its FLEET_HOME) and whatever the demo makes."""

    def __init__(self, name: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"fleet-demo-{name}-")).resolve()
        self.home = self.dir / "home"
        self.socket = f"fleet-demo-{os.getpid()}"
        self.paths = Paths(self.home / "data", self.home / "state", self.home / "config", self.home / "logs")
        env = {k: v for k, v in os.environ.items() if k not in DROPPED}
        env.update(FLEET_HOME=str(self.home), FLEET_TMUX_SOCKET=self.socket, PYTHONUNBUFFERED="1")
        self.env = env
        self._client: Client | None = None
        self.tools_session = False

    # ------------------------------------------------------------ commands

    def fleet(self, *args: str, cwd: Path | None = None, timeout: float = 120.0) -> str:
        """Run ``fleet ARGS`` in the sandbox; its stdout. A failure is a FleetError quoting its stderr."""
        done = subprocess.run(
            [sys.executable, "-m", "fleet", *args], cwd=cwd or self.dir, env=self.env, capture_output=True,
            text=True, timeout=timeout,
        )  # fmt: skip
        if done.returncode != 0:
            raise errors.FleetError(
                f"`fleet {shlex.join(args)}` exited {done.returncode}: {done.stderr.strip()[-600:]}"
            )
        return done.stdout

    def git(self, repo: Path, *args: str) -> str:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=self.env)
        if done.returncode != 0:
            raise errors.FleetError(f"git {shlex.join(args)} in {repo} failed: {done.stderr.strip()}")
        return done.stdout

    def repo(self, name: str, files: dict[str, str]) -> Path:
        """A git repository ``dir/name`` with ``files`` in one commit (its own identity, no signing)."""
        root = self.dir / name
        root.mkdir()
        self.git(root, "init", "-q", "-b", "main")
        hooks = self.dir / "no-git-hooks"  # the user's own hooks (core.hooksPath) must not run here
        hooks.mkdir(exist_ok=True)
        for key, value in (("user.name", "fleet demo"), ("user.email", "demo@fleet.invalid"),
                           ("commit.gpgsign", "false"), ("core.hooksPath", str(hooks))):  # fmt: skip
            self.git(root, "config", key, value)
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, encoding="utf-8")
        self.git(root, "add", "-A")
        self.git(root, "commit", "-qm", "the demo project")
        return root

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, env=self.env
        )

    def background(self, name: str, args: list[str], cwd: Path) -> Path:
        """Run ``fleet ARGS`` in a window ``name`` of the sandbox's tmux server (session
        ``fleet-demo-helpers``: attach to watch it), its output also appended to a log; the log's
        path. It lives as long as the tmux server does."""
        log = self.dir / f"{name}.log"
        log.touch()
        cmd = shlex.join([sys.executable, "-m", "fleet", *args]) + f" 2>&1 | tee -a {shlex.quote(str(log))}"
        env_args = [a for k in ("FLEET_HOME", "FLEET_TMUX_SOCKET", "PYTHONUNBUFFERED", "PATH")
                    for a in ("-e", f"{k}={self.env.get(k, '')}")]  # fmt: skip
        if self.tools_session:
            made = self.tmux(
                "new-window", "-d", "-t", "fleet-demo-helpers:", "-n", name, "-c", str(cwd), *env_args, cmd
            )
        else:
            made = self.tmux(
                "new-session", "-d", "-s", "fleet-demo-helpers", "-n", name, "-c", str(cwd), *env_args, cmd
            )
        if made.returncode != 0:
            raise errors.FleetError(f"could not start `{name}` in tmux: {made.stderr.strip()}")
        self.tools_session = True
        return log

    def client(self) -> Client:
        """The operator's client of the sandbox's daemon (started by ``fleet daemon start`` first)."""
        if self._client is None:
            endpoint = read_endpoint(self.paths)
            if endpoint is None:
                raise errors.DaemonUnreachable(
                    f"the demo's daemon wrote no endpoint in {self.paths.endpoint}"
                )
            token = self.paths.operator_token.read_text(encoding="utf-8").strip()
            self._client = Client(endpoint.url, token)
        return self._client

    # ------------------------------------------------------------ the end

    def daemon_pid(self) -> int | None:
        endpoint = read_endpoint(self.paths)
        return endpoint.pid if endpoint is not None else None

    def close(self) -> None:
        """End the tmux server (agents, channels, helper windows), the daemon; remove the directory."""
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
        where = self.tmux("display-message", "-p", "#{socket_path}").stdout.strip()
        self.tmux("kill-server")
        if where:  # tmux leaves its socket file behind
            with contextlib.suppress(OSError):
                Path(where).unlink()
        pid = self.daemon_pid()
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run([sys.executable, "-m", "fleet", "daemon", "stop"], env=self.env,
                           capture_output=True, timeout=20)  # fmt: skip
        if pid is not None and _wait_gone(pid, 5.0) is False:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, 5.0)
        shutil.rmtree(self.dir, ignore_errors=True)

    def keep_note(self) -> list[str]:
        """How to reach a kept sandbox and how to take it down."""
        return [
            "the demo's fleet keeps running. To explore it from another shell:",
            f"  export FLEET_HOME={self.home} FLEET_TMUX_SOCKET={self.socket}",
            f"  tmux -L {self.socket} attach          (the agents; session fleet-demo-helpers: the helpers)",
            "To take it down:",
            f"  tmux -L {self.socket} kill-server; FLEET_HOME={self.home} fleet daemon stop;"
            f" rm -rf {self.dir}",
        ]


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    return False


@contextlib.contextmanager
def sandboxed(name: str, *, keep: bool) -> Iterator[Sandbox]:
    """A :class:`Sandbox` closed on the way out — a normal end, an error, Ctrl-C or SIGTERM — unless
    ``keep`` and the demo ended normally. The way out is said on stdout. ToolMissing (nothing made)
    without tmux or git."""
    for tool, why in (("tmux", "the agents run in tmux"), ("git", "the demo works in a git repository")):
        if shutil.which(tool) is None:
            raise errors.ToolMissing(
                f"{tool} is not installed or not on PATH ({why}): install it and try again"
            )
    box = Sandbox(name)
    previous = signal.signal(signal.SIGTERM, _as_interrupt)
    ok = False
    try:
        yield box
        ok = True
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not leave half a cleanup
        try:
            if keep and ok:
                for line in box.keep_note():
                    render.out(line)
            else:
                with contextlib.suppress(OSError):  # a closed stdout (a pipe gone) must not stop it
                    render.out(f"cleaning up: the demo's tmux server {box.socket}, its daemon and {box.dir}")
                box.close()
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, previous)


def _as_interrupt(_sig: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


class Guide:
    """The narration: steps, shown commands, pauses (a terminal only), milestones with deadlines.
    ``smoke``: no narration and no pauses, each milestone a one-line ✓."""

    def __init__(self, box: Sandbox, *, smoke: bool, pause: bool) -> None:
        self.box = box
        self.smoke = smoke
        self.pause_between = pause and not smoke
        self.steps = 0
        self.names: dict[str, str] = {}
        self.cursor = ""

    def say(self, *lines: str) -> None:
        if not self.smoke:
            for line in lines:
                render.out(line)

    def step(self, title: str, *lines: str) -> None:
        self.steps += 1
        if self.pause_between and self.steps > 1:
            with contextlib.suppress(EOFError):
                input("\n  [Enter: next step · Ctrl-C: end the demo, cleaning up] ")
        self.say("", f"── {self.steps}. {title}", *[f"   {ln}" for ln in lines])

    def run(self, *args: str, cwd: Path | None = None, show: bool = True) -> str:
        """``fleet ARGS`` in the sandbox, shown as typed with its output (``show``)."""
        out = self.box.fleet(*args, cwd=cwd)
        if show:
            self.say(f"$ fleet {shlex.join(args)}", *[f"  {ln}" for ln in out.rstrip("\n").splitlines()])
        return out

    def milestone(self, name: str, check: Callable[[], T | None], timeout: float, *,
                  tick: Callable[[], None] | None = None) -> T:  # fmt: skip
        """Wait (at most ``timeout`` s) for ``check`` to return something truthy; FleetError naming
        the milestone otherwise. ``tick``: called between looks (printing what happened meanwhile)."""
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            got = check()
            if tick is not None:
                tick()
            if got:
                render.out(f"✓ {name}")
                return got
            if time.monotonic() >= deadline:
                raise errors.FleetError(
                    f"demo milestone not reached in {timeout:g}s: {name}"
                    + (" (run it again without --smoke and --keep to look)" if self.smoke else "")
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def blips(self, wave: str) -> list[Blip]:
        """The wave's blips since the last call, each shown as ``wavelet │ blip`` (not in smoke)."""
        client = self.box.client()
        page = client.read_wave(wave, after=self.cursor, limit=500)
        self.cursor = page.cursor
        for b in page.blips:
            if b.wavelet_id not in self.names:
                self.names.update({wl.id: wl.path for wl in client.get_wave(wave).wavelets})
            self.say(f"  {self.names.get(b.wavelet_id, '?'):<14}│ {render.blip_line(b)}")
        return page.blips

    def tail(self, log: Path, label: str) -> Callable[[], None]:
        """A tick that shows the lines appended to ``log`` since the last one, ``label │ line``."""
        at = 0

        def tick() -> None:
            nonlocal at
            try:
                with log.open("rb") as f:
                    f.seek(at)
                    data = f.read()
            except OSError:
                return
            end = data.rfind(b"\n") + 1
            at += end
            for line in data[:end].decode("utf-8", "replace").splitlines():
                self.say(f"  {label:<14}│ {line}")

        return tick


def both(*ticks: Callable[[], object]) -> Callable[[], None]:
    def tick() -> None:
        for t in ticks:
            t()

    return tick
