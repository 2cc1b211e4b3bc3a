"""The scripted model's second dialect: the OpenAI Responses API, streamed, as the Codex CLI speaks it.

Codex (0.169.0, verified; docs/agents.md) sends ``POST /v1/responses`` with ``"stream": true``,
``input`` (a list of items: ``message`` with ``input_text`` parts — roles ``developer`` and ``user`` —,
``function_call``, ``function_call_output``) and ``tools`` (its own functions, and one ``namespace`` per
MCP server: ``{"type": "namespace", "name": "mcp__fleet", "tools": [...]}``). The same script answers
it: :func:`as_messages` reads the request as a Messages request (a ``function_call`` of namespace
``mcp__fleet`` and name ``wavelet_post`` is the tool ``mcp__fleet__wavelet_post``), so rules, events
and players are the ones Claude Code's sessions use; :func:`stream` writes the reply back as the
event sequence Codex accepts:

``response.created`` → per output item ``response.output_item.added`` → (text:
``response.content_part.added``, ``response.output_text.delta``, ``response.output_text.done``,
``response.content_part.done``; a call: ``response.function_call_arguments.delta`` /
``.done``) → ``response.output_item.done`` → ``response.completed`` with ``usage``.

A tool call is a ``function_call`` output item ``{"name": "wavelet_post", "namespace": "mcp__fleet",
"call_id": …, "arguments": "<JSON>"}`` (a bare ``mcp__fleet__wavelet_post`` name is refused by Codex:
"unsupported call"). Usage: OpenAI's ``input_tokens`` include the cached ones, so a script's
``Usage(input_tokens=I, cache_read_input_tokens=C)`` is sent as ``input_tokens = I + C`` with
``input_tokens_details.cached_tokens = C`` (fleet reads back I and C); the dialect has no cache-write
figure (``cache_creation_input_tokens`` is added to ``input_tokens``).

Who is asking: a developer message carries fleet's ``developer_instructions``, which say 'You are
the participant "<name>" in the fleet wave' (:func:`participant_of`; Codex's own instructions, sent
first, open "You are a coding agent"); the ``thread-id`` header names the thread.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from .script import Reply, Usage

THREAD_HEADER = "thread-id"
_YOU_ARE = re.compile(r'You are the participant "([a-z][a-z0-9_-]{0,31})" in the fleet wave')


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [str(b.get("text", "")) for b in content or [] if isinstance(b, dict) and "text" in b]


def participant_of(body: Mapping[str, Any]) -> str | None:
    """The participant whose ``developer_instructions`` open the request's developer messages."""
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "message" and item.get("role") == "developer":
            for text in _texts(item.get("content")):
                if m := _YOU_ARE.search(text):
                    return m[1]
    return None


def tool_name(item: Mapping[str, Any]) -> str:
    """A ``function_call``'s tool as Claude Code names it (``mcp__fleet__wavelet_post``)."""
    name = str(item.get("name") or "")
    return f"{item['namespace']}__{name}" if item.get("namespace") else name


def as_messages(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request read as a Messages request (``model``, ``messages``, ``tools``), developer
    messages left out (they are Codex's system prompt)."""
    messages: list[dict[str, Any]] = []
    for item in body.get("input") or []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message" and item.get("role") in ("user", "assistant"):
            blocks = [{"type": "text", "text": t} for t in _texts(item.get("content"))]
            messages.append({"role": item["role"], "content": blocks})
        elif kind == "function_call":
            try:
                args = json.loads(item.get("arguments") or "{}")
            except ValueError:
                args = {}
            use = {"type": "tool_use", "id": item.get("call_id", ""), "name": tool_name(item), "input": args}
            messages.append({"role": "assistant", "content": [use]})
        elif kind == "function_call_output":
            out = item.get("output")
            text = out if isinstance(out, str) else "\n".join(_texts(out))
            result = {"type": "tool_result", "tool_use_id": item.get("call_id", ""), "content": text}
            messages.append({"role": "user", "content": [result]})
    return {"model": body.get("model"), "messages": messages, "tools": body.get("tools") or []}


def wire_usage(usage: Usage, request_bytes: int) -> dict[str, Any]:
    got = usage.wire(request_bytes)
    cached = got["cache_read_input_tokens"]
    inp = got["input_tokens"] + got["cache_creation_input_tokens"] + cached
    return {
        "input_tokens": inp,
        "output_tokens": got["output_tokens"],
        "total_tokens": inp + got["output_tokens"],
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


def output_items(reply: Reply, prefix: str) -> list[dict[str, Any]]:
    """The reply's content as Responses output items (text: one ``message``; each call: a
    ``function_call``, fleet's tools in their namespace)."""
    items: list[dict[str, Any]] = []
    text = reply.text
    if text:
        part = {"type": "output_text", "text": text, "annotations": []}
        items.append({"id": f"msg_{prefix}", "type": "message", "status": "completed", "role": "assistant",
                      "content": [part]})  # fmt: skip
    for i, use in enumerate(reply.tool_uses):
        name = str(use["name"])
        namespace, _, short = name.rpartition("__") if name.startswith("mcp__") else ("", "", name)
        item = {"id": f"fc_{prefix}_{i}", "type": "function_call", "status": "completed",
                "call_id": str(use["id"]), "name": short, "arguments": json.dumps(use["input"])}  # fmt: skip
        if namespace:
            item["namespace"] = namespace
        items.append(item)
    return items


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data}, separators=(',', ':'))}\n\n".encode()


def stream(
    reply: Reply, *, response_id: str, model: str, created: int, request_bytes: int
) -> Iterator[bytes]:
    """The SSE body of one answer (the verified sequence, module docstring)."""
    items = output_items(reply, response_id)
    base = {"id": response_id, "object": "response", "created_at": created, "model": model,
            "status": "in_progress", "output": []}  # fmt: skip
    yield _event("response.created", {"response": base})
    for i, item in enumerate(items):
        if item["type"] == "message":
            part = item["content"][0]
            at = {"item_id": item["id"], "output_index": i, "content_index": 0}
            opening = {**item, "status": "in_progress", "content": []}
            yield _event("response.output_item.added", {"output_index": i, "item": opening})
            yield _event("response.content_part.added", {**at, "part": {**part, "text": ""}})
            yield _event("response.output_text.delta", {**at, "delta": part["text"]})
            yield _event("response.output_text.done", {**at, "text": part["text"]})
            yield _event("response.content_part.done", {**at, "part": part})
        else:
            at = {"item_id": item["id"], "output_index": i}
            opening = {**item, "status": "in_progress", "arguments": ""}
            yield _event("response.output_item.added", {"output_index": i, "item": opening})
            yield _event("response.function_call_arguments.delta", {**at, "delta": item["arguments"]})
            yield _event("response.function_call_arguments.done", {**at, "arguments": item["arguments"]})
        yield _event("response.output_item.done", {"output_index": i, "item": item})
    done = {**base, "status": "completed", "output": items, "usage": wire_usage(reply.usage, request_bytes)}
    yield _event("response.completed", {"response": done})


def error_event(message: str, code: str = "server_error") -> bytes:
    """A failed response as a stream (``response.failed``)."""
    return _event(
        "response.failed", {"response": {"status": "failed", "error": {"code": code, "message": message}}}
    )
