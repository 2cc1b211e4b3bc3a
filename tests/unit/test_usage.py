"""Usage counted from transcripts in Claude Code's format: exact sums, once per response, per waking
wavelet, incrementally (a growing file counted once, nothing rescanned), and prices with overrides.

The transcripts here are written line by line in the format the real Claude Code writes (the
real-session test in ``test_usage_real.py`` checks the same sums against a real session)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from fleet import errors
from fleet.paths import Paths
from fleet.usage import Counter, prices, read_session, user_prices

SID = "0b6e6f8e-1c33-4c53-9a39-4bd2a6f0e8a1"


def wake(
    wavelet: str, wid: str, blip: str, kind: str = "channel", blip_kind: str = "message"
) -> dict[str, Any]:
    """A pushed blip entering the conversation, as Claude Code writes it (``isMeta`` included)."""
    block = (
        f'<channel source="fleet" wavelet="{wavelet}" wavelet_id="{wid}" blip_id="{blip}" author="operator"'
        f' kind="{blip_kind}">\nhello\n</channel>'
    )
    message = {"role": "user", "content": block}
    return {"type": "user", "message": message, "origin": {"kind": kind}, "isMeta": True}


META = {
    "type": "user",
    "isMeta": True,
    "message": {"role": "user", "content": "<system-reminder>x</system-reminder>"},
}


def reply(mid: str, usage: dict[str, int], model: str = "claude-sonnet-4-5-20250929") -> dict[str, Any]:
    return {
        "type": "assistant",
        "requestId": f"req_{mid}",
        "message": {"id": mid, "model": model, "role": "assistant", "content": [], "usage": usage},
    }


def u(i: int, o: int, cr: int = 0, cc: int = 0) -> dict[str, int]:
    return {
        "input_tokens": i,
        "output_tokens": o,
        "cache_read_input_tokens": cr,
        "cache_creation_input_tokens": cc,
    }


TOOL_RESULT = {
    "type": "user",
    "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
}

LINES: list[dict[str, Any]] = [
    {"type": "queue-operation", "operation": "enqueue", "content": "<channel …>"},
    META,
    wake("w/side", "WID-SIDE", "b0", blip_kind="system"),  # provenance, delivered with the wake
    META,
    wake("w/main", "WID-MAIN", "b1"),
    wake("w/side", "WID-SIDE", "b1b"),  # woke the same turn, after the first: the turn stays w/main
    reply("m1", u(100, 1, 10, 5)),  # one response in two lines: the last one's figures count
    reply("m1", u(100, 20, 10, 5)),
    TOOL_RESULT,
    reply("m2", u(130, 7)),
    wake("w/side", "WID-SIDE", "b2", kind="task-notification"),  # the hook's feedback woke this one
    reply("m3", u(50, 3, 0, 40)),
    {"type": "user", "message": {"role": "user", "content": "what now?"}},  # typed into the pane
    reply("m4", u(9, 2)),
    reply("m5", u(0, 0), model="<synthetic>"),  # Claude Code's own message: no model call
]


def write(path: Path, lines: list[dict[str, Any]], mode: str = "a") -> None:
    with open(path, mode) as f:
        f.write("".join(json.dumps(x) + "\n" for x in lines))


@pytest.fixture
def transcript(fleet_env: Paths) -> Path:
    folder = Path(os.environ["HOME"]) / ".claude" / "projects" / "-tmp-project"
    folder.mkdir(parents=True)
    return folder / f"{SID}.jsonl"


def by_wavelet(c: Counter) -> dict[str, tuple[int, int, int, int, int, int]]:
    out = {}
    for (wid, _model), t in c.tallies.items():
        out[wid] = (
            t.input_tokens, t.output_tokens, t.cache_read_input_tokens, t.cache_creation_input_tokens,
            t.requests, t.turns,
        )  # fmt: skip
    return out


EXPECTED = {
    "WID-MAIN": (230, 27, 10, 5, 2, 1),
    "WID-SIDE": (50, 3, 0, 40, 1, 1),
    "": (9, 2, 0, 0, 1, 1),
}


def test_each_response_counts_once_and_each_turn_belongs_to_the_wavelet_that_woke_it(
    fleet_env: Paths, transcript: Path
) -> None:
    write(transcript, LINES)
    got = read_session(fleet_env, SID)
    assert got.problem == ""
    assert by_wavelet(got.counter) == EXPECTED
    assert got.counter.labels == {"WID-MAIN": "w/main", "WID-SIDE": "w/side"}
    assert read_session(fleet_env, SID).counter.tallies == got.counter.tallies  # again: nothing added


def test_a_transcript_growing_while_it_is_read_is_counted_once(fleet_env: Paths, transcript: Path) -> None:
    text = "".join(json.dumps(x) + "\n" for x in LINES)
    cut = text.index('"m1"') + 20  # in the middle of the first response's first line
    cuts = [cut, text.index('"m2"') + 5, text.index('"m3"'), len(text) - 7, len(text)]
    start = 0
    for end in cuts:  # the session writes on while fleet reads after each write
        with open(transcript, "a") as f:
            f.write(text[start:end])
        start = end
        read_session(fleet_env, SID)
    assert by_wavelet(read_session(fleet_env, SID).counter) == EXPECTED


def test_reading_resumes_at_its_offset_and_never_rescans(fleet_env: Paths, transcript: Path) -> None:
    split = next(i for i, x in enumerate(LINES) if x.get("origin", {}).get("kind") == "task-notification")
    write(transcript, LINES[:split])
    first = by_wavelet(read_session(fleet_env, SID).counter)
    assert first == {"WID-MAIN": EXPECTED["WID-MAIN"]}
    # scribble over what was read (same length): a rescan would count it differently, or not at all
    size = transcript.stat().st_size
    transcript.write_bytes(b"x" * (size - 1) + b"\n")
    write(transcript, LINES[split:])
    assert by_wavelet(read_session(fleet_env, SID).counter) == EXPECTED
    # the saved position and counts are private to the user
    saved = fleet_env.state / "usage" / f"{SID}.json"
    assert saved.stat().st_mode & 0o777 == 0o600


def test_a_rewritten_transcript_is_counted_again_from_its_start(fleet_env: Paths, transcript: Path) -> None:
    write(transcript, LINES)
    read_session(fleet_env, SID)
    write(transcript, LINES[:8], mode="w")  # shorter than what was read
    assert by_wavelet(read_session(fleet_env, SID).counter) == {"WID-MAIN": (100, 20, 10, 5, 1, 1)}


def test_an_unreadable_or_missing_transcript_is_a_clear_problem(fleet_env: Paths, transcript: Path) -> None:
    assert "no transcript yet" in read_session(fleet_env, SID).problem
    transcript.mkdir()  # not a file (running as root, a mode would not stop the read)
    got = read_session(fleet_env, SID)
    assert got.problem.startswith(f"cannot read {transcript}") and not got.counter.tallies


def test_cost_comes_from_the_price_table_and_the_users_file_overrides_it(fleet_env: Paths) -> None:
    table = prices(fleet_env)
    sonnet = table.price("claude-sonnet-4-5-20250929")
    assert sonnet is not None and (sonnet.input, sonnet.output) == (3.0, 15.0)
    assert table.price("claude-scripted-1") is None
    own = user_prices(fleet_env)
    own.parent.mkdir(parents=True, exist_ok=True)
    own.write_text(
        '[[model]]\nmatch = "claude-sonnet-4*"\ninput = 1.0\noutput = 2.0\n'
        "cache_read = 0.5\ncache_creation = 4.0\n"
    )
    assert prices(fleet_env).price("claude-sonnet-4-5") == sonnet.model_copy(
        update={"input": 1.0, "output": 2.0, "cache_read": 0.5, "cache_creation": 4.0}
    )
    own.write_text('[[model]]\nmatch = "x*"\ninput = 1.0\n')
    with pytest.raises(errors.UsageError, match=r"prices.toml: \[\[model\]\] 'x\*'.*needs input, output"):
        prices(fleet_env)
    own.write_text("[[model]\n")
    with pytest.raises(errors.UsageError, match="invalid TOML"):
        prices(fleet_env)
