"""A TCP relay on 127.0.0.1 for tests: what passes, both ways, recorded; optionally held.

:class:`Relay` forwards each connection to ``target`` (a real daemon). It records the bytes each way
(``up``: client → target, ``down``: back), so a test can say what crossed the wire (TLS: no token in
clear). With ``hold=True`` a connection's first bytes are read and kept until :meth:`release`, before
anything reaches the target (:attr:`heard` is set when they arrive): a daemon slow to answer, made
exact, so a test can act in between (a session killed while its request is being recorded).
"""

from __future__ import annotations

import contextlib
import socket
import threading


class Relay:
    def __init__(self, target: tuple[str, int], *, hold: bool = False) -> None:
        self.target = target
        self.hold = hold
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.up = bytearray()
        self.down = bytearray()
        self.heard = threading.Event()
        """A connection's first bytes arrived (with ``hold``: and are kept)."""
        self._released = threading.Event()
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def release(self) -> None:
        """Let held connections through (and every later one at once)."""
        self._released.set()

    @property
    def wire(self) -> bytes:
        with self._lock:
            return bytes(self.up) + bytes(self.down)

    def close(self) -> None:
        self._released.set()
        self.listener.close()
        for s in list(self._socks):
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self._socks.append(client)
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        first = b""
        try:
            if self.hold:
                first = client.recv(65536)
                self.heard.set()
                self._released.wait()
            server = socket.create_connection(self.target)
        except OSError:  # the client or the target is gone (the test is over)
            client.close()
            return
        self._socks.append(server)
        if first:
            with self._lock:
                self.up += first
            with contextlib.suppress(OSError):
                server.sendall(first)
        threading.Thread(target=self._pump, args=(client, server, self.up), daemon=True).start()
        threading.Thread(target=self._pump, args=(server, client, self.down), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, into: bytearray) -> None:
        try:
            while chunk := src.recv(65536):
                if not self.hold:
                    self.heard.set()
                with self._lock:
                    into += chunk
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
