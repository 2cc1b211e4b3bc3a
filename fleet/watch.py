"""``fleet watch``: the non-channel transport (docs/design.md §5), the delivery engine with a list sink.

A session that cannot receive channel notifications (third-party providers, accounts without
channels) can still be woken when a background process ends. ``fleet watch`` is that process.

**Plain mode** (``fleet watch``): one long-poll ``feed`` after another until at least one frame is
handed to the participant, then everything handed out is printed (readably, or one JSON object per
line with ``--json``), followed by one re-arm line, ``after=v1.…``, and the command exits 0. Passing
that value back (``--after``) resumes exactly where the call stopped: it carries a cursor *per
wavelet* (a busy wavelet never steps over a quiet one's unseen blips) plus the cap's counts, so echo
suppression and the cap hold across calls. The value is base64url (``[A-Za-z0-9_.-]``), so
``eval "$(fleet watch … | tail -n 1)"`` is safe without quoting. Without ``--after`` delivery starts
where a fresh channel starts: at the participant's join of each wavelet.

**Hook mode** (``fleet watch --hook``), run by Claude Code as an ``asyncRewake`` hook
(``SessionStart``, ``Stop`` and ``StopFailure``; :func:`hook_settings` builds the ``--settings`` JSON):

* The position is the channel's own state file (:class:`fleet.delivery.state.StateFile`), so a
  session moving from the channel to the hook, or back, resumes exactly: no replay, no gap.
* The lock beside the state file is taken without waiting; when another process holds it (an arm
  still waiting, or a delivering channel) this arm exits 0 at once. A lock left by a killed process
  is released by the kernel (``flock``), so it never wedges.
* Exit 2 wakes the session: the frames go to stderr, where Claude Code shows them to the model, each
  as the ``<channel source="fleet" …>`` block a channel push would have shown
  (:func:`fleet.delivery.frames.channel_tag`). The state is saved right after they are written: the
  cursor advances when frames are emitted, since nothing acknowledges a hook.
* Targeted attention works as in the channel, digest hold and attendant included: a digest with
  nothing addressed beside it waits in the arm (up to ``--digest-hold``) for more chatter before it
  wakes the session.
* Exit 2 also when the daemon has been unreachable for ``unreachable_after`` seconds (30 by default),
  with a message saying so: a hook that died quietly would leave an idle session deaf for good.
* Exit 0: nothing happened (another arm holds the lock, ``wait`` elapsed, or the session that ran
  the hook is gone: an orphaned arm exits without delivering, so a respawned session is not robbed).
* Any other failure (unknown wave or participant: 4; rejected token: 5; a corrupt state file: 1)
  exits with its code and message and wakes nothing, because a wake on a permanent error would
  repeat at every turn's end. A corrupt state file is never overwritten: nothing is skipped.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import shlex
import sys
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from fleet import errors
from fleet.client import Client
from fleet.delivery.config import TransportConfig, plain_words, read_token, resolve
from fleet.delivery.engine import Backoff, Engine, ListSink
from fleet.delivery.frames import Frame, hook_report
from fleet.delivery.presence import Presence
from fleet.delivery.rules import DEFAULT_CAP, DIGEST_HOLD, Attention, Delivery
from fleet.delivery.state import DeliveryState, StateFile
from fleet.models import Feed
from fleet.paths import get_paths
from fleet.procs import identity
from fleet.wire import Record, RecordError, Value, dumps, loads
from fleet.wire import field as wfield

if TYPE_CHECKING:
    from fleet.delivery.attention import Attendant, RoutingLog
    from fleet.delivery.ledger import Ledger

log = logging.getLogger(__name__)

HOOK_TIMEOUT = 7 * 24 * 3600
"""The ``timeout`` (seconds) of the generated hook. Claude Code kills an ``asyncRewake`` hook at its
timeout (600 s by default) and re-arms only when a turn ends, so an idle session whose hook ended
without a wake would never hear of a blip again: the hook must be able to wait for days."""
HOOK_WAIT = HOOK_TIMEOUT - 600
"""A hook's default ``wait``: just under its timeout, so it ends by itself (exit 0), never mid-delivery."""
EXIT_WAKE = 2
"""The exit status that makes Claude Code wake the session (an ``asyncRewake`` hook's signal)."""
AFTER_PREFIX = "v1."
BACKOFF_FIRST, BACKOFF_MAX = 0.2, 5.0
BACKOFF_OUTAGE = 1.0
"""The longest wait between attempts while the daemon is unreachable (a restart is seen within ~1 s)."""
ORPHAN_CHECK = 0.5
"""Seconds between checks that the hook's parent (the Claude Code session) is still alive."""
REWAKE_SUMMARY = "fleet: new blips"
GATE_WAIT = 10.0
"""Seconds a ``--gate`` arm waits for its session's channel to open the gate (a hook armed at
SessionStart can run before the channel is up) before it delivers on its own."""


