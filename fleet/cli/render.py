"""Everything the CLI prints, in one place: human lines by default, the wire models with ``--json``.

What scripts may rely on: ``--json`` prints exactly the wire shape (:func:`fleet.wire.dump`) of the
records in :mod:`fleet.models` (a JSON array for lists, one object per line for streams). Human output
is for people: ids are shortened to a prefix the daemon accepts, times are local ``HH:MM:SS``.
Data goes to stdout; notices and errors go to stderr.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:  # only for annotations: rendering must not import tmux into every fleet process,
    # nor the records into a --help (each renderer that reads them has its data already imported)
    from fleet.doctor import Check
    from fleet.models import Blip, Context, Member, Summary, TokenInfo, Wave, Wavelet
    from fleet.records.usage import Figures
    from fleet.spawn import PaneReport, SpawnReport
    from fleet.supervise import KillReport, SupervisorEvent, WaveOverview, WaveStatus

SHORT = 13
"""Characters of a shortened id: ``xxxxxxxx-xxxx`` covers a UUIDv7's whole millisecond timestamp."""

GLOBALS: list[str] = []
"""The global options of this command line a printed hint must repeat to run as printed
(``--remote NAME``: without it, the hint would talk to the local daemon, starting one). Set by the
root callback of :mod:`fleet.cli`."""

_QUOTED = re.compile(r"(`(?:[A-Z][A-Z0-9_]*=\S+ )*fleet)(?= )(?! --remote)")
_BARE = re.compile(r"^((?:[A-Z][A-Z0-9_]*=\S+ )*fleet)(?= )(?! --remote)")


def hint(text: str) -> str:
    """``text`` with :data:`GLOBALS` after ``fleet`` in every command it quotes in backticks
    (`` `fleet attach w` ``, `` `FLEET_TMUX_SOCKET=s fleet attach w` ``): what notices, errors and
    table cells print. Prose that names fleet, and a hint that names ``--remote`` already, are left
    as they are."""
    if not GLOBALS:
        return text
    extra = " " + " ".join(shlex.quote(g) for g in GLOBALS)
    return _QUOTED.sub(lambda m: m.group(1) + extra, text)


def command(line: str) -> str:
    """A bare command line to print (``fleet attach w``, an ``attach:`` line) with :data:`GLOBALS`."""
    if not GLOBALS:
        return line
    extra = " " + " ".join(shlex.quote(g) for g in GLOBALS)
    return _BARE.sub(lambda m: m.group(1) + extra, line)


def out(line: str = "") -> None:
    """One line of data on stdout, flushed (so ``--follow`` output reaches a pipe at once). Printed
    as given (a blip's text is data): hints in it go through :func:`hint` first."""
    typer.echo(line)


def note(line: str) -> None:
    """A notice for the person at the terminal, on stderr (its quoted commands: :func:`hint`)."""
    typer.echo(f"fleet: {hint(line)}", err=True)


def error(message: str) -> None:
    typer.echo(f"fleet: error: {hint(message)}", err=True)


def dump(item: object, *, compact: bool = False) -> None:
    """Print a record or model (or a list of them, as a JSON array) exactly as its wire shape."""
    import json  # here: a --help, and most commands, print no JSON

    from fleet import wire

    data = wire.dump(item)
    out(json.dumps(data, separators=(",", ":")) if compact else json.dumps(data, indent=2))


def short(id_: str, ids: Iterable[str] = ()) -> str:
    """The shortest prefix of ``id_`` (at least :data:`SHORT` characters) no other of ``ids`` shares."""
    n = SHORT
    for other in ids:
        if other == id_:
            continue
        while n < len(id_) and other.startswith(id_[:n]):
            n += 1
    return id_[:n]


def clock(ts: str) -> str:
    """An ISO timestamp as local ``HH:MM:SS`` (the raw text if it is not ISO)."""
    try:
        return datetime.fromisoformat(ts).astimezone().strftime("%H:%M:%S")
    except ValueError:
        return ts


