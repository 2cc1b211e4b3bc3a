"""A small Chrome DevTools Protocol driver for the console tests: Debian's Chromium, stdlib only.

The WebSocket client (RFC 6455, client side: masked text frames out, fragmented frames and pings in)
and the CDP calls the tests need are written here by hand, so the browser tests depend on nothing but
``/usr/bin/chromium``. One :class:`Browser` per test module (a headless Chromium with a fresh profile
directory, its whole process group killed and the profile removed on close); one :class:`Page` per
test, each in its own browser context so cookies never leak from one test to another.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CHROMIUM = os.environ.get("FLEET_TEST_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--mute-audio",
    "--window-size=1280,800",
    "--remote-debugging-port=0",
]

JSONObj = dict[str, Any]


class CDPError(Exception):
    pass


# ---------------------------------------------------------------- WebSocket (client side)


class WebSocket:
    """A blocking WebSocket client for one ``ws://`` URL: text messages only."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {parts.path or '/'} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise CDPError("the browser closed the connection during the WebSocket handshake")
            head += chunk
        head, _, self._buf = head.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            raise CDPError(f"WebSocket handshake refused: {head[:200]!r}")

    def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self._buf)))
            if not chunk:
                raise CDPError("the browser closed the DevTools connection")
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        head = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + masked)

    def send(self, text: str) -> None:
        self._send_frame(0x1, text.encode("utf-8"))

    def recv(self, timeout: float) -> str:
        """The next whole text message (raises ``TimeoutError`` after ``timeout`` seconds)."""
        self.sock.settimeout(timeout)
        parts: list[bytes] = []
        while True:
            b0, b1 = self._read(2)
            fin, opcode, n = b0 & 0x80, b0 & 0x0F, b1 & 0x7F
            if n == 126:
                (n,) = struct.unpack("!H", self._read(2))
            elif n == 127:
                (n,) = struct.unpack("!Q", self._read(8))
            mask = self._read(4) if b1 & 0x80 else b""
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == 0x9:  # ping
                self._send_frame(0xA, payload)
                continue
            if opcode == 0x8:
                raise CDPError("the browser closed the DevTools connection")
            if opcode in (0x0, 0x1, 0x2):
                parts.append(payload)
                if fin:
                    return b"".join(parts).decode("utf-8")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._send_frame(0x8, b"")
        with contextlib.suppress(OSError):
            self.sock.close()


# ---------------------------------------------------------------- CDP


