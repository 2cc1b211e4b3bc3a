"""Confirmed delivery with real Claude Code: a blip counts as delivered when it is in the model's context.

Real sessions over the scripted model (tests/realclaude.py), spawned with the default transport
(``auto``: the channel pushes, an ``asyncRewake`` hook takes what Claude Code did not). What is
asserted comes from the sessions' own transcripts, the scripted model's request log, and the store.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from datetime import datetime
from functools import partial
from pathlib import Path

from realclaude import TURN, RealFleet
from scripted_model import Script, Slow, Transcript, on_message, post, rule, say
from test_delivery_real import (
    ALICE_DONE,
    KICKOFF,
    assert_each_context_got_the_others_blips_once_in_order,
    conversation,
    converse,
)

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.delivery.ledger import PATIENCE
from fleet.delivery.state import DeliveryState, StateFile

RealFleetFactory = Callable[..., RealFleet]


def state(real: RealFleet, who: str) -> DeliveryState:
    return StateFile(real.paths.channels, real.op.base_url, "w", who).load()


def reached(t: Transcript) -> list[str]:
    """Every blip id that entered the context, by the channel or in hook feedback, in the order
    they entered."""
    return [i for c in t.entered() for i in c.blip_ids]


def each_once(t: Transcript, others: list[str]) -> bool:
    """Every blip of ``others`` entered ``t``'s context exactly once, and those the channel pushed
    in the order they were posted. A push lost with a killed session comes later by the hook (the
    new process's pushes may enter first): the guarantee is once, not in order across the paths."""
    got = reached(t)
    pushed = [i for c in t.delivered() for i in c.blip_ids]
    return sorted(got) == sorted(others) and pushed == sorted(pushed)


def wait_each_once(real: RealFleet, who: str, others: list[str], timeout: float | None = None) -> None:
    """Wait for :func:`each_once`; on time-out, say what entered, what is missing and what twice."""
    t = real.transcript(who)
    try:
        real.wait(partial(each_once, t, others), f"{who}: every blip once", timeout=timeout or TURN)
    except AssertionError as exc:
        got = reached(t)
        missing = [i for i in others if i not in got]
        twice = sorted({i for i in got if got.count(i) > 1})
        raise AssertionError(
            f"{exc}\n{who}'s context got {got}\nposted {others}\nmissing {missing}, more than once {twice},"
            f" by the hook {[i for c in t.hook_blocks() for i in c.blip_ids]}\ntranscript {t.path}"
        ) from None


def confirmed_on_the_channel(real: RealFleet, who: str) -> DeliveryState | None:
    s = state(real, who)
    return s if s.route == "channel" and not s.pending else None


def when(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_with_channels_every_blip_is_confirmed_through_the_channel_and_the_hook_delivers_nothing(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    real = real_fleet(channels=True, script=conversation())
    converse(real, operator)
    assert_each_context_got_the_others_blips_once_in_order(real, Transcript.delivered)
    assert real.spawned.count('"route": "channel registered"') == 3, real.spawned
    for who in ("alice", "bob", "carol"):
        assert not real.transcript(who).hook_feedback(), f"the hook woke {who}"
        st = real.wait(partial(confirmed_on_the_channel, real, who), f"{who}'s pushes all confirmed")
        assert st and st.confirmed_count == len([b for b in real.blips("w/main") if b.author != who])
    rows = json.loads(real.fleet("status", "w", "--json").stdout)["rows"]
    assert {r["route"] for r in rows} == {"channel"} and {r["unconfirmed"] for r in rows} == {0}


def test_a_dropped_push_reaches_the_model_by_the_hook_once(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """bob's channel swallows every second push (the test-only fault switch): those blips come by the
    hook exactly once — seconds later when a later push is taken or bob's session runs on, within the
    ledger's patience when it sits idle —; the others by the channel."""
    real = real_fleet(channels=True, script=conversation())
    operator.create_wave("w", ["alice", "bob", "carol"])
    layout = real.layout(
        ["alice", "bob", "carol"], participants={"bob": {"env": {"FLEET_FAULT_DROP_PUSH": "2"}}}
    )
    real.spawn("w/main", layout)
    operator.post(operator.resolve("w/main").id, KICKOFF)
    real.wait(lambda: sum(b.text.startswith("DONE:") for b in real.blips("w/main")) == 2, "both DONE blips")
    blips = {b.id: b for b in real.blips("w/main")}
    others = [i for i, b in blips.items() if b.author != "bob"]
    bob = real.transcript("bob")
    real.wait(lambda: sorted(reached(bob)) == sorted(others), "every blip of others in bob's context")
    got = reached(bob)
    assert len(got) == len(set(got)), f"a blip reached bob twice: {got}"
    by_hook = [c for c in bob.hook_blocks()]
    assert by_hook, "no push was swallowed (the fault switch is off?)"
    assert not {c.blip_id for c in by_hook} & {c.blip_id for c in bob.delivered()}
    for line in bob.lines():  # the hook's feedback entered within the patience and some slack
        if (line.get("origin") or {}).get("kind") == "task-notification":
            entered = when(line["timestamp"])
            for c in bob.hook_blocks():
                if c.blip_id in str(line):
                    assert entered - when(blips[c.blip_id].created_at) < PATIENCE + 4.0
    real.wait(lambda: not state(real, "bob").pending, "bob's frames all confirmed")
    assert state(real, "bob").route == "channel"  # it took pushes: the channel stays its route


def test_a_session_killed_between_push_and_receipt_gets_the_blip_again_once_after_respawn(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    script = Script({"alice": [rule(on_message(author="operator"), post("{wavelet}", ALICE_DONE))]})
    real = real_fleet(channels=True, script=script)
    operator.create_wave("w", ["alice"])
    layout = real.layout(["alice"], participants={"alice": {"env": {"FLEET_FAULT_DROP_PUSH": "1"}}})
    real.spawn("w/main", layout)
    main = operator.resolve("w/main").id
    before = state(real, "alice").cursors.get(main, "")
    kickoff = operator.post(main, "alice: one job for you.")
    real.wait(lambda: state(real, "alice").cursors.get(main, before) >= kickoff.id, "the kickoff pushed")
    os.kill(real.pane_pid("alice"), signal.SIGKILL)  # before any receipt: the push was swallowed
    real.wait(lambda: real.pane_dead("alice"), "alice's pane dead")
    pending = state(real, "alice").pending  # the kickoff, and the wave's creation that rode with it
    assert kickoff.id in [p.frame.id for p in pending] and all(p.queued_at is None for p in pending)
    assert kickoff.id not in reached(real.transcript("alice"))
    done = real.fleet("respawn", "w/main", "alice", "--json")
    assert done.returncode == 0, done.stderr
    real.wait(lambda: any(b.text == ALICE_DONE for b in real.blips("w/main")), "alice's DONE after respawn")
    alice = real.transcript("alice")
    real.wait(lambda: kickoff.id in reached(alice), "the kickoff in alice's context")
    assert reached(alice).count(kickoff.id) == 1, reached(alice)
    real.wait(lambda: not state(real, "alice").pending, "the kickoff confirmed")


def test_a_batch_reaches_the_model_in_one_turn_even_when_the_channel_stalls_between_its_pushes(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """The wave's creation (provenance: held until a blip that wakes) and the kickoff are one batch.
    The channel stalls a second after each push (fault injection: a channel descheduled under load).
    Claude Code still takes both into one turn, because a step's pushes go out in one write; pushed
    one by one, the session answered the provenance alone, then the kickoff in a second turn."""
    script = Script({"bob": [rule(on_message(author="operator"), say("on it"))]})
    real = real_fleet(channels=True, script=script)
    operator.create_wave("w", ["bob"])
    layout = real.layout(["bob"], participants={"bob": {"env": {"FLEET_FAULT_PUSH_GAP": "1"}}})
    real.spawn("w/main", layout)
    kickoff = operator.post(operator.resolve("w/main").id, "bob: one job for you.")
    bob = real.transcript("bob")
    real.wait(lambda: kickoff.id in reached(bob) and bob.settled(), "the kickoff's turn ended")
    turns = real.requests("bob")
    assert [[e.blip_kind for e in t.channel_events()] for t in turns] == [["system", "message"]]


def test_blips_posted_while_the_session_is_busy_are_all_confirmed_in_order(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    script = Script(
        {
            "alice": [
                rule(on_message(author="operator", contains="start"), Slow(4.0, say("Worked a while."))),
                rule(on_message(author="bob"), say("Noted.")),
            ]
        }
    )
    real = real_fleet(channels=True, script=script)
    operator.create_wave("w", ["alice", "bob"])
    real.spawn("w/main", real.layout(["alice"]))
    main = operator.resolve("w/main").id
    operator.post(main, "alice: start the long job")
    real.wait(lambda: len(real.requests("alice")) >= 1, "alice's long turn under way")
    during = [operator.post(main, f"bob's note {i}", as_="bob").id for i in range(4)]
    alice = real.transcript("alice")
    real.wait(lambda: all(i in reached(alice) for i in during), "the notes in alice's context")
    got = [i for i in reached(alice) if i in during]
    assert got == during, got
    real.wait(lambda: not state(real, "alice").pending, "every note confirmed")
    assert not alice.hook_feedback() and state(real, "alice").route == "channel"


def test_nothing_confirmed_is_replayed_across_a_daemon_restart_and_a_session_restart(
    real_fleet: RealFleetFactory, operator: Client, daemon: Daemon
) -> None:
    script = Script(
        {
            "alice": [rule(on_message(author="operator"), post("{wavelet}", "bob: noted {n}"))],
            "bob": [rule(on_message(author="alice"), say("ok"))],
        }
    )
    real = real_fleet(channels=True, script=script)
    operator.create_wave("w", ["alice", "bob"])
    real.spawn("w/main", real.layout(["alice", "bob"]))
    main = operator.resolve("w/main").id

    def round_trip(n: int) -> None:
        operator.post(main, f"alice: step {n}")
        real.wait(lambda: sum(b.author == "alice" for b in real.blips("w/main")) >= n, f"alice's answer {n}")

    round_trip(1)
    port = int(daemon.url.rsplit(":", 1)[1])
    daemon.stop()
    again = Daemon(daemon.paths, f"127.0.0.1:{port}")
    again.start()
    try:
        round_trip(2)
        respawned = real.fleet("respawn", "w/main", "bob", "--force")
        assert respawned.returncode == 0, respawned.stdout + respawned.stderr
        round_trip(3)
        for who in ("alice", "bob"):
            wait_each_once(real, who, [b.id for b in real.blips("w/main") if b.author != who])
    finally:
        again.stop()


def test_every_request_names_its_participant_and_carries_the_contract_even_after_a_resume(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    script = Script({"alice": [rule(on_message(author="operator"), say("Noted."))]})
    real = real_fleet(channels=True, script=script)
    operator.create_wave("w", ["alice"])
    real.spawn("w/main", real.layout(["alice"]))
    main = operator.resolve("w/main").id
    operator.post(main, "alice: first")
    alice = real.transcript("alice")
    real.wait(lambda: alice.delivered() and alice.settled(), "alice's first wake answered and recorded")
    os.kill(real.pane_pid("alice"), signal.SIGKILL)
    real.wait(lambda: real.pane_dead("alice"), "alice's pane dead")
    assert real.fleet("respawn", "w/main", "alice").returncode == 0
    resumed = time.monotonic()  # the model log's clock
    operator.post(main, "alice: second")
    real.wait(
        lambda: any(r.at > resumed for r in real.requests("alice") if r.kind == "turn"), "a wake after resume"
    )
    turns = [r for r in real.requests("alice") if r.kind == "turn"]
    for r in turns:
        system = json.dumps((r.body or {}).get("system"))
        assert "You are alice." in system, f"request {r.seq} has no identity in its system prompt"
        assert "DONE:" in system and "Never post merely to acknowledge" in system
    assert any(r.at > resumed for r in turns)


def _reader_of_channel(root: int) -> int:
    """The process under ``root`` (the pane's) whose child is the fleet channel: Claude Code's own
    process that holds the channel's pipes (the pane's process may be a launcher above it)."""
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(entry.name))
    todo = [root]
    while todo:
        pid = todo.pop()
        for kid in kids.get(pid, []):
            try:
                argv = Path(f"/proc/{kid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"channel" in argv and any(a.endswith(b"fleet") or a == b"fleet" for a in argv):
                return pid
            todo.append(kid)
    raise AssertionError(f"no fleet channel under pid {root}")


def test_a_session_frozen_across_its_first_push_takes_it_once(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """Claude Code is stopped (SIGSTOP: starved, as on a loaded machine) before its first push and
    held past the bound; its hook, a process of its own, stays armed. Counting the push lost on the
    clock handed it to the hook too, and the session took it twice when it ran again; now the
    channel waits for the session to answer its pings, and the push enters once, by the channel."""
    script = Script({"bob": [rule(on_message(author="operator"), say("on it"))]})
    real = real_fleet(channels=True, script=script)
    operator.create_wave("w", ["bob"])
    real.spawn("w/main", real.layout(["bob"]))
    main = operator.resolve("w/main").id
    assert state(real, "bob").route == "unknown"  # no push taken yet
    session = _reader_of_channel(real.pane_pid("bob"))  # the process that reads the channel's pipe
    # tmux continues a pane's process that stops (SIGCHLD): this test's own tmux server is held too
    tmux = int(Path(f"/proc/{session}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert b"tmux" in Path(f"/proc/{tmux}/cmdline").read_bytes() and str(real.srv.socket_name) in str(
        Path(f"/proc/{tmux}/cmdline").read_bytes()
    )
    os.kill(tmux, signal.SIGSTOP)
    os.kill(session, signal.SIGSTOP)
    try:
        kickoff = operator.post(main, "bob: one job for you.")
        real.wait(lambda: state(real, "bob").cursors.get(main, "") >= kickoff.id, "the kickoff pushed")
        time.sleep(3.0 + 3.0)  # the fault: frozen past the bound, with the hook armed
    finally:
        os.kill(session, signal.SIGCONT)
        os.kill(tmux, signal.SIGCONT)
    bob = real.transcript("bob")
    real.wait(lambda: kickoff.id in reached(bob) and bob.settled(), "the kickoff's turn ended")
    assert reached(bob).count(kickoff.id) == 1, reached(bob)
    assert not bob.hook_feedback(), "the hook was handed the push as well"
    real.wait(lambda: confirmed_on_the_channel(real, "bob"), "bob's frames confirmed on the channel")
