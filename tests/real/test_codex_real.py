"""The real Codex CLI as a fleet agent, over the scripted model's Responses dialect (docs/agents.md).

Each test runs the pinned ``codex`` (0.169.0) in a real tmux pane with the real channel injected
inline (``-c mcp_servers.fleet.…``), the real daemon, and — in the mixed wave — the pinned Claude
Code beside it against the same scripted model. Never skipped: a missing Codex fails, naming the
install.
"""

from __future__ import annotations

import json
import os
import signal
import time
from functools import partial
from pathlib import Path
from typing import Any

import libtmux
from conftest import retry_until
from realcodex import mixed_layout, rollout_lines, user_texts
from scripted_model import Call, Script, ToolCall, Usage, on_message, post, reply, rule, say

from fleet.client import Client, read_endpoint
from fleet.delivery.state import DeliveryState
from fleet.paths import Paths
from fleet.procs import pid_alive
from fleet.wire import loads


def _state(world: Any, participant: str) -> DeliveryState | None:
    from fleet.delivery.state import StateFile

    sf = StateFile(world.paths.channels, world.op.base_url, "w", participant)
    try:
        return loads(DeliveryState, sf.path.read_bytes())
    except (OSError, ValueError):
        return None


def _idle(world: Any, who: str) -> bool:
    rows = {p.participant: p for p in world.op.presence("w")}
    row = rows.get(who)
    return row is not None and row.agent is not None and row.agent.kind == "idle"


def test_a_codex_agent_woken_while_idle_takes_the_blip_and_answers(real_fleet: Any, codex: str) -> None:
    script = Script({"bob": [rule(on_message(author="operator"), reply("operator: bob here, 8086"))]})
    world = real_fleet(script=script)
    world.op.create_wave("w", ["bob"])
    report = world.spawn("w/main", mixed_layout(world, codex, {"bob": "codex"}))
    (pane,) = report["panes"]
    assert pane["kind"] == "codex" and pane["limits"] and "codex queue" in pane["route"]
    world.wait(lambda: _idle(world, "bob"), "bob idle after its first turn", timeout=90)
    posted = time.monotonic()
    blip = world.op.post(world.op.resolve("w/main").id, "bob: which port?")
    got = world.wait(
        lambda: [b for b in world.blips("w/main") if b.author == "bob"], "bob's answer", timeout=90
    )
    assert got[0].text == "operator: bob here, 8086"
    woke = next(r for r in world.requests("bob") if any(e.blip_id == blip.id for e in r.channel_events()))
    assert "You are bob" in json.dumps((woke.body or {}).get("input"))  # identity in the wake's request
    print(f"idle wake: post -> in the model's context {woke.at - posted:.2f}s")
    # the rollout shows it entered, verbatim, once; the ledger confirmed it
    entered = [t for t in user_texts(rollout_lines(world, "bob")) if blip.id in t]
    assert len(entered) == 1 and "bob: which port?" in entered[0]
    state = world.wait(lambda: (s := _state(world, "bob")) and not s.pending and s, "bob's wake confirmed")
    assert state.route == "channel" and state.confirmed[blip.wavelet_id] == blip.id
    status = world.fleet("status", "w", "--json")
    (row,) = json.loads(status.stdout)["rows"]
    assert row["agent"] == "codex" and row["limits"], status.stdout


def test_a_mixed_wave_a_claude_code_and_a_codex_agent_converse_to_done(real_fleet: Any, codex: str) -> None:
    script = Script(
        {
            "alice": [
                rule(
                    on_message(author="operator"), post("{wavelet}", "bob: which port does the service use?")
                ),
                rule(on_message(author="bob"), reply("DONE: the service uses port 8086 (from bob)")),
            ],
            "bob": [rule(on_message(author="alice"), reply("alice: port 8086"))],
        }
    )
    world = real_fleet(script=script)
    world.op.create_wave("w", ["alice", "bob"])
    report = world.spawn("w/main", mixed_layout(world, codex, {"alice": "claude", "bob": "codex"}))
    assert {p["participant"]: p["kind"] for p in report["panes"]} == {"alice": "claude", "bob": "codex"}
    world.wait(lambda: _idle(world, "bob"), "bob idle after its first turn", timeout=90)
    world.op.post(world.op.resolve("w/main").id, "alice: find out the service's port from bob")
    done = world.wait(
        lambda: [b for b in world.blips("w/main") if b.text.startswith("DONE:")], "alice's DONE", timeout=120
    )
    assert done[0].author == "alice"
    texts = [(b.author, b.text) for b in world.blips("w/main") if b.kind == "message"]
    assert ("bob", "alice: port 8086") in texts and texts.count(("bob", "alice: port 8086")) == 1
    assert {r.dialect for r in world.requests("alice")} == {"messages"}
    assert {r.dialect for r in world.requests("bob")} == {"responses"}