def when(ts: str) -> str:
    """An ISO timestamp as local ``YYYY-MM-DD HH:MM`` (the raw text if it is not ISO)."""
    try:
        return datetime.fromisoformat(ts).astimezone().strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return ts


def roster(members: Sequence[Member]) -> str:
    return ", ".join(m.name for m in members) or "nobody"


# ---------------------------------------------------------------- blips


def blip_line(blip: Blip, *, with_id: bool = False, among: Iterable[str] = ()) -> str:
    """``[HH:MM:SS] author: text`` — system blips as ``* text``, surfaces and edits marked."""
    if blip.kind == "system":
        head = "*"
    else:
        marks = []
        if blip.kind == "surface":
            marks.append("surfaced")
        if blip.replaces:
            marks.append("edited" if blip.writer == blip.author else f"edited by {blip.writer}")
        if blip.superseded_by:
            marks.append("superseded")
        head = blip.author + (f" ({', '.join(marks)})" if marks else "") + ":"
    prefix = f"{short(blip.id, among)} " if with_id else ""
    text = blip.text.replace("\n", "\n    ")
    return f"{prefix}[{clock(blip.created_at)}] {head} {text}"


def blips(items: Sequence[Blip], *, with_ids: bool = False) -> None:
    ids = [b.id for b in items]
    for b in items:
        out(blip_line(b, with_id=with_ids, among=ids))


def context(ctx: Context, *, with_ids: bool = False) -> None:
    """An assembled context: each summary where its covered range was, the blips around it, then
    one stderr note with the bytes it saved against the full walk."""
    from fleet.models import Blip

    labels = {w.id: w.path for w in ctx.path}
    items: list[tuple[str, Blip | Summary]] = [(b.id, b) for b in ctx.blips]
    items += [(s.upto, s) for s in ctx.summaries]
    items.sort(key=lambda kv: (kv[0], isinstance(kv[1], Blip)))
    for _key, item in items:
        if isinstance(item, Blip):
            out(blip_line(item, with_id=with_ids))
            continue
        where = labels.get(item.wavelet_id, item.wavelet_id)
        out(
            f"[summary of {where} up to {short(item.upto)} by {item.author} ({item.author_kind}),"
            f" {item.covered_blips} blip(s), cites {len(item.cites)}]"
        )
        for line in item.text.splitlines():
            out(f"  {line}")
    more = "; older entries remain (--limit)" if ctx.more else ""
    note(f"context {ctx.bytes} bytes, full walk {ctx.full_bytes}, saved {ctx.saved_bytes}{more}")


def posted(blip: Blip, where: Wavelet | None = None, verb: str = "posted") -> None:
    place = f" in {where.path}" if where is not None else ""
    out(f"{verb} {short(blip.id)}{place}")


# ---------------------------------------------------------------- waves and wavelets


def wave_list(waves: Sequence[Wave]) -> None:
    if not waves:
        note("no waves yet: create one with `fleet wave new NAME`")
        return
    width = max(len(w.name) for w in waves)
    ids = [w.id for w in waves]
    for w in waves:
        out(f"{w.name:<{width}}  {short(w.id, ids)}  created {when(w.created_at)}")