class AfterLine(Record, kw_only=True):
    """The last line of ``fleet watch --json``: the value to pass back as ``--after``."""

    after: str


# ---------------------------------------------------------------- the re-arm value


class _After(Record, kw_only=True, forbid_unknown_fields=True):
    """What an ``after=`` value carries (short keys: it is retyped by people and agents)."""

    p: str
    """The participant it belongs to."""
    c: dict[str, str] = wfield(default_factory=dict)
    d: dict[str, int] = wfield(default_factory=dict)
    x: dict[str, str] = wfield(default_factory=dict)


def encode_after(state: DeliveryState) -> str:
    """The ``--after`` value for ``state``: ``v1.`` + base64url(zlib(JSON)), no padding, shell-safe."""
    body = _After(p=state.participant, c=state.cursors, d=state.delivered, x=state.exhausted)
    short = {k: v for k, v in (("p", body.p), ("c", body.c), ("d", body.d), ("x", body.x)) if v}
    raw = dumps(short).encode()
    return AFTER_PREFIX + base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


def decode_after(value: str, daemon: str, wave: str, participant: str) -> DeliveryState:
    """The state an ``--after`` value carries. Raises :class:`~fleet.errors.UsageError` when it is not
    a value ``fleet watch`` printed for ``participant``."""
    value = value.strip()
    if value.startswith("after="):
        value = value[len("after=") :]
    bad = (
        f"--after {value[:40]!r}{'…' if len(value) > 40 else ''} is not a value printed by "
        "`fleet watch` (pass the whole after=… line's value, or omit --after to start from your joins)"
    )
    if not value.startswith(AFTER_PREFIX):
        raise errors.UsageError(bad)
    data = value[len(AFTER_PREFIX) :]
    try:
        raw = zlib.decompress(base64.urlsafe_b64decode(data + "=" * (-len(data) % 4)))
        body = loads(_After, raw)
    except (binascii.Error, ValueError, zlib.error, RecordError):
        raise errors.UsageError(bad) from None
    if body.p != participant:
        raise errors.UsageError(
            f"--after holds {body.p}'s position, not {participant}'s: pass the value a watch of "
            f"{participant} printed"
        )
    return DeliveryState(
        daemon=daemon, wave=wave, participant=participant, cursors=body.c, delivered=body.d, exhausted=body.x
    )


def unreachable_report(config: TransportConfig, down_for: float, reason: str) -> str:
    return (
        f"fleet: the fleet daemon at {config.daemon} has been unreachable for {down_for:.0f}s "
        f"({reason}). Blips for {config.participant} in wave {config.wave} cannot reach you until it "
        "answers again; none are lost (your position is saved) and this hook re-arms when your turn "
        "ends. Tell the operator if this message repeats.\n"
    )


# ---------------------------------------------------------------- the wait


class Outcome(Value):
    """How a wait ended. ``frames`` is non-empty exactly when ``how == "frames"``."""

    how: Literal["frames", "elapsed", "unreachable"]
    frames: list[Frame] = wfield(default_factory=list)
    down_for: float = 0.0
    reason: str = ""


