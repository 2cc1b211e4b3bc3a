"""Rolling summaries on a real SQLite store, no daemon (fleet.store.summaries): assembly, the load-bearing
check, refusals, pins, replay, visibility and the paged context. Through the daemon, the CLI and the MCP
tools: tests/component/test_summaries.py."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pg import StoreAt

from fleet import errors
from fleet.models import Blip, NewSummary, Summary
from fleet.store import OPERATOR_PRINCIPAL, Principal, Store, connect, dump_tables, replay
from fleet.summaries import extractive

OP = OPERATOR_PRINCIPAL


PEOPLE = ["alice", "bob", "carol"]


@pytest.fixture
def store(store_at: StoreAt) -> Iterator[Store]:
    s = Store(store_at("fleet.sqlite3"))
    yield s
    s.close()


def who(store: Store, name: str, wave: str = "w") -> Principal:
    return Principal(name, store.get_wave(OP, wave).id)


def full_walk(store: Store, reader: Principal, ref: str) -> list[Blip]:
    """The context as it was before summaries: every visible ancestor's blips up to its fork point
    (replaced versions hidden when the replacement is inside the part), then the wavelet's own."""
    wl = store.resolve(reader, ref)
    chain = [store.resolve(OP, wl.id)]
    while chain[0].parent_id:
        chain.insert(0, store.resolve(OP, chain[0].parent_id))
    visible = {w.id for w in store.get_wave(reader, wl.wave_id).wavelets}
    out: list[Blip] = []
    for i, node in enumerate(chain):
        if i < len(chain) - 1 and node.id not in visible:
            continue
        # As the reader reads them: a source it cannot see is withheld (fleet.store.access.Sight).
        everything = store.read(reader, node.id, limit=5000, history=True)
        if i < len(chain) - 1:
            bound = chain[i + 1].fork_blip_id
            if not bound:
                continue
            out += [b for b in everything if b.id <= bound and (b.superseded_by or "~") > bound]
        else:
            out += [b for b in everything if b.superseded_by is None]
    return out


def nbytes(text: str) -> int:
    return len(text.encode())


def summarize_extractive(store: Store, ref: str) -> None:
    """Roll ``ref``'s summary as ``fleet summary write`` does: accepted, or refused for saving nothing."""
    proposal = extractive(store.summaries.pending(OP, ref))
    if proposal is None:  # nothing new since the last summary
        return
    verdict = store.summaries.summarize(OP, ref, proposal)
    assert verdict.accepted or "saves nothing" in verdict.reason, verdict


TEXTS = ["plain words", "DONE: shipped it", "bob: please look", "see [[carol]]", "bobby is not bob-2"]


OPS = st.lists(
    st.tuples(
        st.sampled_from(["post", "post", "post", "fork", "surface", "replace", "pin", "summarize"]),
        st.integers(0, 50),
        st.integers(0, len(TEXTS) - 1),
    ),
    max_size=40,
)


NAMES = re.compile(r"(?<![\w-])(alice|bob|carol|operator)(?![\w-])|\[\[(alice|bob|carol)\]\]", re.I)


