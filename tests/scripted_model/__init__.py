"""A scripted stand-in for the language model behind a real Claude Code session.

The model is the one thing a test may stand in for: Claude Code, tmux, the daemon and the channel
are real, and this package answers Claude Code's Messages API requests on 127.0.0.1 from a script
(/work/shared/reference/scripted-model.md has the verified recipe). Three modules:

* :mod:`.script`: the events a request carries (channel blocks, hook feedback, tool results, typed
  prompts), the rules that match them and the answers (text, tool calls, multi-step turns, API
  errors, slow answers, answers held until the test opens a gate, usage figures).
* :mod:`.server`: the HTTP server and its request log.
* :mod:`.transcript`: a session's own transcript (``~/.claude/projects/*/<session-id>.jsonl``).

A minimal script::

    from scripted_model import Script, ScriptedModel, on_message, reply, rule

    script = Script({"bob": [rule(on_message(author="alice"), reply("alice: 8086"))]})
    with ScriptedModel(script, identify={session_id: "bob"}) as model:
        ...  # ANTHROPIC_BASE_URL=model.url for the session; model.requests("bob") afterwards

``bench/`` imports it with ``tests/`` on ``sys.path``.
"""

from .script import (
    END_TEXT,
    Answer,
    Call,
    ChannelBlock,
    Event,
    Fail,
    Held,
    Reply,
    Rule,
    Say,
    Script,
    Slow,
    ToolCall,
    Usage,
    When,
    call,
    calls,
    channel_blocks,
    events,
    fork,
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
    surface,
)
from .server import Request, ScriptedModel
from .transcript import ToolResult, ToolUse, Transcript, transcript_path

__all__ = [
    "END_TEXT",
    "Answer",
    "Call",
    "ChannelBlock",
    "Event",
    "Fail",
    "Held",
    "Reply",
    "Request",
    "Rule",
    "Say",
    "Script",
    "ScriptedModel",
    "Slow",
    "ToolCall",
    "ToolResult",
    "ToolUse",
    "Transcript",
    "Usage",
    "When",
    "call",
    "calls",
    "channel_blocks",
    "events",
    "fork",
    "on_channel",
    "on_hook",
    "on_message",
    "on_prompt",
    "on_tool_result",
    "post",
    "reply",
    "rule",
    "say",
    "steps",
    "surface",
    "transcript_path",
]
