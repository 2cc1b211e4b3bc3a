"""A wave's ``GOAL.md``: its goal in prose, and a frontmatter the resident is configured by.

``wave/<name>/GOAL.md`` under the origin repository (docs/resident.md)::

    ---
    mind: codex              # claude | codex (that CLI, the default layout's profile), or a layout
                             # name or .toml file (its ``resident`` profile)
    heartbeat: in-flight     # in-flight (default) | always | off
    heartbeat_every: 5m      # quiet time before a heartbeat (s, m, h; a bare number is minutes)
    heartbeat_budget: 48     # heartbeats a day at most
    turn_stall: 15m          # a turn with no transcript progress this long is interrupted (off: never)
    crons:
      - flow: nightly-report
        schedule: "0 3 * * *"
    ---
    The goal, in prose: it seeds the mind.

The frontmatter is a small YAML subset parsed here (no YAML dependency): ``key: value`` scalars
(quoted or not, ``#`` comments) and ``crons`` as a block list of ``flow``/``schedule`` mappings, or
as inline JSON (``crons: [{"flow": "x", "schedule": "* * * * *"}]``). What a caller may rely on:
:func:`parse` raises :class:`GoalError` naming the file's line for anything it does not understand
(an unknown key, a bad value, an invalid cron expression); nothing is half read.

:class:`Cron` is a five-field cron expression (minute hour day-of-month month day-of-week; ``*``,
``*/n``, ``a-b``, ``a-b/n``, lists; day-of-week 0-7 with 0 and 7 Sunday; when both day fields are
restricted either may match, as in cron). Times are UTC.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from fleet import errors

HeartbeatMode = Literal["in-flight", "always", "off"]
DEFAULT_EVERY = 300.0
DEFAULT_BUDGET = 48
DEFAULT_STALL = 900.0
"""Seconds a turn may go without transcript progress before the keeper's janitor interrupts it: 15
minutes, well past a long build or test run (a tool writes nothing while it runs)."""
KEYS = ("mind", "heartbeat", "heartbeat_every", "heartbeat_budget", "turn_stall", "crons")


class GoalError(errors.UsageError):
    """GOAL.md cannot be read as a goal (the message names the file and line)."""


@dataclass(frozen=True)
class Cron:
    """A five-field cron expression (UTC)."""

    expr: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    any_day: bool
    any_weekday: bool

    @classmethod
    def parse(cls, expr: str) -> Cron:
        """Raises ValueError saying what is wrong."""
        parts = expr.split()
        if len(parts) != 5:
            raise ValueError(
                f"a cron schedule has 5 fields (minute hour day month weekday), not {len(parts)}"
            )
        spans = ((0, 59, "minute"), (0, 23, "hour"), (1, 31, "day"), (1, 12, "month"), (0, 7, "weekday"))
        sets = [_field(p, lo, hi, what) for p, (lo, hi, what) in zip(parts, spans, strict=True)]
        weekdays = frozenset(0 if d == 7 else d for d in sets[4])
        return cls(expr, sets[0], sets[1], sets[2], sets[3], weekdays, parts[2] == "*", parts[4] == "*")

    def matches(self, t: datetime) -> bool:
        if t.minute not in self.minutes or t.hour not in self.hours or t.month not in self.months:
            return False
        day_ok, wd_ok = t.day in self.days, (t.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return day_ok and wd_ok
        return day_ok or wd_ok

    def last_at_or_before(self, t: datetime, not_before: datetime) -> datetime | None:
        """The latest occurrence in ``[not_before, t]`` (minute resolution), or None."""
        at = t.astimezone(UTC).replace(second=0, microsecond=0)
        floor = not_before.astimezone(UTC)
        # walk back by the hour when the hour cannot match, by the minute otherwise (bounded)
        for _ in range(60 * 24 * 400):
            if at < floor:
                return None
            if at.hour not in self.hours or at.month not in self.months:
                at = at.replace(minute=0) - timedelta(minutes=1)
                continue
            if self.matches(at):
                return at
            at -= timedelta(minutes=1)
        return None


def _field(text: str, lo: int, hi: int, what: str) -> frozenset[int]:
    out: set[int] = set()
    for item in text.split(","):
        m = re.fullmatch(r"(\*|\d+(?:-\d+)?)(?:/(\d+))?", item)
        if not m:
            raise ValueError(f"{what} field {text!r} is not a number, range, list, * or */n")
        step = int(m[2]) if m[2] else 1
        if step < 1:
            raise ValueError(f"{what} field {text!r} has a step of 0")
        if m[1] == "*":
            a, b = lo, hi
        elif "-" in m[1]:
            a, b = (int(x) for x in m[1].split("-"))
        else:
            a = b = int(m[1])
            if m[2]:
                b = hi
        if not (lo <= a <= hi and lo <= b <= hi) or a > b:
            raise ValueError(f"{what} field {text!r} is outside {lo}-{hi}")
        out.update(range(a, b + 1, step))
    return frozenset(out)


@dataclass(frozen=True)
class CronEntry:
    flow: str
    schedule: Cron
    line: int


@dataclass(frozen=True)
class Goal:
    """What GOAL.md says (defaults for what it leaves out)."""

    body: str = ""
    mind: str | None = None
    heartbeat: HeartbeatMode = "in-flight"
    heartbeat_every: float = DEFAULT_EVERY
    """Seconds of quiet before a heartbeat."""
    heartbeat_budget: int = DEFAULT_BUDGET
    turn_stall: float | None = DEFAULT_STALL
    """Seconds without transcript progress after which a turn is interrupted; None: never."""
    crons: tuple[CronEntry, ...] = field(default_factory=tuple)


def _scalar(raw: str) -> str:
    raw = raw.strip()
    if raw[:1] in ("'", '"'):
        q = raw[0]
        end = raw.find(q, 1)
        if end < 0:
            raise ValueError(f"unterminated quote in {raw!r}")
        return raw[1:end]
    return re.sub(r"\s+#.*$", "", raw).strip()


def _span(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smh]?)", text)
    if not m:
        raise ValueError(f"{text!r} is not a duration (e.g. 90s, 5m, 1h)")
    return float(m[1]) * {"s": 1, "m": 60, "h": 3600, "": 60}[m[2]]


def parse(text: str, where: str = "GOAL.md") -> Goal:
    """Read a GOAL.md's text; raises :class:`GoalError` naming ``where`` and the line."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return Goal(body=text.strip())
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        raise GoalError(f"{where}:1: the frontmatter opened with --- is never closed: end it with a --- line")
    values: dict[str, tuple[int, str]] = {}
    crons: list[tuple[int, dict[str, str]]] = []
    in_crons = False
    for i in range(1, end):
        n, ln = i + 1, lines[i]
        if not ln.strip() or ln.lstrip().startswith("#"):
            continue
        try:
            if ln[:1].isspace():
                if not in_crons:
                    raise ValueError("an indented line outside crons:")
                item = ln.strip()
                if item.startswith("- "):
                    crons.append((n, {}))
                    item = item[2:].strip()
                elif not crons:
                    raise ValueError("a cron entry starts with '- '")
                key, sep, val = item.partition(":")
                if not sep or key.strip() not in ("flow", "schedule"):
                    raise ValueError(f"a cron entry has flow: and schedule:, not {item!r}")
                crons[-1][1][key.strip()] = _scalar(val)
                if key.strip() == "schedule":  # an invalid schedule is reported at its own line
                    crons[-1] = (n, crons[-1][1])
                continue
            key, sep, val = ln.partition(":")
            key = key.strip()
            if not sep:
                raise ValueError(f"expected key: value, got {ln.strip()!r}")
            if key not in KEYS:
                raise ValueError(f"unknown key {key!r} (known: {', '.join(KEYS)})")
            in_crons = key == "crons"
            if in_crons:
                inline = val.strip()
                if inline:
                    loaded = json.loads(inline)
                    if not isinstance(loaded, list) or not all(isinstance(c, dict) for c in loaded):
                        raise ValueError("crons: is a list of {flow, schedule}")
                    crons += [(n, {str(k): str(v) for k, v in c.items()}) for c in loaded]
                continue
            values[key] = (n, _scalar(val))
        except ValueError as exc:
            raise GoalError(f"{where}:{n}: {exc}") from None
    kw: dict[str, object] = {}
    for key, (n, val) in values.items():
        try:
            if key == "mind":
                kw["mind"] = val or None
            elif key == "heartbeat":
                if val not in ("in-flight", "always", "off"):
                    raise ValueError(f"heartbeat is in-flight, always or off, not {val!r}")
                kw["heartbeat"] = val
            elif key == "heartbeat_every":
                kw["heartbeat_every"] = _span(val)
                if kw["heartbeat_every"] == 0:
                    raise ValueError("heartbeat_every must be more than 0")
            elif key == "heartbeat_budget":
                if not val.isdigit():
                    raise ValueError(f"heartbeat_budget is a whole number, not {val!r}")
                kw["heartbeat_budget"] = int(val)
            elif key == "turn_stall":
                kw["turn_stall"] = None if val == "off" else _span(val)
                if kw["turn_stall"] == 0:
                    raise ValueError("turn_stall must be more than 0 (or off)")
        except ValueError as exc:
            raise GoalError(f"{where}:{n}: {exc}") from None
    entries = []
    for n, c in crons:
        unknown = set(c) - {"flow", "schedule"}
        if unknown or not c.get("flow") or not c.get("schedule"):
            raise GoalError(f"{where}:{n}: a cron entry needs exactly flow: and schedule:")
        try:
            entries.append(CronEntry(c["flow"], Cron.parse(c["schedule"]), n))
        except ValueError as exc:
            raise GoalError(f"{where}:{n}: invalid cron schedule {c['schedule']!r}: {exc}") from None
    body = "\n".join(lines[end + 1 :]).strip()
    return Goal(body=body, crons=tuple(entries), **kw)  # type: ignore[arg-type]


def load(path: Path) -> Goal:
    """GOAL.md at ``path`` (a missing file is an empty goal)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Goal()
    except (OSError, UnicodeDecodeError) as exc:
        raise GoalError(f"cannot read {path}: {exc}") from None
    return parse(text, str(path))
