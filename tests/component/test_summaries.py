"""Rolling summaries on a real SQLite store and a real daemon: assembly, the load-bearing check,
fallback-open summarizers, replay, visibility, and the paged context route."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fleet import errors
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.delivery.attention import RoutingLog, SummaryEntry, parse_entry
from fleet.models import Blip, Context, NewSummary, Summary
from fleet.store import OPERATOR_PRINCIPAL, Principal, Store, connect, dump_tables, replay
from fleet.summaries import Summarizer, extractive, roll

OP = OPERATOR_PRINCIPAL
PEOPLE = ["alice", "bob", "carol"]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "fleet.sqlite3")
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


# ---------------------------------------------------------------- assembly against the full walk

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
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int]]
) -> None:
    d = tmp_path_factory.mktemp("ctx")
    s = Store(d / "db")
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


# ---------------------------------------------------------------- forks and what a summary saves

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


@settings(max_examples=60, deadline=None)
@given(ops=WRITES)
def test_a_summary_is_used_only_where_it_saves_and_a_fork_keeps_its_parents_coverage(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int]]
) -> None:
    """Random wavelets of random sizes, forks right before and after summaries, participants'
    summaries of any length: no summary that saves nothing is recorded, and every part of every
    context (each visible ancestor up to its child's fork point, then the wavelet) uses exactly the
    summary the rule above names, or none and then the part's full walk."""
    d = tmp_path_factory.mktemp("saves")
    s = Store(d / "db")
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


# ---------------------------------------------------------------- writers over the real daemon


@pytest.fixture
def op(operator: Client) -> Client:
    operator.create_wave("w", with_=PEOPLE)
    return operator


def routing(tmp_path: Path) -> RoutingLog:
    return RoutingLog(tmp_path / "summaries.routing.jsonl", "summarizer", "w")


def logged(log: RoutingLog) -> list[SummaryEntry]:
    got = [parse_entry(line) for line in log.path.read_bytes().splitlines()]
    return [e for e in got if isinstance(e, SummaryEntry)]


SCRIPT = "import json, sys; req = json.load(sys.stdin); {}"


@pytest.mark.parametrize(
    ("code", "outcome", "detail"),
    [
        ("import time; time.sleep(30)", "timeout", "killed"),
        ("sys.exit(3)", "exit", "exit status 3"),
        ("raise SystemExit('crashed')", "exit", "crashed"),
        ("print('not json')", "invalid", "not a summary"),
        ("print(json.dumps({'cites': []}))", "invalid", "text"),
    ],
)
def test_a_failing_summarizer_leaves_the_full_context(
    op: Client, tmp_path: Path, code: str, outcome: str, detail: str
) -> None:
    main = op.resolve("w/main").id
    op.post(main, "DONE: the thing", as_="alice")
    before = op.context(main)
    command = f"{sys.executable} -c {json.dumps(SCRIPT.format(code))}"
    log = routing(tmp_path)
    entry = roll(op, "w", main, "w/main", log, Summarizer(command, timeout=1.0))
    assert entry is not None and entry.outcome == outcome and detail in entry.detail, entry
    assert op.summaries(main) == [] and op.context(main) == before and before.saved_bytes == 0
    assert [e.outcome for e in logged(log)] == [outcome]


def test_a_summarizer_that_drops_a_surface_is_rejected_and_logged_with_the_missing_id(
    op: Client, tmp_path: Path
) -> None:
    main = op.resolve("w/main").id
    side = op.fork(main, "side", with_=["bob"], as_="bob")
    surfaced = op.surface(side.id, "side: done deal", as_="bob")
    op.post(main, "chatter", as_="alice")
    drops = "print(json.dumps({'text': 'nothing happened', 'cites': []}))"
    command = f"{sys.executable} -c {json.dumps(SCRIPT.format(drops))}"
    log = routing(tmp_path)
    entry = roll(op, "w", main, "w/main", log, Summarizer(command))
    assert entry is not None and entry.outcome == "rejected" and entry.missing == [surfaced.id]
    assert logged(log)[0].missing == [surfaced.id] and op.summaries(main) == []
    # a summarizer that cites what it was told to cite is recorded, with its name as the author
    keeps = "print(json.dumps({'text': 'side settled', 'cites': req['must_cite']}))"
    command = f"{sys.executable} -c {json.dumps(SCRIPT.format(keeps))}"
    entry = roll(op, "w", main, "w/main", log, Summarizer(command))
    assert entry is not None and entry.outcome == "accepted"
    (summary,) = op.summaries(main)
    assert summary.author_kind == "summarizer" and summary.cites == [surfaced.id]
    ctx: Context = op.context(main)
    assert [x.id for x in ctx.summaries] == [summary.id] and ctx.blips == [] and ctx.saved_bytes > 0
    assert ctx.summaries[0].cites == summary.cites and ctx.summaries[0].load_bearing == []


# ---------------------------------------------------------------- the MCP tools, through the official SDK


def test_wavelet_summarize_pin_and_read_through_the_mcp_sdk(
    daemon: Daemon, op: Client, tmp_path: Path
) -> None:
    import os

    import anyio
    import worlds
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from fleet.paths import get_paths

    world = worlds.World(daemon, op, get_paths(), tmp_path, "w", op.resolve("w/main").id)
    main = world.main
    side = op.fork(main, "side", with_=["bob"], as_="bob")
    surfaced = op.surface(side.id, "side: settled", as_="bob")
    quiet = op.post(main, "a quiet fact", as_="bob")
    params = StdioServerParameters(
        command=sys.executable, args=world.channel_argv("alice", "--no-deliver")[1:],
        env={"FLEET_HOME": os.environ["FLEET_HOME"]},
    )  # fmt: skip

    async def scenario() -> None:
        with anyio.fail_after(60):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
                await s.initialize()

                async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
                    res = (await s.call_tool(name, args)).model_dump(by_alias=True, exclude_none=True)
                    return dict(res)

                pinned = await call("wavelet_pin", {"blip_id": quiet.id})
                assert pinned["isError"] is False and pinned["structuredContent"]["blip"]["id"] == quiet.id
                todo = (await call("wavelet_summarize", {"wavelet": "main"}))["structuredContent"]
                assert sorted(todo["must_cite"]) == sorted([surfaced.id, quiet.id])
                drops = {"wavelet": "main", "text": "all quiet", "cites": [quiet.id]}
                bad = await call("wavelet_summarize", drops)
                assert bad["isError"] is True and surfaced.id in bad["content"][0]["text"]
                good = await call(
                    "wavelet_summarize",
                    {"wavelet": "main", "text": "side settled; a quiet fact", "cites": todo["must_cite"]},
                )
                assert good["isError"] is False and good["structuredContent"]["accepted"] is True
                await anyio.to_thread.run_sync(lambda: op.post(main, "after the summary", as_="bob"))
                got = (await call("wavelet_read", {"wavelet": "main"}))["structuredContent"]
                assert [b["text"] for b in got["blips"]] == ["after the summary"]
                assert [x["text"] for x in got["summaries"]] == ["side settled; a quiet fact"]
                assert got["saved_bytes"] > 0 and got["more"] is False
                paged = (await call("wavelet_read", {"wavelet": "main", "limit": 1}))["structuredContent"]
                assert paged["more"] is True and paged["summaries"] == []
                older = await call("wavelet_read", {"wavelet": "main", "limit": 1, "before": paged["before"]})
                assert [x["upto"] for x in older["structuredContent"]["summaries"]] == [quiet.id]

    anyio.run(scenario)
    outcomes = [(e.outcome, e.missing) for e in world.log("alice") if isinstance(e, SummaryEntry)]
    assert outcomes == [("rejected", [surfaced.id]), ("accepted", [])]


# ---------------------------------------------------------------- the route and the CLI


def test_the_context_route_caps_a_page_at_500_by_default_and_refuses_a_bad_limit(op: Client) -> None:
    main = op.resolve("w/main").id
    for i in range(520):
        op.post(main, f"m{i}", as_="alice")
    page = op.context(main)
    assert len(page.blips) == 500 and page.more and page.blips[-1].text == "m519"
    rest = op.context(main, before=page.cursor)
    assert not rest.more and len(rest.blips) == 21  # m0..m19 and the wave's system blip
    assert op.full_context(main).blips == rest.blips + page.blips
    for bad in ("0", "x"):
        with pytest.raises(errors.UsageError, match="limit"):
            op._call("GET", f"/v1/wavelets/{main}/context?limit={bad}", Context)


def test_fleet_summary_and_read_context_from_the_command_line(op: Client, daemon: Daemon) -> None:
    from test_cli import base_env, fails, fleet, ok

    env = base_env(FLEET_DAEMON=daemon.url, FLEET_TOKEN=daemon.operator_token)
    main = op.resolve("w/main").id
    done = op.post(main, "DONE: parser merged", as_="alice")
    # a summary of so little would be longer than the text: refused, and the full text stays
    tiny = fleet("summary", "write", "w/main", env=env)
    assert tiny.returncode == 1 and "rejected (extractive)" in tiny.stdout and "saves nothing" in tiny.stderr
    assert op.summaries(main) == []
    quiet = op.post(main, "a quiet fact\n" + "with the long story of how it was found. " * 6, as_="bob")
    assert "no summary yet" in ok("summary", "show", "w/main", env=env)
    assert "accepted (extractive)" in ok("summary", "write", "w/main", env=env)
    (shown,) = json.loads(ok("summary", "show", "w/main", "--json", env=env))
    assert shown["author"] == "fleet" and shown["cites"] == [done.id] and shown["upto"] == quiet.id
    ctx = json.loads(ok("read", "w/main", "--context", "--json", env=env))
    assert ctx["blips"] == [] and ctx["saved_bytes"] == ctx["full_bytes"] - ctx["bytes"] > 0
    human = fleet("read", "w/main", "--context", env=env)
    assert human.returncode == 0 and "[summary of w/main" in human.stdout and "saved" in human.stderr
    assert "nothing new to summarize" in ok("summary", "write", "w/main", env=env)
    ok("pin", quiet.id, env=env)
    gap = fleet("summary", "check", "w/main", env=env)
    assert gap.returncode == 1 and f"not cited: {quiet.id}" in gap.stdout
    op.post(main, "one more\n" + "and its long tail. " * 8, as_="alice")
    rolled = ok("summary", "run", "w", "--once", "--every", "1", env=env)
    assert rolled.startswith("w/main: summarized 4 blip(s) up to ") and "bytes saved (extractive)" in rolled
    assert "cites 2 of 2" in ok("summary", "check", "w/main", env=env)
    # bad input: a clear message, the documented exit code, nothing changed
    before = op.summaries(main)
    assert "--context" in fails(2, "read", "w/main", "--context", "--follow", env=env)
    assert "empty" in fails(2, "summary", "write", "w/main", "--command", "", env=env)
    assert "at least 1" in fails(2, "summary", "run", "w", "--every", "0", env=env)
    op.post(main, "and more", as_="alice")
    broken = fleet("summary", "write", "w/main", "--command", "/nonexistent/summarizer", env=env)
    assert broken.returncode == 1 and "error" in broken.stdout and "Traceback" not in broken.stderr
    assert op.summaries(main) == before


def test_fleet_summary_run_rolls_after_n_blips_or_m_bytes(op: Client, daemon: Daemon) -> None:
    import os
    import signal
    import stat
    import subprocess
    import threading

    from conftest import retry_until
    from test_cli import REPO, base_env, ok

    from fleet.delivery.attention import routing_log_path
    from fleet.delivery.state import StateFile
    from fleet.paths import get_paths

    env = base_env(FLEET_DAEMON=daemon.url, FLEET_TOKEN=daemon.operator_token)
    main = op.resolve("w/main").id
    op.post(main, "x" * 100, as_="alice")
    # below both thresholds: nothing; over the byte threshold: rolled, and the line says what it saved
    assert ok("summary", "run", "w", "--once", "--every", "1000", "--bytes", "10000", env=env) == ""
    once = ok("summary", "run", "w", "--once", "--every", "1000", "--bytes", "50", env=env)
    (first,) = op.summaries(main)
    saved = first.covered_bytes - nbytes(first.text)
    assert once == f"w/main: summarized 2 blip(s) up to {first.upto[:13]}, {saved} bytes saved (extractive)\n"
    # running: it says what it does and how to stop it, then prints each summary it writes
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleet", "summary", "run", "w", "--every", "3"],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        assert proc.stderr is not None
        started = proc.stderr.readline()
        assert "rolling the summaries of wave w" in started and "3 new blips" in started
        assert "Ctrl-C" in started, started
        op.post(main, "one", as_="alice")
        op.post(main, "two", as_="bob")
        assert len(op.summaries(main)) == 1
        last = op.post(main, "three", as_="alice")
        retry_until(lambda: said, timeout=20, what="the runner's line for its second summary")
        assert op.summaries(main)[-1].upto == last.id
        second = op.summaries(main)[-1]
        assert said == [
            f"w/main: summarized 5 blip(s) up to {last.id[:13]},"
            f" {second.covered_bytes - nbytes(second.text)} bytes saved (extractive)\n"
        ]
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
        reader.join(10)
    assert proc.returncode == 0 and "stopped" in err and "Traceback" not in err
    log = routing_log_path(StateFile(get_paths().channels, daemon.url, "w", "summarizer"))
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    entries = [parse_entry(line) for line in log.read_bytes().splitlines()]
    assert [e.outcome for e in entries if isinstance(e, SummaryEntry)] == ["accepted", "accepted"]


def test_a_contexts_records_carry_every_field_as_their_constructors_would(store: Store) -> None:
    """The context's records are built field by field (``fleet.wire.built``, the hot read path):
    each has all of its class's fields, and equals the record its constructor makes from them."""
    from fleet.models import Member, Summary, Wavelet

    store.create_wave(OP, "w", PEOPLE)
    main = store.resolve(OP, "w/main").id
    store.post(OP, main, "DONE: one\n" + "the details, at length. " * 8, as_="alice")
    summarize_extractive(store, main)
    store.post(OP, main, "after", as_="bob")
    leaf = store.fork(OP, main, "f", ["alice"]).id
    ctx = store.context(OP, leaf)
    records: list[Any] = [*ctx.blips, *ctx.summaries, *ctx.path, *(m for w in ctx.path for m in w.roster)]
    assert {type(r) for r in records} == {Blip, Summary, Wavelet, Member}
    for r in records:
        names = [f.name for f in type(r).__record_fields__]
        assert sorted(vars(r)) == sorted(names), type(r)
        assert r == type(r)(**vars(r))


def test_the_runner_waits_for_more_blips_after_a_summary_that_saved_nothing(
    op: Client, tmp_path: Path
) -> None:
    """Short chatter naming participants is all load-bearing: its extractive summary is longer than
    it. The runner offers it once, then waits for ``every`` more blips instead of offering (and
    printing, and logging) the same refusal at every new blip."""
    from fleet.summaries import Runner

    main = op.resolve("w/main").id
    log = routing(tmp_path)
    runner = Runner(op, "w", log, None, every=3, bytes=1 << 20)
    op.post(main, "bob: ok", as_="carol")
    assert runner.once() == []  # 2 blips with the wave's system blip: not due
    op.post(main, "alice: ok", as_="carol")
    (refused,) = runner.once()
    assert refused.outcome == "rejected" and "saves nothing" in refused.detail
    for text in ("alice: fine", "bob: yes"):
        op.post(main, text, as_="carol")
        assert runner.once() == []
    op.post(main, "carol: and now a long account of what was decided\n" + "details " * 60, as_="bob")
    (rolled,) = runner.once()
    assert rolled.outcome == "accepted" and rolled.saved_bytes > 0
    assert [e.outcome for e in logged(log)] == ["rejected", "accepted"]
