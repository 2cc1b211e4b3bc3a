"""Real Claude Code sessions under test: the pinned binary, real tmux, the real daemon, a scripted model.

:func:`pinned_claude` finds Claude Code (``FLEET_CLAUDE_BIN``, then ``.ci/node`` under the repository,
where ``scripts/test.sh`` installs it, then ``PATH``) and *fails* the test, saying what to install,
when it is missing or not :data:`CLAUDE_VERSION`: these tests are never skipped.

:class:`RealFleet` is one test's world (the ``real_fleet`` fixture of ``conftest.py`` makes it):

* a scratch ``HOME`` seeded as ``scripted-model.md`` says: onboarding done, the project folder
  trusted, and with ``channels=True`` the ``tengu_harbor`` feature cached so channel notifications
  register offline (``channels=False`` is what an account without the channels preview gets);
* a :class:`~scripted_model.ScriptedModel` that tells participants apart by the session ids fleet
  recorded at spawn (asked of the daemon);
* :meth:`RealFleet.layout` writes a layout whose agent is the pinned ``claude`` (spawn adds
  ``--allowedTools=mcp__fleet``) with a debug file per participant, and whose ``env`` points Claude
  Code at the scripted model and keeps all traffic local (:func:`claude_env`);
* :meth:`RealFleet.spawn` runs ``fleet spawn --json`` itself (a subprocess, as a user would) into the
  real tmux server of the ``tmux_server`` fixture; :meth:`RealFleet.fleet` runs any other command;
* readers: :meth:`RealFleet.transcript`, :meth:`RealFleet.requests`, :meth:`RealFleet.screen`,
  :meth:`RealFleet.debug_log`.

At the end of the test the model's log is checked for bad requests (:meth:`ScriptedModel.check`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import libtmux
import pytest
from scripted_model import Request, Script, ScriptedModel, Transcript

from fleet.client import Client
from fleet.models import Blip
from fleet.paths import Paths

T = TypeVar("T")

REPO = Path(__file__).resolve().parent.parent
CLAUDE_VERSION = "2.1.332"
INSTALL = (
    f"install Claude Code {CLAUDE_VERSION}: `bash scripts/test.sh` does it (npm install --prefix .ci/node"
    f" @anthropic-ai/claude-code@{CLAUDE_VERSION}), or point FLEET_CLAUDE_BIN at that version's claude"
)
STARTUP = 90.0
"""Seconds a real session may take to start (spawn's readiness wait)."""
TURN = 60.0
"""Seconds a poll for something a session does may take (a scripted turn is sub-second; the
machine may be busy)."""


def find_binary(env_var: str, name: str) -> str | None:
    """``$env_var`` if executable, then ``.ci/node`` under the repository (``scripts/test.sh``
    installs there), then ``name`` on PATH."""
    candidates = [os.environ.get(env_var, ""), str(REPO / f".ci/node/node_modules/.bin/{name}")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which(name)


def pinned_binary(env_var: str, name: str, want: str, version_of: Callable[[str], str], install: str) -> str:
    """The binary :func:`find_binary` finds whose ``--version`` output ``version_of`` reads as
    ``want``, or ``pytest.fail`` saying what to install (never a skip)."""
    path = find_binary(env_var, name)
    if path is None:
        pytest.fail(f"no {name} binary found: {install}", pytrace=False)
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"{path} --version failed ({exc}): {install}", pytrace=False)
    version = version_of(out)
    if version != want:
        pytest.fail(f"{path} is {name} {version or '(unknown)'}, not {want}: {install}", pytrace=False)
    return path


def find_claude() -> str | None:
    return find_binary("FLEET_CLAUDE_BIN", "claude")


def pinned_claude() -> str:
    """The pinned Claude Code binary, or ``pytest.fail`` with what to install."""
    return pinned_binary(
        "FLEET_CLAUDE_BIN", "claude", CLAUDE_VERSION, lambda out: out.split(" ", 1)[0].strip(), INSTALL
    )


def claude_env(model_url: str, home: Path) -> dict[str, str]:
    """The environment that points Claude Code at the scripted model and keeps all traffic local."""
    return {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_AUTH_TOKEN": "scripted-model",  # sent as a bearer token; no login, no dialog
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF": "1",  # read the seeded feature flags
        "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL": "1",
        "MCP_CONNECTION_NONBLOCKING": "0",  # MCP tools exist before the first request
        "TERM": "xterm-256color",
    }


def seed_home(home: Path, project: Path, *, channels: bool) -> None:
    """``$HOME/.claude.json``: onboarding done, ``project`` trusted; ``channels``: the feature flag
    that lets channel notifications register (cached, as if fetched)."""
    config: dict[str, Any] = {
        "hasCompletedOnboarding": True,
        "theme": "dark",
        "projects": {str(project): {"hasTrustDialogAccepted": True}},
    }
    if channels:
        config["cachedGrowthBookFeatures"] = {"tengu_harbor": True}
    (home / ".claude.json").write_text(json.dumps(config))


def toml_value(value: Any) -> str:
    """A TOML literal for a str, bool, int, list or table (enough for layouts)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    return "[" + ", ".join(toml_value(v) for v in value) + "]"


class RealFleet:
    """One test's real sessions (see the module docstring)."""

    def __init__(
        self,
        tmp_path: Path,
        paths: Paths,
        operator: Client,
        tmux_server: libtmux.Server,
        *,
        channels: bool,
        script: Script | None = None,
    ) -> None:
        self.claude = pinned_claude()
        self.tmp = tmp_path
        self.paths = paths
        self.op = operator
        self.srv = tmux_server
        self.channels = channels
        self.home = Path(os.environ["HOME"])
        self.project = tmp_path / "project"
        self.project.mkdir(exist_ok=True)
        seed_home(self.home, self.project, channels=channels)
        self.script = script or Script()
        self.model = ScriptedModel(self.script, self._identify).start()
        # the tmux server starts now, with this environment and its own config
        self.srv.cmd("new-session", "-d", "-s", "keepalive", "tail", "-f", "/dev/null")
        self.socket = str(self.srv.socket_name)
        self.spawned = ""
        """What the last :meth:`spawn` printed (its JSON report and stderr)."""

    def _identify(self, session_id: str) -> str | None:
        with Client(self.op.base_url, self.op.token) as c:  # the server's threads get their own client
            for wave in c.list_waves():
                for rec in c.sessions(wave.id):
                    if rec.session_id == session_id:
                        return rec.participant
        return None

    def close(self) -> None:
        """End the sessions (kill the tmux server), stop the model, fail on any bad request it got."""
        from conftest import retry_until

        self.srv.cmd("kill-server")  # whatever it says: a server already exiting is fine
        retry_until(lambda: not self.srv.is_alive(), what="the tmux server gone")
        self.model.stop()
        self.model.check()

    # ------------------------------------------------------------ running fleet

    @property
    def env(self) -> dict[str, str]:
        """The environment of a ``fleet`` command run by the test (the fixture's daemon and tmux)."""
        return {
            **os.environ,
            "FLEET_DAEMON": self.op.base_url,
            "FLEET_TOKEN": self.op.token,
            "FLEET_TMUX_SOCKET": self.socket,
        }

    def fleet(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fleet", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def layout(
        self,
        roster: Sequence[str],
        name: str = "real",
        *,
        defaults: Mapping[str, Any] | None = None,
        participants: Mapping[str, Mapping[str, Any]] | None = None,
        args: Sequence[str] = (),
    ) -> str:
        """A layout file for ``roster``: the pinned claude in the project folder (spawn grants it
        fleet's tools), ``args`` and a debug file each, the scripted model's environment;
        ``defaults``/``participants`` add keys."""
        lines = [
            'arrangement = "tiled"',
            "[defaults]",
            f"agent = {toml_value(self.claude)}",
            f"cwd = {toml_value(str(self.project))}",
            f"env = {toml_value(claude_env(self.model.url, self.home))}",
        ]
        lines += [f"{k} = {toml_value(v)}" for k, v in (defaults or {}).items()]
        for who in roster:
            lines.append(f"[participants.{who}]")
            lines.append(f"args = {toml_value([*args, '--debug-file', str(self.debug_path(who))])}")
            lines += [f"{k} = {toml_value(v)}" for k, v in ((participants or {}).get(who) or {}).items()]
        path = self.tmp / f"{name}.toml"
        path.write_text("\n".join(lines) + "\n")
        return str(path)

    def spawn(self, wavelet: str, layout: str, *extra: str) -> dict[str, Any]:
        """``fleet spawn WAVELET --layout LAYOUT --json`` (``extra``: more options); every pane ready."""
        done = self.fleet("spawn", wavelet, "--layout", layout, "--wait", str(STARTUP), "--json", *extra)
        self.spawned = done.stdout + done.stderr
        try:
            report: dict[str, Any] = json.loads(done.stdout)
        except ValueError:
            raise AssertionError(f"fleet spawn failed ({done.returncode}): {done.stderr}") from None
        not_ready = [(p["participant"], p["why"]) for p in report["panes"] if not p["ready"]]
        assert done.returncode == 0 and not not_ready, f"not ready: {not_ready}; {done.stderr}"
        return report

    # ------------------------------------------------------------ reading what happened

    def session_id(self, participant: str, wave: str = "w") -> str:
        (rec,) = self.op.sessions(wave, participant)
        return rec.session_id

    def transcript(self, participant: str, wave: str = "w") -> Transcript:
        return Transcript(self.home, self.session_id(participant, wave))

    def requests(self, participant: str | None = None) -> list[Request]:
        return self.model.requests(participant)

    def debug_path(self, participant: str) -> Path:
        return self.tmp / f"claude-debug-{participant}.txt"

    def debug_log(self, participant: str) -> str:
        path = self.debug_path(participant)
        return path.read_text(errors="replace") if path.exists() else ""

    def pane(self, participant: str) -> str:
        out = self.srv.cmd("list-panes", "-a", "-F", "#{pane_id}\t#{@fleet_participant}").stdout
        return next(line.split("\t")[0] for line in out if line.endswith(f"\t{participant}"))

    def pane_pid(self, participant: str) -> int:
        out = self.srv.cmd("display-message", "-p", "-t", self.pane(participant), "#{pane_pid}").stdout
        return int(out[0])

    def pane_dead(self, participant: str) -> bool:
        out = self.srv.cmd("display-message", "-p", "-t", self.pane(participant), "#{pane_dead}").stdout
        return out == ["1"]

    def operator_session(self, *claude_args: str, wave: str = "w") -> str:
        """``fleet claude --wave WAVE -- CLAUDE_ARGS`` in a new tmux window (the operator's in-band
        session, a real Claude Code against the scripted model); returns its pane id once its channel
        is registered (so the development-channels warning was accepted) and its prompt is shown."""
        env = {
            **claude_env(self.model.url, self.home),
            "FLEET_DAEMON": self.op.base_url,
            "FLEET_TOKEN": self.op.token,
        }
        flags = [f for k, v in env.items() for f in ("-e", f"{k}={v}")]
        debug = str(self.debug_path("operator"))
        argv = [sys.executable, "-m", "fleet", "claude", "--wave", wave, "--claude", self.claude, "--",
                "--debug-file", debug, *claude_args]  # fmt: skip
        out = self.srv.cmd(
            "new-window", "-d", "-P", "-F", "#{pane_id}", "-c", str(self.project), *flags, *argv
        )
        pane = out.stdout[0]

        def ready() -> bool:  # the channel registered (the warning accepted), the prompt on screen
            screen = "\n".join(self.srv.cmd("capture-pane", "-p", "-t", pane).stdout)
            registered = 'MCP server "fleet": Channel notifications registered' in self.debug_log("operator")
            return registered and "❯" in screen and "development channels" not in screen

        try:
            self.wait(ready, "the operator's Claude Code session", timeout=STARTUP)
        except AssertionError as exc:
            screen = "\n".join(self.srv.cmd("capture-pane", "-p", "-t", pane).stdout)
            raise AssertionError(f"{exc}\nits screen:\n{screen}") from None
        return pane

    def type_into(self, pane: str, text: str) -> None:
        """Type ``text`` into a pane's Claude Code prompt and press Enter."""
        self.srv.cmd("send-keys", "-t", pane, "-l", text)
        self.srv.cmd("send-keys", "-t", pane, "Enter")

    def screen(self, participant: str) -> str:
        return "\n".join(
            self.srv.cmd("capture-pane", "-p", "-J", "-S", "-", "-t", self.pane(participant)).stdout
        )

    def blips(self, wavelet: str) -> list[Blip]:
        return self.op.read(self.op.resolve(wavelet).id, limit=1000).blips

    def wait(self, pred: Callable[[], T], what: str, timeout: float = TURN) -> T:
        """Poll ``pred`` until truthy (returned) or the deadline (AssertionError with the model's log)."""
        from conftest import retry_until

        try:
            return retry_until(pred, timeout=timeout, interval=0.05, what=what)
        except AssertionError as exc:
            tail = "\n".join(repr(r) for r in self.model.log[-20:])
            raise AssertionError(f"{exc}\nthe scripted model's last requests:\n{tail}") from None
