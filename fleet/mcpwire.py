"""The whole MCP stdio wire: newline-delimited JSON-RPC 2.0 on the stdlib, in one auditable place.

:class:`Server` reads requests from a binary input (stdin), writes responses and notifications to
a text output (the protocol stdout from :func:`take_stdout`), and calls into a table of
:class:`Tool` objects. It knows nothing about fleet; ``fleet.channel`` supplies the tools and the
instructions and pushes notifications through :meth:`Server.notify`.

What a client may rely on:

* **Framing.** One JSON object per line, UTF-8, ASCII-escaped, flushed per message. Only protocol
  ever reaches the protocol stream: :func:`take_stdout` moves fd 1 onto stderr, so a stray
  ``print`` or a child process cannot corrupt it.
* **Lifecycle.** ``initialize`` negotiates ``2025-11-25`` or ``2025-06-18`` (a supported request is
  echoed; anything else is answered with ``2025-11-25``; the server stays on the legacy era).
  ``ping`` is answered at any time. ``server/discover`` and every unknown request get ``-32601``,
  even before ``initialize`` (so dual-era clients fall back at once). Known requests before
  ``initialize`` get ``-32600``. End of input is a clean shutdown.
* **Errors.** Unparseable line (or bad UTF-8): ``-32700`` with ``id: null``. A non-object, a batch
  (array), a wrong ``jsonrpc``, an id that is not a string or integer, a non-string method:
  ``-32600``. Wrong parameter types for a known method or an unknown tool: ``-32602``. Ids may be
  ``0`` and are echoed with their type.
* **Notifications** (messages without ``id``) are never answered, known or not.
  ``notifications/cancelled`` drops the answer of a ``tools/call`` still in flight and is otherwise
  ignored.
* **Server notifications** sent with :meth:`Server.notify` before the client's
  ``notifications/initialized`` are queued and written, in order, right after it.
* **Tools.** ``tools/call`` runs on a small worker pool, so ``ping`` and ``tools/list`` are answered
  while a tool waits on the network. Argument problems and execution failures are results with
  ``isError: true`` (the 2025-11-25 rule), never protocol errors.
* **Server pings.** :meth:`Server.ping` asks the client for a ``ping`` (one in flight at a time,
  id ``fleet-ping-N``); its answer, a result or an error, goes to :attr:`Server.pongs`. Every other
  response is ignored.
* **Thread safety.** :meth:`Server.notify` may be called from any thread; every write is one locked
  ``write`` + ``flush``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import IO, TYPE_CHECKING, Any, Literal

from fleet.wire import FrozenValue, Record, dump, field

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)

SUPPORTED_VERSIONS = ("2025-11-25", "2025-06-18")
"""Protocol versions the server speaks; the first is preferred. No 2026 (modern) era: Claude Code
skips channel notifications on a modern connection."""

LATEST_VERSION = SUPPORTED_VERSIONS[0]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

JsonObject = dict[str, Any]
RequestId = int | str


# ---------------------------------------------------------------- stdout guard


def take_stdout() -> IO[str]:
    """Reserve the real stdout for protocol and point file descriptor 1 at stderr.

    Returns a text stream on a duplicate of the original fd 1. Afterwards anything that writes to
    ``sys.stdout`` or fd 1 (a stray ``print``, a library, a child process) lands on stderr, so it
    cannot corrupt the JSON-RPC stream. Call it once, before any other output.
    """
    sys.stdout.flush()
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8", newline="\n")
    os.dup2(2, 1)
    return proto


# ---------------------------------------------------------------- tools


class TextContent(Record, kw_only=True, forbid_unknown_fields=True):
    type: Literal["text"] = "text"
    text: str


class ToolResult(Record, kw_only=True, forbid_unknown_fields=True):
    """A ``tools/call`` result as it goes on the wire (field names are the MCP wire names)."""

    content: list[TextContent]
    structuredContent: JsonObject | None = None
    isError: bool = False

    @classmethod
    def ok(cls, text: str, structured: object | None = None) -> ToolResult:
        """A success: ``text`` for the model, ``structured`` (a record) as ``structuredContent``."""
        data = dump(structured) if structured is not None else None
        return cls(content=[TextContent(text=text)], structuredContent=data)

    @classmethod
    def error(cls, text: str) -> ToolResult:
        """A failure the model can act on: ``isError: true`` with ``text`` saying what to do."""
        return cls(content=[TextContent(text=text)], isError=True)


ToolHandler = Callable[[JsonObject], ToolResult]


class Tool(FrozenValue, frozen=True):
    """One tool: its ``tools/list`` entry and the handler ``tools/call`` runs on a worker thread.

    The handler receives the call's ``arguments`` object (``{}`` when absent) and returns a
    :class:`ToolResult`. An exception escaping it becomes an ``isError`` result, never a crash.
    """

    name: str
    description: str
    input_schema: JsonObject
    handler: ToolHandler
    output_schema: JsonObject | None = None
    title: str | None = None
    annotations: JsonObject | None = None

    def listing(self) -> JsonObject:
        entry: JsonObject = {"name": self.name}
        if self.title:
            entry["title"] = self.title
        entry["description"] = self.description
        entry["inputSchema"] = self.input_schema
        if self.output_schema is not None:
            entry["outputSchema"] = self.output_schema
        if self.annotations:
            entry["annotations"] = self.annotations
        return entry


class ServerInfo(FrozenValue, frozen=True):
    """What ``initialize`` answers with, besides the negotiated version."""

    name: str
    version: str
    instructions: str = ""
    experimental: JsonObject = field(default_factory=dict)
    """Experimental capabilities, e.g. ``{"claude/channel": {}}``."""


class RpcError(Exception):
    """Raised inside dispatch to answer a request with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