class Watcher:
    """Long-polls the participant's feed through an :class:`~fleet.delivery.engine.Engine` until
    something is handed out.

    ``client`` must carry a token that may read the participant's feed (its own, or the operator's).
    """

    def __init__(self, config: TransportConfig, client: Client) -> None:
        self.config = config
        self.client = client
        self.sink = ListSink()
        self._checked = False

    def engine(
        self,
        state: DeliveryState,
        *,
        routing: RoutingLog | None = None,
        attendant: Attendant | None = None,
        budgets_of: str = "",
    ) -> Engine:
        """``budgets_of``: the session id whose spend the participant's hold-backs judge (budgets':
        :data:`fleet.seams.hold_backs`; a notice is handed out like a frame); ``""``: none."""
        c = self.config
        core = Delivery(c.participant, state, cap=c.cap, attention=c.attention, hold=c.digest_hold)
        hold_back = None
        if budgets_of:
            from fleet.paths import get_paths
            from fleet.seams import Participant, hold_back_for

            who = Participant(
                lambda: self.client, c.wave, c.participant, budgets_of, get_paths(), self.sink.push
            )
            hold_back = hold_back_for(who)
        return Engine(
            core, self.client, self.sink, wave=c.wave, routing=routing, attendant=attendant,
            hold_back=hold_back,
        )  # fmt: skip

    def _check(self, engine: Engine, feed: Feed) -> None:
        """On the first answer: the participant and the wavelets asked for must be on rosters."""
        if self._checked:
            return
        c = self.config
        on = {w.id for w in feed.wavelets}
        if not on:
            raise errors.NotFound(
                f"{c.participant!r} is on no wavelet's roster in wave {c.wave!r}: check the name "
                f"(`fleet tree {c.wave}`), or invite them (`fleet invite {c.wave}/main {c.participant}`)"
            )
        if c.wavelets:
            ids: set[str] = set()
            for ref in c.wavelets:
                wl = self.client.resolve(ref, wave=c.wave)
                if wl.id not in on:
                    raise errors.NotFound(
                        f"{c.participant!r} is not on the roster of {wl.path}: watch a wavelet they are on"
                    )
                ids.add(wl.id)
            engine.only = frozenset(ids)
        self._checked = True

    def wait(
        self,
        engine: Engine,
        before_emit: Callable[[], bool] = lambda: True,
        owed: Callable[[], list[Frame]] | None = None,
    ) -> Outcome:
        """Poll until frames are handed out (``frames``), ``config.wait`` passes (``elapsed``), or the
        daemon stays unreachable for ``config.unreachable_after`` (``unreachable``).

        ``before_emit`` is asked before frames are returned; False ends the wait as ``elapsed`` with
        nothing returned (the core's state may still have advanced over echoes; do not save it then).
        ``owed``, asked before every poll (which then lasts at most a second), gives frames handed
        out before that must be handed out again (receipts: they never entered the context).
        Permanent errors (unknown wave, rejected token) are raised.
        """
        c = self.config
        deadline = time.monotonic() + c.wait if c.wait > 0 else None
        outage: float | None = None
        backoff = Backoff(BACKOFF_FIRST, BACKOFF_OUTAGE)
        while True:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return Outcome("elapsed")
            poll = c.poll_wait if deadline is None else max(0.0, min(c.poll_wait, deadline - now))
            if owed is not None:
                again = owed()
                if again:
                    return Outcome("frames", again) if before_emit() else Outcome("elapsed")
                poll = min(poll, 1.0)
            try:
                feed = self.client.feed(
                    c.wave, c.participant, engine.feed_cursors, wait=engine.poll_wait(poll)
                )
            except errors.FleetError as exc:
                if not exc.transient:
                    raise
                now = time.monotonic()
                outage = now if outage is None else outage
                if now - outage >= c.unreachable_after:
                    return Outcome("unreachable", down_for=now - outage, reason=_short_reason(exc.message))
                log.info("daemon unreachable (%s); retrying", exc.message)
                pause = backoff.delay()
                if deadline is not None:
                    pause = min(pause, max(0.0, deadline - now))
                time.sleep(min(pause, max(0.0, outage + c.unreachable_after - now)))
                continue
            outage = None
            backoff.reset()
            self._check(engine, feed)
            step = engine.handle(feed)
            frames = self.sink.take()
            if frames:
                if not before_emit():
                    return Outcome("elapsed")
                return Outcome("frames", frames)
            if step.stuck:
                log.warning("the daemon's feed returned only blips at or behind the cursors; backing off")
                time.sleep(BACKOFF_MAX)


def _short_reason(message: str) -> str:
    """The reason inside a DaemonUnreachable message (``cannot reach … (REASON); start it …``)."""
    start, end = message.find("("), message.rfind(")")
    return message[start + 1 : end] if 0 <= start < end else message


def _client(config: TransportConfig) -> Client:
    return Client(config.daemon, read_token(config), retries=0, timeout=10)


# ---------------------------------------------------------------- plain mode


