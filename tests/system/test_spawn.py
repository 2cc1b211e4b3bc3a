"""Spawning into a real tmux server (isolated socket) with scripted stand-in agents and real channels."""

from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path
from typing import Any

import libtmux
import pytest
from conftest import retry_until

from fleet import errors, layouts
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths
from fleet.spawn import Spawner
from fleet.tmux import Tmux
from fleet.tmux import server as tmux_server_for

CONVERSE = "fleet-standin --reply '{author}: on it ({name}).' --turns 1"


def standin_log(paths: Paths, name: str) -> list[dict[str, Any]]:
    path = paths.state / "standin" / f"{name}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def argv_received(paths: Paths, name: str) -> list[list[str]]:
    return [e["argv"] for e in standin_log(paths, name) if e["event"] == "start"]


def opt(srv: libtmux.Server, target: str | None, name: str, scope: str) -> str:
    assert target is not None
    args = ["show-options", *([scope] if scope else []), "-v", "-t", target, name]
    out = srv.cmd(*args).stdout
    return out[0] if out else ""


@pytest.fixture
def wave(operator: Client) -> str:
    operator.create_wave("demo", ["alice", "bob", "carol"])
    return "demo"


def spawner(
    operator: Client, srv: libtmux.Server, paths: Paths, agent: str | None = CONVERSE, **kw: Any
) -> Spawner:
    return Spawner(operator, Tmux(srv), paths, agent=agent, ready_timeout=20, **kw)


