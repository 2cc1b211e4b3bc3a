"""The CLI's printed hints carry the global options in effect (``fleet --remote hq …``), so each one
runs as printed; nothing else of the text changes."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet.cli import render


@pytest.fixture
def remote() -> Iterator[None]:
    render.GLOBALS[:] = ["--remote", "hq"]
    try:
        yield
    finally:
        render.GLOBALS.clear()


def test_a_hint_in_backticks_carries_the_global_options(remote: None) -> None:
    said = "wave 'w' has no tmux session: start one with `fleet spawn w/main` (or `fleet attach w`)"
    assert render.hint(said) == (
        "wave 'w' has no tmux session: start one with `fleet --remote hq spawn w/main`"
        " (or `fleet --remote hq attach w`)"
    )
    # prose naming fleet, a hint that already names a daemon, and an environment prefix
    assert render.hint("fleet doctor found problems") == "fleet doctor found problems"
    assert render.hint("use `fleet --remote lab ls`") == "use `fleet --remote lab ls`"
    assert (
        render.hint("`FLEET_TMUX_SOCKET=s fleet attach w`")
        == "`FLEET_TMUX_SOCKET=s fleet --remote hq attach w`"
    )
    assert (
        render.command("FLEET_TMUX_SOCKET=s fleet attach w")
        == "FLEET_TMUX_SOCKET=s fleet --remote hq attach w"
    )
    assert render.command("fleet attach w") == "fleet --remote hq attach w"


def test_without_global_options_nothing_changes() -> None:
    assert render.hint("`fleet spawn w/main`") == "`fleet spawn w/main`"
    assert render.command("fleet attach w") == "fleet attach w"


WORDS = st.sampled_from(
    ["fleet", "`fleet", "spawn", "w/main`", "`", "fleet`", "--remote", "x", "ls", "\n", "A=b"]
)


@given(words=st.lists(WORDS, max_size=20), name=st.from_regex(r"[a-z][a-z0-9_-]{0,10}", fullmatch=True))
def test_only_quoted_fleet_commands_change_and_each_gains_the_options_once(
    words: list[str], name: str
) -> None:
    text = " ".join(words)
    render.GLOBALS[:] = ["--remote", name]
    try:
        got = render.hint(text)
    finally:
        render.GLOBALS.clear()
    # taking the inserted options out again gives the text back: nothing else changed
    assert got.replace(f"fleet --remote {name} ", "fleet ") == text or f"--remote {name}" in text
    quoted = re.findall(r"`(?:[A-Z][A-Z0-9_]*=\S+ )*fleet (?!--remote)", text)
    assert got.count(f"fleet --remote {name} ") - text.count(f"fleet --remote {name} ") == len(quoted)