def load_bearing(b: Blip, pinned: set[str]) -> bool:
    """The issue's rule, written independently of the store's: surfaces, DONE: blips, pinned blips,
    blips naming a participant (system blips are provenance)."""
    if b.kind == "system":
        return False
    if b.kind == "surface" or b.id in pinned:
        return True
    done = any(line.strip().startswith("DONE:") for line in b.text.splitlines())
    return done or NAMES.search(b.text) is not None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_assembly_is_the_full_walk_until_summaries_then_keeps_every_load_bearing_blip(
    tmp_path_factory: pytest.TempPathFactory, store_at: StoreAt, ops: list[tuple[str, int, int]]
) -> None:
    d = tmp_path_factory.mktemp("ctx")
    s = Store(store_at(f"{d.name}.db"))
    try:
        s.create_wave(OP, "w", PEOPLE)
        pinned: set[str] = set()
        for i, (op, n, t) in enumerate(ops):
            wavelets = s.get_wave(OP, "w").wavelets
            target = wavelets[n % len(wavelets)]
            try:
                if op == "post":
                    s.post(OP, target.id, f"{TEXTS[t]} {i}", as_=PEOPLE[n % 3])
                elif op == "fork":
                    s.fork(OP, target.id, f"f{i}", [PEOPLE[n % 3]], private=n % 4 == 1, as_=PEOPLE[t % 3])
                elif op == "surface":
                    s.surface(OP, target.id, f"conclusion {i}", as_=PEOPLE[n % 3])
                elif op == "replace":
                    msgs = [b for b in s.read(OP, target.id) if b.kind == "message"]
                    if msgs:
                        s.replace(OP, msgs[n % len(msgs)].id, f"{TEXTS[t]} r{i}")
                elif op == "pin":
                    msgs = [b for b in s.read(OP, target.id) if b.kind != "system"]
                    if msgs:
                        pinned.add(s.summaries.pin(OP, msgs[n % len(msgs)].id).id)
                elif op == "summarize":
                    summarize_extractive(s, target.id)
            except errors.FleetError:
                pass
        readers = [OP, who(s, "alice"), who(s, "carol")]
        for wl in s.get_wave(OP, "w").wavelets:
            for reader in readers:
                try:
                    ctx = s.context(reader, wl.id, limit=5000)
                except errors.NotFound:
                    continue
                walk = full_walk(s, reader, wl.id)
                shown = sum(nbytes(b.text) for b in ctx.blips) + sum(nbytes(x.text) for x in ctx.summaries)
                assert ctx.bytes == shown
                assert ctx.full_bytes == sum(nbytes(b.text) for b in walk)
                assert ctx.saved_bytes == ctx.full_bytes - ctx.bytes
                if not ctx.summaries:
                    assert ctx.blips == walk
                    continue
                kept = {b.id for b in ctx.blips} | {c for x in ctx.summaries for c in x.cites}
                lost = [b.id for b in walk if load_bearing(b, pinned) and b.id not in kept]
                assert not lost, lost
                covered = {x.wavelet_id: x.upto for x in ctx.summaries}
                # the blips after each summary are all there, in full
                assert {b.id for b in walk if b.id > covered.get(b.wavelet_id, "")} <= {
                    b.id for b in ctx.blips
                }
                # what a summary covers stays out, but for uncited pins
                assert all(b.id > covered.get(b.wavelet_id, "") or b.id in pinned for b in ctx.blips)
    finally:
        s.close()


END = "~"


def walk_part(store: Store, node: str, bound: str) -> list[Blip]:
    """The blips of ``node`` a full walk shows below a child forked at ``bound`` (END: its own)."""
    return [
        b
        for b in store.read(OP, node, limit=5000, history=True)
        if b.id <= bound and (b.superseded_by is None or b.superseded_by > bound)
    ]


def usable(store: Store, node: str, bound: str, pinned: set[str]) -> tuple[Summary | None, int]:
    """The issue's rule for one part of a context, written independently of the store's: the latest
    summary of ``node`` that covers nothing past ``bound`` but system blips (a fork's own announcement
    lands in its parent just after the fork point), used only when it is smaller than the blips it
    replaces (with the pinned blips it does not cite, shown beside it). (the summary, its saving)."""
    every = store.read(OP, node, limit=5000, history=True)
    fits = [
        x
        for x in store.summaries.of(OP, node)
        if x.upto <= bound or all(b.kind == "system" for b in every if bound < b.id <= x.upto)
    ]
    if not fits:
        return None, 0
    best = max(fits, key=lambda x: x.upto)
    replaced = [b for b in walk_part(store, node, bound) if b.id <= best.upto]
    beside = [b for b in replaced if b.id in pinned and b.id not in best.cites]
    saved = sum(nbytes(b.text) for b in replaced) - nbytes(best.text) - sum(nbytes(b.text) for b in beside)
    return (best, saved) if saved > 0 else (None, 0)


