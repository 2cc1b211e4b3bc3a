"""Rolling summaries, pins, and context assembly over them (docs/design.md §1, "Rolling summaries").

A **summary** of a wavelet stands in for its blips up to ``upto`` (inclusive). Summaries roll: each
one covers the wavelet from its start (it is written from the previous summary plus the blips after
it), so a context needs only the latest one below its bound. **Context assembly** for a wavelet is,
for each ancestor the caller can see, its latest summary up to the fork point plus the blips after
that summary up to the fork point; then the wavelet's own latest summary and its live tail.

What a caller may rely on:

- **Load-bearing blips are checked, not trusted.** A blip is load-bearing when it is a surface, has
  a line starting ``DONE:``, was pinned (``blip.pinned``), or names a participant of the wave (the
  delivery rule's word-boundary or ``[[name]]`` match; ``system`` blips are provenance and never
  count). A summary is recorded only if its ``cites`` hold every load-bearing id of its range: the
  blips after the previous summary up to ``upto``, the previous summary's load-bearing ids (but those
  replaced by then), and every blip pinned up to ``upto``. Otherwise it is rejected with the missing
  ids and nothing changes. A blip pinned after a summary was written is shown in full beside it.
- With no summary, the assembly is exactly the full walk (``bytes == full_bytes``).
- Visibility is the wavelets': an ancestor the caller cannot see contributes neither blips nor its
  summary, and a summary is read, written or checked only by those who may see its wavelet.
- Assembly costs a few indexed queries per ancestor: it grows with the fork depth and the live
  tails, not with the history the summaries cover (``bench/context.py``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fleet import errors
from fleet.ids import IdMinter
from fleet.models import (
    OPERATOR,
    Blip,
    Context,
    Member,
    NewSummary,
    Summary,
    SummaryCheck,
    SummaryInput,
    SummaryVerdict,
    Wavelet,
)
from fleet.store import checks, rows
from fleet.store.access import Access, Principal, Sight
from fleet.store.events import BlipPinned, SummaryRecorded, record
from fleet.store.schema import Conn, Connections, Row, now

log = logging.getLogger(__name__)


CONTEXT_PAGE = 500
"""Entries (blips and summaries) one context page holds unless a smaller limit is asked for."""
CONTEXT_MAX = 5000
"""The most entries any one context page holds."""
INPUT_MAX = 2000
"""The most blips one summary input hands a writer (the rest waits for the next run)."""

_END = "~"
"""Sorts after every id (ids are lower-case hex and ``-``): "no bound"."""
DONE_RE = re.compile(r"^\s*DONE:", re.MULTILINE)


def text_bytes(text: str) -> int:
    return len(text.encode("utf-8"))


def naming(names: Iterable[str]) -> re.Pattern[str] | None:
    """One pattern matching a text that names any of ``names`` (the delivery rule's mention:
    :func:`fleet.delivery.rules.mentions`), or None for no names."""
    alts = "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True))
    if not alts:
        return None
    return re.compile(rf"(?<![\w-])(?:{alts})(?![\w-])|\[\[(?:{alts})\]\]", re.IGNORECASE)


def is_load_bearing(kind: str, text: str, names: re.Pattern[str] | None) -> bool:
    """Whether a blip of ``kind`` with ``text`` is load-bearing by its content (pins aside)."""
    if kind == "system":
        return False
    if kind == "surface" or DONE_RE.search(text):
        return True
    return names is not None and names.search(text) is not None


def summary_of(s: Row, *, load_bearing: bool = True) -> Summary:
    """A summary row as its record; ``load_bearing=False`` leaves that list empty (a context's)."""
    return rows.of_row(
        Summary,
        s,
        cites=json.loads(s["cites"]),
        load_bearing=json.loads(s["load_bearing"]) if load_bearing else [],
    )


def _wavelets(conn: Conn, nodes: list[Row], wave_name: str, sight: Sight) -> list[Wavelet]:
    """The wavelets of ``nodes`` with their rosters, for ``sight``'s reader (as
    :func:`fleet.store.rows.wavelet` builds them), in one query."""
    rosters: dict[str, list[Member]] = {n["id"]: [] for n in nodes}
    if nodes:
        marks = ",".join("?" * len(nodes))
        for m in conn.execute(
            f"SELECT * FROM members WHERE wavelet_id IN ({marks}) ORDER BY joined_at, name",
            [n["id"] for n in nodes],
        ):
            rosters[m["wavelet_id"]].append(rows.of_row(Member, m))
    return [rows.wavelet(conn, wl, sight, wave_name, rosters[wl["id"]]) for wl in nodes]


def _ancestry(conn: Conn, wl: Row) -> list[Row]:
    """``wl``'s path from the root, ``wl`` last, in one query (as :meth:`Access.ancestry`)."""
    got = conn.execute(
        "WITH RECURSIVE up(id, depth) AS (SELECT id, 0 FROM wavelets WHERE id = ?"
        " UNION ALL SELECT w.parent_id, up.depth + 1 FROM wavelets w JOIN up ON w.id = up.id"
        " WHERE w.parent_id IS NOT NULL)"
        " SELECT w.* FROM up JOIN wavelets w ON w.id = up.id ORDER BY up.depth DESC",
        (wl["id"],),
    ).fetchall()
    return list(got)


@dataclass
class _Part:
    node: Row
    bound: str
    """The last blip id this part shows (the child's fork point), or :data:`_END` for the wavelet itself."""
    summary: Row | None
    pinned: list[Row]
    """Blips the summary covers but does not cite that were pinned: shown in full beside it."""
    stale: int = 0
    """Bytes of covered versions replaced in the tail since the summary: in its ``covered_bytes``,
    not in the full walk (their replacement is, in the tail)."""
    beyond: int = 0
    """Bytes of the system blips past ``bound`` the summary covers (a fork's own announcement in its
    parent, provenance after it): in its ``covered_bytes``, not in the fork's walk."""

    def saving(self) -> int:
        """Text bytes the summary saves this part: what it stands in for, less it and the pinned
        blips shown beside it (assembly uses it only when > 0)."""
        assert self.summary is not None
        shown = text_bytes(self.summary["text"]) + sum(text_bytes(b["text"]) for b in self.pinned)
        return int(self.summary["covered_bytes"]) - self.stale - self.beyond - shown


class Summaries:
    """The summaries and pins of one store, and context assembly over them (used by
    :class:`fleet.store.Store`, which owns the connections, the access layer and the id minter)."""

    def __init__(
        self, db: Connections, access: Access, ids: IdMinter, max_text: Callable[[str], str]
    ) -> None:
        self._db = db
        self._r = db.reader
        self.access = access
        self.ids = ids
        self._max_text = max_text

    # ---------------------------------------------------------------- lookups

    @staticmethod
    def _latest(conn: Conn, wavelet_id: str, bound: str = _END) -> Row | None:
        row: Row | None = conn.execute(
            "SELECT * FROM summaries WHERE wavelet_id = ? AND upto <= ? ORDER BY upto DESC LIMIT 1",
            (wavelet_id, bound),
        ).fetchone()
        return row

    @staticmethod
    def _names(conn: Conn, wave_id: str) -> re.Pattern[str] | None:
        got = conn.execute("SELECT name FROM participants WHERE wave_id = ?", (wave_id,))
        return naming(r[0] for r in got)

    def _required(self, conn: Conn, wl: Row, prev: Row | None, upto: str) -> list[str]:
        """Every load-bearing id a summary of ``wl`` up to ``upto`` rolled from ``prev`` must cite."""
        names = self._names(conn, wl["wave_id"])
        after = prev["upto"] if prev is not None else ""
        need: set[str] = set()
        for b in conn.execute(
            "SELECT id, kind, text FROM blips WHERE wavelet_id = ? AND id > ? AND id <= ?"
            " AND (superseded_by IS NULL OR superseded_by > ?)",
            (wl["id"], after, upto, upto),
        ):
            if is_load_bearing(b["kind"], b["text"], names):
                need.add(b["id"])
        if prev is not None:
            carried = json.loads(prev["load_bearing"])
            replaced = {
                r[0]
                for r in conn.execute(
                    "SELECT id FROM blips WHERE id IN (SELECT value FROM json_each(?))"
                    " AND superseded_by IS NOT NULL AND superseded_by <= ?",
                    (json.dumps(carried), upto),
                )
            }
            need.update(i for i in carried if i not in replaced)
        need.update(
            r[0]
            for r in conn.execute(
                "SELECT blip_id FROM pins WHERE wavelet_id = ? AND blip_id <= ?", (wl["id"], upto)
            )
        )
        return sorted(need)

    # ---------------------------------------------------------------- writers

    def summarize(self, who: Principal, ref: str, body: NewSummary) -> SummaryVerdict:
        """Record a summary of ``ref`` up to ``body.upto``, if it cites every load-bearing id of its
        range; otherwise a rejection naming the missing ids (nothing is recorded).

        A participant (a member) writes as itself; ``author_kind`` ``summarizer`` or ``extractive``
        is the operator's (a summarizer run, fleet's extractive default). Bad input (an ``upto`` not
        in the wavelet, cites outside the range, empty text) is a UsageError; an ``upto`` at or
        before the latest summary's is a Conflict.
        """
        wl = self.access.wavelet(who, ref)
        if body.author_kind == "participant":
            author = self.access.author(who, body.as_)
            if author == OPERATOR and body.author:
                author = checks.participant_name(body.author)
        else:
            self.access.require_operator(who, f"records {body.author_kind} summaries")
            author = (body.author or ("fleet" if body.author_kind == "extractive" else "summarizer"))[:64]
        self.access.require_member(
            who, wl, "summarize", actor=author if body.author_kind == "participant" else None
        )
        if not body.text.strip():
            raise errors.UsageError("a summary needs text: say what the covered blips established")
        self._max_text(body.text)
        upto = self.access.blip(who, body.upto)
        if upto["wavelet_id"] != wl["id"]:
            raise errors.UsageError(
                f"blip {body.upto!r} is not in {wl['name']!r}: a summary covers its own wavelet"
            )
        cites = list(dict.fromkeys(body.cites))
        with self._db.write() as conn:
            prev = self._latest(conn, wl["id"])
            if prev is not None and prev["upto"] >= upto["id"]:
                raise errors.Conflict(
                    f"{wl['name']!r} is already summarized up to {prev['upto']}: summarize a later blip"
                )
            known = {
                r[0]
                for r in conn.execute(
                    "SELECT id FROM blips WHERE wavelet_id = ? AND id <= ? AND id IN"
                    " (SELECT value FROM json_each(?))",
                    (wl["id"], upto["id"], json.dumps(cites)),
                )
            }
            stray = [c for c in cites if c not in known]
            if stray:
                raise errors.UsageError(
                    f"the summary cites {len(stray)} id(s) that are not blips of {wl['name']!r} up to"
                    f" {upto['id']}: {', '.join(stray[:5])}; cite only blip ids of the covered range"
                )
            required = self._required(conn, wl, prev, upto["id"])
            cited = set(cites)
            missing = [i for i in required if i not in cited]
            if missing:
                log.warning(
                    "summary of %s up to %s by %s rejected: %d load-bearing blip(s) not cited",
                    wl["id"], upto["id"], author, len(missing), extra={"missing": missing},
                )  # fmt: skip
                return SummaryVerdict(
                    accepted=False,
                    missing=missing,
                    reason=f"it does not cite {len(missing)} load-bearing blip(s) of its range:"
                    " surfaces, DONE: blips, pinned blips and blips naming a participant must be cited",
                )
            count, size = conn.execute(
                "SELECT count(*), coalesce(sum(length(CAST(text AS BLOB))), 0) FROM blips"
                " WHERE wavelet_id = ? AND id <= ? AND (superseded_by IS NULL OR superseded_by > ?)",
                (wl["id"], upto["id"], upto["id"]),
            ).fetchone()
            own = text_bytes(body.text)
            if own >= size:  # a context would be as long with it as without it, or longer
                return SummaryVerdict(
                    accepted=False,
                    reason=f"it saves nothing: it is {own} bytes, and the {count} blip(s) it would stand in"
                    f" for are {size} bytes of text; summarize when there is more to cover, or shorter",
                )
            event = SummaryRecorded(
                summary_id=self.ids.mint(),
                wavelet_id=wl["id"],
                wave_id=wl["wave_id"],
                after=prev["upto"] if prev is not None else "",
                upto=upto["id"],
                text=body.text,
                author=author,
                author_kind=body.author_kind,
                cites=cites,
                load_bearing=required,
                covered_blips=int(count),
                covered_bytes=int(size),
                created_at=now(),
            )
            record(conn, event)
            row = conn.execute("SELECT * FROM summaries WHERE id = ?", (event.summary_id,)).fetchone()
        return SummaryVerdict(accepted=True, summary=summary_of(row))

    def pin(self, who: Principal, ref: str, *, as_: str | None = None) -> Blip:
        """Pin blip ``ref`` (members of its wavelet): load-bearing from now on. Idempotent."""
        by = self.access.author(who, as_)
        b = self.access.blip(who, ref)
        wl = self.access.wavelet_by_id(who, b["wavelet_id"])
        self.access.require_member(who, wl, "pin", actor=by)
        with self._db.write() as conn:
            if (
                conn.execute(
                    "SELECT 1 FROM pins WHERE wavelet_id = ? AND blip_id = ?", (wl["id"], b["id"])
                ).fetchone()
                is None
            ):
                e = BlipPinned(blip_id=b["id"], wavelet_id=wl["id"], wave_id=wl["wave_id"], by=by, at=now())
                record(conn, e)
        return rows.blip(b, self.access.sight(who))

    # ---------------------------------------------------------------- readers

    def of(self, who: Principal, ref: str) -> list[Summary]:
        """Every summary of ``ref``, oldest first."""
        wl = self.access.wavelet(who, ref)
        got = self._r().execute("SELECT * FROM summaries WHERE wavelet_id = ? ORDER BY upto", (wl["id"],))
        return [summary_of(s) for s in got]

    def check(self, who: Principal, ref: str) -> SummaryCheck:
        """``ref``'s latest summary against the load-bearing blips of its range as they are now."""
        with self._db.snapshot() as r:
            wl = self.access.wavelet(who, ref)
            s = self._latest(r, wl["id"])
            need: list[str] = []
            missing: list[str] = []
            if s is not None:
                names = self._names(r, wl["wave_id"])
                found = {
                    b["id"]
                    for b in r.execute(
                        "SELECT id, kind, text FROM blips WHERE wavelet_id = ? AND id <= ?"
                        " AND (superseded_by IS NULL OR superseded_by > ?)",
                        (wl["id"], s["upto"], s["upto"]),
                    )
                    if is_load_bearing(b["kind"], b["text"], names)
                }
                pins = r.execute(
                    "SELECT blip_id FROM pins WHERE wavelet_id = ? AND blip_id <= ?", (wl["id"], s["upto"])
                )
                found.update(p[0] for p in pins)
                need = sorted(found)
                cited = set(json.loads(s["cites"]))
                missing = [i for i in need if i not in cited]
            count, size = r.execute(
                "SELECT count(*), coalesce(sum(length(CAST(text AS BLOB))), 0) FROM blips"
                " WHERE wavelet_id = ? AND id > ? AND superseded_by IS NULL",
                (wl["id"], s["upto"] if s is not None else ""),
            ).fetchone()
            return SummaryCheck(
                wavelet_id=wl["id"],
                summary=summary_of(s) if s is not None else None,
                load_bearing=need,
                missing=missing,
                pending_blips=int(count),
                pending_bytes=int(size),
            )

    def pending(self, who: Principal, ref: str, *, limit: int = INPUT_MAX) -> SummaryInput:
        """What a writer needs to roll ``ref``'s summary forward: the latest summary, the current
        blips after it (at most ``limit``), and the ids a summary up to the last of them must cite."""
        with self._db.snapshot() as r:
            wl = self.access.wavelet(who, ref)
            self.access.require_member(who, wl, "summarize")
            prev = self._latest(r, wl["id"])
            limit = max(1, min(limit, INPUT_MAX))
            got = r.execute(
                "SELECT * FROM blips WHERE wavelet_id = ? AND id > ? AND superseded_by IS NULL"
                " ORDER BY id LIMIT ?",
                (wl["id"], prev["upto"] if prev is not None else "", limit + 1),
            ).fetchall()
            more = len(got) > limit
            got = got[:limit]
            need = self._required(r, wl, prev, got[-1]["id"]) if got else []
            sight = self.access.sight(who)
            return SummaryInput(
                wavelet_id=wl["id"],
                previous=summary_of(prev) if prev is not None else None,
                blips=[rows.blip(b, sight) for b in got],
                load_bearing=need,
                more=more,
            )

    # ---------------------------------------------------------------- context assembly

    def context(
        self, who: Principal, ref: str, *, limit: int = CONTEXT_PAGE, before: str | None = None
    ) -> Context:
        """One page of ``ref``'s assembled context: its newest ``limit`` entries (blips and
        summaries) older than ``before`` (None: the end), oldest first; ``more`` says whether older
        ones remain (pass ``cursor`` as ``before``). ``bytes``/``full_bytes`` are the whole context's."""
        limit = max(1, min(limit, CONTEXT_MAX))
        before = before or _END
        with self._db.snapshot() as r:
            wl = self.access.wavelet(who, ref)
            path = _ancestry(r, wl)
            visible = [n for n in path if self.access.can_see(who, n)]
            parts = self._parts(r, who, path)
            size = full = 0
            blips: list[Row] = []
            summaries: list[Row] = []
            room, more, cursor = limit, False, ""
            for p in reversed(parts):
                lo = p.summary["upto"] if p.summary is not None else ""
                got: list[Row] = []
                whole = False
                if room > 0:
                    got = r.execute(
                        "SELECT * FROM blips WHERE wavelet_id = ? AND id > ? AND id <= ? AND id < ?"
                        " AND (superseded_by IS NULL OR superseded_by > ?) ORDER BY id DESC LIMIT ?",
                        (p.node["id"], lo, p.bound, before, p.bound, room + 1),
                    ).fetchall()
                    whole = before == _END and len(got) <= room  # the page holds this part's whole tail
                    if len(got) > room:
                        more, got = True, got[:room]
                    blips.extend(got)
                    room -= len(got)
                    if got:
                        cursor = got[-1]["id"]
                    if p.summary is not None and p.summary["upto"] < before:
                        if room <= 0:
                            more = True
                        else:  # a summary and the pinned blips beside it: one entry, never split
                            summaries.append(p.summary)
                            blips.extend(reversed(p.pinned))
                            room -= 1 + len(p.pinned)
                            cursor = p.pinned[0]["id"] if p.pinned else p.summary["upto"]
                else:
                    more = more or self._has_entries(r, p, before)
                size_, full_ = self._sizes(r, p, lo, got if whole else None)
                size += size_
                full += full_
            blips.sort(key=lambda b: b["id"])
            summaries.sort(key=lambda s: s["upto"])
            wave_name = str(r.execute("SELECT name FROM waves WHERE id = ?", (wl["wave_id"],)).fetchone()[0])
            sight = self.access.sight(who)
            shown = _wavelets(r, visible, wave_name, sight)
            return Context(
                wavelet=shown[-1],  # the wavelet itself is always visible: it was resolved for who
                path=shown,
                blips=[rows.blip(b, sight) for b in blips],
                summaries=[summary_of(s, load_bearing=False) for s in summaries],
                bytes=size,
                full_bytes=full,
                saved_bytes=full - size,
                more=more,
                cursor=cursor,
            )

    @staticmethod
    def _sizes(r: Conn, p: _Part, lo: str, tail: list[Row] | None) -> tuple[int, int]:
        """(assembled, full walk) text bytes of one part; ``tail``: its whole tail, when fetched."""
        if tail is not None:
            size = sum(text_bytes(b["text"]) for b in tail)
        else:
            size = r.execute(
                "SELECT coalesce(sum(length(CAST(text AS BLOB))), 0) FROM blips WHERE wavelet_id = ?"
                " AND id > ? AND id <= ? AND (superseded_by IS NULL OR superseded_by > ?)",
                (p.node["id"], lo, p.bound, p.bound),
            ).fetchone()[0]
        if p.summary is None:
            return size, size
        shown = size + text_bytes(p.summary["text"]) + sum(text_bytes(b["text"]) for b in p.pinned)
        return shown, size + p.summary["covered_bytes"] - p.stale - p.beyond

    def _parts(self, r: Conn, who: Principal, path: list[Row]) -> list[_Part]:
        """The visible parts of a context, root first, each with its latest summary under its bound."""
        parts: list[_Part] = []
        for i, node in enumerate(path):
            if i < len(path) - 1:
                bound = path[i + 1]["fork_blip_id"]
                if not bound or not self.access.can_see(who, node):
                    continue
            else:
                bound = _END
            parts.append(_Part(node, bound, None, []))
        if parts:
            # Each part's latest summary that covers nothing past its bound but system blips, in one
            # query. A fork announces itself in its parent just after its fork point, and a summary
            # written then (the runner wakes on that very blip) covers the announcement: it tells the
            # fork nothing it did not see, so it stands in for the parent up to the fork point.
            # ``reach``: the first blip past the bound that is not a system blip (or the end).
            values = ",".join("(?,?,?)" for _ in parts)
            args = [x for i, p in enumerate(parts) for x in (i, p.node["id"], p.bound)]
            for s in r.execute(
                f"WITH p(i, wid, bound) AS (VALUES {values}), q AS (SELECT i, wid, bound, CASE WHEN"
                f" bound = '{_END}' THEN bound ELSE coalesce((SELECT min(id) FROM blips WHERE wavelet_id"
                f" = p.wid AND id > p.bound AND kind != 'system'), '{_END}') END AS reach FROM p)"
                " SELECT q.i AS part, q.bound AS bound, s.* FROM q JOIN summaries s ON s.id = (SELECT id"
                " FROM summaries WHERE wavelet_id = q.wid AND (upto <= q.bound OR upto < q.reach)"
                " ORDER BY upto DESC LIMIT 1)",
                args,
            ):
                part = parts[s["part"]]
                part.summary = s
                if s["upto"] > part.bound:
                    part.beyond = r.execute(
                        "SELECT coalesce(sum(length(CAST(text AS BLOB))), 0) FROM blips"
                        " WHERE wavelet_id = ? AND id > ? AND id <= ?",
                        (part.node["id"], part.bound, s["upto"]),
                    ).fetchone()[0]
        rolled = [(i, p.node["id"], p.summary["upto"], p.bound) for i, p in enumerate(parts) if p.summary]
        if rolled:  # covered versions replaced in the tail since: one query for every part
            values = ",".join("(?,?,?,?)" for _ in rolled)
            args = [x for row in rolled for x in row]
            for i, stale in r.execute(
                f"WITH p(i, wid, lo, bound) AS (VALUES {values}) SELECT p.i, (SELECT"
                " coalesce(sum(length(CAST(o.text AS BLOB))), 0) FROM blips t JOIN blips o ON o.id ="
                " t.replaces WHERE t.wavelet_id = p.wid AND t.id > p.lo AND t.id <= p.bound"
                " AND t.replaces <= p.lo) FROM p",
                args,
            ):
                parts[i].stale = stale
        summarized = [p for p in parts if p.summary is not None]
        if summarized:
            pins: dict[str, list[Row]] = {}
            marks = ",".join("?" * len(summarized))
            for b in r.execute(
                f"SELECT b.* FROM pins p JOIN blips b ON b.id = p.blip_id WHERE p.wavelet_id IN ({marks})"
                " ORDER BY b.id",
                [p.node["id"] for p in summarized],
            ):
                pins.setdefault(b["wavelet_id"], []).append(b)
            for p in summarized:
                assert p.summary is not None
                upto, cited = min(p.summary["upto"], p.bound), None
                for b in pins.get(p.node["id"], []):
                    if b["id"] > upto or (b["superseded_by"] is not None and b["superseded_by"] <= p.bound):
                        continue
                    cited = cited if cited is not None else set(json.loads(p.summary["cites"]))
                    if b["id"] not in cited:
                        p.pinned.append(b)
                # Pins since, replacements in the tail, a fork's shorter walk: a summary recorded
                # because it saved may no longer save here. Then the part is its full walk.
                if p.saving() <= 0:
                    p.summary, p.pinned, p.stale, p.beyond = None, [], 0, 0
        return parts

    @staticmethod
    def _has_entries(r: Conn, p: _Part, before: str) -> bool:
        if p.summary is not None and p.summary["upto"] < before:
            return True
        lo = p.summary["upto"] if p.summary is not None else ""
        return (
            r.execute(
                "SELECT 1 FROM blips WHERE wavelet_id = ? AND id > ? AND id <= ? AND id < ?"
                " AND (superseded_by IS NULL OR superseded_by > ?) LIMIT 1",
                (p.node["id"], lo, p.bound, before, p.bound),
            ).fetchone()
            is not None
        )
