"""The typed API of the daemon: one method per route of :data:`fleet.routes.ROUTES`, named as it.

Each method builds its request record, names its route and passes the route's path parameters and
query; :meth:`~fleet.client.transport.Transport.call` does the rest (the target, the request key,
resends, the answer's record). Every payload in and out is a record of :mod:`fleet.models` (and of
:mod:`fleet.records.budgets`, :mod:`fleet.records.permissions`); every error the daemon reports
comes back as the same :mod:`fleet.errors` class the daemon raised.
"""

from __future__ import annotations

from collections.abc import Sequence

from fleet import routes as R
from fleet.client.transport import Transport
from fleet.models import (
    Blip,
    BlipPage,
    CloseSeat,
    Context,
    EventPage,
    Feed,
    FeedRequest,
    Health,
    MemoryAnswer,
    MemoryOp,
    MemoryWrite,
    MintedToken,
    MintRequest,
    NewBlip,
    NewFork,
    NewMachine,
    NewPin,
    NewSeat,
    NewSession,
    NewSummary,
    NewSurface,
    NewSystemBlip,
    NewTopic,
    NewWave,
    PresenceReport,
    PresenceRow,
    RevokeRequest,
    RosterChange,
    Seat,
    SessionRecord,
    Summary,
    SummaryCheck,
    SummaryInput,
    SummaryVerdict,
    SupervisorClaim,
    SupervisorLease,
    SupervisorRelease,
    TokenInfo,
    Wave,
    WaveActivity,
    Wavelet,
    Whoami,
)
from fleet.records.budgets import Budget, BudgetReachedAnswer, BudgetReport, SetBudget, SpendReport
from fleet.records.permissions import (
    PermissionAnswer,
    PermissionAsk,
    PermissionRequest,
    PermissionSettled,
)