WRITES = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "post",
                "post",
                "post",
                "fork",
                "fork-then-summarize",
                "summarize",
                "write",
                "pin",
                "replace",
                "invite",
            ]
        ),
        st.integers(0, 50),
        st.integers(0, 300),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=WRITES)
def test_a_summary_is_used_only_where_it_saves_and_a_fork_keeps_its_parents_coverage(
    tmp_path_factory: pytest.TempPathFactory, store_at: StoreAt, ops: list[tuple[str, int, int]]
) -> None:
    """Random wavelets of random sizes, forks right before and after summaries, participants'
    summaries of any length: no summary that saves nothing is recorded, and every part of every
    context (each visible ancestor up to its child's fork point, then the wavelet) uses exactly the
    summary the rule above names, or none and then the part's full walk."""
    d = tmp_path_factory.mktemp("saves")
    s = Store(store_at(f"{d.name}.db"))
    try:
        s.create_wave(OP, "w", PEOPLE)
        pinned: set[str] = set()
        for i, (op, n, size) in enumerate(ops):
            wavelets = s.get_wave(OP, "w").wavelets
            target = wavelets[n % len(wavelets)]
            try:
                if op == "post":
                    s.post(OP, target.id, f"{TEXTS[n % len(TEXTS)]}\n" + "w" * size, as_=PEOPLE[n % 3])
                elif op.startswith("fork"):
                    s.fork(OP, target.id, f"f{i}", [PEOPLE[n % 3]], private=n % 5 == 1, as_=PEOPLE[size % 3])
                    if op == "fork-then-summarize":  # the runner woken by the fork's announcement
                        summarize_extractive(s, target.id)
                elif op == "invite":
                    s.invite(OP, target.id, PEOPLE[size % 3])
                elif op == "summarize":
                    summarize_extractive(s, target.id)
                elif op == "write":  # a participant's summary of any length
                    todo = s.summaries.pending(OP, target.id)
                    if todo.blips:
                        upto = todo.blips[-1].id
                        v = s.summaries.summarize(
                            OP,
                            target.id,
                            NewSummary(text="s" * (size + 1), upto=upto, cites=todo.load_bearing),
                        )
                        covered = [b for b in walk_part(s, target.id, upto)]
                        replaces = sum(nbytes(b.text) for b in covered)
                        assert v.accepted == (size + 1 < replaces), (v, replaces)
                        if not v.accepted:
                            assert "saves nothing" in v.reason and v.missing == []
                elif op == "pin":
                    msgs = [b for b in s.read(OP, target.id) if b.kind != "system"]
                    if msgs:
                        pinned.add(s.summaries.pin(OP, msgs[n % len(msgs)].id).id)
                elif op == "replace":
                    msgs = [b for b in s.read(OP, target.id) if b.kind == "message"]
                    if msgs:
                        s.replace(OP, msgs[n % len(msgs)].id, "r" * size)
            except errors.FleetError:
                pass
        for wl in s.get_wave(OP, "w").wavelets:
            for reader in (OP, who(s, "alice"), who(s, "carol")):
                try:
                    ctx = s.context(reader, wl.id, limit=5000)
                except errors.NotFound:
                    continue
                visible = {w.id for w in ctx.path}
                chain = [s.resolve(OP, wl.id)]
                while chain[0].parent_id:
                    chain.insert(0, s.resolve(OP, chain[0].parent_id))
                for k, node in enumerate(chain):
                    bound = chain[k + 1].fork_blip_id if k < len(chain) - 1 else END
                    if node.id not in visible or not bound:
                        continue
                    want, saved = usable(s, node.id, bound, pinned)
                    got = [x for x in ctx.summaries if x.wavelet_id == node.id]
                    mine = [b for b in ctx.blips if b.wavelet_id == node.id]
                    if want is None:
                        walk_ids = [b.id for b in walk_part(s, node.id, bound)]
                        assert got == [] and [b.id for b in mine] == walk_ids, (wl.path, node.name)
                        continue
                    assert [x.id for x in got] == [want.id], (wl.path, node.name)
                    assert saved > 0
                    if want.upto > bound:
                        event("a fork uses a summary past its fork point")
                    elif bound != END:
                        event("a fork uses its parent's summary")
                    # nothing is lost: every blip of the part is in full or covered by the summary
                    walk = walk_part(s, node.id, bound)
                    assert {b.id for b in walk if b.id > want.upto} <= {b.id for b in mine}
                    assert all(b.id > want.upto or b.id in pinned for b in mine)
                assert ctx.saved_bytes == ctx.full_bytes - ctx.bytes >= 0
                assert ctx.full_bytes == sum(nbytes(b.text) for b in full_walk(s, reader, wl.id))
    finally:
        s.close()


