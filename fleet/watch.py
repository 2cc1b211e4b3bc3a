"""``fleet watch``: the non-channel transport (DESIGN §5) on the same delivery core as the channel.

A session that cannot receive channel notifications (third-party providers, accounts without
channels) can still be woken when a background process ends. ``fleet watch`` is that process.

**Plain mode** (``fleet watch``): one long-poll ``feed`` after another until at least one blip is
handed to the participant, then everything handed out is printed (readably, or one JSON object per
line with ``--json``), followed by one re-arm line, ``after=v1.…``, and the command exits 0. Passing
that value back (``--after``) resumes exactly where the call stopped: it carries a cursor *per
wavelet* (a busy wavelet never steps over a quiet one's unseen blips) plus the cap's counts, so echo
suppression and the cap hold across calls. The value is base64url (``[A-Za-z0-9_.-]``), so
``eval "$(fleet watch … | tail -n 1)"`` is safe without quoting. Without ``--after`` delivery starts
where a fresh channel starts: at the participant's join of each wavelet.

**Hook mode** (``fleet watch --hook``), run by Claude Code as an ``asyncRewake`` hook
(``SessionStart``, ``Stop`` and ``StopFailure``; :func:`hook_settings` builds the ``--settings`` JSON):

* The position is the channel's own state file (:func:`fleet.delivery.state_path`), so a session
  moving from the channel to the hook, or back, resumes exactly: no replay, no gap.
* The lock beside the state file is taken without waiting; when another process holds it (an arm
  still waiting, or a delivering channel) this arm exits 0 at once. A lock left by a killed process
  is released by the kernel (``flock``), so it never wedges.
* Exit 2 wakes the session: the blips go to stderr, where Claude Code shows them to the model, each
  as ``<channel source="fleet" wavelet=… wavelet_id=… blip_id=… author=… kind=…>`` around its text
  (exactly what the channel transport shows). The state is saved right after they are written: the
  cursor advances when blips are emitted, since nothing acknowledges a hook.
* Exit 2 also when the daemon has been unreachable for ``unreachable_after`` seconds (30 by default),
  with a message saying so: a hook that died quietly would leave an idle session deaf for good.
* Exit 0: nothing happened (another arm holds the lock, ``wait`` elapsed, or the session that ran
  the hook is gone: an orphaned arm exits without delivering, so a respawned session is not robbed).
* Any other failure (unknown wave or participant: 4; rejected token: 5; a corrupt state file: 1)
  exits with its code and message and wakes nothing, because a wake on a permanent error would
  repeat at every turn's end. A corrupt state file is never overwritten: nothing is skipped.

The per-batch step, :func:`take`, is the one place a feed batch meets the delivery core.
"""

from __future__ import annotations

import base64
import binascii
import html
import logging
import os
import random
import shlex
import sys
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fleet import errors
from fleet.client import Client, read_endpoint
from fleet.delivery import (
    DEFAULT_CAP,
    Action,
    Attention,
    Decision,
    Delivery,
    DeliveryState,
    StateFile,
    blip_block,
    digest_text,
    exhaustion_notice,
)
from fleet.models import OPERATOR, PARTICIPANT_RE, Feed, PresenceReport
from fleet.paths import get_paths

log = logging.getLogger(__name__)

POLL_WAIT = 20.0
"""Seconds one feed long-poll may wait (the daemon caps it at 60); also how often a deadline is checked."""
UNREACHABLE_AFTER = 30.0
"""Seconds of daemon outage after which a hook wakes its session to say so (DESIGN §5)."""
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
ORPHAN_CHECK = 0.5
"""Seconds between checks that the hook's parent (the Claude Code session) is still alive."""
REWAKE_SUMMARY = "fleet: new blips"


# ---------------------------------------------------------------- what watch emits


