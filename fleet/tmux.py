"""The tmux adapter: the only module that talks to tmux (through a ``libtmux.Server``).

What callers may rely on (docs/design.md §6):

- Identity lives in user options, never in names, titles or indexes: a session carries
  ``@fleet_wave`` (the wave id), a window ``@fleet_wavelet`` (the wavelet id), a pane
  ``@fleet_wave``, ``@fleet_wavelet`` and ``@fleet_participant``. Objects are addressed by tmux id
  (``$N``, ``@N``, ``%N``), so a user's ``base-index`` or renamed windows change nothing.
- A pane's agent is the pane's own command, executed by tmux without a shell (argv with several
  items), so nothing in it is re-quoted or expanded. A pane is first created running a placeholder,
  given its options and ``remain-on-exit on``, and only then respawned into the agent: an agent
  that dies at once leaves a dead pane with its exit status and last lines, never a vanished one.
- No string fleet passes reaches a shell or tmux's format expander. tmux format-expands some
  arguments (``new-session -s``, ``-n`` window names, ``respawn-pane -c``: ``#(cmd)`` there runs
  ``cmd`` through ``/bin/sh``), so those go through :func:`literal` (``#`` doubled, which tmux reads as
  one ``#``); every argument's trailing ``;`` (tmux's command separator) is escaped
  (:func:`_escape`). The command, ``-e`` environment and option values are never expanded.
- A command over tmux's length limit is refused with an error, never truncated.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass

import libtmux
from libtmux.exc import LibTmuxException

from fleet import errors

PLACEHOLDER = ["tail", "-f", "/dev/null"]
"""What a pane runs between creation and respawn into its agent (holds the pane open, reads nothing)."""

MAX_COMMAND_BYTES = 16000
"""tmux refuses a command of about 16 KiB or more ("command too long")."""

ECHO_WITHIN = 5.0
"""Seconds :meth:`Tmux.type_line` waits for a typed line to show before it presses Enter anyway."""

WAITING = "@fleet_waiting"
"""The window option that says a pane of the window waits on the operator (``dialog: <first line>``,
or another waiter's reason); unset when nothing waits. A status line shows it with
``#{?@fleet_waiting,[#{@fleet_waiting}],}`` in ``window-status-format``."""

PANE_FORMAT = "\t".join(
    [
        "#{pane_id}",
        "#{window_id}",
        "#{session_id}",
        "#{session_name}",
        "#{@fleet_wave}",
        "#{@fleet_wavelet}",
        "#{@fleet_participant}",
        "#{pane_dead}",
        "#{pane_dead_status}",
        "#{pane_pid}",
        "#{pane_dead_signal}",
        "#{pane_start_command}",
    ]
)


@dataclass(frozen=True)
class PaneInfo:
    pane_id: str
    window_id: str
    session_id: str
    session_name: str
    wave: str
    wavelet: str
    participant: str
    dead: bool
    dead_status: int | None
    pid: int | None
    start_command: str
    dead_signal: int | None = None
    """The signal that ended a dead pane's process (tmux records either this or ``dead_status``)."""

    @property
    def alive(self) -> bool:
        return not self.dead


def server(socket: str | None = None) -> libtmux.Server:
    """The tmux server fleet works in.

    ``socket`` (``--socket``) or ``FLEET_TMUX_SOCKET`` names it: a path (contains ``/``) or a socket
    name (``tmux -L``). Otherwise, inside tmux, the enclosing server; else the default server.
    """
    if shutil.which("tmux") is None:
        raise errors.ToolMissing(
            "tmux is not installed: install it (Debian/Ubuntu: `sudo apt-get install tmux`,"
            " macOS: `brew install tmux`) and try again"
        )
    socket = socket or os.environ.get("FLEET_TMUX_SOCKET") or None
    if socket:
        return libtmux.Server(socket_path=socket) if "/" in socket else libtmux.Server(socket_name=socket)
    enclosing = os.environ.get("TMUX", "")
    if enclosing:
        return libtmux.Server(socket_path=enclosing.split(",")[0])
    return libtmux.Server()


_NOT_TEXT = re.compile(r"[\s\u2500-\u257f]+")  # whitespace and box-drawing lines


def _squeezed(text: str) -> str:
    return _NOT_TEXT.sub("", text)


def _escape(arg: str) -> str:
    """tmux eats a trailing ``;`` of an argument as a command separator and reads a final ``\\;`` as
    a literal ``;`` (so ``a\\;`` must be sent as ``a\\\\;``): every trailing ``;`` becomes ``\\;``."""
    return arg[:-1] + "\\;" if arg.endswith(";") else arg


def literal(arg: str) -> str:
    """``arg`` for an argument tmux format-expands (names, ``-c``): ``#`` doubled (``##`` is a literal
    ``#``, so ``#(…)``, ``#{…}`` and ``#[…]`` stay text), the trailing ``;`` escaped."""
    return _escape(arg.replace("#", "##"))


def check_length(argv: Sequence[str], what: str) -> None:
    size = sum(len(a.encode()) + 1 for a in argv)
    if size > MAX_COMMAND_BYTES:
        raise errors.UsageError(
            f"the command for {what} is {size} bytes, over tmux's limit of about {MAX_COMMAND_BYTES}:"
            " shorten its arguments (the agent's extra args, or put long settings in a file)"
        )


@dataclass(frozen=True)
class SessionRef:
    """A wave's tmux session: ``id`` (``$3``) for commands, ``name`` (the wave's) for people."""

    id: str
    name: str


class Tmux:
    """fleet's view of one tmux server: sessions per wave, windows per wavelet, panes per participant."""

    def __init__(self, srv: libtmux.Server) -> None:
        self.srv = srv

    def _cmd(self, *args: str) -> list[str]:
        try:
            res = self.srv.cmd(*args)
        except LibTmuxException as exc:
            raise errors.FleetError(f"tmux {args[0]} failed: {exc}") from None
        if res.stderr:
            msg = " ".join(res.stderr).strip()
            if "no server running" in msg or "error connecting" in msg:
                return []
            raise errors.FleetError(f"tmux {args[0]} failed: {msg}")
        return list(res.stdout)

    def alive(self) -> bool:
        return bool(self.srv.is_alive())

    # ---------------------------------------------------------------- lookups

    def panes(self) -> list[PaneInfo]:
        """Every pane on the server (fleet's or not)."""
        if not self.alive():
            return []
        out = []
        for line in self._cmd("list-panes", "-a", "-F", PANE_FORMAT):
            f = line.split("\t")
            if len(f) < 12:
                continue
            out.append(
                PaneInfo(
                    pane_id=f[0],
                    window_id=f[1],
                    session_id=f[2],
                    session_name=f[3],
                    wave=f[4],
                    wavelet=f[5],
                    participant=f[6],
                    dead=f[7] == "1",
                    dead_status=int(f[8]) if f[8].lstrip("-").isdigit() else None,
                    pid=int(f[9]) if f[9].isdigit() else None,
                    dead_signal=int(f[10]) if f[10].isdigit() else None,
                    start_command="\t".join(f[11:]),
                )
            )
        return out

    def fleet_panes(self, wave_id: str) -> list[PaneInfo]:
        return [p for p in self.panes() if p.wave == wave_id and p.participant]

    def wave_session(self, wave_id: str) -> SessionRef | None:
        """The session of wave ``wave_id`` (its ``@fleet_wave``), id and name from one tmux command;
        None when there is none, or no server answers (as :meth:`alive` would say: this is the same
        ``list-sessions``, so a status costs one tmux command here, not four)."""
        try:
            res = self.srv.cmd("list-sessions", "-F", "#{session_id}\t#{session_name}\t#{@fleet_wave}")
        except LibTmuxException:
            return None
        if res.returncode != 0:
            return None
        for line in res.stdout:
            sid, _, rest = line.partition("\t")
            name, _, wave = rest.rpartition("\t")  # (a wave id has no tab; a name might)
            if wave == wave_id:
                return SessionRef(sid, name)
        return None

    def find_session(self, wave_id: str) -> str | None:
        """The id of wave ``wave_id``'s session (:meth:`wave_session`), or None."""
        ref = self.wave_session(wave_id)
        return ref.id if ref else None

    def find_window(self, session_id: str, wavelet_id: str) -> str | None:
        for line in self._cmd("list-windows", "-t", session_id, "-F", "#{window_id}\t#{@fleet_wavelet}"):
            wid, _, wavelet = line.partition("\t")
            if wavelet == wavelet_id:
                return wid
        return None

    def names(self, target: str) -> tuple[str, str]:
        """(session name, window name) of ``target`` (a session or window id), for people: tmux's
        ids (``$0``, ``@0``) mean nothing to them. ('', '') when tmux does not know it."""
        if not target or not self.alive():
            return "", ""
        try:
            got = self._cmd("display-message", "-p", "-t", target, "#{session_name}\t#{window_name}")
        except errors.FleetError:
            return "", ""
        session, _, window = (got[0] if got else "").partition("\t")
        return session, window

    def window_panes(self, window_id: str) -> list[str]:
        return self._cmd("list-panes", "-t", window_id, "-F", "#{pane_id}")

    # ---------------------------------------------------------------- creation

    def _session_name(self, wave_name: str) -> str:
        taken = set(self._cmd("list-sessions", "-F", "#{session_name}")) if self.alive() else set()
        base = wave_name.replace(".", "_").replace(":", "_")
        name, n = base, 2
        while name in taken:
            name, n = f"{base}-{n}", n + 1
        return name

    def new_session(
        self, wave_id: str, wave_name: str, window_name: str, wavelet_id: str
    ) -> tuple[str, str, str]:
        """A detached session for the wave with one placeholder window: (session, window, pane) ids."""
        name = self._session_name(wave_name)
        out = self._cmd(
            "new-session", "-d", "-P", "-F", "#{session_id}\t#{window_id}\t#{pane_id}",
            "-s", literal(name), "-n", literal(window_name), "-x", "220", "-y", "60", *PLACEHOLDER,
        )  # fmt: skip
        sid, wid, pid = out[0].split("\t")
        self._cmd("set-option", "-t", sid, "@fleet_wave", wave_id)
        self._tag_window(wid, wave_id, wavelet_id)
        return sid, wid, pid

    def new_window(self, session_id: str, wave_id: str, window_name: str, wavelet_id: str) -> tuple[str, str]:
        out = self._cmd(
            "new-window", "-d", "-P", "-F", "#{window_id}\t#{pane_id}", "-t", f"{session_id}:",
            "-n", literal(window_name), *PLACEHOLDER,
        )  # fmt: skip
        wid, pid = out[0].split("\t")
        self._tag_window(wid, wave_id, wavelet_id)
        return wid, pid

    def _tag_window(self, window_id: str, wave_id: str, wavelet_id: str) -> None:
        args: list[str] = []
        for key, value in (
            ("@fleet_wave", wave_id),
            ("@fleet_wavelet", wavelet_id),
            ("pane-border-status", "top"),
            ("pane-border-format", " #{@fleet_participant} "),
        ):
            args += [";", "set-option", "-w", "-t", window_id, key, value]
        self._cmd(*args[1:])

    def split(self, window_id: str) -> str:
        """A new placeholder pane in ``window_id``."""
        # tiled after each split keeps room for the next: tmux refuses to split a pane that is too small
        out = self._cmd(
            "split-window", "-d", "-P", "-F", "#{pane_id}", "-t", window_id, *PLACEHOLDER,
            ";", "select-layout", "-t", window_id, "tiled",
        )  # fmt: skip
        return out[0]

    def tag_pane(self, pane_id: str, wave_id: str, wavelet_id: str, participant: str) -> None:
        """Set the pane's identity options and ``remain-on-exit`` (one tmux invocation)."""
        args: list[str] = []
        for key, value in (
            ("remain-on-exit", "on"),
            ("@fleet_wave", wave_id),
            ("@fleet_wavelet", wavelet_id),
            ("@fleet_participant", participant),
        ):
            args += [";", "set-option", "-p", "-t", pane_id, key, _escape(value)]
        self._cmd(*args[1:])

    def respawn(self, pane_id: str, argv: Sequence[str], *, cwd: str | None = None,
                env: dict[str, str] | None = None) -> None:  # fmt: skip
        """Replace whatever ``pane_id`` runs with ``argv`` (no shell). History is kept on a dead pane."""
        if len(argv) == 1:  # one word would go through the shell; `env WORD` is execvp'd like the rest
            argv = ["env", *argv]
        check_length(argv, f"pane {pane_id}")
        args = ["respawn-pane", "-k", "-t", pane_id]
        if cwd:
            args += ["-c", literal(cwd)]
        for k, v in (env or {}).items():
            args += ["-e", _escape(f"{k}={v}")]
        self._cmd(*args, *[_escape(a) for a in argv])

    def arrange(self, window_id: str, arrangement: str, main_size: str | None = None) -> None:
        if main_size and arrangement.startswith("main-"):
            opt = "main-pane-width" if arrangement == "main-vertical" else "main-pane-height"
            self._cmd("set-option", "-w", "-t", window_id, opt, _escape(main_size))
        self._cmd("select-layout", "-t", window_id, _escape(arrangement))

    # ---------------------------------------------------------------- I/O and teardown

    def capture(self, pane_id: str, history: bool = False) -> list[str]:
        args = ["capture-pane", "-p", "-J", "-t", pane_id]
        if history:
            args += ["-S", "-"]
        return self._cmd(*args)

    def send_enter(self, pane_id: str) -> None:
        self._cmd("send-keys", "-t", pane_id, "Enter")

    def type_line(self, pane_id: str, line: str, echo_within: float = ECHO_WITHIN) -> None:
        """Type ``line`` into a pane, and press Enter once the pane shows it (or ``echo_within``
        seconds have passed: a program that does not echo still gets its Enter).

        The wait is what makes the Enter a keypress of its own. A terminal program reads its input
        in chunks; Claude Code takes a chunk that holds text and Enter together as a paste, whose
        Enter is a newline, not a submit, so two lines typed back to back on a busy machine became
        one prompt. Text typed once it echoes is read apart from the Enter that follows it.
        """
        before = self._echoes(pane_id, line)
        self._cmd("send-keys", "-t", pane_id, "-l", line)
        deadline = time.monotonic() + echo_within
        while self._echoes(pane_id, line) <= before and time.monotonic() < deadline:
            time.sleep(0.02)
        self._cmd("send-keys", "-t", pane_id, "Enter")

    def _echoes(self, pane_id: str, line: str) -> int:
        """How often the end of ``line`` is on the pane's screen and history, spaces and box lines
        aside (a program wraps its input box at its own width)."""
        tail = _squeezed(line)[-40:]
        return _squeezed("".join(self.capture(pane_id, history=True))).count(tail) if tail else 0

    def send_key(self, pane_id: str, key: str) -> None:
        """Press one named key (tmux's names: ``Down``, ``Enter``, ``Escape``) in a pane."""
        self._cmd("send-keys", "-t", pane_id, _escape(key))

    def flag_window(self, window_id: str, reason: str | None) -> None:
        """Set the window's :data:`WAITING` option to ``reason`` (what the operator is waited on for),
        or unset it (``None``). Shared by every waiter (a dialog, a permission prompt): each sets its own
        reason and clears only a reason it set (:meth:`window_flag` tells which)."""
        if reason is None:
            self._cmd("set-option", "-w", "-q", "-u", "-t", window_id, WAITING)
        else:
            self._cmd("set-option", "-w", "-t", window_id, WAITING, _escape(reason))

    def window_flag(self, window_id: str) -> str:
        """The window's :data:`WAITING` option ('' when unset)."""
        out = self._cmd("show-options", "-w", "-q", "-v", "-t", window_id, WAITING)
        return out[0] if out else ""

    def kill_pane(self, pane_id: str) -> None:
        self._cmd("kill-pane", "-t", pane_id)

    def kill_window(self, window_id: str) -> None:
        self._cmd("kill-window", "-t", window_id)

    def kill_session(self, session_id: str) -> None:
        self._cmd("kill-session", "-t", session_id)
