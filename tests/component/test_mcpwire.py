"""The MCP stdio wire: every lifecycle and JSON-RPC rule, raw, against a real ``fleet channel`` process,
plus in-process checks of what needs exact timing (cancellation, queueing, concurrent writes)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcphelp import RawMcp, channel_argv


def _dead_port() -> int:
    """A loopback port nobody listens on: the channel runs with its daemon 'down'."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def chan(tmp_path: Path) -> Iterator[RawMcp]:
    """A real channel process whose daemon is unreachable: the wire must work regardless."""
    token = tmp_path / "token"
    token.write_text("not-a-real-token\n")
    token.chmod(0o600)
    argv = channel_argv("alice", "w", f"http://127.0.0.1:{_dead_port()}", token)
    # (the daemon is down on purpose: not the 1.5 s a channel spends asking it for its store's identity)
    env = {**os.environ, "FLEET_STORE_WAIT": "0"}
    with RawMcp(argv, env=env, stderr=tmp_path / "stderr.log") as proc:
        yield proc
    proc.kill()


def only(proc: RawMcp, after: int) -> list[dict[str, Any]]:
    """Messages that arrived after index ``after``, settled by a ping round trip first (an id of its
    own each time: with one id, a second settle found the first one's answer and did not wait)."""
    settle = f"settle-{after}-{len(proc.messages)}-{time.monotonic_ns()}"
    proc.request("ping", id=settle)
    return [m for m in proc.messages[after:] if not str(m.get("id")).startswith("settle-")]


# ---------------------------------------------------------------- lifecycle (real process)


def test_discover_probe_gets_method_not_found_before_initialize(chan: RawMcp) -> None:
    reply = chan.request(
        "server/discover",
        {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
        id="server-discover-probe-1",
    )
    assert reply == {
        "jsonrpc": "2.0",
        "id": "server-discover-probe-1",
        "error": {"code": -32601, "message": "Method not found: server/discover"},
    }


def test_initialize_with_id_zero_declares_channel_and_tools(chan: RawMcp) -> None:
    reply = chan.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}}, id=0)
    assert reply["id"] == 0 and type(reply["id"]) is int
    result = reply["result"]
    assert result["protocolVersion"] == "2025-11-25"
    assert result["capabilities"] == {"tools": {"listChanged": False}, "experimental": {"claude/channel": {}}}
    assert result["serverInfo"]["name"] == "fleet" and result["serverInfo"]["version"]
    assert result["instructions"].startswith("You are alice.")


@pytest.mark.parametrize(
    ("requested", "answered"),
    [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2024-11-05", "2025-11-25"),
        ("2026-07-28", "2025-11-25"),
        ("1999-01-01", "2025-11-25"),
    ],
)
def test_version_negotiation_echoes_supported_else_latest_legacy(
    chan: RawMcp, requested: str, answered: str
) -> None:
    reply = chan.request("initialize", {"protocolVersion": requested, "capabilities": {}})
    assert reply["result"]["protocolVersion"] == answered


def test_initialize_needs_a_version_and_happens_once(chan: RawMcp) -> None:
    assert chan.request("initialize", {"capabilities": {}})["error"]["code"] == -32602
    assert chan.request("initialize", {"protocolVersion": 7})["error"]["code"] == -32602
    assert chan.request("initialize", [1, 2])["error"]["code"] == -32602  # type: ignore[arg-type]
    assert "result" in chan.request("initialize", {"protocolVersion": "2025-11-25"})
    again = chan.request("initialize", {"protocolVersion": "2025-11-25"})
    assert again["error"]["code"] == -32600


def test_requests_before_initialize_are_refused_but_ping_is_answered(chan: RawMcp) -> None:
    assert chan.request("ping", id=0) == {"jsonrpc": "2.0", "id": 0, "result": {}}
    for method in ("tools/list", "tools/call"):
        reply = chan.request(method, {"name": "wavelet_ping"})
        assert reply["error"]["code"] == -32600
        assert "initialize" in reply["error"]["message"]
    chan.handshake()
    assert len(chan.request("tools/list")["result"]["tools"]) == 10


