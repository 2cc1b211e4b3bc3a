"""The Codex CLI as a fleet agent (``agent = "codex"``; checked with codex-cli 0.169.0, docs/agents.md).

**Launch.** The TUI in its pane, everything given inline with ``-c key=value`` (TOML values), so
nothing of the user's ``$CODEX_HOME/config.toml`` is edited:

- the channel as the session's stdio MCP server: ``mcp_servers.fleet.command``/``args``/``env`` (Codex
  passes an MCP server only a few variables of its own, so ``FLEET_HOME``, the launch and session
  ids, ``CODEX_HOME`` and the Codex binary's path go in ``env``), its tools approved without a prompt
  (``mcp_servers.fleet.default_tools_approval_mode = "approve"``: otherwise every ``wavelet_post``
  waits at "Allow the fleet MCP server to run tool …?");
- identity and the prompt contract as ``developer_instructions`` (a developer message Codex keeps at
  the head of the thread: in every request, resumed ones included), the spawn seam's prompt parts
  after them; each wake repeats the short form;
- the features' settings hooks (``launch_settings``: the permission hook) as Codex hooks
  (:func:`hook_config`: ``hooks.<Event>``, Claude Code's shape), for the events checked with Codex
  only (``PermissionRequest``), each trusted inline by its hash (``hooks.state``): Codex runs no hook
  it has not been told to trust, and fleet trusts exactly its own, never the user's
  (``--dangerously-bypass-hook-trust`` is not used);
- with ``--trust``, the pane's folder trusted (``projects = {"<cwd>" = {trust_level = "trusted"}}``, an
  inline table: the dotted key is ignored): Codex asks "Trust this folder?" in a git checkout
  otherwise, and in a folder it does not trust refuses a command that asks to leave the sandbox
  without asking;
- a first prompt (:func:`kickoff`): ``codex queue`` refuses a thread with no turn yet ("no rollout
  found for thread id"), so a fresh session spends one short turn at spawn. ``--resume`` is
  ``codex resume <thread id>`` (the thread the channel learnt, kept beside the session).

**Wake, record.** The channel wakes it with ``codex queue`` (:mod:`fleet.channel.codex`) and reads its
rollout (:mod:`fleet.delivery.rollout`) for receipts, state and usage.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fleet import errors
from fleet.agents import Command, Health, Receipts, Start, channel_entry, version_of
from fleet.channel.tools import instructions
from fleet.delivery.rollout import VERIFIED, Rollout, read_thread, rollout_of
from fleet.seams import launch_settings, prompt_parts

if TYPE_CHECKING:
    from fleet.delivery.receipts import Transcript
    from fleet.paths import Paths
    from fleet.tmux import Tmux

log = logging.getLogger(__name__)

ROUTE = "woken by codex queue (no push into Codex: an idle session takes a wake within seconds)"
LIMITS = (
    "no push: a wake is a `codex queue` message the idle TUI polls for (seconds, not milliseconds)",
    "a blip arriving mid-turn waits for the turn's end (Codex does not absorb it into the running turn)",
    "a fresh session spends one short turn at spawn (codex queue needs a thread with a turn)",
    'an approval prompt is answered with `fleet approve`/`deny` only: its pane shows "Running hook",'
    " not Codex's dialog, until fleet's wait for the answer ends (30 min; FLEET_PERMISSION_WAIT in its env)",
    "after an Escape ends its turn it takes no wake until a line is typed in its pane (Codex holds its"
    " queue; `fleet resident interrupt WAVE TEXT` types TEXT)",
    "resume on this machine only (the thread id is kept in this machine's state dir)",
)
"""What a Codex agent cannot do that a Claude Code one does (spawn's report, ``fleet status``)."""
MIND_LIMITS = (
    "no steering: an operator's blip that arrives mid-turn waits for the turn's end (the next turn)",
    "heartbeats and crons are `codex queue` messages (seconds to enter, as any wake)",
)
"""What a Codex mind cannot do that a Claude Code one does (``fleet resident status``)."""
AFTER_INTERRUPT = (
    "Codex holds its queue after an Escape: blips and heartbeats wait until a line is typed in its pane"
    " (an interrupt's TEXT is; verified with 0.169.0)"
)
STEER = (
    "never: Codex keeps a blip that arrives mid-turn in its queue and takes it as the next turn"
    " (verified with 0.169.0)"
)
HOOK_EVENTS = {"PermissionRequest": "permission_request"}
"""The settings hooks passed to Codex (Claude Code's event name -> Codex's label in a trust key): the
events fleet checked with the real binary (0.169.0). Others are Claude Code's only."""
SESSION_FLAGS = "/<session-flags>/config.toml"
"""Where Codex says a hook given with ``-c`` comes from (the first part of its trust key)."""
_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def toml(value: object) -> str:
    """``value`` as a TOML value for ``-c key=value`` (strings, lists of them, tables of them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        # a JSON string is a TOML basic string, but for a surrogate pair's escapes (TOML takes
        # only scalar values: kept as the character) and DEL, which TOML wants escaped
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    if isinstance(value, dict):
        items = [f"{k if _BARE.match(k) else toml(k)} = {toml(v)}" for k, v in value.items()]
        return "{" + ", ".join(items) + "}"
    raise TypeError(f"no TOML form for {value!r}")


def hook_hash(label: str, handler: Mapping[str, Any], matcher: str | None = None) -> str:
    """The hash Codex trusts a hook by: SHA-256 of the hook's identity as compact JSON with sorted keys
    (its event's label, the one handler with ``async`` false, the group's matcher if any), as Codex
    0.169.0 computes it (checked: the hash its "Trust all" wrote for a hook given with ``-c``)."""
    ident: dict[str, Any] = {"event_name": label, "hooks": [{"async": False, **handler}]}
    if matcher is not None:
        ident["matcher"] = matcher
    canonical = json.dumps(ident, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def hook_config(entries: Sequence[Mapping[str, Sequence[Mapping[str, Any]]]]) -> dict[str, str]:
    """``-c`` settings (key -> TOML value) giving Codex the hooks of ``entries`` (Claude Code's
    ``hooks`` shape, event -> matcher groups; each feature's entries in turn) and trusting each:
    ``hooks.<Event>`` per event of :data:`HOOK_EVENTS`, ``hooks.state`` keyed
    ``/<session-flags>/config.toml:<label>:<group>:<handler>``. A handler that is not a plain command
    (``type``, ``command``, ``timeout``) is left out: its hash is not one fleet checked."""
    events: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        for event, groups in entry.items():
            if event not in HOOK_EVENTS:
                log.info("not given to Codex: a %s hook (Claude Code's only)", event)
                continue
            for group in groups:
                handlers = [
                    dict(h) for h in group.get("hooks") or []
                    if h.get("type") == "command" and set(h) <= {"type", "command", "timeout"}
                ]  # fmt: skip
                if handlers:
                    matcher = group.get("matcher")
                    events.setdefault(event, []).append(
                        {**({"matcher": matcher} if isinstance(matcher, str) else {}), "hooks": handlers}
                    )
    config: dict[str, str] = {}
    state: dict[str, dict[str, str]] = {}
    for event, groups in events.items():
        label = HOOK_EVENTS[event]
        config[f"hooks.{event}"] = toml(groups)
        for g, group in enumerate(groups):
            for h, handler in enumerate(group["hooks"]):
                key = f"{SESSION_FLAGS}:{label}:{g}:{h}"
                state[key] = {"trusted_hash": hook_hash(label, handler, group.get("matcher"))}
    if state:
        config["hooks.state"] = toml(state)
    return config


def kickoff(participant: str, wave: str) -> str:
    """The first prompt of a fresh Codex session (one short turn: the thread then takes wakes)."""
    return (
        f"fleet: you are {participant} in wave {wave}. Nothing to do yet: answer with one word and wait. "
        'Blips for you will arrive as messages of <channel source="fleet"> blocks.'
    )


class Codex:
    """The Codex CLI (``codex`` by name)."""

    name = "codex"
    receipts: Receipts = "rollout"
    wake = "codex queue --thread <id> --message <blips> (the TUI takes it as a new turn)"
    limits: tuple[str, ...] = LIMITS

    def matches(self, words: list[str]) -> bool:
        return bool(words) and words[0].rsplit("/", 1)[-1] == "codex"

    def require(self, words: list[str]) -> None:
        if shutil.which(words[0]) is None:
            raise errors.ToolMissing(
                f"codex (the Codex CLI) is not installed or not on PATH: install it with"
                f" `npm install -g @openai/codex@{VERIFIED}`, or spawn another agent with --agent CMD"
            )

    def resumable(self, session_id: str, env: Mapping[str, str], paths: Paths) -> bool:
        """A thread the channel learnt whose rollout exists (Codex writes it with the first turn)."""
        thread = read_thread(paths.channels, session_id)
        return thread is not None and rollout_of(thread, env) is not None

    def command(self, start: Start) -> Command:
        profile = start.profile
        binary = shutil.which(start.words[0]) or start.words[0]
        entry = channel_entry(
            start.participant, start.wave.name, start.daemon_url, start.token_file,
            state_dir=start.paths.channels, attention=profile.attention, cap=profile.cap,
            receipts="rollout", launch=start.launch, session_id=start.session_id,
        )  # fmt: skip
        env = dict(entry["env"])  # type: ignore[call-overload]
        env["FLEET_CODEX_BIN"] = binary
        seen = {**os.environ, **profile.env}  # what the pane has; Codex passes its MCP servers only a few
        for name in ("CODEX_HOME", "FLEET_STORE_WAIT", *[k for k in seen if k.startswith("FLEET_FAULT_")]):
            if seen.get(name):
                env[name] = seen[name]
        # the channel's instructions, then the features' prompt parts (as Claude Code's system prompt)
        prompt = instructions(start.participant, start.wave.name, profile.attention)
        prompt += "".join(part(start.seen) for part in prompt_parts)
        config = {
            "mcp_servers.fleet.command": toml(sys.executable),
            "mcp_servers.fleet.args": toml(list(entry["args"])),  # type: ignore[call-overload]
            "mcp_servers.fleet.env": toml(env),
            "mcp_servers.fleet.default_tools_approval_mode": toml("approve"),
            # the pane's tmux passed through (Codex gives an MCP server only a few of its variables): a
            # resident's workers are spawned in the tmux server its own pane is in (verified: env_vars)
            "mcp_servers.fleet.env_vars": toml(["TMUX", "TMUX_PANE"]),
            "developer_instructions": toml(prompt),
            # the features' hooks (the permission hook: its approvals answered from anywhere)
            **hook_config([got for settings in launch_settings if (got := settings(start.seen)) is not None]),
        }
        if start.trust:
            # an inline table: the dotted form (projects."<cwd>".trust_level) is taken and ignored by
            # Codex 0.169.0 (the folder stays untrusted: its git dialog shows, its approvals granular)
            config["projects"] = toml({start.cwd: {"trust_level": "trusted"}})
        thread = read_thread(start.paths.channels, start.session_id) if start.resume else None
        argv = [*start.words, *(["resume"] if thread else [])]
        for key, value in config.items():
            argv += ["-c", f"{key}={value}"]
        if profile.model:
            argv += ["-m", profile.model]
        argv += list(profile.args)
        argv.append(thread if thread else kickoff(start.participant, start.wave.name))
        return Command(argv, route=ROUTE, notes=list(LIMITS))

    def offers_channel(self, argv: list[str]) -> bool:
        return False

    mind_limits: tuple[str, ...] = MIND_LIMITS
    steer = STEER
    after_interrupt = AFTER_INTERRUPT

    def record(self, session_id: str, env: Mapping[str, str], paths: Paths) -> Transcript | None:
        """Its thread's rollout, translated (:class:`~fleet.delivery.rollout.Rollout`): the thread is
        the one the channel learnt and kept beside the session, asked for until it is there."""
        return Rollout(None, find_thread=lambda: read_thread(paths.channels, session_id), env=dict(env))

    def enter(
        self, tmux: Tmux, pane_id: str, text: str, *, words: list[str], session_id: str,
        env: Mapping[str, str], paths: Paths, interrupted: bool = False,
    ) -> None:  # fmt: skip
        """``codex queue`` to its thread: the verified way into an idle Codex session. After an Escape
        (``interrupted``) Codex 0.169.0 holds its queue until a line is typed into its TUI (verified:
        a message queued then entered only after a typed turn), so that line is typed (its echo, then
        Enter: the TUI took it as a turn, ``turn_trigger: "user"``)."""
        from fleet.agents.claude import type_in
        from fleet.channel.codex import queue

        if interrupted:
            type_in(tmux, pane_id, text)
            return
        thread = read_thread(paths.channels, session_id)
        if thread is None:
            raise errors.FleetError(
                f"the Codex thread of session {session_id} is not known yet (its channel learns it when"
                " the session starts): nothing was queued"
            )
        seen = {**os.environ, **env}
        binary = shutil.which(words[0], path=seen.get("PATH")) or words[0]
        why = queue(binary, thread, text, seen)
        if why:
            raise errors.FleetError(f"could not put a turn to Codex thread {thread}: {why}")

    def doctor(self) -> Health | None:
        path = shutil.which("codex")
        if path is None:
            return (
                "warn",
                "the Codex CLI is not on PATH (Codex agents cannot be spawned)",
                f"npm install -g @openai/codex@{VERIFIED}, if you want Codex agents",
            )
        seen = version_of([path, "--version"])
        note = "" if VERIFIED in seen else f" (fleet was checked with {VERIFIED})"
        return "ok", f"{path}: {seen}{note}", ""


kind = Codex()
