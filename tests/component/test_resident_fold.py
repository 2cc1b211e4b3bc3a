"""The resident's worker fold (which wavelets it forked still run): exact at any size, incremental.

A long horizon (over 10,000 blips, the decisive ones after blip 5,000) through a real daemon, read
both ways: once from the start (``fleet resident status``) and page by page as ``fleet supervise``
reads the wave; and a property: the fold fed in any page split equals the fold over the whole list.
"""

from __future__ import annotations

import random

import libtmux

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths
from fleet.resident import RESIDENT, seat
from fleet.resident.keeper import Keeper
from fleet.resident.seat import WorkerFold
from fleet.spawn import Spawner
from fleet.store import OPERATOR_PRINCIPAL as OP
from fleet.supervise import Supervisor
from fleet.tmux import Tmux

NOW = 2_000_000_000.0


def test_every_workers_status_is_right_past_10000_blips_read_whole_or_as_the_supervisor_reads(
    daemon: Daemon, operator: Client, tmux_server: libtmux.Server, fleet_env: Paths
) -> None:
    """Four workers; 10,400 blips, most unrelated; after blip 5,000 one worker posts ``DONE:``, one
    surfaces, one only reports progress and one gets a ``DONE:`` from the resident (which does not
    count). ``fleet resident status``'s read and the supervisor's page-by-page fold both say so, and
    the fold the supervisor feeds reads nothing again once it has looked."""
    operator.create_wave("w", [RESIDENT, "bob"])
    wave = operator.get_wave("w")
    jobs = {n: operator.fork(wave.root_id, n, ["worker"], as_=RESIDENT) for n in ("a", "b", "c", "d")}
    tmux = Tmux(tmux_server)
    keeper = Keeper(operator, tmux, fleet_env, operator.get_wave("w"))
    sup = Supervisor(operator, tmux, Spawner(operator, tmux, fleet_env), "w", watchers=[keeper])
    store = daemon.store
    assert store is not None
    read = 0
    real_read_wave = operator.read_wave

    def counted(*args: object, **kw: object) -> object:
        nonlocal read
        page = real_read_wave(*args, **kw)  # type: ignore[arg-type]
        read += len(page.blips)
        return page

    operator.read_wave = counted  # type: ignore[method-assign,assignment]
    rng = random.Random(26)
    posted = 0

    def post(ref: str, text: str, author: str) -> None:
        nonlocal posted
        store.post(OP, ref, text, as_=author)
        posted += 1
        if rng.random() < 0.002:  # the supervisor's rounds fall anywhere
            while sup.step():
                pass

    for job in jobs.values():
        post(job.id, "started", "worker")
    while posted < 3_000:
        post(wave.root_id, f"unrelated {posted}", "bob")
    sup.step()
    assert {w.status for w in keeper.workers(operator.get_wave("w"))} == {"running"}
    # (that first look read the wave once, from its start: the supervisor began at its head)
    while posted < 5_000:
        post(wave.root_id, f"unrelated {posted}", "bob")
    post(jobs["a"].id, "DONE: a is finished", "worker")
    store.surface(OP, jobs["b"].id, "b found it", as_="worker")
    post(jobs["c"].id, "still on c", "worker")
    post(jobs["d"].id, "DONE: d (the resident's own word)", RESIDENT)
    while posted < 10_400:
        post(wave.root_id, f"unrelated {posted}", "bob")
    for _ in range(40):  # the supervisor reads 500 a round: let it reach the end
        sup.step()
    expect = {"w/a": "done", "w/b": "done", "w/c": "running", "w/d": "running"}

    whole = seat.workers(operator, operator.get_wave("w"), now=NOW)
    assert {w.wavelet: w.status for w in whole} == expect
    by = {w.wavelet: w for w in whole}
    assert by["w/a"].last_blip == "worker: DONE: a is finished"
    assert by["w/c"].last_blip == "worker: still on c"
    assert by["w/d"].last_blip == "resident: DONE: d (the resident's own word)"

    read = 0
    folded = keeper.workers(operator.get_wave("w"), now=NOW)
    assert folded == whole, "the supervisor's incremental fold disagrees with a whole read"
    assert read == 0, f"the supervisor-fed fold read {read} blips again"
    assert (keeper.fold.cursor, keeper.fold.complete) == (sup.cursor, True)


# ---------------------------------------------------------------- the property


def test_a_page_past_a_gap_is_not_folded_and_the_fold_reads_from_where_it_stands(
    operator: Client,
) -> None:
    """A page read after an id the fold has not reached leaves a gap: the fold keeps its cursor and
    says it is not complete; :func:`seat.workers` then reads the wave from the fold's cursor."""
    operator.create_wave("w", [RESIDENT])
    wave = operator.get_wave("w")
    job = operator.fork(wave.root_id, "job", ["worker"], as_=RESIDENT)
    first = operator.post(job.id, "started", as_="worker")
    done = operator.post(job.id, "DONE: it", as_="worker")
    fold = WorkerFold()
    fold.feed([done], after=first.id)
    assert not fold.complete and fold.cursor == ""
    got = seat.workers(operator, operator.get_wave("w"), fold=fold, now=NOW)
    assert [w.status for w in got] == ["done"] and fold.complete and fold.cursor == done.id
