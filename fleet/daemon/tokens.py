"""Tokens: mint (a participant's, a machine's), list, revoke."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from fleet.daemon.request import Answer, Request
from fleet.models import MintRequest, NewMachine, Revoked, RevokeRequest, TokenList

if TYPE_CHECKING:
    from fleet.daemon.dispatch import Dispatcher


def mint_token(d: Dispatcher, r: Request) -> Answer:
    body = r.model(MintRequest)
    secret = secrets.token_urlsafe(32)
    return 201, d.s.mint_token(r.who, body.wave, body.participant, secret, machine=body.machine)


def mint_machine_token(d: Dispatcher, r: Request) -> Answer:
    body = r.model(NewMachine)
    return 201, d.s.mint_machine_token(r.who, body.name, body.waves, secrets.token_urlsafe(32))


def list_tokens(d: Dispatcher, r: Request) -> Answer:
    tokens = d.s.list_tokens(r.who, r.text("wave"), machine=r.text("machine"))
    return 200, TokenList(tokens=tokens)


def revoke_token(d: Dispatcher, r: Request) -> Answer:
    body = r.model(RevokeRequest)
    revoked = d.s.revoke_tokens(
        r.who, token_id=body.token_id, wave=body.wave, participant=body.participant, machine=body.machine
    )
    d.notifier.bump()  # a long-poll holding a revoked token wakes and is refused
    return 200, Revoked(revoked=revoked)


HANDLERS = (
    mint_token,
    mint_machine_token,
    list_tokens,
    revoke_token,
)