class WatchItem(BaseModel):
    """One thing handed to the participant: a blip, or (``kind == "cap"``) the cap's notice in its place.

    ``--json`` prints one of these per line; the field names are stable.
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    """The blip's id (for a cap notice: the blip it stands in for)."""
    wavelet: str
    """WAVE/WAVELET."""
    wavelet_id: str
    author: str
    """The blip's author; ``fleet`` for a cap notice."""
    kind: str
    """``message``, ``system``, ``surface``, ``cap``, or (targeted attention) ``digest``."""
    text: str
    created_at: str
    replaces: str | None = None
    blip_ids: list[str] | None = None
    """A digest: the blips it lists, oldest first (``id`` is the last); None otherwise."""


class AfterLine(BaseModel):
    """The last line of ``fleet watch --json``: the value to pass back as ``--after``."""

    after: str


def item_of(decision: Decision, label: str, cap: int) -> WatchItem:
    """What a DELIVER or NOTICE decision hands out (the same content and meta as a channel push)."""
    blip = decision.blip
    if decision.action is Action.NOTICE:
        return WatchItem(
            id=blip.id,
            wavelet=label,
            wavelet_id=blip.wavelet_id,
            author="fleet",
            kind="cap",
            text=exhaustion_notice(label, cap),
            created_at=blip.created_at,
        )
    if decision.digest:  # targeted attention: the same digest frame the channel pushes
        return WatchItem(
            id=blip.id,
            wavelet=label,
            wavelet_id=blip.wavelet_id,
            author="fleet",
            kind="digest",
            text=digest_text(decision.digest),
            created_at=blip.created_at,
            blip_ids=[b.id for b in decision.digest],
        )
    return WatchItem(
        id=blip.id,
        wavelet=label,
        wavelet_id=blip.wavelet_id,
        author=blip.author,
        kind=blip.kind,
        text=blip.text,
        created_at=blip.created_at,
        replaces=blip.replaces,
    )


def take(core: Delivery, feed: Feed, only: frozenset[str] | None = None) -> list[WatchItem]:
    """Run one feed batch through the delivery core; return what to emit, oldest first.

    The core's state (in memory) advances over everything handled: delivered blips, cap notices,
    echoes and capped blips. Blips of wavelets outside ``only`` are left untouched (their cursors
    stay). The caller emits the items and then saves the state; if it cannot emit, it must not save.
    """
    labels = {w.id: f"{w.wave}/{w.name}" for w in feed.wavelets}
    core.retain(labels)
    items: list[WatchItem] = []

    def push(decision: Decision) -> bool:
        wid = decision.blip.wavelet_id
        items.append(item_of(decision, labels.get(wid, wid), core.cap))
        return True

    blips = [b for b in feed.blips if only is None or b.wavelet_id in only]
    core.process(blips, push)
    return items


# ---------------------------------------------------------------- the re-arm value


class _After(BaseModel):
    """What an ``after=`` value carries (short keys: it is retyped by people and agents)."""

    model_config = ConfigDict(extra="forbid")

    p: str
    """The participant it belongs to."""
    c: dict[str, str] = Field(default_factory=dict)
    d: dict[str, int] = Field(default_factory=dict)
    x: dict[str, str] = Field(default_factory=dict)


def encode_after(state: DeliveryState) -> str:
    """The ``--after`` value for ``state``: ``v1.`` + base64url(zlib(JSON)), no padding, shell-safe."""
    body = _After(p=state.participant, c=state.cursors, d=state.delivered, x=state.exhausted)
    raw = body.model_dump_json(exclude_defaults=True).encode()
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
        body = _After.model_validate_json(raw)
    except (binascii.Error, ValueError, zlib.error, ValidationError):
        raise errors.UsageError(bad) from None
    if body.p != participant:
        raise errors.UsageError(
            f"--after holds {body.p}'s position, not {participant}'s: pass the value a watch of "
            f"{participant} printed"
        )
    return DeliveryState(
        daemon=daemon, wave=wave, participant=participant, cursors=body.c, delivered=body.d, exhausted=body.x
    )


