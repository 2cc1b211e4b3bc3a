"""``fleet remote mint|join|list|forget|tokens|revoke``: another machine joins a daemon in one line.

On the daemon's machine the operator mints a **join string** (``fleet remote mint MACHINE --wave W``):
the daemon's URL, its certificate fingerprint and a fresh token for that machine, as one line (with
``--also URL``, further daemons on the same store, each pinned, that the machine fails over to). A
machine token has the operator's powers in the named waves (it spawns panes there: it mints its
agents' tokens); with ``--participant NAME`` it is a participant token instead (one person, one
wave). On the other machine ``fleet remote join STRING`` checks the string against the daemon
(TLS pinned, token accepted) and stores it 0600 as ``data/remotes/NAME.json``; ``FLEET_DAEMON=NAME``
or ``fleet --remote NAME …`` then uses it.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlsplit

import typer

from fleet import errors
from fleet.cli import render
from fleet.cli.common import JsonOpt, client
from fleet.paths import get_paths, write_private

if TYPE_CHECKING:  # the client, the records and httpbase are imported where a command uses them: --help
    from fleet.models import JoinTicket, TokenInfo

app = typer.Typer(
    help="Join another machine's daemon in one line; list and revoke machines.", no_args_is_help=True
)


def encode(ticket: JoinTicket) -> str:
    import base64

    from fleet.models import JOIN_PREFIX
    from fleet.wire import dumps

    raw = dumps(ticket, exclude_none=True).encode("utf-8")
    return JOIN_PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode(text: str) -> JoinTicket:
    import base64
    import binascii

    from fleet.models import JOIN_PREFIX, JoinTicket
    from fleet.wire import RecordError, loads

    text = text.strip()
    bad = errors.UsageError(
        "that is not a join string: it starts with "
        f"{JOIN_PREFIX!r} and is printed whole by `fleet remote mint` on the daemon's machine"
    )
    if not text.startswith(JOIN_PREFIX):
        raise bad
    body = text[len(JOIN_PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        return loads(JoinTicket, raw)
    except (binascii.Error, ValueError, RecordError):
        raise bad from None


def _public_url(given: str | None) -> str:
    """The pinned URL other machines use: ``--url``, else the local daemon's with a usable host."""
    from fleet.client import endpoint_url, read_endpoint
    from fleet.httpbase import is_loopback, is_wildcard

    paths = get_paths()
    endpoint = read_endpoint(paths)
    if endpoint is None:
        raise errors.DaemonUnreachable(
            "no local daemon runs: start it with `fleet daemon run --listen ADDR:PORT`"
        )
    local = urlsplit(endpoint_url(endpoint))
    host, port = local.hostname or "", local.port
    if given:
        parts = urlsplit(given if "://" in given else f"{local.scheme}://{given}")
        if not parts.hostname:
            raise errors.UsageError(f"--url {given!r} is not HOST[:PORT] or a URL")
        host, port = parts.hostname, parts.port or port
    elif is_wildcard(host):
        import socket

        host = socket.getfqdn() or socket.gethostname()
    if local.scheme == "http" and is_loopback(local.hostname or "") and not given:
        raise errors.UsageError(
            f"the local daemon listens on loopback ({endpoint.url}) in plain HTTP: other machines cannot"
            " reach it. Restart it with `fleet daemon run --listen ADDR:PORT` (it then serves HTTPS)"
        )
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"{local.scheme}://{netloc}" + (f"#{local.fragment}" if local.fragment else "")


@app.command()
def mint(
    machine: Annotated[
        str, typer.Argument(help="A name for the machine that joins (listed, revoked by it).")
    ],
    wave: Annotated[
        list[str],
        typer.Option(
            "--wave", metavar="WAVE", help="A wave the machine may act in (repeatable; at least one)."
        ),
    ],
    participant: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="Mint a participant token for NAME in the (one) --wave instead of a machine token.",
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            metavar="HOST[:PORT]", help="How the other machine reaches this daemon [default: its address]."
        ),
    ] = None,
    also: Annotated[
        list[str] | None,
        typer.Option(
            "--also",
            metavar="URL",
            help="Another daemon on the same store, https://HOST:PORT#sha256=FP, to fail over to"
            " (repeatable; tried in the order given, after this one).",
        ),
    ] = None,
) -> None:
    """Print a join string for MACHINE (on the daemon's machine, with the operator token).

    Without --participant the token has the operator's powers in the --wave waves only: enough to
    spawn agents there, never to create waves or see others. The string is a credential: send it
    the way you would send a password.
    """
    from fleet.client import format_daemons, parse_daemons
    from fleet.models import JoinTicket

    pinned = format_daemons(parse_daemons(",".join([_public_url(url), *(also or [])])))
    c = client()
    if participant is not None:
        if len(wave) != 1:
            raise errors.UsageError("a participant token is for one wave: give exactly one --wave")
        minted = c.mint_token(wave[0], participant, machine=machine)
        ticket = JoinTicket(
            url=pinned, token=minted.token, machine=machine, waves=[minted.wave], participant=participant
        )
    else:
        minted = c.mint_machine_token(machine, wave)
        ticket = JoinTicket(url=pinned, token=minted.token, machine=machine, waves=minted.waves or [])
    render.out(encode(ticket))
    who = f"participant {participant}" if participant else "the operator's powers"
    render.note(
        f"join string for {machine} ({who} in {', '.join(ticket.waves)}; token {render.short(minted.id)}):"
        f" on that machine run `fleet remote join STRING`; revoke with `fleet remote revoke {machine}`"
    )


