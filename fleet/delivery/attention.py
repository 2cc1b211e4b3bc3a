"""The attention layer's I/O: the routing log and the external attendant (docs/design.md §4).

The rules themselves (who gets what in full, what is digested, how frames count toward the cap) are
pure and live in :mod:`fleet.delivery.rules`, so every transport applies them the same way. This module
holds what touches the outside world, for the transports to call:

* **The routing log** (:class:`RoutingLog`): a client-local JSONL file beside the participant's
  delivery state file (:func:`routing_log_path`), mode 0600, appended to and never rewritten. One
  line per committed routing decision (:class:`RouteEntry`: blip, wavelet, the rule that fired,
  ``full`` or ``digest``, and what the cap made of its frame), one per read-after-digest miss
  (:class:`MissEntry`: the agent read, with ``wavelet_read``, a blip it had only been given as a
  digest line; at most one per blip), one per attendant run (:class:`AttendantEntry`), and one per
  summary offered (:class:`SummaryEntry`: accepted, or rejected with the missing load-bearing ids, or
  the summarizer's failure). Only
  targeted attention writes decisions; a blip decided twice (a batch retried after a failed push) is
  logged once, when its batch commits. Each append is a single ``write`` on an ``O_APPEND`` file,
  so the channel and ``fleet watch --hook`` can share one log. It is the training corpus for a
  future learned attendant; nothing in fleet reads it back except miss detection.
* **The attendant** (:class:`Attendant`): an optional external command given each digest batch as
  JSON on stdin (:class:`AttendantRequest`); it may answer on stdout with blip ids to promote to
  full delivery (:class:`AttendantVerdict`). It can only rescue: a non-zero exit, a timeout, output
  that is not a verdict, or ids that are not digested blips of the batch leave the rules' outcome
  standing, and each such fallback is logged with its reason.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from fleet.delivery.rules import Action, Batch, Routed, Rule
from fleet.delivery.state import StateFile
from fleet.models import Blip
from fleet.paths import ensure_private_dir
from fleet.procs import RanKind, kill_group, run_fail_open
from fleet.wire import Record, RecordError, dumps, field, load, loads

log = logging.getLogger(__name__)

ATTENDANT_TIMEOUT = 2.0
"""Seconds an attendant run may take before its verdict is ignored (and the process killed)."""
ATTENDANT_OUTPUT_MAX = 1 << 20
"""Bytes of attendant stdout considered; more is an invalid verdict."""
MISS_WINDOW = 1 << 20
"""Bytes of an existing log read at start to learn which blips were digested before."""
MISS_MEMORY = 50_000
"""Digested blip ids remembered for miss detection (the oldest are forgotten first)."""


def routing_log_path(state_file: StateFile) -> Path:
    """The routing log of a (daemon, wave, participant): beside its state file, ``.routing.jsonl``."""
    return state_file.path.with_suffix(".routing.jsonl")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# ---------------------------------------------------------------- log lines


class Entry(Record, kw_only=True, forbid_unknown_fields=True):
    at: str = field(default_factory=_now)
    """When the line was written (UTC, ISO 8601)."""
    participant: str
    wave: str


class RouteEntry(Entry, kw_only=True, forbid_unknown_fields=True):
    """One routing decision: a blip of someone else, committed to the participant's delivery."""

    event: Literal["route"] = "route"
    blip_id: str
    wavelet_id: str
    wavelet: str
    """WAVE/WAVELET (the id when the label was unknown)."""
    author: str
    kind: str
    rule: Rule
    """The rule that fired (``attendant``: digested by the rules, promoted by the attendant)."""
    route: Literal["full", "digest"]
    outcome: Literal["delivered", "notice", "capped"]
    """What the cap made of the frame carrying it: pushed, replaced by the cap notice, stepped over."""


class MissEntry(Entry, kw_only=True, forbid_unknown_fields=True):
    """A read-after-digest miss: the agent read a blip it had only been given as a digest line."""

    event: Literal["miss"] = "miss"
    blip_id: str
    wavelet_id: str
    wavelet: str
    rule: Rule
    """The rule that digested it."""
    via: Literal["blip", "read"]
    """``blip``: asked for by id (``wavelet_read`` with ``blip_id``); ``read``: came with a wider read."""


AttendantOutcome = Literal["promoted", "none", "exit", "timeout", "invalid", "unknown_ids", "error"]


class AttendantEntry(Entry, kw_only=True, forbid_unknown_fields=True):
    """One attendant run over one digest batch. Every outcome but ``promoted``/``none`` is a fallback
    (``unknown_ids`` still promotes the ids it got right)."""

    event: Literal["attendant"] = "attendant"
    wavelet_id: str
    wavelet: str
    offered: int
    """Digested blips given to it."""
    outcome: AttendantOutcome
    promoted: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    """Ids it answered that were not digested blips of the batch (ignored)."""
    detail: str = ""
    elapsed_ms: float = 0.0


SummaryOutcome = Literal["accepted", "rejected", "exit", "timeout", "invalid", "error", "conflict"]