def watch(config: TransportConfig, after: str | None) -> tuple[list[Frame], str]:
    """Plain ``fleet watch``: wait, then return (frames, the next ``--after`` value).

    Frames is empty only when ``config.wait`` elapsed. A daemon unreachable for
    ``config.unreachable_after`` raises :class:`~fleet.errors.DaemonUnreachable`.
    """
    if after:
        state = decode_after(after, config.daemon, config.wave, config.participant)
    else:
        state = DeliveryState(daemon=config.daemon, wave=config.wave, participant=config.participant)
    with _client(config) as client:
        watcher = Watcher(config, client)
        engine = watcher.engine(state)
        outcome = watcher.wait(engine)
    if outcome.how == "unreachable":
        raise errors.DaemonUnreachable(
            f"the fleet daemon at {config.daemon} has been unreachable for {outcome.down_for:.0f}s "
            f"({outcome.reason}); start it with `fleet daemon start`, or check --daemon / FLEET_DAEMON"
        )
    return outcome.frames, encode_after(engine.core.state)


# ---------------------------------------------------------------- hook mode


class _OrphanGuard:
    """Ends this process (exit 0, nothing emitted, nothing saved) once its parent — the session that
    ran the hook — is gone, so an arm left behind by a killed session never takes the blips meant for
    the session that replaces it, nor keeps the lock from it."""

    def __init__(self) -> None:
        self.parent = os.getppid()
        self.lock = threading.Lock()
        """Held while the state is saved, so the guard never ends the process mid-save."""
        self._stop = threading.Event()

    def orphaned(self) -> bool:
        return self.parent > 1 and os.getppid() != self.parent

    def start(self) -> None:
        if self.parent <= 1:
            return
        threading.Thread(target=self._run, name="fleet-watch-orphan", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(ORPHAN_CHECK):
            if self.orphaned():
                with self.lock:
                    if self._stop.is_set():
                        return
                    log.info("the session that ran this hook is gone; exiting without delivering")
                    os._exit(0)


class HookInput(Record, kw_only=True):
    """What Claude Code writes to a hook's stdin (the fields fleet reads; claude-code.md §4)."""

    session_id: str = ""
    transcript_path: str = ""
    hook_event_name: str = ""


def hook_input(timeout: float = 0.5) -> HookInput:
    """The hook's stdin, if Claude Code wrote one (a terminal, an empty or a silent stdin: none)."""
    import select

    try:
        if os.isatty(0) or not select.select([0], [], [], timeout)[0]:
            return HookInput()
        data = os.read(0, 1 << 20)
        return loads(HookInput, data) if data.strip() else HookInput()
    except (OSError, RecordError, ValueError):
        return HookInput()


def run_hook(
    config: TransportConfig,
    emit: Callable[[str], None] | None = None,
    *,
    gate: bool = False,
    given: HookInput | None = None,
) -> int:
    """``fleet watch --hook``: the exit status Claude Code acts on (2 wake, 0 nothing).

    ``emit`` receives the text for the model (default: written to stderr and flushed); the state is
    saved only after it returns. With ``gate`` (``--transport auto``) the arm first waits at its
    session's channel (:mod:`fleet.delivery.gate`), which routes frames to it; with no channel
    there it delivers on its own. With receipts on (``given`` names Claude Code's transcript) what
    it hands out is in the ledger, and what the transcript shows never entered is handed out again.
    Raises the :mod:`fleet.errors` of a permanent failure (the CLI turns them into their exit
    codes), :class:`~fleet.errors.CorruptState` included.
    """
    emit = emit or _to_stderr
    given = given or HookInput()
    state_file = StateFile(config.state_dir, config.daemon, config.wave, config.participant)
    if gate:
        routed = _through_gate(config, state_file, GATE_WAIT)
        if routed is not None:
            if routed:
                emit(hook_report(routed, config.participant, config.wave))
                return EXIT_WAKE
            return 0
    if not state_file.acquire():
        log.info("%s is held by another arm or channel; nothing to do", state_file.lock_path)
        return 0
    guard = _OrphanGuard()
    guard.start()
    attendant: Attendant | None = None
    try:
        routing = None
        if config.attention != "full":
            from fleet.delivery.attention import ATTENDANT_TIMEOUT, Attendant, RoutingLog, routing_log_path

            routing = RoutingLog(routing_log_path(state_file), config.participant, config.wave)
            if config.attendant:
                attendant = Attendant(
                    config.attendant, routing, config.attendant_timeout or ATTENDANT_TIMEOUT
                )
        state = state_file.load()
        ledger, owed = _receipts(config, state, given)
        with _client(config) as client:
            watcher = Watcher(config, client)
            session = given.session_id or (Path(given.transcript_path).stem if given.transcript_path else "")
            engine = watcher.engine(
                state, routing=routing, attendant=attendant, budgets_of=session or config.session_id or ""
            )
            outcome = watcher.wait(engine, before_emit=lambda: not guard.orphaned(), owed=owed)
            if outcome.how == "frames":
                if ledger is not None:
                    now = time.time()
                    for frame in outcome.frames:
                        ledger.hand(frame, "hook", now)
                emit(hook_report(outcome.frames, config.participant, config.wave))
            with guard.lock:  # an arm orphaned before emitting must not save what it skipped
                dirty = engine.core.dirty or (ledger is not None and ledger.dirty)
                if dirty and (outcome.how == "frames" or not guard.orphaned()):
                    state_file.save(engine.core.state)
                guard.stop()
            if outcome.how == "frames":
                presence = Presence(
                    lambda: client, config.wave, config.participant, session_id=config.session_id
                )
                presence.report("delivered", len(outcome.frames), timeout=2.0)
        if outcome.how == "unreachable":
            emit(unreachable_report(config, outcome.down_for, outcome.reason))
            return EXIT_WAKE
        return EXIT_WAKE if outcome.how == "frames" else 0
    finally:
        if attendant is not None:
            attendant.close()
        guard.stop()
        state_file.release()


def _through_gate(config: TransportConfig, state_file: StateFile, patience: float) -> list[Frame] | None:
    """Arm at the session's channel and wait for what it routes here. None: no channel answered
    within ``patience`` seconds, or it went away (deliver on our own); ``[]``: another arm already
    waits (exit 0). The arm ends, delivering nothing, once the session that ran it is gone."""
    from fleet.delivery import gate as gates

    guard = _OrphanGuard()
    guard.start()
    deadline = time.monotonic() + patience
    try:
        while True:
            try:
                sock = gates.arm(state_file.path, pid=os.getppid())
            except gates.NoGate:
                if time.monotonic() >= deadline:
                    log.info("no channel opened the gate within %.0fs: delivering alone", patience)
                    return None
                time.sleep(0.1)
                continue
            return gates.wait(sock)
    finally:
        guard.stop()


def _receipts(
    config: TransportConfig, state: DeliveryState, given: HookInput
) -> tuple[Ledger | None, Callable[[], list[Frame]] | None]:
    """With receipts on (Claude Code ran this hook: its stdin names the transcript), the ledger over
    ``state`` and what the wait must hand out again; (None, None) otherwise."""
    from fleet.delivery.ledger import Ledger
    from fleet.delivery.receipts import Transcript

    if config.receipts == "none" or not (given.session_id or given.transcript_path):
        return None, None
    session = given.session_id or Path(given.transcript_path).stem
    if state.transcript != session:
        state.transcript, state.transcript_offset = session, 0
    ledger = Ledger(state, identity(os.getppid()), hook=True, bound=config.bound)
    path = Path(given.transcript_path) if given.transcript_path else None
    transcript = Transcript(session, offset=state.transcript_offset, path=path)

    def owed() -> list[Frame]:
        now = time.time()
        ledger.apply(transcript.read(), transcript.last_at)
        state.transcript_offset = transcript.consumed
        state.receipts_problem = transcript.problem
        for p in [*ledger.lost_pushes(now), *ledger.lost_hooks(now)]:
            ledger.owe_hook(p, now)
        return [p.frame for p in ledger.waiting()]

    return ledger, owed


def _to_stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


# ---------------------------------------------------------------- the command's options


def watch_config(
    *,
    hook: bool,
    participant: str | None,
    wave: str | None,
    wavelets: list[str],
    daemon: str | None,
    token_file: Path | None,
    state_dir: Path | None,
    cap: int,
    wait: float | None,
    unreachable_after: float,
    attention: str,
    digest_hold: float | None,
    attendant: str | None,
    attendant_timeout: float | None,
    receipts: str,
) -> TransportConfig:
    """The configuration of a ``fleet watch`` (``hook``: an arm) from its options as typed (None: not
    given), for the CLI and :func:`hook_main` alike. The two modes differ in their defaults: an arm
    waits :data:`HOOK_WAIT` and holds a lone digest for more chatter, a plain watch hands out what it
    has when it returns."""
    if receipts not in ("auto", "transcript", "none"):
        raise errors.UsageError(f"--receipts is auto, transcript or none, not {receipts!r}")
    return resolve(
        participant=participant,
        wave=wave,
        daemon=daemon,
        token_file=token_file,
        state_dir=state_dir,
        need_token_file=hook,
        cap=cap,
        wavelets=wavelets,
        wait=(HOOK_WAIT if hook else 0.0) if wait is None else wait,
        unreachable_after=unreachable_after,
        attention=attention,
        digest_hold=(DIGEST_HOLD if hook else 0.0) if digest_hold is None else digest_hold,
        attendant=attendant or None,
        attendant_timeout=attendant_timeout,
        receipts=receipts,
    )


def _count(value: str) -> int:
    if int(value) < 0:
        raise ValueError(value)
    return int(value)


def _seconds(value: str) -> float:
    if float(value) < 0:
        raise ValueError(value)
    return float(value)


HOOK_OPTIONS: dict[str, tuple[str, Callable[[str], object], str | None]] = {
    "--participant": ("participant", str, "FLEET_PARTICIPANT"),
    "--wave": ("wave", str, "FLEET_WAVE"),
    "--wavelet": ("wavelets", str, None),
    "--daemon": ("daemon", str, "FLEET_DAEMON"),
    "--token-file": ("token_file", Path, "FLEET_TOKEN_FILE"),
    "--state-dir": ("state_dir", Path, None),
    "--cap": ("cap", _count, None),
    "--wait": ("wait", _seconds, None),
    "--unreachable-after": ("unreachable_after", _seconds, None),
    "--attention": ("attention", str, None),
    "--digest-hold": ("digest_hold", _seconds, None),
    "--attendant": ("attendant", str, None),
    "--attendant-timeout": ("attendant_timeout", float, None),
    "--receipts": ("receipts", str, None),
}
"""The options :func:`hook_main` takes, as ``fleet watch`` declares them (fleet/cli/watch.py; a test
keeps the two equal): option -> (keyword of :func:`watch_config`, conversion, environment variable).
A conversion raises ValueError where typer would refuse the value (a count or seconds below 0)."""


def hook_options(argv: list[str]) -> tuple[dict[str, object], bool] | None:
    """The keywords of :func:`watch_config` and ``--gate`` from an arm's command line (``watch``
    dropped), or None when it is not one typer would take as it is: an option an arm does not take
    (``--after``, ``--json``, ``--help``), a value typer would refuse, a value that looks like an
    option, or a path typer would find unreadable."""
    if any("\ud800" <= ch <= "\udfff" for arg in argv for ch in arg):
        return None  # not UTF-8: the CLI says which argument
    got: dict[str, object] = {"cap": DEFAULT_CAP, "wait": None, "unreachable_after": 30.0}
    got.update(attention="full", digest_hold=None, attendant=None, attendant_timeout=None, receipts="auto")
    wavelets: list[object] = []
    flags = {"--hook": False, "--gate": False}
    words = plain_words(argv, HOOK_OPTIONS, flags)
    if words is None:
        return None
    for option, value in words:
        if value is None:
            flags[option] = True
            continue
        key, convert, _ = HOOK_OPTIONS[option]
        try:
            converted = convert(value)
        except ValueError:
            return None
        if key == "wavelets":
            wavelets.append(converted)
        else:
            got[key] = converted  # the last one counts, as in typer
    for key, _, env in HOOK_OPTIONS.values():
        if env and key not in got and os.environ.get(env):  # typer reads an empty variable as unset
            got[key] = Path(os.environ[env]) if key == "token_file" else os.environ[env]
    for key in ("participant", "wave", "daemon", "token_file", "state_dir"):
        got.setdefault(key, None)
        path = got[key]
        if isinstance(path, Path) and os.path.exists(path) and not os.access(path, os.R_OK):
            return None  # typer refuses a path it cannot read
    if not flags["--hook"]:
        return None
    got["wavelets"] = wavelets
    return got, flags["--gate"]


def hook_main(argv: list[str]) -> int | None:
    """``fleet watch --hook ARGS`` (``watch`` dropped) without the CLI: Claude Code runs an arm at
    every turn's end of every session, so it starts as a channel does, without typer and the command
    tree (``bench/cli.py`` measures both ways). Returns the exit status, as ``fleet watch --hook``
    gives it, or None when :func:`hook_options` does not take ``argv``: the CLI then runs it and says
    what is wrong. Raises what the command raises (:mod:`fleet.errors`): the caller's boundary is the
    CLI's (fleet/__main__.py)."""
    parsed = hook_options(argv)
    if parsed is None:
        return None
    options, gate = parsed
    debug = bool(os.environ.get("FLEET_DEBUG"))
    logging.basicConfig(  # as the CLI's root does before a command runs
        level=logging.DEBUG if debug else logging.WARNING, format="fleet: %(name)s: %(message)s"
    )
    config = watch_config(hook=True, **options)  # type: ignore[arg-type]
    if not debug:  # stderr is read by the model on a wake: no stray logs
        logging.getLogger("fleet").setLevel(logging.ERROR)
    return run_hook(config, gate=gate, given=hook_input())


# ---------------------------------------------------------------- the hook's settings


HOOK_EVENTS = ("SessionStart", "Stop", "StopFailure")


class HookHandler(Record, kw_only=True, forbid_unknown_fields=True):
    """One command hook in Claude Code's settings (claude-code.md §4); field names are Claude Code's."""

    type: Literal["command"] = "command"
    command: str
    asyncRewake: bool = True
    timeout: int = HOOK_TIMEOUT
    rewakeSummary: str = REWAKE_SUMMARY
    rewakeMessage: str


class HookMatcher(Record, kw_only=True, forbid_unknown_fields=True):
    hooks: list[HookHandler]


class HookSettings(Record, kw_only=True, forbid_unknown_fields=True):
    """The ``--settings`` JSON :func:`hook_settings` prints: event name -> matchers."""

    hooks: dict[str, list[HookMatcher]]


def hook_command(
    participant: str,
    wave: str,
    daemon: str,
    token_file: Path,
    *,
    state_dir: Path | None = None,
    python: str | None = None,
    attention: Attention = "full",
    cap: int | None = None,
    gate: bool = False,
) -> str:
    """The shell command of the hook. ``exec`` makes the watch the session's direct child (so it can
    tell when the session is gone); every word is quoted; the token is named by its file only."""
    words = [python or sys.executable, "-m", "fleet", "watch", "--hook",
             "--participant", participant, "--wave", wave, "--daemon", daemon,
             "--token-file", str(token_file),
             "--state-dir", str(state_dir or get_paths().channels)]  # fmt: skip
    if attention != "full":
        words += ["--attention", attention]
    if cap is not None:
        words += ["--cap", str(cap)]
    if gate:
        words += ["--gate"]
    return "exec " + shlex.join(words)


def hook_settings(
    participant: str,
    wave: str,
    token_file: Path,
    attention: Attention = "full",
    *,
    daemon: str,
    state_dir: Path | None = None,
    python: str | None = None,
    cap: int | None = None,
    gate: bool = False,
) -> str:
    """The ``--settings`` JSON that installs ``fleet watch --hook`` for ``participant`` (``gate``:
    beside a delivering channel, ``--transport auto``).

    ``SessionStart`` arms it when the session starts (or resumes, clears, compacts), ``Stop``
    re-arms it at the end of every turn, and ``StopFailure`` at the end of a turn that failed (an API
    error ends a turn without ``Stop``: without it, one failure would leave the session deaf). A
    second arm while one waits exits 0 at once. The
    ``rewakeSummary``/``rewakeMessage`` fields label the wake (Claude Code 2.1.332 shows them; a
    version without them ignores them and shows "Stop hook feedback").
    """
    command = hook_command(
        participant, wave, daemon, token_file,
        state_dir=state_dir, python=python, attention=attention, cap=cap, gate=gate,
    )  # fmt: skip
    handler = HookHandler(
        command=command,
        rewakeMessage=f"New blips from the fleet wave {wave} for {participant}:",
    )
    entry = [HookMatcher(hooks=[handler])]
    return dumps(HookSettings(hooks={event: entry for event in HOOK_EVENTS}))