def test_a_fork_made_right_after_a_summary_gets_it_even_when_its_announcement_was_summarized_too(
    store: Store,
) -> None:
    """The summary runner wakes on the fork's own announcement in the parent and rolls over it: the
    summary then reaches past the fork point, but only by system blips, so the fork uses it."""
    store.create_wave(OP, "w", PEOPLE)
    for i in range(20):
        store.post(OP, "w/main", f"DONE: step {i} of the importer\nits notes: " + "n" * 80, as_="alice")
    full = store.context(OP, "w/main").full_bytes
    kid = store.fork(OP, "w/main", "kid", ["bob"])
    store.invite(OP, "w/main", "carol")  # more provenance after the announcement: system blips too
    summarize_extractive(store, "w/main")
    (summary,) = store.summaries.of(OP, "w/main")
    assert summary.upto > (kid.fork_blip_id or "")
    ctx = store.context(OP, kid.id)
    assert [x.id for x in ctx.summaries] == [summary.id]
    assert [b.wavelet_id for b in ctx.blips] == [kid.id]  # the kid's own system blip
    assert ctx.full_bytes == full + nbytes(ctx.blips[0].text) and ctx.saved_bytes > 0
    # a summary past a message after the fork point is not the fork's: it would tell what it never saw
    store.post(OP, "w/main", "after the fork " + "m" * 200, as_="alice")
    summarize_extractive(store, "w/main")
    assert [x.id for x in store.context(OP, kid.id).summaries] == [summary.id]
    late = store.fork(OP, "w/main", "late", ["bob"])
    store.post(OP, "w/main", "a message right after the fork", as_="bob")
    summarize_extractive(store, "w/main")
    got = store.context(OP, late.id).summaries
    assert [x.upto for x in got] == [store.summaries.of(OP, "w/main")[1].upto]


def test_a_summary_that_saves_nothing_is_refused_and_the_full_text_stays(store: Store) -> None:
    store.create_wave(OP, "w", PEOPLE)
    done = store.post(OP, "w/main", "DONE: ok", as_="alice")
    before = store.context(OP, "w/main")
    proposal = extractive(store.summaries.pending(OP, "w/main"))
    assert proposal is not None and nbytes(proposal.text) >= before.full_bytes  # [id] alice: DONE: ok
    verdict = store.summaries.summarize(OP, "w/main", proposal)
    assert not verdict.accepted and verdict.missing == []
    assert "saves nothing" in verdict.reason and f"{nbytes(proposal.text)} bytes" in verdict.reason
    assert store.summaries.of(OP, "w/main") == [] and store.context(OP, "w/main") == before
    short = NewSummary(text="ok", upto=done.id, cites=[done.id])
    assert store.summaries.summarize(OP, "w/main", short).accepted