class SummaryEntry(Entry, kw_only=True, forbid_unknown_fields=True):
    """One summary offered for a wavelet (by a summarizer run, the extractive default or an agent's
    ``wavelet_summarize``). Every outcome but ``accepted`` leaves the full text in context;
    ``rejected`` names the load-bearing ids the summary failed to cite."""

    event: Literal["summary"] = "summary"
    wavelet_id: str
    wavelet: str
    author_kind: Literal["participant", "summarizer", "extractive"]
    outcome: SummaryOutcome
    upto: str = ""
    missing: list[str] = field(default_factory=list)
    detail: str = ""
    elapsed_ms: float = 0.0
    covered_blips: int = 0
    """An accepted summary's: the blips it stands in for (from the wavelet's start up to ``upto``)."""
    saved_bytes: int = 0
    """An accepted summary's: the text bytes of those blips less its own (always > 0: one that would
    save nothing is refused)."""


RUN_FAILURES: dict[RanKind, Literal["error", "timeout", "exit", "invalid"]] = {
    "error": "error",
    "timeout": "timeout",
    "exit": "exit",
    "too-large": "invalid",
}
"""The outcome (attendant's and summarizer's alike) of a run of theirs that gave no output to read."""


LogEntry = RouteEntry | MissEntry | AttendantEntry | SummaryEntry
_ENTRIES: dict[str, type[LogEntry]] = {
    "route": RouteEntry,
    "miss": MissEntry,
    "attendant": AttendantEntry,
    "summary": SummaryEntry,
}


def parse_entry(line: str | bytes) -> LogEntry:
    """One log line as its record (by its ``event``); raises :class:`fleet.wire.RecordError` on
    anything else."""
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise RecordError([("", f"not valid JSON ({exc})")]) from None
    cls = _ENTRIES.get(str(data.get("event"))) if isinstance(data, dict) else None
    if cls is None:
        raise RecordError([("event", 'must be one of "route", "miss", "attendant", "summary"')])
    return load(cls, data)


_OUTCOMES: dict[Action, Literal["delivered", "notice", "capped"]] = {
    Action.DELIVER: "delivered",
    Action.NOTICE: "notice",
    Action.CAPPED: "capped",
}


# ---------------------------------------------------------------- the log


class RoutingLog:
    """The routing log of one participant in one wave, plus what miss detection needs from it.

    Thread-safe. Write failures are logged (to stderr) and otherwise ignored: the log is telemetry,
    and delivery never waits on it. Misses are found by following the file (its own appends and
    another transport's alike), so a channel that only serves tools still notices misses on blips a
    ``fleet watch --hook`` digested.
    """

    def __init__(self, path: Path, participant: str, wave: str) -> None:
        self.path = path
        self.participant = participant
        self.wave = wave
        self._lock = threading.Lock()
        self._offset: int | None = None
        self._partial = b""
        self._digested: OrderedDict[str, tuple[str, Rule]] = OrderedDict()
        """Digested blip id -> (wavelet id, rule), not yet missed."""

    # ------------------------------------------------------------ writing

    def append(self, entries: Iterable[Entry]) -> None:
        """Append lines in one write (nothing when ``entries`` is empty)."""
        data = b"".join(dumps(e).encode() + b"\n" for e in entries)
        if not data:
            return
        with self._lock:
            try:
                try:
                    fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                except FileNotFoundError:
                    ensure_private_dir(self.path.parent)
                    fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
            except OSError as exc:
                log.error("cannot append to the routing log %s: %s", self.path, exc)

    def routed(self, routed: Iterable[Routed], labels: dict[str, str]) -> None:
        """Log committed routing decisions (from :meth:`fleet.delivery.Delivery.take_routed`)."""
        self.append(
            RouteEntry(
                participant=self.participant,
                wave=self.wave,
                blip_id=r.blip.id,
                wavelet_id=r.blip.wavelet_id,
                wavelet=labels.get(r.blip.wavelet_id, r.blip.wavelet_id),
                author=r.blip.author,
                kind=r.blip.kind,
                rule=r.rule,
                route="full" if r.rule.full else "digest",
                outcome=_OUTCOMES[r.action],
            )
            for r in routed
        )

    # ------------------------------------------------------------ misses

    def misses(
        self, blips: Iterable[Blip], via: Literal["blip", "read"], labels: dict[str, str]
    ) -> list[str]:
        """Log a miss for each of ``blips`` that was digested and not yet missed; returns their ids."""
        with self._lock:
            self._follow()
            found = [(b, self._digested.pop(b.id)) for b in blips if b.id in self._digested]
        self.append(
            MissEntry(
                participant=self.participant,
                wave=self.wave,
                blip_id=b.id,
                wavelet_id=wavelet_id,
                wavelet=labels.get(wavelet_id, wavelet_id),
                rule=rule,
                via=via,
            )
            for b, (wavelet_id, rule) in found
        )
        return [b.id for b, _ in found]

    def _follow(self) -> None:
        """Read what was appended since the last call (the caller holds the lock)."""
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if self._offset is None or size < self._offset:  # first look, or the log was replaced
                    self._offset = max(0, size - MISS_WINDOW)
                    self._partial = b""
                    skip_first = self._offset > 0
                else:
                    skip_first = False
                f.seek(self._offset)
                data = self._partial + f.read(size - self._offset)
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("cannot read the routing log %s: %s", self.path, exc)
            return
        self._offset = size
        *lines, self._partial = data.split(b"\n")
        if skip_first and lines:
            lines = lines[1:]  # started mid-line
        for line in lines:
            if not line.strip():
                continue
            try:
                entry = parse_entry(line)
            except RecordError:
                continue
            if isinstance(entry, RouteEntry) and entry.route == "digest":
                self._digested[entry.blip_id] = (entry.wavelet_id, entry.rule)
                self._digested.move_to_end(entry.blip_id)
                while len(self._digested) > MISS_MEMORY:
                    self._digested.popitem(last=False)
            elif isinstance(entry, MissEntry):
                self._digested.pop(entry.blip_id, None)


