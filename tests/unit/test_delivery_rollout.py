"""Codex's rollout read as a transcript (:mod:`fleet.delivery.rollout`): receipts, state and usage from
lines of the shapes codex-cli 0.169.0 wrote against the scripted model (docs/agents.md), the thread
found from the lock its process holds, and the ledger's rule for a queue that outlives its process."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.agents.codex import kickoff, toml
from fleet.agentstate import Fold, state_of
from fleet.delivery.frames import Frame, channel_tag, hook_report
from fleet.delivery.ledger import Ledger
from fleet.delivery.receipts import Receipt
from fleet.delivery.rollout import Rollout, Translator, rollout_of, thread_of_process
from fleet.delivery.state import DeliveryState
from fleet.usage import Counter

THREAD = "01a23d21-a661-7ae1-b6d3-e88bc4e47e18"
T0 = "2026-12-03T18:19:05.{:03d}Z"


def line(n: int, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": T0.format(n), "ordinal": n, "type": kind, "payload": payload}


def frame(blip: str, text: str = "hi bob") -> Frame:
    return Frame(
        id=blip, wavelet_id="wl1", wavelet="w/main", author="alice", kind="message", text=text, created_at=""
    )


def user(n: int, text: str) -> dict[str, Any]:
    content = [{"type": "input_text", "text": text}]
    return line(n, "response_item", {"type": "message", "role": "user", "content": content})


def turn(n: int, wake: str, usage: tuple[int, int, int]) -> list[dict[str, Any]]:
    """One turn as Codex writes it: started (queue), the wake's text, a tool call, usage, complete."""
    inp, cached, out = usage
    return [
        line(n, "event_msg", {"type": "task_started", "turn_attribution": {"turn_trigger": "queue"}}),
        line(n + 1, "turn_context", {"model": "scripted-1", "turn_id": "t"}),
        user(n + 2, wake),
        line(
            n + 3,
            "response_item",
            {
                "type": "function_call",
                "name": "wavelet_post",
                "namespace": "mcp__fleet",
                "arguments": "{}",
                "call_id": f"call_{n}",
            },
        ),
        line(
            n + 4,
            "token_usage_record",
            {
                "response_id": f"resp_{n}",
                "usage": {
                    "input_tokens": inp,
                    "cached_input_tokens": cached,
                    "cache_write_input_tokens": 0,
                    "output_tokens": out,
                    "reasoning_output_tokens": 0,
                    "total_tokens": inp + out,
                },
            },
        ),
        line(
            n + 5, "response_item", {"type": "function_call_output", "call_id": f"call_{n}", "output": "ok"}
        ),
        line(n + 6, "event_msg", {"type": "task_complete", "last_agent_message": "done"}),
    ]


