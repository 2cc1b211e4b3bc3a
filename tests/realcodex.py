"""Real Codex CLI sessions under test: the pinned binary beside the pinned Claude Code, one scripted model.

:func:`pinned_codex` finds the Codex CLI (``FLEET_CODEX_BIN``, then ``.ci/node`` under the repository,
where ``scripts/test.sh`` installs it, then ``PATH``) and *fails* the test, saying what to install,
when it is missing or not :data:`CODEX_VERSION`: never skipped.

:func:`seed_codex` writes ``$CODEX_HOME/config.toml`` pointing Codex at the scripted model's Responses
dialect (``model_provider = "scripted"``, ``wire_api = "responses"``); :func:`codex_env` is a Codex
pane's environment. :func:`mixed_layout` writes a layout whose participants run Claude Code or Codex,
each against the same :class:`~scripted_model.ScriptedModel` (a :class:`realclaude.RealFleet`'s).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from realclaude import RealFleet, claude_env, find_binary, pinned_binary, toml_value

CODEX_VERSION = "0.169.0"
INSTALL = (
    f"install the Codex CLI {CODEX_VERSION}: `bash scripts/test.sh` does it (npm install --prefix .ci/node"
    f" @openai/codex@{CODEX_VERSION}), or point FLEET_CODEX_BIN at that version's codex"
)
MODEL = "scripted-1"


def find_codex() -> str | None:
    return find_binary("FLEET_CODEX_BIN", "codex")


def pinned_codex() -> str:
    """The pinned Codex binary, or ``pytest.fail`` with what to install."""
    return pinned_binary(
        "FLEET_CODEX_BIN", "codex", f"codex-cli {CODEX_VERSION}", lambda out: out.strip(), INSTALL
    )


def seed_codex(codex_home: Path, model_url: str) -> None:
    """Codex's config: the scripted model as its provider (the Responses API, streamed)."""
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        f'model = "{MODEL}"\nmodel_provider = "scripted"\n\n[model_providers.scripted]\nname = "scripted"\n'
        f'base_url = "{model_url}/v1"\nenv_key = "SCRIPTED_KEY"\nwire_api = "responses"\n'
    )


def codex_env(home: Path) -> dict[str, str]:
    return {
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "SCRIPTED_KEY": "scripted-model",
        "TERM": "xterm-256color",
    }


def mixed_layout(
    world: RealFleet,
    codex: str,
    kinds: Mapping[str, str],
    name: str = "mixed",
    *,
    participants: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """A layout for ``kinds`` (participant -> ``claude`` | ``codex``) in the world's project folder,
    each kind with its binary and environment (a participant's ``env`` in ``participants`` adds to
    it); Codex's config seeded for the world's model."""
    seed_codex(world.home / ".codex", world.model.url)
    lines = ['arrangement = "tiled"', "[defaults]", f"cwd = {toml_value(str(world.project))}"]
    for who, kind in kinds.items():
        extra = dict((participants or {}).get(who) or {})
        if kind == "codex":
            keys: dict[str, Any] = {"agent": codex, "env": {**codex_env(world.home), **extra.pop("env", {})}}
        else:
            keys = {
                "agent": world.claude,
                "env": {**claude_env(world.model.url, world.home), **extra.pop("env", {})},
                "args": ["--debug-file", str(world.debug_path(who))],
            }
        lines.append(f"[participants.{who}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in {**keys, **extra}.items()]
    path = world.tmp / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def rollout_lines(world: RealFleet, participant: str, wave: str = "w") -> list[dict[str, Any]]:
    """The participant's Codex rollout, parsed (``[]`` until the channel learnt its thread)."""
    import json

    from fleet.delivery.rollout import read_thread, rollout_of

    thread = read_thread(world.paths.channels, world.session_id(participant, wave))
    path = rollout_of(thread, codex_env(world.home)) if thread else None
    if path is None:
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def user_texts(lines: Sequence[dict[str, Any]]) -> list[str]:
    """The user messages the rollout shows entered (their text)."""
    out = []
    for ln in lines:
        p = ln.get("payload") or {}
        if ln.get("type") == "response_item" and p.get("type") == "message" and p.get("role") == "user":
            out.append("".join(str(c.get("text", "")) for c in p.get("content") or []))
    return out
