"""A real Claude Code session's permission prompt, answered from anywhere (docs/permissions.md).

The pinned Claude Code over the scripted model, spawned by ``fleet spawn`` with
``permission_mode = "default"`` (the TUI's default auto mode would let its classifier decide
alone), once with channels registered and once without (then the watch hook wakes it). The model
asks for Bash three times: ``fleet approve`` lets the first run, ``fleet deny`` refuses the second,
and the third is answered in the pane itself (tmux send-keys): the hook lets go and the store
records that the pane answered. What is asserted comes from the session's transcript, ``fleet
status`` and the store.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from realclaude import RealFleet
from scripted_model import Script, call, on_message, rule, say, steps

from fleet.client import Client

RealFleetFactory = Callable[..., RealFleet]


def bash(word: str) -> dict[str, str]:
    # a write: Claude Code asks for it (an echo alone is read-only, and it runs unasked)
    return {"command": f"touch marker-{word} && echo {word}-ran", "description": f"mark {word}"}


def script() -> Script:
    return Script(
        {
            "alice": [
                rule(
                    on_message(author="operator", contains=f"alice: {w}"),
                    steps(call("Bash", bash(w)), say(w)),
                )
                for w in ("one", "two", "three")
            ]
        }
    )


def waiting_note(real: RealFleet) -> str:
    done = real.fleet("status", "w", "--json")
    rows = json.loads(done.stdout)["rows"] if done.returncode == 0 else []
    return rows[0]["state_text"] if rows else ""


def result_of(real: RealFleet, word: str) -> tuple[str, bool] | None:
    """The text of the tool_result of the Bash call that echoes ``word``, and whether it is an error."""
    t = real.transcript("alice")
    ids = {u.id for u in t.tool_uses("Bash") if u.input.get("command") == bash(word)["command"]}
    return next(((r.text, r.is_error) for r in t.tool_results() if r.tool_use_id in ids), None)


def await_result(real: RealFleet, word: str, what: str) -> tuple[str, bool]:
    got = real.wait(lambda: result_of(real, word), what)
    assert got is not None
    return got


@pytest.mark.parametrize("channels", [True, False], ids=["channels", "no-channels"])
def test_a_prompt_is_answered_by_approve_by_deny_and_in_the_pane(
    real_fleet: RealFleetFactory, operator: Client, channels: bool
) -> None:
    real = real_fleet(channels=channels, script=script())
    operator.create_wave("w", ["alice"])
    real.spawn("w/main", real.layout(["alice"], defaults={"permission_mode": "default"}))
    main = operator.resolve("w/main").id

    # 1. approve: status says what waits; the tool runs; the decision is in the store
    operator.post(main, "alice: one")
    real.wait(lambda: "waiting for permission" in waiting_note(real), "status says alice waits")
    assert waiting_note(real).startswith("waiting for permission: Bash (touch marker-one && echo one-ran)")
    assert "Do you want to proceed" in real.screen("alice")  # the pane's own dialog stays up meanwhile
    approved = real.fleet("approve", "w/main", "alice")
    assert approved.returncode == 0, approved.stderr
    text, error = await_result(real, "one", "the approved tool's result")
    assert "one-ran" in text and not error
    (first,) = operator.permissions("w")
    assert (first.state, first.answered_by, first.via, first.tool) == ("allowed", "operator", "cli", "Bash")

    # 2. deny: the transcript shows the denial (the model is told), nothing ran
    operator.post(main, "alice: two")
    real.wait(lambda: "echo two-ran" in waiting_note(real), "waiting again")
    denied = real.fleet("deny", "w", "alice", "--message", "not now")
    assert denied.returncode == 0, denied.stderr
    text, error = await_result(real, "two", "the denied tool's result")
    assert error and "not now" in text and "two-ran\n" not in text
    assert operator.permissions("w")[0].state == "denied"

    # 3. answered in the pane first: the hook lets go, the store records who answered
    operator.post(main, "alice: three")
    real.wait(lambda: "echo three-ran" in waiting_note(real), "waiting a third time")
    real.wait(lambda: "Do you want to proceed" in real.screen("alice"), "the dialog")
    real.srv.cmd("send-keys", "-t", real.pane("alice"), "Enter")  # "1. Yes" is the default
    text, error = await_result(real, "three", "the tool's result after the pane's yes")
    assert "three-ran" in text and not error
    real.wait(lambda: operator.permissions("w")[0].state != "pending", "the pane's answer recorded")
    third = operator.permissions("w")[0]
    assert (third.state, third.answered_by, third.via) == ("allowed", "pane", "pane")
    late = real.fleet("approve", "w/main", "alice")
    assert late.returncode == 4 and "waits on no permission request" in late.stderr
    assert "waiting for permission" not in waiting_note(real)