# ---------------------------------------------------------------- the attendant


class AttendantBlip(Record, kw_only=True, forbid_unknown_fields=True):
    id: str
    author: str
    kind: str
    text: str
    created_at: str
    replaces: str | None = None


def attendant_blips(blips: Iterable[Blip]) -> list[AttendantBlip]:
    """``blips`` as an attendant (or a summarizer) reads them."""
    return [
        AttendantBlip(
            id=b.id, author=b.author, kind=b.kind, text=b.text, created_at=b.created_at, replaces=b.replaces
        )
        for b in blips
    ]


class AttendantRequest(Record, kw_only=True, forbid_unknown_fields=True):
    """What an attendant reads on stdin: one wavelet's digested blips from one feed batch."""

    version: Literal[1] = 1
    participant: str
    """Whose attention this is."""
    wave: str
    wavelet: str
    """WAVE/WAVELET."""
    wavelet_id: str
    blips: list[AttendantBlip]
    """The blips the rules digested, oldest first, full text included."""


class AttendantVerdict(Record, kw_only=True, forbid_unknown_fields=True):
    """What an attendant may print on stdout: ``{"promote": [blip ids]}`` (empty output: none)."""

    promote: list[str] = field(default_factory=list)


class Attendant:
    """Runs the external attendant command over digest batches; rescue-only, fallback-open.

    ``command`` is split like a shell would split it, then run without a shell (wrap it in
    ``sh -c '...'`` for shell features), in its own process group so a timeout kills it whole.
    """

    def __init__(
        self,
        command: str,
        log: RoutingLog,
        timeout: float = ATTENDANT_TIMEOUT,
    ) -> None:
        self.argv = shlex.split(command)
        if not self.argv:
            raise ValueError("the attendant command is empty")
        self.timeout = timeout
        self.routing_log = log
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None

    def review(self, batch: Batch, label: str) -> list[str]:
        """Offer the batch's digested blips; promote what the verdict names. Returns promoted ids."""
        digested = batch.digested
        if not digested:
            return []
        request = AttendantRequest(
            participant=self.routing_log.participant,
            wave=self.routing_log.wave,
            wavelet=label,
            wavelet_id=batch.wavelet_id,
            blips=attendant_blips(digested),
        )
        t0 = time.monotonic()
        verdict, outcome, detail = self._run(dumps(request).encode())
        promoted: list[str] = []
        unknown: list[str] = []
        if verdict is not None:
            promoted, unknown = batch.promote(verdict.promote)
            outcome = "unknown_ids" if unknown else ("promoted" if promoted else "none")
            if unknown:
                detail = f"{len(unknown)} id(s) are not digested blips of this batch; ignored"
        if outcome not in ("promoted", "none"):
            log.warning("attendant fell back to the rules for %s: %s (%s)", label, outcome, detail)
        self.routing_log.append(
            [
                AttendantEntry(
                    participant=self.routing_log.participant,
                    wave=self.routing_log.wave,
                    wavelet_id=batch.wavelet_id,
                    wavelet=label,
                    offered=len(digested),
                    outcome=outcome,
                    promoted=promoted,
                    unknown=unknown,
                    detail=detail,
                    elapsed_ms=round((time.monotonic() - t0) * 1000, 1),
                )
            ]
        )
        return promoted

    def close(self) -> None:
        """Kill a run in progress (the transport is shutting down); its batch was not pushed."""
        with self._lock:
            proc = self._proc
        if proc is not None:
            kill_group(proc)

    def _run(self, payload: bytes) -> tuple[AttendantVerdict | None, AttendantOutcome, str]:
        ran = run_fail_open(
            self.argv,
            payload,
            timeout=self.timeout,
            out_max=ATTENDANT_OUTPUT_MAX,
            what="verdict",
            running=self._track,
        )
        if ran.output is None:
            return None, RUN_FAILURES[ran.kind], ran.detail
        if not ran.output.strip():
            return AttendantVerdict(), "none", ""
        try:
            return loads(AttendantVerdict, ran.output), "none", ""
        except RecordError as exc:
            where, msg = exc.problems[0]
            return None, "invalid", f"not a verdict ({where or 'output'}: {msg}): {ran.output[:120]!r}"

    def _track(self, proc: subprocess.Popen[bytes] | None) -> None:
        with self._lock:
            self._proc = proc
