"""Layouts: every shipped layout loads and resolves profiles; a bad one names its file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet import errors, layouts
from fleet.paths import Paths

SHIPPED = ["lead", "pair", "review", "trio"]


def test_the_shipped_layouts_are_there(fleet_env: Paths) -> None:
    assert set(SHIPPED) <= set(layouts.available(fleet_env))


@pytest.mark.parametrize("name", SHIPPED)
def test_each_shipped_layout_loads_and_gives_every_participant_a_profile(fleet_env: Paths, name: str) -> None:
    lay = layouts.load(name, fleet_env)
    assert lay.name == name and lay.description
    for who in ("lead", "author", "somebody"):
        p = lay.profile(who)
        assert p.agent == "claude" and p.attention in ("full", "targeted")
    roster = ["x", "y", "z"]
    assert lay.main_pane(roster) in roster


def test_lead_layout_gives_the_lead_full_delivery_and_the_big_pane(fleet_env: Paths) -> None:
    lead = layouts.load("lead", fleet_env)
    assert lead.arrangement == "main-vertical"
    assert lead.profile("lead").attention == "full"
    assert lead.profile("parser").attention == "targeted"
    assert lead.main_pane(["parser", "lead"]) == "lead"


def test_a_users_layout_overrides_a_shipped_one_by_name(fleet_env: Paths) -> None:
    fleet_env.layouts.mkdir(parents=True)
    (fleet_env.layouts / "pair.toml").write_text(
        'arrangement = "even-vertical"\n[defaults]\nagent = "fleet-standin"\nmodel = "opus"\n'
        '[participants.bob]\nargs = ["--verbose"]\ncwd = "/tmp"\n'
    )
    lay = layouts.load("pair", fleet_env)
    assert lay.arrangement == "even-vertical"
    assert lay.profile("alice").model == "opus" and lay.profile("alice").args == []
    assert lay.profile("bob").args == ["--verbose"] and lay.profile("bob").cwd == "/tmp"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('arrangement = "spiral"', "arrangement"),
        ("[defaults]\nattention = 3", "defaults.attention"),
        ("[participants.Bad]\nmodel = 'x'", "participants"),
        ("[participants.bob]\npermission_mode = 'yolo'", "participants.bob.permission_mode"),
        ("[defaults]\nagent = '  '", "defaults.agent"),
        ("colour = 'blue'", "colour"),
        ("[defaults\n", "invalid TOML"),
    ],
)
def test_a_bad_layout_names_its_file_and_field(
    fleet_env: Paths, tmp_path: Path, text: str, field: str
) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(text)
    with pytest.raises(errors.UsageError) as e:
        layouts.load(str(path), fleet_env)
    assert str(path) in str(e.value) and field in str(e.value)


def test_a_layout_that_is_not_utf8_names_its_file_and_the_byte(fleet_env: Paths, tmp_path: Path) -> None:
    path = tmp_path / "latin.toml"
    path.write_bytes("[defaults]\nmodel = 'caf\u00e9'\n".encode("latin-1"))
    with pytest.raises(errors.UsageError, match="not UTF-8 text") as e:
        layouts.load(str(path), fleet_env)
    assert str(path) in str(e.value) and "byte 0xe9 at offset 23" in str(e.value)


def test_an_unknown_layout_lists_the_known_ones(fleet_env: Paths) -> None:
    with pytest.raises(errors.NotFound) as e:
        layouts.load("nope", fleet_env)
    assert "trio" in str(e.value)


def test_every_fleet_package_is_in_the_wheel() -> None:
    """pyproject lists its packages (the layouts folder is mapped in): a new one must be listed too."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(p.relative_to(root).parent.parts)
        for p in (root / "fleet").rglob("*")
        if p.is_file() and p.suffix in (".py", ".js", ".css", ".html") and "__pycache__" not in p.parts
    }
    assert found | {"fleet.shipped_layouts"} == listed


def test_env_merges_defaults_with_the_participants_and_cap_is_optional(
    fleet_env: Paths, tmp_path: Path
) -> None:
    path = tmp_path / "env.toml"
    path.write_text(
        '[defaults]\nenv = { A = "1", B = "2" }\ncap = 5\n[participants.bob]\nenv = { B = "3", C = "4" }\n'
        "[participants.carol]\ncap = 0\n"
    )
    lay = layouts.load(str(path), fleet_env)
    assert lay.profile("alice").env == {"A": "1", "B": "2"} and lay.profile("alice").cap == 5
    assert lay.profile("bob").env == {"A": "1", "B": "3", "C": "4"}
    assert lay.profile("carol").cap == 0
    assert layouts.load("trio", fleet_env).profile("x").cap is None
    assert layouts.load("trio", fleet_env).profile("x").env == {}


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('[defaults]\nenv = { "BAD-NAME" = "x" }', "defaults.env"),
        ("[defaults]\nenv = { N = 1 }", "defaults.env.N"),
        ("[participants.bob]\ncap = -1", "participants.bob.cap"),
        ('summarizer = { command = "  " }', "summarizer.command"),
        ('summarizer = { command = "say \'unclosed" }', "summarizer.command"),
        ("summarizer = { every = 0 }", "summarizer.every"),
        ('summarizer = { cmd = "x" }', "summarizer.cmd"),
    ],
)
def test_a_bad_env_or_cap_names_its_field(fleet_env: Paths, tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(errors.UsageError) as e:
        layouts.load(str(path), fleet_env)
    assert field in str(e.value)


def test_the_summarizer_key_and_its_defaults(fleet_env: Paths, tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('summarizer = { command = "my-summarizer --fast", bytes = 4096 }\n')
    spec = layouts.load(str(path), fleet_env).summarizer
    assert spec is not None and (spec.command, spec.every, spec.bytes, spec.timeout) == (
        "my-summarizer --fast",
        50,
        4096,
        30.0,
    )
    assert layouts.load("trio", fleet_env).summarizer is None