def write(path: Path, lines: list[dict[str, Any]]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        for ln in lines:
            f.write(json.dumps(ln) + "\n")


def test_a_wake_that_entered_is_a_receipt_and_the_state_follows_the_turn(tmp_path: Path) -> None:
    path = tmp_path / f"rollout-2026-12-03T18-19-04-{THREAD}.jsonl"
    fold = Fold()
    reader = Rollout(THREAD, path=path, observer=lambda ln: fold.take(ln))
    write(path, [user(1, kickoff("bob", "w"))])
    assert reader.read() == [] and reader.problem == ""
    wake = hook_report([frame("b1"), frame("b2")], "bob", "w")
    write(path, turn(10, wake, (1000, 200, 50))[:3])
    got = reader.read()
    assert [(r.blip_ids, r.how, r.via) for r in got] == [(["b1", "b2"], "entered", "channel")]
    assert state_of(fold).kind == "turning" and fold.woken_by == ["b1", "b2"]
    write(path, turn(10, wake, (1000, 200, 50))[3:])
    assert reader.read() == [] and state_of(fold).kind == "idle" and fold.turns == 1


def test_a_turn_the_model_failed_is_a_failed_turn_with_codexs_error(tmp_path: Path) -> None:
    """codex-cli 0.169.0 ends a turn whose request failed (HTTP 529, retries off) with ``task_complete``
    carrying ``error`` and no ``last_agent_message``: a failed turn, as Claude Code's API error line."""
    path = tmp_path / f"rollout-2026-12-06T01-22-25-{THREAD}.jsonl"
    fold = Fold()
    reader = Rollout(THREAD, path=path, observer=lambda ln: fold.take(ln))
    failed = {
        "type": "task_complete", "last_agent_message": None,
        "error": {"message": "unexpected status 529 <unknown status code>: Overloaded (scripted)",
                  "codex_error_info": {"http_connection_failed": {"http_status_code": 529}}},
    }  # fmt: skip
    for n in (1, 10, 20):
        started = line(
            n, "event_msg", {"type": "task_started", "turn_attribution": {"turn_trigger": "queue"}}
        )
        write(path, [started, user(n + 1, "please fail now"), line(n + 2, "event_msg", failed)])
    reader.read()
    assert (fold.turns, fold.failed_streak, fold.failed_total, fold.turning) == (0, 3, 3, False)
    assert fold.last_error == "API Error: unexpected status 529 <unknown status code>: Overloaded (scripted)"
    write(path, turn(30, "hello", (10, 0, 1)))
    reader.read()
    assert (fold.turns, fold.failed_streak) == (1, 0)


def test_usage_is_the_rollouts_token_records_with_cached_input_counted_apart(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    write(path, turn(10, channel_tag(frame("b1")), (1000, 200, 50)))
    write(path, turn(30, channel_tag(frame("b2")), (3000, 2500, 70)))
    counter = Counter()
    Rollout(THREAD, path=path, observer=counter.take).read()
    (key, tally), = counter.tallies.items()  # fmt: skip
    assert key == ("wl1", "scripted-1")
    assert (tally.input_tokens, tally.cache_read_input_tokens, tally.output_tokens) == (
        800 + 500,
        200 + 2500,
        120,
    )
    assert (tally.requests, tally.turns) == (2, 2)


def test_codexs_own_context_and_a_typed_prompt_are_no_receipt() -> None:
    t = Translator()
    assert t(user(1, "<environment_context>\n  <cwd>/x</cwd>")) == []
    typed = t(user(2, "fix the tests"))
    assert typed[0]["type"] == "user" and "origin" not in typed[0]
    assert t(line(3, "world_state", {"full": True})) == [] and t({"type": "event_msg"}) == []


@settings(max_examples=300)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
        max_leaves=20,
    ),
    st.sampled_from(
        ["event_msg", "response_item", "token_usage_record", "turn_context", "session_meta", "x"]
    ),
)
def test_the_translator_takes_any_line_without_raising_and_finds_receipts_only_in_fleets_blocks(
    payload: Any, kind: str
) -> None:
    for out in Translator()({"type": kind, "payload": payload, "timestamp": "bad"}):
        assert isinstance(out, dict) and "type" in out
        if out.get("origin"):
            assert '<channel source="fleet"' in json.dumps(out)


@given(
    st.one_of(
        st.text(max_size=40),
        st.lists(st.text(max_size=10), max_size=4),
        st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=10), max_size=4),
    )
)
def test_a_value_given_inline_with_dash_c_reads_back_as_itself(value: Any) -> None:
    """Codex parses each ``-c key=value``'s value as TOML: what spawn writes must read back exactly."""
    assert tomllib.loads(f"key = {toml(value)}")["key"] == value


def test_the_thread_is_found_from_the_lock_its_process_holds(tmp_path: Path) -> None:
    locks = tmp_path / "thread-writer-locks"
    locks.mkdir()
    with open(locks / f"{THREAD}.lock", "w"), open(locks / ".coordination.lock", "w"):
        assert thread_of_process(os.getpid()) == THREAD
    assert thread_of_process(os.getpid()) is None
    assert thread_of_process(2**22 + 12345) is None  # no such process


def test_the_rollout_is_found_by_its_thread_under_codex_home(tmp_path: Path) -> None:
    day = tmp_path / "sessions" / "2026" / "12" / "03"
    day.mkdir(parents=True)
    (day / f"rollout-2026-12-03T18-19-04-{THREAD}.jsonl").write_text("")
    (day / "rollout-2026-12-03T18-19-04-01a23d21-0000-7ae1-b6d3-e88bc4e47e18.jsonl").write_text("")
    assert (
        rollout_of(THREAD, {"CODEX_HOME": str(tmp_path)})
        == day / f"rollout-2026-12-03T18-19-04-{THREAD}.jsonl"
    )
    assert rollout_of("01a23d21-ffff-7ae1-b6d3-e88bc4e47e18", {"CODEX_HOME": str(tmp_path)}) is None
    reader = Rollout(None, find_thread=lambda: None, env={"CODEX_HOME": str(tmp_path)})
    assert reader.read() == [] and "no Codex thread known yet" in reader.problem


