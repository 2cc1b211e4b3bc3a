"""The MCP server in-process (fleet.mcpwire), what needs exact timing: notifications held until
initialized, cancellation, tool exceptions, serialised writes, a broken or closed output. The raw wire
against a real fleet channel process: tests/component/test_mcpwire.py."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from typing import Any

from conftest import retry_until

from fleet.mcpwire import Server, ServerInfo, Tool, ToolResult


class Sink(io.StringIO):
    """A protocol output that records whole lines (thread-safe enough behind the server's lock)."""

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.getvalue().splitlines()]


def make_server(tools: list[Tool] | None = None) -> tuple[Server, Sink]:
    sink = Sink()
    server = Server(ServerInfo(name="t", version="1"), tools or [], input=io.BytesIO(), output=sink)
    return server, sink


def line(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg).encode() + b"\n"


def init(server: Server, initialized: bool = True) -> None:
    server.handle_line(
        line({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "x"}})
    )
    if initialized:
        server.handle_line(line({"jsonrpc": "2.0", "method": "notifications/initialized"}))


def test_notifications_wait_for_initialized_then_flush_in_order() -> None:
    server, sink = make_server()
    assert server.notify("n/one", {"i": 1})
    init(server, initialized=False)
    assert server.notify("n/two", {"i": 2})
    assert [m.get("method") for m in sink.lines()] == [None]  # only the initialize response
    assert not server.initialized.is_set()
    server.handle_line(line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    assert server.initialized.is_set()
    server.notify("n/three")
    assert [m.get("method") for m in sink.lines()] == [None, "n/one", "n/two", "n/three"]
    assert sink.lines()[3] == {"jsonrpc": "2.0", "method": "n/three"}


def test_cancelled_tool_call_gets_no_answer() -> None:
    release = threading.Event()

    def slow(args: dict[str, Any]) -> ToolResult:
        release.wait(10)
        return ToolResult.ok("late")

    tools = [Tool(name="slow", description="", input_schema={"type": "object"}, handler=slow)]
    server, sink = make_server(tools)
    init(server)
    server.handle_line(line({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "slow"}}))
    server.handle_line(line({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "slow"}}))
    # ping is answered while the tools wait: they run on workers
    server.handle_line(line({"jsonrpc": "2.0", "id": 9, "method": "ping"}))
    assert sink.lines()[-1] == {"jsonrpc": "2.0", "id": 9, "result": {}}
    server.handle_line(
        line(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7, "reason": "t"}}
        )
    )
    release.set()
    retry_until(lambda: any(m.get("id") == 8 for m in sink.lines()), what="the uncancelled answer")
    assert server._pool is not None
    server._pool.shutdown(wait=True)
    ids = [m.get("id") for m in sink.lines()]
    assert 7 not in ids and ids.count(8) == 1


def test_tool_exceptions_become_error_results() -> None:
    def boom(args: dict[str, Any]) -> ToolResult:
        raise RuntimeError("kaboom")

    server, sink = make_server(
        [Tool(name="boom", description="", input_schema={"type": "object"}, handler=boom)]
    )
    init(server)
    server.handle_line(line({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "boom"}}))
    reply = retry_until(lambda: [m for m in sink.lines() if m.get("id") == 1], what="the boom answer")[0]
    assert reply["result"]["isError"] is True and "kaboom" in reply["result"]["content"][0]["text"]


class Writes(Sink):
    """A protocol output that records each write call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return super().write(text)


def test_held_notifications_go_out_in_one_write_and_only_the_holders() -> None:
    """The delivery thread holds a step's pushes and releases them in one write (a client reading
    then gets them together); another thread's messages are not held meanwhile."""
    out = Writes()
    server = Server(ServerInfo(name="t", version="1"), [], input=io.BytesIO(), output=out)
    init(server)
    out.calls.clear()
    server.hold()
    assert server.notify("n/one", {"i": 1}) and server.notify("n/two", {"i": 2})
    other = threading.Thread(target=server.notify, args=("n/other",))
    other.start()
    other.join()
    assert [json.loads(c)["method"] for c in out.calls] == ["n/other"]  # not held: not the holder's

    def own_hold() -> None:
        server.hold()
        server.notify("n/theirs")
        server.release()

    theirs = threading.Thread(target=own_hold)
    theirs.start()
    theirs.join()
    assert [json.loads(c)["method"] for c in out.calls] == ["n/other", "n/theirs"]  # each its own
    out.calls.remove(out.calls[1])
    assert server.release()
    assert len(out.calls) == 2
    assert [json.loads(raw)["method"] for raw in out.calls[1].splitlines()] == ["n/one", "n/two"]
    assert server.notify("n/three") and len(out.calls) == 3  # released: written at once again
    assert server.release()  # nothing held: nothing to write, and no failure


