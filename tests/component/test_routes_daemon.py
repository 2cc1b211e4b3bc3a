"""The route table against a real daemon: it serves every route of the table and no other, and enforces the
auth the table declares."""

from __future__ import annotations

from httphelp import Http

from fleet.daemon import Daemon
from fleet.routes import ROUTES


def test_a_real_daemon_serves_every_route_of_the_table_and_no_other(daemon: Daemon) -> None:
    """Each route reaches its handler (never 'no such endpoint', never 405), which reads the body the
    table declares (never the 500 of another record); a path beside them is 404."""
    http = Http(daemon.url, daemon.operator_token)
    http.new_wave("w", ["alice"]).ok(201)
    for route in ROUTES:
        path = route.path.format(wave="w", wavelet="nosuch", blip="nosuch", request="nosuch")
        got = http.get(path) if route.method == "GET" else http.post(path, {})
        assert got.status not in (405, 500), (route.name, got.raw[:200])
        assert "no such endpoint" not in got.raw.decode(), route.name
    assert "no such endpoint" in http.get("/v1/waves/w/nothing").error["message"]


def _valid_bodies(main: str) -> dict[str, object]:
    """A well-formed body for each write of the operator's or the resident's, so that a refusal is
    the auth's, not a 400."""
    from fleet.models import (
        CloseSeat,
        MemoryWrite,
        MintRequest,
        NewMachine,
        NewSeat,
        NewSession,
        NewSystemBlip,
        NewWave,
        RevokeRequest,
        SupervisorClaim,
        SupervisorRelease,
    )
    from fleet.records.budgets import SetBudget
    from fleet.records.permissions import PermissionAnswer

    return {
        "create_wave": NewWave(name="other", with_=[]),
        "record_session": NewSession(participant="alice", session_id="s1", wavelet_id=main),
        "claim_seat": NewSeat(participant="alice", session_id="s1", host="h", pid=1),
        "close_seat": CloseSeat(why="done"),
        "claim_supervisor": SupervisorClaim(holder="h1", pid=1, host="h"),
        "release_supervisor": SupervisorRelease(holder="h1"),
        "set_budget": SetBudget(tokens=10),
        "answer_permission": PermissionAnswer(participant="alice", behavior="allow"),
        "post_system": NewSystemBlip(text="hello"),
        "mint_token": MintRequest(wave="w", participant="alice"),
        "mint_machine_token": NewMachine(name="m1", waves=["w"]),
        "revoke_token": RevokeRequest(wave="w", participant="alice"),
        "write_memory": MemoryWrite(op="add", content="a note"),
    }


def test_the_auth_the_table_declares_is_what_the_daemon_enforces(daemon: Daemon) -> None:
    """A participant's token is refused (403, nothing written) on every route the table says is the
    operator's or the seated resident's, with a well-formed request; a machine token on those that
    are the operator token's own; every route but ``auth="none"`` wants a token at all (401)."""
    from httphelp import snapshot

    from fleet.client import Client
    from fleet.wire import dumps

    op = Client(daemon.url, daemon.operator_token)
    wave = op.create_wave("w", ["alice"])
    alice = Http(daemon.url, op.mint_token("w", "alice").token)
    machine = Http(daemon.url, op.mint_machine_token("m0", ["w"]).token)
    nobody = Http(daemon.url, None)
    bodies = _valid_bodies(wave.root_id)
    before = snapshot(daemon.paths.db)
    for route in ROUTES:
        path = route.path.format(wave="w", wavelet=wave.root_id, blip="nosuch", request="nosuch")
        body = None
        if route.method == "POST":
            assert route.auth not in ("operator", "operator-token", "resident") or route.name in bodies, (
                f"{route.name}: give _valid_bodies a well-formed body for it"
            )
            body = json_of(dumps(bodies[route.name], exclude_none=True)) if route.name in bodies else {}
        refusers = [alice] if route.auth in ("operator", "operator-token", "resident") else []
        refusers += [machine] if route.auth == "operator-token" else []
        for who in refusers:
            got = who.request(route.method, path, body)
            assert got.status == 403, (route.name, got.status, got.raw[:200])
        anonymous = nobody.request(route.method, path, body)
        assert (anonymous.status == 401) == (route.auth != "none"), (route.name, anonymous.status)
    assert snapshot(daemon.paths.db) == before


def json_of(text: str) -> object:
    import json

    return json.loads(text)