def test_a_dropped_codex_wake_is_queued_again_and_enters_once(real_fleet: Any, codex: str) -> None:
    """Every first wake is swallowed (``FLEET_FAULT_DROP_PUSH=1``): codex queue never ran, so no
    queued receipt within the bound — the channel queues it again, and it enters exactly once."""
    script = Script({"bob": [rule(on_message(author="operator"), reply("operator: got it"))]})
    world = real_fleet(script=script)
    world.op.create_wave("w", ["bob"])
    drop = {"env": {"FLEET_FAULT_DROP_PUSH": "1"}}
    layout = mixed_layout(world, codex, {"bob": "codex"}, participants={"bob": drop})
    world.spawn("w/main", layout)
    world.wait(lambda: _idle(world, "bob"), "bob idle after its first turn", timeout=90)
    blip = world.op.post(world.op.resolve("w/main").id, "bob: are you there?")
    world.wait(lambda: [b for b in world.blips("w/main") if b.author == "bob"], "bob's answer", timeout=90)
    state = world.wait(lambda: (s := _state(world, "bob")) and not s.pending and s, "bob's wake confirmed")
    entered = [t for t in user_texts(rollout_lines(world, "bob")) if blip.id in t]
    assert len(entered) == 1, entered
    assert state.confirmed[blip.wavelet_id] == blip.id and state.route == "channel"


def test_codex_usage_is_the_scripted_figures(real_fleet: Any, codex: str) -> None:
    figures = Usage(input_tokens=1234, output_tokens=56, cache_read_input_tokens=100)
    script = Script({"bob": [rule(on_message(author="operator"), say("noted", figures))]})
    world = real_fleet(script=script)
    world.op.create_wave("w", ["bob"])
    world.spawn("w/main", mixed_layout(world, codex, {"bob": "codex"}))
    world.wait(lambda: _idle(world, "bob"), "bob idle after its first turn", timeout=90)
    world.op.post(world.op.resolve("w/main").id, "bob: note this")
    world.wait(lambda: (s := _state(world, "bob")) is not None and s.confirmed_count >= 1, "the wake entered")
    world.wait(lambda: _idle(world, "bob"), "bob idle after the woken turn")

    def counted() -> dict[str, Any] | None:
        done = world.fleet("usage", "w", "--json")
        (bob,) = json.loads(done.stdout)["participants"]
        got = bob["wavelets"].get("w/main")
        return got if got and got["requests"] == 1 else None

    got = world.wait(counted, "bob's usage in w/main")
    assert (got["input_tokens"], got["output_tokens"], got["cache_read_tokens"]) == (1234, 56, 100)
    assert (got["turns"], got["requests"], got["cache_creation_tokens"]) == (1, 1, 0)
    state = _state(world, "bob")
    assert state is not None and not state.pending, state


