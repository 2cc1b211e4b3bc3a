"""The campaign loop: a fleet process that reads STATE.md, spawns sessions into the campaign's wave,
and handles each session's settle (docs/campaigns.md).

Event-driven, one thread: it sleeps in ``select`` on its control socket (commands from ``fleet
campaign …`` and settles from the Stop hook fleet installs in each session) and on a ``pidfd`` of
the active session's pane process (its exit is a settle too). Nothing wakes it otherwise: an armed
loop waiting on a session uses no CPU.

What it owns (never an agent): ``loop_state``, ``active_session_id``, ``active_session_kind``, kept in
``.loop/owned.json`` and written over whatever STATE.md says on every read. One loop per campaign
(``.loop/loop.lock``, an flock released when the process dies). Everything it needs to resume is on
disk: the state, what it owns, and ``.loop/settles.log`` (every settle the hook reported, with how
many were handled), so a killed loop started again carries on exactly.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import fnmatch
import hashlib
import json
import logging
import os
import select
import shlex
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from fleet import errors
from fleet.campaign import disk, machine, registry
from fleet.campaign import state as st
from fleet.campaign.disk import Campaign
from fleet.delivery.gate import peer_uid

log = logging.getLogger(__name__)

OPERATOR = "operator"  # fleet.models.OPERATOR, without loading pydantic into the Stop hook

CONTROL_TIMEOUT = float(os.environ.get("FLEET_CAMPAIGN_CONTROL_TIMEOUT", "150"))
"""Seconds `fleet campaign pause|…` waits for the loop's answer: longer than a session's start (the
loop serves commands between events, and starting a session is one)."""

SPAWN_FAILED = "spawning the "
"""How ``last_error`` begins for a failed spawn (it stays until a spawn succeeds; other trouble
goes with the next command that reads STATE.md)."""

COMMANDS = ("poke", "settle", "pause", "resume", "next", "interrupt", "stop", "clear", "dismiss", "ping")


# ---------------------------------------------------------------- the loop's own records


@dataclass
class Owned:
    """What only the loop writes (``.loop/owned.json``)."""

    loop_state: st.LoopState = "idle"
    active_session_id: str | None = None
    active_session_kind: st.SessionKind = ""
    participant: str = ""
    wavelet: str = ""
    pane_id: str = ""
    head_at_spawn: str = ""
    spawned_on: dict[str, Any] = field(default_factory=dict)
    """The cursor the active session was spawned on."""
    handled_settles: int = 0
    layout: str = ""
    verify_floor: int = 0
    """verify_count never goes below the verifier sessions the loop saw settle."""
    last_error: str = ""
    preexisting: dict[str, str] = field(default_factory=dict)
    """Paths outside ``.wave/`` already changed when the active session started, with their content
    then: the user's, left out of the loop's commits for the session while they stay so."""
    keep_out: list[str] = field(default_factory=list)
    """Globs of paths (relative to the repository; ``dir/`` for all under it) the loop never stages
    in any commit, nor counts as a dirty tree: the user's own (``fleet campaign run --keep-out``)."""
    launching: dict[str, Any] = field(default_factory=dict)
    """A session being started (kind, wave, session_count, participant, what the marks replaced),
    from before the launch until its start is recorded: a loop killed in between finishes it."""
    cancelled: bool = False
    """The operator cancelled the current wave (`interrupt`, `dismiss`): failure_kind stays
    ``cancelled`` whatever an agent writes (a late write of the interrupted session included), until
    `clear`."""
    cancelled_status: st.WaveStatus | Literal[""] = ""
    """The wave_status held while cancelled: ``failed`` (an executor's wave, the seed's), or what the
    wave was when its verifier was interrupted (the verifier does not run the wave)."""


def socket_address(c: Campaign) -> bytes:
    """The control socket's name in Linux's abstract namespace: nothing on disk that a killed loop
    leaves behind (the kernel frees the name with the process); only the same user is served
    (``SO_PEERCRED``, :meth:`Loop._serve_one`), as the gate does (:mod:`fleet.delivery.gate`)."""
    key = hashlib.sha256(str(c.dir.resolve()).encode()).hexdigest()[:24]
    return f"\0fleet-campaign-{os.geteuid()}-{key}".encode()


def load_owned(c: Campaign) -> Owned | None:
    f = c.loop_dir / "owned.json"
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise errors.CorruptState(f"{f} is not valid JSON ({exc}): fix or remove it") from None
    return Owned(**{k: v for k, v in data.items() if k in Owned.__dataclass_fields__})


