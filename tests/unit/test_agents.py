"""Agent kinds (:mod:`fleet.agents`): each CLI a pane runs found by its command, on the seam
``agent_kinds``; a wave mixes kinds; Claude Code's command line is the one spawn always built."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet import errors, seams
from fleet.agents import Command, Health, Receipts, Start, agent_words, kind_of, kinds, require_agent
from fleet.layouts import parse
from fleet.paths import Paths

if TYPE_CHECKING:
    from fleet.delivery.receipts import Transcript
    from fleet.tmux import Tmux


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

    mind_limits: tuple[str, ...] = ("everything",)
    steer = "never"
    after_interrupt = ""

    def record(self, session_id: str, env: Mapping[str, str], paths: Paths) -> Transcript | None:
        return None

    def enter(
        self, tmux: Tmux, pane_id: str, text: str, *, words: list[str], session_id: str,
        env: Mapping[str, str], paths: Paths, interrupted: bool = False,
    ) -> None:  # fmt: skip
        raise errors.FleetError("mine takes no turns")


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


def _start(tmp_path: Path, words: list[str], *, resume: bool = False, trust: bool = False) -> Start:
    from fleet.layouts import ResolvedProfile
    from fleet.models import Wave, Wavelet
    from fleet.seams import Launch

    paths = Paths(data=tmp_path / "d", state=tmp_path / "s", config=tmp_path / "c", logs=tmp_path / "l")
    wave = Wave(id="w1", name="w", root_id="r1", created_at="", wavelets=[])
    wl = Wavelet(id="r1", wave_id="w1", wave="w", name="main", parent_id=None, private=False,
                 created_by="operator", created_at="")  # fmt: skip
    token = tmp_path / "bob.token"
    return Start(
        words=words, profile=ResolvedProfile(model="scripted-1", env={"CODEX_HOME": "/h/.codex"}),
        participant="bob", wave=wave, wavelet=wl, session_id="sid-1", resume=resume, transport="auto",
        token_file=token, paths=paths, daemon_url="http://127.0.0.1:1", launch="L1", cwd="/src/my proj",
        trust=trust, seen=Launch(paths, "http://127.0.0.1:1", wave, wl, "bob", token),
    )  # fmt: skip


def test_codex_is_launched_with_the_channel_its_identity_and_a_first_turn_all_inline(tmp_path: Path) -> None:
    import tomllib

    from fleet.agents.codex import kickoff
    from fleet.delivery.rollout import thread_file

    start = _start(tmp_path, ["codex"], trust=True)
    kind = kind_of(start.words)
    assert (kind.name, kind.receipts) == ("codex", "rollout") and kind.limits
    argv = kind.command(start).argv
    config = tomllib.loads("\n".join(argv[i + 1] for i, a in enumerate(argv) if a == "-c"))
    fleet = config["mcp_servers"]["fleet"]
    assert fleet["args"][:3] == ["-m", "fleet", "channel"] and "rollout" in fleet["args"]
    assert fleet["env"]["FLEET_SESSION_ID"] == "sid-1" and fleet["env"]["CODEX_HOME"] == "/h/.codex"
    assert fleet["env"]["FLEET_LAUNCH"] == "L1" and fleet["default_tools_approval_mode"] == "approve"
    assert fleet["env_vars"] == ["TMUX", "TMUX_PANE"]  # the pane's tmux, for a resident's workers
    assert config["developer_instructions"].startswith("You are bob")
    assert config["projects"] == {"/src/my proj": {"trust_level": "trusted"}}
    assert f'projects={{{json.dumps("/src/my proj")} = {{trust_level = "trusted"}}}}' in argv  # inline
    assert argv[-1] == kickoff("bob", "w") and argv[argv.index("-m") + 1] == "scripted-1"
    assert "resume" not in argv
    assert not kind.resumable("sid-1", {"CODEX_HOME": str(tmp_path)}, start.paths)
    # a respawn resumes the thread the channel learnt (and kept beside the session)
    thread = "01a23d21-a661-7ae1-b6d3-e88bc4e47e18"
    thread_file(start.paths.channels, "sid-1").parent.mkdir(parents=True)
    thread_file(start.paths.channels, "sid-1").write_text(thread + "\n")
    again = kind.command(_start(tmp_path, ["codex"], resume=True)).argv
    assert again[:2] == ["codex", "resume"] and again[-1] == thread
    assert "projects" not in " ".join(again)  # no --trust: nothing marked trusted


def test_agent_kinds_named_by_their_cli_are_what_a_mind_can_name() -> None:
    from fleet.agents import named

    assert [k.name if k else None for k in map(named, ["claude", "codex", "standin", "command", "trio"])] == [
        "claude", "codex", None, None, None,
    ]  # fmt: skip


def test_codex_trusts_a_hook_by_the_hash_codex_itself_wrote() -> None:
    """The hash codex-cli 0.169.0 wrote to config.toml when "Trust all" was chosen for this very hook
    (given with ``-c hooks.PermissionRequest=…``); a wrong hash would leave the hook silently unrun."""
    from fleet.agents.codex import hook_hash

    handler = {"type": "command", "command": "python3 /tmp/exp/hook.py", "timeout": 600}
    assert hook_hash("permission_request", handler) == (
        "sha256:94beba6e0d0559452674765dd35eec41e48fb7c81b6a7557662c89f2b256cf99"
    )


def test_codex_is_given_fleets_permission_hook_trusted_inline_and_no_other(tmp_path: Path) -> None:
    import tomllib

    from fleet.agents.codex import hook_config, hook_hash
    from fleet.permissions import HOOK_TIMEOUT, hook_command

    start = _start(tmp_path, ["codex"])
    seams.launch_settings.lazy("fleet.permissions", "fleet.permissions:settings")
    argv = kind_of(start.words).command(start).argv
    config = tomllib.loads("\n".join(argv[i + 1] for i, a in enumerate(argv) if a == "-c"))
    (group,) = config["hooks"]["PermissionRequest"]
    command = hook_command("bob", "w", "http://127.0.0.1:1", start.token_file)
    assert group == {"hooks": [{"type": "command", "command": command, "timeout": HOOK_TIMEOUT}]}
    key = "/<session-flags>/config.toml:permission_request:0:0"
    trusted = hook_hash("permission_request", group["hooks"][0])
    assert config["hooks"]["state"] == {key: {"trusted_hash": trusted}}
    assert "--dangerously-bypass-hook-trust" not in argv
    # Claude Code's other hooks, and a handler that is not a plain command, are not given to Codex
    odd = {"type": "command", "command": "x", "timeout": 5, "async": True}
    got = hook_config([{"Stop": [{"hooks": [{"type": "command", "command": "x"}]}]},
                       {"PermissionRequest": [{"matcher": "Bash", "hooks": [odd]}]}])  # fmt: skip
    assert got == {}


def test_the_permission_hooks_wait_is_the_environments_within_its_bound() -> None:
    from fleet.permissions import wait_bound
    from fleet.records.permissions import HOOK_WAIT

    assert wait_bound({}) == HOOK_WAIT and wait_bound({"FLEET_PERMISSION_WAIT": "3"}) == 3.0
    for bad in ("0", "-5", "soon", str(HOOK_WAIT + 1)):
        assert wait_bound({"FLEET_PERMISSION_WAIT": bad}) == HOOK_WAIT, bad


def test_a_channel_and_its_hook_keep_their_state_where_the_spawner_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pane's environment may name another state dir than the spawning shell (tmux's own
    environment: XDG_STATE_HOME, no FLEET_HOME); the channel and its hook are both told the spawner's,
    the one `fleet status` and a respawn read — else the hook would not see the channel's state and
    both would deliver."""
    import re

    from fleet.spawn import Spawner

    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "elsewhere"))  # what the pane would make of it
    start = _start(tmp_path, ["claude"])
    client: Any = type("Client", (), {"base_url": start.daemon_url})()  # (all the hook asks of it)
    spawner = Spawner(client, None, start.paths)  # type: ignore[arg-type]
    hook = spawner.hook_settings
    start.watch_hook = lambda gate: hook("bob", "w", start.token_file, "full", cap=None, gate=gate)
    for words, told in ((["claude"], 2), (["codex"], 1)):  # Claude Code: the channel and its hooks
        start.words = words
        text = " ".join(kind_of(words).command(start).argv)
        # in the MCP config's JSON ("--state-dir","D"), Codex's TOML ("--state-dir", "D"), a hook's command
        dirs = re.findall(r'--state-dir(?:"\s*,\s*"|\s+)([^"\s]+)', text)
        assert len(dirs) >= told and set(dirs) == {str(start.paths.channels)}, (words, dirs)


def test_a_minted_ids_file_that_cannot_be_read_stops_the_launch_and_mints_nothing(tmp_path: Path) -> None:
    """Spawn revokes the tokens it minted for a participant's earlier panes before it mints the new
    pane's; a record of them that is not text cannot say which: no token is minted beside them
    unseen — the launch is refused naming the file and how to revoke them by hand."""
    from fleet.spawn import Spawner

    minted: list[str] = []
    client: Any = type(
        "Client", (), {"base_url": "http://127.0.0.1:1", "mint_token": lambda *a: minted.append("x")}
    )()
    start = _start(tmp_path, ["claude"])
    spawner = Spawner(client, None, start.paths)  # type: ignore[arg-type]
    ids = spawner.minted_file(start.wave, "bob")
    ids.parent.mkdir(parents=True)
    ids.write_bytes(b"01a2\xff\n")
    with pytest.raises(errors.CorruptState) as e:
        spawner._fresh_token(start.wave, "bob")
    assert str(ids) in e.value.message and "fleet token revoke" in e.value.message
    assert "not UTF-8 text (byte 0xff at offset 4)" in e.value.message and minted == []
