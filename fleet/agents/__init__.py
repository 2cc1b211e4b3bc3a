"""Agent kinds: what fleet knows about each CLI it can run in a pane (docs/agents.md).

A layout's ``agent`` is a command (shell words); its kind is found by the command's name: ``claude``
(Claude Code, :mod:`fleet.agents.claude`), ``codex`` (the Codex CLI, :mod:`fleet.agents.codex`),
``fleet-standin`` (the scripted stand-in, :mod:`fleet.agents.standin`), and any other command is
the generic ``command`` kind — launched with Claude Code's flags, its deliveries unconfirmed. A wave can mix
kinds: each pane's is its own.

A kind knows, for its CLI, how to launch it with the channel injected inline (:meth:`Kind.command`),
what wakes it (:attr:`Kind.wake`), how the channel reads its record (:attr:`Kind.receipts`: the
``--receipts`` the channel is given; :meth:`Kind.record`: a reader of it in Claude Code's transcript
form, for the resident's mind), how a line is put to an idle session as its next turn
(:meth:`Kind.enter`: the resident's heartbeats and crons) and what it cannot do that Claude Code does
(:attr:`Kind.limits`: spawn's report and ``fleet status`` say them, never a silent "ready";
:attr:`Kind.mind_limits`: what ``fleet resident status`` adds for a mind of this kind).

The kinds are entries of the seam :data:`fleet.seams.agent_kinds`, named lazily here (the three
built-ins) the way :mod:`fleet.features` names the features: a third-party kind plugs in with
``seams.agent_kinds.add(name, kind)`` and is asked before the generic one. What a caller may rely
on: :func:`kind_of` always answers (the generic kind last), and the same words always
give the same kind.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from fleet import errors
from fleet.seams import agent_kinds

if TYPE_CHECKING:
    from fleet.delivery.receipts import Transcript
    from fleet.layouts import ResolvedProfile
    from fleet.models import Wave, Wavelet
    from fleet.paths import Paths
    from fleet.seams import Launch
    from fleet.tmux import Tmux

Receipts = Literal["transcript", "rollout", "none"]
"""What the channel reads to confirm a delivery: Claude Code's transcript, Codex's rollout, nothing."""
Transport = Literal["auto", "channel", "hook"]
Health = tuple[Literal["ok", "warn", "fail"], str, str]
"""``fleet doctor``'s check of a kind: (level, detail, fix)."""

GENERIC = "command"
"""The kind of any command no other kind claims: launched with Claude Code's flags, unconfirmed."""
STANDIN = "fleet-standin"
"""Agent command alias for the scripted stand-in agent (:mod:`fleet.standin`)."""


@dataclass
class Start:
    """One pane's launch as spawn hands it to its kind (everything but tmux)."""

    words: list[str]
    profile: ResolvedProfile
    participant: str
    wave: Wave
    wavelet: Wavelet
    session_id: str
    """fleet's id of the session (Claude Code takes it as its own; Codex names its thread itself)."""
    resume: bool
    transport: Transport
    token_file: Path
    paths: Paths
    daemon_url: str
    launch: str
    """The launch id the channel reports in its presence (``FLEET_LAUNCH``)."""
    cwd: str
    trust: bool
    seen: Launch
    """What the spawn seams' entries read (prompt parts, settings hooks)."""
    watch_hook: Callable[[bool], str] | None = None
    """``fleet watch --hook`` settings JSON for this participant (``gate``: beside a channel), or None."""


@dataclass
class Command:
    """What a kind launches: the pane's argv and what spawn should say of it."""

    argv: list[str]
    route: str = ""
    """What wakes the session as far as the launch says ('' : spawn finds out, as for Claude Code)."""
    notes: list[str] = field(default_factory=list)
    """What this session cannot do that Claude Code does (said in spawn's report)."""


class Kind(Protocol):
    """One CLI fleet can run in a pane."""

    @property
    def name(self) -> str:
        """``claude`` | ``codex`` | ``standin`` | ``command`` (recorded nowhere: found from the words)."""
        ...

    @property
    def receipts(self) -> Receipts: ...

    @property
    def wake(self) -> str:
        """What wakes an idle session of this kind, in words (docs/agents.md)."""
        ...

    @property
    def limits(self) -> tuple[str, ...]:
        """What it cannot do that Claude Code does, one phrase each (empty: nothing)."""
        ...

    def matches(self, words: list[str]) -> bool:
        """Whether ``words`` (an agent command as argv) runs this kind's CLI."""
        ...

    def require(self, words: list[str]) -> None:
        """A :class:`~fleet.errors.ToolMissing` naming the install when the CLI is not there."""
        ...

    def resumable(self, session_id: str, env: Mapping[str, str], paths: Paths) -> bool:
        """Whether a recorded session can be resumed (it saved a conversation), as the pane sees ``env``."""
        ...

    def command(self, start: Start) -> Command:
        """The pane's command line, with the channel injected inline."""
        ...

    def offers_channel(self, argv: list[str]) -> bool:
        """A pane whose channels verdict spawn reads from its screen (Claude Code's dev channel)."""
        ...

    @property
    def mind_limits(self) -> tuple[str, ...]:
        """What a resident mind of this kind cannot do that a Claude Code mind does (empty: nothing)."""
        ...

    @property
    def steer(self) -> str:
        """'' when the session's record shows an operator's blip steering a running turn (Claude Code's
        queue lines); else why it never does, one sentence (``fleet resident status`` says it)."""
        ...

    def record(self, session_id: str, env: Mapping[str, str], paths: Paths) -> Transcript | None:
        """A reader of the session's own record from its start, its lines in Claude Code's transcript
        form (a Codex rollout translated), as the pane sees ``env``; None: fleet reads no record of
        this kind (the reader's ``problem`` says why one cannot be read yet)."""
        ...

    @property
    def after_interrupt(self) -> str:
        """'' when a session takes its wakes as before after an Escape ended its turn; else what it
        does instead, one sentence (``fleet resident interrupt`` says it when it typed nothing)."""
        ...

    def enter(
        self, tmux: Tmux, pane_id: str, text: str, *, words: list[str], session_id: str,
        env: Mapping[str, str], paths: Paths, interrupted: bool = False,
    ) -> None:  # fmt: skip
        """Put ``text`` (one line) to the idle session in ``pane_id`` as its next turn, the way this
        kind takes one (typed into its pane, or queued; ``interrupted``: its last turn was ended by
        an Escape); a :class:`~fleet.errors.FleetError` when it could not be. ``words``: the
        session's agent command, ``env``: its pane's environment."""
        ...

    def doctor(self) -> Health | None:
        """``fleet doctor``'s check of its CLI (binary and version), or None (nothing to check)."""
        ...


