"""``fleet channel``'s command line: read without argparse when plain (fleet.channel.plain_options),
exactly as its argparse parser reads it; anything else goes to argparse."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.agents import channel_entry
from fleet.channel import FLAGS, OPTIONS, parser, plain_options


def test_the_plain_reading_knows_every_option_of_the_parser() -> None:
    declared = {s for action in parser()._actions for s in action.option_strings} - {"-h", "--help"}
    assert set(OPTIONS) | set(FLAGS) == declared


_ENTRY = channel_entry(
    "alice", "w", "http://127.0.0.1:1", Path("/t/a.token"), state_dir=Path("/s/channels"),
    attention="targeted", deliver=False, cap=3,
    receipts="transcript", hook_fallback=True,
)  # fmt: skip
assert isinstance(_ENTRY["args"], list)
SPAWNED: list[str] = _ENTRY["args"][3:]  # after -m fleet channel


@pytest.mark.parametrize(
    "argv",
    [
        [],
        SPAWNED,  # what spawn writes: every option it may pass
        ["--participant", "alice", "--wave", "w", "--daemon", "http://h:1", "--token-file", "/t"],
        ["--participant=alice", "--cap=0", "--state-dir", "/s", "--digest-hold", "2.5", "--bound=1"],
        ["--attendant", "", "--attendant-timeout", "0.5", "--receipts", "rollout", "--deliver"],
        ["--no-deliver", "--deliver", "--cap", "1", "--cap", "2", "--wave", "a=b"],  # the last one counts
    ],
)
def test_a_plain_command_line_reads_as_argparse_reads_it(argv: list[str]) -> None:
    plain = plain_options(argv)
    assert plain is not None
    assert vars(plain) == vars(parser().parse_args(argv))


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["-h"],
        ["--nope"],
        ["positional"],
        ["--participant"],
        ["--participant", "--wave", "w"],
        ["--cap", "two"],
        ["--cap="],
        ["--receipts", "sometimes"],
        ["--no-deliver=yes"],
        ["--bound", "-1"],  # a value that starts with '-' is argparse's to read (config_from refuses it)
        ["--"],
    ],
)
def test_anything_else_goes_to_argparse(argv: list[str]) -> None:
    assert plain_options(argv) is None
