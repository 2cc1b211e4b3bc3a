"""The tmux adapter: the only module that talks to tmux (through a ``libtmux.Server``).

What callers may rely on (docs/design.md §6):

- Identity lives in user options, never in names, titles or indexes: a session carries
  ``@fleet_wave`` (the wave id), a window ``@fleet_wavelet`` (the wavelet id), a pane
  ``@fleet_wave``, ``@fleet_wavelet`` and ``@fleet_participant``. Objects are addressed by tmux id
  (``$N``, ``@N``, ``%N``), so a user's ``base-index`` or renamed windows change nothing.
- A pane's agent is the pane's own command, executed by tmux without a shell (argv with several
  items), so nothing in it is re-quoted or expanded. A pane gets its options and ``remain-on-exit
  on`` before its agent can exit: a placeholder pane before it is respawned into the agent, a pane
  split off with its agent in the same invocation (tmux runs an invocation's commands before it
  sees any process exit). An agent that dies at once leaves a dead pane with its exit status and
  last lines, never a vanished one.
- No string fleet passes reaches a shell or tmux's format expander. tmux format-expands some
  arguments (``new-session -s``, ``-n`` window names, ``-c`` of ``respawn-pane`` and
  ``split-window``: ``#(cmd)`` there runs ``cmd`` through ``/bin/sh``), so those go through
  :func:`literal` (``#`` doubled, which tmux reads as one ``#``, but for a run of ``#`` before ``[``,
  which it passes through); every argument's trailing ``;`` (tmux's command separator) is escaped
  (:func:`_escape`). The command, ``-e`` environment and option values are never expanded.
- A command over tmux's length limit is refused with an error, never truncated.
- A wavelet's panes are built in as few tmux invocations as its length limit allows: a new window in
  one (:meth:`Tmux.open_window`), then every pane split, tagged and started, the layout and the focus
  in one more (:meth:`Tmux.launch`; more only when the agents' command lines pass the limit together).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

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


def _pane_infos(lines: Sequence[str]) -> list[PaneInfo]:
    """Lines of ``list-panes -F PANE_FORMAT`` as panes."""
    out = []
    for line in lines:
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


_HASHES = re.compile(r"(#+)(\[?)")


def literal(arg: str) -> str:
    """``arg`` for an argument tmux format-expands (names, ``-c``): ``#`` doubled (``##`` is a literal
    ``#``, so ``#(…)`` and ``#{…}`` stay text), the trailing ``;`` escaped. A run of ``#`` before ``[``
    is left as it is: the expander copies ``#…#[`` through untouched (a style, for the status line to
    draw), so doubling it would change the text."""
    return _escape(_HASHES.sub(lambda m: m[0] if m[2] else m[1] * 2, arg))


def _size(argv: Sequence[str]) -> int:
    """Bytes ``argv`` takes in the message a tmux client sends its server (each argument and its NUL)."""
    return sum(len(a.encode()) + 1 for a in argv)


def check_length(argv: Sequence[str], what: str) -> None:
    size = _size(argv)
    if size > MAX_COMMAND_BYTES:
        raise errors.UsageError(
            f"the command for {what} is {size} bytes, over tmux's limit of about {MAX_COMMAND_BYTES}:"
            " shorten its arguments (the agent's extra args, or put long settings in a file)"
        )


@dataclass(frozen=True)
class PaneLaunch:
    """One pane for :meth:`Tmux.launch`: who it is and the agent it runs (argv executed without a shell)."""

    pane_id: str
    participant: str
    argv: Sequence[str]
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Session:
    """A tmux session as :meth:`Tmux.sessions` lists it."""

    session_id: str
    name: str
    wave: str
    """Its ``@fleet_wave`` ('' for a session that is not fleet's)."""


def _chain(commands: Sequence[Sequence[str]]) -> list[str]:
    """One tmux invocation's argv running ``commands`` in order (tmux's ``;`` between them)."""
    out: list[str] = []
    for command in commands:
        if out:
            out.append(";")
        out += command
    return out


def session_name(wave_name: str, taken: set[str]) -> str:
    """A session name for ``wave_name`` that is not in ``taken`` (``.`` and ``:`` are tmux target syntax)."""
    base = wave_name.replace(".", "_").replace(":", "_")
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name


class Tmux:
    """fleet's view of one tmux server: sessions per wave, windows per wavelet, panes per participant."""

    def __init__(self, srv: libtmux.Server) -> None:
        self.srv = srv

    def _cmd(self, *args: str, all_of_none: bool = False) -> list[str]:
        """Run one tmux command (or chain); its output lines. None when no server runs, and with
        ``all_of_none`` (a listing of everything: ``list-panes -a``) none when the server has no
        session left ("no current target": its last one was just killed)."""
        try:
            res = self.srv.cmd(*args)
            if res.stderr and "server exited unexpectedly" in " ".join(res.stderr):
                # reached a server on its way out (its last session just closed: tmux's exit-empty);
                # asked again, tmux answers as with no server, or a new-session starts one
                res = self.srv.cmd(*args)
        except LibTmuxException as exc:
            raise errors.FleetError(f"tmux {args[0]} failed: {exc}") from None
        if res.stderr:
            msg = " ".join(res.stderr).strip()
            if "no server running" in msg or "error connecting" in msg:
                return []
            if all_of_none and "no current target" in msg:
                return []
            raise errors.FleetError(f"tmux {args[0]} failed: {msg}")
        return list(res.stdout)

    def alive(self) -> bool:
        return bool(self.srv.is_alive())

    # ---------------------------------------------------------------- lookups

    def panes(self) -> list[PaneInfo]:
        """Every pane on the server (fleet's or not); none when no server runs. One tmux invocation."""
        return _pane_infos(self._cmd("list-panes", "-a", "-F", PANE_FORMAT, all_of_none=True))

    def fleet_panes(self, wave_id: str) -> list[PaneInfo]:
        return [p for p in self.panes() if p.wave == wave_id and p.participant]

    def wave_session(self, wave_id: str) -> Session | None:
        """The session of wave ``wave_id`` (its ``@fleet_wave``), id and name from one tmux command
        (:meth:`sessions`); None when there is none, or no server runs."""
        return next((s for s in self.sessions() if s.wave == wave_id), None)

    def find_session(self, wave_id: str) -> str | None:
        """The id of wave ``wave_id``'s session (:meth:`wave_session`), or None."""
        found = self.wave_session(wave_id)
        return found.session_id if found else None

    def find_window(self, session_id: str, wavelet_id: str) -> str | None:
        for line in self._cmd("list-windows", "-t", session_id, "-F", "#{window_id}\t#{@fleet_wavelet}"):
            wid, _, wavelet = line.partition("\t")
            if wavelet == wavelet_id:
                return wid
        return None

    def names(self, target: str) -> tuple[str, str]:
        """(session name, window name) of ``target`` (a session or window id), for people: tmux's
        ids (``$0``, ``@0``) mean nothing to them. ('', '') when tmux does not know it."""
        if not target:  # no server: tmux's "no server running" reads as no output
            return "", ""
        try:
            got = self._cmd("display-message", "-p", "-t", target, "#{session_name}\t#{window_name}")
        except errors.FleetError:
            return "", ""
        session, _, window = (got[0] if got else "").partition("\t")
        return session, window

    def window_of(self, session_id: str, wavelet_id: str) -> tuple[str, str] | None:
        """The wavelet's window in ``session_id`` and its active pane (whom a person there sees)."""
        fmt = "#{window_id}\t#{@fleet_wavelet}\t#{pane_id}"
        for line in self._cmd("list-windows", "-t", session_id, "-F", fmt):
            wid, _, rest = line.partition("\t")
            wavelet, _, active = rest.partition("\t")
            if wavelet == wavelet_id:
                return wid, active
        return None

    def screens(self, pane_ids: Sequence[str]) -> tuple[list[PaneInfo], dict[str, list[str]]]:
        """Every pane on the server (as :meth:`panes`) and the visible screens of ``pane_ids`` (a pane
        gone meanwhile has none), read in one tmux invocation: each screen follows a marker line that
        no screen can forge (a fresh random one per call)."""
        mark = f"fleet-screen-{uuid.uuid4().hex}"
        commands: list[list[str]] = [["list-panes", "-a", "-F", PANE_FORMAT]]
        for pane_id in pane_ids:
            commands += [
                # the pane's id from its own format, not spelled in the message: display-message runs
                # its text through strftime, and "%3" read back as " %3" (a width of 3)
                ["display-message", "-p", "-t", pane_id, f"{mark} #{{pane_id}}"],
                ["capture-pane", "-p", "-J", "-t", pane_id],
            ]
        try:
            out = self._cmd(*_chain(commands))
        except errors.FleetError:  # a pane went away between the listing and now: one at a time
            screens = {}
            for pane_id in pane_ids:
                with contextlib.suppress(errors.FleetError):
                    screens[pane_id] = self.capture(pane_id)
            return self.panes(), screens
        listing, screens, current = [], {}, None
        for line in out:
            if line.startswith(mark + " "):
                current = screens.setdefault(line[len(mark) + 1 :], [])
            elif current is None:
                listing.append(line)
            else:
                current.append(line)
        return _pane_infos(listing), screens

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

    def sessions(self) -> list[Session]:
        """Every session on the server (none when no server runs): one tmux invocation."""
        out = []
        for line in self._cmd("list-sessions", "-F", "#{session_id}\t#{@fleet_wave}\t#{session_name}"):
            sid, _, rest = line.partition("\t")
            wave, _, name = rest.partition("\t")
            out.append(Session(sid, name, wave))
        return out

    def open_window(
        self, window_name: str, *, session_id: str | None = None, new_session_name: str = ""
    ) -> tuple[str, str, str]:
        """A window with one placeholder pane, in ``session_id`` or (``None``) in a new detached session
        named ``new_session_name`` (pick it with :func:`session_name`): (session, window, pane) ids. One
        tmux invocation; the window and session get their tags from :meth:`launch`."""
        fmt = "#{session_id}\t#{window_id}\t#{pane_id}"
        if session_id is None:
            out = self._cmd(
                "new-session", "-d", "-P", "-F", fmt, "-s", literal(new_session_name),
                "-n", literal(window_name), "-x", "220", "-y", "60", *PLACEHOLDER,
            )  # fmt: skip
        else:
            out = self._cmd(
                "new-window", "-d", "-P", "-F", fmt, "-t", f"{session_id}:", "-n", literal(window_name),
                *PLACEHOLDER,
            )  # fmt: skip
        sid, wid, pid = out[0].split("\t")
        return sid, wid, pid

    def launch(
        self,
        wave_id: str,
        wavelet_id: str,
        launches: Sequence[PaneLaunch],
        *,
        window_id: str = "",
        tag_session: str = "",
        tag_window: bool = False,
        focus: str = "",
        arrangement: str = "",
        main_size: str | None = None,
    ) -> list[str]:
        """Start each launch's agent (exactly its argv, cwd and env, no shell) in a tagged pane of
        ``window_id`` with ``remain-on-exit on``: in its ``pane_id`` (respawned), or in a new pane split
        off the window. Then the window is laid out, and ``focus`` (a person may be looking at the
        window) is its active pane again. Returns the pane ids, in the order of ``launches``.

        ``tag_session`` / ``tag_window``: tag a session and window made just now (:meth:`open_window`).
        All of it is one tmux invocation, or as few as tmux's length limit needs (a pane's commands
        never straddle two); refused before anything runs when one pane's own commands are over it.
        A new pane is tagged in the invocation that creates it: tmux runs an invocation's commands
        before it sees any process exit, so even an agent that dies at once leaves a dead, tagged pane.
        """
        groups: list[list[list[str]]] = []
        if tag_session:
            groups.append([["set-option", "-t", tag_session, "@fleet_wave", wave_id]])
        if tag_window:
            groups.append(self._window_tags(window_id, wave_id, wavelet_id))
        mine: list[list[list[str]]] = []
        for one in launches:
            group = self._launch_commands(wave_id, wavelet_id, window_id, one)
            check_length(_chain(group), one.participant)
            mine.append(group)
        groups += mine
        tail: list[list[str]] = []
        if window_id and arrangement:
            tail += self._arrange_commands(window_id, arrangement, main_size)
        if focus:
            tail.append(["select-pane", "-t", focus])
        if tail:
            groups.append(tail)
        printed: list[str] = []
        batch: list[list[str]] = []
        for group in groups:
            if batch and _size(_chain([*batch, *group])) > MAX_COMMAND_BYTES:
                printed += self._cmd(*_chain(batch))
                batch = []
            batch += group
        if batch:
            printed += self._cmd(*_chain(batch))
        made = iter(printed)  # the new panes' ids, printed by their split-window in order
        return [one.pane_id or next(made) for one in launches]

    @staticmethod
    def _window_tags(window_id: str, wave_id: str, wavelet_id: str) -> list[list[str]]:
        return [
            ["set-option", "-w", "-t", window_id, key, value]
            for key, value in (
                ("@fleet_wave", wave_id),
                ("@fleet_wavelet", wavelet_id),
                ("pane-border-status", "top"),
                ("pane-border-format", " #{@fleet_participant} "),
            )
        ]

    @staticmethod
    def _launch_commands(wave_id: str, wavelet_id: str, window_id: str, one: PaneLaunch) -> list[list[str]]:
        argv = list(one.argv)
        if len(argv) == 1:  # one word would go through the shell; `env WORD` is execvp'd like the rest
            argv = ["env", *argv]
        where: list[str] = []
        if one.cwd:
            where += ["-c", literal(one.cwd)]
        for k, v in one.env.items():
            where += ["-e", _escape(f"{k}={v}")]
        command = [_escape(a) for a in argv]
        if one.pane_id:
            target, start = one.pane_id, []
        elif window_id:
            # Without -d the new pane becomes the window's active one, so the window as a target names
            # it in the commands after (its id is not known inside the invocation); tiled after each
            # split keeps room for the next (tmux refuses to split a pane that is too small).
            target = window_id
            start = [["split-window", "-P", "-F", "#{pane_id}", "-t", window_id, *where, *command],
                     ["select-layout", "-t", window_id, "tiled"]]  # fmt: skip
        else:
            raise errors.UsageError(f"no pane and no window to start {one.participant} in")
        tags = [
            ["set-option", "-p", "-t", target, key, _escape(value)]
            for key, value in (
                ("remain-on-exit", "on"),
                ("@fleet_wave", wave_id),
                ("@fleet_wavelet", wavelet_id),
                ("@fleet_participant", one.participant),
            )
        ]
        if start:
            return [*start, *tags]
        return [*tags, ["respawn-pane", "-k", "-t", target, *where, *command]]

    @staticmethod
    def _arrange_commands(window_id: str, arrangement: str, main_size: str | None) -> list[list[str]]:
        commands = []
        if main_size and arrangement.startswith("main-"):
            opt = "main-pane-width" if arrangement == "main-vertical" else "main-pane-height"
            commands.append(["set-option", "-w", "-t", window_id, opt, _escape(main_size)])
        return [*commands, ["select-layout", "-t", window_id, _escape(arrangement)]]

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
