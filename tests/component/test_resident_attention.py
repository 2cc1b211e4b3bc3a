"""The resident's attention: all of the wave's root wavelet, and of its workers' wavelets only what
concerns it (a ``DONE:`` report, a surface, a mention, the operator); a worker's chatter never
wakes it alone. A real daemon and a real ``fleet channel`` (the resident's), blips posted as the
workers would; the rules' accumulation as a property over any sequence of blips.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import retry_until
from hypothesis import given, settings
from hypothesis import strategies as st
from mcphelp import RawMcp
from worlds import World, world

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.delivery.rules import HOLD_MAX_LINES, Action, Delivery
from fleet.delivery.state import DeliveryState
from fleet.layouts import parse
from fleet.models import Blip
from fleet.paths import Paths


@pytest.fixture
def w(daemon: Daemon, operator: Client, fleet_env: Paths, tmp_path: Path) -> Iterator[World]:
    yield from world(daemon, operator, fleet_env, tmp_path, "w", ["resident"])


def _row(proc: RawMcp, wavelet_id: str) -> dict[str, Any]:
    rows = proc.call("wavelet_ping")["structuredContent"]["delivery"]["wavelets"]
    return next((r for r in rows if r["wavelet_id"] == wavelet_id), {})


def test_the_resident_profile_is_resident_attention_unless_the_layout_names_one() -> None:
    from fleet.resident.seat import resident_profile

    plain = parse('[defaults]\nagent = "claude"\n', "plain.toml", "plain")
    assert resident_profile(plain).attention == "resident"
    full = parse('[participants.resident]\nattention = "full"\n', "full.toml", "full")
    assert resident_profile(full).attention == "full"
    every = parse('[defaults]\nattention = "targeted"\n', "t.toml", "t")
    assert resident_profile(every).attention == "targeted"


def test_a_workers_chatter_waits_while_its_done_surface_and_mentions_reach_the_mind(w: World) -> None:
    op = w.op
    job = op.fork(w.main, "job", with_=["worker"], as_="resident").id
    mind = w.channel("resident", "--attention", "resident", "--cap", "0")
    op.post(job, "worker: build the widget", as_="resident")  # its own: never pushed back
    chatter = [op.post(job, f"compiling step {i} of 5", as_="worker").id for i in range(5)]
    retry_until(lambda: _row(mind, job).get("seen") == chatter[-1], what="the channel to read the chatter")
    assert _row(mind, job)["held"] >= 5
    assert [n for n in mind.channel_notes() if n["meta"]["wavelet"] == "w/job"] == [], "chatter woke it"

    main_talk = op.post(w.main, "the build box is slow today", as_="carol").id  # the root: in full
    mind.wait_notes(lambda ns: [n for n in ns if n["meta"].get("blip_id") == main_talk], what="root talk")
    asked = op.post(job, "resident: which config should I use?", as_="worker").id
    notes = mind.wait_notes(
        lambda ns: [n for n in ns if n["meta"]["wavelet"] == "w/job"] or None, what="the mention"
    )
    assert [n["meta"]["kind"] for n in notes] == ["message", "digest"]
    assert notes[0]["meta"]["blip_id"] == asked  # the mention, and the held chatter riding with it
    assert notes[1]["meta"]["blip_ids"].split(",")[-5:] == chatter

    more = [op.post(job, f"linking part {i}", as_="worker").id for i in range(3)]
    retry_until(lambda: _row(mind, job).get("seen") == more[-1], what="the channel to read more chatter")
    assert len([n for n in mind.channel_notes() if n["meta"]["wavelet"] == "w/job"]) == 2
    done = op.post(job, "DONE: the widget is built", as_="worker").id
    surfaced = op.surface(job, "widget built", as_="worker").id
    op_said = op.post(job, "worker: thanks, stop there").id  # the operator's: in full anywhere

    def arrived(ns: list[dict[str, Any]]) -> list[str] | None:
        ids = [n["meta"].get("blip_id", "") for n in ns]
        return ids if {done, surfaced, op_said} <= set(ids) else None

    mind.wait_notes(arrived, what="the DONE report, the surface and the operator's blip")
    full = [n["meta"]["blip_id"] for n in mind.channel_notes() if n["meta"]["kind"] != "digest"]
    assert set(full) == {main_talk, asked, done, surfaced, op_said}, "chatter pushed in full"
    digests = [n for n in mind.channel_notes() if n["meta"]["kind"] == "digest"]
    assert [i for n in digests for i in n["meta"]["blip_ids"].split(",") if i in more] == more
    rules = {r.blip_id: r.rule.value for r in w.routes("resident")}
    assert (rules[main_talk], rules[asked], rules[done], rules[surfaced]) == (
        "root",
        "mention",
        "done",
        "root",  # (a surface lands in the parent: here the root)
    )


# ---------------------------------------------------------------- the rules, as a property

ROOT, JOB = "wl-root", "wl-job"
texts = st.sampled_from(["progress", "resident: a question", "DONE: finished", "more progress"])
blip_specs = st.lists(
    st.tuples(
        st.sampled_from([ROOT, JOB]),
        st.sampled_from(["worker", "carol", "operator", "resident"]),
        st.sampled_from(["message", "message", "surface", "system"]),
        texts,
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(specs=blip_specs, chunks=st.integers(min_value=1, max_value=7))
def test_resident_attention_wakes_only_for_what_concerns_it_and_drops_nothing(
    specs: list[tuple[str, str, str, str]], chunks: int
) -> None:
    """Any blips, fed in any batching: every frame pushed in the job wavelet carries a full blip
    (chatter never wakes the mind alone, below :data:`HOLD_MAX_LINES`); every root blip of others
    that is not provenance is full; every blip of others is in at most one pushed frame, and each
    one not still held is in exactly one."""
    core = Delivery(
        "resident",
        DeliveryState(daemon="d", wave="w", participant="resident"),
        cap=0,
        attention="resident",
        hold=30.0,
    )
    core.roots = frozenset({ROOT})
    blips = [
        Blip(id=f"{i:06d}", wavelet_id=wl, wave_id="w", author=who, kind=kind, text=text,  # type: ignore[arg-type]
             created_at="", actor=who if kind == "system" else None)
        for i, (wl, who, kind, text) in enumerate(specs)
    ]  # fmt: skip
    calls: list[list[Any]] = []

    def push(decision: Any) -> bool:
        calls[-1].append(decision)
        return True

    size = max(1, len(blips) // chunks)
    for n in [*range(0, len(blips), size), len(blips)]:  # the last: long after, only deadline-less holds stay
        calls.append([])
        core.deliver(core.gather(blips[n : n + size], now=float(n) if n < len(blips) else 1e9), push)
    frames = [f for call in calls for f in call]
    seen = [b.id for f in frames if f.action is Action.DELIVER for b in f.blips]
    assert len(seen) == len(set(seen))
    others = [b for b in blips if not core.own(b)]
    held = {b.id for part in core._held.values() for b in part}
    assert {b.id for b in others} - held == set(seen)
    for call in calls:
        for f in call:
            if f.digest and f.blip.wavelet_id == JOB and len(f.digest) < HOLD_MAX_LINES:
                assert any(g.blip.wavelet_id == JOB and not g.digest for g in call), "chatter woke it alone"
    for f in frames:
        b = f.blip
        if not f.digest:
            assert (
                b.wavelet_id == ROOT
                or b.author == "operator"
                or b.kind == "surface"
                or (b.text.startswith("DONE:") or "resident" in b.text)
            ), f"pushed in full: {b}"
        if b.wavelet_id == ROOT and b.kind != "system":
            assert not f.digest, "a root blip was digested"
