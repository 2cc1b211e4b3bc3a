"""Authorization: who is asking (:class:`Principal`), what a reference names, and what they may do.

This is the store's one authorization layer. Every public :class:`fleet.store.Store` method takes a
principal and goes through :class:`Access` before it reads or writes, so visibility is decided in
one place. The rules (docs/design.md §1, §2):

- The **operator** sees and may do everything. A **participant** (from a participant token) acts in
  one wave only, as itself.
- A **private** wavelet is invisible to anyone not on its roster: every lookup reports it as not
  found (404), never forbidden, so its existence does not leak. So are other waves, and blips in
  wavelets the principal cannot see.
- Writing into a visible wavelet (post, surface, invite) takes being on its roster; a participant
  may take only itself off a roster, and replace only its own blips.

References resolve as: a wave by name, id or unique id prefix; a wavelet as ``WAVE/NAME``, as ``NAME``
within a wave (the principal's own, or the one given), by id or by unique id prefix (prefixes are
matched only among wavelets the principal can see); a blip by id or unique id prefix.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from fleet import errors
from fleet.ids import is_id_like
from fleet.models import OPERATOR
from fleet.store import checks

Row = sqlite3.Row


@dataclass(frozen=True)
class Principal:
    """Who is asking: the operator, or one participant of one wave (from a participant token)."""

    name: str
    wave_id: str | None = None

    @property
    def is_operator(self) -> bool:
        return self.wave_id is None

    @classmethod
    def operator(cls) -> Principal:
        return cls(OPERATOR, None)


OPERATOR_PRINCIPAL = Principal.operator()


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

    def __init__(self, read: Callable[[], sqlite3.Connection]) -> None:
        self._r = read

    # ---------------------------------------------------------------- permissions

    @staticmethod
    def require_operator(who: Principal, doing: str) -> None:
        """Forbidden unless ``who`` is the operator: "only the operator {doing}"."""
        if not who.is_operator:
            raise errors.Forbidden(f"only the operator {doing}")

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

    def require_member(self, who: Principal, wl: Row, doing: str) -> None:
        """Forbidden unless ``who`` is on ``wl``'s roster (or is the operator)."""
        if who.is_operator:
            return
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
    def require_replaceable(who: Principal, old: Row) -> None:
        """Only a blip's author or the operator may replace it, and no one a ``system`` blip."""
        if old["kind"] == "system":
            raise errors.Forbidden("system blips are provenance and cannot be replaced")
        if not who.is_operator and old["author"] != who.name:
            raise errors.Forbidden(
                f"only {old['author']!r} (its author) or the operator may replace blip {old['id']}"
            )

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
        if who.is_operator:
            return True
        if wl["wave_id"] != who.wave_id:
            return False
        return not wl["private"] or self.is_member(wl["id"], who.name)

    def wave(self, who: Principal, ref: str) -> Row:
        """The wave ``ref`` names (name, id or unique id prefix), if ``who`` may see it."""
        r = self._r()
        row: Row | None = r.execute("SELECT * FROM waves WHERE name = ? OR id = ?", (ref, ref)).fetchone()
        if row is None and is_id_like(ref):
            rows = r.execute(
                "SELECT * FROM waves WHERE id LIKE ? ESCAPE '\\' LIMIT 2", (like_prefix(ref),)
            ).fetchall()
            if len(rows) == 1:
                row = rows[0]
        if row is None or (not who.is_operator and row["id"] != who.wave_id):
            raise _no_wave(ref)
        return row

    def wavelets(self, who: Principal, wave_id: str) -> list[Row]:
        """The wavelets of a wave ``who`` may see, by id (the wave itself is the caller's to check)."""
        rows = self._r().execute("SELECT * FROM wavelets WHERE wave_id = ? ORDER BY id", (wave_id,))
        return [wl for wl in rows if self.can_see(who, wl)]

    def wavelet(self, who: Principal, ref: str, *, wave: str | None = None) -> Row:
        """Resolve ``ref`` (WAVE/NAME, NAME within ``wave``, id, or unique id prefix) for ``who``."""
        r = self._r()
        missing = _no_wavelet(ref)
        if not isinstance(ref, str) or not ref:
            raise missing
        row: Row | None = None
        if "/" in ref:
            wave_ref, _, name = ref.partition("/")
            try:
                w = self.wave(who, wave_ref)
            except errors.NotFound:
                raise missing from None
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
            raise missing
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