class Client(Transport):
    """A typed client of one daemon (the transport's guarantees: :class:`Transport`)."""

    def health(self) -> Health:
        return self.call(R.HEALTH)

    def whoami(self) -> Whoami:
        return self.call(R.WHOAMI)

    def create_wave(self, name: str, with_: Sequence[str] = ()) -> Wave:
        """Create a wave and its root wavelet ``main`` with ``with_`` on its roster (operator only)."""
        return self.call(R.CREATE_WAVE, NewWave(name=name, with_=list(with_)))

    def list_waves(self) -> list[Wave]:
        """Every wave the caller can see, without their wavelets."""
        return self.call(R.LIST_WAVES).waves

    def get_wave(self, wave: str) -> Wave:
        """A wave (by name or id) with the wavelets the caller can see, rosters included."""
        return self.call(R.GET_WAVE, wave=wave)

    def resolve(self, ref: str, wave: str | None = None) -> Wavelet:
        """The wavelet ``ref`` names: ``WAVE/WAVELET``, a wavelet name inside ``wave``, or an id/prefix."""
        return self.call(R.RESOLVE, query={"ref": ref, "wave": wave})

    def get_wavelet(self, wavelet_id: str) -> Wavelet:
        return self.call(R.GET_WAVELET, wavelet=wavelet_id)

    def fork(
        self,
        wavelet_id: str,
        name: str,
        with_: Sequence[str] = (),
        private: bool = False,
        as_: str | None = None,
    ) -> Wavelet:
        """Fork a child wavelet whose roster is ``with_``; the parent and child get provenance blips."""
        req = NewFork(name=name, with_=list(with_), private=private, as_=as_)
        return self.call(R.FORK, req, wavelet=wavelet_id)

    def invite(self, wavelet_id: str, name: str, as_: str | None = None) -> Wavelet:
        return self.call(R.INVITE, RosterChange(name=name, as_=as_), wavelet=wavelet_id)

    def leave(self, wavelet_id: str, name: str, as_: str | None = None) -> Wavelet:
        return self.call(R.LEAVE, RosterChange(name=name, as_=as_), wavelet=wavelet_id)

    def set_topic(self, wavelet_id: str, topic: str, as_: str | None = None) -> Wavelet:
        """Set the wavelet's one-line topic ('' clears it); the wavelet as it is now."""
        return self.call(R.SET_TOPIC, NewTopic(topic=topic, as_=as_), wavelet=wavelet_id)

    def post(self, wavelet_id: str, text: str, as_: str | None = None, *, key: str | None = None) -> Blip:
        """A ``message`` blip. ``key``: the request key, when the caller makes two calls one post."""
        return self.call(R.POST, NewBlip(text=text, as_=as_), key=key, wavelet=wavelet_id)

    def post_system(self, wavelet_id: str, text: str) -> Blip:
        """Post a ``system`` blip (author ``system``) so the transcript records an operator tool's act.

        Operator only.
        """
        return self.call(R.POST_SYSTEM, NewSystemBlip(text=text), wavelet=wavelet_id)

    def surface(
        self,
        wavelet_id: str,
        text: str,
        source_blip_id: str | None = None,
        as_: str | None = None,
        *,
        key: str | None = None,
    ) -> Blip:
        """Post a ``surface`` blip into the parent of ``wavelet_id``, referencing it as the source."""
        req = NewSurface(text=text, source_blip_id=source_blip_id, as_=as_)
        return self.call(R.SURFACE, req, key=key, wavelet=wavelet_id)

    def replace(self, blip_id: str, text: str, as_: str | None = None) -> Blip:
        """Append a new version of ``blip_id`` (the new blip has ``replaces`` set and a new id)."""
        return self.call(R.REPLACE, NewBlip(text=text, as_=as_), blip=blip_id)

    def read(
        self,
        wavelet_id: str,
        after: str | None = None,
        wait: float = 0,
        limit: int = 500,
        history: bool = False,
    ) -> BlipPage:
        """Blips with id > ``after`` in id order; with ``wait`` > 0, block until one exists or it lapses.

        At the deadline the page is empty and ``cursor == after``. Pass ``cursor`` back as ``after``.
        """
        query = {"limit": limit, "history": history, "after": after, "wait": wait if wait > 0 else None}
        return self.call(R.READ, query=query, wait=wait, wavelet=wavelet_id)

    def context(self, wavelet_id: str, *, limit: int | None = None, before: str | None = None) -> Context:
        """One page of what a participant sees reading this wavelet: each ancestor's latest summary
        and blips up to the fork point, then its own summary and live tail. The newest ``limit``
        entries (the daemon's default: 500) older than ``before``; ``more``: pass ``cursor`` back."""
        return self.call(R.CONTEXT, query={"limit": limit, "before": before}, wavelet=wavelet_id)

    def full_context(self, wavelet_id: str, *, page: int = 5000) -> Context:
        """Every page of the context, stitched (blips and summaries oldest first)."""
        ctx = self.context(wavelet_id, limit=page)
        while ctx.more:
            older = self.context(wavelet_id, limit=page, before=ctx.cursor)
            ctx.blips[:0] = older.blips
            ctx.summaries[:0] = older.summaries
            ctx.more, ctx.cursor = older.more, older.cursor
        return ctx

    def summaries(self, wavelet_id: str) -> list[Summary]:
        """Every summary of the wavelet, oldest first."""
        return self.call(R.SUMMARIES, wavelet=wavelet_id).summaries

    def summarize(self, wavelet_id: str, summary: NewSummary) -> SummaryVerdict:
        """Offer a summary: recorded if it cites every load-bearing blip of its range, else rejected."""
        return self.call(R.SUMMARIZE, summary, wavelet=wavelet_id)

    def summary_check(self, wavelet_id: str) -> SummaryCheck:
        return self.call(R.SUMMARY_CHECK, wavelet=wavelet_id)

    def summary_pending(self, wavelet_id: str, limit: int | None = None) -> SummaryInput:
        """The latest summary, the blips after it, and the ids a summary up to the last must cite."""
        return self.call(R.SUMMARY_PENDING, query={"limit": limit}, wavelet=wavelet_id)

    def pin(self, blip_id: str, as_: str | None = None) -> Blip:
        """Pin a blip: load-bearing from now on (every summary of its wavelet must cite it)."""
        return self.call(R.PIN, NewPin(as_=as_), blip=blip_id)

    def get_blip(self, blip_id: str) -> Blip:
        return self.call(R.GET_BLIP, blip=blip_id)

    def history(self, blip_id: str) -> list[Blip]:
        """Every version of a blip, oldest first."""
        return self.call(R.HISTORY, blip=blip_id).blips

    def feed(
        self, wave: str, participant: str, cursors: dict[str, str], wait: float = 0, limit: int = 200
    ) -> Feed:
        """One long-poll across every wavelet on ``participant``'s roster in ``wave`` (safe to retry)."""
        req = FeedRequest(participant=participant, cursors=cursors, wait=wait, limit=limit)
        return self.call(R.FEED, req, wait=wait, wave=wave)

    def report_presence(self, wave: str, report: PresenceReport) -> None:
        self.call(R.REPORT_PRESENCE, report, wave=wave)

    def presence(self, wave: str) -> list[PresenceRow]:
        return self.call(R.PRESENCE, wave=wave).presence

    def read_wave(self, wave: str, after: str = "", wait: float = 0, limit: int = 500) -> BlipPage:
        """Every blip of ``wave`` with id > ``after``, oldest first, replaced versions too (operator only).

        A long-poll like :meth:`read`: with ``wait`` it returns as soon as one exists, or empty at the
        deadline with ``cursor == after``. Start at ``activity(wave).head`` to see only what comes next.
        """
        query = {"after": after, "wait": wait if wait > 0 else None, "limit": limit}
        return self.call(R.READ_WAVE, query=query, wait=wait, wave=wave)

    def activity(self, wave: str) -> WaveActivity:
        """Who wrote how much where, and when last; and the wave's newest blip id (operator only)."""
        return self.call(R.ACTIVITY, wave=wave)

    def mint_token(self, wave: str, participant: str, machine: str | None = None) -> MintedToken:
        """A new token for (wave, participant), for ``machine`` if given (listed and revoked with it).
        The secret is in the answer only (operator only)."""
        return self.call(R.MINT_TOKEN, MintRequest(wave=wave, participant=participant, machine=machine))

    def mint_machine_token(self, machine: str, waves: Sequence[str]) -> MintedToken:
        """A machine token: the operator's powers in ``waves``, for ``machine`` (the operator token only)."""
        return self.call(R.MINT_MACHINE_TOKEN, NewMachine(name=machine, waves=list(waves)))

    def list_tokens(self, wave: str | None = None, machine: str | None = None) -> list[TokenInfo]:
        return self.call(R.LIST_TOKENS, query={"wave": wave, "machine": machine}).tokens

    def revoke_token(
        self,
        token_id: str | None = None,
        wave: str | None = None,
        participant: str | None = None,
        machine: str | None = None,
    ) -> list[TokenInfo]:
        """Revoke one token by id, every token of (wave, participant), or every token of ``machine``.
        Returns what was revoked."""
        req = RevokeRequest(token_id=token_id, wave=wave, participant=participant, machine=machine)
        return self.call(R.REVOKE_TOKEN, req).revoked

    def record_session(self, wave: str, session: NewSession) -> SessionRecord:
        """Remember the agent session a participant runs (operator only; see ``fleet respawn``)."""
        return self.call(R.RECORD_SESSION, session, wave=wave)

    def sessions(self, wave: str, participant: str | None = None) -> list[SessionRecord]:
        return self.call(R.SESSIONS, query={"participant": participant}, wave=wave).sessions

    def seat(self, wave: str) -> Seat | None:
        """The wave's newest resident seat, open or closed (None: never had one)."""
        return self.call(R.SEAT, wave=wave).seat

    def claim_seat(self, wave: str, seat: NewSeat) -> Seat:
        """Seat a resident (operator only); Conflict names a live seat of another session."""
        got = self.call(R.CLAIM_SEAT, seat, wave=wave).seat
        assert got is not None
        return got

    def supervisor(self, wave: str) -> SupervisorLease | None:
        """Who supervises ``wave`` now (None: no ``fleet supervise`` holds its lease; operator only)."""
        return self.call(R.SUPERVISOR, wave=wave).lease

    def claim_supervisor(self, wave: str, claim: SupervisorClaim) -> SupervisorLease:
        """Claim or renew the wave's supervisor lease; Conflict names another live holder unless
        ``claim.force``."""
        got = self.call(R.CLAIM_SUPERVISOR, claim, wave=wave).lease
        assert got is not None
        return got

    def release_supervisor(self, wave: str, holder: str) -> None:
        """Give the lease up if ``holder`` holds it (idempotent)."""
        self.call(R.RELEASE_SUPERVISOR, SupervisorRelease(holder=holder), wave=wave)

    def close_seat(self, wave: str, why: str, session_id: str | None = None) -> Seat | None:
        """Close the wave's open seat (only ``session_id``'s, when given); idempotent."""
        return self.call(R.CLOSE_SEAT, CloseSeat(why=why, session_id=session_id), wave=wave).seat

    def memory(self, wave: str) -> MemoryAnswer:
        """The wave's MEMORY.md (the operator or the seated resident only)."""
        return self.call(R.MEMORY, wave=wave)

    def write_memory(
        self, wave: str, op: MemoryOp, content: str, summary: str | None = None, as_: str | None = None
    ) -> MemoryAnswer:
        """``update`` (replace) or ``add`` to the wave's MEMORY.md (``as_``: the operator writing
        as the seated resident). A resend carries the same request key, so ``add`` adds once."""
        req = MemoryWrite(op=op, content=content, summary=summary, as_=as_)
        return self.call(R.WRITE_MEMORY, req, wave=wave)

    def events(
        self, after: int = 0, limit: int = 1000, wave: str | None = None, *, tokens: bool = False
    ) -> EventPage:
        """A page of the event log after seq ``after`` (of ``wave`` only): the full operator only.
        Token rows (their hashes) only with ``tokens``."""
        return self.call(R.EVENTS, query={"after": after, "limit": limit, "wave": wave, "tokens": tokens})

    def budgets(self, wave: str, participant: str | None = None) -> list[Budget]:
        """The wave's budgets this token may see; ``participant``: those that apply to it."""
        return self.call(R.BUDGETS, query={"participant": participant}, wave=wave).budgets

    def set_budget(self, wave: str, req: SetBudget) -> Budget | None:
        """Set or clear (neither tokens nor cost) a budget (operator only); the budget as it now is."""
        got = self.call(R.SET_BUDGET, req, wave=wave).budgets
        return got[0] if got else None

    def report_spend(self, wave: str, report: SpendReport) -> list[Budget]:
        """Report a session's spend on wavelets with a shared budget (the participant's channel);
        the budgets that apply to it, with the members' sums."""
        return self.call(R.REPORT_SPEND, report, wave=wave).budgets

    def budget_reached(self, wave: str, report: BudgetReport) -> BudgetReachedAnswer:
        """Report a budget passed (the participant's channel); ``first`` for the report that counted."""
        return self.call(R.BUDGET_REACHED, report, wave=wave)

    # ------------------------------------------------------------ permission prompts (docs/permissions.md)

    def ask_permission(self, wave: str, ask: PermissionAsk) -> PermissionRequest:
        """Record a session's permission prompt (its hook, with the participant's own token)."""
        return self.call(R.ASK_PERMISSION, ask, wave=wave)

    def permission(self, wave: str, request_id: str, wait: float = 0) -> PermissionRequest:
        """One request; with ``wait`` > 0, block until it is no longer pending or ``wait`` lapses."""
        query = {"wait": wait if wait > 0 else None}
        return self.call(R.PERMISSION, query=query, wait=wait, wave=wave, request=request_id)

    def permissions(
        self, wave: str, participant: str | None = None, *, pending: bool = False, limit: int = 100
    ) -> list[PermissionRequest]:
        """The wave's requests, newest first (``pending``: those waiting now)."""
        query = {"limit": limit, "participant": participant, "pending": pending}
        return self.call(R.PERMISSIONS, query=query, wave=wave).requests

    def answer_permission(self, wave: str, answer: PermissionAnswer) -> PermissionRequest:
        """The operator allows or denies a participant's pending request."""
        return self.call(R.ANSWER_PERMISSION, answer, wave=wave)

    def settle_permission(self, wave: str, request_id: str, settled: PermissionSettled) -> PermissionRequest:
        """The hook records how its request ended without the operator (the pane, or let go)."""
        return self.call(R.SETTLE_PERMISSION, settled, wave=wave, request=request_id)
