"""``fleet --help`` lists the commands from fleet.cli.SUMMARIES without importing them: the table is
each visible command's name and the first paragraph of its help, in typer's order."""

from __future__ import annotations

import typer
import typer.main

from fleet import cli


def derived() -> tuple[tuple[str, str], ...]:
    group = typer.main.get_command(cli.build(["no-such-command"]))  # every module registered
    ctx = typer.Context(group)
    rows = []
    for name in group.list_commands(ctx):  # type: ignore[attr-defined]
        cmd = group.get_command(ctx, name)  # type: ignore[attr-defined]
        if cmd is not None and not cmd.hidden:
            rows.append((name, cmd.get_short_help_str(10**6)))
    return tuple(rows)


def test_the_summaries_are_the_commands_own() -> None:
    rows = derived()
    table = "\n".join(f"    ({name!r}, {text!r})," for name, text in rows)
    assert rows == cli.SUMMARIES, f"fleet.cli.SUMMARIES is behind the commands; it should be:\n{table}"


def test_the_defaults_help_shows_are_the_cores() -> None:
    """The command modules restate a few defaults so that ``--help`` imports no records or layouts."""
    from fleet import layouts, models, summaries
    from fleet.cli import common, spawn, summary, watch
    from fleet.delivery import rules

    assert spawn.DEFAULT_LAYOUT == layouts.DEFAULT_LAYOUT
    assert common.MAX_BLIP_BYTES == models.DEFAULT_MAX_BLIP_BYTES
    assert watch.CAP == rules.DEFAULT_CAP
    assert (summary.BYTES, summary.EVERY, summary.SUMMARIZER_TIMEOUT) == (
        summaries.BYTES,
        summaries.EVERY,
        summaries.SUMMARIZER_TIMEOUT,
    )