def test_unknown_requests_get_method_not_found_with_their_id(chan: RawMcp) -> None:
    chan.handshake()
    for method in ("resources/list", "prompts/list", "logging/setLevel", "no/such/thing"):
        reply = chan.request(method, {}, id=f"x-{method}")
        assert reply["id"] == f"x-{method}"
        assert reply["error"]["code"] == -32601


def test_notifications_are_never_answered(chan: RawMcp) -> None:
    start = len(chan.messages)
    chan.notify("notifications/initialized")  # before initialize: ignored
    chan.notify("notifications/unknown", {"x": 1})
    chan.notify("server/discover")  # a request method sent as a notification
    chan.notify("notifications/cancelled", {"requestId": 12345, "reason": "nothing in flight"})
    chan.notify("notifications/cancelled", "not even an object")  # type: ignore[arg-type]
    chan.notify("tools/call", {"name": "wavelet_post"})
    chan.handshake()
    chan.notify("notifications/roots/list_changed")
    assert [m.get("id") for m in only(chan, start)] == [0]  # just the initialize response


GARBAGE = [
    (b"{not json\n", -32700),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "ping"\n', -32700),
    (b'\xff\xfe{"jsonrpc":"2.0"}\n', -32700),
    (b"42\n", -32600),
    (b'"ping"\n', -32600),
    (b"[]\n", -32600),
    (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]\n', -32600),
    (b'{"id": 1, "method": "ping"}\n', -32600),
    (b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}\n', -32600),
    (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}\n', -32600),
    (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}\n', -32600),
    (b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}\n', -32600),
    (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}\n', -32600),
    (b'{"jsonrpc": "2.0", "id": 1, "method": 5}\n', -32600),
    (b'{"jsonrpc": "2.0", "id": 1}\n', -32600),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": "x"}\n', -32600),
]
"""Lines that are not a JSON-RPC request, each with the error code its one reply must carry."""


def test_garbage_gets_a_json_rpc_error_and_the_server_lives_on(chan: RawMcp) -> None:
    """Each line of :data:`GARBAGE` in turn to one channel process: one error reply each, and the
    next line still answered. (One process for all 16: a channel per line was 15 more process
    starts, about 2 s each on a loaded machine, for the same assertions.)"""
    for line, code in GARBAGE:
        start = len(chan.messages)
        chan.send_raw(line)
        replies = only(chan, start)
        assert len(replies) == 1, (line, replies)
        assert replies[0]["error"]["code"] == code, (line, replies)
        assert replies[0]["jsonrpc"] == "2.0", (line, replies)
        if code == -32700:
            assert replies[0]["id"] is None, (line, replies)


def test_blank_lines_and_responses_from_the_client_are_ignored(chan: RawMcp) -> None:
    start = len(chan.messages)
    chan.send_raw(b"\n   \n\r\n")
    chan.send({"jsonrpc": "2.0", "id": 99, "result": {}})
    chan.send({"jsonrpc": "2.0", "id": 98, "error": {"code": -1, "message": "x"}})
    assert only(chan, start) == []


def test_ids_keep_their_type_and_value(chan: RawMcp) -> None:
    chan.handshake()
    for rid in (0, -1, 2**53, "0", "", "ü-id"):
        reply = chan.request("ping", id=rid)
        assert reply["id"] == rid and type(reply["id"]) is type(rid)


