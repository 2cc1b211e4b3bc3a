"""Raw MCP over a real subprocess's stdio: what the wire and channel tests drive and observe."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fleet.client import Client

Message = dict[str, Any]


def minted_token_file(op: Client, wave: str, who: str, folder: Path) -> Path:
    """A fresh participant token for ``who`` in ``wave``, written 0600 to ``folder/<who>.token``."""
    path = folder / f"{who}.token"
    path.write_text(op.mint_token(wave, who).token + "\n")
    path.chmod(0o600)
    return path


def channel_argv(
    participant: str,
    wave: str,
    daemon: str,
    token_file: Path,
    *extra: str,
) -> list[str]:
    """The stable invocation spawn generates (see fleet.channel's docstring)."""
    return [
        sys.executable,
        "-m",
        "fleet",
        "channel",
        "--participant",
        participant,
        "--wave",
        wave,
        "--daemon",
        daemon,
        "--token-file",
        str(token_file),
        *extra,
    ]


class RawMcp:
    """A subprocess speaking newline-delimited JSON-RPC; every stdout line is recorded in order.

    A stdout line that is not a JSON object is recorded too (as ``{"<garbage>": line}``), so tests can
    assert that stdout carried protocol only.
    """

    def __init__(
        self,
        argv: Sequence[str],
        env: dict[str, str] | None = None,
        stderr: Path | None = None,
        who: str = "",
        pongs: bool = False,
    ) -> None:
        self.who = who
        self.pongs = pongs
        """Answer the server's pings, as an MCP client must (Claude Code does): a channel that has
        pushed before any push was taken asks whether the session is reading its pipe."""
        self._write = threading.Lock()
        """Whose channel this is (for a test's bookkeeping)."""
        self.stderr_path = stderr
        self._stderr = open(stderr, "wb") if stderr else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        self.messages: list[Message] = []
        self.arrived: list[float] = []
        self._cond = threading.Condition()
        self._next_id = 100
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            t = time.monotonic()
            try:
                msg = json.loads(line)
                if not isinstance(msg, dict):
                    msg = {"<garbage>": line.decode("utf-8", "replace")}
            except ValueError:
                msg = {"<garbage>": line.decode("utf-8", "replace")}
            with self._cond:
                self.messages.append(msg)
                self.arrived.append(t)
                self._cond.notify_all()
            if self.pongs and msg.get("method") == "ping" and "id" in msg:
                with contextlib.suppress(OSError):
                    self.send({"jsonrpc": "2.0", "id": msg["id"], "result": {}})
        with self._cond:
            self._cond.notify_all()

    # ------------------------------------------------------------ sending

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        with self._write:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    def send(self, message: Any) -> None:
        self.send_raw(json.dumps(message).encode() + b"\n")

    def notify(self, method: str, params: Message | None = None) -> None:
        msg: Message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    def request(
        self, method: str, params: Message | None = None, *, id: Any = None, timeout: float = 15
    ) -> Message:
        """Send a request and wait for the response with its id."""
        if id is None:
            self._next_id += 1
            id = self._next_id
        msg: Message = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self.response(id, timeout=timeout)

    def call(self, tool: str, arguments: Message | None = None, timeout: float = 15) -> Message:
        """``tools/call`` and return its ``result`` (fails the test on a JSON-RPC error)."""
        reply = self.request("tools/call", {"name": tool, "arguments": arguments or {}}, timeout=timeout)
        assert "result" in reply, reply
        result: dict[str, Any] = reply["result"]
        return result

    def handshake(self, version: str = "2025-11-25") -> Message:
        init = self.request(
            "initialize",
            {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}},
            id=0,
        )
        self.notify("notifications/initialized")
        return init

    # ------------------------------------------------------------ observing

    def wait_for(self, pred: Callable[[list[Message]], Any], timeout: float = 15, what: str = "") -> Any:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = pred(self.messages)
                if found:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(
                        f"timed out waiting for {what or pred}; stdout so far: {self.messages[-5:]!r}\n"
                        f"stderr: {self.stderr_text()[-2000:]}"
                    )
                self._cond.wait(remaining)

    def response(self, id: Any, timeout: float = 15) -> Message:
        def find(msgs: list[Message]) -> Message | None:
            for m in msgs:
                if "method" not in m and m.get("id") == id and type(m.get("id")) is type(id):
                    return m
            return None

        found: Message = self.wait_for(find, timeout, f"the response to id {id!r}")
        return found

    def channel_notes(self) -> list[Message]:
        """The ``params`` of every ``notifications/claude/channel`` so far, in order."""
        with self._cond:
            return [m["params"] for m in self.messages if m.get("method") == "notifications/claude/channel"]

    def wait_notes(self, pred: Callable[[list[Message]], Any], timeout: float = 15, what: str = "") -> Any:
        return self.wait_for(
            lambda msgs: pred(
                [m["params"] for m in msgs if m.get("method") == "notifications/claude/channel"]
            ),
            timeout,
            what,
        )

    def contents(self) -> list[str]:
        return [n["content"] for n in self.channel_notes()]

    def stderr_text(self) -> str:
        if self.stderr_path and self.stderr_path.exists():
            return self.stderr_path.read_text(errors="replace")
        return ""

    # ------------------------------------------------------------ ending

    def close(self, timeout: float = 10) -> int:
        """Close stdin (the MCP shutdown) and return the exit status; kill if it overstays."""
        try:
            if self.proc.stdin and not self.proc.stdin.closed:
                self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self._reader.join(5)
            if self._stderr is not subprocess.DEVNULL:
                self._stderr.close()  # type: ignore[union-attr]
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)

    def __enter__(self) -> RawMcp:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.close(timeout=5)


def env_with(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env