def test_a_wake_queued_when_the_pane_is_killed_enters_once_after_respawn(real_fleet: Any, codex: str) -> None:
    """Codex's queue outlives its process: a wake queued (codex queue said so) before the pane was
    killed enters when ``fleet respawn`` resumes the thread — and the new run does not queue it again."""
    script = Script({"bob": [rule(on_message(author="operator"), reply("operator: back"))]})
    world = real_fleet(script=script)
    world.op.create_wave("w", ["bob"])
    world.spawn("w/main", mixed_layout(world, codex, {"bob": "codex"}))
    world.wait(lambda: _idle(world, "bob"), "bob idle after its first turn", timeout=90)
    blip = world.op.post(world.op.resolve("w/main").id, "bob: still there?")

    def queued_not_entered() -> bool:
        s = _state(world, "bob")
        return bool(s and s.pending and s.pending[0].queued_at is not None)

    world.wait(queued_not_entered, "the wake queued", timeout=30)
    if any(blip.id in t for t in user_texts(rollout_lines(world, "bob"))):
        raise AssertionError("the wake entered before the pane could be killed (Codex polled at once)")
    world.srv.cmd("kill-pane", "-t", world.pane("bob"))
    done = world.fleet("respawn", "w/main", "bob", "--wait", "90", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resume" in json.loads(done.stdout)["argv"]
    world.wait(lambda: [b for b in world.blips("w/main") if b.author == "bob"], "bob's answer", timeout=90)
    entered = [t for t in user_texts(rollout_lines(world, "bob")) if blip.id in t]
    assert len(entered) == 1, entered
    state = world.wait(lambda: (s := _state(world, "bob")) and not s.pending and s, "the wake confirmed")
    assert state.confirmed[blip.wavelet_id] == blip.id


def test_a_codex_session_carries_on_across_a_sigkill_of_the_daemon_with_nothing_replayed(
    tmp_path: Path, fleet_env: Paths, tmux_server: libtmux.Server, codex: str
) -> None:
    """The local daemon is killed with SIGKILL between two wakes and started again by the next
    command: the Codex session's own rollout shows each blip for it entering once, none twice."""
    from realclaude import RealFleet
    from test_daemon_restart import fleet

    env = dict(os.environ)
    assert fleet(env, "daemon", "start").returncode == 0
    first = read_endpoint(fleet_env)
    assert first is not None
    op = Client(first.url, fleet_env.operator_token.read_text().strip())
    script = Script({"bob": [rule(on_message(author="operator"), reply("operator: noted"))]})
    world = RealFleet(tmp_path, fleet_env, op, tmux_server, channels=True, script=script)
    try:
        op.create_wave("w", ["bob"])
        world.spawn("w/main", mixed_layout(world, codex, {"bob": "codex"}))
        world.wait(lambda: _idle(world, "bob"), "bob idle after its first turn", timeout=90)
        main = op.resolve("w/main").id

        def round_trip(n: int) -> None:
            world.op.post(main, f"bob: step {n}")
            answered = partial(lambda n: sum(b.author == "bob" for b in world.blips("w/main")) >= n, n)
            world.wait(answered, f"bob's answer {n}", timeout=90)

        round_trip(1)
        os.kill(first.pid, signal.SIGKILL)
        retry_until(lambda: not pid_alive(first.pid), 10, 0.02, "the daemon to die")
        again = fleet({k: v for k, v in env.items() if k != "FLEET_DAEMON"}, "whoami")  # auto-starts it
        assert again.returncode == 0, again.stderr
        second = read_endpoint(fleet_env)
        assert second is not None and second.url == first.url and second.pid != first.pid
        round_trip(2)
        for blip in [b for b in world.blips("w/main") if b.author == "operator"]:
            entered = [t for t in user_texts(rollout_lines(world, "bob")) if blip.id in t]
            assert len(entered) == 1, (blip.text, entered)
    finally:
        world.close()
        fleet(env, "daemon", "stop")


def _escalated(marker: Path) -> Call:
    return Call((ToolCall("exec_command", {
        "cmd": f"touch {marker}", "sandbox_permissions": "require_escalated", "justification": "fleet test",
    }),))  # fmt: skip


def test_codexs_approval_prompts_are_relayed_to_fleet_permission_and_answered_from_there(
    real_fleet: Any, codex: str
) -> None:
    """The model asks to run a command outside Codex's sandbox: Codex runs fleet's PermissionRequest
    hook (given inline, trusted by its hash: no "Hooks need review", no bypass), so ``fleet status``
    says what bob waits to run and ``fleet approve`` runs it; ``fleet deny -m`` refuses the next,
    and the model is told why (the rollout's tool output)."""
    first, second = "escalated-one", "escalated-two"
    script = Script({"bob": [rule(on_message(author="operator"), _escalated(Path("{text}")))]})
    world = real_fleet(script=script)
    one, two = world.tmp / first, world.tmp / second
    assert one.parent != world.project  # outside the workspace: the sandbox would not let it write
    world.op.create_wave("w", ["bob"])
    # trusted (--trust: the folder marked trusted inline): Codex's approval policy is then on-request;
    # in a folder it does not trust it refuses an escalation without asking (verified)
    world.spawn("w/main", mixed_layout(world, codex, {"bob": "codex"}), "--trust")
    world.wait(lambda: _idle(world, "bob"), "bob idle after its first turn", timeout=90)
    main = world.op.resolve("w/main").id

    def note() -> str:
        (row,) = json.loads(world.fleet("status", "w", "--json").stdout)["rows"]
        return str(row["note"] or row["state_text"])

    world.op.post(main, str(one))
    world.wait(lambda: "waiting for permission" in note(), "status: bob waits for permission", timeout=90)
    assert note().startswith(f"waiting for permission: Bash (touch {one})"), note()
    assert "Running hook" in world.screen("bob") and "Would you like to run" not in world.screen("bob")
    (asked,) = world.op.permissions("w")
    assert (asked.participant, asked.tool, asked.state) == ("bob", "Bash", "pending")
    approved = world.fleet("approve", "w/main", "bob")
    assert approved.returncode == 0, approved.stderr
    world.wait(one.exists, "the approved command ran")
    assert world.op.permissions("w")[0].state == "allowed"
    world.wait(lambda: "waiting for permission" not in note(), "status: no longer waiting")

    world.op.post(main, str(two))
    world.wait(lambda: str(two) in note(), "status: bob waits again", timeout=90)
    denied = world.fleet("deny", "w", "bob", "--message", "not there")
    assert denied.returncode == 0, denied.stderr

    def told() -> list[str]:
        return [str(ln["payload"].get("output")) for ln in rollout_lines(world, "bob")
                if ln.get("type") == "response_item" and ln["payload"].get("type") == "function_call_output"
                and "not there" in str(ln["payload"].get("output"))]  # fmt: skip

    (output,) = world.wait(told, "the model told of the denial")
    assert "Denied by operator via fleet (cli): not there" in output, output
    assert not two.exists()
    assert [r.state for r in world.op.permissions("w")] == ["denied", "allowed"]


def test_a_codex_approval_fleet_does_not_answer_in_time_is_left_to_codexs_own_dialog(
    real_fleet: Any, codex: str
) -> None:
    """The hook's wait is cut to 3 s (``FLEET_PERMISSION_WAIT`` in the layout's env): unanswered, the
    request expires and Codex shows its own dialog, which ``fleet status`` reports from the pane (the
    rollout says nothing of the wait); ``y`` there runs the command."""
    script = Script({"bob": [rule(on_message(author="operator"), _escalated(Path("{text}")))]})
    world = real_fleet(script=script)
    marker = world.tmp / "escalated-ran"
    world.op.create_wave("w", ["bob"])
    short = {"bob": {"env": {"FLEET_PERMISSION_WAIT": "3"}}}
    world.spawn("w/main", mixed_layout(world, codex, {"bob": "codex"}, participants=short), "--trust")
    world.wait(lambda: _idle(world, "bob"), "bob idle after its first turn", timeout=90)
    world.op.post(world.op.resolve("w/main").id, str(marker))

    def waiting() -> str | None:
        (row,) = json.loads(world.fleet("status", "w", "--json").stdout)["rows"]
        return row["note"] if "Codex asks" in row["note"] else None

    note = world.wait(waiting, "status: bob waits at Codex's own dialog", timeout=90)
    assert note.startswith("waiting at a dialog: Codex asks: Would you like to run the following command?")
    (asked,) = world.op.permissions("w")
    assert (asked.state, asked.via) == ("expired", "hook"), asked
    assert not marker.exists()
    world.srv.cmd("send-keys", "-t", world.pane("bob"), "y")
    world.wait(marker.exists, "the command approved in the pane ran")
    world.wait(lambda: waiting() is None, "status: no dialog once answered")
