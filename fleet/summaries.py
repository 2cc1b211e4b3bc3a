"""Who writes rolling summaries: fleet's extractive default, an external summarizer, and the loop
that runs them (``fleet summary run``). The store checks every summary (:mod:`fleet.store.summaries`);
this module only proposes them.

What a caller may rely on:

- :func:`extractive` needs no model and is deterministic: the previous summary's text, then one line
  per load-bearing blip (surfaces, ``DONE:`` blips, pinned blips, blips naming a participant) and per
  latest version of a replaced blip, each ``[id] author: first line``; it cites every load-bearing id.
- :class:`Summarizer` runs an external command (split like a shell would, run without one, in its own
  process group) with a :class:`SummarizerRequest` as JSON on stdin; it answers on stdout with
  ``{"text": ..., "cites": [ids]}``. Fallback-open like the attendant: a non-zero exit, a timeout
  (the process group is killed), or output that is not such an answer gives no summary, and the
  full text stays in context.
- :func:`roll` offers one summary for one wavelet and logs the outcome (accepted, rejected with the
  missing ids, or the summarizer's failure) as a ``summary`` line of the routing log.
- :class:`Runner` is ``fleet summary run``: it follows the wave's blip stream and rolls a wavelet's
  summary once ``every`` new blips or ``bytes`` new bytes arrived since its last summary.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

from fleet import errors
from fleet.client import Client
from fleet.delivery.attention import (
    RUN_FAILURES,
    AttendantBlip,
    RoutingLog,
    SummaryEntry,
    SummaryOutcome,
    attendant_blips,
)
from fleet.models import Blip, NewSummary, SummaryInput
from fleet.paths import Paths
from fleet.procs import run_fail_open
from fleet.wire import Meta, Record, RecordError, dumps, field, loads

if TYPE_CHECKING:
    from fleet.layouts import SummarizerSpec
    from fleet.seams import WatchEvent
    from fleet.spawn import PaneReport

log = logging.getLogger(__name__)

SUMMARIZER_TIMEOUT = 30.0
"""Seconds a summarizer run may take before its answer is ignored (and the process group killed)."""
SUMMARIZER_OUTPUT_MAX = 1 << 20
LINE_CHARS = 200
"""Characters of a blip's first line an extractive line keeps."""
EVERY = 50
"""Default: roll a wavelet's summary after this many new blips."""
BYTES = 64 * 1024
"""Default: or after this many new bytes of text."""

AuthorKind = Literal["participant", "summarizer", "extractive"]


# ---------------------------------------------------------------- the extractive default


def _line(b: Blip) -> str:
    first = b.text.strip().splitlines()[0] if b.text.strip() else ""
    if len(first) > LINE_CHARS:
        first = first[: LINE_CHARS - 1] + "…"
    tag = f" ({b.kind})" if b.kind != "message" else ""
    return f"[{b.id}] {b.author}{tag}: {first}"


def extractive(inp: SummaryInput) -> NewSummary | None:
    """fleet's deterministic summary of ``inp`` (None when there is nothing to cover)."""
    if not inp.blips:
        return None
    need = set(inp.load_bearing)
    lines = [inp.previous.text] if inp.previous is not None else []
    lines += [_line(b) for b in inp.blips if b.id in need or b.replaces is not None]
    if len(lines) == (1 if inp.previous is not None else 0):
        lines.append(f"({len(inp.blips)} blip(s) with nothing load-bearing)")
    return NewSummary(
        text="\n".join(lines),
        upto=inp.blips[-1].id,
        cites=sorted(need),
        author_kind="extractive",
        author="fleet",
    )


# ---------------------------------------------------------------- the external summarizer


class SummarizerRequest(Record, kw_only=True, forbid_unknown_fields=True):
    """What a summarizer reads on stdin: a wavelet's previous summary and the blips after it."""

    version: Literal[1] = 1
    wave: str
    wavelet: str
    """WAVE/WAVELET."""
    wavelet_id: str
    previous: str = ""
    """The previous summary's text ('' for the first): the new one replaces it, so roll it forward."""
    previous_cites: list[str] = field(default_factory=list)
    blips: list[AttendantBlip]
    """The blips to cover, oldest first: the attendant's blip record (the same fields, the same rules)."""
    must_cite: list[str] = field(default_factory=list)
    """The load-bearing ids the summary must cite, or it is rejected."""


class SummarizerAnswer(Record, kw_only=True, forbid_unknown_fields=True):
    """What a summarizer prints on stdout."""

    text: Annotated[str, Meta(min_length=1)]
    cites: list[str] = field(default_factory=list)
    """The blip ids the summary relies on."""