def wave_tree(wave: Wave) -> None:
    """The wavelet tree: one line per wavelet with its roster, private ones marked, and its topic (cut
    to the terminal's width: a tree line never wraps for it). A wavelet whose
    parent the reader may not see (``parent_withheld``) is a top of the tree, marked as under a
    private wavelet, after the root."""
    out(f"{wave.name}  ({short(wave.id)})")
    children: dict[str, list[Wavelet]] = {}
    for wl in wave.wavelets:
        if wl.parent_id is not None:
            children.setdefault(wl.parent_id, []).append(wl)
    known = {wl.id for wl in wave.wavelets}

    def under_private(wl: Wavelet) -> bool:  # (a parent id not listed: an older daemon's answer)
        return wl.parent_withheld or (wl.parent_id is not None and wl.parent_id not in known)

    roots = [wl for wl in wave.wavelets if wl.parent_id is None and not wl.parent_withheld]
    hung = [wl for wl in wave.wavelets if under_private(wl)]
    tops = sorted(roots, key=lambda w: w.id) + sorted(hung, key=lambda w: w.id)

    def walk(nodes: list[Wavelet], indent: str) -> None:
        for i, wl in enumerate(nodes):
            last = i == len(nodes) - 1
            private = "  (private)" if wl.private else ""
            where = "  (under a private wavelet)" if under_private(wl) else ""
            line = f"{indent}{'└── ' if last else '├── '}{wl.name}  [{roster(wl.roster)}]{private}{where}"
            out(with_topic(line, wl.topic))
            walk(sorted(children.get(wl.id, []), key=lambda w: w.id), indent + ("    " if last else "│   "))

    walk(tops, "")


def wavelet(wl: Wavelet, verb: str) -> None:
    private = " (private)" if wl.private else ""
    out(f"{verb} {wl.path}{private}  [{roster(wl.roster)}]  {short(wl.id)}")


def width() -> int:
    """The columns a line may take: ``COLUMNS``, else the terminal's, else 80. (Not
    ``shutil.get_terminal_size``: importing shutil costs every command 2 ms of start-up.)"""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
        if columns > 0:
            return columns
    except ValueError:
        pass
    try:
        columns = os.get_terminal_size(sys.__stdout__.fileno()).columns if sys.__stdout__ else 0
    except (OSError, ValueError):
        columns = 0
    return columns if columns > 0 else 80


def _cells(ch: str) -> int:
    import unicodedata  # here, not at the top: only a line with a topic pays for it

    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def cells(text: str) -> int:
    """How many terminal columns ``text`` takes (wide characters two, combining marks none)."""
    return sum(_cells(ch) for ch in text)


def fit(text: str, room: int) -> str:
    """``text`` cut to at most ``room`` columns, ending in ``…`` where it was cut ('' for no room)."""
    if cells(text) <= room:
        return text
    if room < 1:
        return ""
    out, used = [], 0
    for ch in text:
        w = _cells(ch)
        if used + w > room - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + "…"


def with_topic(line: str, topic: str) -> str:
    """``line`` followed by ``  — TOPIC``, the topic cut so the whole fits :func:`width` (left off
    when it does not fit whole and not two columns of it do); ``line`` as it was without a topic."""
    if not topic:
        return line
    room = width() - cells(line) - 4
    return f"{line}  — {fit(topic, room)}" if room >= 2 or 0 < cells(topic) <= room else line


# ---------------------------------------------------------------- tokens


def tokens(items: Sequence[TokenInfo]) -> None:
    if not items:
        note("no tokens")
        return
    ids = [t.id for t in items]
    for t in items:
        state = f"revoked {when(t.revoked_at)}" if t.revoked_at else f"created {when(t.created_at)}"
        out(f"{short(t.id, ids)}  {t.wave}/{t.participant}  {state}")


def pairs(rows: Sequence[tuple[str, str]]) -> None:
    """``key  value`` lines, keys aligned."""
    width = max((len(k) for k, _ in rows), default=0)
    for key, value in rows:
        out(f"{key:<{width}}  {value}")


