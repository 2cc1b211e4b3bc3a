"""The channel's runtime: the MCP server, the delivery engine with an MCP sink, receipts, presence.

:class:`Channel` wires :mod:`fleet.mcpwire` (protocol), :mod:`fleet.channel.tools` (the tools) and
:class:`fleet.delivery.engine.Engine` (delivery) together and runs these threads besides the
protocol reader: delivery (one long-poll step after another), presence
(:class:`fleet.delivery.presence.PresenceLoop`), the state saver (writes the state file after
each batch, off the delivery thread) and, with receipts on, the receipts reader (the session's
transcript, :mod:`fleet.delivery.receipts`, against the :class:`~fleet.delivery.ledger.Ledger`).
Each thread is kept in :attr:`Channel.threads` by role.

State (docs/design.md §2): the state thread looks at the session's transcript and its state hook's
file (:mod:`fleet.agentstate`) every :data:`STATE_POLL` seconds, folds what was appended, and
reports at once when the state changed (every presence report carries it). The transcript is read
once for both: the receipts reader takes the receipts the state thread's reads found.

Receipts (docs/design.md §3): with them on, a frame counts as delivered only when the transcript
shows it in the model's context, and presence says ``delivered`` then, not at the push. With
``--hook-fallback`` (spawn's ``--transport auto``), a push Claude Code did not take is owed to the
hook on the ledger's evidence (:mod:`fleet.delivery.ledger`: before any push was taken, the bound
and the session's answers to the channel's pings; after, a later push taken or the session running
on), and once no push was ever taken the channel stops pushing: every frame waits for the hook's
next arm at the :class:`~fleet.delivery.gate.Gate`.

``FLEET_FAULT_DROP_PUSH=N`` (tests only) swallows every N-th push as Claude Code would drop it;
``FLEET_FAULT_PUSH_GAP=S`` stalls S seconds after each push; ``FLEET_FAULT_RECEIPTS_LAG=S`` reads the
transcript only once the newest push is S seconds old (Claude Code writes it behind the session);
``FLEET_FAULT_SAVE_LAG=S`` holds each state the saving thread took S seconds before writing it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

import fleet
from fleet import errors
from fleet.agentstate import Fold, HookLog, Pending, hook_file, state_of
from fleet.channel.codex import CodexWake, another_session
from fleet.channel.tools import (
    TOOL_PATIENCE,
    DeliveryOut,
    DeliveryPhase,
    Tools,
    WaveletDelivery,
    instructions,
)
from fleet.client import Client, Failover
from fleet.delivery.config import TransportConfig, read_token, receipts_on
from fleet.delivery.engine import Backoff, Engine, Outage
from fleet.delivery.frames import Frame, error_frame, notification
from fleet.delivery.gate import Gate
from fleet.delivery.ledger import CLAUDE_TOOK, PATIENCE, Ledger, frame_ids
from fleet.delivery.presence import Presence, PresenceLoop
from fleet.delivery.receipts import Receipt, Transcript
from fleet.delivery.rollout import Rollout
from fleet.delivery.rules import Delivery
from fleet.delivery.state import DeliveryState, StateFile
from fleet.mcpwire import Server, ServerInfo
from fleet.models import AgentState
from fleet.paths import get_paths
from fleet.procs import identity
from fleet.seams import HoldBack, Participant, hold_back_for
from fleet.wire import copy, dump

if TYPE_CHECKING:  # loaded under targeted attention only: a full-attention channel never imports it
    from fleet.delivery.attention import Attendant, RoutingLog

log = logging.getLogger(__name__)

NOTIFICATION = "notifications/claude/channel"
STANDBY_RETRY = 2.0
BACKOFF_FIRST, BACKOFF_MAX = 0.2, 5.0
BACKOFF_OUTAGE = 1.0
"""The longest wait between attempts while the daemon is unreachable: a restarted daemon (same
address, docs/design.md §2) is reached again within about a second of answering."""
BACKOFF_PERMANENT_MAX = 30.0
"""A rejected token, a wave that vanished: keep trying (the operator may fix it), but slowly."""


STATE_POLL = 0.25
"""Seconds between the state thread's looks at the transcript and the hook file while a turn runs
or the session waits (a look at files that did not grow is two ``stat`` calls): a turn's end, or a
prompt it waits at, reaches the daemon within about this."""
STATE_IDLE_POLL = 1.0
"""The same while the session is idle (or failed, dead, unknown): a turn it starts on its own (a
prompt typed in the pane) shows within about this; one a push starts, at once (a push wakes the
state thread)."""
BUSY = ("starting", "turning", "permission", "dialog")
PUSH_QUICK = 5.0
"""Seconds after a push during which the state thread looks as often as during a turn (Claude Code
writes the push's lines within milliseconds, its answer later)."""
UNAPPLIED_MAX = 10_000
"""Receipts read before the ledger exists that are kept for it (older ones are dropped)."""

RECEIPT_POLL = 0.05
"""Seconds between looks at the transcript while a frame is pending."""
SAVE_PATIENCE = 5.0
"""Seconds a stopping channel waits for a state save in flight before it exits."""


class _Sink:
    """The engine's sink: each frame as a ``notifications/claude/channel`` push — or, on the hook
    route, owed to the hook's next arm. With receipts, every frame handed out is in the ledger."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.pushes = 0
        fault = os.environ.get("FLEET_FAULT_DROP_PUSH", "")
        self.drop_every = int(fault) if fault.isdigit() else 0
        gap = os.environ.get("FLEET_FAULT_PUSH_GAP", "")
        self.gap = float(gap) if gap.replace(".", "", 1).isdigit() else 0.0
        """Fault injection: seconds to stall after each push (a descheduled channel, in tests)."""
        self._holding = False
        self._kept: list[Frame] = []
        """The step's pushes not written yet: handed to the ledger at the write (:meth:`flush`)."""
        self._swallowed: list[Frame] = []
        """Codex: the step's frames the fault injection keeps out of its wake."""

    def push(self, frame: Frame) -> bool:
        c = self.channel
        if c._stop.is_set():
            return False
        ledger = c.ledger
        now = time.time()
        if ledger is not None and c.hook_route:
            ledger.hand(frame, "waiting", now)
            return True  # (the receipts thread is woken once the step's frames are all out)
        if c.codex is not None:  # no push reaches Codex: the step's frames go in one codex queue
            self._holding = True
            self.pushes += 1
            if self.drop_every and self.pushes % self.drop_every == 0:
                log.warning("fault injection: wake of push %d swallowed", self.pushes)
                self._swallowed.append(frame)
            self._kept.append(frame)
            return True
        if not self._holding:  # a step's pushes go out together, in one write, at its flush
            c.server.hold()
            self._holding = True
        self.pushes += 1
        if self.drop_every and self.pushes % self.drop_every == 0:
            log.warning("fault injection: push %d swallowed", self.pushes)
        elif not c.server.notify(NOTIFICATION, notification(frame)):
            return False
        self._kept.append(frame)
        if self.gap:
            time.sleep(self.gap)
        return True

    def flush(self) -> bool:
        """Write the step's pushes in one write (Claude Code then takes them into one turn: pushed
        one by one, a channel descheduled between two once had its session answer the first alone).

        The frames are in the ledger from the write on, stamped with its time: the bound Claude Code
        has to queue a push counts from when it could first read it. (Stamped at each push, a step
        that took a while between its first push and its write left the first frames less than the
        bound; Claude Code, queueing them a second late on a loaded machine, then got them again from
        the hook.) A write that failed hands out nothing: the engine takes the step back."""
        if not self._holding:
            return True
        self._holding = False
        kept, self._kept = self._kept, []
        if self.channel.codex is not None:
            swallowed, self._swallowed = self._swallowed, []
            return self.channel.wake_codex(kept, swallowed)
        if not self.channel.server.release():
            return False
        ledger = self.channel.ledger
        if ledger is not None:
            now = time.time()
            for frame in kept:
                ledger.hand(frame, "channel", now)
        return True


class Channel:
    """One participant's channel: the MCP server, the tools and the delivery loop.

    :meth:`serve` blocks until the client closes stdin (or the output breaks), then shuts down:
    the state is saved, presence says ``gone``, the lock is released.
    """

    def __init__(self, config: TransportConfig, *, input: IO[bytes], output: IO[str]) -> None:
        self.config = config
        self.participant = config.participant
        self.wave = config.wave
        self.daemon = config.daemon
        self.token_file = str(config.token_file)
        self.session_id = config.session_id or ""
        self.state_file = StateFile(config.state_dir, config.daemon, config.wave, config.participant)
        self._token = ""
        self._token_error = ""
        self._tools_client: Client | None = None
        self._feed_client: Client | None = None
        self._clients_lock = threading.Lock()
        self._stop = threading.Event()
        self._save_wanted = threading.Event()
        self._save_lock = threading.Lock()
        self._saved_seq = 0
        self._snap_seq = 0
        lag = os.environ.get("FLEET_FAULT_SAVE_LAG", "")
        self._save_lag = float(lag) if lag.replace(".", "", 1).isdigit() else 0.0
        self.engine: Engine | None = None
        self._delivery_state: DeliveryPhase = "starting"
        self._delivery_detail = "waiting for the client's notifications/initialized"
        self._outage: Outage | None = None
        self._failover_told: Failover | None = None
        """The feed's last failover this channel has logged (each is logged once)."""
        self.threads: dict[str, threading.Thread] = {}
        """The channel's threads by role: ``delivery``, ``presence``, ``state`` (the saver),
        ``agent`` (the state fold), and ``early-presence`` while the handshake ping is in flight."""
        self._tools_only = False
        """Set once a ``--no-deliver`` channel is past its start delay: it reports presence from then."""
        self._pinged_early = False
        """Set when this channel reported presence at the handshake, before claiming delivery."""
        self.routing: RoutingLog | None = None
        """Targeted attention only: the routing log (decisions, attendant runs, misses)."""
        self._attendant: Attendant | None = None
        if config.attention != "full":
            from fleet.delivery.attention import ATTENDANT_TIMEOUT, Attendant, RoutingLog, routing_log_path

            self.routing = RoutingLog(routing_log_path(self.state_file), self.participant, self.wave)
            if config.attendant:
                timeout = config.attendant_timeout or ATTENDANT_TIMEOUT
                self._attendant = Attendant(config.attendant, self.routing, timeout)
        self.reload_token()
        self.fold = Fold()
        """What the session's transcript and hooks said so far (:mod:`fleet.agentstate`)."""
        self.permission: Callable[[], Pending | None] | None = None
        """A permission request the session waits on that another source knows of (the
        PermissionRequest hook's record): it wins over the Notification hook's."""
        self._started = time.time()
        self._ready = 0.0
        """When Claude Code finished the MCP handshake (its session is at its prompt from then)."""
        self._transcript_lock = threading.Lock()
        self._look_now = threading.Event()
        """Set after a push (a turn may begin) and at shutdown: the state thread looks now."""
        self._quick_until = 0.0
        """After a push, the state thread looks every :data:`STATE_POLL` until then (monotonic)."""
        self._unapplied: list[Receipt] = []
        """Receipts the state thread's reads found that the receipts reader has not applied yet."""
        self.codex: CodexWake | None = None
        """A Codex session's waker (``--receipts rollout``): frames go out as ``codex queue`` messages."""
        self._transcript: Transcript | None = (
            Transcript(self.session_id, observer=self._observe) if self.session_id else None
        )
        if config.receipts == "rollout" and config.deliver:
            self.codex = CodexWake(
                self.participant, self.wave, config.state_dir, self.session_id or "unknown",
                codex=os.environ.get("FLEET_CODEX_BIN") or "codex", parent=os.getppid(),
            )  # fmt: skip
            self._transcript = Rollout(None, find_thread=self.codex.thread, observer=self._observe)
        self._hooks = HookLog(hook_file(config.state_dir, self.session_id)) if self.session_id else None
        self._has_record = self._transcript is not None or self._hooks is not None
        """The session keeps a record the state thread reads (a transcript, a rollout, the hook file):
        a push is worth a look at it at once. Without one (the stand-in, another CLI) a look reads
        nothing, and a look after every push was a fifth of such a channel's CPU a delivery."""
        self._agent = AgentState(kind="starting", since=self._started)
        # Presence is telemetry, dropped when it fails: the feed's client (no resends), not the tools'
        # (which keeps a call resending through a daemon's restart, for TOOL_PATIENCE seconds).
        self.presence = Presence(
            lambda: self.client(feed=True), self.wave, self.participant,
            session_id=config.session_id, host=config.host, launch=os.environ.get("FLEET_LAUNCH") or None,
            agent=lambda: self._agent,
        )  # fmt: skip
        self._presence_loop = PresenceLoop(
            self.presence, config.ping_interval, lambda: self._reports_presence, self._stop
        )
        self.tools = Tools(self)
        self.server = Server(
            ServerInfo(
                name="fleet",
                version=fleet.__version__,
                instructions=instructions(self.participant, self.wave, config.attention),
                experimental={"claude/channel": {}},
            ),
            self.tools.table(),
            input=input,
            output=output,
        )
        self.receipts = receipts_on(config) and config.deliver
        """Frames count as delivered when the transcript shows them in the model's context."""
        self.ledger: Ledger | None = None
        self._receipts_wanted = threading.Event()
        lag = os.environ.get("FLEET_FAULT_RECEIPTS_LAG", "")
        self._receipts_lag = float(lag) if lag.replace(".", "", 1).isdigit() else 0.0
        self.gate: Gate | None = (
            Gate(self.state_file.path) if config.hook_fallback and self.receipts else None
        )
        self._sink = _Sink(self)
        self._agent = self._fold_state()

    # ------------------------------------------------------------ lifecycle

    def serve(self) -> None:
        """Run until the input ends; delivery, presence and saving run on their threads meanwhile."""
        loops = [
            ("delivery", self._deliver_forever),
            ("presence", self._presence_loop.run),
            ("state", self._save_forever),
            ("agent", self._state_forever),
        ]
        if self.receipts:
            loops.append(("receipts", self._receipts_forever))
        if self.gate is not None:  # open from the start: a hook armed at SessionStart waits here
            self.gate.start()
        for role, target in loops:
            self.threads[role] = t = threading.Thread(
                target=target, name=f"fleet-channel-{role}", daemon=True
            )
            t.start()
        try:
            self.server.serve()
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Stop delivery, save the cursors, report ``gone``, release the lock. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._attendant is not None:  # a run in progress must not outlive the channel
            self._attendant.close()
        self._presence_loop.wake()
        self._save_wanted.set()
        self._receipts_wanted.set()
        self._look_now.set()
        if self.gate is not None:
            self.gate.close()
        for role in ("presence", "early-presence"):  # a report still in flight must not land after "gone"
            t = self.threads.get(role)
            if t is not None and t.ident is not None:
                t.join(1.0)
        saver = self.threads.get("state")
        if saver is not None and saver.ident is not None:
            # a state it took (marked saved) must reach the disk before the process ends it, or the
            # next run replays what this one delivered; a hung disk does not hold the exit for long
            saver.join(SAVE_PATIENCE)
        engine = self.engine
        got = engine.lock.acquire(timeout=3.0) if engine is not None else False
        try:
            if self.state_file.held:
                self._write_state(self._snapshot())
                self.presence.report("gone", timeout=1.0)
                self.state_file.release()
            elif self._tools_only or (self._pinged_early and self._lock_free()):
                self.presence.report("gone", timeout=1.0)
        finally:
            if got and engine is not None:
                engine.lock.release()
        log.info("channel for %s in %s stopped", self.participant, self.wave)

    # ------------------------------------------------------------ daemon access (tools.Host)

    def reload_token(self) -> bool:
        """(Re)read the token file; True when the token changed (clients are then rebuilt)."""
        try:
            token = read_token(self.config)
        except errors.Unauthorized as exc:
            self._token_error = exc.message
            return False
        self._token_error = ""
        if token == self._token:
            return False
        self._token = token
        with self._clients_lock:
            self._tools_client = self._feed_client = None
        return True

    def client(self, feed: bool = False) -> Client:
        if self._token_error:
            self.reload_token()
            if self._token_error:
                raise errors.Unauthorized(self._token_error)
        with self._clients_lock:
            if feed:
                if self._feed_client is None:
                    self._feed_client = Client(self.config.daemon, self._token, retries=0)
                return self._feed_client
            if self._tools_client is None:
                self._tools_client = Client(
                    self.config.daemon, self._token, retries=2, timeout=15, patience=TOOL_PATIENCE
                )
            return self._tools_client

    def outage_since(self) -> float | None:
        return self._outage.since if self._outage else None

    def label(self, wavelet_id: str) -> str | None:
        return self.engine.labels.get(wavelet_id) if self.engine else None

    def delivery_status(self) -> DeliveryOut:
        rows: list[WaveletDelivery] = []
        engine = self.engine
        if engine is not None:
            with engine.lock:
                state = copy(engine.core.state)
                labels = dict(engine.labels)
                held, seen = engine.core.held, engine.core.feed_cursors
            for wid, label in sorted(labels.items(), key=lambda kv: kv[1]):
                rows.append(
                    WaveletDelivery(
                        wavelet=label,
                        wavelet_id=wid,
                        cursor=state.cursors.get(wid, ""),
                        delivered=state.delivered.get(wid, 0),
                        capped=wid in state.exhausted,
                        held=held.get(wid, 0),
                        seen=seen.get(wid, ""),
                    )
                )
        return DeliveryOut(
            state=self._delivery_state, detail=self._delivery_detail, cap=self.config.cap, wavelets=rows
        )

    # ------------------------------------------------------------ presence

    def _lock_free(self) -> bool:
        """True when no channel holds this participant's state lock (probed, not kept)."""
        if self.state_file.held:
            return False
        if not self.state_file.acquire():
            return False
        self.state_file.release()
        return True

    @property
    def hook_route(self) -> bool:
        """Frames go to the hook, not the channel: pushes are not taken here (see the ledger)."""
        return self.gate is not None and self.ledger is not None and self.ledger.state.route == "hook"

    @property
    def _reports_presence(self) -> bool:
        """The delivering channel (the lock holder) reports presence, and so does a tools-only one."""
        return self.state_file.held or self._tools_only

    # ------------------------------------------------------------ the agent's state

    def _observe(self, line: dict[str, Any]) -> None:
        self.fold.take(line, time.time())

    def _read_transcript(self) -> list[Receipt]:
        """Fold what was appended to the transcript; the receipts in it (the caller holds
        ``_transcript_lock``)."""
        transcript = self._transcript
        return transcript.read() if transcript is not None else []

    def _fold_state(self) -> AgentState:
        transcript = self._transcript
        if not receipts_on(self.config):
            why = "its agent keeps no transcript fleet reads: not Claude Code"
            return AgentState(kind="unknown", why=why)
        if transcript is None:
            problem = "no session id (CLAUDE_CODE_SESSION_ID is not set)"
        else:
            problem = transcript.problem
        pending = self.permission() if self.permission is not None else None
        ready = self._ready if self.server.initialized.is_set() else None
        return state_of(self.fold, problem=problem, permission=pending, started=self._started, ready=ready)

    def look(self) -> AgentState:
        """Read the transcript, then the hook file (a prompt's Notification comes after its tool's
        line), and fold them; the state now."""
        with self._transcript_lock:
            got = self._read_transcript()
            if got and self.receipts:
                self._unapplied = (self._unapplied + got)[-UNAPPLIED_MAX:]
            if self._hooks is not None:
                now = time.time()
                for event in self._hooks.read():
                    self.fold.hook(event, now)
            self._agent = self._fold_state()
        if got and self.ledger is not None:
            self._receipts_wanted.set()
        return self._agent

    def _state_forever(self) -> None:
        """Look every :data:`STATE_POLL` seconds (:data:`STATE_IDLE_POLL` while idle, and at once
        after a push); a changed state is reported at once."""
        if self._hooks is not None:
            self._hooks.prepare()
        last = self._agent
        while not self._stop.is_set():
            quick = last.kind in BUSY or time.monotonic() < self._quick_until
            self._look_now.wait(STATE_POLL if quick else STATE_IDLE_POLL)
            self._look_now.clear()
            if self._stop.is_set():
                return
            try:
                now = self.look()
            except Exception:  # a fold bug must not stop the channel: say so, keep delivering
                log.exception("the state fold failed; the state stays %s", last.kind)
                continue
            if now != last:
                last = now
                self._presence_loop.wake(ping=True)

    # ------------------------------------------------------------ delivery

    def _deliver_forever(self) -> None:
        self.server.initialized.wait()
        self._ready = time.time()
        self.look()  # idle (at its prompt), not starting: the state thread reports the change
        with self._transcript_lock:  # what the transcript holds now is an earlier process's history
            if self.fold.lines:
                self.fold.restarted()
                self._agent = self._fold_state()
        if self.config.deliver and not self.server.closed.is_set() and self._lock_free():
            # The handshake is done and no other channel delivers for this participant: say so at
            # once (spawn's readiness check waits for this ping), before delivery is claimed after
            # the grace below. A channel standing by behind a live one stays silent.
            self._pinged_early = True
            t = threading.Thread(
                target=self.presence.report, args=("ping",), name="fleet-channel-early-presence", daemon=True
            )
            t.start()  # registered once started: shutdown may run at any moment and joins what it finds
            self.threads["early-presence"] = t
        if self._stop.wait(self.config.delivery_grace) or self.server.closed.is_set():
            return
        if not self.config.deliver:
            self._set_delivery(
                "stopped", "tools only (--no-deliver): blips reach this session through `fleet watch --hook`"
            )
            self._tools_only = True
            self._presence_loop.wake()
            return
        try:
            engine = self._claim()
        except errors.CorruptState as exc:
            log.error("%s", exc)
            self._set_delivery("stopped", exc.message)
            self.server.notify(
                NOTIFICATION,
                notification(
                    error_frame(f"fleet channel: delivery is stopped. {exc.message} Tell the operator.")
                ),
            )
            return
        if engine is None:
            return
        self.engine = engine
        self._presence_loop.wake()  # the first ping says this channel delivers now
        backoff = Backoff(BACKOFF_FIRST, BACKOFF_OUTAGE)
        while not self._stop.is_set() and not self.server.closed.is_set():
            try:
                engine.source = self.client(feed=True)
                step = engine.step(self.config.poll_wait)
            except errors.FleetError as exc:
                self._feed_failed(exc, backoff)
                continue
            if self._outage is not None:
                log.info(
                    "daemon reachable again after %.1fs; resuming delivery", time.time() - self._outage.since
                )
                self._presence_loop.wake(ping=True)  # a restarted daemon knows no presence
            self._outage = None
            backoff.reset()
            self._set_delivery(
                "running", f"{len(engine.labels)} wavelet(s) on your roster{self._on_daemon()}"
            )
            if step.pushed and self._has_record:
                self._quick_until = time.monotonic() + PUSH_QUICK
                self._look_now.set()  # a turn begins: look at the transcript now, then every 0.25 s
            if step.pushed and self.ledger is not None:
                # woken once the step's frames are out (the sink's flush wrote them in one write):
                # before that the transcript has nothing of them to show
                self._receipts_wanted.set()
            if engine.core.dirty:
                self._save_wanted.set()
            if step.pushed and self.ledger is None:  # with receipts, presence hears of confirmations
                self._presence_loop.wake(step.pushed)
            if not step.complete:
                log.info("protocol output closed; delivery stops with the cursors saved")
                return
            if step.stuck:
                log.warning("the daemon's feed returned only blips at or behind the cursors; backing off")
                self._stop.wait(BACKOFF_MAX)

    def _claim(self) -> Engine | None:
        """Take the state-file lock (standing by while another channel holds it) and load the state."""
        while not self.state_file.acquire():
            self._set_delivery(
                "standby",
                f"another channel of {self.participant} holds {self.state_file.lock_path}; "
                "this one serves tools and takes over when it exits",
            )
            if self._stop.wait(STANDBY_RETRY) or self.server.closed.is_set():
                return None
        try:
            state = self.state_file.load()
        except errors.CorruptState:
            self.state_file.release()
            raise
        self._set_delivery("running", "connecting")
        c = self.config
        if self.receipts:
            self._start_receipts(state)
        core = Delivery(self.participant, state, cap=c.cap, attention=c.attention, hold=c.digest_hold)
        watch = self._hold_back()
        if watch is not None:  # e.g. a wavelet budget is the members' sum: count this one from the start
            watch.start()
        return Engine(
            core,
            self.client(feed=True),
            self._sink,
            wave=self.wave,
            routing=self.routing,
            attendant=self._attendant,
            hold_back=watch,
        )

    def _hold_back(self) -> HoldBack | None:
        """What holds the participant's deliveries back, checked at each one (:data:`fleet.seams.hold_backs`:
        budgets' watch, :mod:`fleet.budgets`), or None when no feature holds anything."""
        who = Participant(
            self.client, self.wave, self.participant, self.session_id, get_paths(), self._budget_notice
        )
        return hold_back_for(who)

    def _budget_notice(self, frame: Frame) -> None:
        """The one budget notice, on the route that wakes the session: pushed once Claude Code takes
        pushes here; otherwise, with a hook installed (``--transport auto``), owed (kept in the
        state, so a restarted channel still owes it) and handed once by the receipts thread: pushed
        if the transcript then shows a push taken, else to the hook's next arm — the arm it wakes
        ends its turn and arms again to find nothing owed, so it never loops. While a push is out
        and the transcript shows neither its taking nor its loss, the notice waits."""
        engine, ledger = self.engine, self.ledger
        if self.codex is not None:  # its one wake (no receipt confirms a notice)
            self.codex.wake([frame])
            return
        if self.gate is None or ledger is None or engine is None or ledger.state.route == "channel":
            self.server.notify(NOTIFICATION, notification(frame))
            return
        with engine.lock:
            ledger.state.notices.append(frame)
            ledger.dirty = True
        log.info("budget notice owed to the hook (route %s)", ledger.state.route)
        self._receipts_wanted.set()

    # ------------------------------------------------------------ Codex

    def wake_codex(self, frames: list[Frame], swallowed: list[Frame], *, locked: bool = False) -> bool:
        """Queue ``frames`` (less ``swallowed``, the fault injection's) as one Codex wake and hand them
        all to the ledger; the ones Codex queued are marked queued at once (its exit says so). False,
        nothing handed, when Codex did not queue them (the engine keeps its cursors; a re-wake from
        the ledger is handed as not queued, so it is tried again after the bound)."""
        codex, ledger = self.codex, self.ledger
        if codex is None:
            return False
        sent = [f for f in frames if f not in swallowed]
        ok = codex.wake(sent) if sent else True
        if not ok and not locked:
            return False
        now = time.time()
        if ledger is not None:
            for frame in frames:
                ledger.hand(frame, "channel", now)
            if ok and sent:
                queued = [
                    Receipt(blip_ids=sorted(frame_ids(f)), how="queued", via="channel", at=now) for f in sent
                ]
                if locked:
                    ledger.apply(queued)
                else:
                    with self._transcript_lock:
                        self._unapplied = (self._unapplied + queued)[-UNAPPLIED_MAX:]
        return ok

    # ------------------------------------------------------------ receipts

    def _start_receipts(self, state: DeliveryState) -> None:
        """The ledger over ``state`` and the transcript of this session (resuming where the state
        says, when it is the same session)."""
        session = self.session_id
        if state.transcript != session:
            if self.codex is not None:
                another_session(state)
            state.transcript, state.transcript_offset = session, 0
        # Codex says at once whether it queued a wake (codex queue's exit): one not queued within
        # the bound was not sent, and its queue outlives the process
        codex = self.codex is not None
        self.ledger = Ledger(
            state, identity(os.getppid()), hook=self.gate is not None, bound=self.config.bound,
            patience=self.config.bound if codex else PATIENCE, durable=codex,
            agent="Codex" if codex else "Claude Code",
            taken="woken by codex queue: Codex queued a wake" if codex else CLAUDE_TOOK,
        )  # fmt: skip
        # The one transcript reader starts at 0 (the state fold needs the whole session): the
        # receipts before the saved offset are applied again, which changes nothing (they confirm
        # only frames still pending, and those were pending when they were read).
        self._receipts_wanted.set()

    def _receipts_forever(self) -> None:
        """Read the transcript while anything is pending; confirm, route, hand the hook what it is owed."""
        while not self._stop.is_set():
            ledger, engine = self.ledger, self.engine
            busy = ledger is not None and bool(ledger.state.pending or ledger.state.notices)
            if not busy:
                self._receipts_wanted.wait(5.0)
                self._receipts_wanted.clear()
            elif self.gate is not None and ledger is not None and (ledger.waiting() or ledger.state.notices):
                self.gate.wait_armed(RECEIPT_POLL)
            else:
                self._stop.wait(RECEIPT_POLL)
            if ledger is None or engine is None or self._stop.is_set():
                continue
            with engine.lock:
                self._receipts_step(ledger)
            if ledger.dirty:
                ledger.dirty = False
                engine.core.dirty = True
                self._save_wanted.set()

    def _receipts_step(self, ledger: Ledger) -> None:
        """One look at the transcript (the caller holds the engine's lock)."""
        now = time.time()
        transcript = self._transcript
        lag = self._receipts_lag
        if lag and any(now < p.handed_at + lag for p in ledger.state.pending):
            pass  # fault injection: the transcript shows nothing of the newest push yet
        elif transcript is not None:
            with self._transcript_lock:
                got, self._unapplied = self._unapplied + self._read_transcript(), []
            ledger.pongs = list(self.server.pongs)  # (answers read before the transcript is)
            confirmed = ledger.apply(got, transcript.last_at, read_at=now)
            if transcript.problem != ledger.state.receipts_problem:
                ledger.state.receipts_problem = transcript.problem
                ledger.dirty = True
            if transcript.consumed != ledger.state.transcript_offset:
                ledger.state.transcript_offset = transcript.consumed
                ledger.dirty = True
            if confirmed:
                self._presence_loop.wake(len(confirmed))
        elif not ledger.state.receipts_problem:
            ledger.state.receipts_problem = "no session id (CLAUDE_CODE_SESSION_ID is not set)"
            ledger.dirty = True
        for p in ledger.lost_pushes(now):
            if self.codex is not None:
                log.info("wake of %s not queued within %.0fs: queued again", p.frame.id, ledger.bound)
                self.wake_codex([p.frame], [], locked=True)
            elif self.gate is not None:
                log.info("push of %s not taken within %.0fs: owed to the hook", p.frame.id, ledger.bound)
                ledger.owe_hook(p, now)
        if self.gate is not None:
            ledger.hooks_running(self.gate.running(), now)
        for p in ledger.lost_hooks(now):
            log.info("hook delivery of %s did not enter the context: owed to the hook again", p.frame.id)
            ledger.owe_hook(p, now)
        if ledger.ping_due(now):  # no push taken yet: has the session read this one? (its answers tell)
            self.server.ping()
        owed = ledger.waiting()
        notices = list(ledger.state.notices)
        if notices and ledger.state.route == "channel":
            # owed while no push was known to be taken, and one is now: pushed after all
            for frame in notices:
                self.server.notify(NOTIFICATION, notification(frame))
            del ledger.state.notices[: len(notices)]
            ledger.dirty = True
            notices = []
        elif ledger.state.route == "unknown" and any(p.path == "channel" for p in ledger.state.pending):
            # a push is out and neither taken nor lost yet: the transcript will say which route
            # wakes the session (Claude Code writes it behind the session) — the notice waits
            notices = []
        gate = self.gate
        handed = (owed or notices) and gate is not None and gate.armed
        if handed and gate is not None and gate.send([*(p.frame for p in owed), *notices]):
            for p in owed:
                ledger.hand(p.frame, "hook", now)
            if notices:  # handed once: no receipt confirms a notice, none is handed again
                del ledger.state.notices[: len(notices)]
                ledger.dirty = True

    def _feed_failed(self, exc: errors.FleetError, backoff: Backoff) -> None:
        """Record an outage or rejection and wait (jittered backoff; slower for permanent errors)."""
        if isinstance(exc, errors.Unauthorized):
            self.reload_token()
        if self._outage is None:
            self._outage = Outage(time.time(), exc.message)
            log.warning("delivery interrupted: %s; retrying with backoff", exc.message)
        else:
            self._outage.reason = exc.message
        self._set_delivery("reconnecting", exc.message)
        self._stop.wait(backoff.delay(None if exc.transient else BACKOFF_PERMANENT_MAX))

    def _on_daemon(self) -> str:
        """Which daemon the feed is on, when the channel lists several (one store): and its last
        failover, when, from which and why. '' with one daemon (nothing to choose between)."""
        feed = self._feed_client
        if feed is None or len(feed.daemons) < 2:
            return ""
        said = f"; on the daemon at {feed.url}"
        move = feed.last_failover
        if move is not None and move is not self._failover_told:
            self._failover_told = move
            log.warning(
                "delivery failed over from the daemon at %s to %s (%s)", move.source, move.to, move.reason
            )
        if move is not None:
            at = time.strftime("%H:%M:%S", time.localtime(move.at))
            said += f", failed over from {move.source} at {at} ({move.reason})"
        return said

    def _set_delivery(self, state: DeliveryPhase, detail: str) -> None:
        self._delivery_state, self._delivery_detail = state, detail

    # ------------------------------------------------------------ saving

    def _save_forever(self) -> None:
        """Write the state file after each batch, off the delivery thread (coalescing under load)."""
        while True:
            self._save_wanted.wait()
            self._save_wanted.clear()
            if self._stop.is_set():
                return
            engine = self.engine
            if engine is None:
                continue
            with engine.lock:
                snapshot = self._snapshot()
            if self._save_lag and snapshot is not None:
                time.sleep(self._save_lag)
            self._write_state(snapshot)

    def _snapshot(self) -> tuple[int, dict[str, Any]] | None:
        """A numbered copy of unsaved state as data (the caller holds the engine's lock), or None
        when saved."""
        engine = self.engine
        if engine is None or not engine.core.dirty:
            return None
        engine.core.mark_saved()
        self._snap_seq += 1
        return self._snap_seq, dump(engine.core.state)

    def _write_state(self, snapshot: tuple[int, dict[str, Any]] | None) -> None:
        if snapshot is None:
            return
        seq, state = snapshot
        with self._save_lock:
            if seq <= self._saved_seq:  # a newer copy is already on disk
                return
            try:
                self.state_file.save_dumped(state)
                self._saved_seq = seq
            except OSError as exc:  # the cursors stay in memory; the next batch tries again
                log.error("cannot save the delivery state to %s: %s", self.state_file.path, exc)
                if self.engine is not None:
                    self.engine.core.dirty = True
