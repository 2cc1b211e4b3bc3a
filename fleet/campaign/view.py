"""The campaign dashboard as data (``fleet campaign status --json``) and as lines of text."""

from __future__ import annotations

from typing import Any

from fleet.campaign import loop as lp
from fleet.campaign.disk import Campaign

COLOURS = {"complete": "green", "running": "cyan", "failed": "red", "undoable": "red",
           "crashed": "red", "cancelled": "red", "paused": "yellow"}  # fmt: skip


def status(c: Campaign) -> dict[str, Any]:
    s, o = lp.read_state(c)
    done = sum(1 for r in s.rows if r.get("Status") == "complete")
    attention = None
    if s.wave_status == "awaiting_user":
        answer = f'fleet post {o.wavelet} "{o.participant}: <your answer>"' if o.wavelet else ""
        attention = {
            "question": s.user_question,
            "session": o.participant,
            "wavelet": o.wavelet,
            "answer_with": answer,
            "dismiss_with": "fleet campaign dismiss",
        }
    rows = []
    for r in s.rows:
        n = int(r.get("#")) if r.get("#").isdigit() else -1
        status_ = r.get("Status")
        if n == s.current_wave and s.failure_kind and status_ in ("failed", "undoable", "crashed"):
            status_ = f"{status_} ({s.failure_kind})"
        rows.append({"wave": n, "title": r.get("Title"), "status": status_, "session": r.get("Session"),
                     "commit": r.get("Commit"), "notes": r.get("Notes"),
                     "has_notes": c.notes(n).exists() if n >= 0 else False})  # fmt: skip
    return {
        "campaign_id": s.campaign_id,
        "state": s.cursor(),
        "done": done,
        "total": s.total_waves,
        "loop": {
            "running": lp.running(c),
            "error": o.last_error,
            "wavelet": o.wavelet,
            "participant": o.participant,
            "starting": o.launching.get("participant", "") if o.launching else "",
            "left_out": lp.users_paths(c, o) if o.active_session_id else [],
            "keep_out": list(o.keep_out),
        },
        "attention": attention,
        "rows": rows,
    }


def lines(view: dict[str, Any], *, colour: bool = False) -> list[str]:
    import typer

    s = view["state"]

    def paint(text: str, name: str | None, bold: bool = False) -> str:
        return typer.style(text, fg=name, bold=bold) if colour and (name or bold) else text

    model = s["executor_model"] or "default model"
    out = [
        paint(f"campaign {view['campaign_id']}", None, bold=True)
        + f"  plan {s['plan_source']}  executor {s['executor_agent'] or 'default'} ({model})"
        + f"  {view['done']}/{view['total']} waves done"
    ]
    strip = [f"loop {s['loop_state']}" + ("" if view["loop"]["running"] else " (no loop process)")]
    strip.append(f"wave {s['current_wave']} {s['wave_status']}")
    if s["retry_count"]:
        strip.append(f"retry {s['retry_count']}")
    if s["verify_count"]:
        strip.append(f"verify {s['verify_count']}")
    if s["active_session_id"]:
        strip.append(
            f"active {view['loop']['participant'] or s['active_session_id']} [{s['active_session_kind']}]"
        )
    starting = view["loop"].get("starting", "")
    if starting and not s["active_session_id"]:
        strip.append(f"starting {starting}")
    out.append(" · ".join(strip))
    if not view["loop"]["running"] and (starting or s["active_session_id"]):
        what = f"while starting {starting}" if starting else "with a session active"
        out.append(
            f"the loop stopped {what}: `fleet campaign run` carries on"
            + (" (it takes over the session if it started, else starts it)" if starting else "")
        )
    left = view["loop"].get("left_out") or []
    if left:
        more = " …" if len(left) > 5 else ""
        out.append(
            f"left out of this session's commit (changed before it started): {', '.join(left[:5])}{more};"
            " whatever else changes while it runs is committed with it (`--keep-out GLOB` keeps paths out)"
        )
    if view["loop"].get("keep_out"):
        out.append(f"never committed (--keep-out): {', '.join(view['loop']['keep_out'])}")
    if view["loop"]["error"]:
        out.append(paint(f"loop error: {view['loop']['error']}", "red"))
    att = view["attention"]
    if att:
        bar = "=" * 72
        out += [
            paint(bar, "yellow"),
            paint("USER ATTENTION NEEDED: " + (att["question"] or "(no summary)"), "yellow", True),
        ]
        if att["answer_with"]:
            out.append(f"  answer in the session: {att['answer_with']}")
        out.append(f"  or dismiss the question: {att['dismiss_with']}")
        out.append(paint(bar, "yellow"))
    out.append("")
    header = ["#", "STATUS", "SESSION", "COMMIT", "TITLE", "NOTES"]
    rows = [
        [str(r["wave"]), r["status"] or "-", r["session"] or "-", r["commit"] or "-", r["title"] or "-",
         (r["notes"] or "") + (" [NOTES.md]" if r["has_notes"] else "")]
        for r in view["rows"]
    ]  # fmt: skip
    widths = [max(len(x[i]) for x in [header, *rows]) for i in range(len(header))]
    for i, r in enumerate([header, *rows]):
        cells = [c.ljust(w) for c, w in zip(r, widths, strict=True)]
        if i and colour:
            base = r[1].split(" ")[0]
            cells[1] = paint(cells[1], COLOURS.get(base))
        out.append("  ".join(cells).rstrip())
    return out
