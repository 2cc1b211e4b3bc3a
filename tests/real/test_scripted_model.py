"""The scripted model server on its own (no Claude Code): the wire, the rules, bad input, the fixture's
version check. The real sessions that use it are in test_delivery_real.py."""

from __future__ import annotations

import http.client
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import realclaude
from scripted_model import (
    END_TEXT,
    Fail,
    Script,
    ScriptedModel,
    Slow,
    Usage,
    call,
    events,
    on_channel,
    on_hook,
    on_message,
    on_prompt,
    on_tool_result,
    post,
    reply,
    rule,
    say,
    steps,
)

SID = "11111111-2222-3333-4444-555555555555"


def channel(author: str, text: str, kind: str = "message", wavelet: str = "w/main", blip: str = "b1") -> str:
    return (
        f'<channel source="fleet" wavelet="{wavelet}" wavelet_id="wl" blip_id="{blip}" author="{author}"'
        f' kind="{kind}">\n{text}\n</channel>'
    )


def body(*messages: dict[str, Any], stream: bool = False, tools: bool = True) -> dict[str, Any]:
    return {
        "model": "claude-opus-5-5",
        "max_tokens": 100,
        "stream": stream,
        "messages": list(messages),
        **({"tools": [{"name": "Bash", "input_schema": {"type": "object"}}]} if tools else {}),
    }


def user(*content: Any) -> dict[str, Any]:
    """A user message: one string as is, else a list of blocks (strings become text blocks)."""
    if len(content) == 1 and isinstance(content[0], str):
        return {"role": "user", "content": content[0]}
    return {
        "role": "user",
        "content": [{"type": "text", "text": c} if isinstance(c, str) else c for c in content],
    }


def send(model: ScriptedModel, path: str, payload: Any, session: str = SID) -> tuple[int, str, bytes]:
    host, port = model.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    conn.request("POST", path, raw, {"Content-Type": "application/json", "X-Claude-Code-Session-Id": session})
    res = conn.getresponse()
    out = res.read()
    conn.close()
    return res.status, res.getheader("Content-Type") or "", out


def sse(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for chunk in data.decode().strip().split("\n\n"):
        name, payload = chunk.split("\n")
        out.append((name.removeprefix("event: "), json.loads(payload.removeprefix("data: "))))
    return out


@pytest.fixture
def model() -> Any:
    with ScriptedModel(Script(), {SID: "bob"}) as m:
        yield m


def test_a_streamed_answer_is_server_sent_events_with_text_tool_use_and_usage(model: ScriptedModel) -> None:
    model.script.add("bob", rule(on_message(author="alice"), steps(reply("alice: yes"), say("done"))))
    status, ctype, out = send(
        model, "/v1/messages?beta=true", body(user(channel("alice", "bob: ok?")), stream=True)
    )
    assert status == 200 and ctype == "text/event-stream"
    got = sse(out)
    assert [n for n, _ in got] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop",
    ]  # fmt: skip
    start = got[1][1]["content_block"]
    assert start["type"] == "tool_use" and start["name"] == "mcp__fleet__wavelet_post"
    assert json.loads(got[2][1]["delta"]["partial_json"]) == {"wavelet": "w/main", "text": "alice: yes"}
    assert got[4][1]["delta"]["stop_reason"] == "tool_use" and got[4][1]["usage"]["output_tokens"] == 8
    assert got[0][1]["message"]["usage"]["input_tokens"] > 0
    # the next step answers the tool result, as plain JSON when stream is false
    assistant = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": start["id"], "name": start["name"], "input": {}}],
    }
    result = {"type": "tool_result", "tool_use_id": start["id"], "content": "posted"}
    status, ctype, out = send(
        model, "/v1/messages", body(user(channel("alice", "bob: ok?")), assistant, user(result))
    )
    message = json.loads(out)
    assert ctype == "application/json" and message["content"] == [{"type": "text", "text": "done"}]
    assert message["stop_reason"] == "end_turn"
    (first, second) = model.requests("bob")
    assert first.reply and first.reply.trigger and first.reply.trigger.author == "alice"
    assert (
        second.reply and second.reply.rule == "step" and second.events[0].tool == "mcp__fleet__wavelet_post"
    )


def test_count_tokens_titles_and_unknown_sessions(model: ScriptedModel) -> None:
    status, _, out = send(model, "/v1/messages/count_tokens?beta=true", body(user("hi")))
    assert status == 200 and json.loads(out)["input_tokens"] > 0
    model.script.add("bob", rule(on_prompt(), call("Bash", command="ls")))
    title = {
        **body(user("name this"), tools=False),
        "system": [{"type": "text", "text": "You are naming a coding session. Answer JSON."}],
        "output_config": {"format": {"type": "json_schema"}},
    }
    _, _, out = send(model, "/v1/messages", title)
    text = json.loads(out)["content"][0]["text"]
    assert json.loads(text) == {"title": "bob session"}  # never a tool call, though a rule would match
    _, _, out = send(model, "/v1/messages", body(user("hello")), session="someone-else")
    assert json.loads(out)["content"] == [{"type": "text", "text": END_TEXT}]
    assert [r.kind for r in model.log] == ["count_tokens", "title", "turn"]
    assert model.log[-1].participant is None
    model.check()


@pytest.mark.parametrize(
    ("path", "payload", "says"),
    [
        ("/v1/messages", b"{not json", "not JSON"),
        ("/v1/messages", {"model": "x"}, "needs model and messages"),
        ("/v1/complete", {"model": "x", "messages": []}, "unexpected request"),
    ],
)
def test_a_bad_request_gets_an_anthropic_error_and_fails_the_check(
    model: ScriptedModel, path: str, payload: Any, says: str
) -> None:
    status, _, out = send(model, path, payload)
    error = json.loads(out)
    assert status == 400 and error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert says in error["error"]["message"]
    with pytest.raises(AssertionError) as e:
        model.check()
    assert says in str(e.value) and "bad request" in str(e.value)


