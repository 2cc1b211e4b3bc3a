"""Permission prompts without a daemon: a preview is one bounded line, the hook joins the settings beside
other hooks, the transcript watch names the first answer of this prompt's own call."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.permissions import hook_entry
from fleet.records.permissions import PREVIEW_MAX, bounded, preview
from fleet.spawn import settings_json


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=600), st.sampled_from(["Bash", "Write", "mcp__x__y"]))
def test_a_preview_is_one_bounded_line_whatever_the_input(text: str, tool: str) -> None:
    for shown in (preview(tool, {"command": text}), preview(tool, {"x": text, "n": [1, 2]}), bounded(text)):
        assert len(shown) <= PREVIEW_MAX
        assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in shown)


def test_the_hook_joins_the_settings_beside_other_hooks(tmp_path: Path) -> None:
    other = json.dumps(
        {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x"}]}]}, "env": {"A": "1"}}
    )
    entry_of = hook_entry("alice", "w", "http://127.0.0.1:1", tmp_path / "t")
    merged = json.loads(settings_json(other, entry_of))
    assert set(merged["hooks"]) == {"Stop", "PermissionRequest"} and merged["env"] == {"A": "1"}
    (entry,) = merged["hooks"]["PermissionRequest"]
    (handler,) = entry["hooks"]
    assert "fleet.permissions" in handler["command"] and "--token-file" in handler["command"]
    assert "matcher" not in entry  # every tool
    alone = json.loads(settings_json(None, entry_of))
    assert set(alone["hooks"]) == {"PermissionRequest"}


def line(kind: str, block: Mapping[str, object]) -> str:
    role = "assistant" if kind == "assistant" else "user"
    return json.dumps({"type": kind, "message": {"role": role, "content": [block]}}) + "\n"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["call", "other-call", "result", "rejected", "junk"]),
            st.integers(0, 3),
            st.integers(1, 40),
        ),
        max_size=25,
    ),
    st.integers(0, 4),
)
def test_the_transcript_watch_names_the_first_answer_of_this_prompts_own_call(
    steps: list[tuple[str, int, int]], before: int
) -> None:
    """Whatever the transcript holds and however its bytes arrive (cut mid-line), the watch reports
    the outcome of the first result of a call of this tool and input made after the hook started,
    and nothing for results of earlier calls, other calls, or lines that are not JSON."""
    import tempfile

    from fleet.permissions import TranscriptWatch

    mine = {"command": "make deploy"}

    def use(ident: str, given: object) -> str:
        return line("assistant", {"type": "tool_use", "id": ident, "name": "Bash", "input": given})

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        text = [use(f"c{n}", mine) for n in range(before)]
        text += [line("user", {"type": "tool_result", "tool_use_id": f"c{n}"}) for n in range(before)]
        path.write_text("".join(text))
        watch = TranscriptWatch(str(path), "Bash", mine)
        calls: set[str] = set()
        expected: str | None = None
        seen: str | None = None
        for i, (kind, n, cut) in enumerate(steps):
            ident = f"new{n}"
            if kind == "call":
                calls.add(ident)
                chunk = use(ident, mine)
            elif kind == "other-call":
                chunk = use(f"x{i}", {"c": i})
            elif kind in ("result", "rejected"):
                body = "The user doesn't want to proceed with this tool use." if kind == "rejected" else "ok"
                result = {
                    "type": "tool_result",
                    "tool_use_id": ident,
                    "content": body,
                    "is_error": kind == "rejected",
                }
                chunk = line("user", result)
                if expected is None and ident in calls:
                    expected = "denied" if kind == "rejected" else "allowed"
            else:
                chunk = "{not json\n"
            with path.open("a") as f:  # half a line, a look, then the rest: the watch never sees half
                f.write(chunk[:cut])
            seen = seen or watch.outcome()
            with path.open("a") as f:
                f.write(chunk[cut:])
            seen = seen or watch.outcome()
            assert seen == expected