class Summarizer:
    """An external summarizer command, fallback-open (see the module docstring)."""

    def __init__(self, command: str, timeout: float = SUMMARIZER_TIMEOUT) -> None:
        self.argv = shlex.split(command)
        if not self.argv:
            raise errors.UsageError("the summarizer command is empty: pass its command line")
        self.name = os.path.basename(self.argv[0])[:64]
        self.timeout = timeout

    def run(self, inp: SummaryInput, wave: str, label: str) -> tuple[NewSummary | None, SummaryOutcome, str]:
        """The summary the command wrote for ``inp``, or None with the reason it gave none."""
        if not inp.blips:
            return None, "invalid", "nothing to summarize"
        request = SummarizerRequest(
            wave=wave,
            wavelet=label,
            wavelet_id=inp.wavelet_id,
            previous=inp.previous.text if inp.previous is not None else "",
            previous_cites=inp.previous.cites if inp.previous is not None else [],
            blips=attendant_blips(inp.blips),
            must_cite=inp.load_bearing,
        )
        out, outcome, detail = self._run(dumps(request).encode())
        if out is None:
            return None, outcome, detail
        try:
            answer = loads(SummarizerAnswer, out)
        except RecordError as exc:
            where, msg = exc.problems[0]
            return None, "invalid", f"not a summary ({where or 'output'}: {msg}): {out[:120]!r}"
        summary = NewSummary(
            text=answer.text,
            upto=inp.blips[-1].id,
            cites=answer.cites,
            author_kind="summarizer",
            author=self.name,
        )
        return summary, "accepted", ""

    def _run(self, payload: bytes) -> tuple[bytes | None, SummaryOutcome, str]:
        ran = run_fail_open(
            self.argv, payload, timeout=self.timeout, out_max=SUMMARIZER_OUTPUT_MAX, what="summary"
        )
        outcome: SummaryOutcome = "accepted" if ran.kind == "ok" else RUN_FAILURES[ran.kind]
        return ran.output, outcome, ran.detail


# ---------------------------------------------------------------- one roll, and the loop


def roll(
    client: Client,
    wave: str,
    wavelet_id: str,
    label: str,
    routing: RoutingLog | None,
    summarizer: Summarizer | None = None,
) -> SummaryEntry | None:
    """Offer one summary of ``wavelet_id`` (the summarizer's, or the extractive default's) covering
    the blips since its last summary; log and return the outcome (None: nothing new to cover)."""
    t0 = time.monotonic()
    inp = client.summary_pending(wavelet_id)
    if not inp.blips:
        return None
    kind: AuthorKind = "summarizer" if summarizer is not None else "extractive"
    if summarizer is not None:
        proposal, outcome, detail = summarizer.run(inp, wave, label)
    else:
        proposal, outcome, detail = extractive(inp), "accepted", ""
    missing: list[str] = []
    upto = inp.blips[-1].id
    covered = saved = 0
    if proposal is not None:
        try:
            verdict = client.summarize(wavelet_id, proposal)
        except errors.Conflict as exc:
            outcome, detail = "conflict", exc.message
        except (errors.UsageError, errors.PayloadTooLarge) as exc:
            outcome, detail = "invalid", exc.message
        else:
            outcome = "accepted" if verdict.accepted else "rejected"
            missing, detail = verdict.missing, verdict.reason
            if verdict.summary is not None:
                covered = verdict.summary.covered_blips
                saved = verdict.summary.covered_bytes - len(verdict.summary.text.encode("utf-8"))
    if outcome != "accepted":
        log.warning("no summary of %s: %s (%s)", label, outcome, detail)
    entry = SummaryEntry(
        participant=routing.participant if routing is not None else "summarizer",
        wave=wave,
        wavelet_id=wavelet_id,
        wavelet=label,
        author_kind=kind,
        outcome=outcome,
        upto=upto,
        missing=missing,
        detail=detail,
        elapsed_ms=round((time.monotonic() - t0) * 1000, 1),
        covered_blips=covered,
        saved_bytes=saved,
    )
    if routing is not None:
        routing.append([entry])
    return entry