# ---------------------------------------------------------------- rendering


def _attr(value: str) -> str:
    return html.escape(value, quote=True).replace("&#x27;", "&apos;")


def as_channel_tag(item: WatchItem) -> str:
    """``item`` exactly as Claude Code shows a channel notification to the model (claude-code.md §2)."""
    meta = {
        "wavelet": item.wavelet,
        "wavelet_id": item.wavelet_id,
        "blip_id": item.id,
        "author": item.author,
        "kind": item.kind,
    }
    if item.replaces:
        meta["replaces"] = item.replaces
    if item.blip_ids is not None:
        del meta["blip_id"]
        meta["blip_ids"] = ",".join(item.blip_ids)
    attrs = "".join(f' {k}="{_attr(v)}"' for k, v in meta.items())
    text = item.text.replace("</channel", "<\\/channel")
    return f'<channel source="fleet"{attrs}>\n{text}\n</channel>'


def as_text(item: WatchItem) -> str:
    """A readable block: ``[WAVE/WAVELET] author (kind) · id`` and the text below it."""
    return blip_block(item.wavelet, item.author, item.kind, item.id, item.text, item.replaces)


def hook_report(items: list[WatchItem], participant: str, wave: str) -> str:
    """What a waking hook writes to stderr (the model reads it): a header line, then the blips."""
    n = len(items)
    head = (
        f"fleet: {n} new blip{'s' if n != 1 else ''} for {participant} in wave {wave}. Reply with "
        "wavelet_post (pass the wavelet attribute) only when you have something to add; never reply "
        "to system, surface or cap blips."
    )
    return head + "\n\n" + "\n\n".join(as_channel_tag(i) for i in items) + "\n"


def unreachable_report(config: WatchConfig, down_for: float, reason: str) -> str:
    return (
        f"fleet: the fleet daemon at {config.daemon} has been unreachable for {down_for:.0f}s "
        f"({reason}). Blips for {config.participant} in wave {config.wave} cannot reach you until it "
        "answers again; none are lost (your position is saved) and this hook re-arms when your turn "
        "ends. Tell the operator if this message repeats.\n"
    )


# ---------------------------------------------------------------- configuration


class WatchConfig(BaseModel):
    """Who watches, where, and how long. Built by ``fleet watch`` from options and the environment."""

    model_config = ConfigDict(extra="forbid")

    participant: str
    wave: str
    daemon: str
    token_file: Path | None = None
    """None: ``FLEET_TOKEN`` if set, else the operator token of the local daemon."""
    state_dir: Path
    """Where the channel keeps its state files (hook mode reads and writes its one file there)."""
    cap: int = DEFAULT_CAP
    attention: Attention = "full"
    """Targeted: the attention rules of :mod:`fleet.delivery` (digests; hook mode logs its routing
    decisions to the channel's routing log, :mod:`fleet.attention`). Digests are emitted at once."""
    wavelets: list[str] = Field(default_factory=list)
    """Only these wavelets (refs as typed: WAVE/WAVELET, a name in the wave, an id); empty: all."""
    wait: float = 0.0
    """Give up after this many seconds with nothing handed out; 0: wait as long as it takes."""
    unreachable_after: float = UNREACHABLE_AFTER
    poll_wait: float = POLL_WAIT


