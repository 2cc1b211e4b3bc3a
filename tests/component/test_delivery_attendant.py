"""Targeted attention's attendant through the engine: a real external command asked which
digested blips to promote; a broken one changes nothing (the rules: tests/unit/test_delivery_engine.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from test_delivery_engine import Clock, FakeFeed, engine  # noqa: F401

from fleet.delivery.attention import Attendant, RoutingLog


def _attendant(tmp_path: Path, body: str, routing: RoutingLog) -> Attendant:
    script = tmp_path / "attendant.py"
    script.write_text(body)
    return Attendant(f"{sys.executable} {script}", routing, timeout=5.0)


def test_an_attendant_rescues_a_digested_blip_and_a_broken_one_changes_nothing(tmp_path: Path) -> None:
    rescue = (
        "import json, sys\n"
        "req = json.load(sys.stdin)\n"
        "print(json.dumps({'promote': [b['id'] for b in req['blips'] if 'urgent' in b['text']]}))\n"
    )
    for body, promoted in ((rescue, True), ("import sys; sys.exit(3)\n", False)):
        feed = FakeFeed()
        wl = feed.join("main")
        calm = feed.post(wl, "bob", "calm")
        urgent = feed.post(wl, "bob", "urgent thing")
        routing = RoutingLog(tmp_path / f"r{promoted}.jsonl", "alice", "w")
        e = engine(feed, attention="targeted", routing=routing, attendant=_attendant(tmp_path, body, routing))
        e.step(0)
        frames = e.sink.take()  # type: ignore[attr-defined]
        if promoted:
            assert [(f.kind, f.id) for f in frames] == [("message", urgent.id), ("digest", calm.id)]
        else:
            assert [(f.kind, f.blip_ids) for f in frames] == [("digest", [calm.id, urgent.id])]
        runs = [json.loads(x) for x in routing.path.read_text().splitlines()]
        assert [r["outcome"] for r in runs if r["event"] == "attendant"] == (
            ["promoted"] if promoted else ["exit"]
        )
