"""``fleet watch``, ``fleet watch --hook`` and ``fleet hook-config`` end to end: a real daemon, real
``python -m fleet watch`` processes, real channels over the MCP wire, stand-in agents and (where it is
installed) the real Claude Code in an isolated tmux."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import worlds
from conftest import retry_until
from worlds import World

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths
from fleet.standin import _hook_blips
from fleet.watch import decode_after, hook_settings

WAVE = "w"


@pytest.fixture
def world(daemon: Daemon, operator: Client, fleet_env: Paths, tmp_path: Path) -> Iterator[World]:
    """The wave's history is its creation and a first message from the operator: provenance alone
    wakes nobody, and the operator's message starts the cap's count over (one delivery counted)."""
    for w in worlds.world(daemon, operator, fleet_env, tmp_path, WAVE, ["alice", "bob", "carol"]):
        w.op.post(w.main, HISTORY)
        yield w


HISTORY = "the history so far"


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def after_of(stdout: str) -> str:
    """The value of the last line, ``after=VALUE``, as /bin/sh sees it after ``eval``."""
    last = stdout.rstrip("\n").splitlines()[-1]
    assert last.startswith("after="), stdout
    got = subprocess.run(
        ["/bin/sh", "-c", 'eval "$1"; printf %s "$after"', "sh", last], capture_output=True, text=True
    )
    assert got.returncode == 0 and got.stdout, got
    return got.stdout


def hook_texts(stderr: str, kind: str | None = "message") -> list[str]:
    return [text for text, meta in _hook_blips(stderr) if kind is None or meta["kind"] == kind]


def caught_up(world: World, who: str = "alice") -> str:
    """An ``--after`` value past everything so far (the first watch returns the wave's history)."""
    first = world.run(who)
    assert first.returncode == 0, first.stderr
    return after_of(first.stdout)


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


# ---------------------------------------------------------------- plain watch


def test_watch_returns_on_the_first_blip_and_its_after_line_round_trips(world: World) -> None:
    after = caught_up(world)
    proc = world.start("alice", "--after", after)
    world.post("hello alice")
    rc, out, err = finish(proc)
    assert rc == 0, err
    assert "[w/main] bob · " in out and "hello alice" in out
    assert out.count("hello alice") == 1
    value = after_of(out)
    assert value != after and all(c.isalnum() or c in "._-" for c in value)  # safe unquoted too

    world.post("second")
    again = world.run("alice", "--after", value, "--json")
    assert again.returncode == 0, again.stderr
    lines = [json.loads(line) for line in again.stdout.splitlines()]
    assert [(x["author"], x["text"], x["kind"]) for x in lines[:-1]] == [("bob", "second", "message")]
    assert set(lines[-1]) == {"after"}
    # the JSON after value works the same way
    world.post("third")
    third = world.run("alice", "--after", lines[-1]["after"], "--json")
    assert [json.loads(x)["text"] for x in third.stdout.splitlines()[:-1]] == ["third"]


def test_per_wavelet_cursors_a_busy_wavelet_never_steps_over_a_quiet_ones_blips(world: World) -> None:
    quiet = world.op.fork(world.main, "quiet", with_=["alice", "bob"]).id
    after = caught_up(world)
    posted = ["quiet one", *(f"busy {i}" for i in range(6))]
    seen: list[str] = []
    q1 = world.post("quiet one", wavelet=quiet)  # older than every busy blip below
    for text in posted[1:]:
        world.post(text)
    # a watch of the busy wavelet only: it hands out the busy blips; the quiet one stays unseen
    busy_only = world.run("alice", "--after", after, "--wavelet", "main", "--json")
    assert busy_only.returncode == 0, busy_only.stderr
    got = [json.loads(x) for x in busy_only.stdout.splitlines()]
    seen += [x["text"] for x in got[:-1]]
    assert seen == [f"busy {i}" for i in range(6)]
    state = decode_after(got[-1]["after"], world.daemon.url, WAVE, "alice")
    assert state.cursors[world.main] > q1 and state.cursors.get(quiet, "") < q1
    after = got[-1]["after"]
    # interleave: each round posts to the busy wavelet (and once to the quiet one) between watches
    for r in range(3):
        for i in range(3):
            world.post(f"busy {r}.{i}")
            posted.append(f"busy {r}.{i}")
        if r == 1:
            world.post("quiet two", wavelet=quiet)
            posted.append("quiet two")
        res = world.run("alice", "--after", after, "--json")
        assert res.returncode == 0, res.stderr
        items = [json.loads(x) for x in res.stdout.splitlines()]
        seen += [x["text"] for x in items[:-1] if x["kind"] == "message"]
        after = items[-1]["after"]
    assert sorted(seen) == sorted(posted) and len(seen) == len(set(seen))
    assert seen.index("quiet one") > seen.index("busy 5")  # delivered late, but delivered


def test_watch_echo_suppression_and_the_cap_carry_across_calls(world: World) -> None:
    after = caught_up(world)
    world.post("mine", who="alice")
    for i in range(3):
        world.post(f"b{i}")
    # cap 3, and the wave's system blip (handed out by caught_up) already counts as one
    first = world.run("alice", "--after", after, "--cap", "3", "--json")
    items = [json.loads(x) for x in first.stdout.splitlines()]
    assert [(x["author"], x["kind"]) for x in items[:-1]] == [("bob", "message")] * 2 + [("fleet", "cap")]
    assert "Delivery cap reached in w/main" in items[2]["text"]
    world.post("b3")
    world.op.post(world.main, "operator resets the cap")
    second = world.run("alice", "--after", items[-1]["after"], "--cap", "3", "--json")
    texts = [json.loads(x)["text"] for x in second.stdout.splitlines()[:-1]]
    assert texts == ["operator resets the cap"]  # b3 stays capped; the operator's blip resets and goes


def test_watch_bad_input_has_documented_exit_codes(world: World) -> None:
    unknown_wave = subprocess.run(
        [*world.watch_argv("alice")[:6], "--wave", "nope", *world.watch_argv("alice")[8:]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unknown_wave.returncode == 4, unknown_wave.stderr
    # the operator may watch anyone, but a name on no roster is not found
    stranger = subprocess.run(
        [sys.executable, "-m", "fleet", "watch", "--participant", "zed", "--wave", WAVE,
         "--daemon", world.daemon.url, "--token-file", str(world.paths.operator_token)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert stranger.returncode == 4 and "zed" in stranger.stderr and "roster" in stranger.stderr
    not_member = world.run("carol", "--wavelet", world.op.fork(world.main, "side", with_=["alice"]).id)
    assert not_member.returncode == 4, not_member.stderr
    garbage = world.run("alice", "--after", "v1.not-a-cursor")
    assert garbage.returncode == 2 and "--after" in garbage.stderr
    others = world.run("alice", "--after", caught_up(world, "bob"))
    assert others.returncode == 2 and "bob" in others.stderr
    assert world.run("alice", "--hook", "--after", "v1.x").returncode == 2
    world.token_file("carol")
    world.op.revoke_token(wave=WAVE, participant="carol")
    revoked = world.run("carol")
    assert revoked.returncode == 5, revoked.stderr
    assert world.run("carol", "--hook").returncode == 5
    down = world.run("alice", "--unreachable-after", "0.5", daemon=dead_url())
    assert down.returncode == 3 and "unreachable" in down.stderr
    for res in (unknown_wave, stranger, garbage, revoked, down):
        assert "Traceback" not in res.stderr and res.stdout == ""


def test_an_arm_answers_as_the_cli_does(world: World) -> None:
    """An arm starts without typer (fleet.watch.hook_main) and hands the CLI what it does not take:
    whatever its command line, it exits and writes as ``fleet watch --hook`` through the CLI does."""
    via_cli = [sys.executable, "-c", "from fleet.cli import main; main()"]
    for extra in (
        ["--wave", "nope"],  # the last --wave counts: unknown, 4
        ["--participant", "Alice"],
        ["--receipts", "rollout"],
        ["--attention", "nonsense"],
        ["--cap", "-1"],  # refused by typer: the CLI answers
        ["--after", "v1.x"],
        ["--no-such-option"],
    ):
        argv = world.watch_argv("alice", "--hook", *extra)
        fast = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        cli = subprocess.run(
            [*via_cli, *argv[3:]], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
        )
        assert fast.returncode in (2, 4), (extra, fast.stderr)
        assert (fast.returncode, fast.stdout, fast.stderr) == (cli.returncode, cli.stdout, cli.stderr), extra


# ---------------------------------------------------------------- hook mode


def test_hook_wakes_with_the_blips_on_stderr_and_commits_the_cursor(world: World) -> None:
    first = world.run("alice", "--hook")  # the history since alice joined: its creation and a message
    assert first.returncode == 2 and first.stdout == ""
    assert hook_texts(first.stderr, "system") and first.stderr.startswith("fleet: 2 new blips for alice")
    arm = world.start("alice", "--hook")
    retry_until(lambda: world.lock_held("alice"), what="the arm holding the lock")
    world.post('tricky </channel> <b a="1"> & text\nsecond line')
    rc, out, err = finish(arm)
    assert rc == 2 and out == ""
    (block,) = _hook_blips(err)
    assert block[0] == 'tricky </channel> <b a="1"> & text\nsecond line'
    assert block[1]["author"] == "bob" and block[1]["wavelet"] == "w/main" and block[1]["kind"] == "message"
    assert err.count("</channel>") == 1  # the text's own closing tag was escaped
    state = world.state_file("alice").load()
    assert state.cursors[world.main] == block[1]["blip_id"]  # committed once emitted
    nothing = world.run("alice", "--hook", "--wait", "0.5")
    assert nothing.returncode == 0 and nothing.stderr == ""


def test_two_simultaneous_arms_exactly_one_delivers_the_other_exits_0_at_once(world: World) -> None:
    assert world.run("alice", "--hook").returncode == 2  # past the history
    arms = [world.start("alice", "--hook"), world.start("alice", "--hook")]
    loser = retry_until(lambda: next((a for a in arms if a.poll() is not None), None), what="one arm out")
    assert loser is not None and loser.returncode == 0
    winner = next(a for a in arms if a is not loser)
    assert winner.poll() is None and world.lock_held("alice")
    world.post("only once")
    rc, _out, err = finish(winner)
    assert rc == 2 and hook_texts(err) == ["only once"]
    assert loser.communicate()[1] == ""


def test_a_lock_left_by_a_killed_arm_is_taken_over(world: World) -> None:
    assert world.run("alice", "--hook").returncode == 2
    stuck = world.start("alice", "--hook")
    retry_until(lambda: world.lock_held("alice"), what="the arm holding the lock")
    stuck.send_signal(signal.SIGKILL)
    stuck.wait()
    assert not world.lock_held("alice")  # the kernel released the flock with the process
    world.post("after the kill")
    res = world.run("alice", "--hook")
    assert res.returncode == 2 and hook_texts(res.stderr) == ["after the kill"]


def test_an_arm_whose_session_died_exits_without_taking_blips(world: World) -> None:
    assert world.run("alice", "--hook").returncode == 2
    # a stand-in "session": a process whose child is the arm (as Claude Code runs hooks with exec)
    session = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])",
         *world.watch_argv("alice", "--hook")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    world.procs.append(session)  # type: ignore[arg-type]
    retry_until(lambda: world.lock_held("alice"), what="the orphan-to-be holding the lock")
    session.send_signal(signal.SIGKILL)
    retry_until(lambda: not world.lock_held("alice"), what="the orphaned arm letting go")
    world.post("for the next session")
    res = world.run("alice", "--hook")
    assert res.returncode == 2 and hook_texts(res.stderr) == ["for the next session"]


def test_channel_to_hook_to_channel_delivers_every_blip_exactly_once(world: World) -> None:
    delivered: list[str] = []
    first = world.channel("alice")
    world.post("m1")
    world.post("m2")
    first.wait_notes(lambda ns: any(n["content"] == "m2" for n in ns), what="m2 on the channel")
    # while the channel delivers it holds the lock: an arm exits 0 at once and takes nothing
    busy = world.run("alice", "--hook")
    assert busy.returncode == 0 and busy.stderr == ""
    assert first.close() == 0
    delivered += [n["content"] for n in first.channel_notes() if n["meta"]["kind"] == "message"]

    world.post("m3")
    world.post("m4")
    hook1 = world.run("alice", "--hook")
    assert hook1.returncode == 2, hook1.stderr
    delivered += hook_texts(hook1.stderr)
    arm = world.start("alice", "--hook")
    retry_until(lambda: world.lock_held("alice"), what="the arm waiting")
    world.post("m5")
    rc, _out, err = finish(arm)
    assert rc == 2
    delivered += hook_texts(err)

    world.post("m6")
    second = world.channel("alice")
    second.wait_notes(lambda ns: any(n["content"] == "m6" for n in ns), what="m6 on the second channel")
    world.post("m7")
    second.wait_notes(lambda ns: any(n["content"] == "m7" for n in ns), what="m7 on the second channel")
    assert second.close() == 0
    delivered += [n["content"] for n in second.channel_notes() if n["meta"]["kind"] == "message"]
    assert delivered == [HISTORY, *(f"m{i}" for i in range(1, 8))]


def test_a_no_deliver_channel_serves_tools_reports_presence_and_never_takes_the_lock(
    world: World,
) -> None:
    tools_only = world.channel("alice", "--no-deliver")

    def alive() -> bool:
        rows = {r.participant: r for r in world.op.presence(WAVE)}
        return "alice" in rows and rows["alice"].state != "gone"

    retry_until(alive, what="the tools-only channel's presence ping")
    assert not world.lock_held("alice")
    posted = tools_only.call("wavelet_post", {"wavelet": "main", "text": "from alice's tools"})
    assert not posted.get("isError"), posted
    world.post("to alice")
    res = world.run("alice", "--hook")
    assert res.returncode == 2 and "to alice" in hook_texts(res.stderr)
    assert "from alice's tools" not in hook_texts(res.stderr)  # her own blip: echo suppressed
    ping = tools_only.call("wavelet_ping")
    assert ping["structuredContent"]["delivery"]["state"] == "stopped"
    assert "--no-deliver" in ping["structuredContent"]["delivery"]["detail"]
    assert tools_only.channel_notes() == []
    assert tools_only.close() == 0
    retry_until(lambda: not alive(), what="gone after the channel exits")


def test_echo_and_cap_apply_in_hook_mode(world: World) -> None:
    assert world.run("alice", "--hook").returncode == 2
    world.post("alice's own", who="alice")
    for i in range(4):
        world.post(f"b{i}")
    capped = world.run("alice", "--hook", "--cap", "3")  # the system blip already counted one
    assert capped.returncode == 2
    got = [(m["author"], m["kind"], t) for t, m in _hook_blips(capped.stderr)]
    assert [g[:2] for g in got] == [("bob", "message"), ("bob", "message"), ("fleet", "cap")]
    assert [g[2] for g in got[:2]] == ["b0", "b1"] and "Delivery cap reached" in got[2][2]
    world.post("b4")
    quiet = world.run("alice", "--hook", "--cap", "3", "--wait", "1")
    assert quiet.returncode == 0 and quiet.stderr == ""  # capped: stepped over silently
    world.op.post(world.main, "operator speaks")
    reset = world.run("alice", "--hook", "--cap", "3")
    assert reset.returncode == 2 and hook_texts(reset.stderr) == ["operator speaks"]
    state = world.state_file("alice").load()
    assert state.delivered[world.main] == 1 and world.main not in state.exhausted


def test_a_corrupt_state_file_is_a_clear_error_and_skips_nothing(world: World) -> None:
    sf = world.state_file("alice")
    sf.path.parent.mkdir(parents=True, exist_ok=True)
    sf.path.write_text("{not json")
    world.post("kept")
    res = world.run("alice", "--hook")
    assert res.returncode == 1 and str(sf.path) in res.stderr and "mv " in res.stderr
    assert "Traceback" not in res.stderr
    assert sf.path.read_text() == "{not json"  # never overwritten
    assert not world.lock_held("alice")
    sf.path.rename(sf.path.with_name(sf.path.name + ".bad"))
    again = world.run("alice", "--hook")
    assert again.returncode == 2 and "kept" in hook_texts(again.stderr)


def test_daemon_down_wakes_the_session_after_the_configured_time(world: World) -> None:
    res = world.run("alice", "--hook", "--unreachable-after", "1", daemon=dead_url())
    assert res.returncode == 2
    assert "unreachable for 1s" in res.stderr and "re-arms" in res.stderr and _hook_blips(res.stderr) == []
    # the daemon going away under a waiting arm
    assert world.run("alice", "--hook").returncode == 2
    arm = world.start("alice", "--hook", "--unreachable-after", "1")
    retry_until(lambda: world.lock_held("alice"), what="the arm waiting")
    world.daemon.stop()
    rc, _out, err = finish(arm)
    assert rc == 2 and "unreachable" in err and world.daemon.url in err


# ---------------------------------------------------------------- hook-config and spawn


def test_hook_config_prints_settings_whose_command_delivers(world: World) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "fleet", "hook-config", "--participant", "alice", "--wave", WAVE,
         "--daemon", world.daemon.url, "--token-file", str(world.token_file("alice"))],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    settings = json.loads(res.stdout)
    assert res.stdout.strip() == hook_settings(
        "alice", WAVE, world.token_file("alice"), daemon=world.daemon.url
    )
    assert set(settings["hooks"]) == {"SessionStart", "Stop", "StopFailure"}
    for event in settings["hooks"]:
        (handler,) = settings["hooks"][event][0]["hooks"]
        assert handler["type"] == "command" and handler["asyncRewake"] is True
        assert handler["timeout"] >= 86400
    command = settings["hooks"]["Stop"][0]["hooks"][0]["command"]
    words = shlex.split(command)
    assert words[0] == "exec" and words[2:5] == ["-m", "fleet", "watch"] and "--hook" in words
    assert world.token_file("alice").read_text().strip() not in command  # the file, never the secret
    # the command itself, run by a shell as Claude Code runs it, delivers
    ran = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 2 and hook_texts(ran.stderr, "system")
    missing = subprocess.run(
        [sys.executable, "-m", "fleet", "hook-config", "--participant", "alice", "--wave", WAVE,
         "--daemon", world.daemon.url], capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if k != "FLEET_TOKEN_FILE"},
    )  # fmt: skip
    assert missing.returncode == 2 and "fleet token mint w alice" in missing.stderr


# ---------------------------------------------------------------- the real Claude Code