@dataclass
class Runner:
    """``fleet summary run``: follow ``wave`` (as the operator) and roll each wavelet's summary once
    ``every`` blips or ``bytes`` bytes arrived since its last one."""

    client: Client
    wave: str
    routing: RoutingLog | None
    summarizer: Summarizer | None = None
    every: int = EVERY
    bytes: int = BYTES
    wait: float = 30.0
    refused: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    """Per wavelet, the pending (blips, bytes) when its last offer was rejected: it is due again
    only ``every`` blips or ``bytes`` bytes past that (a summary that saved nothing, or missed a
    load-bearing blip, would mostly be refused again at the next blip)."""

    def due(self, wavelet_id: str) -> bool:
        check = self.client.summary_check(wavelet_id)
        blips, size = self.refused.get(wavelet_id, (0, 0))
        return check.pending_blips - blips >= self.every or check.pending_bytes - size >= self.bytes

    def once(self) -> list[SummaryEntry]:
        """One pass over every wavelet of the wave: roll those that are due."""
        wave = self.client.get_wave(self.wave)
        done = []
        for wl in wave.wavelets:
            if self.due(wl.id):
                entry = roll(self.client, wave.name, wl.id, wl.path, self.routing, self.summarizer)
                if entry is not None:
                    done.append(entry)
                    self._note(wl.id, entry)
        return done

    def _note(self, wavelet_id: str, entry: SummaryEntry) -> None:
        if entry.outcome == "rejected":
            check = self.client.summary_check(wavelet_id)
            self.refused[wavelet_id] = (check.pending_blips, check.pending_bytes)
        else:
            self.refused.pop(wavelet_id, None)

    def forever(self, on_entry: Callable[[SummaryEntry], None] | None = None) -> None:
        """Pass once, then after every batch of new blips (long-polls the wave's stream); each
        outcome goes to ``on_entry`` as it happens. Returns only by an exception (Ctrl-C)."""
        cursor = self.client.activity(self.wave).head
        for entry in self.once():
            if on_entry is not None:
                on_entry(entry)
        while True:
            page = self.client.read_wave(self.wave, after=cursor, wait=self.wait)
            if page.blips:
                cursor = page.cursor
                for entry in self.once():
                    if on_entry is not None:
                        on_entry(entry)


# ---------------------------------------------------------------- under ``fleet supervise``


def wave_summarizer(client: Client, paths: Paths, wave: str) -> SummarizerSpec | None:
    """The wave's ``summarizer`` layout key: the first layout recorded with the wave's sessions (in
    the order the daemon lists them) that has one; None when none does (or none loads here)."""
    from fleet.layouts import load as load_layout

    seen: set[str] = set()
    for rec in client.sessions(wave):
        if not rec.layout or rec.layout in seen:
            continue
        seen.add(rec.layout)
        try:
            spec = load_layout(rec.layout, paths).summarizer
        except errors.FleetError as exc:
            log.debug("layout %s of %s not loaded: %s", rec.layout, rec.participant, exc.message)
            continue
        if spec is not None:
            return spec
    return None


class Background:
    """``fleet supervise``'s summary writer: each :meth:`poke` (new blips in the wave) asks a thread
    of its own for one :meth:`Runner.once` pass with the wave's ``summarizer`` (re-read from its
    layouts at every pass; none: no pass), so a slow summarizer never delays a respawn. Fail-open:
    any failure is logged, the full text stays, the next poke tries again."""

    def __init__(self, client: Client, paths: Paths, wave: str, routing: RoutingLog | None) -> None:
        self.client, self.paths, self.wave, self.routing = client, paths, wave, routing
        self.passes = 0
        """Passes done (with or without a summarizer configured)."""
        self.refused: dict[str, tuple[int, int]] = {}
        """:attr:`Runner.refused`, kept across passes."""
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._poked = False

    # a supervisor's watcher (fleet.seams.Watcher) keeping no participant
    keeps = ""
    completed_turn = False

    def step(self, blips: list[Blip], after: str | None = None) -> list[WatchEvent]:
        """The supervisor's round: new blips (or the first round) poke a pass; nothing to report."""
        if blips or not self._poked:
            self.poke()  # its own thread: a slow summarizer never delays a respawn
            self._poked = True
        return []

    def revived(self, report: PaneReport) -> None:
        pass

    def next_due_in(self) -> float | None:
        return None

    def poke(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"summaries-{self.wave}", daemon=True)
            self._thread.start()
        self._wake.set()

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def once(self) -> list[SummaryEntry]:
        spec = wave_summarizer(self.client, self.paths, self.wave)
        if spec is None:
            return []
        summarizer = Summarizer(spec.command, float(spec.timeout)) if spec.command else None
        runner = Runner(self.client, self.wave, self.routing, summarizer, spec.every, spec.bytes)
        runner.refused = self.refused
        return runner.once()

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            if self._stop.is_set():
                return
            self._wake.clear()
            try:
                self.once()
            except errors.FleetError as exc:
                log.warning("summaries of %s not rolled: %s", self.wave, exc.message)
            except Exception:  # fail-open: a summary is never worth the supervisor
                log.exception("summaries of %s not rolled", self.wave)
            self.passes += 1
