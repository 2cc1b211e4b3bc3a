"""The campaign agents' prompts, shipped as files (planner, verifier, executor protocol).

:func:`text` reads one; :func:`agent_instructions` fills the static entry point every session reads.
"""

from __future__ import annotations

from importlib import resources

NAMES = ("planner", "verifier", "executor", "agent_instructions")


def text(name: str) -> str:
    return resources.files(__name__).joinpath(f"{name}.md").read_text(encoding="utf-8")


def path(name: str) -> str:
    return str(resources.files(__name__).joinpath(f"{name}.md"))


def agent_instructions(campaign_id: str) -> str:
    return text("agent_instructions").replace("{campaign}", campaign_id)
