"""Authorization: who is asking (:class:`Principal`), what a reference names, and what they may do.

This is the store's one authorization layer. Every public :class:`fleet.store.Store` method takes a
principal and goes through :class:`Access` before it reads or writes, so visibility is decided in
one place. The rules (docs/design.md §1, §2):

- The **operator** sees and may do everything. A **machine token** (``fleet remote mint``) is the
  operator within the waves it was minted for (its ``scope``): there it may do what the operator
  does but create waves or mint machine tokens; other waves do not exist for it. A **participant**
  (from a participant token) acts in one wave only, as itself.
- A token is re-checked wherever a request waits (long-polls): revoked while it waits, it is
  :class:`~fleet.errors.Unauthorized` at the next wake-up (:meth:`Access.require_live`).
- A **private** wavelet is invisible to anyone not on its roster: every lookup reports it as not
  found (404), never forbidden, so its existence does not leak. So are other waves, and blips in
  wavelets the principal cannot see.
- Writing into a visible wavelet (post, surface, invite) takes being on its roster; a surface
  writes into the parent: a public parent takes the surfaces of its child's members (a fork's
  participants report up), a private one only from its own roster; a fork announces itself in the
  parent only where the forker may post. A participant may take only itself off a roster,
  and replace only its own blips.
- A wave's memory (MEMORY.md, through the daemon) is the operator's and the seated resident's only.
- What is shown of a wavelet's ancestors (a context's path, provenance text) leaves out those the
  caller cannot see, and so does every id a record points at (:class:`Sight`): a visible wavelet's
  parent and fork point, a blip's source wavelet and source blip are withheld (null) from a
  reader who cannot see the wavelet they are in, so no answer carries the id of a private
  wavelet, or of a blip in it, to anyone off its roster.
- What a non-member *can* learn of a private wavelet is that its name is taken: names are unique
  per wave, so a fork under that name is refused (409, worded alike whoever can see the holder).
  docs/design.md §1 says why no cheaper design removes that one bit.

References resolve as: a wave by name, id or unique id prefix; a wavelet as ``WAVE/NAME``, as ``NAME``
within a wave (the principal's own, or the one given), by id or by unique id prefix (prefixes are
matched only among wavelets the principal can see); a blip by id or unique id prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fleet import errors
from fleet.ids import is_id_like
from fleet.models import OPERATOR, Seat
from fleet.store import checks
from fleet.store.schema import Conn, Row


@dataclass(frozen=True)
class Principal:
    """Who is asking: the operator, a machine token (the operator within ``waves``), or one
    participant of one wave (from a participant token). ``token_id``: the token it came from (None
    for the operator token); ``machine``: the machine that token was minted for."""

    name: str
    wave_id: str | None = None
    waves: frozenset[str] | None = None
    machine: str | None = None
    token_id: str | None = None

    @property
    def is_operator(self) -> bool:
        """The operator's powers (within :attr:`waves` for a machine token)."""
        return self.wave_id is None

    @property
    def is_full_operator(self) -> bool:
        """The operator token itself: every wave, and the powers no machine token has."""
        return self.wave_id is None and self.waves is None

    def in_scope(self, wave_id: str) -> bool:
        """Whether the wave with this id exists for this principal."""
        if self.wave_id is not None:
            return wave_id == self.wave_id
        return self.waves is None or wave_id in self.waves

    @classmethod
    def operator(cls) -> Principal:
        return cls(OPERATOR, None)


OPERATOR_PRINCIPAL = Principal.operator()


MAX_REF = 200
"""The longest reference looked up: an id is 36 characters, WAVE/WAVELET at most 129."""


def check_ref(ref: str, what: str) -> None:
    """UsageError for a reference no wave, wavelet, blip or token could have (too long)."""
    if isinstance(ref, str) and len(ref) > MAX_REF:
        raise errors.UsageError(
            f"that {what} reference is {len(ref)} characters long: give a name or an id (at most {MAX_REF})"
        )