def _default_name(host: str) -> str:
    """The daemon's host name as a joined daemon's name (its first label), else ``remote``."""
    from fleet.models import PARTICIPANT_RE

    first = re.sub(r"[^a-z0-9_-]", "-", host.split(".")[0].lower())[:32]
    return first if PARTICIPANT_RE.fullmatch(first) and not first[:1].isdigit() else "remote"


@app.command()
def join(
    string: Annotated[
        str, typer.Argument(metavar="STRING", help="The join string `fleet remote mint` printed.")
    ],
    name: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="Store it under NAME [default: the daemon's host name]."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a joined daemon of that name.")] = False,
) -> None:
    """Check a join string against its daemon and store it (0600) for FLEET_DAEMON=NAME / --remote NAME."""
    from fleet.client import Client, remote_path
    from fleet.models import Remote
    from fleet.wire import dumps

    ticket = decode(string)
    paths = get_paths()
    label = name or _default_name(urlsplit(ticket.url.split(",", 1)[0]).hostname or "")
    path = remote_path(paths, label)
    if path.exists() and not force:
        raise errors.Conflict(f"a joined daemon is already named {label!r} ({path}): pick --name, or --force")
    with Client(ticket.url, ticket.token, retries=1, timeout=10) as probe:
        me = probe.whoami()  # pinned TLS and the token, checked before anything is stored
    remote = Remote(
        name=label, url=ticket.url, token=ticket.token, machine=ticket.machine, waves=ticket.waves,
        participant=ticket.participant, joined_at=time.time(),
    )  # fmt: skip
    write_private(path, dumps(remote) + "\n")
    scope = ", ".join(me.waves or [me.wave or "?"])
    render.out(f"joined {', '.join(probe.urls)} as {label!r}: {me.principal} in {scope}")
    render.note(
        f"use it with FLEET_DAEMON={label} or `fleet --remote {label} …` (stored in {path}, mode 0600)"
    )


@app.command("list")
def list_(as_json: JsonOpt = False) -> None:
    """The daemons this machine has joined (tokens not shown)."""
    import json

    from fleet.client import Client
    from fleet.models import Remote
    from fleet.wire import RecordError, dumps, loads

    paths = get_paths()
    rows: list[Remote] = []
    if paths.remotes.is_dir():
        for p in sorted(paths.remotes.glob("*.json")):
            try:
                rows.append(loads(Remote, p.read_bytes()))
            except (OSError, RecordError):
                continue
    if as_json:
        shown = [json.loads(dumps(r)) for r in rows]
        for row in shown:
            row.pop("token", None)  # a credential: never printed
        render.dump(shown)
        return
    if not rows:
        render.out("no joined daemons: join one with `fleet remote join STRING`")
    for r in rows:
        who = f"participant {r.participant}" if r.participant else "machine token"
        urls = ", ".join(Client(r.url, "").urls)
        render.out(f"{r.name}\t{urls}\t{who} as {r.machine} in {', '.join(r.waves)}")


@app.command()
def forget(name: Annotated[str, typer.Argument(metavar="NAME")]) -> None:
    """Delete a joined daemon's stored string here (revoke its token on the daemon's machine too)."""
    from fleet.client import remote_path

    path = remote_path(get_paths(), name)
    if not path.exists():
        raise errors.NotFound(f"no joined daemon is named {name!r}")
    path.unlink()
    render.out(f"forgot {name}")


@app.command()
def tokens(
    machine: Annotated[str | None, typer.Argument(metavar="MACHINE", help="Only this machine's.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The tokens minted for machines (on the daemon's machine): machine tokens and what they minted."""
    rows = [t for t in client().list_tokens(machine=machine) if t.machine]
    if as_json:
        render.dump(rows)
        return
    if not rows:
        render.out("no machine tokens" + (f" for {machine}" if machine else ""))
    for t in rows:
        render.out(_token_line(t))


def _token_line(t: TokenInfo) -> str:
    kind = f"operator in {', '.join(t.waves)}" if t.waves is not None else f"{t.participant} in {t.wave}"
    state = f"revoked {t.revoked_at}" if t.revoked_at else "live"
    return f"{t.machine}\t{render.short(t.id)}\t{kind}\t{state}"


@app.command()
def revoke(machine: Annotated[str, typer.Argument(metavar="MACHINE")], as_json: JsonOpt = False) -> None:
    """Revoke every live token of MACHINE: its machine token and every token minted for or by it."""
    revoked = client().revoke_token(machine=machine)
    if as_json:
        render.dump(revoked)
        return
    render.out(f"revoked {len(revoked)} token(s) of {machine}")
    for t in revoked:
        render.out(_token_line(t))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="remote")
