"""The resident's layout.toml (what its start wrote, saying which agent the mind is) against anything
a hand or a disk can leave there: the mind is what the file says, or unknown (CorruptState naming the
file) — never a guess, never a traceback. fleet.resident.seat.mind_of."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet import errors
from fleet.layouts import ResolvedProfile
from fleet.models import Wave
from fleet.paths import Paths
from fleet.resident import state_dir
from fleet.resident.seat import mind_of, write_layout

WAVE = Wave(id="01a24a1c-98ec-76a5-a5fe-58178e71aaaa", name="w", root_id="r", created_at="", wavelets=[])

written = st.sampled_from(["claude", "codex", "fleet-standin"]).map(
    lambda agent: f'[defaults]\nagent = "{agent}"\n'
)
texts = st.one_of(
    written.map(str.encode),
    st.binary(max_size=300),
    st.text(max_size=300).map(str.encode),
    written.flatmap(lambda t: st.integers(0, len(t)).map(lambda n: t[:n].encode())),  # cut short
    written.map(lambda t: t.encode("utf-16")),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=texts)
def test_the_mind_is_what_the_layout_says_or_unknown_naming_it(fleet_env: Paths, raw: bytes) -> None:
    file = state_dir(fleet_env, WAVE.id) / "layout.toml"
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_bytes(raw)
    try:
        mind = mind_of(fleet_env, WAVE, {})
    except errors.CorruptState as exc:
        assert str(file) in exc.message and "`fleet resident start w --force`" in exc.message
        return
    assert mind.kind.name in ("claude", "codex", "standin", "command"), mind.kind


def test_no_layout_file_is_a_claude_code_mind_and_a_written_one_is_what_it_says(
    fleet_env: Paths, tmp_path: Path
) -> None:
    assert mind_of(fleet_env, WAVE, {}).kind.name == "claude"
    file = state_dir(fleet_env, WAVE.id) / "layout.toml"
    write_layout(file, ResolvedProfile(agent="codex"), tmp_path)
    assert mind_of(fleet_env, WAVE, {}).kind.name == "codex"
    file.write_bytes(b"\xff\xfe[defaults")
    with pytest.raises(errors.CorruptState):
        mind_of(fleet_env, WAVE, {})