def test_a_summary_that_drops_a_surface_is_rejected_and_the_full_text_stays(store: Store) -> None:
    store.create_wave(OP, "w", PEOPLE)
    alice = who(store, "alice")
    store.fork(alice, "w/main", "side", ["bob"])
    store.post(alice, "w/main", "chatter")
    surfaced = store.surface(alice, "w/side", "side: settled on plan B")
    last = store.post(alice, "w/main", "more chatter")
    before = store.context(OP, "w/main")
    verdict = store.summaries.summarize(
        alice, "w/main", NewSummary(text="we chatted", upto=last.id, cites=[last.id])
    )
    assert not verdict.accepted and verdict.missing == [surfaced.id]
    assert "load-bearing" in verdict.reason
    assert store.summaries.of(OP, "w/main") == []
    after = store.context(OP, "w/main")
    assert after == before and after.bytes == after.full_bytes and after.summaries == []
    # citing it is accepted, and the context then carries the summary instead of the covered blips
    ok = store.summaries.summarize(
        alice, "w/main", NewSummary(text="plan B (surfaced)", upto=last.id, cites=[surfaced.id])
    )
    assert ok.accepted and ok.summary is not None and ok.summary.author == "alice"
    ctx = store.context(OP, "w/main")
    assert ctx.blips == [] and [x.text for x in ctx.summaries] == ["plan B (surfaced)"]
    assert ctx.saved_bytes > 0


def test_bad_summaries_are_refused_with_what_to_do(store: Store) -> None:
    store.create_wave(OP, "w", PEOPLE)
    store.fork(OP, "w/main", "other", ["bob"])
    a = store.post(OP, "w/main", "one", as_="alice")
    elsewhere = store.post(OP, "w/other", "two", as_="bob")
    alice = who(store, "alice")
    with pytest.raises(errors.UsageError, match="not in 'main'"):
        store.summaries.summarize(alice, "w/main", NewSummary(text="x", upto=elsewhere.id))
    with pytest.raises(errors.UsageError, match="cites 1 id"):
        store.summaries.summarize(alice, "w/main", NewSummary(text="x", upto=a.id, cites=[elsewhere.id]))
    with pytest.raises(errors.UsageError, match="needs text"):
        store.summaries.summarize(alice, "w/main", NewSummary(text="  ", upto=a.id))
    with pytest.raises(errors.Forbidden):
        store.summaries.summarize(alice, "w/main", NewSummary(text="x", upto=a.id, author_kind="extractive"))
    with pytest.raises(errors.Forbidden):  # carol is not on other's roster
        store.summaries.summarize(who(store, "carol"), "w/other", NewSummary(text="x", upto=elsewhere.id))
    assert store.summaries.summarize(alice, "w/main", NewSummary(text="x", upto=a.id)).accepted
    with pytest.raises(errors.Conflict, match="already summarized"):
        store.summaries.summarize(alice, "w/main", NewSummary(text="y", upto=a.id))
    assert len(store.summaries.of(OP, "w/main")) == 1


def test_a_blip_pinned_after_a_summary_is_shown_in_full_beside_it_and_must_be_cited_next(
    store: Store,
) -> None:
    store.create_wave(OP, "w", PEOPLE)
    quiet = store.post(OP, "w/main", "a quiet fact", as_="alice")
    summarize_extractive(store, "w/main")
    store.summaries.pin(who(store, "bob"), quiet.id)
    ctx = store.context(OP, "w/main")
    assert [b.id for b in ctx.blips] == [quiet.id] and len(ctx.summaries) == 1
    check = store.summaries.check(OP, "w/main")
    assert check.missing == [quiet.id]
    later = store.post(OP, "w/main", "later", as_="alice")
    bad = store.summaries.summarize(OP, "w/main", NewSummary(text="later", upto=later.id))
    assert not bad.accepted and bad.missing == [quiet.id]