def resolve_config(
    *,
    participant: str | None,
    wave: str | None,
    daemon: str | None,
    token_file: Path | None,
    state_dir: Path | None,
    cap: int,
    wavelets: list[str],
    wait: float,
    unreachable_after: float,
    hook: bool,
    attention: Attention = "full",
) -> WatchConfig:
    """Fill in what the command line left out, the way the channel does (env, then local paths).

    Without a token file the local operator token is used: in plain mode for anyone (the operator
    may read any participant's feed), in hook mode only for ``operator`` (a participant's session
    runs on its own token, like its channel).
    """
    paths = get_paths()
    participant = participant or os.environ.get("FLEET_PARTICIPANT", "")
    if not participant:
        raise errors.UsageError("no participant: pass --participant or set FLEET_PARTICIPANT")
    if not PARTICIPANT_RE.match(participant):
        raise errors.UsageError(
            f"participant {participant!r} is not a valid name (lower case letter first, then "
            "letters, digits, '_' or '-', at most 32)"
        )
    wave = wave or os.environ.get("FLEET_WAVE", "")
    if not wave:
        raise errors.UsageError("no wave: pass --wave or set FLEET_WAVE")
    daemon = daemon or os.environ.get("FLEET_DAEMON", "")
    if not daemon:
        endpoint = read_endpoint(paths)
        if endpoint is None:
            raise errors.DaemonUnreachable(
                "no daemon: pass --daemon URL, set FLEET_DAEMON, "
                "or start the local one with `fleet daemon start`"
            )
        daemon = endpoint.url
    env_file = os.environ.get("FLEET_TOKEN_FILE", "").strip()
    if token_file is None and env_file:
        token_file = Path(env_file)
    if token_file is None and hook and participant != OPERATOR:
        raise errors.UsageError(
            "no token file: pass --token-file PATH or set FLEET_TOKEN_FILE (mint one with "
            f"`fleet token mint {wave} {participant} --file PATH`)"
        )
    return WatchConfig(
        participant=participant,
        wave=wave,
        daemon=daemon,
        token_file=token_file.expanduser() if token_file else None,
        state_dir=(state_dir or paths.channels).expanduser(),
        cap=cap,
        attention=attention,
        wavelets=wavelets,
        wait=wait,
        unreachable_after=unreachable_after,
    )


def read_token(config: WatchConfig) -> str:
    """The bearer token: the token file's content, else ``FLEET_TOKEN``, else the local operator token."""
    if config.token_file is None and os.environ.get("FLEET_TOKEN", "").strip():
        return os.environ["FLEET_TOKEN"].strip()
    path = config.token_file or get_paths().operator_token
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise errors.Unauthorized(f"cannot read the token file {path}: {exc.strerror or exc}") from None
    if not token:
        raise errors.Unauthorized(f"the token file {path} is empty: mint a token with `fleet token mint`")
    return token


# ---------------------------------------------------------------- the wait


@dataclass
class Outcome:
    """How a wait ended. ``items`` is non-empty exactly when ``how == "items"``."""

    how: Literal["items", "elapsed", "unreachable"]
    items: list[WatchItem] = field(default_factory=list)
    down_for: float = 0.0
    reason: str = ""


