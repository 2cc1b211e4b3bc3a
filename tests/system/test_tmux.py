"""The tmux adapter passes every string literally: no shell, no format expansion, no separator.

tmux format-expands some arguments (session and window names, ``respawn-pane -c``) and ``#(cmd)``
there runs ``cmd`` through ``/bin/sh``; a trailing ``;`` of any argument is a command separator.
Each hostile string below, in every field a user can influence (working directory, names, agent
command, its arguments, model, environment), must arrive exactly as written and run nothing.
"""

from __future__ import annotations

import itertools
import json
import shlex
import sys
import uuid
from pathlib import Path

import libtmux
import pytest
from conftest import retry_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet import errors, layouts
from fleet.client import Client
from fleet.paths import Paths
from fleet.spawn import Spawner
from fleet.tmux import MAX_COMMAND_BYTES, PaneLaunch, Tmux, session_name


def hostile(tag: str) -> list[str]:
    """Strings that run a command (or expand, or split the tmux command) if tmux reads them. What
    they would run leaves a file named ``pwned-…`` (tmux runs ``#()`` jobs in its own or the
    client's folder, or HOME: all under the test's tmp_path, which the test works in)."""
    return [
        f"#(touch pwned-{tag}-shell)",
        f"a#(touch pwned-{tag}-mid)b",
        "#{pane_id}#{session_name}#[fg=red]##",
        f"x; run-shell 'touch pwned-{tag}-semi'",
        "ends;",
        "ends\\;",
        ";",
    ]


def pwned(root: Path) -> list[Path]:
    """Files a hostile string's command would have made (the cwd folders themselves aside)."""
    return [p for p in root.rglob("*pwned*") if p.is_file()]


RECORDER = (
    "import json, os, sys; "
    "open(sys.argv[1], 'w').write(json.dumps({'cwd': os.getcwd(), 'argv': sys.argv[2:], "
    "'env': os.environ.get('HOSTILE')})); "
    "import time; time.sleep(60)"
)


def recorded(path: Path) -> dict[str, object]:
    text = retry_until(lambda: path.exists() and path.read_text(), what=f"{path.name} written")
    assert isinstance(text, str)
    data: dict[str, object] = json.loads(text)
    return data


