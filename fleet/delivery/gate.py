"""The gate: how an armed ``fleet watch --hook`` receives frames from its session's own channel.

With ``--transport auto`` a session has both paths: the channel pushes, and an ``asyncRewake`` hook
is armed whenever the session is idle. The channel holds the state file and decides what goes
where; the hook, when it arms, does not deliver by itself but waits at the channel's gate for the
frames the channel routes to it (pushes Claude Code did not take, or everything, when the session
has no channels). One frame batch per arm: the hook writes it to stderr and exits 2, which wakes the
session; the next turn's end arms it again.

The gate is a Unix socket in Linux's abstract namespace (no file to leave behind or to outgrow the
108-byte path limit), named from the state file's path; only a process of the same user may connect
(``SO_PEERCRED``). Messages are one JSON object a line: the hook sends ``{"arm": {"pid": N}}``; the
channel answers ``{"frames": [...]}`` once it has some, or ``{"busy": true}`` when another arm is
already waiting (this one exits 0, as a second arm does).

A hook that took frames keeps its end open until its process exits: its feedback reaches Claude
Code only then, so the channel's ledger judges a hook delivery from the moment the connection closes,
not from the hand-out (a hook starved of CPU between the two must not have its frames counted lost,
and handed a second time, while they are still on their way: :meth:`Gate.running`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import struct
import threading
import time
from pathlib import Path

from fleet.delivery.frames import Frame
from fleet.ids import digest
from fleet.wire import RecordError, dump, load

log = logging.getLogger(__name__)


RUNNING_LONGEST = 30.0
"""Seconds a hook handed frames is waited for to exit before its hand-out is judged regardless (as
long as the ledger's patience)."""
_HELD: list[socket.socket] = []
"""The hook's end of a gate that handed it frames, open until the process exits (:func:`wait`)."""


def address(state_path: Path) -> bytes:
    """The gate's abstract socket name for a state file."""
    return b"\0fleet-gate-" + digest(str(state_path))[:24].encode()


def peer_uid(conn: socket.socket) -> int:
    """The user id of the process on the other end of a Unix socket (``SO_PEERCRED``)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


class Gate:
    """The channel's side: accepts one armed hook at a time and hands it frames."""

    def __init__(self, state_path: Path) -> None:
        self.address = address(state_path)
        self._sock: socket.socket | None = None
        self._armed: socket.socket | None = None
        self._lock = threading.Lock()
        self.arm_changed = threading.Condition(self._lock)
        """Notified when a hook arms or its arm ends."""
        self._stop = threading.Event()
        self._out: list[tuple[float, socket.socket]] = []
        """Hooks handed frames whose process has not exited yet (hand-out time, connection)."""

    def start(self) -> None:
        """Listen (a failure to bind is logged: the hook then delivers on its own)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(self.address)
        except OSError as exc:
            log.warning("cannot open the hook gate: %s", exc)
            sock.close()
            return
        sock.listen(4)
        self._sock = sock
        threading.Thread(target=self._accept, name="fleet-channel-gate", daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            armed, self._armed = self._armed, None
            out, self._out = self._out, []
            self.arm_changed.notify_all()
        for s in (armed, self._sock, *(c for _, c in out)):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.close()

    @property
    def armed(self) -> bool:
        with self._lock:
            return self._armed is not None

    def wait_armed(self, timeout: float) -> bool:
        with self._lock:
            self.arm_changed.wait_for(lambda: self._armed is not None or self._stop.is_set(), timeout)
            return self._armed is not None

    def send(self, frames: list[Frame]) -> bool:
        """Hand ``frames`` to the armed hook (which then wakes the session); False when none is armed
        or it went away (nothing was handed then)."""
        with self._lock:
            conn, self._armed = self._armed, None
            self.arm_changed.notify_all()
        if conn is None:
            return False
        try:
            conn.sendall(json.dumps({"frames": dump(frames)}).encode() + b"\n")
        except OSError as exc:
            log.info("the armed hook went away before its frames: %s", exc)
            with contextlib.suppress(OSError):
                conn.close()
            return False
        with self._lock:
            self._out.append((time.monotonic(), conn))
        return True

    def running(self, longest: float = RUNNING_LONGEST) -> bool:
        """Whether a hook handed frames is still running (its connection open: it closes when the
        process exits, and only then does Claude Code take its feedback). One still running
        ``longest`` seconds after its hand-out is no longer waited for (a hook that hangs must not
        hold its frames back for ever: they are then judged as any hand-out is)."""
        now = time.monotonic()
        with self._lock:
            out, self._out = self._out, []
        keep = []
        for at, conn in out:
            if now < at + longest and _alive(conn):
                keep.append((at, conn))
            else:
                with contextlib.suppress(OSError):
                    conn.close()
        with self._lock:
            self._out = keep + self._out
            return bool(self._out)

    def _accept(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            try:
                if peer_uid(conn) != os.getuid():
                    conn.close()
                    continue
                conn.settimeout(5.0)
                line = conn.makefile("rb").readline(4096)
                conn.settimeout(None)
                if not json.loads(line or b"{}").get("arm"):
                    conn.close()
                    continue
            except (OSError, ValueError):
                conn.close()
                continue
            with self._lock:
                if self._armed is not None and _alive(self._armed):
                    with contextlib.suppress(OSError):
                        conn.sendall(b'{"busy": true}\n')
                    conn.close()
                    continue
                self._armed = conn
                self.arm_changed.notify_all()


def _alive(conn: socket.socket) -> bool:
    """Whether an armed hook's connection is still open (it closes when the hook process dies)."""
    try:
        conn.setblocking(False)
        try:
            return conn.recv(1, socket.MSG_PEEK) != b""
        except BlockingIOError:
            return True
        finally:
            conn.setblocking(True)
    except OSError:
        return False


# ---------------------------------------------------------------- the hook's side


class NoGate(Exception):
    """No channel answers at the gate (it is not running, or not in auto mode)."""


def arm(state_path: Path, *, pid: int) -> socket.socket:
    """Connect to the gate and arm; returns the connection to wait on. Raises :class:`NoGate`."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address(state_path))
        sock.sendall(json.dumps({"arm": {"pid": pid}}).encode() + b"\n")
    except OSError as exc:
        sock.close()
        raise NoGate(str(exc)) from None
    return sock


def wait(sock: socket.socket) -> list[Frame] | None:
    """Block until the channel answers: the frames to deliver, ``[]`` when another arm is waiting,
    None when the channel went away (the caller then delivers on its own). Given frames, the
    connection stays open until this process exits: that is how the channel knows the hook's
    output is on its way to Claude Code (:meth:`Gate.running`)."""
    frames: list[Frame] | None = None
    try:
        line = sock.makefile("rb").readline(64 << 20)
        msg = json.loads(line) if line else None
        if msg is not None:
            frames = [] if msg.get("busy") else [load(Frame, f) for f in msg["frames"]]
    except OSError:
        return None
    except (ValueError, KeyError, TypeError, AttributeError, RecordError):
        log.warning("the channel's gate answered something that is not frames: %r", line[:200])
    finally:
        if frames:
            _HELD.append(sock)
        else:
            with contextlib.suppress(OSError):
                sock.close()
    return frames
