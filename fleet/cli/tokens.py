"""``fleet token mint|revoke|list`` and ``fleet whoami``: who may talk to the daemon, and as whom."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fleet import errors
from fleet.cli import render
from fleet.cli.common import JsonOpt, client
from fleet.paths import write_private

app = typer.Typer(help="Mint, list and revoke participant tokens (operator only).", no_args_is_help=True)


@app.command()
def mint(
    wave: Annotated[str, typer.Argument(help="The wave (name or id) the token is scoped to.")],
    name: Annotated[str, typer.Argument(metavar="NAME", help="The participant the token speaks as.")],
    file: Annotated[
        Path | None,
        typer.Option("--file", metavar="PATH", help="Write the secret to PATH (mode 0600); print the path."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Mint a token for NAME in WAVE. The secret is shown once: keep it, or use --file."""
    minted = client().mint_token(wave, name)
    if file is not None:
        write_private(file, minted.token + "\n")
        if as_json:  # the secret stays in the file: print the token's record without it
            from fleet.models import TokenInfo

            render.dump(
                TokenInfo(
                    id=minted.id, wave_id=minted.wave_id, wave=minted.wave, participant=minted.participant,
                    created_at=minted.created_at, revoked_at=minted.revoked_at,
                )
            )  # fmt: skip
        else:
            render.out(str(file))
        return
    if as_json:
        render.dump(minted)
        return
    render.out(minted.token)
    render.note(f"minted token {render.short(minted.id)} for {minted.participant} in wave {minted.wave}")


@app.command()
def revoke(
    token_id: Annotated[
        str | None,
        typer.Argument(metavar="ID", help="The token's id (or unique prefix).", show_default=False),
    ] = None,
    wave: Annotated[str | None, typer.Option(help="With --participant: revoke all of theirs.")] = None,
    participant: Annotated[str | None, typer.Option(metavar="NAME")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Revoke one token by ID, or every token of --wave W --participant NAME."""
    if (token_id is None) == (wave is None or participant is None) or (token_id and (wave or participant)):
        raise errors.UsageError("give a token ID, or both --wave and --participant (not both forms)")
    revoked = client().revoke_token(token_id=token_id, wave=wave, participant=participant)
    if as_json:
        render.dump(revoked)
    elif not revoked:
        render.note("nothing to revoke")
    else:
        for t in revoked:
            render.out(f"revoked {render.short(t.id)} ({t.wave}/{t.participant})")


@app.command("list")
def list_tokens(
    wave: Annotated[str | None, typer.Option(help="Only this wave's tokens.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List participant tokens (ids and owners; never the secrets)."""
    tokens = client().list_tokens(wave)
    if as_json:
        render.dump(tokens)
    else:
        render.tokens(tokens)


def whoami(as_json: JsonOpt = False) -> None:
    """Who the daemon takes you for, and which daemon that is."""
    c = client()
    me = c.whoami()
    if as_json:
        render.dump(me)
        return
    scope = f" in wave {me.wave}" if me.wave else ""
    render.out(f"{me.principal}{scope} at {c.base_url} (daemon {me.daemon_version})")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="token")
    root.command()(whoami)
