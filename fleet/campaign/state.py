"""STATE.md: the campaign's cursor (a YAML block of flat ``key: value`` lines) and its wave table.

The file is the seed's contract (docs/campaigns.md): a front-matter block between ``---`` lines
holding every field of :class:`State`, then free markdown containing one table with a row per wave
(``| # | Title | Status | Session | Commit | Notes |``). :func:`parse` reads it, naming the line of
anything it cannot use; :func:`render` writes it back with the cursor in the schema's order, unknown
keys kept after the known ones, the table's columns and every line around the table unchanged.

Only flat scalars are allowed in the block (strings bare or quoted, integers, ``null``), so no YAML
library is needed and an agent's hand edit is either understood exactly or refused with its line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Literal, get_args

from fleet import errors

WaveStatus = Literal[
    "pending", "running", "complete", "failed", "plan_undoable", "awaiting_user", "all_complete"
]
FailureKind = Literal["", "transient", "undoable", "crash", "cancelled"]
LoopState = Literal["idle", "armed", "paused"]
SessionKind = Literal["", "executor", "verifier"]

RETRY_CAP = 3
VERIFY_CAP = 3

FIELDS: tuple[str, ...] = (
    "campaign_id", "plan_source", "executor_agent", "executor_model", "executor_variant",
    "current_wave", "wave_status", "failure_kind", "retry_count", "verify_count", "user_question",
    "loop_state", "active_session_id", "active_session_kind", "total_waves", "session_count",
    "created", "last_updated",
)  # fmt: skip
INT_FIELDS = {"current_wave", "retry_count", "verify_count", "total_waves", "session_count"}
LOOP_OWNED = ("loop_state", "active_session_id", "active_session_kind")
"""Fields only the loop writes: what an agent writes there is overruled."""
TABLE_HEADERS = ["#", "Title", "Status", "Session", "Commit", "Notes"]
ROW_STATUSES = {"pending", "running", "complete", "failed", "undoable", "paused", "cancelled", "crashed"}

_KEY = re.compile(r"^([a-z_][a-z0-9_]*):(.*)$")


class StateError(errors.UsageError):
    """STATE.md cannot be used (its line is named); nothing is written over it."""


@dataclass
class Row:
    """One wave's row of the table: its cells by header (``line``: where it was read, 0 if made)."""

    cells: dict[str, str]
    line: int = field(default=0, compare=False)

    def get(self, header: str) -> str:
        return self.cells.get(header, "")

    def set(self, header: str, value: str) -> None:
        self.cells[header] = value.replace("|", "/").replace("\n", " ").strip()


@dataclass
class State:
    campaign_id: str
    plan_source: str = ""
    executor_agent: str = ""
    executor_model: str = ""
    executor_variant: str = ""
    current_wave: int = 0
    wave_status: WaveStatus = "pending"
    failure_kind: FailureKind = ""
    retry_count: int = 0
    verify_count: int = 0
    user_question: str = ""
    loop_state: LoopState = "idle"
    active_session_id: str | None = None
    active_session_kind: SessionKind = ""
    total_waves: int = 0
    session_count: int = 0
    created: str = ""
    last_updated: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    """Keys this version does not know, kept as written."""
    headers: list[str] = field(default_factory=lambda: list(TABLE_HEADERS))
    rows: list[Row] = field(default_factory=list)
    before_table: list[str] = field(default_factory=list)
    after_table: list[str] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict, compare=False)
    """The line each cursor key was read from (what :func:`check` names)."""

    def row(self, wave: int) -> Row:
        """The table row of ``wave`` (created, and the table with it, when missing)."""
        for r in self.rows:
            if r.get("#").strip() == str(wave):
                return r
        r = Row({h: "" for h in self.headers})
        r.set("#", str(wave))
        self.rows.append(r)
        self.rows.sort(key=lambda x: int(x.get("#")) if x.get("#").isdigit() else 1 << 30)
        return r

    def cursor(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in FIELDS}


def _scalar(raw: str, key: str, line: int) -> str | int | None:
    v = raw.strip()
    if v.startswith('"'):
        try:
            end = json.JSONDecoder().raw_decode(v)
        except ValueError:
            raise StateError(
                f"STATE.md line {line}: {key}: the quoted value is not closed or not valid"
            ) from None
        value, used = end
        rest = v[used:].strip()
        if rest and not rest.startswith("#"):
            raise StateError(f"STATE.md line {line}: {key}: text after the quoted value: {rest!r}")
        if not isinstance(value, str):
            raise StateError(f"STATE.md line {line}: {key}: expected a string")
        return value
    if v.startswith("'"):
        end_at = v.find("'", 1)
        if end_at < 0:
            raise StateError(f"STATE.md line {line}: {key}: the quoted value is not closed")
        return v[1:end_at]
    if " #" in v:
        v = v[: v.index(" #")].rstrip()
    elif v.startswith("#"):
        v = ""
    if v in ("null", "~", "None"):
        return None
    if re.fullmatch(r"-?\d+", v):
        return int(v)
    return v


