"""The steer fold: what became of the operator's blips pushed while the mind was turning, from the
transcript lines Claude Code 2.1.332 writes (the real binary's order: tests/real/test_resident_real.py)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.agentstate import Fold
from fleet.resident.steer import SteerFold, describe


def push(blip_id: str, author: str = "operator", text: str = "count only yours") -> str:
    return (
        f'<channel source="fleet" wavelet="w/main" wavelet_id="wl1" blip_id="{blip_id}" author="{author}"'
        f' kind="message">\n{text}\n</channel>'
    )


def enqueue(content: str) -> dict[str, Any]:
    return {
        "type": "queue-operation",
        "operation": "enqueue",
        "content": content,
        "timestamp": "2026-12-03T12:00:00Z",
    }


def op(operation: str, **kw: Any) -> dict[str, Any]:
    return {"type": "queue-operation", "operation": operation, **kw}


WAKE = {"type": "user", "isMeta": True, "origin": {"kind": "channel"}, "message": {"content": push("b0")}}
DONE = {"type": "system", "subtype": "turn_duration"}


def feed(lines: list[dict[str, Any]]) -> SteerFold:
    fold, steer = Fold(), SteerFold()
    for ln in lines:
        was = fold.turning
        fold.take(ln)
        steer.take(ln, was)
    return steer


def absorbed(content: str) -> dict[str, Any]:
    return {"type": "attachment", "attachment": {"type": "queued_command", "prompt": content}}


def test_a_push_absorbed_mid_turn_steered_it_and_one_dequeued_became_the_next_turn() -> None:
    wake = [enqueue(push("b0")), op("dequeue"), WAKE]  # (a blip while idle starts a turn: no steer)
    assert feed(wake).last is None
    s = feed([*wake, enqueue(push("b1")), op("remove", reason="absorbed_mid_turn"), absorbed(push("b1"))])
    assert s.last is not None and (s.last.blip_id, s.last.outcome, s.last.reached_turn) == (
        "b1",
        "steered",
        True,
    )
    assert s.last.text == "count only yours" and "reached the running turn" in describe(s.last)
    s = feed([*wake, enqueue(push("b2")), op("dequeue"), DONE])
    assert s.last is not None and (s.last.outcome, s.last.reached_turn) == ("next turn", False)
    s = feed([*wake, enqueue(push("b3", author="worker"))])
    assert s.last is None, "only the operator's speech steers"
    s = feed(
        [
            *wake,
            enqueue(push("b4")),
            {"type": "user", "message": {"content": "[Request interrupted by user]"}},
        ]
    )
    assert s.last is not None and s.last.outcome == "withdrawn"
    s = feed([*wake, enqueue(push("b5"))])
    assert s.last is not None and s.last.outcome == "queued" and describe(None) == "none"


LINES = st.sampled_from(
    [
        enqueue(push("a")),
        enqueue(push("b", author="worker")),
        enqueue("typed text"),
        op("dequeue"),
        op("remove", reason="absorbed_mid_turn"),
        op("remove"),
        absorbed(push("a")),
        WAKE,
        DONE,
        {"type": "user", "message": {"content": "[Request interrupted by user]"}},
        {"type": "assistant", "message": {"content": [{"type": "text", "text": "ok"}]}},
        {"type": "attachment", "attachment": "odd"},
        {"type": "queue-operation"},
        {},
    ]
)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(LINES, max_size=80))
def test_any_transcript_folds_without_error_and_a_steer_is_only_the_operators_while_turning(
    lines: list[dict[str, Any]],
) -> None:
    s = feed([json.loads(json.dumps(ln)) for ln in lines])
    assert s.count >= (1 if s.last else 0)
    if s.last is not None:
        assert s.last.blip_id == "a"  # never the worker's, never typed text
        assert s.last.reached_turn == (s.last.outcome == "steered")
    assert len(s.queue) <= sum(1 for ln in lines if ln.get("operation") == "enqueue")
