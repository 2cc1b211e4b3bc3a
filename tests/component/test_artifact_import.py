"""``fleet import`` only adds (docs/design.md §2, issue 24): a file cannot change a wave the store
already holds, carries no tokens unless asked, ends with a trailer that tells a cut-short file from a
whole one, and has bounded lines (read incrementally, refused before a long one is buffered).

Against real daemons on real stores, through the CLI a user runs: a crafted ``token.minted`` line and a
crafted ``blip.posted`` line into an existing wave (both sealed with a valid trailer, as an attacker
would), a truncated export, a bad trailer, an oversized line, tokens without ``--with-tokens``: each
refused with exit 2 naming the line, the store byte-for-byte what it was (``fleet export`` before and
after), the crafted token 401 after a restart. A legitimate round trip with and without tokens. And a
hypothesis property over mutated real exports (dropped, duplicated, reordered lines, ids swapped for
ones the target holds, truncation, flipped bytes, resealed or not): the import is refused with
nothing changed, or it only added waves that were not there.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_artifact import build_state, fleet, log_of, ok, paths_in, reads, refused, serve, tables_of
from test_cli import base_env

from fleet import errors
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.models import DEFAULT_MAX_BLIP_BYTES, NewSeat, NewSession, NewSummary
from fleet.records.budgets import BudgetReport, SetBudget
from fleet.store import OPERATOR_PRINCIPAL, Store, hash_token
from fleet.store.artifact import import_log, line_limit, replay_check
from fleet.store.events import TokenRevoked, parse

STOLEN = "fleet_stolen-secret-the-attacker-knows"


@pytest.fixture
def started() -> Iterator[list[Daemon]]:
    """Daemons a test starts; stopped at teardown."""
    got: list[Daemon] = []
    yield got
    for d in got:
        d.stop()


def seal(lines: list[str]) -> str:
    """``lines`` (a header and log rows) with the trailer ``fleet export`` ends with, computed here
    from the format as documented (what anyone crafting a file can do as well)."""
    body = "".join(x + "\n" for x in lines)
    digest = hashlib.sha256(body.encode()).hexdigest()
    trailer = {"end": "fleet-events", "events": len(lines) - 1, "sha256": digest}
    return body + json.dumps(trailer) + "\n"


def export_of(home: Path, *args: str) -> str:
    return ok(fleet("export", *args, home=home))


def source(home: Path, started: list[Daemon]) -> tuple[Daemon, Client, dict[str, str]]:
    d, op = serve(home, started)
    return d, op, build_state(op)


def restart(home: Path, started: list[Daemon], d: Daemon) -> tuple[Daemon, Client]:
    d.stop()
    started.remove(d)
    return serve(home, started)


def rows_of(text: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in text.splitlines()[1:-1]]


def test_a_crafted_token_line_for_an_existing_wave_is_refused_and_the_token_stays_unknown(
    tmp_path: Path, started: list[Daemon]
) -> None:
    home = tmp_path / "src"
    d, op, _ = source(home, started)
    before = export_of(home, "--with-tokens")
    w = op.get_wave("w")
    head = before.splitlines()[0]
    crafted = {
        "seq": 1,
        "type": "token.minted",
        "created_at": "2020-01-01T00:00:00Z",
        "payload": {
            "token_id": "01890000-0000-7000-8000-000000000001",
            "wave_id": w.id,
            "participant": "operator",
            "hash": hash_token(STOLEN),
            "created_at": "2020-01-01T00:00:00Z",
            "machine": "evil",
        },
    }
    bad = tmp_path / "token.jsonl"
    bad.write_text(seal([head, json.dumps(crafted)]))
    d.stop()
    started.remove(d)
    for flags in ((), ("--with-tokens",)):
        r = fleet("import", *flags, str(bad), home=home)
        refused(r, 2, "line 2", "token.minted", "nothing was imported")
        if flags:  # with tokens allowed, what stops it is the wave: not created in this file
            assert "wave" in r.stderr and "created" in r.stderr, r.stderr
    d, op = serve(home, started)
    assert export_of(home, "--with-tokens") == before
    with pytest.raises(errors.Unauthorized):
        Client(d.url, STOLEN).whoami()


def test_a_crafted_blip_into_an_existing_private_wavelet_is_refused(
    tmp_path: Path, started: list[Daemon]
) -> None:
    home = tmp_path / "src"
    d, op, _ = source(home, started)
    before = export_of(home, "--with-tokens")
    side = op.resolve("w/side")
    planted = {
        "seq": 99,
        "type": "blip.posted",
        "created_at": "2020-01-01T00:00:00Z",
        "payload": {
            "blip": {
                "id": "01890000-0000-7000-8000-000000000002",
                "wavelet_id": side.id,
                "wave_id": side.wave_id,
                "author": "alice",
                "kind": "message",
                "text": "I agree to everything",
                "created_at": "2020-01-01T00:00:00Z",
            }
        },
    }
    bad = tmp_path / "blip.jsonl"
    bad.write_text(seal([before.splitlines()[0], json.dumps(planted)]))
    d.stop()
    started.remove(d)
    refused(fleet("import", str(bad), home=home), 2, "line 2", "blip.posted", "nothing was imported")
    # A real wave created in the same file does not carry it in either.
    other = tmp_path / "other"
    od, oop = serve(other, started)
    oop.create_wave("fresh", ["alice"])
    rows = export_of(other).splitlines()
    od.stop()
    started.remove(od)
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(seal([rows[0], rows[1], json.dumps(planted)]))
    refused(fleet("import", str(mixed), home=home), 2, "line 3", "blip.posted")
    d, op = serve(home, started)
    assert export_of(home, "--with-tokens") == before
    assert all(b.text != "I agree to everything" for b in op.read(side.id).blips)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"topic": "two\nlines"}, "newline"),
        ({"topic": "x" * 201}, "over the limit"),
        ({"by": "zed"}, "'zed' is not on the roster"),
    ],
)
def test_a_crafted_topic_event_is_refused_as_a_live_write_would_be(
    tmp_path: Path, started: list[Daemon], change: dict[str, str], named: str
) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    d, op = serve(src, started)
    w = op.create_wave("t", ["alice"])
    op.set_topic(w.root_id, "a fine topic", as_="alice")
    lines = export_of(src).splitlines()
    d.stop()
    started.remove(d)
    rows = [json.loads(x) for x in lines[1:-1]]
    (topic,) = [r for r in rows if r["type"] == "wavelet.topic"]
    topic["payload"].update(change)
    bad = tmp_path / "topic.jsonl"
    bad.write_text(seal([lines[0], *(json.dumps(r) for r in rows)]))
    refused(fleet("import", str(bad), home=dst), 2, "wavelet.topic", named, "nothing was imported")
    # The file as exported imports, topic and all.
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(lines) + "\n")
    ok(fleet("import", str(good), home=dst))
    _, op2 = serve(dst, started)
    assert op2.resolve("t/main").topic == "a fine topic"


def test_truncated_and_resealed_wrong_files_are_refused_and_allow_partial_takes_the_whole_prefix(
    tmp_path: Path, started: list[Daemon]
) -> None:
    home = tmp_path / "src"
    d, _op, _ = source(home, started)
    text = export_of(home)
    lines = text.splitlines()
    assert json.loads(lines[-1])["end"] == "fleet-events"
    assert json.loads(lines[-1])["events"] == len(lines) - 2
    d.stop()
    started.remove(d)
    target = tmp_path / "target"

    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(x + "\n" for x in lines[:12]))  # head -n 12
    refused(fleet("import", str(cut), home=target), 2, "line 12", "trailer", "--allow-partial")
    assert not paths_in(target).db.exists()
    # Through stdin, as `head -n 12 export.jsonl | fleet import -` does.
    env = base_env(FLEET_HOME=str(target))
    env.pop("FLEET_DAEMON", None)
    r = subprocess.run(
        [sys.executable, "-m", "fleet", "import", "-"],
        env=env,
        input=cut.read_text(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    refused(r, 2, "stdin line 12", "trailer")
    assert not paths_in(target).db.exists()

    # Cut in the middle of a line: --allow-partial imports the whole lines before it, and says so.
    half = tmp_path / "half.jsonl"
    body = "".join(x + "\n" for x in lines[:12])
    half.write_text(body + lines[12][: len(lines[12]) // 2])
    out = ok(fleet("import", "--allow-partial", str(half), home=target))
    assert "imported 11 events" in out and "skipped" in out and "line 13" in out, out
    assert [r[0] for r in log_of(paths_in(target).db)] == [x["type"] for x in rows_of(text)[:11]]
    assert replay_check(paths_in(target).db).total == 0
    # A refused import into a store that exists leaves it as it was.
    tables, log = tables_of(paths_in(target).db), log_of(paths_in(target).db)
    refused(fleet("import", str(cut), home=target), 2, "line 2", "already holds wave 'w'")
    assert tables_of(paths_in(target).db) == tables and log_of(paths_in(target).db) == log

    # A trailer that does not match (a byte changed, or a count), even under --allow-partial.
    fresh = tmp_path / "fresh"
    flipped = text.replace("hi alice", "hi alicf")
    for name, bad_text in (("flipped", flipped), ("count", text.replace('"events": ', '"events": 1'))):
        f = tmp_path / f"{name}.jsonl"
        f.write_text(bad_text)
        for flags in ((), ("--allow-partial",)):
            refused(fleet("import", *flags, str(f), home=fresh), 2, "trailer", "does not match")
            assert not paths_in(fresh).db.exists()
    # Lines after the trailer: refused; --allow-partial imports the sealed part and names the rest.
    extra = tmp_path / "extra.jsonl"
    extra.write_text(text + lines[1] + "\n")
    refused(fleet("import", str(extra), home=fresh), 2, f"line {len(lines) + 1}", "after the trailer")
    out = ok(fleet("import", "--allow-partial", str(extra), home=fresh))
    assert f"imported {len(lines) - 2} events" in out and "skipped" in out, out


MEASURED = (
    "import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]);"
    " print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(rc)"
)
"""Run argv[1:] and print its peak RSS (KiB) on stderr's last line; exit with its status."""