def test_a_release_to_a_closed_output_says_so_and_before_initialized_they_wait_in_order() -> None:
    server, sink = make_server()
    init(server, initialized=False)
    server.hold()
    server.notify("n/one")
    assert server.release()  # not ready: queued behind the handshake, in order
    server.notify("n/two")
    server.handle_line(line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    assert [m.get("method") for m in sink.lines()] == [None, "n/one", "n/two"]
    r, w = os.pipe()
    out = os.fdopen(w, "w", encoding="utf-8")
    closed = Server(ServerInfo(name="t", version="1"), [], input=io.BytesIO(), output=out)
    init(closed)
    os.close(r)
    closed.hold()
    assert closed.notify("n/x")  # held: the failure shows at the release
    assert closed.release() is False and closed.closed.is_set()


def test_concurrent_writes_never_interleave() -> None:
    r, w = os.pipe()
    out = os.fdopen(w, "w", encoding="utf-8")
    server = Server(ServerInfo(name="t", version="1"), [], input=io.BytesIO(), output=out)
    init(server)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.extend(os.fdopen(r, "rb")), daemon=True)
    reader.start()
    big = "x" * 70_000  # larger than a pipe buffer: a torn write would show

    def spam(n: int) -> None:
        for i in range(50):
            server.notify("n/spam", {"thread": n, "i": i, "pad": big})

    threads = [threading.Thread(target=spam, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.close()
    reader.join(10)
    msgs = [json.loads(raw) for raw in received[1:]]  # [0] is the initialize response
    assert len(msgs) == 400
    for n in range(8):
        assert [m["params"]["i"] for m in msgs if m["params"]["thread"] == n] == list(range(50))


def test_a_broken_output_closes_the_connection_quietly() -> None:
    r, w = os.pipe()
    out = os.fdopen(w, "w", encoding="utf-8")
    server = Server(ServerInfo(name="t", version="1"), [], input=io.BytesIO(), output=out)
    init(server)
    os.close(r)
    assert server.notify("n/x") is False
    assert server.closed.is_set()
    assert server.notify("n/y") is False


def test_serve_returns_at_end_of_input() -> None:
    sink = Sink()
    data = line({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    server = Server(ServerInfo(name="t", version="1"), [], input=io.BytesIO(data), output=sink)
    server.serve()
    assert server.closed.is_set()
    assert sink.lines() == [{"jsonrpc": "2.0", "id": 1, "result": {}}]


class OverlapDetector(io.StringIO):
    """An output that notices two writers inside ``write``/``flush`` at once."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = 0
        self.overlaps = 0
        self._count = threading.Lock()

    def write(self, s: str) -> int:
        with self._count:
            self.inside += 1
            if self.inside > 1:
                self.overlaps += 1
        time.sleep(0.0002)  # widen the window a torn write would need
        n = super().write(s)
        with self._count:
            self.inside -= 1
        return n


def test_writers_are_serialised() -> None:
    out = OverlapDetector()
    server = Server(ServerInfo(name="t", version="1"), [], input=io.BytesIO(), output=out)
    init(server)
    ping = line({"jsonrpc": "2.0", "id": 1, "method": "ping"})

    def notes() -> None:
        for i in range(100):
            server.notify("n/x", {"i": i})

    def pings() -> None:
        for _ in range(100):
            server.handle_line(ping)

    threads = [threading.Thread(target=fn) for fn in (notes, pings) * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out.overlaps == 0
    assert len(out.getvalue().splitlines()) == 601


def test_the_server_pings_the_client_one_at_a_time_and_records_its_answers() -> None:
    server, sink = make_server()
    assert server.ping() is None  # before the handshake: nothing to ask
    init(server)
    sent = server.ping()
    assert sent is not None and server.ping() == sent  # one in flight: not asked twice
    (asked,) = [m for m in sink.lines() if m.get("method") == "ping"]
    assert asked == {"jsonrpc": "2.0", "id": "fleet-ping-1", "method": "ping"}
    server.handle_line(line({"jsonrpc": "2.0", "id": "other", "result": {}}))  # not ours: ignored
    server.handle_line(line({"jsonrpc": "2.0", "id": 7, "error": {"code": 1, "message": "x"}}))
    assert server.pongs == []
    server.handle_line(line({"jsonrpc": "2.0", "id": "fleet-ping-1", "result": {}}))
    assert len(server.pongs) == 1 and server.pongs[0][0] == sent <= server.pongs[0][1]
    server.handle_line(line({"jsonrpc": "2.0", "id": "fleet-ping-1", "result": {}}))  # again: ignored
    assert len(server.pongs) == 1
    again = server.ping()  # answered: the next is a new one, and an error answers too
    assert again is not None and again >= sent
    server.handle_line(
        line({"jsonrpc": "2.0", "id": "fleet-ping-2", "error": {"code": -32601, "message": "no"}})
    )
    assert len(server.pongs) == 2
    assert not [m for m in sink.lines() if "error" in m]  # responses are never answered