def test_tools_call_protocol_errors(chan: RawMcp) -> None:
    chan.handshake()
    unknown = chan.request("tools/call", {"name": "no_such_tool", "arguments": {}})
    assert unknown["error"]["code"] == -32602 and "wavelet_post" in unknown["error"]["message"]
    assert chan.request("tools/call", {"arguments": {}})["error"]["code"] == -32602
    assert chan.request("tools/call", {"name": "wavelet_ping", "arguments": [1]})["error"]["code"] == -32602
    assert chan.request("tools/call", ["wavelet_ping"])["error"]["code"] == -32602  # type: ignore[arg-type]
    assert chan.request("tools/list", {"cursor": "page-2"})["error"]["code"] == -32602
    # arguments may be absent (params too, for tools/list)
    assert "result" in chan.request("tools/call", {"name": "wavelet_ping"})
    assert "result" in chan.request("tools/list")


def test_bad_tool_arguments_are_tool_errors_not_protocol_errors(chan: RawMcp) -> None:
    chan.handshake()
    # the first misfit is named (msgspec stops there): a wrong type, then an unknown key
    result = chan.call("wavelet_post", {"wavelet": "main", "text": 5, "extra": True})
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert "text: expected a string, got an integer" in text and "invalid arguments" in text
    result = chan.call("wavelet_post", {"wavelet": "main", "text": "t", "extra": True})
    assert result["isError"] is True and "extra: unknown field" in result["content"][0]["text"]


def test_eof_is_a_clean_prompt_exit(chan: RawMcp) -> None:
    chan.handshake()
    t0 = time.monotonic()
    assert chan.close(timeout=10) == 0
    assert time.monotonic() - t0 < 5


def test_sigterm_is_a_clean_exit(chan: RawMcp) -> None:
    chan.handshake()
    chan.proc.send_signal(signal.SIGTERM)
    assert chan.proc.wait(10) == 0


def test_stdout_carries_protocol_only(chan: RawMcp) -> None:
    chan.handshake()
    chan.call("wavelet_ping")
    chan.send_raw(b"garbage\n")
    chan.request("ping")
    assert chan.close() == 0
    assert not [m for m in chan.messages if "<garbage>" in m]
    assert "initialize" in chan.stderr_text()  # logs went to stderr


# ---------------------------------------------------------------- the stdout guard (real process)


GUARDED = """
import subprocess, sys
from fleet.mcpwire import Server, ServerInfo, Tool, ToolResult, take_stdout
proto = take_stdout()
print("stray print before serving")
def noisy(args):
    print("stray print from a tool")
    subprocess.run(["echo", "child process output"])
    return ToolResult.ok("done")
tool = Tool(name="noisy", description="prints", input_schema={"type": "object"}, handler=noisy)
Server(ServerInfo(name="t", version="1"), [tool], input=sys.stdin.buffer, output=proto).serve()
"""


def test_take_stdout_moves_stray_output_to_stderr(tmp_path: Path) -> None:
    with RawMcp([sys.executable, "-c", GUARDED], stderr=tmp_path / "err") as proc:
        proc.handshake()
        assert proc.call("noisy")["content"][0]["text"] == "done"
        assert proc.close() == 0
    assert not [m for m in proc.messages if "<garbage>" in m]
    err = proc.stderr_text()
    assert "stray print before serving" in err and "stray print from a tool" in err
    assert "child process output" in err


# ---------------------------------------------------------------- in-process: timing-exact rules


def test_channel_module_runs_without_a_terminal(tmp_path: Path) -> None:
    """`python -m fleet channel` with stdin at EOF from the start exits 0 and prints nothing."""
    token = tmp_path / "t"
    token.write_text("x")
    argv = channel_argv("alice", "w", f"http://127.0.0.1:{_dead_port()}", token)
    env = {**os.environ, "FLEET_STORE_WAIT": "0"}  # (its daemon is down on purpose: see ``chan``)
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30, env=env)
    assert done.returncode == 0
    assert done.stdout == b""


def test_batches_are_refused_by_name(chan: RawMcp) -> None:
    chan.handshake()
    start = len(chan.messages)
    chan.send([{"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"jsonrpc": "2.0", "id": 2, "method": "ping"}])
    (reply,) = only(chan, start)
    assert reply["id"] is None and reply["error"]["code"] == -32600
    assert "batch" in reply["error"]["message"]
