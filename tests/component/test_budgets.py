"""Budgets: the store's events and who may set them, layout values, restarts, and the channel that
holds a participant's blips once its spend (read from its transcript) passes its budget.

The transcripts here are written in Claude Code's format (as ``test_usage.py`` does); the real
session over the scripted model is ``test_budgets_real.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import retry_until
from test_usage import reply, u, wake, write
from worlds import World, world

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.layouts import parse
from fleet.models import NewSession
from fleet.paths import Paths
from fleet.records.budgets import SetBudget

SID = "2f0c6d1e-8a4b-4c1d-9e2f-3a4b5c6d7e8f"


# ---------------------------------------------------------------- the store


# ---------------------------------------------------------------- layouts


# ---------------------------------------------------------------- the CLI


def _fleet(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FLEET_DAEMON": daemon.url, "FLEET_TOKEN": daemon.operator_token}
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_fleet_budget_set_show_and_clear_and_bad_input(daemon: Daemon, operator: Client) -> None:
    operator.create_wave("w", ["alice"])
    done = _fleet(daemon, "budget", "set", "w", "alice", "--tokens", "5000")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "budget for alice in w: 5,000 tokens"
    shown = _fleet(daemon, "budget", "show", "w", "--json")
    assert shown.returncode == 0, shown.stderr
    assert [(b["participant"], b["tokens"]) for b in json.loads(shown.stdout)] == [("alice", 5000)]
    for args, code, message in [
        (["budget", "set", "w", "alice"], 2, "give --tokens N or --cost USD"),
        (["budget", "set", "w", "alice", "--tokens", "0"], 2, "tokens must be a whole number above 0"),
        (["budget", "set", "w", "alice", "--tokens", "5", "--cost", "1"], 2, "not both"),
        (["budget", "set", "w/", "alice", "--tokens", "5"], 2, "give WAVE or WAVE/WAVELET"),
        (["budget", "set", "w/nowhere", "--tokens", "5"], 4, "no wavelet 'w/nowhere'"),
        (["budget", "set", "nowave", "alice", "--tokens", "5"], 4, "no wave 'nowave'"),
    ]:
        bad = _fleet(daemon, "budget", *args[1:])
        assert bad.returncode == code, (args, bad.stderr)
        assert message in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    token = operator.mint_token("w", "alice").token
    env = {**os.environ, "FLEET_DAEMON": daemon.url, "FLEET_TOKEN": token}
    refused = subprocess.run(
        [sys.executable, "-m", "fleet", "budget", "set", "w", "alice", "--tokens", "999999"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 5 and "only the operator sets budgets" in refused.stderr
    assert [b.tokens for b in operator.budgets("w")] == [5000]
    assert _fleet(daemon, "budget", "clear", "w", "alice").returncode == 0
    assert operator.budgets("w") == []


# ---------------------------------------------------------------- the channel holds, then delivers


@pytest.fixture
def wave(daemon: Daemon, operator: Client, fleet_env: Paths, tmp_path: Path) -> Iterator[World]:
    yield from world(daemon, operator, fleet_env, tmp_path, "w", ["alice", "bob"])


def _transcript(sid: str = SID) -> Path:
    folder = Path(os.environ["HOME"]) / ".claude" / "projects" / "-tmp-project"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{sid}.jsonl"


BOB_SID = "7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f"


def test_members_each_under_a_wavelet_budget_are_all_held_once_their_sum_passes_it(wave: World) -> None:
    """alice spent 600 and bob 500 on w/main's turns: each is under the wavelet's 1,000, the sum is
    not. Both channels report their spend and are held; each gets its own notice, the operator one
    blip; raising the budget delivers the held blip to both."""
    op = wave.op
    wid = op.get_wave("w").id
    for who, sid in (("alice", SID), ("bob", BOB_SID)):
        op.record_session(wid, NewSession(participant=who, session_id=sid, wavelet_id=wave.main))
    write(_transcript(SID), [wake("w/main", wave.main, "b0"), reply("a1", u(500, 100))], mode="w")
    write(_transcript(BOB_SID), [wake("w/main", wave.main, "b0"), reply("b1", u(400, 100))], mode="w")
    op.set_budget("w", SetBudget(wavelet="w/main", tokens=1000))
    chans = {
        who: wave.channel(who, "--receipts", "none", env={**os.environ, "CLAUDE_CODE_SESSION_ID": sid})
        for who, sid in (("alice", SID), ("bob", BOB_SID))
    }
    for who in chans:
        retry_until(lambda who=who: wave.lock_held(who), what=f"{who}'s channel delivering")  # type: ignore[misc]
    # each channel reports its session's spend on w/main at its start: the sum is known before a blip
    retry_until(lambda: op.budgets("w")[0].spent_tokens == 1100, what="both members' spend reported")
    op.post(wave.main, "over together")
    for who, ch in chans.items():
        notice = ch.wait_notes(
            lambda n: next((x for x in n if x["meta"]["kind"] == "budget"), None), what=f"{who}'s notice"
        )
        assert "the members of w/main together" in notice["content"] and "1,100 tokens" in notice["content"]
    retry_until(lambda: op.budgets("w")[0].reached == ["alice", "bob"], what="both members marked")
    (b,) = op.budgets("w")
    assert b.spent_tokens == 1100
    told = [x for x in op.read(wave.main).blips if x.kind == "system" and x.text.startswith("operator:")]
    assert len(told) == 1 and "reached their budget together" in told[0].text
    for ch in chans.values():
        assert [x["meta"]["kind"] for x in ch.channel_notes() if x["meta"]["kind"] != "system"] == ["budget"]
    op.set_budget("w", SetBudget(wavelet="w/main", tokens=5000))
    for who, ch in chans.items():
        ch.wait_notes(
            lambda n: any(x["content"] == "over together" for x in n), what=f"the held blip to {who}"
        )
        kinds = [x["meta"]["kind"] for x in ch.channel_notes() if x["meta"]["kind"] != "system"]
        assert kinds == ["budget", "message"]


def test_past_its_budget_a_channel_holds_blips_notices_once_and_delivers_them_all_once_raised(
    wave: World,
) -> None:
    op = wave.op
    op.record_session(
        op.get_wave("w").id, NewSession(participant="alice", session_id=SID, wavelet_id=wave.main)
    )
    op.set_budget("w", SetBudget(participant="alice", tokens=1000))
    transcript = _transcript()
    write(transcript, [wake("w/main", wave.main, "b0"), reply("m1", u(600, 100))], mode="w")  # 700 spent
    alice = wave.channel("alice", "--receipts", "none", env={**os.environ, "CLAUDE_CODE_SESSION_ID": SID})
    retry_until(lambda: wave.lock_held("alice"), what="alice's channel delivering")
    wave.post("under budget")
    alice.wait_notes(lambda n: any(x["content"] == "under budget" for x in n), what="a blip under budget")
    write(transcript, [wake("w/main", wave.main, "b1"), reply("m2", u(250, 50))])  # 1000: reached
    held = [wave.post(f"held {i}") for i in range(3)]
    notice = alice.wait_notes(
        lambda n: next((x for x in n if x["meta"]["kind"] == "budget"), None), what="the budget notice"
    )
    assert notice["meta"]["author"] == "fleet" and "blip_id" not in notice["meta"]
    assert "1,000 tokens" in notice["content"] and "held, not lost" in notice["content"]

    def operator_blips() -> list[Any]:
        return [
            b for b in op.read(wave.main).blips if b.kind == "system" and b.text.startswith("operator: alice")
        ]

    (told,) = retry_until(operator_blips, what="the blip naming the operator")
    assert "1,000 tokens spent" in told.text and told.actor == "alice"
    wave.post("held 3")
    # alice is restarted while held: nothing was committed, so the new channel holds the same blips,
    # and neither a second notice nor a second blip to the operator comes of it
    assert alice.close() == 0
    again = wave.channel("alice", "--receipts", "none", env={**os.environ, "CLAUDE_CODE_SESSION_ID": SID})
    retry_until(lambda: wave.lock_held("alice"), what="the new channel delivering")
    wave.post("held 4")
    op.post(wave.main, "status check")  # even the operator's blips wait: the budget is the operator's own
    retry_until(lambda: op.budgets("w")[0].reached == ["alice"], what="the budget marked reached")
    raised = subprocess.run(
        [sys.executable, "-m", "fleet", "budget", "set", "w", "alice", "--tokens", "5000"],
        env={**os.environ, "FLEET_DAEMON": wave.daemon.url, "FLEET_TOKEN": wave.daemon.operator_token},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert raised.returncode == 0, raised.stderr
    want = [f"held {i}" for i in range(5)] + ["status check"]
    again.wait_notes(lambda n: [x["content"] for x in n] == want, what="every held blip, in order")
    assert [x["meta"]["kind"] for x in again.channel_notes()] == ["message"] * 5 + ["message"]
    assert [x["meta"].get("blip_id") for x in again.channel_notes()][:3] == held
    assert sum(x["meta"]["kind"] == "budget" for x in [*alice.channel_notes(), *again.channel_notes()]) == 1
    assert len(operator_blips()) == 1
    before = [x["content"] for x in alice.channel_notes() if x["meta"]["kind"] != "system"]
    assert before == ["under budget", notice["content"]]


# ---------------------------------------------------------------- the engine's hold-back


def test_spawn_records_a_layouts_budgets_and_keeps_what_the_operator_set(
    daemon: Daemon, operator: Client
) -> None:
    from fleet.budgets import apply_layout_budgets

    operator.create_wave("w", ["alice", "bob"])
    main = operator.resolve("w/main")
    layout = parse(
        "budget = { cost = 2.5 }\n[defaults]\nbudget = { tokens = 100 }\n"
        "[participants.bob]\nbudget = { tokens = 7 }",
        "team.toml",
        "team",
    )
    apply_layout_budgets(operator, main.wave_id, main.id, layout, ["alice", "bob"])
    got = {(b.wavelet, b.participant): (b.tokens, b.cost, b.source) for b in operator.budgets("w")}
    assert got == {
        ("w/main", ""): (None, 2.5, "layout"),
        ("", "alice"): (100, None, "layout"),
        ("", "bob"): (7, None, "layout"),
    }
    operator.set_budget("w", SetBudget(participant="bob", tokens=70))  # the operator raised bob's
    apply_layout_budgets(operator, main.wave_id, main.id, layout, ["alice", "bob"])  # spawned again
    assert {b.participant: b.tokens for b in operator.budgets("w") if not b.wavelet} == {
        "alice": 100,
        "bob": 70,
    }


# ---------------------------------------------------------------- one request per delivery


def test_a_feed_answer_carries_the_budgets_that_apply_to_the_participant(
    daemon: Daemon, operator: Client
) -> None:
    """The channel's budget check reads them from the answer: a delivery costs one request, not two."""
    operator.create_wave("w", ["alice", "bob"])
    operator.set_budget("w", SetBudget(participant="alice", tokens=1000))
    operator.set_budget("w", SetBudget(participant="bob", tokens=2000))
    operator.set_budget("w", SetBudget(tokens=9000))  # every participant's own spend
    main = operator.resolve("w/main").id
    operator.post(main, "hello")
    alice = Client(daemon.url, operator.mint_token("w", "alice").token)
    feed = alice.feed("w", "alice", {})
    assert feed.blips and feed.budgets is not None
    assert sorted((b.participant, b.tokens) for b in feed.budgets) == [("", 9000), ("alice", 1000)]
    assert [(b.participant, b.tokens) for b in feed.budgets] == [
        (b.participant, b.tokens) for b in alice.budgets("w", "alice")
    ]  # the same as asking for them
    assert alice.feed("w", "alice", {main: feed.blips[-1].id}, wait=0).budgets is not None  # empty too