def save_owned(c: Campaign, o: Owned) -> None:
    c.loop_dir.mkdir(parents=True, exist_ok=True)
    f = c.loop_dir / "owned.json"
    tmp = f.with_name(f".owned.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(o), indent=1), encoding="utf-8")
    os.replace(tmp, f)


def read_settles(c: Campaign) -> list[dict[str, Any]]:
    try:
        lines = (c.loop_dir / "settles.log").read_bytes().splitlines()  # a damaged line is skipped
    except FileNotFoundError:
        return []
    out = []
    for ln in lines:
        with contextlib.suppress(ValueError):
            out.append(json.loads(ln))
    return out


def report_settle(loop_dir: Path, payload: dict[str, Any]) -> None:
    """What the Stop hook does: append the settle to ``settles.log`` and tell the loop (if it runs)."""
    line = json.dumps(payload, separators=(",", ":")) + "\n"
    loop_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(loop_dir / "settles.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    c = Campaign(loop_dir.parent.parent.parent.parent, loop_dir.parent.name)
    with contextlib.suppress(OSError):
        send(c, {"op": "poke"}, timeout=2.0)


def send(c: Campaign, msg: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    """One request to the running loop; OSError when none listens."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(socket_address(c))
        s.sendall(json.dumps(msg).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf or b"{}")  # type: ignore[no-any-return]


def running(c: Campaign) -> bool:
    try:
        return bool(send(c, {"op": "ping"}, timeout=2.0).get("ok"))
    except (OSError, ValueError):
        return False


def kept_out(paths: list[str], globs: list[str]) -> list[str]:
    """Those of ``paths`` that ``--keep-out`` globs match (``dir/`` matches everything under it)."""

    def out(p: str) -> bool:
        return any(p.startswith(g) if g.endswith("/") else fnmatch.fnmatchcase(p, g) for g in globs)

    return [p for p in paths if out(p)]


def users_paths(c: Campaign, o: Owned) -> list[str]:
    """What the loop leaves out of a session's commit: the paths that were changed before the
    session started and are unchanged since, and whatever ``--keep-out`` names (otherwise a path
    changed while the session ran cannot be told from its own work: that is committed with it,
    docs/campaigns.md says so)."""
    left: set[str] = set(kept_out(disk.dirty(c.root), o.keep_out)) if o.keep_out else set()
    if o.preexisting:
        now = disk.fingerprint(c.root, list(o.preexisting))
        left |= {p for p, h in o.preexisting.items() if now.get(p) == h}
    return sorted(left)


def dirty_outside(c: Campaign, o: Owned) -> list[str]:
    """Changed paths of the tree outside ``.wave/`` that ``--keep-out`` does not name: what makes a
    tree dirty for arming the loop."""
    dirty = disk.dirty(c.root)
    kept = set(kept_out(dirty, o.keep_out))
    return [p for p in dirty if p not in kept]


def commit_session(c: Campaign, o: Owned, message: str) -> str:
    return disk.commit_all(c.root, message, leave=users_paths(c, o))


def dirty_message(c: Campaign, dirty: list[str]) -> str:
    more = " …" if len(dirty) > 5 else ""
    return (
        f"the work tree of {c.root} has uncommitted changes ({', '.join(dirty[:5])}{more}): commit or"
        " stash them first, so each wave starts from a clean tree, or name files you keep editing with"
        " `fleet campaign run --keep-out GLOB` (never committed); nothing was started"
    )


class LoopLock:
    """The one-loop-per-campaign flock (``.loop/loop.lock``)."""

    def __init__(self, c: Campaign) -> None:
        self.c = c
        self.fd = -1

    def acquire(self) -> None:
        self.c.loop_dir.mkdir(parents=True, exist_ok=True)
        path = self.c.loop_dir / "loop.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.read(fd, 32).decode(errors="replace").strip()
            os.close(fd)
            raise errors.Conflict(
                f"a loop already runs for campaign {self.c.id} (pid {pid or '?'}): use `fleet campaign"
                " status` to see it, `fleet campaign stop` to end it"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# ---------------------------------------------------------------- state with the loop's fields


def overrule(s: st.State, o: Owned) -> st.State:
    """``s`` with what the loop owns put back (an agent that wrote these is overruled)."""
    s.loop_state = o.loop_state
    s.active_session_id = o.active_session_id
    s.active_session_kind = o.active_session_kind
    s.verify_count = max(s.verify_count, o.verify_floor)
    if o.cancelled:
        s.wave_status = o.cancelled_status or "failed"
        s.failure_kind = "cancelled"
    return s


def read_state(c: Campaign) -> tuple[st.State, Owned]:
    s = c.read()
    o = load_owned(c)
    if o is None:
        o = Owned(
            s.loop_state, s.active_session_id, s.active_session_kind, verify_floor=s.verify_count,
            cancelled=s.failure_kind == "cancelled",
            cancelled_status=s.wave_status if s.failure_kind == "cancelled" else "",
        )  # fmt: skip
    return overrule(s, o), o


def snapshot(s: st.State) -> dict[str, Any]:
    return {k: getattr(s, k) for k in st.FIELDS}


def from_snapshot(d: dict[str, Any], like: st.State) -> st.State:
    s = copy.deepcopy(like)
    for k, v in d.items():
        if k in st.FIELDS:
            setattr(s, k, v)
    return s


# ---------------------------------------------------------------- commands without a loop


def offline(c: Campaign, op: str) -> str:
    """Apply a control command to STATE.md when no loop runs (the same transitions as the loop's)."""
    lock = LoopLock(c)
    lock.acquire()  # no loop may start meanwhile
    try:
        got = read_or_owned(c, op)
        if isinstance(got, st.StateError):
            o = load_owned(c) or Owned()
            msg = transition(c, None, o, op, kill=None)
            save_owned(c, o)
            return msg + unreadable_note(got)
        s, o = got
        msg = transition(c, s, o, op, kill=None)
        c.write(overrule(s, o))
        save_owned(c, o)
        return msg
    finally:
        lock.release()


NEEDS_NO_STATE = ("pause", "resume", "stop", "interrupt")
"""Control commands that act on the loop's own record alone when STATE.md cannot be read, so the
operator keeps control of a loop whose file an agent (or a hand) broke."""


def read_or_owned(c: Campaign, op: str) -> tuple[st.State, Owned] | st.StateError:
    """The state for ``op``, or the reason STATE.md cannot be read if ``op`` can do without it."""
    try:
        return read_state(c)
    except st.StateError as exc:
        if op not in NEEDS_NO_STATE:
            raise
        return exc


def unreadable_note(exc: st.StateError) -> str:
    return (
        f" (STATE.md was not read: {exc.message}; nothing is spawned and nothing committed until it parses)"
    )


def transition(
    c: Campaign, s: st.State | None, o: Owned, op: str, kill: Callable[[Owned], None] | None
) -> str:
    """The control commands' effect on the state (spawning is the loop's, after this). ``s`` is None
    when STATE.md cannot be read: only :data:`NEEDS_NO_STATE` commands come here then, and they
    change only what the loop owns."""
    if op == "pause":
        o.loop_state = "paused"
        return "paused: no new session is spawned; the active one carries on"
    if op == "resume":
        o.loop_state = "armed"
        return "armed"
    if op == "stop":
        o.loop_state = "idle"
        return "stopped"
    if s is None:
        if op != "interrupt":
            raise errors.UsageError(f"`{op}` needs STATE.md")
        was = (
            o.participant
            or o.active_session_id
            or (o.launching.get("participant", "") if o.launching else "")
        )
        kind = o.active_session_kind or (o.launching.get("kind", "") if o.launching else "")
        if kill and o.active_session_id:
            kill(o)
        o_wavelet = o.wavelet
        _clear_active(o)
        o.loop_state = "idle"
        o.cancelled = True
        # a verifier's wave keeps whatever status the file will hold; an executor's is failed
        o.cancelled_status = "" if kind == "verifier" else "failed"
        return "wave cancelled" + _ended(was, o_wavelet, kill)
    if op == "clear":
        if s.failure_kind != "cancelled":
            raise errors.UsageError(
                f"wave {s.current_wave} is not cancelled (failure_kind {s.failure_kind or 'empty'}):"
                " nothing to clear"
            )
        held = o.cancelled_status or "failed"
        o.cancelled = False
        o.cancelled_status = ""
        s.failure_kind = ""
        s.wave_status = "pending" if held == "failed" else held
        if s.row(s.current_wave).get("Status") == "cancelled":
            s.row(s.current_wave).set("Status", "pending")
        return f"wave {s.current_wave} cleared: pending (resume or run the loop to try it again)"
    if op == "interrupt":
        starting = o.launching.get("participant", "") if o.launching else ""
        was = o.participant or o.active_session_id or starting
        if not was and s.wave_status == "all_complete":
            return f"campaign {s.campaign_id} is complete and nothing runs: nothing to interrupt"
        if not was and o.cancelled:
            return (
                f"wave {s.current_wave} is already cancelled and nothing runs: nothing to interrupt"
                " (`fleet campaign clear` to try it again)"
            )
        kind = o.active_session_kind or (o.launching.get("kind", "") if o.launching else "")
        if kill and o.active_session_id:
            kill(o)
        o_wavelet = o.wavelet or (f"{s.campaign_id}/{starting}" if starting else "")
        users = Owned(preexisting=dict(o.preexisting))
        _clear_active(o)
        # a verifier checks the plan, it does not run the wave: its wave keeps its status (the
        # initial check's wave 0 did not fail); an executor's wave is the seed's failed/cancelled
        hold: st.WaveStatus = s.wave_status if kind == "verifier" else "failed"
        s.wave_status = hold
        s.failure_kind = "cancelled"
        s.user_question = ""
        o.loop_state = "idle"
        o.cancelled = True
        o.cancelled_status = hold
        if kind != "verifier":
            s.row(s.current_wave).set("Status", "cancelled")
        save_owned(c, o)  # before the commit: the cancellation is in it, and holds if we die here
        c.write(overrule(s, o))
        if was:  # a session was ended mid-turn: its work is committed; with none there is nothing to
            message = (
                "wave verify: cancelled by the operator"
                if kind == "verifier"
                else f"wave {s.current_wave} (failed): cancelled by the operator"
            )
            sha = commit_session(c, users, message)
            if sha and kind != "verifier":
                s.row(s.current_wave).set("Commit", sha)
        what = (
            f"the verifier of wave {s.current_wave} cancelled"
            if kind == "verifier"
            else (f"wave {s.current_wave} cancelled")
        )
        return what + _ended(was, o_wavelet, kill)
    if op == "dismiss":
        if s.wave_status != "awaiting_user":
            raise errors.UsageError(
                f"no question to dismiss: wave_status is {s.wave_status}, not awaiting_user"
            )
        if kill and o.active_session_id:
            kill(o)
        was, o_wavelet = o.participant or o.active_session_id, o.wavelet
        _clear_active(o)
        s.wave_status = "failed"
        s.failure_kind = "cancelled"
        s.user_question = ""
        o.loop_state = "idle"
        o.cancelled = True
        o.cancelled_status = "failed"
        s.row(s.current_wave).set("Status", "cancelled")
        return f"question dismissed: wave {s.current_wave} cancelled and the loop stopped" + _ended(
            was, o_wavelet, kill
        )
    raise errors.UsageError(f"unknown loop command {op!r}")


def _ended(was: str | None, wavelet: str, kill: Callable[[Owned], None] | None) -> str:
    if not was:
        return ""
    if kill is not None:
        return f" (session {was} ended)"
    # no loop runs: nothing here holds the session's pane, and it would carry on unseen
    how = f": end it with `fleet kill {wavelet}`" if wavelet else ""
    return f"; no loop runs to end session {was}{how}"


def _clear_active(o: Owned) -> None:
    o.active_session_id = None
    o.active_session_kind = ""
    o.participant = o.wavelet = o.pane_id = o.head_at_spawn = ""
    o.spawned_on = {}
    o.launching = {}
    o.preexisting = {}


# ---------------------------------------------------------------- the loop process


class Loop:
    """One campaign's loop (see the module docstring). ``launcher`` spawns sessions."""

    def __init__(
        self,
        c: Campaign,
        launcher: Launcher,
        *,
        layout: str = "",
        keep_out: list[str] | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        """``keep_out`` None keeps what an earlier run of the loop was given (owned.json)."""
        self.c = c
        self.keep_out = keep_out
        self.launcher = launcher
        self._say = say
        self.lock = LoopLock(c)
        self.layout = layout
        self.sock: socket.socket | None = None
        self.pidfd = -1
        self.pidfd_of = ""
        self.quit = False

    def say(self, line: str) -> None:
        """One line of progress (a spawn, a settle, a commit, the end) for whoever runs the loop in
        the foreground; nothing when no one asked."""
        log.info("campaign %s: %s", self.c.id, line)
        if self._say is not None:
            self._say(line)

    # ------------------------------------------------------------ lifecycle

    def start(self, *, arm: bool) -> None:
        self.lock.acquire()
        try:
            s, o = read_state(self.c)
            if self.keep_out is not None:
                o.keep_out = list(self.keep_out)
            if arm:
                dirty = dirty_outside(self.c, o)
                if dirty and not o.active_session_id and not o.launching:
                    raise errors.UsageError(dirty_message(self.c, dirty))
            if self.layout:
                o.layout = self.layout
            self.layout = o.layout
            if arm:
                o.loop_state = "armed"
            self._commit_state(s, o)
            self._listen()
            paths = getattr(self.launcher, "paths", None)
            if paths is not None:  # where the console finds it (fleet.campaign.registry)
                with contextlib.suppress(OSError):
                    registry.remember(paths.state, self.c)
        except BaseException:
            self.lock.release()
            raise

    def _listen(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(socket_address(self.c))  # (the loop's lock says no other loop holds it)
        self.sock.listen(16)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        if self.pidfd >= 0:
            os.close(self.pidfd)
        self.lock.release()

    def run(self) -> None:
        """Resume from disk, then serve until ``stop``."""
        signal.signal(signal.SIGTERM, _terminate)
        try:
            self.catch_up()
            self.step()
        except errors.FleetError as exc:
            self._trouble(exc)
        stuck = False  # trouble while watching: wait for a command (a fixed file), do not spin
        while not self.quit:
            if not stuck:
                try:
                    self._watch_active()
                except errors.FleetError as exc:
                    self._trouble(exc)
                    stuck = True
            fds: list[Any] = [self.sock]
            if self.pidfd >= 0 and not stuck:
                fds.append(self.pidfd)
            try:
                ready, _, _ = select.select(fds, [], [])
            except InterruptedError:
                continue
            try:
                if self.pidfd >= 0 and self.pidfd in ready:
                    self._pane_exited()
                if self.sock in ready:
                    stuck = False
                    self._serve_one()
            except errors.FleetError as exc:
                self._trouble(exc)
                stuck = True

    # ------------------------------------------------------------ events

    def _trouble(self, exc: errors.FleetError) -> None:
        """Something the loop cannot act on (a STATE.md that does not parse): say so, spawn nothing,
        wait for the next event (a fixed file and `fleet campaign resume`)."""
        log.error("campaign %s: %s", self.c.id, exc.message)
        print(f"fleet campaign loop: {exc.message}", file=sys.stderr, flush=True)
        with contextlib.suppress(errors.FleetError):
            o = load_owned(self.c) or Owned()
            if o.last_error == exc.message:
                return  # told already
            o.last_error = exc.message
            save_owned(self.c, o)
        self._tell_operator(
            f"the loop cannot go on: {exc.message}. It spawns nothing until that is fixed; then"
            f" `{self._cli('resume')}`"
        )

    def _cli(self, op: str) -> str:
        return shlex.join(["fleet", "campaign", op, "--repo", str(self.c.root), "--campaign", self.c.id])

    def _tell_operator(self, text: str) -> None:
        """An error the operator must act on, as a blip naming them in the campaign's wave (where the
        agents' questions arrive too); the loop carries on if the daemon cannot take it."""
        try:
            self.launcher.tell(self.c, f"{OPERATOR}: campaign {self.c.id}: {text}")
        except (errors.FleetError, OSError) as exc:
            log.warning("could not tell the operator %r: %s", text, exc)

    def _serve_one(self) -> None:
        assert self.sock is not None
        conn, _ = self.sock.accept()
        with conn:
            if peer_uid(conn) != os.geteuid():
                log.warning("a control connection from another user was refused")
                return
            conn.settimeout(5.0)
            op = ""
            try:
                buf = b""
                while not buf.endswith(b"\n") and len(buf) < 65536:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                msg = json.loads(buf or b"{}")
                op = str(msg.get("op", ""))
                answer = self.command(op)
            except errors.FleetError as exc:
                answer = {"ok": False, "error": exc.message, "kind": exc.kind}
                if op == "poke":  # from a Stop hook, which shows no one: the operator must hear it
                    self._trouble(exc)
            except (ValueError, OSError) as exc:
                answer = {"ok": False, "error": str(exc), "kind": "usage"}
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps(answer).encode() + b"\n")

    def command(self, op: str) -> dict[str, Any]:
        if op == "ping":
            return {"ok": True, "pid": os.getpid()}
        answer = self._command(op)
        o = load_owned(self.c)
        unread = "STATE.md was not read" in str(answer.get("message", ""))
        if o is not None and o.last_error and not o.last_error.startswith(SPAWN_FAILED) and not unread:
            o.last_error = ""  # the trouble is over: this command read and wrote STATE.md
            save_owned(self.c, o)
        return answer

    def _command(self, op: str) -> dict[str, Any]:
        if op == "poke":
            self.catch_up()
            self.step()
            return {"ok": True}
        if op == "next":
            self.catch_up()
            s, o = read_state(self.c)
            d = machine.decide(s)
            if d.spawn is None and not d.escalate:
                raise errors.Conflict(f"nothing to spawn: {d.why}")
            self.step(force=True)
            return {"ok": True, "message": f"spawned the {d.spawn or 'escalation'} ({d.why})"}
        got = read_or_owned(self.c, op)
        if isinstance(got, st.StateError):  # the operator keeps control of a loop whose file broke
            o = load_owned(self.c) or Owned()
            msg = transition(self.c, None, o, op, kill=self.launcher.kill)
            save_owned(self.c, o)
            self.quit = op == "stop"
            self.say(msg)
            return {"ok": True, "message": msg + unreadable_note(got)}
        s, o = got
        msg = transition(self.c, s, o, op, kill=self.launcher.kill)
        self._commit_state(s, o)
        self.say(msg)
        if op == "stop":
            self.quit = True
        else:
            # the operator's command first, then any settle not handled yet (one whose poke is
            # still queued, or one STATE.md could not take then): a pause or an interrupt is never
            # overtaken by a spawn the settle would have made
            self.catch_up()
            self.step()
        return {"ok": True, "message": msg}

    def catch_up(self) -> None:
        """Handle the settles the hook reported that the loop has not handled yet (in order)."""
        settles = read_settles(self.c)
        _s, o = read_state(self.c)
        for rec in settles[o.handled_settles :]:
            # counted once handled: a settle that raised (a STATE.md that does not parse) is handled
            # again on the next event; one handled twice is ignored (its session is no longer active)
            self.settle(
                str(rec.get("session_id", "")), pane_exited=False, transcript=rec.get("transcript_path")
            )
            _s, o = read_state(self.c)
            o.handled_settles += 1
            save_owned(self.c, o)

    def _watch_active(self) -> None:
        """Hold a pidfd on the active session's pane process (a dead pane is a settle)."""
        _s, o = read_state(self.c)
        sid = o.active_session_id or ""
        if sid == self.pidfd_of:
            return
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd, self.pidfd_of = -1, ""
        if not sid:
            return
        pid = self.launcher.pane_pid(o.pane_id)
        if pid is None:
            self._pane_exited()
            return
        try:
            self.pidfd = os.pidfd_open(pid)
            self.pidfd_of = sid
        except ProcessLookupError:
            self._pane_exited()

    def _pane_exited(self) -> None:
        _s, o = read_state(self.c)
        if self.pidfd >= 0:
            os.close(self.pidfd)
        watched, self.pidfd, self.pidfd_of = self.pidfd_of, -1, ""
        if o.active_session_id and watched in ("", o.active_session_id):
            self.catch_up()  # a last Stop hook may have come first
            _s, o = read_state(self.c)
            if o.active_session_id:
                self.settle(o.active_session_id, pane_exited=True)
                self.step()

    # ------------------------------------------------------------ the settle handler

    def settle(self, session_id: str, *, pane_exited: bool, transcript: str | None = None) -> None:
        s, o = read_state(self.c)
        if not session_id or session_id != o.active_session_id:
            log.info("settle of %s ignored: the active session is %s", session_id, o.active_session_id)
            return
        kind = o.active_session_kind
        before = from_snapshot(o.spawned_on, s)
        wave = before.current_wave
        if s.wave_status == "awaiting_user" and not pane_exited:
            # paused conversationally: the session stays; commit the pause if the agent did not
            self._ensure_commit(s, o, f"wave {wave} (paused): user question")
            s.row(wave).set("Status", "paused")
            self._commit_state(s, o)
            return
        phrase = self.launcher.last_phrase(transcript, o)
        result = machine.outcome(kind, before, s, pane_exited=pane_exited)
        row = s.row(wave)
        row.set("Session", o.participant)
        if result == "crashed":
            machine.apply_crash(s)
            row.set("Status", "crashed")
            self.c.write(overrule(s, o))
            message = f"wave {wave} (crashed): session ended without state update"
            sha = commit_session(self.c, o, message) or disk.short(self.c.root, "HEAD")
            self.say(f"committed {sha} {message}")
            # after the commit, so it names it: the note lands with the next outcome's commit, like
            # the loop's other bookkeeping (a commit cannot hold its own sha)
            self._append_crash_notes(wave, o, pane_exited, sha)
            row.set("Commit", sha)
        elif result == "verifier_crashed":
            machine.apply_verifier_crash(s, before)
            o.verify_floor = max(o.verify_floor, s.verify_count)
        elif result == "paused":  # the pane died while the question was open
            row.set("Status", "paused")
        else:
            if kind == "verifier":
                s.verify_count = max(s.verify_count, before.verify_count + 1)
                o.verify_floor = max(o.verify_floor, s.verify_count)
                summary = phrase if phrase.startswith("PLAN") else "plan checked"
                self._ensure_commit(s, o, f"wave verify: {summary.lower()}")
            else:
                machine.normalize(s)
                title = self.c.wave_title(wave)
                reason = row.get("Notes") or "see NOTES.md"
                message = {
                    "complete": f"wave {wave}: {title}",
                    "all_complete": f"wave {wave}: {title}",
                    "failed": f"wave {wave} (failed): {reason}",
                    "undoable": f"wave {wave} (undoable): {reason}",
                }.get(result, f"wave {wave} (failed): session ended with wave_status {s.wave_status}")
                sha = self._ensure_commit(s, o, message)
                status = {"complete": "complete", "all_complete": "complete", "undoable": "undoable"}
                row.set("Status", status.get(result, "failed"))
                row.set("Commit", sha)
                if phrase and not _phrase_agrees(phrase, result):
                    row.set("Notes", f"{reason} (said {phrase[:40]!r}, STATE.md says {s.wave_status})")
        machine.normalize(s)
        self.launcher.end(o)
        who = o.participant
        _clear_active(o)
        self._commit_state(s, o)
        self.say(
            f"settled {who}: {result.replace('_', ' ')} (wave {wave};"
            f" now wave {s.current_wave} {s.wave_status})"
        )
        if s.wave_status == "all_complete":
            # there is no next outcome for the loop's last bookkeeping to land with
            sha = disk.commit_paths(self.c.root, [self.c.dir], f"campaign {self.c.id}: all waves complete")
            if sha:
                self.say(f"committed {sha} campaign {self.c.id}: all waves complete")
            self.say(f"campaign {self.c.id} complete: all {s.total_waves} waves done")

    def _ensure_commit(self, s: st.State, o: Owned, message: str) -> str:
        """The agent's commit if it made one and left the tree clean, else the loop's."""
        self.c.write(overrule(s, o))
        users = set(users_paths(self.c, o))
        others = [
            p for p in disk.dirty(self.c.root, ignore=(self.c.rel(self.c.state_file),)) if p not in users
        ]
        moved = disk.head(self.c.root) != o.head_at_spawn
        if moved and not others:
            sha = disk.short(self.c.root, "HEAD")
            self.say(f"{sha} committed by the session: {disk.subject(self.c.root)}")
            return sha
        made = commit_session(self.c, o, message)
        if made:
            self.say(f"committed {made} {message}")
        return made or disk.short(self.c.root, "HEAD")

    def _append_crash_notes(self, wave: int, o: Owned, pane_exited: bool, sha: str) -> None:
        notes = self.c.notes(wave)
        # the notes are the sessions' own writing: counted and added to as bytes, kept as they are
        # (a file that is not UTF-8 included)
        data = notes.read_bytes() if notes.exists() else b""
        k = data.count(b"\n## Attempt ") + data.startswith(b"## Attempt ") + 1
        how = "its pane's process exited" if pane_exited else "its turn ended"
        section = (
            f"## Attempt {k} — crashed\n**Session:** {o.active_session_id} ({o.participant})\n"
            f"**Commit:** {sha}\n"
            f"**Date:** {disk.today()}\n**Decision on entry:** unknown\n\n"
            f"### What happened\nThe session ended without updating STATE.md ({how}); the loop"
            " committed the work tree as it was.\n\n### Recommendation\nRetry; read the session's"
            " transcript if it crashes again.\n\n---\n\n"
        )
        notes.parent.mkdir(parents=True, exist_ok=True)
        with notes.open("ab") as f:
            f.write((b"\n" if data and not data.endswith(b"\n") else b"") + section.encode("utf-8"))

    # ------------------------------------------------------------ deciding and spawning

    def step(self, *, force: bool = False) -> None:
        """Spawn per the state if armed (or ``force``: `next`). A start the loop was killed in the
        middle of is finished first, armed or not (its session may be running)."""
        s, o = read_state(self.c)
        if o.launching and not o.active_session_id:
            self._resume_start(s, o)
            return
        if o.loop_state != "armed" and not force:
            return
        machine.normalize(s)
        d = machine.decide(s)
        if d.escalate:
            machine.escalate(s)
            self._commit_state(s, o)
            return
        if d.spawn is None:
            self._commit_state(s, o)
            return
        wave = s.current_wave
        was = {"wave_status": s.wave_status, "row": s.row(wave).get("Status")}
        s.session_count += 1
        if d.spawn == "executor":
            s.wave_status = "running"
            s.row(wave).set("Status", "running")
        o.head_at_spawn = disk.head(self.c.root)
        o.preexisting = disk.fingerprint(self.c.root, dirty_outside(self.c, o))
        # the marks and the intent on disk before anything starts: a loop killed from here on finds
        # them and finishes this start (the same session count, so the same participant and wavelet)
        o.launching = {"kind": d.spawn, "wave": wave, "session_count": s.session_count,
                       "participant": participant_name(d.spawn, s), "was": was}  # fmt: skip
        self._commit_state(s, o)
        die_at("marked")
        self._start(s, o)

    def _resume_start(self, s: st.State, o: Owned) -> None:
        """Finish the start recorded in ``o.launching`` (the loop died in it): the launcher adopts
        the session if its pane runs, else starts it, so nothing is run twice."""
        todo = o.launching
        s.session_count = max(s.session_count, int(todo["session_count"]))
        if todo["kind"] == "executor":
            s.wave_status = "running"
            s.row(int(todo["wave"])).set("Status", "running")
        log.info("campaign %s: finishing the start of %s", self.c.id, todo.get("participant"))
        self._start(s, o)

    def _start(self, s: st.State, o: Owned) -> None:
        todo = o.launching
        kind: machine.Spawn = todo["kind"]
        wave = int(todo["wave"])
        try:
            started = self.launcher.launch(self.c, s, kind, o.layout)
        except errors.FleetError as exc:
            s.session_count -= 1
            was = todo.get("was") or {}
            if kind == "executor":
                s.wave_status = was.get("wave_status", "pending")
                s.row(wave).set("Status", was.get("row", "pending"))
            o.launching = {}
            o.loop_state = "paused"
            o.last_error = f"{SPAWN_FAILED}{kind} failed: {exc.message}"
            self._commit_state(s, o)
            log.error("%s", o.last_error)
            self.say(f"spawning {todo.get('participant')} failed: {exc.message}; the loop is paused")
            self._tell_operator(
                f"{o.last_error}. The loop is paused and spawns nothing: fix that, then"
                f" `{self._cli('resume')}` (`{self._cli('status')}` shows the error)"
            )
            return
        o.active_session_id = started.session_id
        o.active_session_kind = kind
        o.participant = started.participant
        o.wavelet = started.wavelet
        o.pane_id = started.pane_id
        o.last_error = ""
        o.launching = {}
        o.spawned_on = snapshot(overrule(s, o))
        s = self._as_written(s)
        s.row(wave).set("Session", started.participant)
        # STATE.md first: killed before owned.json says so, the start is still `launching` and the
        # next loop adopts the session again, writing the same
        self.c.write(overrule(s, o))
        die_at("recorded")
        save_owned(self.c, o)
        how = " (adopted: it had started before the loop was killed)" if started.adopted else ""
        self.say(f"spawned {started.participant} for wave {wave}{how}")

    def _as_written(self, s: st.State) -> st.State:
        """STATE.md as it is now, or ``s`` where it does not read: a session quick off the mark may
        have written it while its launch ran (seconds), and writing ``s`` back, read before the
        launch, would undo that; the loop's own fields go back in with :func:`overrule`. (A write
        of the session in the moment between this read and the loop's write is still lost.)"""
        try:
            return self.c.read()
        except errors.FleetError:
            return s

    def _commit_state(self, s: st.State, o: Owned) -> None:
        save_owned(self.c, o)
        self.c.write(overrule(s, o))


def die_at(point: str) -> None:
    """A crash-consistency seam: ``FLEET_CAMPAIGN_DIE_AT=<point>`` kills this process with SIGKILL at
    that point of starting a session (tests/test_campaign_recovery.py kills the loop at each)."""
    if os.environ.get("FLEET_CAMPAIGN_DIE_AT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def _terminate(*_: object) -> None:
    """SIGTERM: leave ``select`` at once (Python retries it after a handler that returns)."""
    raise SystemExit(0)


def _phrase_agrees(phrase: str, result: str) -> bool:
    want = {
        "complete": ("WAVE COMPLETE",),
        "all_complete": ("WAVE COMPLETE", "WAVES DONE"),
        "failed": ("WAVE FAILED",),
        "undoable": ("PLAN UNDOABLE",),
    }.get(result, ())
    return not want or phrase.startswith(want)


# ---------------------------------------------------------------- sessions


@dataclass(frozen=True)
class Started:
    session_id: str
    participant: str
    wavelet: str
    pane_id: str
    adopted: bool = False
    """The session was already running (started by a loop killed before it recorded the start)."""


def participant_name(kind: str, s: st.State) -> str:
    """The participant a ``kind`` session spawned on ``s`` is (``s.session_count`` already counts it)."""
    if kind == "executor":
        return f"executor-w{s.current_wave}-s{s.session_count}"
    return f"{kind}-s{s.session_count}"


class Launcher:
    """Spawns campaign sessions as fleet participants (one window and wavelet each) and ends them."""

    def __init__(self, client: Any, tmux: Any, paths: Any, *, ready_timeout: float = 90.0) -> None:
        self.client = client
        self.tmux = tmux
        self.paths = paths
        self.ready_timeout = ready_timeout

    def _wave(self, c: Campaign) -> Any:
        try:
            return self.client.get_wave(c.id)
        except errors.NotFound:
            return self.client.create_wave(c.id, [])

    def launch(self, c: Campaign, s: st.State, kind: str, layout_ref: str, *, kickoff: str = "") -> Started:
        """Spawn a ``kind`` session (executor, verifier, planner). Its kickoff blip (``kickoff``, else
        :func:`kickoff_text`) is posted into its new wavelet before the session starts."""
        from fleet.layouts import DEFAULT_LAYOUT, Layout, Profile
        from fleet.layouts import load as load_layout
        from fleet.spawn import Spawner

        wave = self._wave(c)
        name = participant_name(kind, s)
        try:  # a launch that failed (or a loop killed in it) left its wavelet (the same session count)
            wl = self.client.resolve(f"{wave.name}/{name}")
        except errors.NotFound:
            main = self.client.resolve(f"{wave.name}/main")
            wl = self.client.fork(main.id, name, with_=[name])
            die_at("forked")
        # before the session starts: its first turn carries it. Posted after, the fork's system
        # blip could reach the session alone and be a turn of its own, which the loop (or the
        # planner's wait) would take for the session's whole work (a crash, a retry). Posted once:
        # a start finished again finds it there
        if not any(b.kind == "message" and b.author == OPERATOR for b in self.client.read(wl.id).blips):
            self.client.post(wl.id, kickoff or kickoff_text(c, s, name))
        adopted = self._running(wave.id, name, wl.path)
        if adopted is not None:
            return adopted
        base = load_layout(layout_ref or DEFAULT_LAYOUT, self.paths)
        profile_name = s.executor_agent if kind == "executor" else kind
        own = base.participants.get(profile_name) or base.participants.get(s.executor_agent) or Profile()
        merged = own.model_copy(update={"cwd": str(c.root)})
        if kind == "executor" and s.executor_model:
            merged = merged.model_copy(update={"model": s.executor_model})
        if kind == "planner":  # read-only outside .wave/: only what is allowed runs, nothing asks
            merged = merged.model_copy(update={"permission_mode": "dontAsk"})
        layout = Layout(
            arrangement="tiled", defaults=base.defaults, participants={name: merged}, name="campaign",
            ref=base.ref,
        )  # fmt: skip
        spawner = Spawner(
            self.client, self.tmux, self.paths, transport="auto", ready_timeout=self.ready_timeout,
            hook_settings=self._hook_settings(c, planner=kind == "planner"),
        )  # fmt: skip
        die_at("kicked")
        report = spawner.spawn(wl.path, layout)
        die_at("spawned")
        pane = report.panes[0]
        if not pane.ready:
            self.tmux.kill_window(report.window_id)
            raise errors.FleetError(f"{name} did not start: {pane.why}")
        return Started(pane.session_id, name, wl.path, pane.pane_id)

    def _running(self, wave_id: str, name: str, wavelet: str) -> Started | None:
        """``name``'s session if its pane already runs it (a loop killed after the pane started);
        a pane tagged ``name`` that runs something else (the placeholder it had before its agent)
        is taken away, so the spawner starts the session afresh."""
        live = [p for p in self.tmux.fleet_panes(wave_id) if p.participant == name and p.alive]
        if not live:
            return None
        records = self.client.sessions(wave_id, name)
        for p in live:
            for r in records:
                if r.session_id and r.session_id in p.start_command:
                    return Started(r.session_id, name, wavelet, p.pane_id, adopted=True)
        for p in live:
            with contextlib.suppress(errors.FleetError):
                self.tmux.kill_pane(p.pane_id)
        return None

    def _hook_settings(self, c: Campaign, *, planner: bool = False) -> Any:
        from fleet.watch import hook_settings

        settle = shlex.join(
            [sys.executable, "-m", "fleet", "campaign", "settled", "--loop-dir", str(c.loop_dir)]
        )
        url = self.client.base_url

        def settings(participant: str, wave: str, token_file: Path, attention: Any, *, cap: int | None,
                     gate: bool = False) -> str:  # fmt: skip
            base = json.loads(
                hook_settings(participant, wave, token_file, attention, daemon=url, cap=cap, gate=gate)
            )
            mine = {"type": "command", "command": settle, "timeout": 30}
            for event in ("Stop", "StopFailure"):
                base.setdefault("hooks", {}).setdefault(event, []).append({"hooks": [mine]})
            if planner:
                base["permissions"] = planner_permissions(c)
            return json.dumps(base, separators=(",", ":"))

        return settings

    def tell(self, c: Campaign, text: str) -> None:
        """A system blip in the campaign wave's main wavelet."""
        wave = self._wave(c)
        self.client.post_system(wave.root_id, text)

    def pane_pid(self, pane_id: str) -> int | None:
        for p in self.tmux.panes():
            if p.pane_id == pane_id:
                return None if p.dead else p.pid
        return None

    def kill(self, o: Owned) -> None:
        self.end(o)

    def end(self, o: Owned) -> None:
        """End a settled session: its window goes (its transcript stays on disk), and so does what
        it left running (see :func:`end_leftovers`)."""
        for p in self.tmux.panes():
            if p.pane_id == o.pane_id:
                self.tmux.kill_window(p.window_id)
                break
        try:
            wavelet_id = self.client.resolve(o.wavelet).id if o.wavelet else ""
        except errors.FleetError as exc:  # (the daemon gone: nothing is ended rather than a stranger's)
            log.warning("not ending what %s left running: its wavelet's id is unknown (%s)", o.wavelet, exc)
            wavelet_id = ""
        end_leftovers(wavelet_id)

    def last_phrase(self, transcript: str | None, o: Owned) -> str:
        """The last line of the session's last assistant text (its set phrase), from its transcript."""
        if not transcript:
            return ""
        deadline = time.monotonic() + 2.0
        while True:
            phrase = _last_line(Path(transcript))
            if phrase or time.monotonic() > deadline:
                return phrase
            time.sleep(0.05)


def end_leftovers(wavelet_id: str) -> list[int]:
    """SIGTERM the process groups still running with the session's ``FLEET_WAVELET_ID``: Claude
    Code runs each Bash command in a group of its own, which outlives a session killed with -9 (a
    crash) and would go on writing the tree, STATE.md included, under the next session. The pids
    ended. By the wavelet's id, not its path: a campaign of the same id under another fleet on this
    machine (another FLEET_HOME, another daemon) has wavelets of the same paths, and its sessions
    were ended too (two test workers running one campaign test file ended each other's)."""
    from fleet import procs

    if not wavelet_id:
        return []
    mine = {os.getpid(), os.getppid()}
    ended = []
    for pid in procs.with_env("FLEET_WAVELET_ID", wavelet_id):
        st_ = procs.stat(pid)
        if pid in mine or st_ is None or st_.state in ("Z", "X"):
            continue
        with contextlib.suppress(OSError):
            if st_.pgrp > 1 and st_.pgrp != os.getpgrp():
                os.killpg(st_.pgrp, signal.SIGTERM)
            else:
                os.kill(pid, signal.SIGTERM)
            ended.append(pid)
    if ended:
        log.info("ended what the session of wavelet %s left running: %s", wavelet_id, ended)
    return ended


def kickoff_text(c: Campaign, s: st.State, participant: str) -> str:
    """The blip, from the operator, that starts an executor's or verifier's work."""
    from fleet.campaign import prompts

    role = "executor" if participant.startswith("executor") else "verifier"
    attempt = f" (attempt {s.retry_count + 1})" if role == "executor" else ""
    return (
        f"{participant}: you are the {role} of campaign {c.id}, wave {s.current_wave}{attempt}."
        f" Follow your protocol in {prompts.path(role)} and {c.rel(c.plan / 'AGENT_INSTRUCTIONS.md')};"
        f" the state is {c.rel(c.state_file)}. Ask the operator on this wavelet if you must;"
        " end your turn with your set phrase."
    )


def planner_permissions(c: Campaign) -> dict[str, list[str]]:
    """The planner's rules (with ``--permission-mode dontAsk``: whatever is not allowed is denied):
    read anything, write and edit only under ``.wave/``; no Bash. fleet checks the work tree after
    it settles all the same (fleet.campaign.planner)."""
    wave = f"/{c.root.resolve() / disk.WAVE_DIR}/**"  # `//abs` is an absolute path in a rule
    return {
        "allow": ["Read", "Glob", "Grep", f"Write({wave})", f"Edit({wave})",
                  "mcp__fleet"],
        "deny": ["Bash", "NotebookEdit"],
    }  # fmt: skip


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    for ln in reversed(lines):
        try:
            rec = json.loads(ln)
        except ValueError:
            continue
        if rec.get("type") != "assistant":
            continue
        content = (rec.get("message") or {}).get("content") or []
        texts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        if texts and str(texts[-1]).strip():
            return str(texts[-1]).strip().splitlines()[-1].strip()
        return ""
    return ""