def spawn_report(report: SpawnReport) -> None:
    """Where the wavelet's window is (tmux's session and window names); one line per participant:
    pane, what spawn did, ready or why not; then how to attach."""
    session = report.session or report.session_id
    if report.window_id:
        out(f"{report.wavelet} in tmux session {session}, window {report.window or report.window_id}:")
    elif session:
        out(f"{report.wavelet}: no window of its own: every member already runs in tmux session {session}")
    else:
        out(f"{report.wavelet}: nothing started in tmux:")
    width = max((len(p.participant) for p in report.panes), default=0)
    for p in report.panes:
        state = "ready" if p.ready else "NOT READY"
        why = f" ({hint(p.why)})" if p.why else ""
        route = f" — {p.route}" if p.route else ""
        tree = f" in {p.worktree} ({p.branch})" if p.worktree else ""
        out(f"  {p.participant:<{width}}  {p.pane_id or '-':<5} {p.action:<9} {state}{why}{route}{tree}")
        if p.limits:  # what this agent cannot do that Claude Code does: said, never a silent "ready"
            out(f"  {'':<{width}}  {p.kind} cannot: {'; '.join(p.limits)} (docs/agents.md)")
    out(f"attach: {command(report.attach)}")


# ---------------------------------------------------------------- supervision


