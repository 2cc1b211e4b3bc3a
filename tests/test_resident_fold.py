"""The resident's worker fold (which wavelets it forked still run): exact at any size, incremental.

A long horizon (over 10,000 blips, the decisive ones after blip 5,000) through a real daemon, read
both ways: once from the start (``fleet resident status``) and page by page as ``fleet supervise``
reads the wave; and a property: the fold fed in any page split equals the fold over the whole list.
"""

from __future__ import annotations

import random

import libtmux
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.models import Blip, Wave, Wavelet
from fleet.paths import Paths
from fleet.resident import RESIDENT, seat
from fleet.resident.keeper import Keeper
from fleet.resident.seat import Worker, WorkerFold
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

WAVE_ID = "0wave"
ROOT = "0root"
WAVELETS = ["1a", "1b", "1c", "1d"]
"""Wavelets of the wave besides its root; the resident forked the first three."""


def _wave() -> Wave:
    def wl(i: str, by: str, parent: str | None) -> Wavelet:
        return Wavelet(
            id=i, wave_id=WAVE_ID, wave="w", name=i, parent_id=parent, private=False,
            created_by=by, created_at="2026-12-01T00:00:00Z",
        )  # fmt: skip

    forked = [wl(i, "bob" if i == "1d" else RESIDENT, ROOT) for i in WAVELETS]
    return Wave(
        id=WAVE_ID, name="w", created_at="2026-12-01T00:00:00Z", root_id=ROOT,
        wavelets=[wl(ROOT, "operator", None), *forked],
    )  # fmt: skip


def reference(wave: Wave, blips: list[Blip], now: float) -> list[Worker]:
    """The fold's meaning, over the whole list at once (what ``workers`` computed when it could
    still read every blip in one page)."""
    out = []
    for wl in wave.wavelets:
        if wl.created_by != RESIDENT or wl.id == wave.root_id:
            continue
        own = [b for b in blips if b.wavelet_id == wl.id and b.kind != "system"]
        surfaced = any(b.kind == "surface" and b.source_wavelet_id == wl.id for b in blips)
        done = surfaced or any(b.text.startswith("DONE:") and b.author != RESIDENT for b in own)
        last = own[-1] if own else None
        at = seat._ts(last.created_at if last else wl.created_at)
        out.append(
            Worker(
                wavelet=wl.path, status="done" if done else "running",
                last_blip=f"{last.author}: {last.text[:120]}" if last else "", age_seconds=max(0.0, now - at),
            )
        )  # fmt: skip
    return out


blip_st = st.tuples(
    st.sampled_from([ROOT, *WAVELETS]),
    st.sampled_from(["message", "message", "system", "surface"]),
    st.sampled_from([RESIDENT, "worker", "bob"]),
    st.sampled_from(["progress", "DONE: finished", "DONE:", "not DONE: yet", "x" * 200]),
    st.sampled_from([None, *WAVELETS]),
    st.integers(0, 59),
)


@settings(max_examples=300, deadline=None)
@given(
    specs=st.lists(blip_st, max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=12),
    back=st.lists(st.integers(0, 5), max_size=12),
)
def test_the_fold_fed_in_any_page_split_equals_the_fold_over_the_whole_list(
    specs: list[tuple[str, str, str, str, str | None, int]], cuts: list[int], back: list[int]
) -> None:
    """Pages as a reader's cursor gives them (each read after the previous page's end, or after an
    earlier id: an overlap); a fold fed them equals the fold of the whole list, at every page end."""
    blips = [
        Blip(
            id=f"b{i:05d}", wavelet_id=w, wave_id=WAVE_ID, author="system" if kind == "system" else author,
            kind=kind, text=text, source_wavelet_id=src if kind == "surface" else None,  # type: ignore[arg-type]
            created_at=f"2026-12-01T00:{sec:02d}:00Z",
        )
        for i, (w, kind, author, text, src, sec) in enumerate(specs)
    ]  # fmt: skip
    wave = _wave()
    ends = sorted({min(c, len(blips)) for c in cuts} | {len(blips)})
    fold = WorkerFold()
    start = 0
    for n, end in enumerate(ends):
        start = max(0, start - (back[n] if n < len(back) else 0))  # a page may overlap the last
        after = blips[start - 1].id if start else ""
        fold.feed(blips[start:end], after=after)
        assert fold.complete
        assert fold.workers(wave, now=NOW) == reference(wave, blips[:end], NOW)
        start = end
    assert fold.cursor == (blips[-1].id if blips else "")


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
