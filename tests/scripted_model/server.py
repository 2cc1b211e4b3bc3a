"""The scripted model server: the Anthropic Messages API on 127.0.0.1, answered by a :class:`Script`.

``ScriptedModel(script, identify).start()`` serves (stdlib ``ThreadingHTTPServer``, ``127.0.0.1:0``;
``.url`` is what ``ANTHROPIC_BASE_URL`` gets):

* ``POST /v1/messages`` (any query, e.g. ``?beta=true``): server-sent events when ``stream`` is
  true (``message_start``, per block ``content_block_start`` / ``content_block_delta`` (``text_delta``
  or ``input_json_delta``) / ``content_block_stop``, ``message_delta`` with ``stop_reason`` and
  ``usage``, ``message_stop``), else one JSON message.
* ``POST /v1/messages/count_tokens``: ``{"input_tokens": bytes // 4}``.
* ``POST /v1/responses``: the OpenAI Responses API, streamed, as the Codex CLI speaks it
  (:mod:`.responses`): the same script answers, the participant named by the request's developer
  instructions ("You are <participant>").
* Anything else, or a body that is not a Messages request (bad JSON, no ``messages``, no ``model``):
  an Anthropic-style error (400, ``invalid_request_error``), logged in :attr:`ScriptedModel.bad`.
  :meth:`ScriptedModel.check` fails with those bodies (the real-session fixture calls it at the end
  of every test).

Who is asking: the ``X-Claude-Code-Session-Id`` header, mapped to a participant by ``identify``
(e.g. a lookup of the sessions fleet recorded at spawn; results are cached). A **side request** is
answered as such: a session-title request (no tools, a system prompt starting "You are naming a
coding session", an ``output_config.format``) gets a JSON title, never a tool call. A request from a
session ``identify`` does not know gets the end-of-turn text and is logged with ``participant=None``.

Every request is kept in :attr:`ScriptedModel.log` (:class:`Request`: raw bytes, headers, body,
participant, kind, events, the reply) for assertions and benchmarks. Deterministic: the same script
and the same requests give the same answers (ids are counters per participant).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import urlsplit

from . import responses
from .script import END_TEXT, Event, Reply, Script, Usage, describe, events

log = logging.getLogger(__name__)

RequestKind = Literal["turn", "title", "side", "count_tokens", "bad"]
TITLE_PROMPT = "You are naming a coding session"
SESSION_HEADER = "X-Claude-Code-Session-Id"


@dataclass
class Request:
    """One request the server answered."""

    seq: int
    at: float
    """``time.monotonic()`` when it arrived."""
    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: dict[str, Any] | None
    session_id: str
    participant: str | None
    kind: RequestKind
    events: list[Event] = field(default_factory=list)
    reply: Reply | None = None
    error: str = ""
    """For ``bad``: the error body sent."""
    dialect: Literal["messages", "responses"] = "messages"
    """Which API the client spoke: Anthropic's Messages (Claude Code) or OpenAI's Responses (Codex)."""

    @property
    def size(self) -> int:
        return len(self.raw)

    @property
    def messages(self) -> list[dict[str, Any]]:
        if self.dialect == "responses":
            return list(responses.as_messages(self.body or {})["messages"])
        return list((self.body or {}).get("messages") or [])

    def channel_events(self) -> list[Event]:
        return [e for e in self.events if e.kind == "channel"]

    def contains(self, text: str) -> bool:
        """Whether ``text`` occurs anywhere in the request body."""
        return text.encode() in self.raw or json.dumps(text)[1:-1].encode() in self.raw

    def __repr__(self) -> str:
        what = describe(self.reply) if self.reply else self.error
        who = self.participant or self.session_id[:8]
        return f"<Request #{self.seq} {self.kind} {who} {self.size}B → {what}>"


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def is_title_request(body: dict[str, Any]) -> bool:
    system = body.get("system")
    texts = [system] if isinstance(system, str) else [b.get("text", "") for b in system or []]
    return not body.get("tools") and any(t.startswith(TITLE_PROMPT) for t in texts)


class ScriptedModel:
    """The server. ``identify(session_id) -> participant | None``; a ``dict`` works too."""

    def __init__(
        self,
        script: Script | None = None,
        identify: Callable[[str], str | None] | dict[str, str] | None = None,
        *,
        model: str = "claude-scripted-1",
    ) -> None:
        self.script = script or Script()
        self._identify = identify if callable(identify) else (identify or {}).get
        self._known: dict[str, str] = {}
        self.model = model
        self.log: list[Request] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> ScriptedModel:
        handler = type("Handler", (_Handler,), {"model_server": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="scripted-model", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> ScriptedModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start() the server first"
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    # ------------------------------------------------------------ the log

    @property
    def bad(self) -> list[Request]:
        with self._lock:
            return [r for r in self.log if r.kind == "bad"]

    def check(self) -> None:
        """Fail (AssertionError) if any request was malformed or unexpected, with what was sent back."""
        bad = self.bad
        if bad:
            lines = [f"{r.method} {r.path}: {r.error} (request: {r.raw[:300]!r})" for r in bad]
            raise AssertionError(f"the scripted model got {len(bad)} bad request(s):\n" + "\n".join(lines))

    def requests(self, participant: str | None = None, kind: RequestKind | None = "turn") -> list[Request]:
        """Logged requests, oldest first: of ``participant`` (None: anyone) and ``kind`` (None: any)."""
        with self._lock:
            return [
                r
                for r in self.log
                if (participant is None or r.participant == participant) and (kind is None or r.kind == kind)
            ]

    def wait_for(self, pred: Callable[[list[Request]], Any], timeout: float = 60.0, what: str = "") -> Any:
        """Block until ``pred(log)`` is truthy (returned), woken by each new request; AssertionError
        with the log's tail at the deadline."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not (got := pred(list(self.log))):
                left = deadline - time.monotonic()
                if left <= 0:
                    tail = "\n".join(repr(r) for r in self.log[-15:])
                    raise AssertionError(
                        f"timed out after {timeout}s waiting for {what or pred}; log:\n{tail}"
                    )
                self._changed.wait(min(left, 0.5))
            return got

    def participant_of(self, session_id: str) -> str | None:
        if not session_id:
            return None
        if session_id not in self._known:
            try:
                who = self._identify(session_id)
            except Exception as exc:  # a lookup that failed must not kill the request
                log.warning("identify(%s) failed: %s", session_id, exc)
                who = None
            if who is None:
                return None
            self._known[session_id] = who
        return self._known[session_id]

    # ------------------------------------------------------------ answering

    def handle(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, str, bytes]:
        """One request in, (status, content type, body) out; logged either way."""
        route = urlsplit(path).path.rstrip("/")
        sid = next((v for k, v in headers.items() if k.lower() == SESSION_HEADER.lower()), "")
        req = Request(
            seq=0, at=time.monotonic(), method=method, path=path, headers=headers, raw=raw, body=None,
            session_id=sid, participant=None, kind="bad",
        )  # fmt: skip
        try:
            status, ctype, out = self._answer(req, method, route)
        except Exception as exc:  # a script bug: tell the client (and the test) rather than hang
            log.exception("scripted model failed on %s", path)
            req.kind, req.error = "bad", f"the scripted model failed: {exc!r}"
            status, ctype, out = (
                500,
                "application/json",
                json.dumps(error_body("api_error", req.error)).encode(),
            )
        with self._changed:
            req.seq = len(self.log)
            self.log.append(req)
            self._changed.notify_all()
        if req.reply is not None and req.reply.delay:
            time.sleep(req.reply.delay)  # the model is slow (scripted): the client waits, tests do not
        if req.reply is not None and req.reply.gate is not None:
            req.reply.gate.gate.wait(req.reply.gate.limit)  # held until the test opens it
        return status, ctype, out

    def _bad(self, req: Request, status: int, kind: str, message: str) -> tuple[int, str, bytes]:
        req.kind, req.error = "bad", f"{status} {kind}: {message}"
        return status, "application/json", json.dumps(error_body(kind, message)).encode()

    def _answer(self, req: Request, method: str, route: str) -> tuple[int, str, bytes]:
        if method == "POST" and route == "/v1/responses":
            return self._responses(req)
        if method != "POST" or route not in ("/v1/messages", "/v1/messages/count_tokens"):
            return self._bad(req, 400, "invalid_request_error", f"unexpected request {method} {req.path}")
        try:
            body = json.loads(req.raw)
        except ValueError as exc:
            return self._bad(req, 400, "invalid_request_error", f"the body is not JSON: {exc}")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body.get("model"):
            return self._bad(req, 400, "invalid_request_error", "a Messages request needs model and messages")
        req.body = body
        req.participant = self.participant_of(req.session_id)
        if route.endswith("count_tokens"):
            req.kind = "count_tokens"
            return 200, "application/json", json.dumps({"input_tokens": len(req.raw) // 4}).encode()
        req.events = events(body)
        if is_title_request(body):
            req.kind = "title"
            title = json.dumps({"title": f"{req.participant or 'fleet'} session"})
            req.reply = Reply(({"type": "text", "text": title},), rule="title")
        elif not body.get("tools"):
            req.kind = "side"
            req.reply = Reply(({"type": "text", "text": END_TEXT},), rule="side")
        else:
            req.kind = "turn"
            if req.participant is None:
                log.warning("a request from unknown session %r: ending its turn", req.session_id)
                req.reply = Reply(({"type": "text", "text": END_TEXT},), rule="unknown session")
            else:
                with self._lock:
                    req.reply = self.script.player(req.participant).answer(req.events)
        reply = req.reply
        if reply.error is not None:
            e = reply.error
            return e.status, "application/json", json.dumps(error_body(e.type, e.message)).encode()
        message = self._message(req, reply)
        if body.get("stream"):
            return 200, "text/event-stream", b"".join(_sse(message))
        return 200, "application/json", json.dumps(message).encode()

    def _responses(self, req: Request) -> tuple[int, str, bytes]:
        """The Responses dialect (:mod:`.responses`, Codex): the request read as a Messages one and
        answered by the same script, the reply streamed as Responses events."""
        try:
            body = json.loads(req.raw)
        except ValueError as exc:
            return self._bad(req, 400, "invalid_request_error", f"the body is not JSON: {exc}")
        if not isinstance(body, dict) or not isinstance(body.get("input"), list) or not body.get("model"):
            return self._bad(req, 400, "invalid_request_error", "a Responses request needs model and input")
        req.body = body
        req.dialect = "responses"
        thread = next((v for k, v in req.headers.items() if k.lower() == responses.THREAD_HEADER), "")
        req.session_id = thread
        req.participant = responses.participant_of(body) or self.participant_of(thread)
        messages = responses.as_messages(body)
        req.events = events(messages)
        if not body.get("tools"):
            req.kind = "side"
            req.reply = Reply(({"type": "text", "text": END_TEXT},), rule="side")
        elif req.participant is None:
            req.kind = "turn"
            log.warning("a Responses request from unknown thread %r: ending its turn", thread)
            req.reply = Reply(({"type": "text", "text": END_TEXT},), rule="unknown session")
        else:
            req.kind = "turn"
            with self._lock:
                req.reply = self.script.player(req.participant).answer(req.events)
        reply = req.reply
        if reply.error is not None:
            return (
                reply.error.status,
                "application/json",
                json.dumps(error_body(reply.error.type, reply.error.message)).encode(),
            )
        chunks = responses.stream(
            reply, response_id=f"resp_scripted_{len(self.log):05d}", model=str(body.get("model")),
            created=int(time.time()), request_bytes=req.size,
        )  # fmt: skip
        return 200, "text/event-stream", b"".join(chunks)

    def _message(self, req: Request, reply: Reply) -> dict[str, Any]:
        return {
            "id": f"msg_scripted_{len(self.log):05d}",
            "type": "message",
            "role": "assistant",
            "model": (req.body or {}).get("model") or self.model,
            "content": list(reply.content),
            "stop_reason": reply.stop_reason,
            "stop_sequence": None,
            "usage": (reply.usage or Usage()).wire(req.size),
        }


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _sse(message: dict[str, Any]) -> Iterator[bytes]:
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield _event("message_start", {"type": "message_start", "message": start})
    for i, block in enumerate(message["content"]):
        if block["type"] == "tool_use":
            opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            opening = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        yield _event(
            "content_block_start", {"type": "content_block_start", "index": i, "content_block": opening}
        )
        yield _event("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta})
        yield _event("content_block_stop", {"type": "content_block_stop", "index": i})
    yield _event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
    )
    yield _event("message_stop", {"type": "message_stop"})


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    model_server: ScriptedModel

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        status, ctype, out = self.model_server.handle(self.command, self.path, dict(self.headers), raw)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(out)))
        self.send_header("request-id", f"req_scripted_{time.monotonic_ns()}")
        self.end_headers()
        self.wfile.write(out)

    do_POST = _serve
    do_GET = _serve
    do_PUT = _serve
    do_DELETE = _serve