def ago(ts: str | float | None, now: float | None = None) -> str:
    """An ISO timestamp or Unix time as ``5s ago``, ``3m ago``, ``2h ago``, ``4d ago`` ('-' if None)."""
    if ts is None or ts == "":
        return "-"
    try:
        t = ts if isinstance(ts, float | int) else datetime.fromisoformat(ts).timestamp()
    except ValueError:
        return str(ts)
    s = max(0, int((time.time() if now is None else now) - t))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit} ago"
    return f"{s}s ago"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Columns aligned to their widest cell; the last column is not padded."""
    rows = [[hint(c) for c in r] for r in rows]  # a NOTE cell may advise a command
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        out(("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=False)) + "  " + r[-1]).rstrip())


def overview(waves: Sequence[WaveOverview]) -> None:
    """``fleet ls``: one row per wave."""
    if not waves:
        note("no waves yet: create one with `fleet wave new NAME`")
        return
    rows = []
    for w in waves:
        panes = f"{len(w.live)} live" + (f", {len(w.dead)} dead ({', '.join(w.dead)})" if w.dead else "")
        where = command(w.attach) if w.attach else "not spawned"
        rows.append(
            [w.wave, str(w.wavelets), ", ".join(w.agents) or "-", panes, where, "; ".join(w.waiting) or "-"]
        )
    table(["WAVE", "WAVELETS", "AGENTS", "PANES", "ATTACH", "NEEDS YOU"], rows)


def status_table(st: WaveStatus) -> None:
    """One wave's ``fleet status``: a header line, a line per wavelet with a topic (``  NAME  — TOPIC``,
    cut to the width), then one row per (wavelet, participant), who waits on the operator first
    (``!`` marks them)."""
    from fleet.agentstate import describe, needs_operator

    name = st.tmux_session_name or st.tmux_session
    where = f"tmux session {name}" if name else "no tmux session"
    out(f"wave {st.wave}  ({where})")
    for path, topic in st.topics.items():
        out(with_topic(f"  {path.split('/', 1)[-1]}", topic))
    if not st.rows:
        out("  no agents on any roster")
        return
    rows = []
    for r in st.rows:
        pane = "-" if r.pane_id is None else f"{r.pane_id} {r.pane}" + (f" ({r.exit})" if r.exit else "")
        cap = "-" if r.cap_used is None else f"{r.cap_used}/{'?' if r.cap is None else r.cap or 'no cap'}"
        cap += " capped" if r.capped else ""
        route = r.route or "-"
        if r.unconfirmed:
            route += f", {r.unconfirmed} unconfirmed" + (
                f" (oldest {span(r.oldest_unconfirmed)})" if r.oldest_unconfirmed is not None else ""
            )
        why = r.route_why if r.route in ("hook", "unconfirmed") else ""
        problem = f"receipts: {r.receipts_problem}" if r.receipts_problem else ""
        tree = ""
        if r.branch:
            tree = f"{r.branch} +{r.ahead}" + ("*" if r.dirty else "")
        note = "; ".join(x for x in (r.note, why, problem) if x)
        rows.append(
            [
                r.wavelet.split("/", 1)[-1],
                r.participant,
                pane,
                ("! " if needs_operator(r.state) else "") + (r.state_text or describe(r.state)),
                route,
                ago(r.last_blip_at),
                str(r.delivered),
                cap,
                (r.session_id or "-")[:8],
                r.host or "-",
                tree or "-",
                brief(r.usage) if r.usage else "-",
                r.budget or "-",
                note,
            ]
        )
    head = ["WAVELET", "NAME", "PANE", "STATE", "WOKEN BY", "LAST BLIP", "DELIVERED", "CAP", "SESSION",
            "HOST", "WORKTREE", "USAGE", "BUDGET", "NOTE"]  # fmt: skip
    table(head, rows)
    limited = {r.participant: (r.agent, r.limits) for r in st.rows if r.limits}
    for name, (kind, limits) in limited.items():
        out(f"  {name} runs {kind}, which cannot: {'; '.join(limits)} (docs/agents.md)")
    if st.unpriced:
        from fleet.usage import no_price_text

        out(f"  cost ?: {no_price_text(st.unpriced, st.prices_file)}")


def span(seconds: float) -> str:
    s = round(seconds)
    return f"{s}s" if s < 120 else f"{s // 60}m"


def token_count(n: int) -> str:
    """``950``, ``12.3k``, ``4.56M``: a token count at a glance."""
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.2f}M"


def usd(value: float | None) -> str:
    """``$0.0123``, or ``?`` for a cost that is unknown (a model with no price): never $0."""
    return "?" if value is None else f"${value:.4f}"


def cost(fig: Figures) -> str:
    return usd(fig.cost_usd)


def brief(fig: Figures) -> str:
    """The usage column of ``fleet status``: tokens and cost."""
    return f"{token_count(fig.tokens)} {cost(fig)}"


def status_tables(items: Sequence[WaveStatus]) -> None:
    if not items:
        note("no waves yet: create one with `fleet wave new NAME`")
    for i, st in enumerate(items):
        if i:
            out()
        status_table(st)


def status_frame(items: Sequence[WaveStatus], interval: float, *, clear: bool) -> None:
    """One redraw of ``fleet status --watch``: in place on a terminal, separated by a stamp otherwise."""
    if clear:
        typer.echo("\x1b[H\x1b[2J", nl=False)
    out(f"fleet status  {datetime.now().strftime('%H:%M:%S')}  (every {interval:g}s; Ctrl-C stops)")
    status_tables(items)
    if not clear:
        out()


def pane_report(p: PaneReport) -> None:
    """What ``fleet respawn`` did: the pane, the resumed session, ready or why not."""
    state = "ready" if p.ready else "NOT READY"
    why = f" ({hint(p.why)})" if p.why else ""
    out(f"{p.participant}  {p.pane_id}  {p.action} (session {p.session_id})  {state}{why}")


def supervisor_event(e: SupervisorEvent) -> None:
    out(f"[{clock(e.at)}] {hint(e.text)}")


def kill_report(r: KillReport) -> None:
    if r.killed is None:
        note(f"nothing of {r.target} runs in tmux: nothing to kill")
    else:
        what = "window" if r.scope == "wavelet" else "session"
        who = ", ".join(r.participants) or "no agents"
        out(hint(f"killed {r.target}'s {what} {r.killed} ({who}); sessions kept: `fleet spawn` resumes them"))
    for path in r.pruned:
        out(f"pruned worktree {path} and its branch")
    for k in r.kept:
        out(f"kept worktree {k.path} ({k.branch}): {k.why}")


def checks(items: Sequence[Check]) -> None:
    """``fleet doctor``: one line per check, its fix indented under a warning or failure."""
    width = max((len(c.name) for c in items), default=0)
    for c in items:
        out(f"{c.level.upper():<4}  {c.name:<{width}}  {c.detail}")
        if c.fix and c.level != "ok":
            out(f"{'':<4}  {'':<{width}}  fix: {hint(c.fix)}")
