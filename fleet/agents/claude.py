"""Claude Code as a fleet agent: launched with the channel as an inline ``--mcp-config``, woken by the
channel's push (``notifications/claude/channel``) or, where Claude Code has no channels, by the
``asyncRewake`` hook (docs/design.md §3, §3a, §6); its record is its transcript
(:mod:`fleet.delivery.receipts`, :mod:`fleet.agentstate`, :mod:`fleet.usage`).

The command line (:func:`agent_argv`) is the contract spawn kept before kinds existed: fleet's tools
pre-allowed (``--allowedTools=mcp__fleet``), the development channel loaded unless the transport is
``hook``, the state, watch and features' hooks in one ``--settings``, the channel's instructions and
the features' prompt parts in ``--append-system-prompt`` (at spawn and at every ``--resume``).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleet import errors
from fleet.agents import STANDIN, Command, Health, Receipts, Start, Transport, channel_entry, version_of
from fleet.agentstate import hook_entries, hook_file
from fleet.channel.tools import instructions
from fleet.seams import launch_settings, prompt_parts

if TYPE_CHECKING:
    from fleet.delivery.receipts import Transcript
    from fleet.layouts import ResolvedProfile
    from fleet.paths import Paths
    from fleet.tmux import Tmux

ALLOW_FLEET_TOOLS = "--allowedTools=mcp__fleet"
"""Every tool of the ``fleet`` MCP server, granted without a prompt (``=`` form: the flag is variadic)."""
DEV_CHANNEL = "--dangerously-load-development-channels=server:fleet"


def state_hooks(paths: Paths, session_id: str) -> dict[str, list[dict[str, Any]]]:
    """The state hooks of a Claude Code session (:func:`fleet.agentstate.hook_entries`): each
    appends its event to the session's file in the channels' directory, which its channel tails."""
    return hook_entries(hook_file(paths.channels, session_id))


def settings_json(base: str | None, *extra: dict[str, list[dict[str, Any]]]) -> str:
    """``--settings`` JSON: ``base`` (fleet's watch hook settings, or None) with the hook entries of
    ``extra`` added per event (each feature keeps its own entries; an event's matchers add up)."""
    settings: dict[str, Any] = json.loads(base) if base else {}
    hooks: dict[str, list[Any]] = settings.setdefault("hooks", {})
    for entries in extra:
        for event, matchers in entries.items():
            hooks.setdefault(event, []).extend(matchers)
    return json.dumps(settings, separators=(",", ":"))


def mcp_config(entry: dict[str, object]) -> str:
    return json.dumps({"mcpServers": {"fleet": entry}}, separators=(",", ":"))


def agent_argv(
    words: list[str],
    profile: ResolvedProfile,
    participant: str,
    session_id: str,
    config_json: str,
    *,
    resume: bool,
    transport: Transport,
    hook_settings: str | None = None,
    system_prompt: str | None = None,
) -> list[str]:
    """The exact command line a pane runs (claude's flags, in their ``=`` forms where variadic).

    fleet's own tools are granted (``--allowedTools=mcp__fleet``): a participant whose every post
    waits at a permission prompt stalls the wave, and in Claude Code's default "auto" mode each call
    would cost a classifier request to the model first. ``system_prompt`` (Claude Code: the
    participant's identity and the prompt contract) goes in ``--append-system-prompt``: Claude Code
    attaches the channel's MCP instructions only after a session's first tool result, so a wake's
    request would otherwise reach the model without them; the system prompt is in every request,
    and ``--resume`` keeps the one recorded at the start (docs/design.md §6).
    """
    argv = [*words, f"--mcp-config={config_json}", ALLOW_FLEET_TOOLS]
    if transport in ("channel", "auto"):
        argv.append(DEV_CHANNEL)
    if hook_settings:  # the watch hook (hook, auto), the state and permission hooks (any transport)
        argv.append(f"--settings={hook_settings}")
    if system_prompt:
        argv += ["--append-system-prompt", system_prompt]
    argv += ["--resume", session_id] if resume else ["--session-id", session_id]
    argv += ["--name", participant]
    if profile.model:
        argv += ["--model", profile.model]
    if profile.permission_mode:
        argv += ["--permission-mode", profile.permission_mode]
    return argv + list(profile.args)


def type_in(tmux: Tmux, pane_id: str, text: str) -> None:
    """Type ``text`` into the pane and press Enter (what Claude Code's prompt and the stand-in take)."""
    tmux.type_line(pane_id, text + (" " if text.endswith(";") else ""))


def claude_command(start: Start, *, claude: bool) -> Command:
    """The command line of Claude Code (``claude``: its receipts, hooks and system prompt apply) or of
    an agent that takes its flags (the stand-in, another command: the channel alone, unconfirmed)."""
    profile, transport = start.profile, start.transport
    # auto: the hook takes what Claude Code's transcript shows it did not take; an agent that keeps
    # no transcript gets the channel alone (no receipts: nothing for a hook to take over)
    fallback = transport == "auto" and claude
    entry = channel_entry(
        start.participant, start.wave.name, start.daemon_url, start.token_file,
        state_dir=start.paths.channels, attention=profile.attention, deliver=transport != "hook",
        cap=profile.cap, receipts=claude, hook_fallback=fallback, launch=start.launch,
    )  # fmt: skip
    hook = None
    if transport == "hook" or fallback:
        if start.watch_hook is None:
            raise errors.UsageError(
                f"--transport {transport} needs fleet's watch hook, which is not available"
            )
        hook = start.watch_hook(transport == "auto")
    prompt = None
    if claude:
        hook = settings_json(
            hook,
            # what the transcript does not say (a prompt waiting, a failure, the end)
            state_hooks(start.paths, start.session_id),
            # the features' own (permissions: its prompts answered from anywhere, docs/permissions.md)
            *[got for settings in launch_settings if (got := settings(start.seen)) is not None],
        )
        # the channel's instructions, then the features' parts (the resident's operating prompt)
        prompt = instructions(start.participant, start.wave.name, profile.attention)
        prompt += "".join(part(start.seen) for part in prompt_parts)
    argv = agent_argv(
        start.words, profile, start.participant, start.session_id, mcp_config(entry),
        resume=start.resume, transport=transport, hook_settings=hook, system_prompt=prompt,
    )  # fmt: skip
    return Command(argv)


class Claude:
    """Claude Code (``claude`` by name)."""

    name = "claude"
    receipts: Receipts = "transcript"
    wake = "channel push (notifications/claude/channel), or the asyncRewake hook where channels are off"
    limits: tuple[str, ...] = ()

    def matches(self, words: list[str]) -> bool:
        return Path(words[0]).name == "claude"

    def require(self, words: list[str]) -> None:
        if shutil.which(words[0]) is None:
            raise errors.ToolMissing(
                "claude (Claude Code) is not installed or not on PATH: install it with"
                " `npm install -g @anthropic-ai/claude-code`, or spawn another agent with --agent CMD"
                f" (e.g. --agent {STANDIN} for the scripted stand-in)"
            )

    def resumable(self, session_id: str, env: Mapping[str, str], paths: Paths) -> bool:
        """Claude Code saves a session with its first message: one that never had any cannot be
        resumed ("No conversation found")."""
        from fleet.delivery.receipts import transcript_of

        return transcript_of(session_id, {**os.environ, **env}) is not None

    def command(self, start: Start) -> Command:
        return claude_command(start, claude=True)

    def offers_channel(self, argv: list[str]) -> bool:
        return DEV_CHANNEL in argv

    mind_limits: tuple[str, ...] = ()
    steer = ""
    after_interrupt = ""

    def record(self, session_id: str, env: Mapping[str, str], paths: Paths) -> Transcript | None:
        """Its transcript (``~/.claude/projects/…/<session id>.jsonl`` of ``env``'s HOME), once written."""
        from fleet.delivery.receipts import Transcript, transcript_of

        class Located(Transcript):
            def _locate(self) -> Path | None:
                if self.path is None:
                    self.path = transcript_of(self.session_id, {**os.environ, **env})
                return self.path

        return Located(session_id)

    def enter(
        self, tmux: Tmux, pane_id: str, text: str, *, words: list[str], session_id: str,
        env: Mapping[str, str], paths: Paths, interrupted: bool = False,
    ) -> None:  # fmt: skip
        type_in(tmux, pane_id, text)

    def doctor(self) -> Health | None:
        path = shutil.which("claude")
        if path is None:
            return (
                "warn",
                "Claude Code is not on PATH (only the scripted stand-in agent can be spawned)",
                "npm install -g @anthropic-ai/claude-code, or spawn with --agent CMD",
            )
        return "ok", f"{path}: {version_of([path, '--version'])}", ""


kind = Claude()


class Generic:
    """Any other command: launched with Claude Code's command line (a wrapper around ``claude``, a
    script that takes its flags), its deliveries unconfirmed (``--receipts none``)."""

    name = "command"
    receipts: Receipts = "none"
    wake = "channel push (unconfirmed: fleet reads no record of this agent)"
    limits: tuple[str, ...] = ("its deliveries are not confirmed: fleet reads no record of this agent",)

    def matches(self, words: list[str]) -> bool:
        return True

    def require(self, words: list[str]) -> None:
        if shutil.which(words[0]) is None:
            raise errors.ToolMissing(
                f"agent command {words[0]!r} was not found on PATH: install it or fix --agent"
            )

    def resumable(self, session_id: str, env: Mapping[str, str], paths: Paths) -> bool:
        return True

    def command(self, start: Start) -> Command:
        return claude_command(start, claude=False)

    def offers_channel(self, argv: list[str]) -> bool:
        return False

    mind_limits: tuple[str, ...] = ("its turns and state are not read (fleet reads no record of this agent)",)
    steer = "not read: fleet reads no record of this agent"
    after_interrupt = ""

    def record(self, session_id: str, env: Mapping[str, str], paths: Paths) -> Transcript | None:
        return None

    def enter(
        self, tmux: Tmux, pane_id: str, text: str, *, words: list[str], session_id: str,
        env: Mapping[str, str], paths: Paths, interrupted: bool = False,
    ) -> None:  # fmt: skip
        type_in(tmux, pane_id, text)

    def doctor(self) -> Health | None:
        return None


generic = Generic()