def test_events_read_channel_blocks_mid_turn_notices_hook_feedback_tool_results_and_prompts() -> None:
    hook = (
        "<task-notification>\n<summary>fleet: new blips</summary>\n</task-notification>\n<system-reminder>\n"
        f"New blips: {channel('carol', 'x &amp; y')}\n</system-reminder>"
    )
    mid = {
        "role": "system",
        "content": [
            {
                "type": "text",
                "text": "A message arrived from fleet while you were working:\n" + channel("dave", "late"),
            }
        ],
    }
    env = {"role": "system", "content": "# Environment\nMCP Server Instructions"}
    request = body(
        user("old prompt"),
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
        user(
            {
                "type": "tool_result",
                "tool_use_id": "t1",
                "content": [{"type": "text", "text": "ok"}],
                "is_error": True,
            },
            {"type": "text", "text": channel("alice", "hi")},
        ),
        env,
        mid,
        user(hook),
        user("<system-reminder>ignore me</system-reminder>\nwhat now?"),
    )
    evs = events(request)
    assert [(e.kind, e.via, e.author, e.text) for e in evs] == [
        ("tool_result", "", "", "ok"),
        ("channel", "notification", "alice", "hi"),
        ("channel", "notification", "dave", "late"),
        ("hook", "", "", hook),
        ("channel", "hook", "carol", "x &amp; y"),
        ("prompt", "", "", "what now?"),
    ]
    assert evs[0].tool == "Bash" and evs[0].is_error
    assert on_hook().matches(evs[3]) and on_channel(via="hook").matches(evs[4])
    assert on_tool_result("Bash", error=True).matches(evs[0]) and not on_tool_result("Write").matches(evs[0])


def test_the_backlog_answers_blips_of_one_wake_in_order_and_rules_fire_in_sequence() -> None:
    script = Script(
        {
            "bob": [
                rule(on_message(author="alice"), reply("first"), reply("second"), times=2),
                rule(on_message(contains="fail"), Fail(529), say("recovered")),
                rule(
                    on_message(author="carol"),
                    Slow(0.2, say("slowly", usage=Usage(input_tokens=7, output_tokens=3))),
                ),
            ]
        }
    )
    player = script.player("bob")
    wake = events(
        body(
            user(
                channel("alice", "a1", blip="1"),
                channel("alice", "a2", blip="2"),
                channel("alice", "a3", blip="3"),
            )
        )
    )
    first = player.answer(wake)
    assert first.tool_uses[0]["input"]["text"] == "first" and first.trigger and first.trigger.blip_id == "1"
    result = [{"type": "tool_result", "tool_use_id": first.tool_uses[0]["id"], "content": "ok"}]
    second = player.answer(events(body(user(*result))))  # the tool result brings the next backlog blip
    assert (
        second.tool_uses[0]["input"]["text"] == "second" and second.trigger and second.trigger.blip_id == "2"
    )
    assert player.answer([]).text == END_TEXT  # a3: the rule is used up (times=2)
    failing = events(body(user(channel("dave", "please fail"))))
    assert player.answer(failing).error == Fail(529)
    assert player.answer(failing).text == "recovered"  # the retried request gets the next answer
    slow = player.answer(events(body(user(channel("carol", "hm")))))
    assert slow.delay == 0.2 and slow.usage.wire(400) == {
        "input_tokens": 7, "output_tokens": 3, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
    }  # fmt: skip


def test_the_same_script_gives_the_same_conversation() -> None:
    def play() -> list[Any]:
        script = Script(
            {"bob": [rule(on_message(), steps(post("w/side", "x {author}"), post("{wavelet}", "y")))]}
        )
        player = script.player("bob")
        out = [player.answer(events(body(user(channel("alice", "go")))))]
        tid = out[0].tool_uses[0]["id"]
        out.append(
            player.answer(events(body(user({"type": "tool_result", "tool_use_id": tid, "content": "ok"}))))
        )
        return [(r.content, r.stop_reason, r.rule) for r in out]

    assert play() == play()
    assert play()[0][0][0]["input"] == {"wavelet": "w/side", "text": "x alice"}


def test_a_slow_answer_delays_only_its_own_request(model: ScriptedModel) -> None:
    model.script.add("bob", rule(on_prompt(contains="slow"), Slow(0.5, say("late"))))
    t0 = time.monotonic()
    send(model, "/v1/messages", body(user("slow please")))
    assert time.monotonic() - t0 >= 0.5
    t0 = time.monotonic()
    send(model, "/v1/messages", body(user("fast please")))
    assert time.monotonic() - t0 < 0.5


def test_the_fixture_fails_with_what_to_install_when_claude_is_missing_or_not_pinned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "claude"
    fake.write_text("#!/bin/sh\necho '2.1.197 (Claude Code)'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("FLEET_CLAUDE_BIN", str(fake))
    with pytest.raises(pytest.fail.Exception) as e:
        realclaude.pinned_claude()
    assert "2.1.197" in str(e.value) and "2.1.332" in str(e.value) and "scripts/test.sh" in str(e.value)
    monkeypatch.setenv("FLEET_CLAUDE_BIN", str(tmp_path / "nope"))
    monkeypatch.setattr(realclaude, "REPO", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(pytest.fail.Exception) as e:
        realclaude.pinned_claude()
    assert "no claude binary" in str(e.value) and "npm install" in str(e.value)
    assert os.environ["FLEET_CLAUDE_BIN"].endswith("nope")
