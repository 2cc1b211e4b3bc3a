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


@given(
    line=st.text(alphabet="ab └─│[], 中", max_size=30),
    topic=st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=200),
    columns=st.integers(1, 120),
)
def test_a_topic_is_cut_to_the_width_and_never_widens_a_line_past_it(
    line: str, topic: str, columns: int
) -> None:
    from unittest import mock

    with mock.patch.object(render, "width", lambda: columns):
        shown = render.with_topic(line, topic)
    assert shown.startswith(line)
    if shown != line:  # the topic was shown, whole or cut
        assert render.cells(shown) <= columns
        rest = shown[len(line) :]
        assert rest.startswith("  — ")
        told = rest[len("  — ") :]
        assert told == topic or (told.endswith("…") and topic.startswith(told[:-1]))
    if topic and render.cells(line) + 4 + render.cells(topic) <= columns:
        assert shown == f"{line}  — {topic}"  # room for all of it: nothing is cut
    if not topic:
        assert shown == line


def test_wide_characters_count_two_columns_and_combining_marks_none() -> None:
    assert render.cells("中文") == 4 and render.cells("e\u0301") == 1 and render.cells("😀") == 2
    assert render.fit("中文字", 5) == "中文…" and render.fit("abc", 3) == "abc" and render.fit("abc", 0) == ""