def test_a_line_over_the_bound_is_refused_before_it_is_buffered(tmp_path: Path) -> None:
    limit = line_limit(DEFAULT_MAX_BLIP_BYTES)
    assert limit >= 6 * DEFAULT_MAX_BLIP_BYTES  # a blip of control characters, JSON-escaped, fits
    header = json.dumps({"format": "fleet-events", "version": 1, "store_id": "x", "wave": None})
    target = tmp_path / "target"
    env = base_env(FLEET_HOME=str(target))
    env.pop("FLEET_DAEMON", None)
    # The import runs under a small Python that reports its child's peak RSS on stderr's last line:
    # a child forked from this test process would count the test process's own pages (hundreds of
    # MiB late in a full run) in its ru_maxrss until it execs.
    proc = subprocess.Popen(
        [sys.executable, "-c", MEASURED, sys.executable, "-m", "fleet", "import", "-"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    chunk = b"x" * (1 << 20)
    try:
        proc.stdin.write(header.encode() + b'\n{"type":"blip.posted","payload":{"text":"')
        for _ in range(200):  # 200 MB on one line: the old import took ~1 GB before refusing it
            proc.stdin.write(chunk)
    except BrokenPipeError:
        pass  # it stopped reading at the bound: what is wanted
    finally:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.wait(timeout=120)
    *said, peak = err.rstrip(b"\n").split(b"\n")
    err = b"\n".join(said)
    peak_kib = int(peak)
    assert peak_kib < 250 * 1024, f"the import peaked at {peak_kib // 1024} MiB"
    assert proc.returncode == 2, (out, err)
    assert b"stdin line 2" in err and b"longer than" in err and b"Traceback" not in err, err
    assert not paths_in(target).db.exists()


def test_tokens_travel_only_when_asked_on_both_ends(
    tmp_path: Path, started: list[Daemon], capfd: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "src"
    d, op, tokens = source(home, started)
    plain = export_of(home)
    assert all(not x["type"].startswith("token.") for x in rows_of(plain))
    assert "hash" not in plain
    r = fleet("export", "--with-tokens", home=home)
    with_tokens = ok(r)
    assert "token" in r.stderr and "keep" in r.stderr, r.stderr  # the warning
    assert {x["type"] for x in rows_of(with_tokens)} >= {"token.minted", "token.revoked"}
    before_reads = reads(op)
    d.stop()
    started.remove(d)

    f = tmp_path / "tokens.jsonl"
    f.write_text(with_tokens)
    target = tmp_path / "target"
    refused(fleet("import", str(f), home=target), 2, "token.minted", "--with-tokens", "nothing was imported")
    assert not paths_in(target).db.exists()
    out = ok(fleet("import", "--with-tokens", str(f), home=target))
    assert "tokens" in out, out
    t, top = serve(target, started)
    assert reads(top) == before_reads
    assert Client(t.url, tokens["alice"]).whoami().principal == "alice"
    ok(fleet("replay", "--check", home=target))

    # Without tokens: the same waves and blips, no token rows, and the source's tokens are unknown.
    g = tmp_path / "plain.jsonl"
    g.write_text(plain)
    bare = tmp_path / "bare"
    ok(fleet("import", str(g), home=bare))
    b, bop = serve(bare, started)
    got = reads(bop)
    assert got["tokens"] == []
    assert {k: v for k, v in got.items() if k != "tokens"} == {
        k: v for k, v in before_reads.items() if k != "tokens"
    }
    with pytest.raises(errors.Unauthorized):
        Client(b.url, tokens["alice"]).whoami()
    ok(fleet("replay", "--check", home=bare))


# ---------------------------------------------------------------- the property


def rich_state(op: Client) -> None:
    """:func:`build_state` plus an event of every other type: a summary, a pin, a session, a seat
    claimed and closed, a budget set and reached, a machine token."""
    build_state(op)
    main = op.resolve("w/main")
    blips = op.read(main.id).blips
    op.pin(blips[-1].id, as_="bob")
    op.summarize(
        main.id,
        NewSummary(text="they said hello", upto=blips[-1].id, cites=[b.id for b in blips], as_="alice"),
    )
    sid = "6f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    op.record_session("w", NewSession(participant="alice", session_id=sid, wavelet_id=main.id))
    op.claim_seat("w", NewSeat(participant="resident", session_id=sid, host="h", pid=4242))
    op.close_seat("w", "stopped")
    budget = op.set_budget("w", SetBudget(participant="alice", tokens=100))
    assert budget is not None
    op.budget_reached(
        "w",
        BudgetReport(participant="alice", wavelet_id="", scope="alice", set_at=budget.set_at, spent="150"),
    )
    op.mint_machine_token("laptop", ["w", "v"])


UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def reseal(text: str) -> str:
    """Recompute the trailer of ``text`` (whatever its lines are now), as a forger would."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if lines and '"end"' in lines[-1]:
        lines.pop()
    return seal(lines) if lines else text


def new_events_belong_to_new_waves(db: Path, before: int, old_waves: set[str]) -> None:
    """Every event after the first ``before`` of ``db``'s log is of a wave not in ``old_waves``."""
    log = log_of(db)[before:]
    tokens: dict[str, str] = {}
    for etype, payload, _ in log:
        e = parse(etype, payload)
        if isinstance(e, TokenRevoked):
            wave = tokens[e.token_id]
        else:
            wave = getattr(e, "wave_id", None) or e.blip.wave_id  # type: ignore[union-attr]
        if etype == "token.minted":
            tokens[json.loads(payload)["token_id"]] = wave
            assert not set(json.loads(payload).get("scope") or []) & old_waves
        assert wave not in old_waves, (etype, payload)


def test_mutated_exports_are_refused_untouched_or_only_add(tmp_path: Path, started: list[Daemon]) -> None:
    home = tmp_path / "src"
    d, op = serve(home, started)
    rich_state(op)
    original = export_of(home, "--with-tokens")
    assert {x["type"] for x in rows_of(original)} >= {
        "wave.created", "wavelet.forked", "roster.invited", "roster.left", "blip.posted",
        "blip.surfaced", "blip.replaced", "token.minted", "token.revoked", "session.recorded",
        "seat.claimed", "seat.closed", "summary.recorded", "blip.pinned", "budget.set", "budget.reached",
        "wavelet.topic",
    }  # fmt: skip
    d.stop()
    started.remove(d)

    # The target: a store of its own, holding a wave with ids a mutation can swap in.
    pristine = tmp_path / "pristine" / "fleet.sqlite3"
    pristine.parent.mkdir()
    store = Store(pristine)
    t = store.create_wave(OPERATOR_PRINCIPAL, "mine", ["alice"])
    mine = store.post(OPERATOR_PRINCIPAL, t.root_id, "mine", as_="alice")
    store.close()
    held = [t.id, t.root_id, mine.id]
    tables0, log0 = tables_of(pristine), log_of(pristine)
    ids = sorted(set(UUID.findall(original)))
    lines = original.splitlines(keepends=True)
    n = len(lines)

    mutation = st.one_of(
        st.tuples(st.just("drop"), st.integers(0, n - 1)),
        st.tuples(st.just("dup"), st.integers(0, n - 1), st.integers(0, n)),
        st.tuples(st.just("swap"), st.integers(0, n - 1), st.integers(0, n - 1)),
        st.tuples(st.just("id"), st.sampled_from(ids), st.sampled_from(held), st.booleans()),
        st.tuples(st.just("cut"), st.integers(0, len(original) - 1)),
        st.tuples(st.just("flip"), st.integers(0, len(original) - 1), st.integers(1, 255)),
    )

    def mutate(data: bytes, m: tuple[Any, ...]) -> bytes:
        ls = data.splitlines(keepends=True)
        if m[0] == "drop" and m[1] < len(ls):
            del ls[m[1]]
        elif m[0] == "dup" and m[1] < len(ls):
            ls.insert(m[2], ls[m[1]])
        elif m[0] == "swap" and max(m[1], m[2]) < len(ls):
            ls[m[1]], ls[m[2]] = ls[m[2]], ls[m[1]]
        elif m[0] == "id":
            old, new = m[1].encode(), m[2].encode()
            return data.replace(old, new) if m[3] else data.replace(old, new, 1)
        elif m[0] == "cut":
            return data[: m[1]]
        elif m[0] == "flip" and m[1] < len(data):
            raw = bytearray(data)
            raw[m[1]] ^= m[2]
            return bytes(raw)
        return b"".join(ls)

    runs = tmp_path / "runs"
    runs.mkdir()

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(mutation, min_size=1, max_size=3), st.booleans(), st.booleans())
    def check(mutations: list[tuple[Any, ...]], forge: bool, partial: bool) -> None:
        data = original.encode()
        for m in mutations:
            data = mutate(data, m)
        if forge:
            data = reseal(data.decode("utf-8", "replace")).encode()
        where = Path(tempfile.mkdtemp(dir=runs))
        db = where / "fleet.sqlite3"
        shutil.copyfile(pristine, db)
        try:
            report = import_log(
                db, where / "daemon.lock", io.BytesIO(data), "f", with_tokens=True, allow_partial=partial
            )
        except errors.FleetError as exc:
            assert exc.exit_code == 2, exc.message
            event("refused: " + re.sub(r"line \d+|[0-9a-f-]{36}|'[^']*'|\d+", "_", exc.message)[:60])
            assert "line" in exc.message or "trailer" in exc.message, exc.message
            assert tables_of(db) == tables0 and log_of(db) == log0
            return
        if not forge and not partial:
            assert data == original.encode()  # a whole, sealed file is accepted only as it was written
        assert report.events > 0
        event(f"accepted (forged={forge}, partial={partial})")
        assert log_of(db)[: len(log0)] == log0
        new_events_belong_to_new_waves(db, len(log0), {t.id})
        assert replay_check(db).total == 0
        assert {r[1]: r for r in tables_of(db)["waves"]}["mine"] == tables0["waves"][0]
        shutil.rmtree(where)

    check()
    # ... and the untouched file is accepted.
    db = tmp_path / "whole" / "fleet.sqlite3"
    db.parent.mkdir()
    shutil.copyfile(pristine, db)
    report = import_log(db, db.parent / "daemon.lock", io.BytesIO(original.encode()), "f", with_tokens=True)
    assert report.events == n - 2 and report.waves == ["w", "v"]


def test_the_largest_legitimate_lines_round_trip(tmp_path: Path, started: list[Daemon]) -> None:
    """The bound admits what a store writes: blips at the limit of control characters (6 bytes each
    once JSON-escaped) and of 2-byte characters (6 bytes for 2), written in-process (no request body
    holds them, escaped as the client sends them), and one of ASCII posted through the daemon."""
    home = tmp_path / "src"
    paths_in(home).data.mkdir(parents=True)
    store = Store(paths_in(home).db)
    w = store.create_wave(OPERATOR_PRINCIPAL, "w", ["alice"])
    store.post(OPERATOR_PRINCIPAL, w.root_id, "\x01" * DEFAULT_MAX_BLIP_BYTES, as_="alice")
    store.post(OPERATOR_PRINCIPAL, w.root_id, "é" * (DEFAULT_MAX_BLIP_BYTES // 2), as_="alice")
    store.close()
    d, op = serve(home, started)
    op.post(w.root_id, "a" * DEFAULT_MAX_BLIP_BYTES, as_="alice")
    text = export_of(home)
    longest = max(len(x.encode()) for x in text.splitlines())
    assert 6 * DEFAULT_MAX_BLIP_BYTES < longest <= line_limit(DEFAULT_MAX_BLIP_BYTES)
    d.stop()
    started.remove(d)
    f = tmp_path / "big.jsonl"
    f.write_text(text)
    target = tmp_path / "target"
    ok(fleet("import", str(f), home=target))
    _, top = serve(target, started)
    assert [len(b.text) for b in top.read(w.root_id).blips][1:] == [
        DEFAULT_MAX_BLIP_BYTES,
        DEFAULT_MAX_BLIP_BYTES // 2,
        DEFAULT_MAX_BLIP_BYTES,
    ]
    # A store served with a smaller blip limit: the same file is refused by `--max-blip-bytes`.
    small = tmp_path / "small"
    r = fleet("import", "--max-blip-bytes", "1000", str(f), home=small)
    refused(r, 2, "line 3", "longer than")
    assert not paths_in(small).db.exists()


def test_a_store_that_imported_an_older_wave_exports_and_imports_again(
    tmp_path: Path, started: list[Daemon]
) -> None:
    """Ids grow per wave, not across a store that imported: B holds its own newer wave before the
    older ones it imported from A, and B's export still imports (and adds to) C."""
    a = tmp_path / "a"
    d, _op, tokens = source(a, started)
    older = export_of(a, "--with-tokens")
    d.stop()
    started.remove(d)
    b = tmp_path / "b"
    bd, bop = serve(b, started)
    bop.create_wave("mine", ["zed"])
    bd.stop()
    started.remove(bd)
    f = tmp_path / "older.jsonl"
    f.write_text(older)
    ok(fleet("import", "--with-tokens", str(f), home=b))
    bd, bop = serve(b, started)
    bop.post("w/main", "after the import", as_="alice")
    merged = export_of(b, "--with-tokens")
    before = reads(bop)
    bd.stop()
    started.remove(bd)
    g = tmp_path / "merged.jsonl"
    g.write_text(merged)
    c = tmp_path / "c"
    out = ok(fleet("import", "--with-tokens", str(g), home=c))
    assert "mine, w, v" in out, out
    cd, cop = serve(c, started)
    assert reads(cop) == before
    assert Client(cd.url, tokens["alice"]).whoami().principal == "alice"
    ok(fleet("replay", "--check", home=c))


def _export(store: Store) -> bytes:
    """``fleet export`` of ``store``, in process (the CLI writes the same pages the same way)."""
    from fleet.store.artifact import ExportWriter, export_page

    out = io.BytesIO()
    writer = ExportWriter(out.write)
    writer.start(store.store_id, None, None)
    after = 0
    while True:
        page = export_page(store, OPERATOR_PRINCIPAL, None, after=after)
        for row in page.events:
            writer.row(row)
        if not page.more:
            break
        after = page.cursor
    writer.end()
    return out.getvalue()


_NAMES = ["operator", "alice", "bob", "zed"]
_op = st.one_of(
    st.tuples(st.just("post"), st.sampled_from(["main", "side"]), st.sampled_from(_NAMES)),
    st.tuples(st.just("surface"), st.just("side"), st.sampled_from(_NAMES)),
    st.tuples(st.just("invite"), st.sampled_from(["main", "side"]), st.sampled_from(_NAMES[1:])),
    st.tuples(st.just("leave"), st.sampled_from(["main", "side"]), st.sampled_from(_NAMES[1:])),
    st.tuples(st.just("topic"), st.sampled_from(["main", "side"]), st.sampled_from(_NAMES)),
    st.tuples(st.just("pin"), st.sampled_from(["main", "side"]), st.sampled_from(_NAMES)),
)


def test_whatever_the_operator_writes_as_anyone_exports_and_imports(tmp_path: Path) -> None:
    """Any sequence of the operator's writes, as itself or ``--as`` a member or a stranger, each
    accepted or refused live: the export of what was accepted imports into a fresh store, whole (an
    export fleet wrote and cannot take back is a backup that does not restore). It failed on posts
    ``--as`` a non-member: accepted live, refused on import."""
    runs = tmp_path / "runs"
    runs.mkdir()

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(_op, min_size=1, max_size=12))
    def check(ops: list[tuple[str, str, str]]) -> None:
        where = Path(tempfile.mkdtemp(dir=runs))
        store = Store(where / "live.sqlite3")
        try:
            op = OPERATOR_PRINCIPAL
            store.create_wave(op, "w", ["alice"])
            store.fork(op, "w/main", "side", ["bob"])
            accepted = 0
            for kind, wl, name in ops:
                as_ = None if name == "operator" else name
                ref = f"w/{wl}"
                try:
                    if kind == "post":
                        store.post(op, ref, f"{name} says", as_=as_)
                    elif kind == "surface":
                        store.surface(op, ref, f"{name} concludes", as_=as_)
                    elif kind == "invite":
                        store.invite(op, ref, name)
                    elif kind == "leave":
                        store.leave(op, ref, name)
                    elif kind == "topic":
                        store.set_topic(op, ref, f"topic by {name}", as_=as_)
                    else:
                        newest = store.read(op, ref)[-1].id
                        store.summaries.pin(op, newest, as_=as_)
                    accepted += 1
                except errors.FleetError as exc:
                    assert exc.exit_code in (4, 5), exc.message
            event(f"accepted {min(accepted, 3)}+")
            data = _export(store)
        finally:
            store.close()
        db = where / "fresh.sqlite3"
        report = import_log(db, where / "daemon.lock", io.BytesIO(data), "f")
        assert report.waves == ["w"]
        assert replay_check(db).total == 0
        shutil.rmtree(where)

    check()
