"""Noticing, while a request is parked, that its client hung up.

A long-poll or an event stream spends its life waiting on the daemon's notifier, not reading its
socket, so a client that closes its connection would otherwise hold the waiter (its thread, its
read connection) until the wait's timeout. :func:`watch` registers the connection's socket with one
process-wide ``epoll`` for ``EPOLLRDHUP`` (the peer's FIN) and ``EPOLLHUP``/``EPOLLERR`` (a reset):
when one fires, the callback runs (the waiter wakes and answers at once; the connection then ends
and gives its reader back). Data the client sends meanwhile (a pipelined request) is not a hang-up
and is not watched for. One thread serves every parked connection, whatever their number.

A client that only half-closes (``shutdown(SHUT_WR)``) and still reads counts as gone too: its
long-poll is answered at once with what there is (an empty page), which it can read.

:func:`bind` (the HTTP base calls it around each request) tells the notifier which connection the
current thread serves, so that waits need no extra argument. Where ``epoll`` is missing (not Linux)
nothing is watched and waits end at their timeout, as before.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

log = logging.getLogger(__name__)

_local = threading.local()


@contextmanager
def bind(sock: socket.socket | None) -> Iterator[None]:
    """Within the block, :func:`current` is ``sock`` (the connection this thread answers)."""
    before = getattr(_local, "sock", None)
    _local.sock = sock
    try:
        yield
    finally:
        _local.sock = before


def current() -> socket.socket | None:
    """The connection the current thread answers (None outside a request)."""
    sock: socket.socket | None = getattr(_local, "sock", None)
    return sock


class _Watcher:
    """One ``epoll`` and one thread for every parked connection."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._lock = threading.Lock()
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._thread = threading.Thread(target=self._run, name="fleet-hangup", daemon=True)
        self._thread.start()

    def add(self, fd: int, callback: Callable[[], None]) -> bool:
        with self._lock:
            try:
                self._epoll.register(fd, select.EPOLLRDHUP | select.EPOLLONESHOT)
            except (OSError, ValueError):
                return False
            self._callbacks[fd] = callback
        return True

    def remove(self, fd: int) -> None:
        with self._lock:
            self._callbacks.pop(fd, None)
            with suppress(OSError, ValueError):
                self._epoll.unregister(fd)

    def _run(self) -> None:
        while True:
            try:
                self._fire(self._epoll.poll())
            except InterruptedError:  # pragma: no cover - PEP 475 retries this already
                continue

    def _fire(self, ready: list[tuple[int, int]]) -> None:
        for fd, _mask in ready:
            with self._lock:
                callback = self._callbacks.pop(fd, None)
            if callback is not None:
                try:
                    callback()
                except Exception:  # pragma: no cover - a callback only sets an event
                    log.exception("hang-up callback failed")


_watcher: tuple[int, _Watcher] | None = None
"""The process's watcher, and the pid that made it (a forked child makes its own)."""
_watcher_lock = threading.Lock()


def _get() -> _Watcher | None:
    global _watcher
    if not hasattr(select, "epoll"):
        return None
    with _watcher_lock:
        if _watcher is None or _watcher[0] != os.getpid():
            _watcher = (os.getpid(), _Watcher())
        return _watcher[1]


@contextmanager
def watch(sock: socket.socket | None, on_hangup: Callable[[], None]) -> Iterator[None]:
    """Within the block, ``on_hangup()`` runs (once, in the watcher's thread) if ``sock``'s peer
    closes or resets the connection. ``sock`` None: nothing is watched."""
    watcher = _get() if sock is not None else None
    fd = -1
    if watcher is not None and sock is not None:
        try:
            fd = sock.fileno()
        except OSError:
            fd = -1
        if fd >= 0 and not watcher.add(fd, on_hangup):
            fd = -1
    try:
        yield
    finally:
        if watcher is not None and fd >= 0:
            watcher.remove(fd)