def like_prefix(prefix: str) -> str:
    """A ``LIKE … ESCAPE '\\'`` pattern matching ids that start with ``prefix``."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _no_wave(ref: str) -> errors.NotFound:
    return errors.NotFound(f"no wave {ref!r}: `fleet wave list` shows the waves there are")


def _no_wavelet(ref: str) -> errors.NotFound:
    return errors.NotFound(
        f"no wavelet {ref!r}: address it as WAVE/WAVELET, by id, or set FLEET_WAVE (`fleet tree` lists them)"
    )


def _no_blip(ref: str) -> errors.NotFound:
    return errors.NotFound(f"no blip {ref!r}: `fleet read WAVELET --json` shows blip ids")


class Access:
    """Visibility, permissions and reference resolution over the store's read connections.

    ``read`` gives the calling thread's read connection. Lookups return raw rows of things the
    principal may see, or raise NotFound; permission checks raise Forbidden.
    """

    def __init__(self, read: Callable[[], Conn]) -> None:
        self._r = read

    # ---------------------------------------------------------------- permissions

    @staticmethod
    def require_operator(who: Principal, doing: str) -> None:
        """Forbidden unless ``who`` is the operator: "only the operator {doing}"."""
        if not who.is_operator:
            raise errors.Forbidden(f"only the operator {doing}")

    @staticmethod
    def require_full_operator(who: Principal, doing: str) -> None:
        """Forbidden unless ``who`` holds the operator token itself (not a machine's)."""
        if not who.is_full_operator:
            raise errors.Forbidden(
                f"only the operator {doing}"
                + (": a machine token acts only in its own waves" if who.is_operator else "")
            )

    def require_live(self, who: Principal) -> None:
        """Unauthorized if ``who`` came from a token that has been revoked since (a waiting request)."""
        if who.token_id is None:
            return
        row = (
            self._r()
            .execute("SELECT 1 FROM tokens WHERE id = ? AND revoked_at IS NULL", (who.token_id,))
            .fetchone()
        )
        if row is None:
            raise errors.Unauthorized("the token was revoked: ask the operator for a new one")

    @staticmethod
    def author(who: Principal, as_: str | None) -> str:
        """Who a write is by: ``who`` itself, or (the operator only) the participant named by ``as_``."""
        if as_ is None or as_ == who.name:
            return who.name
        if not who.is_operator:
            raise errors.Forbidden(
                f"participant {who.name!r} cannot act as {as_!r}: a participant token writes only as itself"
            )
        return checks.participant_name(as_)

    def require_member(self, who: Principal, wl: Row, doing: str, *, actor: str | None = None) -> None:
        """Forbidden unless ``who`` is on ``wl``'s roster (or is the operator). The operator acting as
        ``actor`` (``--as``) acts as a member: ``actor`` must be on the roster — the event names it,
        and an import accepts such a write only from the roster (:mod:`fleet.store.artifact`), so a
        write refused there is refused here too and every export imports."""
        if who.is_operator:
            if actor in (None, OPERATOR, who.name) or self.is_member(wl["id"], actor):
                return
            raise errors.Forbidden(
                f"{actor!r} is not on the roster of {wl['name']!r} and cannot {doing} there:"
                f" invite it first, or {doing} as the operator"
            )
        if not self.is_member(wl["id"], who.name):
            raise errors.Forbidden(
                f"{who.name!r} is not on the roster of {wl['name']!r} and cannot {doing} there:"
                " ask a member to invite you"
            )

    @staticmethod
    def require_self(who: Principal, participant: str, refusal: str) -> None:
        """Forbidden unless ``who`` is the operator or ``participant`` itself (``refusal``: the message)."""
        if not who.is_operator and participant != who.name:
            raise errors.Forbidden(refusal)

    @staticmethod
    def require_memory_pen(who: Principal, seat: Seat | None, wave: str) -> None:
        """Forbidden unless ``who`` may read or write wave ``wave``'s MEMORY.md: the operator (its
        token, or a machine token for the wave), or the participant holding the wave's open seat."""
        if who.is_operator:
            return
        if seat is not None and seat.closed_at is None and seat.participant == who.name:
            return
        raise errors.Forbidden(
            f"{who.name!r} cannot read or write wave {wave!r}'s memory: only the operator and the"
            " wave's seated resident hold its pen (ask the resident, or the operator:"
            f" `fleet memory add {wave} TEXT`)"
        )

    @staticmethod
    def memory_author(who: Principal, seat: Seat, wave: str, as_: str | None) -> str:
        """Who a write of wave ``wave``'s MEMORY.md is by: ``who`` itself, holding the pen
        (:meth:`require_memory_pen`), or the seated resident (``seat``'s participant) when the
        operator writes as it (``as_``). Forbidden for anyone else, and as anyone else: the file is
        written by the operator or as the wave's resident, never as another participant."""
        Access.require_memory_pen(who, seat, wave)
        author = Access.author(who, as_)
        if author not in (who.name, seat.participant):
            raise errors.Forbidden(
                f"memory is written by the operator or as the wave's resident ({seat.participant!r}),"
                f" not as {author!r}"
            )
        return author

    @staticmethod
    def require_replaceable(who: Principal, old: Row) -> None:
        """Only a blip's author or the operator may replace it, and no one a ``system`` blip."""
        if old["kind"] == "system":
            raise errors.Forbidden("system blips are provenance and cannot be replaced")
        if not who.is_operator and old["author"] != who.name:
            raise errors.Forbidden(
                f"only {old['author']!r} (its author) or the operator may replace blip {old['id']}"
            )

    @staticmethod
    def require_budget_setter(who: Principal) -> None:
        """Budgets are the operator's (a machine token's within its waves): a participant never
        sets its own or another's."""
        if not who.is_operator:
            raise errors.Forbidden(f"only the operator sets budgets: {who.name!r} holds a participant token")

    @staticmethod
    def require_budget_reporter(who: Principal, participant: str) -> None:
        """A budget passed is reported by the participant's own channel (or the operator)."""
        if not who.is_operator and participant != who.name:
            raise errors.Forbidden(f"{who.name!r} cannot report a budget of {participant!r}")

    def sees_budget(self, who: Principal, b: Row) -> bool:
        """The operator sees every budget of its waves; a participant those that apply to it (its own
        and everyone's) in the wave and the wavelets it can see."""
        if not who.in_scope(b["wave_id"]):
            return False
        if who.is_operator:
            return True
        if b["participant"] not in ("", who.name):
            return False
        if not b["wavelet_id"]:
            return True
        wl = self._r().execute("SELECT * FROM wavelets WHERE id = ?", (b["wavelet_id"],)).fetchone()
        return wl is not None and self.can_see(who, wl)

    # ---------------------------------------------------------------- visibility

    def is_member(self, wavelet_id: str, name: str) -> bool:
        row = (
            self._r()
            .execute("SELECT 1 FROM members WHERE wavelet_id = ? AND name = ?", (wavelet_id, name))
            .fetchone()
        )
        return row is not None

    def can_see(self, who: Principal, wl: Row) -> bool:
        """Whether ``who`` may see the wavelet row ``wl`` (its wave, and its roster if private)."""
        if not who.in_scope(wl["wave_id"]):
            return False
        if who.is_operator:
            return True
        return not wl["private"] or self.is_member(wl["id"], who.name)

    def visible_path(self, who: Principal, wl: Row) -> list[Row]:
        """``wl``'s path from the root (``wl`` last) without the ancestors ``who`` cannot see."""
        return [n for n in self.ancestry(wl) if self.can_see(who, n)]

    def wave(self, who: Principal, ref: str, memo: dict[object, object] | None = None) -> Row:
        """The wave ``ref`` names (name, id or unique id prefix), if ``who`` may see it. ``memo``:
        a generation's shared results (:class:`fleet.store.schema.GenerationMemo`), where a wave
        found by name or id is kept (a wave's row is never changed or removed once written)."""
        check_ref(ref, "wave")
        key = ("wave", ref)
        row: Row | None = memo.get(key) if memo is not None else None  # type: ignore[assignment]
        if row is not None:
            if not who.in_scope(row["id"]):
                raise _no_wave(ref)
            return row
        r = self._r()
        row = r.execute("SELECT * FROM waves WHERE name = ? OR id = ?", (ref, ref)).fetchone()
        if row is not None and memo is not None:
            memo[key] = row
        if row is None and is_id_like(ref):
            rows = r.execute(
                "SELECT * FROM waves WHERE id LIKE ? ESCAPE '\\' LIMIT 2", (like_prefix(ref),)
            ).fetchall()
            if len(rows) == 1:
                row = rows[0]
        if row is None or not who.in_scope(row["id"]):
            raise _no_wave(ref)
        return row

    def wavelets(self, who: Principal, wave_id: str) -> list[Row]:
        """The wavelets of a wave ``who`` may see, by id (the wave itself is the caller's to check)."""
        rows = self._r().execute("SELECT * FROM wavelets WHERE wave_id = ? ORDER BY id", (wave_id,))
        return [wl for wl in rows if self.can_see(who, wl)]

    def wavelet(self, who: Principal, ref: str, *, wave: str | None = None) -> Row:
        """Resolve ``ref`` (WAVE/NAME, NAME within ``wave``, id, or unique id prefix) for ``who``."""
        check_ref(ref, "wavelet")
        r = self._r()
        if not isinstance(ref, str) or not ref:
            raise _no_wavelet(ref)
        row: Row | None = None
        if "/" in ref:
            wave_ref, _, name = ref.partition("/")
            try:
                w = self.wave(who, wave_ref)
            except errors.NotFound:
                raise _no_wavelet(ref) from None
            row = r.execute(
                "SELECT * FROM wavelets WHERE wave_id = ? AND name = ?", (w["id"], name)
            ).fetchone()
        else:
            hint = wave if wave else None
            if hint is None and not who.is_operator:
                hint = who.wave_id
            if hint is not None:
                try:
                    w = self.wave(who, hint)
                    row = r.execute(
                        "SELECT * FROM wavelets WHERE wave_id = ? AND name = ?", (w["id"], ref)
                    ).fetchone()
                except errors.NotFound:
                    row = None
            if row is None:
                row = r.execute("SELECT * FROM wavelets WHERE id = ?", (ref,)).fetchone()
            if row is None and is_id_like(ref):
                candidates = [
                    c
                    for c in r.execute(
                        "SELECT * FROM wavelets WHERE id LIKE ? ESCAPE '\\' LIMIT 50", (like_prefix(ref),)
                    )
                    if self.can_see(who, c)
                ]
                if len(candidates) > 1:
                    raise errors.UsageError(
                        f"id prefix {ref!r} matches {len(candidates)} wavelets: give more characters"
                    )
                row = candidates[0] if candidates else None
        if row is None or not self.can_see(who, row):
            raise _no_wavelet(ref)
        return row

    def wavelet_by_id(self, who: Principal, wavelet_id: str) -> Row:
        """The wavelet with exactly this id, if ``who`` may (still) see it."""
        row: Row | None = self._r().execute("SELECT * FROM wavelets WHERE id = ?", (wavelet_id,)).fetchone()
        if row is None or not self.can_see(who, row):
            raise _no_wavelet(wavelet_id)
        return row

    def ancestry(self, wl: Row) -> list[Row]:
        """``wl``'s path from the root, ``wl`` last. Unfiltered: callers decide what of it ``who`` sees."""
        path = [wl]
        r = self._r()
        while path[0]["parent_id"]:
            path.insert(
                0, r.execute("SELECT * FROM wavelets WHERE id = ?", (path[0]["parent_id"],)).fetchone()
            )
        return path

    def blip(self, who: Principal, ref: str) -> Row:
        """The blip ``ref`` names (id or unique id prefix), if ``who`` may see its wavelet."""
        check_ref(ref, "blip")
        r = self._r()
        missing = _no_blip(ref)
        if not isinstance(ref, str) or not ref:
            raise missing
        row: Row | None = r.execute("SELECT * FROM blips WHERE id = ?", (ref,)).fetchone()
        if row is None and is_id_like(ref):
            rows = r.execute(
                "SELECT * FROM blips WHERE id LIKE ? ESCAPE '\\' LIMIT 50", (like_prefix(ref),)
            ).fetchall()
            rows = [b for b in rows if self._sees_blip(who, b)]
            if len(rows) > 1:
                raise errors.UsageError(f"id prefix {ref!r} matches {len(rows)} blips: give more characters")
            row = rows[0] if rows else None
        if row is None or not self._sees_blip(who, row):
            raise missing
        return row

    def _sees_blip(self, who: Principal, b: Row) -> bool:
        wl = self._r().execute("SELECT * FROM wavelets WHERE id = ?", (b["wavelet_id"],)).fetchone()
        return wl is not None and self.can_see(who, wl)

    def sight(self, who: Principal) -> Sight:
        """What ``who`` may be told of the wavelets records point at, for one answer."""
        return Sight(self, who)


class Sight:
    """Which of the wavelets a record points at (a wavelet's parent, a blip's source) one principal
    may be told of: the rule :mod:`fleet.store.rows` withholds ids by.

    Made per answer (:meth:`Access.sight`) and asked id by id; each id is looked up once and the
    answer remembered, so an answer of hundreds of blips that name a few sources costs a few
    lookups. An answer is as of the moment it is first asked: make a new one per request. The
    operator (and a machine token: a record's pointers stay inside the record's wave, which was
    checked) is told every id without a lookup.
    """

    __slots__ = ("_access", "_seen", "_who")

    def __init__(self, access: Access, who: Principal) -> None:
        self._access = access
        self._who = who
        self._seen: dict[str, bool] = {}

    @property
    def everything(self) -> bool:
        """Nothing is withheld from this principal (the operator's powers)."""
        return self._who.is_operator

    def sees(self, wavelet_id: str) -> bool:
        """Whether the wavelet with this id may be named to the principal (NotFound's rule: a private
        wavelet only to its roster; a wavelet that is not there, to no one)."""
        if self._who.is_operator:
            return True
        seen = self._seen.get(wavelet_id)
        if seen is None:
            row = self._access._r().execute("SELECT * FROM wavelets WHERE id = ?", (wavelet_id,)).fetchone()
            seen = self._seen[wavelet_id] = row is not None and self._access.can_see(self._who, row)
        return seen
