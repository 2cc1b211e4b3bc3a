"""The channel end to end: a real daemon, real ``fleet channel`` processes, the official MCP SDK.

Delivery is observed on each channel's stdout (raw ``notifications/claude/channel`` lines), so every
assertion is about what Claude Code would receive.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import worlds
from conftest import retry_until
from mcp import ClientSession, StdioServerParameters
from mcp.client import NotificationBinding
from mcp.client.stdio import stdio_client
from mcphelp import RawMcp, env_with
from pydantic import BaseModel
from worlds import World

from fleet.agentstate import hook_file
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.models import AgentState
from fleet.paths import Paths

try:  # mcp >= 2
    from mcp.shared.exceptions import MCPError
except ImportError:  # pragma: no cover - mcp 1.x
    from mcp.shared.exceptions import McpError as MCPError  # type: ignore[attr-defined,no-redef]

WAVE = "w"
PEOPLE = ("alice", "bob", "carol")
TOOLS = {
    "wavelet_post",
    "wavelet_read",
    "wavelet_list",
    "wavelet_fork",
    "wavelet_surface",
    "wavelet_invite",
    "wavelet_leave",
    "wavelet_ping",
    "wavelet_summarize",
    "wavelet_pin",
}


@pytest.fixture
def world(daemon: Daemon, operator: Client, fleet_env: Paths, tmp_path: Path) -> Iterator[World]:
    yield from worlds.world(daemon, operator, fleet_env, tmp_path, WAVE, list(PEOPLE))


def texts(proc: RawMcp, kind: str | None = "message") -> list[str]:
    return [n["content"] for n in proc.channel_notes() if kind is None or n["meta"]["kind"] == kind]


def wait_text(proc: RawMcp, text: str, timeout: float = 15) -> dict[str, Any]:
    found: dict[str, Any] = proc.wait_notes(
        lambda notes: next((n for n in notes if n["content"] == text), None), timeout, f"a blip {text!r}"
    )
    return found


# ---------------------------------------------------------------- the official SDK as the client


class ChannelParams(BaseModel):
    content: str
    meta: dict[str, str]


def test_sdk_client_initialize_tools_ping_and_channel_notifications(world: World) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=world.channel_argv("alice")[1:],
        env={"FLEET_HOME": os.environ["FLEET_HOME"], "CLAUDE_CODE_SESSION_ID": "sess-sdk-1"},
    )
    seen: list[ChannelParams] = []
    got_hello = anyio.Event()

    async def on_channel(p: ChannelParams) -> None:
        seen.append(p)
        if p.content == "hello alice":
            got_hello.set()

    async def scenario() -> None:
        binding = NotificationBinding(
            method="notifications/claude/channel", params_type=ChannelParams, handler=on_channel
        )
        with anyio.fail_after(60):
            async with (
                stdio_client(params) as (read, write),
                ClientSession(read, write, notification_bindings=[binding]) as s,
            ):
                init = (await s.initialize()).model_dump(by_alias=True, exclude_none=True)
                assert init["protocolVersion"] == "2025-11-25"
                assert init["capabilities"]["experimental"] == {"claude/channel": {}}
                assert init["instructions"].startswith("You are alice.")

                tools = (await s.list_tools()).model_dump(by_alias=True, exclude_none=True)["tools"]
                assert {t["name"] for t in tools} == TOOLS
                for t in tools:
                    assert t["inputSchema"]["type"] == "object"
                    assert t["inputSchema"]["additionalProperties"] is False
                    assert t["outputSchema"]["type"] == "object"
                    assert t["description"]

                await s.send_ping()

                await anyio.to_thread.run_sync(lambda: world.post("hello alice"))
                await got_hello.wait()
                hello = next(p for p in seen if p.content == "hello alice")
                assert hello.meta["author"] == "bob" and hello.meta["wavelet"] == "w/main"
                assert set(hello.meta) == {"wavelet", "wavelet_id", "blip_id", "author", "kind"}

                async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
                    res = (await s.call_tool(name, args)).model_dump(by_alias=True, exclude_none=True)
                    assert res["isError"] is False, res
                    assert res["content"][0]["type"] == "text" and res["content"][0]["text"]
                    return dict(res["structuredContent"])

                posted = await call("wavelet_post", {"wavelet": "main", "text": "hi from alice"})
                assert posted["blip"]["author"] == "alice" and posted["blip"]["wavelet"] == "w/main"
                whole = await call("wavelet_read", {"wavelet": "w/main"})
                assert [b["text"] for b in whole["blips"]][-2:] == ["hello alice", "hi from alice"]
                newer = await call("wavelet_read", {"wavelet": world.main, "after": hello.meta["blip_id"]})
                assert [b["text"] for b in newer["blips"]] == ["hi from alice"]
                listed = await call("wavelet_list", {})
                assert [w["path"] for w in listed["wavelets"]] == ["w/main"]
                assert listed["wavelets"][0]["topic"] == ""
                topic = "the parser's failing tests"
                await anyio.to_thread.run_sync(lambda: world.op.set_topic(world.main, topic))
                about = (await s.call_tool("wavelet_list", {})).model_dump(by_alias=True, exclude_none=True)
                assert about["structuredContent"]["wavelets"][0]["topic"] == "the parser's failing tests"
                assert "w/main · id" in about["content"][0]["text"]
                assert "topic: the parser's failing tests" in about["content"][0]["text"]
                forked = await call("wavelet_fork", {"wavelet": "main", "name": "side", "with": ["bob"]})
                assert forked["wavelet"]["members"] == ["alice", "bob"] and forked["wavelet"]["member"]
                surfaced = await call("wavelet_surface", {"wavelet": "side", "text": "side: settled"})
                assert surfaced["blip"]["kind"] == "surface" and surfaced["blip"]["wavelet"] == "w/main"
                invited = await call("wavelet_invite", {"wavelet": "w/side", "name": "carol"})
                assert "carol" in invited["wavelet"]["members"]
                left = await call("wavelet_leave", {"wavelet": "side"})
                assert "alice" not in left["wavelet"]["members"] and not left["wavelet"]["member"]
                ping = await call("wavelet_ping", {})
                assert ping["reachable"] is True and ping["participant"] == "alice"
                assert ping["session_id"] == "sess-sdk-1"
                assert ping["delivery"]["state"] == "running"

                with pytest.raises(MCPError) as err:
                    await s.call_tool("no_such_tool", {})
                assert err.value.error.code == -32602

                bad = (await s.call_tool("wavelet_post", {"wavelet": "main"})).model_dump(by_alias=True)
                assert bad["isError"] is True and "text" in bad["content"][0]["text"]

    anyio.run(scenario)
    # the channel never pushed alice's own blips back to her
    assert not [p for p in seen if p.meta.get("author") == "alice"]


# ---------------------------------------------------------------- delivery semantics


def test_delivered_to_others_never_to_the_author(world: World) -> None:
    alice, bob, carol = (world.channel(p) for p in PEOPLE)
    posted = alice.call("wavelet_post", {"wavelet": "main", "text": "alice speaks"})
    blip_id = posted["structuredContent"]["blip"]["id"]
    for other in (bob, carol):
        note = wait_text(other, "alice speaks")
        assert note["meta"] == {
            "wavelet": "w/main",
            "wavelet_id": world.main,
            "blip_id": blip_id,
            "author": "alice",
            "kind": "message",
        }
    # a later blip from someone else reaches alice: everything before it has been decided
    world.post("after alice", who="carol")
    wait_text(alice, "after alice")
    assert "alice speaks" not in texts(alice)
    assert texts(bob).count("alice speaks") == 1


def test_private_wavelets_never_reach_non_members(world: World) -> None:
    alice, bob, carol = (world.channel(p) for p in PEOPLE)
    forked = alice.call(
        "wavelet_fork", {"wavelet": "main", "name": "secret", "with": ["bob"], "private": True}
    )
    assert forked["structuredContent"]["wavelet"]["private"] is True
    alice.call("wavelet_post", {"wavelet": "secret", "text": "psst bob"})
    note = wait_text(bob, "psst bob")
    assert note["meta"]["wavelet"] == "w/secret"
    # carol: nothing from the private wavelet, not even its provenance; a later public blip proves she is live
    world.post("public sentinel", who="alice")
    wait_text(carol, "public sentinel")
    assert all(n["meta"].get("wavelet") != "w/secret" for n in carol.channel_notes())
    assert not [n for n in carol.channel_notes() if "secret" in n["content"]]
    # and her tools cannot see it either
    err = carol.call("wavelet_read", {"wavelet": "secret"})
    assert err["isError"] is True and "wavelet_list" in err["content"][0]["text"]


def test_cap_one_notice_then_silence_until_the_operator_posts(world: World) -> None:
    alice = world.channel("alice", "--cap", "3")
    # delivering; the wave's creation blip waits to ride with the first blip that wakes (its first push)
    retry_until(lambda: world.lock_held("alice"), what="alice's channel delivering")
    for i in range(6):
        world.post(f"flood {i}")
    notice = alice.wait_notes(
        lambda notes: next((n for n in notes if n["meta"]["kind"] == "cap"), None), what="the cap notice"
    )
    assert notice["meta"]["author"] == "fleet" and notice["meta"]["wavelet"] == "w/main"
    assert "wavelet_read" in notice["content"]
    world.post("flood 6")
    world.op.post(world.main, "operator: carry on")  # resets the cap and is delivered
    wait_text(alice, "operator: carry on")
    world.post("after reset")
    wait_text(alice, "after reset")
    kinds = [(n["meta"]["kind"], n["content"]) for n in alice.channel_notes()]
    # 3 deliveries (system + flood 0, 1), one notice in place of flood 2, silence for 3..6
    assert [c for k, c in kinds if k == "message"] == [
        "flood 0",
        "flood 1",
        "operator: carry on",
        "after reset",
    ]
    assert [k for k, _ in kinds].count("cap") == 1


def test_restart_resumes_with_no_replay_and_no_gap(world: World) -> None:
    bob = world.channel("bob")
    world.post("before restart", who="alice")
    wait_text(bob, "before restart")
    assert bob.close() == 0
    missed = [world.post(f"while away {i}", who="alice") for i in range(3)]
    again = world.channel("bob")
    wait_text(again, "while away 2")
    world.post("after restart", who="carol")
    wait_text(again, "after restart")
    notes = again.channel_notes()
    assert [n["content"] for n in notes] == ["while away 0", "while away 1", "while away 2", "after restart"]
    assert [n["meta"]["blip_id"] for n in notes[:3]] == missed


def test_a_save_in_flight_when_the_channel_stops_is_on_disk_before_it_exits(world: World) -> None:
    # The saving thread took the state, the input ended before it wrote it: the channel must not
    # exit (killing that thread) before the save lands, or its restart replays what was delivered.
    bob = world.channel("bob", env=env_with(FLEET_FAULT_SAVE_LAG="1.0"))
    world.post("before restart", who="alice")
    wait_text(bob, "before restart")
    assert bob.close() == 0
    world.post("while away", who="alice")
    again = world.channel("bob")
    wait_text(again, "while away")
    assert [n["content"] for n in again.channel_notes()] == ["while away"]


def test_leave_stops_delivery(world: World) -> None:
    alice = world.channel("alice")
    world.op.fork(world.main, "other", with_=["alice", "bob"])
    world.post("in main before leaving")
    wait_text(alice, "in main before leaving")
    left = alice.call("wavelet_leave", {"wavelet": "main"})
    assert left["structuredContent"]["wavelet"]["member"] is False
    world.post("in main after leaving")
    world.post("sentinel in other", wavelet=world.op.resolve("w/other").id)
    wait_text(alice, "sentinel in other")
    assert "in main after leaving" not in texts(alice)


def test_a_fork_by_one_channel_delivers_to_its_other_members(world: World) -> None:
    alice, bob = world.channel("alice"), world.channel("bob")
    alice.call("wavelet_fork", {"wavelet": "main", "name": "pair", "with": ["bob"]})
    alice.call("wavelet_post", {"wavelet": "w/pair", "text": "just us two"})
    note = wait_text(bob, "just us two", timeout=10)
    assert note["meta"]["wavelet"] == "w/pair"
    # the fork's own provenance reached bob from inside the new wavelet too
    assert any(
        n["meta"]["wavelet"] == "w/pair" and n["meta"]["kind"] == "system" for n in bob.channel_notes()
    )
    bob.call("wavelet_post", {"wavelet": "pair", "text": "reply in pair"})
    wait_text(alice, "reply in pair")


def test_invite_starts_delivery_without_restart(world: World) -> None:
    world.op.invite(world.main, "dave")
    dave = world.channel("dave")
    world.op.fork(world.main, "later", with_=["alice"])
    alice = world.channel("alice")
    alice.call("wavelet_invite", {"wavelet": "later", "name": "dave"})
    alice.call("wavelet_post", {"wavelet": "later", "text": "welcome dave"})
    assert wait_text(dave, "welcome dave")["meta"]["wavelet"] == "w/later"


# ---------------------------------------------------------------- identity and presence


def test_session_id_and_host_are_recorded_with_presence(world: World) -> None:
    world.channel("alice", env=env_with(CLAUDE_CODE_SESSION_ID="0193-sess-alice"))

    def row() -> Any:
        rows = [r for r in world.op.presence(WAVE) if r.participant == "alice"]
        return rows and rows[0].session_id == "0193-sess-alice" and rows[0]

    found = retry_until(row, what="alice's presence with her session id")
    assert found.state == "live" and found.host
    assert found.agent is not None and found.agent.kind == "unknown" and "not Claude Code" in found.agent.why


def test_the_reported_state_follows_the_sessions_transcript_and_hooks(world: World, tmp_path: Path) -> None:
    """The channel folds its session's transcript (and the state hook's file) and reports each
    change at once: a delivery is not "working", a turn is; its end is idle within a second; an API
    error ends it failed; a permission prompt's Notification is "waiting for permission" with the
    running tool; an unreadable transcript is unknown, never idle."""
    sid = str(uuid.uuid4())
    transcript = tmp_path / "home" / ".claude" / "projects" / "-x" / f"{sid}.jsonl"
    transcript.parent.mkdir(parents=True)
    env = env_with(CLAUDE_CODE_SESSION_ID=sid, HOME=str(tmp_path / "home"))
    alice = world.channel("alice", "--receipts", "transcript", env=env)

    def agent() -> AgentState:
        got = next(r.agent for r in world.op.presence(WAVE) if r.participant == "alice")
        assert got is not None
        return got

    def reached(kind: str, what: str) -> AgentState:
        got = retry_until(lambda: (a := agent()).kind == kind and a, what=what)
        assert isinstance(got, AgentState)
        return got

    def write(*lines: dict[str, Any]) -> None:
        with transcript.open("a") as f:
            f.writelines(json.dumps(x) + "\n" for x in lines)

    retry_until(lambda: agent().kind == "idle", what="idle at its prompt: handshaken, no transcript yet")
    world.post("work for alice")
    wait_text(alice, "work for alice")
    assert agent().kind == "idle", "a delivery says nothing of what the session does"
    block = '<channel source="fleet" blip_id="b-1">hi</channel>'
    blip = {"type": "user", "origin": {"kind": "channel"}, "timestamp": "2026-12-03T10:00:00Z",
            "message": {"role": "user", "content": block}}  # fmt: skip
    tool = {"type": "assistant", "message": {"content": [{"type": "tool_use", "id": "t1", "name": "Bash",
                                                          "input": {"command": "ls -la /tmp"}}]}}  # fmt: skip
    write(blip, tool)
    got = reached("turning", "turning")
    assert got.woken_by == ["b-1"] and got.tool == "Bash"
    hooks = hook_file(world.paths.channels, sid)
    retry_until(hooks.exists, what="the hook file made by the channel")
    assert stat.S_IMODE(hooks.stat().st_mode) == 0o600
    with hooks.open("a") as f:
        event = {"hook_event_name": "Notification", "notification_type": "permission_prompt",
                 "message": "Claude needs your permission", "session_id": sid}  # fmt: skip
        f.write(json.dumps(event) + "\n")
    got = reached("permission", "waiting for permission")
    assert (got.tool, got.input) == ("Bash", "ls -la /tmp")
    result = {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t1"}]}}
    write(result)
    retry_until(lambda: agent().kind == "turning", what="the tool ran: turning again")
    t0 = time.monotonic()
    write({"type": "system", "subtype": "turn_duration", "timestamp": "2026-12-03T10:00:05Z"})
    retry_until(lambda: agent().kind == "idle", what="idle")
    assert time.monotonic() - t0 < 1.5, "a turn's end reaches the daemon within about a second"
    error = {"type": "assistant", "isApiErrorMessage": True,
             "message": {"content": [{"type": "text", "text": "API Error: 500 overloaded"}]}}  # fmt: skip
    write(blip, error)
    got = reached("failed", "failed")
    assert got.error == "API Error: 500 overloaded"


def test_an_unreadable_transcript_is_unknown_never_idle(world: World, tmp_path: Path) -> None:
    sid = str(uuid.uuid4())
    where = tmp_path / "home" / ".claude" / "projects" / "-x" / f"{sid}.jsonl"
    where.mkdir(parents=True)  # (a directory: unreadable as a file even to root)
    env = env_with(CLAUDE_CODE_SESSION_ID=sid, HOME=str(tmp_path / "home"))
    world.channel("alice", "--receipts", "transcript", env=env)

    def agent() -> AgentState | None:
        return next(
            (r.agent for r in world.op.presence(WAVE) if r.participant == "alice" and r.state == "live"), None
        )

    got = retry_until(lambda: (a := agent()) is not None and a.kind != "starting" and a, what="a state")
    assert (
        isinstance(got, AgentState)
        and got.kind == "unknown"
        and got.why.startswith("no transcript access: cannot read")
    ), got


def test_exit_reports_gone(world: World) -> None:
    alice = world.channel("alice")

    def state() -> str:
        return next(r.state for r in world.op.presence(WAVE) if r.participant == "alice")

    retry_until(lambda: state() != "gone", what="alice present")
    assert alice.close() == 0
    assert state() == "gone"


def test_the_token_never_appears_on_the_command_line(world: World) -> None:
    alice = world.channel("alice")
    token = world.token_file("alice").read_text().strip()
    cmdline = Path(f"/proc/{alice.proc.pid}/cmdline").read_bytes().decode()
    assert token not in cmdline and str(world.token_file("alice")) in cmdline


# ---------------------------------------------------------------- bad input and bad days


def test_tool_errors_are_actionable(world: World) -> None:
    alice = world.channel("alice")

    def error_text(tool: str, args: dict[str, Any]) -> str:
        res = alice.call(tool, args)
        assert res["isError"] is True, res
        assert "structuredContent" not in res
        return str(res["content"][0]["text"])

    assert "wavelet_list" in error_text("wavelet_post", {"wavelet": "nowhere", "text": "x"})
    assert "invalid arguments" in error_text("wavelet_post", {"wavelet": "main", "text": ""})
    assert "invalid arguments" in error_text("wavelet_read", {"wavelet": "main", "limit": "lots"})
    assert "invalid arguments" in error_text("wavelet_fork", {"wavelet": "main", "name": "x", "with": "bob"})
    big = "x" * (300 * 1024)
    assert "Split" in error_text("wavelet_post", {"wavelet": "main", "text": big})
    assert "not available" in error_text("wavelet_fork", {"wavelet": "main", "name": "main"})


def test_revoked_token_is_reported_and_a_new_token_file_is_picked_up(world: World) -> None:
    alice = world.channel("alice")
    alice.call("wavelet_ping")
    world.op.revoke_token(wave=WAVE, participant="alice")
    res = alice.call("wavelet_post", {"wavelet": "main", "text": "am I still in?"})
    assert res["isError"] is True
    assert "token" in res["content"][0]["text"] and "fleet" in res["content"][0]["text"]
    # the operator mints a new token into the same file: the next call works, delivery resumes
    world.token_file("alice").write_text(world.op.mint_token(WAVE, "alice").token)
    ok = alice.call("wavelet_post", {"wavelet": "main", "text": "back in"})
    assert ok["isError"] is False
    world.post("delivery works again")
    wait_text(alice, "delivery works again", timeout=45)


def test_daemon_outage_keeps_answering_and_resumes_without_loss(world: World, fleet_env: Paths) -> None:
    alice = world.channel("alice")
    world.post("before the outage")
    wait_text(alice, "before the outage")
    port = world.daemon.url.rsplit(":", 1)[1]
    world.daemon.stop()

    alice.request("ping")
    ping = alice.call("wavelet_ping")["structuredContent"]
    assert ping["reachable"] is False  # a probe answers at once
    retry_until(
        lambda: alice.call("wavelet_ping")["structuredContent"]["delivery"]["state"] == "reconnecting",
        what="delivery to notice the outage",
    )
    # A post during the outage waits (TOOL_PATIENCE) for the daemon to come back, then lands once:
    # the agent never sees the outage.
    post = {"name": "wavelet_post", "arguments": {"wavelet": "main", "text": "anyone?"}}
    alice.send({"jsonrpc": "2.0", "id": 900, "method": "tools/call", "params": post})
    assert alice.call("wavelet_ping")["structuredContent"]["reachable"] is False  # tools answer meanwhile
    assert not [m for m in alice.messages if m.get("id") == 900]  # the post waits

    revived = Daemon(fleet_env, listen=f"127.0.0.1:{port}")
    revived.start()
    try:
        res = alice.response(900, timeout=30)["result"]
        assert res["isError"] is False, res
        op = Client(revived.url, revived.operator_token)
        assert [b.text for b in op.read(world.main).blips].count("anyone?") == 1
        op.post(world.main, "after the outage", as_="bob")
        wait_text(alice, "after the outage", timeout=20)
        assert texts(alice).count("before the outage") == 1
        assert alice.call("wavelet_post", {"wavelet": "main", "text": "I am back"})["isError"] is False
    finally:
        revived.stop()
        world.daemon = revived  # the fixture's stop() of the old one is then a no-op


def test_corrupt_state_file_stops_delivery_clearly_and_skips_nothing(world: World) -> None:
    sf = world.state_file("alice")
    sf.path.parent.mkdir(parents=True, exist_ok=True)
    sf.path.write_text('{"version": 1, "cursors": "garbled"')
    alice = world.channel("alice")
    note = alice.wait_notes(lambda n: n and n[0], what="the stopped-delivery notice")
    assert note["meta"]["kind"] == "error" and str(sf.path) in note["content"]
    ping = alice.call("wavelet_ping")["structuredContent"]
    assert ping["delivery"]["state"] == "stopped" and "mv " in ping["delivery"]["detail"]
    assert alice.call("wavelet_post", {"wavelet": "main", "text": "tools still work"})["isError"] is False
    assert sf.path.read_text() == '{"version": 1, "cursors": "garbled"'
    assert alice.close() == 0
    # moved aside as the message says: the restarted channel replays from the join, nothing skipped
    sf.path.rename(sf.path.with_name(sf.path.name + ".bad"))
    world.post("posted while delivery was stopped")
    again = world.channel("alice")
    wait_text(again, "posted while delivery was stopped")
    assert texts(again, kind="system")[0].startswith("operator created wave w")


def test_a_second_channel_of_the_same_participant_stands_by_then_takes_over(world: World) -> None:
    first = world.channel("alice")
    world.post("one")
    wait_text(first, "one")
    second = world.channel("alice")
    retry_until(
        lambda: second.call("wavelet_ping")["structuredContent"]["delivery"]["state"] == "standby",
        what="the second channel to stand by",
    )
    world.post("two")
    wait_text(first, "two")
    assert first.close() == 0
    world.post("three")
    wait_text(second, "three")
    assert texts(second) == ["three"]  # no replay of what the first one delivered


def test_nothing_is_pushed_before_initialized(world: World) -> None:
    world.post("waiting for alice")
    alice = world.channel("alice", init=False)
    alice.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}}, id=0)
    # the blip exists and the delivery loop would have it by now; three round trips prove silence
    for _ in range(3):
        alice.request("ping")
    assert alice.channel_notes() == []
    assert alice.call("wavelet_ping")["structuredContent"]["delivery"]["state"] == "starting"
    alice.notify("notifications/initialized")
    wait_text(alice, "waiting for alice")


def test_a_hangup_shuts_the_channel_down_cleanly(world: World) -> None:
    """A pane that dies sends SIGHUP: the channel saves its cursor and reports gone, like SIGTERM."""
    import signal

    alice = world.channel("alice")

    def state() -> str:
        return next(r.state for r in world.op.presence(WAVE) if r.participant == "alice")

    retry_until(lambda: world.lock_held("alice"), what="alice delivering")
    alice.proc.send_signal(signal.SIGHUP)
    assert alice.proc.wait(10) == 0
    retry_until(lambda: state() == "gone", what="gone after the hangup")
