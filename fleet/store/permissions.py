"""Permission prompts in the store: asked by a session's hook, answered by the operator or the pane.

What a caller may rely on (docs/permissions.md):

- A request is asked by its own participant (its token; or the operator) for a participant of the
  wave, and is ``pending`` until an answer is recorded or its ``expires_at`` passes (when its hook
  stops waiting; it then reads as ``expired`` without any write).
- An answer is recorded once: the first one wins. Answering a request that is decided, expired, or
  that does not exist is refused (Conflict, Conflict, NotFound) and changes nothing; so is answering
  a participant that waits on nothing.
- The operator answers (``allow``/``deny`` via cli, console or channel); the participant's hook
  settles (``pane``: the dialog was answered there first; ``hook``: it let go, ``expired``).
- :meth:`Permissions.pending` is the query the status fold takes: the newest pending request of
  (wave, participant[, session]).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fleet import errors
from fleet.ids import IdMinter
from fleet.records.permissions import (
    MAX_WAIT_BOUND,
    OPERATOR_VIAS,
    PermissionAnswer,
    PermissionAsk,
    PermissionRequest,
    PermissionSettled,
    State,
    bounded,
)
from fleet.store import checks
from fleet.store.access import Access, Principal
from fleet.store.events import PermissionAnswered, PermissionAsked, record
from fleet.store.schema import Connections, Row, now


def _stamp(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _state(row: Row, at: str) -> State:
    outcome = str(row["outcome"])
    if outcome == "pending":
        return "expired" if row["expires_at"] <= at else "pending"
    assert outcome in ("allowed", "denied", "expired")
    return outcome  # type: ignore[return-value]


def _request(row: Row, at: str) -> PermissionRequest:
    return PermissionRequest(
        id=row["id"], wave_id=row["wave_id"], participant=row["participant"], session_id=row["session_id"],
        tool=row["tool"], preview=row["preview"], asked_at=row["asked_at"], expires_at=row["expires_at"],
        state=_state(row, at), prompt_id=row["prompt_id"], answered_by=row["answered_by"], via=row["via"],
        answered_at=row["answered_at"], message=row["message"],
    )  # fmt: skip


class Permissions:
    """The store's permission requests (a method group of :class:`fleet.store.Store`)."""

    def __init__(self, db: Connections, access: Access, ids: IdMinter) -> None:
        self._db = db
        self._r = db.reader
        self.access = access
        self.ids = ids

    # ------------------------------------------------------------ reads

    def get(self, who: Principal, wave: str, request_id: str) -> PermissionRequest:
        """One request of ``wave`` (a participant sees only its own); NotFound otherwise."""
        w = self.access.wave(who, wave)
        row = (
            self._r()
            .execute("SELECT * FROM permissions WHERE id = ? AND wave_id = ?", (request_id, w["id"]))
            .fetchone()
        )
        if row is None or (not who.is_operator and row["participant"] != who.name):
            raise errors.NotFound(
                f"no permission request {request_id!r} in wave {w['name']!r}: `fleet permissions"
                f" {w['name']}` lists them"
            )
        return _request(row, now())

    def list(
        self, who: Principal, wave: str, participant: str | None = None, *, pending: bool = False,
        limit: int = 100,
    ) -> list[PermissionRequest]:  # fmt: skip
        """The wave's requests, newest first (a participant: its own); ``pending``: those waiting now."""
        w = self.access.wave(who, wave)
        if not who.is_operator:
            participant = who.name
        at = now()
        sql, args = "SELECT * FROM permissions WHERE wave_id = ?", [w["id"]]
        if participant:
            sql += " AND participant = ?"
            args.append(participant)
        if pending:
            sql += " AND outcome = 'pending' AND expires_at > ?"
            args.append(at)
        sql += " ORDER BY id DESC LIMIT ?"
        got = self._r().execute(sql, [*args, max(1, min(limit, 1000))]).fetchall()
        return [_request(r, at) for r in got]

    def pending(
        self, who: Principal, wave: str, participant: str, session_id: str | None = None
    ) -> PermissionRequest | None:
        """The newest request of (wave, participant[, session]) waiting now, if any."""
        for req in self.list(who, wave, participant, pending=True, limit=20):
            if session_id is None or req.session_id == session_id:
                return req
        return None

    # ------------------------------------------------------------ writes

    def ask(self, who: Principal, wave: str, ask: PermissionAsk) -> PermissionRequest:
        """Record ``ask`` (by its participant's own token, or the operator's): pending until answered
        or until ``ask.wait`` seconds from now."""
        w = self.access.wave(who, wave)
        checks.participant_name(ask.participant)
        if not who.is_operator and ask.participant != who.name:
            raise errors.Forbidden(f"{who.name!r} cannot ask permission for {ask.participant!r}")
        checks.session_id(ask.session_id)
        if not 0 < ask.wait <= MAX_WAIT_BOUND:
            raise errors.UsageError(f"wait must be between 0 and {MAX_WAIT_BOUND:g} seconds, not {ask.wait}")
        known = (
            self._r()
            .execute("SELECT 1 FROM participants WHERE wave_id = ? AND name = ?", (w["id"], ask.participant))
            .fetchone()
        )
        if known is None:
            raise errors.NotFound(f"{ask.participant!r} is not a participant of wave {w['name']!r}")
        asked = datetime.now(UTC)
        with self._db.write() as conn:
            request_id = self.ids.mint()
            record(
                conn,
                PermissionAsked(
                    request_id=request_id, wave_id=w["id"], participant=ask.participant,
                    session_id=ask.session_id, prompt_id=bounded(ask.prompt_id, 128),
                    tool=bounded(ask.tool, 128), preview=bounded(ask.preview), asked_at=_stamp(asked),
                    expires_at=_stamp(asked + timedelta(seconds=ask.wait)),
                ),
            )  # fmt: skip
        return self.get(who, w["id"], request_id)

    def answer(self, who: Principal, wave: str, ans: PermissionAnswer) -> PermissionRequest:
        """The operator answers ``ans.participant``'s pending request (``ans.request_id``, or its
        newest): refused, changing nothing, when it waits on nothing or the request is over."""
        self.access.require_operator(who, "answers permission requests")
        w = self.access.wave(who, wave)
        if ans.via not in OPERATOR_VIAS:
            raise errors.UsageError(
                f"an operator's answer comes via {', '.join(OPERATOR_VIAS)}, not {ans.via}"
            )
        if ans.request_id:
            req = self.get(who, w["id"], ans.request_id)
            if req.participant != ans.participant:
                raise errors.UsageError(
                    f"permission request {ans.request_id} is {req.participant}'s, not {ans.participant}'s"
                )
        else:
            found = self.pending(who, w["id"], ans.participant)
            if found is None:
                raise errors.NotFound(self._nothing_waits(w, ans.participant))
            req = found
        outcome = "allowed" if ans.behavior == "allow" else "denied"
        return self._settle(who, w, req, outcome, who.name, ans.via, ans.message)

    def settle(self, who: Principal, wave: str, request_id: str, s: PermissionSettled) -> PermissionRequest:
        """The participant's hook records how its request ended without the operator: answered in the
        pane, or let go (``expired``). Refused like :meth:`answer` when the request is over."""
        w = self.access.wave(who, wave)
        req = self.get(who, w["id"], request_id)
        if not who.is_operator and req.participant != who.name:
            raise errors.Forbidden(f"{who.name!r} cannot settle {req.participant!r}'s permission request")
        if s.via == "hook" and s.outcome != "expired":
            raise errors.UsageError("the hook lets go of a request (expired); the pane allows or denies it")
        by = "pane" if s.via == "pane" else req.participant
        return self._settle(who, w, req, s.outcome, by, s.via, s.message, late_ok=s.outcome == "expired")

    def _settle(
        self, who: Principal, w: Row, req: PermissionRequest, outcome: str, by: str, via: str, message: str,
        *, late_ok: bool = False,
    ) -> PermissionRequest:  # fmt: skip
        with self._db.write() as conn:
            row = conn.execute("SELECT * FROM permissions WHERE id = ?", (req.id,)).fetchone()
            at = now()
            state = _state(row, at)
            if row["outcome"] != "pending":
                raise errors.Conflict(
                    f"{req.participant}'s permission request for {req.tool} ({req.id}) was already"
                    f" {row['outcome']} by {row['answered_by']} via {row['via']} at {row['answered_at']}:"
                    " an answer is recorded once"
                )
            if state == "expired" and not late_ok:
                raise errors.Conflict(
                    f"{req.participant}'s permission request for {req.tool} expired at {row['expires_at']}"
                    " (its hook stopped waiting): the dialog in its pane decides now, answer it there"
                    f" (`fleet attach {w['name']}`)"
                )
            record(
                conn,
                PermissionAnswered(
                    request_id=req.id, wave_id=w["id"], participant=req.participant,
                    outcome=outcome,  # type: ignore[arg-type]
                    by=by, via=via, answered_at=at, message=bounded(message, 1000),
                ),
            )  # fmt: skip
        return self.get(who, w["id"], req.id)

    def _nothing_waits(self, w: Row, participant: str) -> str:
        last = (
            self._r()
            .execute(
                "SELECT * FROM permissions WHERE wave_id = ? AND participant = ? ORDER BY id DESC LIMIT 1",
                (w["id"], participant),
            )
            .fetchone()
        )
        said = f"{participant} in wave {w['name']!r} waits on no permission request"
        if last is not None:
            state = _state(last, now())
            said += f" (its last, for {last['tool']} at {last['asked_at']}, is {state}"
            said += f" by {last['answered_by']})" if state in ("allowed", "denied") else ")"
        return said + f": `fleet permissions {w['name']}` lists what waits"