class Watcher:
    """Long-polls the participant's feed through the delivery core until something is handed out.

    ``client`` must carry a token that may read the participant's feed (its own, or the operator's).
    """

    def __init__(self, config: WatchConfig, client: Client) -> None:
        self.config = config
        self.client = client
        self._only: frozenset[str] | None = None
        self.labels: dict[str, str] = {}
        """Wavelet id -> WAVE/WAVELET of every wavelet a feed named so far."""
        self._checked = False

    def _check(self, feed: Feed) -> None:
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
            self._only = frozenset(ids)
        self._checked = True

    def wait(self, core: Delivery, before_emit: Callable[[], bool] = lambda: True) -> Outcome:
        """Poll until items are handed out (``items``), ``config.wait`` passes (``elapsed``), or the
        daemon stays unreachable for ``config.unreachable_after`` (``unreachable``).

        ``before_emit`` is asked before items are returned; False ends the wait as ``elapsed`` with
        nothing returned (the core's state may still have advanced over echoes; do not save it then).
        Errors other than the daemon being unreachable (unknown wave, rejected token) are raised.
        """
        c = self.config
        deadline = time.monotonic() + c.wait if c.wait > 0 else None
        skip: dict[str, str] = {}
        """Cursors for wavelets outside ``only``, for the request only, so they do not end the poll."""
        outage: float | None = None
        reason = ""
        backoff = BACKOFF_FIRST
        while True:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return Outcome("elapsed")
            poll = c.poll_wait if deadline is None else max(0.0, min(c.poll_wait, deadline - now))
            try:
                feed = self.client.feed(c.wave, c.participant, {**core.cursors, **skip}, wait=poll)
            except errors.DaemonUnreachable as exc:
                now = time.monotonic()
                outage = now if outage is None else outage
                reason = exc.message
                if now - outage >= c.unreachable_after:
                    return Outcome("unreachable", down_for=now - outage, reason=_short_reason(reason))
                log.info("daemon unreachable (%s); retrying", reason)
                pause = backoff * random.uniform(0.8, 1.2)
                if deadline is not None:
                    pause = min(pause, max(0.0, deadline - now))
                pause = min(pause, max(0.0, outage + c.unreachable_after - now))
                time.sleep(pause)
                backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            outage, backoff = None, BACKOFF_FIRST
            self._check(feed)
            before = ({**core.cursors}, dict(skip))
            self.labels.update({w.id: f"{w.wave}/{w.name}" for w in feed.wavelets})
            items = take(core, feed, self._only)
            if self._only is not None:
                for b in feed.blips:
                    if b.wavelet_id not in self._only and b.id > skip.get(b.wavelet_id, ""):
                        skip[b.wavelet_id] = b.id
            if items:
                if not before_emit():
                    return Outcome("elapsed")
                return Outcome("items", items)
            if feed.blips and before == (core.cursors, skip):
                log.warning("the daemon's feed returned only blips at or behind the cursors; backing off")
                time.sleep(BACKOFF_MAX)


def _short_reason(message: str) -> str:
    """The reason inside a DaemonUnreachable message (``cannot reach … (REASON); start it …``)."""
    start, end = message.find("("), message.rfind(")")
    return message[start + 1 : end] if 0 <= start < end else message


def _client(config: WatchConfig) -> Client:
    return Client(config.daemon, read_token(config), retries=0, timeout=10)


# ---------------------------------------------------------------- plain mode


def watch(config: WatchConfig, after: str | None) -> tuple[list[WatchItem], str]:
    """Plain ``fleet watch``: wait, then return (items, the next ``--after`` value).

    Items is empty only when ``config.wait`` elapsed. A daemon unreachable for
    ``config.unreachable_after`` raises :class:`~fleet.errors.DaemonUnreachable`.
    """
    if after:
        state = decode_after(after, config.daemon, config.wave, config.participant)
    else:
        state = DeliveryState(daemon=config.daemon, wave=config.wave, participant=config.participant)
    core = Delivery(config.participant, state, cap=config.cap, attention=config.attention)
    with _client(config) as client:
        outcome = Watcher(config, client).wait(core)
    if outcome.how == "unreachable":
        raise errors.DaemonUnreachable(
            f"the fleet daemon at {config.daemon} has been unreachable for {outcome.down_for:.0f}s "
            f"({outcome.reason}); start it with `fleet daemon start`, or check --daemon / FLEET_DAEMON"
        )
    return outcome.items, encode_after(core.state)


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


