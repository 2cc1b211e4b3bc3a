"""The hook settings fleet writes for Claude Code (fleet.watch.hook_settings)."""

from __future__ import annotations

from pathlib import Path

import chatter
import pytest

from fleet.watch import hook_settings


def test_hook_settings_carry_the_attention() -> None:
    targeted = hook_settings("bob", chatter.WAVE, Path("/t/bob.token"), "targeted", daemon="http://h:1")
    full = hook_settings("bob", chatter.WAVE, Path("/t/bob.token"), daemon="http://h:1")
    assert "--attention targeted" in targeted and "--attention" not in full


def test_the_arms_own_parser_takes_what_fleet_watch_declares(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fleet watch --hook`` starts without typer (fleet.watch.hook_main): its options, their
    environment variables and defaults are the ones the command declares; what it does not take
    (--after, --json, --help) goes to the CLI."""
    import typer
    from typer.main import get_command

    from fleet.cli import watch as cli_watch
    from fleet.watch import HOOK_OPTIONS, hook_options

    for name in ("FLEET_PARTICIPANT", "FLEET_WAVE", "FLEET_DAEMON", "FLEET_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    app = typer.Typer()
    cli_watch.register(app)
    command = get_command(app).commands["watch"]  # type: ignore[attr-defined]
    declared = {name: param for param in command.params for name in param.opts}
    assert set(HOOK_OPTIONS) | {"--hook", "--gate"} == set(declared) - {"--after", "--json", "--help"}
    parsed = hook_options(["--hook"])
    assert parsed is not None
    defaults, gate = parsed
    assert gate is False
    for option, (key, _, env) in HOOK_OPTIONS.items():
        param = declared[option]
        assert (param.envvar, param.multiple) == (env, option == "--wavelet"), option
        assert defaults[key] == (param.default if option != "--wavelet" else []), option


def test_the_arms_own_parser_hands_the_cli_what_typer_would_refuse() -> None:
    from fleet.watch import hook_options

    assert hook_options(["--participant", "a", "--cap", "3", "--wait=0.5", "--hook", "--gate"]) == (
        hook_options(["--hook", "--participant=a", "--cap=3", "--wait", "0.5", "--gate"])
    )
    parsed = hook_options(["--hook", "--wavelet", "x", "--wavelet=y", "--cap", "1", "--cap", "2"])
    assert parsed is not None and (parsed[0]["wavelets"], parsed[0]["cap"]) == (["x", "y"], 2)
    for refused in (
        ["--participant", "a"],  # no --hook
        ["--hook", "--after", "v1.x"],
        ["--hook", "--json"],
        ["--hook", "--help"],
        ["--hook", "--cap", "-1"],
        ["--hook", "--cap", "two"],
        ["--hook", "--wait=-1"],
        ["--hook", "--digest-hold", "soon"],
        ["--hook", "--participant"],  # no value
        ["--hook", "--participant", "--wave"],
        ["--hook", "--gate=yes"],
        ["--hook", "--wave", "w\udcff"],  # not UTF-8
        ["--hook", "extra"],
    ):
        assert hook_options(refused) is None, refused