def test_replay_rebuilds_summaries_and_pins(store: Store, tmp_path: Path) -> None:
    store.create_wave(OP, "w", PEOPLE)
    store.post(OP, "w/main", "DONE: part one\n" + "the details, at length. " * 8, as_="alice")
    b = store.post(OP, "w/main", "a detail\n" + "more of it. " * 8, as_="bob")
    store.summaries.pin(OP, b.id)
    summarize_extractive(store, "w/main")
    store.fork(OP, "w/main", "child", ["bob"])
    store.post(OP, "w/child", "in the child", as_="bob")
    replay(store.path, tmp_path / "rebuilt.sqlite3")
    rebuilt = connect(tmp_path / "rebuilt.sqlite3")
    dumped = dump_tables(rebuilt)
    assert dumped == store.dump(OP) and len(dumped["summaries"]) == 1 and len(dumped["pins"]) == 1
    rebuilt.close()
    again = Store(tmp_path / "rebuilt.sqlite3")
    try:
        assert again.context(OP, "w/child") == store.context(OP, "w/child")
        assert again.summaries.of(OP, "w/main") == store.summaries.of(OP, "w/main")
    finally:
        again.close()


def test_private_ancestors_summaries_follow_their_visibility(store: Store) -> None:
    store.create_wave(OP, "w", PEOPLE)
    alice, bob, carol = (who(store, p) for p in PEOPLE)
    store.fork(alice, "w/main", "secret", ["bob"], private=True)
    store.post(alice, "w/secret", "the secret plan, bob")
    summarize_extractive(store, "w/secret")
    store.fork(bob, "w/secret", "open", ["carol"])
    store.post(bob, "w/open", "public work")
    seen_by_bob = store.context(bob, "w/open")
    assert [x.wavelet_id for x in seen_by_bob.summaries] == [store.resolve(OP, "w/secret").id]
    seen_by_carol = store.context(carol, "w/open")
    assert seen_by_carol.summaries == [] and "secret" not in json.dumps([b.text for b in seen_by_carol.blips])
    assert [w.name for w in seen_by_carol.path] == ["main", "open"]
    for doing in (store.summaries.of, store.summaries.check):
        with pytest.raises(errors.NotFound):
            doing(carol, "w/secret")
    with pytest.raises(errors.NotFound):
        store.summaries.pin(carol, store.read(OP, "w/secret")[-1].id)


def test_the_context_is_paged_newest_first_and_says_whether_more_remains(store: Store) -> None:
    store.create_wave(OP, "w", PEOPLE)
    for i in range(12):
        store.post(OP, "w/main", f"root {i}", as_="alice")
    store.fork(OP, "w/main", "kid", ["bob"])
    for i in range(12):
        store.post(OP, "w/kid", f"kid {i}", as_="bob")
    whole = store.context(OP, "w/kid", limit=5000)
    assert not whole.more and len(whole.blips) == 26  # 12 + the wave's and the fork's system blips
    page = store.context(OP, "w/kid", limit=10)
    assert page.more and page.blips == whole.blips[-10:] and page.cursor == page.blips[0].id
    assert page.bytes == whole.bytes  # the sizes are the whole context's, whatever the page
    pages = [page]
    while pages[-1].more:
        pages.append(store.context(OP, "w/kid", limit=10, before=pages[-1].cursor))
    assert [b for p in reversed(pages) for b in p.blips] == whole.blips
    # a summary is one entry of a page (it stands in for main up to kid2's fork point)
    summarize_extractive(store, "w/main")
    store.fork(OP, "w/main", "kid2", ["bob"])
    store.post(OP, "w/kid2", "kid2's own", as_="bob")
    ctx = store.context(OP, "w/kid2", limit=3)
    assert not ctx.more and len(ctx.summaries) == 1 and len(ctx.blips) == 2
    assert ctx.cursor == ctx.summaries[0].upto
    newest = store.context(OP, "w/kid2", limit=2)
    assert newest.more and newest.summaries == [] and newest.blips == ctx.blips
    assert store.context(OP, "w/kid2", limit=2, before=newest.cursor).summaries == ctx.summaries