class Connection:
    """CDP over one WebSocket: ``call`` waits for its answer; events are kept for ``events``."""

    def __init__(self, url: str) -> None:
        self.ws = WebSocket(url)
        self._ids = itertools.count(1)
        self.events: deque[JSONObj] = deque(maxlen=2000)

    def call(
        self, method: str, params: JSONObj | None = None, session: str | None = None, timeout: float = 15.0
    ) -> JSONObj:
        msg_id = next(self._ids)
        msg: JSONObj = {"id": msg_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no answer to {method} within {timeout}s")
            data = json.loads(self.ws.recv(remaining))
            if data.get("id") == msg_id:
                if "error" in data:
                    raise CDPError(f"{method}: {data['error']}")
                result: JSONObj = data.get("result", {})
                return result
            if "method" in data:
                self.events.append(data)

    def close(self) -> None:
        self.ws.close()


class Browser:
    """A headless Debian Chromium with a throwaway profile, driven over CDP."""

    def __init__(self) -> None:
        if not Path(CHROMIUM).exists():
            raise FileNotFoundError(f"{CHROMIUM} is missing: apt-get install chromium")
        self.tmp = Path(tempfile.mkdtemp(prefix="fleet-chromium-"))
        profile = self.tmp / "profile"
        self.log = self.tmp / "chromium.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: close() ends every helper process
            )
        try:
            port_file = profile / "DevToolsActivePort"
            deadline = time.monotonic() + 30
            while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise CDPError(f"Chromium did not start: {self.log.read_text(errors='replace')[-2000:]}")
                time.sleep(0.05)
            port, path = port_file.read_text().splitlines()[:2]
            self.conn = Connection(f"ws://127.0.0.1:{port}{path}")
        except BaseException:
            self.close()
            raise

    def new_page(self, width: int = 1280, height: int = 800) -> Page:
        ctx = self.conn.call("Target.createBrowserContext")["browserContextId"]
        target = self.conn.call("Target.createTarget", {"url": "about:blank", "browserContextId": ctx})
        session = self.conn.call("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
        page = Page(self, ctx, target["targetId"], session["sessionId"])
        page.call("Page.enable")
        page.call("Runtime.enable")
        page.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        return page

    def close(self) -> None:
        conn = getattr(self, "conn", None)
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.call("Browser.close", timeout=5)
            conn.close()
        if self.proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # helpers (renderer, zygote) of this browser only
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        shutil.rmtree(self.tmp, ignore_errors=True)


KEYS = {
    "Enter": {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "text": "\r"},
    "Tab": {"key": "Tab", "code": "Tab", "windowsVirtualKeyCode": 9},
    "Escape": {"key": "Escape", "code": "Escape", "windowsVirtualKeyCode": 27},
    "ArrowDown": {"key": "ArrowDown", "code": "ArrowDown", "windowsVirtualKeyCode": 40},
    "ArrowUp": {"key": "ArrowUp", "code": "ArrowUp", "windowsVirtualKeyCode": 38},
}


class Page:
    """One tab in its own browser context (its own cookie jar)."""

    def __init__(self, browser: Browser, context: str, target: str, session: str) -> None:
        self.browser, self.context, self.target, self.session = browser, context, target, session

    def call(self, method: str, params: JSONObj | None = None, timeout: float = 15.0) -> JSONObj:
        return self.browser.conn.call(method, params, session=self.session, timeout=timeout)

    def goto(self, url: str, timeout: float = 15.0) -> None:
        """Navigate and wait until the new document has loaded."""
        result = self.call("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise CDPError(f"navigating to {url}: {result['errorText']}")
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.eval("document.readyState") == "complete":
                    return
            except CDPError:
                pass  # the context went away mid-navigation (a redirect): ask the new one
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not finish loading within {timeout}s")
            time.sleep(0.02)

    def eval(self, expression: str, timeout: float = 15.0) -> Any:
        """The value of a JavaScript expression in the page (promises are awaited)."""
        result = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            timeout=timeout,
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise CDPError(
                f"{expression[:80]!r} threw: {details.get('exception', {}).get('description', details)}"
            )
        return result["result"].get("value")

    def exceptions(self) -> list[str]:
        """Uncaught exceptions the page reported so far."""
        return [
            e["params"]["exceptionDetails"].get("exception", {}).get("description", "")
            or e["params"]["exceptionDetails"].get("text", "")
            for e in self.browser.conn.events
            if e.get("sessionId") == self.session and e["method"] == "Runtime.exceptionThrown"
        ]

    def click(self, selector: str) -> None:
        """A real mouse click at the centre of the first element ``selector`` matches."""
        box = self.eval(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null;"
            " e.scrollIntoView({block: 'nearest'}); const r = e.getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        if box is None:
            raise CDPError(f"nothing matches {selector!r}")
        x, y = box
        for kind in ("mousePressed", "mouseReleased"):
            self.call(
                "Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}
            )

    def type(self, text: str) -> None:
        """Type ``text`` key by key into the focused element."""
        for ch in text:
            if ch == "\n":
                self.press("Enter")
                continue
            self.call(
                "Input.dispatchKeyEvent", {"type": "keyDown", "key": ch, "text": ch, "unmodifiedText": ch}
            )
            self.call("Input.dispatchKeyEvent", {"type": "keyUp", "key": ch})

    def press(self, key: str) -> None:
        spec = KEYS[key]
        self.call("Input.dispatchKeyEvent", {"type": "keyDown", **spec})
        self.call(
            "Input.dispatchKeyEvent", {"type": "keyUp", **{k: v for k, v in spec.items() if k != "text"}}
        )

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.browser.conn.call("Target.closeTarget", {"targetId": self.target}, timeout=5)
        with contextlib.suppress(Exception):
            self.browser.conn.call(
                "Target.disposeBrowserContext", {"browserContextId": self.context}, timeout=5
            )