def parse(text: str, *, checked: bool = True) -> State:
    """A STATE.md's state; :class:`StateError` naming the line of the first problem. ``checked``:
    also refuse a state that parses but makes no sense (:func:`check`)."""
    # lines as an editor counts them: "\n" alone ends one (str.splitlines also splits on form feeds,
    # \x1c-\x1e, \x85, U+2028…, which would name the wrong line)
    lines = [ln.removesuffix("\r") for ln in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    if not lines or lines[0].strip() != "---":
        raise StateError("STATE.md line 1: expected `---` opening the cursor block")
    try:
        close = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise StateError(
            f"STATE.md line {len(lines)}: the cursor block opened at line 1 is never closed (`---`)"
        ) from None
    values: dict[str, object] = {}
    extra: dict[str, str] = {}
    where: dict[str, int] = {}
    for i in range(1, close):
        ln = lines[i]
        if not ln.strip() or ln.lstrip().startswith("#"):
            continue
        m = _KEY.match(ln)
        if not m:
            raise StateError(f"STATE.md line {i + 1}: expected `key: value`, got {ln.strip()!r}")
        key, raw = m[1], m[2]
        if key in values or key in extra:
            raise StateError(f"STATE.md line {i + 1}: {key} is given twice (first at line {where[key]})")
        where[key] = i + 1
        if key in FIELDS:
            values[key] = _scalar(raw, key, i + 1)
        else:
            extra[key] = raw.strip()
    missing = [k for k in ("campaign_id",) if not values.get(k)]
    if missing:
        raise StateError(f"STATE.md line {close + 1}: the cursor has no {missing[0]}")
    kw: dict[str, object] = {}
    for key, raw_value in values.items():
        line = where[key]
        value: object = raw_value
        if key in INT_FIELDS:
            if not isinstance(value, int) or value < 0:
                raise StateError(f"STATE.md line {line}: {key}: expected a whole number ≥ 0, got {value!r}")
        elif key == "active_session_id":
            if value is not None and not isinstance(value, str):
                value = str(value)
            value = value or None
        else:
            value = "" if value is None else str(value)
        for name, allowed in (
            ("wave_status", WaveStatus), ("failure_kind", FailureKind),
            ("loop_state", LoopState), ("active_session_kind", SessionKind),
        ):  # fmt: skip
            if key == name and value not in get_args(allowed):
                shown = ", ".join(a or '""' for a in get_args(allowed))
                raise StateError(f"STATE.md line {line}: {key}: {value!r} is not one of {shown}")
        kw[key] = value
    state = State(**kw, extra=extra, lines=dict(where))  # type: ignore[arg-type]
    _parse_table(state, lines[close + 1 :], close + 1)
    if checked:
        check(state)
    return state


def decode(data: bytes) -> str:
    """STATE.md's bytes as text; :class:`StateError` naming the line of a byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise StateError(
            f"STATE.md line {line}: byte 0x{data[exc.start]:02x} at column {column} is not UTF-8:"
            " save the file as UTF-8 text"
        ) from None


IN_FAILURE: dict[str, set[str]] = {
    # failure_kind → the wave_status values it can go with (awaiting_user keeps whatever failed)
    "": {"pending", "running", "complete", "all_complete", "awaiting_user", "failed"},
    # a retry runs with the failure it retries
    "transient": {"failed", "awaiting_user", "running"},
    "crash": {"failed", "awaiting_user", "running"},
    "undoable": {"plan_undoable", "awaiting_user"},
    # the seed's failed; pending or plan_undoable where the interrupted session was the verifier
    "cancelled": {"failed", "pending", "plan_undoable", "awaiting_user"},
}


def check(s: State) -> None:
    """Refuse a state that parses but makes no sense (naming the line that says so): a cursor past
    the waves, a wave count the table does not have, rows that say a wave ran when the cursor says
    it cannot have (or never ran when the cursor went past it), a failure kind that does not go with
    the status, a session id without its kind. Every state the loop writes passes."""

    def at(key: str) -> int:
        return s.lines.get(key, 1)

    def refuse(key: str, what: str) -> StateError:
        return StateError(f"STATE.md line {at(key)}: {what}")

    n, cur = s.total_waves, s.current_wave
    if s.rows and len(s.rows) != n:
        raise refuse(
            "total_waves", f"total_waves: {n} but the wave table has {len(s.rows)} rows: make them agree"
        )
    if n == 0:
        if cur != 0 or s.wave_status not in ("pending", "running"):
            raise refuse(
                "current_wave" if cur else "wave_status",
                f"the campaign has no waves (total_waves 0) but its cursor says wave {cur} {s.wave_status}",
            )
    elif cur > n:
        raise refuse("current_wave", f"current_wave: {cur} is past the last wave ({n - 1}; total_waves {n})")
    elif cur == n and s.wave_status not in ("all_complete", "pending"):
        raise refuse(
            "wave_status",
            f"wave_status: {s.wave_status} but current_wave {cur} is past the last wave: only all_complete"
            " fits",
        )
    elif cur < n and s.wave_status == "all_complete":
        raise refuse(
            "wave_status", f"wave_status: all_complete but current_wave {cur} of {n} waves has not run"
        )
    for i, r in enumerate(s.rows):
        where = f"STATE.md line {r.line or at('total_waves')}"
        if r.get("#") != str(i):
            raise StateError(f"{where}: the wave table's row {i + 1} is numbered {r.get('#')!r}, not {i}")
        status = r.get("Status")
        if status not in ROW_STATUSES:
            shown = ", ".join(sorted(ROW_STATUSES))
            raise StateError(f"{where}: wave {i}'s Status {status!r} is not one of {shown}")
        if i > cur and status != "pending":
            raise StateError(
                f"{where}: wave {i} is {status} but current_wave is {cur} (line {at('current_wave')}):"
                " a wave after the cursor has not run; set its Status to pending or move the cursor"
            )
        if i < cur and status == "pending":
            raise StateError(
                f"{where}: wave {i} never ran (Status pending) but current_wave is {cur} (line"
                f" {at('current_wave')}): the cursor cannot skip a wave; set the row complete to skip it"
            )
        if i == cur and status == "complete" and s.wave_status not in ("complete", "all_complete"):
            raise StateError(
                f"{where}: wave {i} is complete but it is current_wave with wave_status {s.wave_status}"
                f" (line {at('wave_status')}): advance current_wave, or set the row to what the wave is"
            )
    if s.wave_status not in IN_FAILURE[s.failure_kind]:
        kind = s.failure_kind or '""'
        raise refuse(
            "failure_kind",
            f"failure_kind: {kind} does not go with wave_status {s.wave_status} (line {at('wave_status')})",
        )
    if s.wave_status in ("failed", "plan_undoable") and not s.failure_kind:
        raise refuse(
            "failure_kind",
            f"wave_status {s.wave_status} needs a failure_kind (transient, crash, undoable, cancelled)",
        )
    if s.wave_status == "all_complete" and s.retry_count:
        raise refuse("retry_count", f"retry_count: {s.retry_count} but every wave is complete: it is 0")
    if bool(s.active_session_id) != bool(s.active_session_kind):
        key = "active_session_kind" if s.active_session_id else "active_session_id"
        raise refuse(key, "active_session_id and active_session_kind go together: set both or neither")


def _cells(line: str) -> list[str]:
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") else inner
    return [c.strip() for c in inner.split("|")]


def _parse_table(state: State, body: list[str], offset: int) -> None:
    start = next((i for i, ln in enumerate(body) if ln.strip().startswith("|")), None)
    if start is None:
        state.before_table = body
        state.rows = []
        return
    end = start
    while end < len(body) and body[end].strip().startswith("|"):
        end += 1
    table = body[start:end]
    headers = _cells(table[0])
    if "#" not in headers:
        raise StateError(f"STATE.md line {offset + start + 1}: the wave table has no `#` column")
    if len(table) < 2 or not re.fullmatch(r"[\s|:-]+", table[1]):
        raise StateError(f"STATE.md line {offset + start + 2}: expected the table's `|---|` separator line")
    rows = []
    for j, ln in enumerate(table[2:]):
        cells = _cells(ln)
        if len(cells) != len(headers):
            raise StateError(
                f"STATE.md line {offset + start + 3 + j}: {len(cells)} cells where the table has"
                f" {len(headers)} columns"
            )
        rows.append(Row(dict(zip(headers, cells, strict=True)), line=offset + start + 3 + j))
    state.headers, state.rows = headers, rows
    state.before_table, state.after_table = body[:start], body[end:]


def _value(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, int):
        return str(v)
    s = str(v)
    if s == "" or re.search(r"[:#'\"]|^\s|\s$|^(null|~|None|-?\d+)$", s):
        return json.dumps(s, ensure_ascii=False)
    return s


def render(state: State) -> str:
    """STATE.md for ``state`` (what :func:`parse` reads back as the same state)."""
    out = ["---"]
    out += [f"{k}: {_value(getattr(state, k))}" for k in FIELDS]
    out += [f"{k}: {v}" for k, v in state.extra.items()]
    out.append("---")
    before = state.before_table or ["", f"# {state.campaign_id}", ""]
    out += before
    widths = state.headers
    out.append("| " + " | ".join(widths) + " |")
    out.append("|" + "|".join("---" for _ in widths) + "|")
    for r in state.rows:
        out.append("| " + " | ".join(r.get(h) for h in widths) + " |")
    out += state.after_table
    return "\n".join(out).rstrip("\n") + "\n"
