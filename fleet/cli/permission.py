"""``fleet approve``, ``fleet deny``, ``fleet permissions``: answer a permission prompt from anywhere."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from fleet import errors
from fleet.cli import render
from fleet.cli.common import JsonOpt, WaveOpt, client

if TYPE_CHECKING:  # the records are imported where a command reads or writes them, not by --help
    from fleet.records.permissions import Behavior, PermissionRequest

WhereArg = Annotated[
    str,
    typer.Argument(metavar="WAVE/WAVELET", help="Where the agent works: WAVE/WAVELET, or the wave's name."),
]
NameArg = Annotated[str, typer.Argument(metavar="NAME", help="The agent waiting at the prompt.")]
RequestOpt = Annotated[
    str | None,
    typer.Option("--request", metavar="ID", help="The request to answer [default: NAME's waiting one]."),
]
MessageOpt = Annotated[
    str, typer.Option("--message", "-m", metavar="TEXT", help="Why (Claude Code shows a denial's reason).")
]


def _wave_of(ref: str, wave: str | None) -> str:
    """The wave id a user's ``WAVE/WAVELET`` (or a wave name, or a wavelet in ``wave``) names."""
    c = client()
    if "/" in ref:
        return c.get_wave(ref.split("/", 1)[0]).id
    try:
        return c.get_wave(ref).id
    except errors.NotFound:
        return c.resolve(ref, wave=wave).wave_id


def _answer(
    ref: str,
    name: str,
    behavior: Behavior,
    request: str | None,
    message: str,
    wave: str | None,
    as_json: bool,
) -> None:
    from fleet.records.permissions import PermissionAnswer

    got = client().answer_permission(
        _wave_of(ref, wave),
        PermissionAnswer(participant=name, behavior=behavior, request_id=request or "", message=message),
    )
    if as_json:
        render.dump(got)
    else:
        _shown(got)


def _shown(req: PermissionRequest) -> None:
    render.out(
        f"{req.participant}: {req.tool} ({req.preview}) {req.state} by {req.answered_by} via {req.via}"
    )


def approve(
    where: WhereArg, name: NameArg, request: RequestOpt = None, message: MessageOpt = "",
    wave: WaveOpt = None, as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Allow the tool NAME waits to run (its PermissionRequest hook passes the answer on)."""
    _answer(where, name, "allow", request, message, wave, as_json)


def deny(
    where: WhereArg, name: NameArg, request: RequestOpt = None, message: MessageOpt = "",
    wave: WaveOpt = None, as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Refuse the tool NAME waits to run (Claude Code tells the model it was denied)."""
    _answer(where, name, "deny", request, message, wave, as_json)


def permissions(
    where: WhereArg,
    participant: Annotated[
        str | None, typer.Option("--participant", metavar="NAME", help="Only NAME's.")
    ] = None,
    pending: Annotated[bool, typer.Option("--pending", help="Only the requests waiting now.")] = False,
    wave: WaveOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the wave's permission requests, newest first: who asked what, and who answered."""
    from fleet.records.permissions import PermissionList

    items = client().permissions(_wave_of(where, wave), participant, pending=pending)
    if as_json:
        render.dump(PermissionList(requests=items))
        return
    if not items:
        render.note("no permission requests" + (" waiting" if pending else ""))
        return
    from fleet.records.permissions import pending_note

    rows = []
    for r in items:
        what = pending_note(r) if r.state == "pending" else f"{r.tool} ({r.preview})"
        who = f"{r.answered_by} via {r.via}" if r.answered_by else "-"
        rows.append([r.participant, r.state, what, render.ago(r.asked_at), who, r.id])
    render.table(["NAME", "STATE", "ASKED", "WHEN", "ANSWERED BY", "ID"], rows)


def register(root: typer.Typer) -> None:
    root.command()(approve)
    root.command()(deny)
    root.command()(permissions)