# ---------------------------------------------------------------- the server


def _frame(message: JsonObject) -> str:
    """One message as one line: ASCII-escaped JSON (so no embedded newline, valid even with lone
    surrogates), compact, newline-terminated."""
    return json.dumps(message, ensure_ascii=True, separators=(",", ":")) + "\n"


def _valid_id(value: object) -> bool:
    # bool is an int subclass but never a valid id; null is not allowed by MCP.
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


class Server:
    """An MCP server over a pair of streams. :meth:`serve` blocks until the input ends.

    ``initialized`` is set once the client sent ``notifications/initialized``; ``closed`` once the
    input ended or the output broke. Both are safe to wait on from other threads.
    """

    def __init__(
        self,
        info: ServerInfo,
        tools: Iterable[Tool],
        *,
        input: IO[bytes],
        output: IO[str],
        workers: int = 4,
    ) -> None:
        self.info = info
        self.tools: dict[str, Tool] = {t.name: t for t in tools}
        self._input = input
        self._output = output
        self._write_lock = threading.Lock()
        self._phase: Literal["new", "initializing", "ready"] = "new"
        self._pending: list[str] = []
        """Framed notifications waiting for ``notifications/initialized``."""
        self._held: dict[int, list[str]] = {}
        """Thread id -> its notifications held (:meth:`hold`)."""
        self._in_flight: set[RequestId] = set()
        self._cancelled: set[RequestId] = set()
        self._flight_lock = threading.Lock()
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None
        """Made at the first ``tools/call`` (the reader thread's): a session that never calls a tool,
        and every channel until its first call, pays neither the import nor the threads."""
        self.initialized = threading.Event()
        self.closed = threading.Event()
        self.protocol_version: str | None = None
        self.client_info: JsonObject = {}
        self._ping_sent: tuple[str, float] | None = None
        """The ping asked and not yet answered: its id and when it was written."""
        self._pings = 0
        self.pongs: list[tuple[float, float]] = []
        """(written, answered) of the client's answers to :meth:`ping`, oldest first (the last few)."""

    # ------------------------------------------------------------ output

    def _write(self, message: JsonObject) -> bool:
        """Write one message; False when the output is gone (the connection is then closed)."""
        line = _frame(message)
        with self._write_lock:
            return self._write_locked(line)

    def _write_locked(self, line: str) -> bool:
        if self.closed.is_set():
            return False
        try:
            self._output.write(line)
            self._output.flush()
        except (OSError, ValueError) as exc:  # BrokenPipeError, or the stream was closed
            log.info("protocol output closed: %s", exc)
            self.closed.set()
            return False
        return True

    def notify(self, method: str, params: JsonObject | None = None) -> bool:
        """Send a server notification; thread-safe.

        Before the client's ``notifications/initialized`` the message is queued and True is
        returned; it is written right after that notification arrives. Returns False only when the
        connection is closed (nothing was written or queued).
        """
        message: JsonObject = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        line = _frame(message)
        with self._write_lock:
            if self.closed.is_set():
                return False
            held = self._held.get(threading.get_ident()) if self._held else None
            if held is not None:
                held.append(line)
                return True
            if self._phase != "ready":
                self._pending.append(line)
                return True
            return self._write_locked(line)

    def ping(self) -> float | None:
        """Ask the client for a ``ping`` (either side may, in MCP) unless one is still unanswered:
        when the one in flight was written (Unix seconds), or None before the handshake or once
        closed. The client reads its input in order, so its answer (a result or an error alike, in
        :attr:`pongs`) says it has read everything written before the ping."""
        with self._write_lock:
            if self.closed.is_set() or self._phase != "ready":
                return None
            if self._ping_sent is not None:
                return self._ping_sent[1]
            self._pings += 1
            request_id = f"fleet-ping-{self._pings}"
            at = time.time()
            if not self._write_locked(_frame({"jsonrpc": "2.0", "id": request_id, "method": "ping"})):
                return None
            self._ping_sent = (request_id, at)
            return at

    def _answered(self, request_id: object) -> None:
        with self._write_lock:
            sent = self._ping_sent
            if sent is None or request_id != sent[0]:
                return  # a response to a request we never sent (or a late duplicate): ignore
            self._ping_sent = None
            self.pongs = [*self.pongs[-7:], (sent[1], time.time())]

    def hold(self) -> None:
        """Keep this thread's notifications until :meth:`release`, which writes them in one write:
        a client reading them gets them together (Claude Code takes one batch of blips into one
        turn, not its first blip alone). Other threads' messages go out as usual meanwhile."""
        with self._write_lock:
            self._held.setdefault(threading.get_ident(), [])

    def release(self) -> bool:
        """Write what :meth:`hold` kept, in one write. False when the output is closed: then none of
        it is known to have reached the client."""
        with self._write_lock:
            held = self._held.pop(threading.get_ident(), [])
            if self.closed.is_set():
                return False
            if not held:
                return True
            if self._phase != "ready":
                self._pending.extend(held)
                return True
            return self._write_locked("".join(held))

    def _respond(self, request_id: RequestId | None, result: JsonObject) -> None:
        self._write({"jsonrpc": "2.0", "id": request_id, "result": result})

    def _error(self, request_id: RequestId | None, code: int, message: str, data: Any = None) -> None:
        error: JsonObject = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        self._write({"jsonrpc": "2.0", "id": request_id, "error": error})

    # ------------------------------------------------------------ input

    def serve(self) -> None:
        """Read and dispatch messages until end of input (a clean shutdown) or a broken output."""
        try:
            for raw in self._input:
                if self.closed.is_set():
                    break
                self.handle_line(raw)
        finally:
            self.closed.set()
            self.initialized.set()  # wake anyone waiting for the handshake: there will be none
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)

    def handle_line(self, raw: bytes) -> None:
        """Dispatch one input line (exposed for in-process tests)."""
        text = raw.strip()
        if not text:
            return
        try:
            message = json.loads(text.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            self._error(None, PARSE_ERROR, f"Parse error: {exc}")
            return
        self._dispatch(message)

    def _dispatch(self, message: object) -> None:
        if isinstance(message, list):
            self._error(None, INVALID_REQUEST, "Invalid Request: batches are not supported")
            return
        if not isinstance(message, dict):
            self._error(None, INVALID_REQUEST, "Invalid Request: a message must be a JSON object")
            return
        if message.get("jsonrpc") != "2.0":
            self._error(
                self._id_or_none(message), INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"'
            )
            return
        has_id = "id" in message
        if has_id and not _valid_id(message["id"]):
            self._error(None, INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
            return
        if "method" not in message:
            if has_id and ("result" in message or "error" in message):
                self._answered(message["id"])  # (responses to anything but our ping are ignored)
                return
            self._error(self._id_or_none(message), INVALID_REQUEST, 'Invalid Request: "method" is missing')
            return
        method = message["method"]
        if not isinstance(method, str):
            self._error(
                self._id_or_none(message), INVALID_REQUEST, 'Invalid Request: "method" must be a string'
            )
            return
        params = message.get("params")
        if not has_id:
            self._on_notification(method, params)
            return
        request_id: RequestId = message["id"]
        if params is not None and not isinstance(params, dict | list):
            self._error(request_id, INVALID_REQUEST, 'Invalid Request: "params" must be an object')
            return
        try:
            self._on_request(request_id, method, params)
        except RpcError as exc:
            self._error(request_id, exc.code, exc.message, exc.data)
        except Exception as exc:
            log.exception("internal error handling %s", method)
            self._error(request_id, INTERNAL_ERROR, f"Internal error: {exc}")

    @staticmethod
    def _id_or_none(message: JsonObject) -> RequestId | None:
        value = message.get("id")
        return value if _valid_id(value) else None

    # ------------------------------------------------------------ notifications from the client

    def _on_notification(self, method: str, params: object) -> None:
        if method == "notifications/initialized":
            if self._phase == "initializing":
                self._become_ready()
            return
        if method == "notifications/cancelled" and isinstance(params, dict):
            request_id = params.get("requestId")
            if _valid_id(request_id):
                with self._flight_lock:
                    if request_id in self._in_flight:
                        self._cancelled.add(request_id)
            return
        # every other notification (known or not) is silently accepted

    def _become_ready(self) -> None:
        with self._write_lock:
            self._phase = "ready"
            pending, self._pending = self._pending, []
            if pending:  # in one write, as a released hold is (Claude Code takes them together)
                self._write_locked("".join(pending))
        self.initialized.set()

    # ------------------------------------------------------------ requests

    def _on_request(self, request_id: RequestId, method: str, params: object) -> None:
        if method == "ping":
            self._respond(request_id, {})
            return
        if method == "initialize":
            self._respond(request_id, self._initialize(params))
            return
        if method not in ("tools/list", "tools/call"):
            raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
        if self._phase == "new":
            raise RpcError(INVALID_REQUEST, f"Server not initialized: send initialize before {method}")
        if params is not None and not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, f"Invalid params: {method} takes an object")
        args: JsonObject = params or {}
        if method == "tools/list":
            if args.get("cursor") is not None:
                raise RpcError(INVALID_PARAMS, "Invalid params: unknown cursor (the tool list has one page)")
            self._respond(request_id, {"tools": [t.listing() for t in self.tools.values()]})
            return
        self._call_tool(request_id, args)

    def _initialize(self, params: object) -> JsonObject:
        if not isinstance(params, dict) or not isinstance(params.get("protocolVersion"), str):
            raise RpcError(INVALID_PARAMS, "Invalid params: initialize needs a string protocolVersion")
        if self._phase != "new":
            raise RpcError(INVALID_REQUEST, "Invalid Request: initialize was already done")
        requested: str = params["protocolVersion"]
        version = requested if requested in SUPPORTED_VERSIONS else LATEST_VERSION
        client_info = params.get("clientInfo")
        self.client_info = client_info if isinstance(client_info, dict) else {}
        self.protocol_version = version
        self._phase = "initializing"
        log.info("initialize: client=%s requested=%s answered=%s", self.client_info, requested, version)
        capabilities: JsonObject = {"tools": {"listChanged": False}}
        if self.info.experimental:
            capabilities["experimental"] = self.info.experimental
        result: JsonObject = {
            "protocolVersion": version,
            "capabilities": capabilities,
            "serverInfo": {"name": self.info.name, "version": self.info.version},
        }
        if self.info.instructions:
            result["instructions"] = self.info.instructions
        return result

    def _call_tool(self, request_id: RequestId, params: JsonObject) -> None:
        name = params.get("name")
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, "Invalid params: tools/call needs a string name")
        tool = self.tools.get(name)
        if tool is None:
            known = ", ".join(self.tools)
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {name} (tools: {known})")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise RpcError(INVALID_PARAMS, "Invalid params: tools/call arguments must be an object")
        with self._flight_lock:
            if request_id in self._in_flight:
                raise RpcError(INVALID_REQUEST, f"Invalid Request: id {request_id!r} is already in use")
            self._in_flight.add(request_id)
        try:
            if self._pool is None:
                if self.closed.is_set():
                    raise RuntimeError("closed")  # as a pool shut down would: nothing runs now
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="mcp-tool")
            self._pool.submit(self._run_tool, request_id, tool, arguments)
        except RuntimeError:  # the pool is shut down: we are closing
            with self._flight_lock:
                self._in_flight.discard(request_id)

    def _run_tool(self, request_id: RequestId, tool: Tool, arguments: JsonObject) -> None:
        try:
            result = tool.handler(arguments)
        except Exception as exc:
            log.exception("tool %s failed", tool.name)
            result = ToolResult.error(f"{tool.name} failed inside the server: {exc}")
        with self._flight_lock:
            self._in_flight.discard(request_id)
            cancelled = request_id in self._cancelled
            self._cancelled.discard(request_id)
        if cancelled:
            log.info("tools/call %r was cancelled; its result is dropped", request_id)
            return
        self._respond(request_id, dump(result, exclude_none=True))
