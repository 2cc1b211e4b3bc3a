"""Agent kinds (:mod:`fleet.agents`): each CLI a pane runs found by its command, on the seam
``agent_kinds``; a wave mixes kinds; Claude Code's command line is the one spawn always built."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet import errors, seams
from fleet.agents import Command, Health, Receipts, Start, agent_words, kind_of, kinds, require_agent
from fleet.layouts import parse
from fleet.paths import Paths


def test_each_kind_is_found_by_its_command_name() -> None:
    assert kind_of(["claude"]).name == "claude"
    assert kind_of(["/opt/bin/claude", "--debug"]).name == "claude"
    assert kind_of(agent_words("fleet-standin --reply hi")).name == "standin"
    assert kind_of(["my-wrapper", "claude"]).name == "command"
    assert [k.name for k in kinds()][-1] == "command"  # the generic kind is asked last
    assert kind_of(["claude"]).receipts == "transcript" and kind_of(["x"]).receipts == "none"


def test_a_layout_mixes_kinds_per_participant() -> None:
    layout = parse(
        '[defaults]\nagent = "claude"\n[participants.bob]\nagent = "fleet-standin --reply ok"\n',
        "mixed.toml",
        "mixed",
    )
    got = {n: kind_of(agent_words(layout.profile(n).agent)).name for n in ("alice", "bob")}
    assert got == {"alice": "claude", "bob": "standin"}


@given(
    st.lists(
        st.text(alphabet="abcdefghijklmnopqrstuvwxyz-_/.", min_size=1, max_size=12), min_size=1, max_size=4
    )
)
def test_kind_of_always_answers_and_the_same_words_give_the_same_kind(words: list[str]) -> None:
    assert kind_of(words).name == kind_of(list(words)).name
    assert (kind_of(words).name == "claude") == (Path(words[0]).name == "claude")


class _Mine:
    name = "mine"
    receipts: Receipts = "none"
    wake = "a test's"
    limits: tuple[str, ...] = ("everything",)

    def matches(self, words: list[str]) -> bool:
        return Path(words[0]).name == "mine"

    def require(self, words: list[str]) -> None:
        raise errors.ToolMissing("mine is not installed: install mine")

    def resumable(self, session_id: str, env: Mapping[str, str], paths: Paths) -> bool:
        return False

    def command(self, start: Start) -> Command:
        return Command([*start.words, start.participant])

    def offers_channel(self, argv: list[str]) -> bool:
        return False

    def doctor(self) -> Health | None:
        return ("warn", "mine: not here", "install mine")


def test_a_kind_plugged_into_the_seam_is_asked_before_the_generic_one() -> None:
    seams.agent_kinds.add("mine", _Mine())
    try:
        assert kind_of(["mine", "-x"]).name == "mine"
        assert kind_of(["other"]).name == "command"
        with pytest.raises(errors.ToolMissing, match="install mine"):
            require_agent(["mine"])
        assert "mine" in [k.name for k in kinds()]
    finally:
        seams.agent_kinds.remove("mine")
    assert kind_of(["mine"]).name == "command"


def test_a_missing_cli_is_named_with_its_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(errors.ToolMissing, match="npm install -g @anthropic-ai/claude-code"):
        require_agent(["claude"])
    with pytest.raises(errors.ToolMissing, match="'nothing-here' was not found on PATH"):
        require_agent(["nothing-here"])
    require_agent([sys.executable, "-m", "fleet.standin"])  # the stand-in needs only this Python


def test_doctor_checks_each_kind_with_a_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fleet.doctor import check_agents

    monkeypatch.setenv("PATH", str(tmp_path))
    checks = {c.name: c for c in check_agents()}
    assert "claude" in checks and checks["claude"].level == "warn" and "npm install" in checks["claude"].fix
    assert "standin" not in checks and "command" not in checks