def test_a_queued_wake_of_an_earlier_run_is_not_lost_when_the_queue_is_durable() -> None:
    """Codex keeps a queued message on disk and the resumed thread takes it (verified): a new run
    must not hand it again (it would enter twice); one never queued is lost and handed again."""
    for durable, lost in ((True, ["b2"]), (False, ["b1", "b2"])):
        state = DeliveryState(daemon="d", wave="w", participant="bob")
        old = Ledger(state, "run-1", hook=False, durable=durable, patience=3.0)
        old.hand(frame("b1"), "channel", 100.0)
        old.hand(frame("b2"), "channel", 100.0)
        old.apply([Receipt(blip_ids=["b1"], how="queued", via="channel", at=100.1)])
        new = Ledger(state, "run-2", hook=False, durable=durable, patience=3.0)
        assert [p.frame.id for p in new.lost_pushes(101.0)] == lost, durable


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("post"), st.integers(0, 5)),
            st.tuples(st.just("drop"), st.integers(0, 5)),  # the wake's codex queue never ran
            st.tuples(st.just("kill"), st.just(0)),  # the pane killed: a new run, Codex's queue kept
            st.tuples(st.just("enter"), st.integers(0, 5)),  # the TUI takes a queued message
            st.tuples(st.just("tick"), st.integers(1, 5)),
        ),
        max_size=40,
    )
)
def test_codex_wakes_are_queued_once_each_and_none_is_left_behind(ops: list[tuple[str, int]]) -> None:
    """The channel's Codex loop over the ledger (``durable``, patience = the bound): whatever the
    drops, kills and entries, no blip is queued into Codex twice (it would enter twice), and once
    wakes stop failing every blip gets queued (none lost)."""
    state = DeliveryState(daemon="d", wave="w", participant="bob")
    run, now = 0, 1000.0
    ledger = Ledger(state, f"run-{run}", hook=False, durable=True, patience=3.0, bound=3.0)
    queued: dict[str, int] = {}  # blip -> codex queue calls that succeeded
    in_queue: set[str] = set()  # what Codex holds (durable across kills)
    entered: dict[str, int] = {}
    handed: set[str] = set()

    def wake(blip: str, ok: bool) -> None:
        ledger.hand(frame(blip), "channel", now)
        if ok:
            queued[blip] = queued.get(blip, 0) + 1
            in_queue.add(blip)
            ledger.apply([Receipt(blip_ids=[blip], how="queued", via="channel", at=now)])

    def step(drops: bool) -> None:  # the receipts thread: what the ledger says is lost, queued again
        for p in ledger.lost_pushes(now):
            wake(p.frame.id, ok=not drops)

    for op, n in ops:
        blip = f"b{n}"
        if op in ("post", "drop") and blip not in handed:
            handed.add(blip)
            wake(blip, ok=op == "post")
        elif op == "kill":
            run += 1
            ledger = Ledger(state, f"run-{run}", hook=False, durable=True, patience=3.0, bound=3.0)
        elif op == "enter" and blip in in_queue:
            in_queue.discard(blip)
            entered[blip] = entered.get(blip, 0) + 1
            ledger.apply([Receipt(blip_ids=[blip], how="entered", via="channel", at=now)])
        elif op == "tick":
            now += n
        step(drops=True)
        assert all(k <= 1 for k in queued.values()), queued
    for _ in range(3):  # the wakes work again: everything not queued yet is, within the bound
        now += 4.0
        step(drops=False)
    assert set(queued) == handed and all(k == 1 for k in queued.values()), (handed, queued)
    assert all(k == 1 for k in entered.values())


def test_wakes_queued_to_another_session_are_queued_again_in_a_fresh_one() -> None:
    """A fresh Codex session (not a resume) has a new thread: what was queued to the old one never
    enters it, so the channel's new run hands it again."""
    from fleet.channel.codex import another_session

    state = DeliveryState(daemon="d", wave="w", participant="bob")
    old = Ledger(state, "run-1", hook=False, durable=True, patience=3.0)
    old.hand(frame("b1"), "channel", 100.0)
    old.apply([Receipt(blip_ids=["b1"], how="queued", via="channel", at=100.1)])
    assert Ledger(state, "run-2", hook=False, durable=True).lost_pushes(101.0) == []  # a resume
    another_session(state)
    assert [p.frame.id for p in Ledger(state, "run-2", hook=False, durable=True).lost_pushes(101.0)] == ["b1"]