def test_names_cwd_env_and_argv_reach_tmux_and_the_pane_literally(
    tmux_server: libtmux.Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where the tmux server starts, and runs its jobs
    t = Tmux(tmux_server)
    evil_name = "w#(touch pwned-name)#{pane_id}"
    sid, _wid, pane = t.new_session("wave-id", evil_name, evil_name + ";", "wl-id")
    t.new_window(sid, "wave-id", "n#(touch pwned-window)", "wl2")
    names = tmux_server.cmd("list-windows", "-t", sid, "-F", "#{window_name}").stdout
    assert names == [evil_name + ";", "n#(touch pwned-window)"]
    (session_name,) = tmux_server.cmd("list-sessions", "-F", "#{session_name}").stdout
    assert session_name == evil_name

    cwd = tmp_path / "r#(id >pwned)"
    cwd.mkdir()
    out = tmp_path / "seen.json"
    args = hostile("arg")
    t.tag_pane(pane, "wave-id", "wl-id", "alice;")
    t.respawn(
        pane,
        [sys.executable, "-c", RECORDER, str(out), *args],
        cwd=str(cwd),
        env={"HOSTILE": "#(touch pwned-env);"},
    )
    seen = recorded(out)
    assert seen == {"cwd": str(cwd), "argv": args, "env": "#(touch pwned-env);"}
    opt = tmux_server.cmd("show-options", "-p", "-v", "-t", pane, "@fleet_participant").stdout
    assert opt == ["alice;"]
    assert pwned(tmp_path) == []  # nothing ran


def test_a_working_directory_holding_a_style_or_hashes_before_one_is_the_panes_cwd_as_written(
    tmux_server: libtmux.Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tmux's expander copies a run of ``#`` before ``[`` (a style) through as it is, so doubling
    those ``#`` (as every other ``#`` is) gave the pane another folder: tmux fell back to the
    client's (found by the property below)."""
    monkeypatch.chdir(tmp_path)
    t = Tmux(tmux_server)
    _sid, _wid, pane = t.new_session("wave-id", "w", "w", "wl-id")
    for name in ("a#[fg=red]b", "##[x", "#[#(touch pwned-style)]", "x#y#[z"):
        cwd = tmp_path / name
        cwd.mkdir()
        out = tmp_path / "seen.json"
        out.unlink(missing_ok=True)
        t.respawn(pane, [sys.executable, "-c", RECORDER, str(out)], cwd=str(cwd))
        assert recorded(out)["cwd"] == str(cwd)
    assert pwned(tmp_path) == []


@pytest.fixture
def wave(operator: Client) -> str:
    operator.create_wave("evil", ["alice"])
    return "evil"


def test_a_layouts_cwd_agent_args_and_model_run_no_shell_on_spawn_and_respawn(
    operator: Client,
    tmux_server: libtmux.Server,
    fleet_env: Paths,
    wave: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The repro of issue #15: a working directory holding ``#(…)`` ran its command on spawn, and the
    recorded cwd re-ran it on every respawn."""
    monkeypatch.chdir(tmp_path)
    cwd = tmp_path / "r#(id >pwned)"
    cwd.mkdir()
    out = tmp_path / "seen.json"
    agent = shlex.join([sys.executable, "-c", RECORDER, str(out), "#(touch pwned-agent)"])
    args = hostile("arg")
    model = "m#(touch pwned-model);"
    layout_file = tmp_path / "evil.toml"
    layout_file.write_text(
        f"[defaults]\nagent = {json.dumps(agent)}\ncwd = {json.dumps(str(cwd))}\n"
        f"model = {json.dumps(model)}\nargs = {json.dumps(args)}\n"
        'env = { HOSTILE = "#(touch pwned-env)" }\n'
    )
    sp = Spawner(operator, Tmux(tmux_server), fleet_env, ready_timeout=0.3)
    rep = sp.spawn("evil/main", layouts.load(str(layout_file), fleet_env))
    (alice,) = rep.panes
    seen = recorded(out)
    assert seen["cwd"] == str(cwd)
    assert seen["argv"] == alice.argv[4:]  # everything after `python -c RECORDER out`, exactly
    argv = alice.argv
    assert argv[argv.index("--model") + 1] == model and argv[-len(args) :] == args
    assert seen["env"] == "#(touch pwned-env)"
    assert {r.cwd for r in operator.sessions("evil")} == {str(cwd)}
    out.unlink()
    sp.respawn("evil", "alice", force=True)  # the recorded cwd, again
    assert recorded(out)["cwd"] == str(cwd)
    assert pwned(tmp_path) == []


@pytest.mark.parametrize("field", ["wave", "wavelet", "participant"])
def test_names_holding_tmux_syntax_never_get_as_far_as_tmux(operator: Client, field: str) -> None:
    """Wave, wavelet and participant names (which become tmux names and options) refuse ``#`` and ``;``."""
    bad = "a#(id)"
    with pytest.raises(errors.UsageError):
        if field == "wave":
            operator.create_wave(bad)
        elif field == "wavelet":
            operator.create_wave("ok", ["alice"])
            operator.fork("ok/main", "x;y")
        else:
            operator.create_wave("ok2", [bad])


def test_the_waiting_flag_holds_any_reason_literally_and_a_dialog_never_clears_another_waiters(
    tmux_server: libtmux.Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``flag_window`` stores a reason as written (a dialog's first line is screen text); the dialog
    flag (:func:`fleet.dialogs.flag`) sets and clears only its own ``dialog:`` reasons."""
    from fleet import dialogs

    monkeypatch.chdir(tmp_path)
    tmux = Tmux(tmux_server)
    _sid, window, _pane = tmux.new_session("wave-id", "flags", "main", "wavelet-id")
    assert tmux.window_flag(window) == ""
    for text in hostile("flag"):
        dialogs.flag(tmux, window, text)
        assert tmux.window_flag(window) == f"dialog: {text}"
    dialogs.flag(tmux, window, None)
    assert tmux.window_flag(window) == ""
    tmux.flag_window(window, "permission: Bash (ls)")
    dialogs.flag(tmux, window, "WARNING: Loading development channels")
    dialogs.flag(tmux, window, None)
    assert tmux.window_flag(window) == "permission: Bash (ls)"
    tmux.flag_window(window, None)
    assert tmux.window_flag(window) == ""
    assert not list(tmp_path.rglob("pwned-*")) and not list(Path.home().rglob("pwned-*"))


# A terminal program that reads its input in chunks, as a busy TUI does between renders, and echoes
# it. Claude Code's input box takes a chunk holding text and Enter together as a paste, whose Enter
# is a newline, not a submit: two lines typed that way become one prompt (seen with the keeper's
# heartbeats on a loaded machine: "…next step\n[fleet] heartbeat: …", one turn for two beats).
CHUNKY = """\
import json, os, sys, time, tty
tty.setraw(0)  # (it flushes what was typed before: the test waits for "ready")
os.write(1, b"ready\\r\\n")
with open(sys.argv[1], "a") as out:
    while True:
        time.sleep(0.3)
        data = os.read(0, 4096)
        if not data:
            break
        out.write(json.dumps(data.decode()) + "\\n")
        out.flush()
        os.write(1, data.replace(b"\\r", b"\\r\\n"))
"""


def test_a_typed_line_is_echoed_before_its_enter_so_a_busy_tui_reads_enter_alone(
    tmux_server: libtmux.Server, tmp_path: Path
) -> None:
    prog, chunks = tmp_path / "chunky.py", tmp_path / "chunks.jsonl"
    prog.write_text(CHUNKY)
    tmux = Tmux(tmux_server)
    argv = shlex.join([sys.executable, str(prog), str(chunks)])
    tmux_server.cmd("new-session", "-d", "-s", "t", "-x", "80", "-y", "24", argv)
    pane = tmux_server.cmd("display-message", "-p", "-t", "t", "#{pane_id}").stdout[0]
    retry_until(lambda: "ready" in tmux.capture(pane), what="the program reading its terminal raw")
    line = "[fleet] heartbeat: no workers in flight; check on them and dispatch the next step"

    def chunks_read() -> list[str]:
        return [json.loads(x) for x in chunks.read_text().splitlines()] if chunks.exists() else []

    def read(enters: int) -> list[str]:
        retry_until(lambda: "".join(chunks_read()).count("\r") == enters, what=f"{enters} line(s) submitted")
        return chunks_read()

    for n in (1, 2):  # the second once the first is in, as the keeper types a quiet interval later
        tmux.type_line(pane, line)
        got = read(n)
    assert "".join(got) == f"{line}\r" * 2
    assert all(c == "\r" or "\r" not in c for c in got), f"an Enter read together with its text: {got}"


def test_a_waves_session_id_and_name_come_from_one_tmux_command(
    tmux_server: libtmux.Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fleet status`` (and kill, and spawn's report) read the session's id and name together."""
    tmux = Tmux(tmux_server)
    sid, _, _ = tmux.new_session("wave-1", "my wave", "main", "wl-1")
    tmux.new_session("wave-2", "my wave", "main", "wl-2")  # the same wave name: tmux's name differs
    calls: list[tuple[object, ...]] = []
    real = tmux_server.cmd

    def counted(*args: object, **kw: object) -> object:
        calls.append(args)
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(tmux_server, "cmd", counted)
    got = tmux.wave_session("wave-1")
    assert got is not None and (got.session_id, got.name) == (sid, "my wave") and len(calls) == 1
    other = tmux.wave_session("wave-2")
    assert other is not None and other.name not in ("", "my wave") and other.session_id != sid
    calls.clear()
    assert tmux.wave_session("no-such-wave") is None and tmux.find_session("wave-1") == sid
    assert len(calls) == 2
    monkeypatch.undo()
    tmux_server.kill()
    assert tmux.wave_session("wave-1") is None and tmux.find_session("wave-1") is None  # no server: none


# Pieces of strings that act if tmux (or a shell) reads them: a format's job ``#(…)`` runs its command,
# ``#{…}``/``#[…]`` expand, a trailing ``;`` splits a command list, ``\`` and quotes are shell syntax.
PIECES = ["#(touch pwned-chain)", "#{pane_id}", "#[fg=red]", "##", "#", ";", "\\;", "\\", "'", '"', "$HOME",
          "%1", "@1", "{", "}", " ", "-t", "x", "é", "~"]  # fmt: skip
PRINTABLE = st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"))


def crafted(min_size: int = 0, chars: st.SearchStrategy[str] = PRINTABLE) -> st.SearchStrategy[str]:
    pieces = st.sampled_from(PIECES) | st.text(chars, max_size=4)
    return st.lists(pieces, min_size=min_size, max_size=6).map("".join).filter(lambda s: len(s) >= min_size)


NAMED = st.characters(min_codepoint=0x20, max_codepoint=0x7E) | st.sampled_from("éü¢—")
"""Characters tmux shows in a session or window name as given. It escapes (vis(3) style: a display
escape, not an expansion) ``\\``, control characters and what its width table does not know as
printable (private-use and unassigned code points), and ``$`` in a session name (a ``$`` names a
session id in a target); fleet's names are ``[a-z0-9_.-]`` anyway."""


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=crafted(1, NAMED).filter(lambda s: "\\" not in s and "$" not in s),
    who=st.lists(crafted(1), min_size=3, max_size=3),
    args=st.lists(crafted() | st.text(max_size=8).filter(lambda s: "\0" not in s), max_size=4),
    env=crafted(),
    folder=crafted(1).filter(lambda s: "/" not in s and s not in (".", "..") and len(s.encode()) < 200),
)
def test_any_string_in_one_build_chain_reaches_tmux_and_the_panes_literally(
    tmux_server: libtmux.Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    who: list[str],
    args: list[str],
    env: str,
    folder: str,
) -> None:
    """A window built in one invocation (a new session, its placeholder respawned, two panes split off
    with their agents) holds every name, option, argv, cwd and env value exactly as given: nothing in
    the chain is format-expanded, shell-read or taken for a separator."""
    monkeypatch.chdir(tmp_path)
    t = Tmux(tmux_server)
    session = session_name(name, {s.name for s in t.sessions()})
    sid, wid, first = t.open_window(name, new_session_name=session)
    try:
        cwd = tmp_path / folder
        cwd.mkdir(exist_ok=True)
        outs = [tmp_path / f"seen-{uuid.uuid4().hex}.json" for _ in who]
        launches = [
            PaneLaunch(pane, w, [sys.executable, "-c", RECORDER, str(out), *args], str(cwd), {"HOSTILE": env})
            for pane, w, out in zip([first, "", ""], who, outs, strict=True)
        ]
        calls: list[str] = []
        real = tmux_server.cmd

        def counted(cmd: str, *args: object, target: str | int | None = None) -> libtmux.common.tmux_cmd:
            calls.append(cmd)
            return real(cmd, *args, target=target)

        tmux_server.cmd = counted  # type: ignore[method-assign]
        try:
            panes = t.launch(
                "wave-id",
                "wl-id",
                launches,
                window_id=wid,
                tag_session=sid,
                tag_window=True,
                focus=first,
                arrangement="tiled",
            )
        finally:
            del tmux_server.cmd  # the class's own again
        assert len(calls) == 1, calls  # the whole build: one tmux invocation
        assert panes[0] == first and len(set(panes)) == 3
        for out in outs:
            assert recorded(out) == {"cwd": str(cwd), "argv": args, "env": env}
        listed = {p.pane_id: p for p in t.panes()}
        assert [listed[p].participant for p in panes] == who
        assert {
            (listed[p].wave, listed[p].wavelet, listed[p].session_id, listed[p].window_id) for p in panes
        } == {("wave-id", "wl-id", sid, wid)}
        assert t.names(wid) == (session, name)
        active = tmux_server.cmd("display-message", "-p", "-t", wid, "#{pane_id}").stdout
        assert active == [first]  # the focus given back
    finally:  # an example that failed leaves no session for the next to collide with
        t.kill_session(sid)
    assert pwned(tmp_path) == []


def test_agents_whose_command_lines_pass_tmuxs_limit_together_start_in_as_few_invocations_as_fit(
    tmux_server: libtmux.Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight panes of ~5 KB command lines each (Claude Code's prompt and settings are that size) are
    over tmux's 16 KB message together: they go in three invocations, no pane's commands in two."""
    t = Tmux(tmux_server)
    sid, wid, first = t.open_window("big", new_session_name="big")
    outs = [tmp_path / f"seen-{i}.json" for i in range(8)]
    big = ["x" * 5000 + ";"]
    launches = [
        PaneLaunch(pane, f"p{i}", [sys.executable, "-c", RECORDER, str(out), *big], str(tmp_path))
        for i, (pane, out) in enumerate(zip([first, *[""] * 7], outs, strict=True))
    ]
    calls: list[int] = []
    real = tmux_server.cmd

    def sized(cmd: str, *args: object, target: str | int | None = None) -> libtmux.common.tmux_cmd:
        calls.append(sum(len(str(a).encode()) + 1 for a in (cmd, *args)))
        return real(cmd, *args, target=target)

    monkeypatch.setattr(tmux_server, "cmd", sized)
    panes = t.launch(
        "w", "wl", launches, window_id=wid, tag_session=sid, tag_window=True, arrangement="tiled"
    )
    monkeypatch.undo()
    assert 1 < len(calls) < 8 and max(calls) <= MAX_COMMAND_BYTES, calls
    assert all(a + b > MAX_COMMAND_BYTES for a, b in itertools.pairwise(calls)), calls  # none could be one
    for out in outs:
        assert recorded(out)["argv"] == big
    listed = {p.pane_id: p for p in t.panes()}
    assert [listed[p].participant for p in panes] == [f"p{i}" for i in range(8)]
    with pytest.raises(errors.UsageError, match="over tmux's limit"):
        t.launch("w", "wl", [PaneLaunch(first, "huge", ["a", "b" * MAX_COMMAND_BYTES])], window_id=wid)
    t.kill_session(sid)


def test_screens_gives_each_pane_its_own_screen_whatever_its_id(tmux_server: libtmux.Server) -> None:
    """Spawn reads the screens of the panes not yet heard from in one invocation (``Tmux.screens``),
    keyed by pane id: ``%3`` once came back as `` %3`` (display-message's text goes through strftime,
    and ``%3`` is a width), so the third pane of every spawn was never looked at and was left at
    Claude Code's channels dialog. Twelve panes: ids of one and two digits, each showing its own text."""
    tmux = Tmux(tmux_server)
    tmux_server.cmd("new-session", "-d", "-s", "t", "-x", "200", "-y", "100", "cat")
    for _ in range(11):
        tmux_server.cmd("split-window", "-t", "t", "cat", ";", "select-layout", "-t", "t", "tiled")
    ids = tmux_server.cmd("list-panes", "-t", "t", "-F", "#{pane_id}").stdout
    assert len(ids) == 12 and "%3" in ids and "%11" in ids
    for pane in ids:
        tmux_server.cmd("send-keys", "-t", pane, "-l", f"screen of {pane}%3 %%")
    shown = lambda: all(f"screen of {p}" in "".join(tmux.capture(p)) for p in ids)  # noqa: E731
    retry_until(shown, what="each pane's text")
    listed, screens = tmux.screens(ids)
    assert sorted(screens) == sorted(ids)
    for pane in ids:  # (a chain keeps a screen's blank lines at the bottom; one capture drops them)
        assert "\n".join(screens[pane]).rstrip("\n") == "\n".join(tmux.capture(pane)).rstrip("\n"), pane
    assert {p.pane_id for p in listed} >= set(ids)


def test_a_server_left_with_no_session_lists_no_panes(tmux_server: libtmux.Server) -> None:
    """A server whose last session was killed, before it exits (exit-empty) or kept (``exit-empty
    off``), answers ``list-panes -a`` with "no current target": that is no panes, not a failure (a
    spawn right after `fleet kill` failed on it)."""
    tmux = Tmux(tmux_server)
    tmux_server.cmd("new-session", "-d", "-s", "only", "sleep 300")
    tmux_server.cmd("set-option", "-g", "exit-empty", "off")
    assert [p for p in tmux.panes() if p.alive]
    tmux_server.cmd("kill-session", "-t", "only")
    assert tmux_server.cmd("list-sessions").stderr == []  # the server runs on, with no session
    assert tmux.panes() == []