def kind_of(words: list[str]) -> Kind:
    """The kind that runs ``words``: the first entry of :data:`fleet.seams.agent_kinds` that matches,
    the generic ``command`` kind (which matches anything) asked last."""
    for name in agent_kinds.names():
        kind = agent_kinds.get(name)
        if name != GENERIC and kind is not None and kind.matches(words):
            return kind
    generic = agent_kinds.get(GENERIC)
    if generic is None:
        raise errors.UsageError(f"no agent kind runs {words[0]!r} (the generic kind was removed)")
    return generic


def named(name: str) -> Kind | None:
    """The kind whose name is also its CLI's command (``claude``, ``codex``): what ``mind: codex`` in
    GOAL.md names. None for any other word (a layout's name), the stand-in and the generic kind."""
    kind = agent_kinds.get(name)
    if name == GENERIC or kind is None or kind.name != name:
        return None
    return kind if kind.matches([name]) else None


def kinds() -> list[Kind]:
    """Every kind on the seam, in the order they are asked (the generic one last)."""
    names = [n for n in agent_kinds.names() if n != GENERIC] + [GENERIC]
    return [k for n in names if (k := agent_kinds.get(n)) is not None]


def agent_words(agent: str) -> list[str]:
    """The agent command as argv; ``fleet-standin`` runs this Python's stand-in module."""
    words = shlex.split(agent)
    if not words:
        raise errors.UsageError("the agent command is empty")
    if words[0] == STANDIN:
        return [sys.executable, "-m", "fleet.standin", *words[1:]]
    return words


def require_agent(words: list[str]) -> None:
    """A :class:`~fleet.errors.ToolMissing` when the agent's CLI is not installed (named with its kind's
    install line)."""
    kind_of(words).require(words)


def version_of(argv: list[str]) -> str:
    """The first line ``argv`` prints (a ``--version``), or why it could not be run."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({exc})"
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else "?"


def channel_entry(
    participant: str,
    wave: str,
    daemon_url: str,
    token_file: Path,
    *,
    state_dir: Path,
    attention: str = "full",
    deliver: bool = True,
    cap: int | None = None,
    receipts: bool | Receipts = False,
    hook_fallback: bool = False,
    launch: str = "",
    session_id: str = "",
) -> dict[str, object]:
    """The ``fleet`` stdio server entry for an agent's MCP config (no secret in it: the token is a file).

    ``state_dir``: where its delivery state is kept — the spawning side's (``Paths.channels``), the
    one its hook, ``fleet status`` and a respawn read, whatever the pane's own environment would make
    of it; ``receipts``: what confirms deliveries (True: Claude Code's transcript);
    ``hook_fallback``: a hook is installed beside the channel (``--transport auto``); ``session_id``:
    fleet's id of the session, passed when the agent does not set ``CLAUDE_CODE_SESSION_ID`` itself
    (Codex)."""
    how: Receipts = "transcript" if receipts is True else ("none" if receipts is False else receipts)
    args = ["-m", "fleet", "channel", "--participant", participant, "--wave", wave,
            "--daemon", daemon_url, "--token-file", str(token_file),
            "--state-dir", str(state_dir)]  # fmt: skip
    if attention != "full":
        args += ["--attention", attention]
    if not deliver:
        args += ["--no-deliver"]
    args += ["--receipts", how]
    if hook_fallback:
        args += ["--hook-fallback"]
    if cap is not None:
        args += ["--cap", str(cap)]
    env = {k: os.environ[k] for k in ("FLEET_HOME",) if os.environ.get(k)}
    if launch:
        env["FLEET_LAUNCH"] = launch  # in its presence reports: this launch's channel, not an older one
    if session_id:
        env["FLEET_SESSION_ID"] = session_id
    return {"type": "stdio", "command": sys.executable, "args": args, "env": env}


# The built-in kinds, asked in this order (the stand-in's words are this Python's, so it goes first;
# the generic kind is asked last whatever its place).
agent_kinds.lazy("standin", "fleet.agents.standin:kind")
agent_kinds.lazy("claude", "fleet.agents.claude:kind")
agent_kinds.lazy("codex", "fleet.agents.codex:kind")
agent_kinds.lazy(GENERIC, "fleet.agents.claude:generic")
