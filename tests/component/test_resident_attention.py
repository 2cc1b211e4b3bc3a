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
from mcphelp import RawMcp
from worlds import World, world

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import Paths


def _row(proc: RawMcp, wavelet_id: str) -> dict[str, Any]:
    rows = proc.call("wavelet_ping")["structuredContent"]["delivery"]["wavelets"]
    return next((r for r in rows if r["wavelet_id"] == wavelet_id), {})


@pytest.fixture
def w(daemon: Daemon, operator: Client, fleet_env: Paths, tmp_path: Path) -> Iterator[World]:
    yield from world(daemon, operator, fleet_env, tmp_path, "w", ["resident"])


def test_a_workers_chatter_waits_while_its_done_surface_and_mentions_reach_the_mind(w: World) -> None:
    op = w.op
    job = op.fork(w.main, "job", with_=["worker"], as_="resident").id
    op.invite(w.main, "carol")  # (she talks in the root below)
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

    def logged() -> dict[str, str] | None:  # (the channel logs a step's routes after its push)
        rules = {r.blip_id: r.rule.value for r in w.routes("resident")}
        return rules if {main_talk, asked, done, surfaced} <= rules.keys() else None

    rules = retry_until(logged, what="the routes of the pushed blips logged")
    assert rules is not None
    assert (rules[main_talk], rules[asked], rules[done], rules[surfaced]) == (
        "root",
        "mention",
        "done",
        "root",  # (a surface lands in the parent: here the root)
    )


# ---------------------------------------------------------------- the rules, as a property
