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
  after them; each wake repeats the short form. The settings hooks (``launch_settings``: the
  permission hook) are Claude Code's and are not given;
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

import json
import os
import re
import shutil
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from fleet import errors
from fleet.agents import Command, Health, Receipts, Start, channel_entry, version_of
from fleet.channel.tools import instructions
from fleet.delivery.rollout import VERIFIED, read_thread, rollout_of
from fleet.seams import prompt_parts

if TYPE_CHECKING:
    from fleet.paths import Paths

ROUTE = "woken by codex queue (no push into Codex: an idle session takes a wake within seconds)"
LIMITS = (
    "no push: a wake is a `codex queue` message the idle TUI polls for (seconds, not milliseconds)",
    "a blip arriving mid-turn waits for the turn's end (Codex does not absorb it into the running turn)",
    "a fresh session spends one short turn at spawn (codex queue needs a thread with a turn)",
    "no permission hook: Codex's own approval prompts wait in its pane (fleet permission cannot answer)",
    "resume on this machine only (the thread id is kept in this machine's state dir)",
)
"""What a Codex agent cannot do that a Claude Code one does (spawn's report, ``fleet status``)."""
_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def toml(value: object) -> str:
    """``value`` as a TOML value for ``-c key=value`` (strings, lists of them, tables of them)."""
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
            attention=profile.attention, cap=profile.cap, receipts="rollout", launch=start.launch,
            session_id=start.session_id,
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
            "developer_instructions": toml(prompt),
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