def run_hook(config: WatchConfig, emit: Callable[[str], None] | None = None) -> int:
    """``fleet watch --hook``: the exit status Claude Code acts on (2 wake, 0 nothing).

    ``emit`` receives the text for the model (default: written to stderr and flushed); the state is
    saved only after it returns. Raises the :mod:`fleet.errors` of a permanent failure (the CLI
    turns them into their exit codes), :class:`~fleet.delivery.CorruptState` included.
    """
    emit = emit or _to_stderr
    state_file = StateFile(config.state_dir, config.daemon, config.wave, config.participant)
    if not state_file.acquire():
        log.info("%s is held by another arm or channel; nothing to do", state_file.lock_path)
        return 0
    guard = _OrphanGuard()
    guard.start()
    try:
        core = Delivery(config.participant, state_file.load(), cap=config.cap, attention=config.attention)
        with _client(config) as client:
            watcher = Watcher(config, client)
            outcome = watcher.wait(core, before_emit=lambda: not guard.orphaned())
            if outcome.how == "items":
                emit(hook_report(outcome.items, config.participant, config.wave))
            with guard.lock:  # an arm orphaned before emitting must not save what it skipped
                if core.dirty and (outcome.how == "items" or not guard.orphaned()):
                    state_file.save(core.state)
                    _log_routes(config, state_file, core, watcher.labels)
                guard.stop()
            if outcome.how == "items":
                _report_delivered(client, config, len(outcome.items))
        if outcome.how == "unreachable":
            emit(unreachable_report(config, outcome.down_for, outcome.reason))
            return EXIT_WAKE
        return EXIT_WAKE if outcome.how == "items" else 0
    finally:
        guard.stop()
        state_file.release()


def _log_routes(config: WatchConfig, state_file: StateFile, core: Delivery, labels: dict[str, str]) -> None:
    """Targeted attention: the committed routing decisions go to the channel's routing log."""
    if config.attention == "targeted":
        from fleet.attention import RoutingLog, routing_log_path

        log_ = RoutingLog(routing_log_path(state_file), config.participant, config.wave)
        log_.routed(core.take_routed(), labels)


def _to_stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def _report_delivered(client: Client, config: WatchConfig, count: int) -> None:
    """Presence says the participant is working (best effort: a wake never waits on it for long)."""
    report = PresenceReport(
        participant=config.participant,
        event="delivered",
        count=count,
        session_id=os.environ.get("CLAUDE_CODE_SESSION_ID") or None,
    )

    def send() -> None:
        try:
            client.report_presence(config.wave, report)
        except errors.FleetError as exc:
            log.debug("presence not reported: %s", exc)

    t = threading.Thread(target=send, daemon=True)
    t.start()
    t.join(2.0)


# ---------------------------------------------------------------- the hook's settings


HOOK_EVENTS = ("SessionStart", "Stop", "StopFailure")


class HookHandler(BaseModel):
    """One command hook in Claude Code's settings (claude-code.md §4); field names are Claude Code's."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["command"] = "command"
    command: str
    asyncRewake: bool = True
    timeout: int = HOOK_TIMEOUT
    rewakeSummary: str = REWAKE_SUMMARY
    rewakeMessage: str


class HookMatcher(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hooks: list[HookHandler]


class HookSettings(BaseModel):
    """The ``--settings`` JSON :func:`hook_settings` prints: event name -> matchers."""

    model_config = ConfigDict(extra="forbid")

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
) -> str:
    """The ``--settings`` JSON that installs ``fleet watch --hook`` for ``participant``.

    ``SessionStart`` arms it when the session starts (or resumes, clears, compacts), ``Stop``
    re-arms it at the end of every turn, and ``StopFailure`` at the end of a turn that failed (an API
    error ends a turn without ``Stop``: without it, one failure would leave the session deaf). A
    second arm while one waits exits 0 at once. The
    ``rewakeSummary``/``rewakeMessage`` fields label the wake (Claude Code 2.1.332 shows them; a
    version without them ignores them and shows "Stop hook feedback").
    """
    command = hook_command(
        participant, wave, daemon, token_file,
        state_dir=state_dir, python=python, attention=attention, cap=cap,
    )  # fmt: skip
    handler = HookHandler(
        command=command,
        rewakeMessage=f"New blips from the fleet wave {wave} for {participant}:",
    )
    entry = [HookMatcher(hooks=[handler])]
    return HookSettings(hooks={event: entry for event in HOOK_EVENTS}).model_dump_json()