def test_spawn_lays_out_one_pane_per_member_with_identity_options_and_exact_argv(
    operator: Client, daemon: Daemon, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    rep = spawner(operator, tmux_server, fleet_env).spawn("demo/main", layouts.load("trio", fleet_env))
    assert [p.participant for p in rep.panes] == ["alice", "bob", "carol"]
    assert all(p.action == "launched" and p.ready for p in rep.panes), [
        (p.participant, p.why) for p in rep.panes
    ]
    wave_id = operator.get_wave("demo").id
    main_id = operator.resolve("demo/main").id

    sessions = tmux_server.sessions
    assert len(sessions) == 1 and opt(tmux_server, sessions[0].session_id, "@fleet_wave", "") == wave_id
    windows = sessions[0].windows
    assert len(windows) == 1 and opt(tmux_server, windows[0].window_id, "@fleet_wavelet", "-w") == main_id
    panes = {p.pane_id: p for p in windows[0].panes}
    assert set(panes) == {p.pane_id for p in rep.panes}
    for p in rep.panes:
        assert opt(tmux_server, p.pane_id, "@fleet_participant", "-p") == p.participant
        assert opt(tmux_server, p.pane_id, "@fleet_wave", "-p") == wave_id
        assert opt(tmux_server, p.pane_id, "@fleet_wavelet", "-p") == main_id
        assert opt(tmux_server, p.pane_id, "remain-on-exit", "-p") == "on"
        # the agent received exactly the command line spawn built, claude's flags included
        got = retry_until(partial(argv_received, fleet_env, p.participant), what="stand-in start")
        assert got == [p.argv[3:]]  # minus `python -m fleet.standin`
        argv = got[0]
        config = next(a for a in argv if a.startswith("--mcp-config="))
        entry = json.loads(config.removeprefix("--mcp-config="))["mcpServers"]["fleet"]
        assert entry["args"][:7] == [
            "-m",
            "fleet",
            "channel",
            "--participant",
            p.participant,
            "--wave",
            "demo",
        ]
        token_file = Path(entry["args"][entry["args"].index("--token-file") + 1])
        assert token_file.stat().st_mode & 0o777 == 0o600
        assert token_file.read_text().strip() not in json.dumps(argv)  # no secret on a command line
        assert "--dangerously-load-development-channels=server:fleet" in argv
        assert "--allowedTools=mcp__fleet" in argv  # its own posts never wait at a permission prompt
        assert argv[argv.index("--session-id") + 1] == p.session_id
        assert argv[argv.index("--name") + 1] == p.participant
        assert "--permission-mode" in argv and argv[argv.index("--permission-mode") + 1] == "acceptEdits"
    recorded = {r.participant: r.session_id for r in operator.sessions("demo")}
    assert recorded == {p.participant: p.session_id for p in rep.panes}


def test_spawned_agents_converse_through_real_channels_and_finish(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    main = operator.resolve("demo/main")
    spawner(operator, tmux_server, fleet_env).spawn("demo/main", layouts.load("trio", fleet_env))
    operator.post(main.id, "alice, bob, carol: please each take one part of the job.")

    def dones() -> set[str]:
        return {b.author for b in operator.read(main.id).blips if b.text.startswith("DONE:")}

    retry_until(lambda: dones() == {"alice", "bob", "carol"}, timeout=30, what="three DONEs")
    replies = [b for b in operator.read(main.id).blips if b.text.startswith("operator: on it")]
    assert sorted(b.author for b in replies) == ["alice", "bob", "carol"]
    # each agent was handed the operator's blip, never its own
    for name in ("alice", "bob", "carol"):
        seen = [e["meta"]["author"] for e in standin_log(fleet_env, name) if e["event"] == "notification"]
        assert "operator" in seen and name not in seen


def test_spawning_again_changes_nothing(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    lay = layouts.load("trio", fleet_env)
    first = spawner(operator, tmux_server, fleet_env).spawn("demo/main", lay)
    tokens = operator.list_tokens("demo")
    sessions = operator.sessions("demo")
    again = spawner(operator, tmux_server, fleet_env).spawn("demo/main", lay)
    assert [(p.participant, p.pane_id, p.action) for p in again.panes] == [
        (p.participant, p.pane_id, "running") for p in first.panes
    ]
    assert len(tmux_server.panes) == 3 and len(tmux_server.windows) == 1
    assert operator.list_tokens("demo") == tokens
    assert operator.sessions("demo") == sessions
    for p in first.panes:
        assert len(argv_received(fleet_env, p.participant)) == 1


def test_an_invite_then_spawn_adds_only_the_new_member(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    lay = layouts.load("trio", fleet_env)
    first = spawner(operator, tmux_server, fleet_env).spawn("demo/main", lay)
    operator.invite(operator.resolve("demo/main").id, "dave")
    again = spawner(operator, tmux_server, fleet_env).spawn("demo/main", lay)
    actions = {p.participant: p.action for p in again.panes}
    assert actions == {"alice": "running", "bob": "running", "carol": "running", "dave": "launched"}
    assert len(tmux_server.panes) == 4
    assert {p.pane_id for p in first.panes} < {p.pane_id for p in again.panes}


def test_a_dead_pane_is_respawned_in_place_resuming_its_session(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    lay = layouts.load("trio", fleet_env)
    first = spawner(operator, tmux_server, fleet_env).spawn("demo/main", lay)
    bob = next(p for p in first.panes if p.participant == "bob")
    tmux = Tmux(tmux_server)
    pid = next(p.pid for p in tmux.panes() if p.pane_id == bob.pane_id)
    assert pid
    os.kill(pid, 9)
    retry_until(
        lambda: next(p for p in tmux.panes() if p.pane_id == bob.pane_id).dead, what="bob's pane dead"
    )
    again = spawner(operator, tmux_server, fleet_env).spawn("demo/main", lay)
    bob2 = next(p for p in again.panes if p.participant == "bob")
    assert bob2.pane_id == bob.pane_id and bob2.action == "respawned" and bob2.ready
    argv = argv_received(fleet_env, "bob")[-1]
    assert argv[argv.index("--resume") + 1] == bob.session_id and "--session-id" not in argv


def test_an_agent_that_dies_at_once_is_reported_with_status_and_last_lines(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    agent = "sh -c 'echo the agent broke: missing API key >&2; sleep 0.2; exit 7'"
    rep = spawner(operator, tmux_server, fleet_env, agent=agent).spawn(
        "demo/main", layouts.load("trio", fleet_env)
    )
    for p in rep.panes:
        assert not p.ready
        assert "status 7" in p.why and "missing API key" in p.why


def test_a_missing_agent_or_tmux_is_exit_6_before_anything_is_created(
    operator: Client,
    tmux_server: libtmux.Server,
    fleet_env: Paths,
    wave: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(errors.ToolMissing) as e:
        spawner(operator, tmux_server, fleet_env, agent="no-such-agent-xyz").spawn(
            "demo/main", layouts.load("trio", fleet_env)
        )
    assert e.value.exit_code == 6
    with monkeypatch.context() as m:
        m.setenv("PATH", "/nonexistent")
        with pytest.raises(errors.ToolMissing) as e2:
            spawner(operator, tmux_server, fleet_env, agent=None).spawn(
                "demo/main", layouts.load("trio", fleet_env)
            )
        with pytest.raises(errors.ToolMissing) as e3:
            tmux_server_for(None)
    assert "claude" in str(e2.value) and "--agent" in str(e2.value)
    assert "install" in str(e3.value) and e3.value.exit_code == 6
    assert not tmux_server.is_alive() or not tmux_server.sessions
    assert operator.list_tokens("demo") == []


def test_an_oversized_command_is_refused_not_truncated(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    huge = "fleet-standin --opening " + "x" * 20000
    with pytest.raises(errors.UsageError) as e:
        spawner(operator, tmux_server, fleet_env, agent=huge).spawn(
            "demo/main", layouts.load("trio", fleet_env)
        )
    assert "limit" in str(e.value)
    assert all(not argv_received(fleet_env, n) for n in ("alice", "bob", "carol"))


def test_an_unknown_wavelet_is_not_found(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths
) -> None:
    with pytest.raises(errors.NotFound):
        spawner(operator, tmux_server, fleet_env).spawn("nope/main", layouts.load("trio", fleet_env))


def test_respawn_resumes_a_dead_live_or_vanished_pane_with_its_recorded_session(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    first = spawner(operator, tmux_server, fleet_env).spawn("demo/main", layouts.load("trio", fleet_env))
    bob = next(p for p in first.panes if p.participant == "bob")
    sp = spawner(operator, tmux_server, fleet_env, agent=None)  # the recorded agent is used
    with pytest.raises(errors.Conflict):
        sp.respawn("demo", "bob")  # alive: only with force
    forced = sp.respawn("demo", "bob", force=True)
    assert forced.pane_id == bob.pane_id and forced.ready and "screen saved to" in forced.why
    saved = Path(forced.why.rsplit("saved to ", 1)[1])
    assert "fleet stand-in bob ready" in saved.read_text()
    Tmux(tmux_server).kill_pane(bob.pane_id)
    again = sp.respawn("demo", "bob")
    assert again.pane_id != bob.pane_id and again.ready
    runs = argv_received(fleet_env, "bob")
    assert len(runs) == 3
    for argv in runs[1:]:
        assert argv[argv.index("--resume") + 1] == bob.session_id
        assert "--reply" in argv  # the recorded agent command, not the layout's default
    with pytest.raises(errors.NotFound):
        sp.respawn("demo", "zed")


def _prompting_agent(prompt: str) -> str:
    """An agent that prints ``prompt``, waits for a line, then runs the stand-in with the command
    line it was given (``fleet claude``'s tests: it answers a prompt it reads as a stream)."""
    import shlex
    import sys

    script = f'printf "%s\\n" {shlex.quote(prompt)}; read answer; exec "$0" -m fleet.standin "$@"'
    return f"sh -c {shlex.quote(script)} {shlex.quote(sys.executable)}"


def _dialog_agent(kind: str) -> str:
    """An agent that shows Claude Code's startup dialog ``kind`` (tests/dialog_agent.py: ``trust``,
    ``dev``) until it is answered, then runs the stand-in with the command line it was given."""
    import shlex
    import sys

    script = Path(__file__).resolve().parents[1] / "dialog_agent.py"
    return shlex.join([sys.executable, str(script), kind, "--", sys.executable, "-m", "fleet.standin"])


def test_the_development_channels_warning_is_accepted(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    rep = spawner(operator, tmux_server, fleet_env, agent=_dialog_agent("dev")).spawn(
        "demo/main", layouts.load("trio", fleet_env)
    )
    assert all(p.ready for p in rep.panes), [(p.participant, p.why) for p in rep.panes]
    assert Tmux(tmux_server).window_flag(rep.window_id) == ""


def test_the_folder_trust_prompt_is_accepted_only_with_trust(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    """Without --trust: each pane is reported waiting at the prompt, with what to do, its window is
    flagged and ``fleet status`` says so; with --trust its "Yes" is chosen (the focus starts on
    "No, exit", which would end the session) and every pane gets ready."""
    from fleet.supervise import status

    agent = _dialog_agent("trust")
    lay = layouts.load("trio", fleet_env)
    tmux = Tmux(tmux_server)
    rep = spawner(operator, tmux_server, fleet_env, agent=agent).spawn("demo/main", lay)
    first = "Quick safety check: Is this a project you created or one you trust?"
    for p in rep.panes:
        assert not p.ready and p.why.startswith(f"waiting at a dialog: {first}: attach and answer it"), p.why
        assert "--trust" in p.why
    assert tmux.window_flag(rep.window_id) == f"dialog: {first}"
    notes = {r.participant: r.note for r in status(operator, tmux, fleet_env, "demo").rows}
    assert notes == dict.fromkeys(notes, f"waiting at a dialog: {first}") and len(notes) == 3, notes
    tmux.kill_session(rep.session_id)
    operator.create_wave("other", ["dora"])
    trusted = spawner(operator, tmux_server, fleet_env, agent=agent, trust=True).spawn("other/main", lay)
    assert all(p.ready for p in trusted.panes), [p.why for p in trusted.panes]
    assert tmux.window_flag(trusted.window_id) == ""


def test_a_dialog_spawn_does_not_know_is_reported_at_once_by_its_first_paragraph(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    """Spawn answers no dialog it does not know: it says so at once (not after its wait), naming
    the dialog by the first text under its rule, joined across the lines it was wrapped onto."""
    import time

    from fleet.supervise import status

    started = time.monotonic()
    sp = Spawner(operator, Tmux(tmux_server), fleet_env, agent=_dialog_agent("other"), ready_timeout=60)
    rep = sp.spawn("demo/main", layouts.load("trio", fleet_env))
    first = "Pick a colour for this session's border"
    assert time.monotonic() - started < 30
    for p in rep.panes:
        assert not p.ready and p.why.startswith(f"waiting at a dialog: {first}: attach and answer it"), p.why
    rows = status(operator, Tmux(tmux_server), fleet_env, "demo").rows
    assert {r.note for r in rows} == {f"waiting at a dialog: {first}"}
    assert Tmux(tmux_server).window_flag(rep.window_id) == f"dialog: {first}"


def test_a_later_spawn_into_the_window_keeps_the_flag_of_a_pane_still_at_its_dialog(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    """The window's flag is about every pane in it: a member added later and ready does not take
    away the flag of the members still at the folder-trust prompt."""
    tmux = Tmux(tmux_server)
    lay = layouts.load("trio", fleet_env)
    rep = spawner(operator, tmux_server, fleet_env, agent=_dialog_agent("trust")).spawn("demo/main", lay)
    first = "Quick safety check: Is this a project you created or one you trust?"
    assert tmux.window_flag(rep.window_id) == f"dialog: {first}"
    operator.invite(operator.resolve("demo/main").id, "dave")
    again = spawner(operator, tmux_server, fleet_env).spawn("demo/main", lay)
    (dave,) = [p for p in again.panes if p.participant == "dave"]
    assert dave.ready, dave.why
    assert tmux.window_flag(rep.window_id) == f"dialog: {first}"


def test_a_profiles_env_reaches_the_pane_never_the_command_line_and_its_cap_the_channel(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, wave: str, tmp_path: Path
) -> None:
    """``env`` (defaults merged with the participant's) is set in the pane, also on respawn; ``cap``
    goes to the channel entry, or to the hook command with ``--transport hook``."""
    from functools import partial

    from fleet.watch import hook_settings

    dump = tmp_path / "env"
    dump.mkdir()
    agent = f"sh -c 'env > {dump}/$FLEET_PARTICIPANT_X; exec tail -f /dev/null'"
    layout_file = tmp_path / "env.toml"
    layout_file.write_text(
        f'[defaults]\nagent = "{agent}"\ncap = 3\nenv = {{ SECRET_URL = "http://s3cret", SHARED = "d" }}\n'
        '[participants.alice]\nenv = { FLEET_PARTICIPANT_X = "alice", SHARED = "a" }\n'
        '[participants.bob]\nenv = { FLEET_PARTICIPANT_X = "bob", FLEET_WAVE = "not-this" }\ncap = 0\n'
    )
    lay = layouts.load(str(layout_file), fleet_env)
    operator.create_wave("envs", ["alice", "bob"])
    sp = Spawner(operator, Tmux(tmux_server), fleet_env, ready_timeout=0.5)
    rep = sp.spawn("envs/main", lay)

    def env_of(name: str) -> dict[str, str]:
        text = retry_until(lambda: (dump / name).exists() and (dump / name).read_text(), what=f"{name}'s env")
        assert isinstance(text, str)
        return dict(tuple(line.split("=", 1)) for line in text.splitlines() if "=" in line)  # type: ignore[misc]

    alice, bob = env_of("alice"), env_of("bob")
    assert alice["SECRET_URL"] == bob["SECRET_URL"] == "http://s3cret"
    assert (alice["SHARED"], bob["SHARED"]) == ("a", "d")
    assert alice["FLEET_WAVE"] == bob["FLEET_WAVE"] == "envs"  # fleet's own variables win
    assert "s3cret" not in rep.model_dump_json() and "s3cret" not in repr(lay.profile("alice"))

    def channel_args(p: Any) -> list[str]:
        config = next(a for a in p.argv if a.startswith("--mcp-config="))
        args: list[str] = json.loads(config.removeprefix("--mcp-config="))["mcpServers"]["fleet"]["args"]
        return args

    # a respawn runs the same layout file's profile: the session recorded its path
    assert {r.layout for r in operator.sessions("envs")} == {str(layout_file.resolve())}
    (dump / "alice").unlink()
    sp.respawn("envs", "alice", force=True)
    assert env_of("alice")["SECRET_URL"] == "http://s3cret"

    by_name = {p.participant: p for p in rep.panes}
    assert channel_args(by_name["alice"])[-2:] == ["--cap", "3"]
    assert channel_args(by_name["bob"])[-2:] == ["--cap", "0"]

    operator.create_wave("hooked", ["carol"])
    hook = Spawner(
        operator,
        Tmux(tmux_server),
        fleet_env,
        transport="hook",
        ready_timeout=0.5,
        hook_settings=partial(hook_settings, daemon=operator.base_url),
    ).spawn("hooked/main", lay)
    (carol,) = hook.panes
    settings = json.loads(next(a for a in carol.argv if a.startswith("--settings=")).split("=", 1)[1])
    command = settings["hooks"]["Stop"][0]["hooks"][0]["command"]
    assert command.endswith("--cap 3")


def test_spawning_with_a_participant_token_says_what_token_it_needs_and_leaves_nothing(
    operator: Client, daemon: Daemon, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    alice = Client(daemon.url, operator.mint_token("demo", "alice").token)
    tokens_before = operator.list_tokens("demo")
    sessions_before = operator.sessions("demo")
    with pytest.raises(errors.Forbidden) as e:
        spawner(alice, tmux_server, fleet_env).spawn("demo/main", layouts.load("trio", fleet_env))
    message = str(e.value)
    assert "participant token" in message and "alice" in message
    assert "operator token" in message and "fleet remote mint" in message
    assert "revokes tokens" not in message
    assert not tmux_server.is_alive() or not tmux_server.sessions  # no stray placeholder pane
    assert operator.list_tokens("demo") == tokens_before and operator.sessions("demo") == sessions_before
    assert not (fleet_env.tokens).exists() or not any(fleet_env.tokens.rglob("*.token"))


def test_a_respawn_is_ready_on_its_own_channel_not_on_the_one_it_replaces(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    """A respawn keeps the session id, so the old channel's last pings (until its process is gone)
    looked like the new one's: `respawn` said ready before the new agent had started. Readiness is
    the ping of this launch's channel (``FLEET_LAUNCH`` in its presence reports)."""
    import threading

    from fleet.models import PresenceReport

    first = spawner(operator, tmux_server, fleet_env)
    bob = next(
        p for p in first.spawn("demo/main", layouts.load("trio", fleet_env)).panes if p.participant == "bob"
    )
    old_launch = first._launches[bob.pane_id]
    replaced = threading.Event()

    def old_channel_still_pinging() -> None:  # until the new agent starts, as a dying channel may
        while not replaced.is_set() and len(argv_received(fleet_env, "bob")) < 2:
            report = PresenceReport(
                participant="bob", event="ping", session_id=bob.session_id, launch=old_launch
            )
            operator.report_presence("demo", report)
            replaced.wait(0.02)

    t = threading.Thread(target=old_channel_still_pinging)
    t.start()
    try:
        again = spawner(operator, tmux_server, fleet_env, agent=None).respawn("demo", "bob", force=True)
    finally:
        replaced.set()
        t.join(5)
    assert again.ready, again.why
    runs = argv_received(fleet_env, "bob")
    assert len(runs) == 2 and "--resume" in runs[1], "ready before the respawned agent had started"


class Counted:
    """Every tmux client invocation of ``srv`` (libtmux's one runner, ``Server.cmd``), as argv."""

    def __init__(self, srv: libtmux.Server) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.srv, self.real = srv, srv.cmd

    def __enter__(self) -> Counted:
        def counted(cmd: str, *args: object, target: str | int | None = None) -> libtmux.common.tmux_cmd:
            self.calls.append((cmd, *map(str, args)))
            return self.real(cmd, *args, target=target)

        self.srv.cmd = counted  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        del self.srv.cmd  # the class's own again


def test_eight_members_are_built_in_two_tmux_invocations_and_waited_for_on_their_pings(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths
) -> None:
    """The window and its 8 panes: one invocation for the window, one that splits, tags and starts
    every pane and lays it out (issue #28: it was ~30 invocations). While channels connect, tmux is
    read only in looks of one invocation each (the panes and the screens of panes not heard from),
    never a capture-pane of its own; a spawn with nothing to do reads no screen at all."""
    names = [f"a{i}" for i in range(8)]
    operator.create_wave("eight", names)
    lay = layouts.load("trio", fleet_env)
    with Counted(tmux_server) as seen:
        rep = spawner(operator, tmux_server, fleet_env, agent="fleet-standin").spawn("eight/main", lay)
    assert rep.all_ready, [(p.participant, p.why) for p in rep.panes]
    assert [c[0] for c in seen.calls[:3]] == ["list-panes", "list-sessions", "new-session"]
    chain = seen.calls[3]
    assert chain.count("split-window") == 7 and chain.count("respawn-pane") == 1
    assert chain.count("@fleet_participant") == 8 and chain.count("select-pane") == 1
    later = seen.calls[4:]
    assert not [c for c in later if c[0] in ("split-window", "respawn-pane", "capture-pane", "new-session")]
    assert all(c[0] == "list-panes" for c in later if "capture-pane" in c)  # screens only in a look
    listed = {p.participant: p for p in Tmux(tmux_server).fleet_panes(operator.get_wave("eight").id)}
    assert sorted(listed) == names and len({p.window_id for p in listed.values()}) == 1
    assert {p.participant: p.pane_id for p in rep.panes} == {n: p.pane_id for n, p in listed.items()}
    with Counted(tmux_server) as again:
        spawner(operator, tmux_server, fleet_env, agent="fleet-standin").spawn("eight/main", lay)
    assert len(again.calls) <= 6 and not [c for c in again.calls if "capture-pane" in c], again.calls


def test_a_member_added_to_a_window_someone_looks_at_leaves_their_pane_focused(
    operator: Client, tmux_server: libtmux.Server, fleet_env: Paths, wave: str
) -> None:
    """New panes are split without ``-d`` (so the window names them in the same invocation); the pane
    a person there was looking at is the active one again at the end of that invocation."""
    lay = layouts.load("trio", fleet_env)
    first = spawner(operator, tmux_server, fleet_env).spawn("demo/main", lay)
    bob = next(p.pane_id for p in first.panes if p.participant == "bob")
    tmux_server.cmd("select-pane", "-t", bob)
    operator.invite(operator.resolve("demo/main").id, "dave")
    again = spawner(operator, tmux_server, fleet_env).spawn("demo/main", lay)
    dave = next(p for p in again.panes if p.participant == "dave")
    assert dave.action == "launched" and dave.ready, dave.why
    active = tmux_server.cmd("display-message", "-p", "-t", first.window_id, "#{pane_id}").stdout
    assert active == [bob]
    assert opt(tmux_server, dave.pane_id, "@fleet_participant", "-p") == "dave"
    assert again.window_id == first.window_id
