"""Real Claude Code sessions in their own git worktrees, and what they spent, counted by fleet.

The pinned Claude Code (``tests/realclaude.py``) runs over the scripted model with the ``Write``
tool, each session in a worktree ``fleet spawn`` made from a real git checkout. The scripted
model's ``usage`` figures are exact, so fleet's totals per participant and per wavelet must equal
the sums of what the model reported for the requests recorded in each session's transcript, read
with ``fleet usage`` while the sessions are still writing.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from realclaude import RealFleet
from scripted_model import Script, Usage, call, on_message, post, rule, steps
from scripted_model.server import Request

from fleet.client import Client

RealFleetFactory = Callable[..., RealFleet]

FIGURES = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
OURS = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_input_tokens": "cache_read_tokens",
    "cache_creation_input_tokens": "cache_creation_tokens",
}


def writes(path: Path, text: str, done: str, usage: Usage) -> Any:
    """A turn: Write ``text`` to ``path`` (reporting ``usage``), then post ``done`` where woken."""
    return steps(
        replace(call("Write", file_path=str(path), content=text), usage=usage),
        replace(
            post("{wavelet}", done),
            usage=Usage(input_tokens=700, output_tokens=30, cache_read_input_tokens=5),
        ),
    )


def expected(requests: list[Request]) -> dict[str, dict[str, int]]:
    """The model's own figures per wavelet: a request opening a turn (a channel block and no tool
    result) belongs to the wavelet of its first block that is not fleet's provenance; the turn's
    later requests follow it."""
    out: dict[str, dict[str, int]] = {}
    current = ""
    for req in requests:
        if req.kind != "turn" or req.reply is None or req.reply.error is not None:
            continue
        chans = req.channel_events()
        if chans and not any(e.kind == "tool_result" for e in req.events):
            waking = [e for e in chans if e.blip_kind != "system"] or chans  # provenance never wakes
            current = waking[0].wavelet
            opens = True
        else:
            opens = False
        sums = out.setdefault(current, dict.fromkeys([*FIGURES, "requests", "turns"], 0))
        sums["turns"] += opens
        for k, v in req.reply.usage.wire(req.size).items():
            sums[k] += v
        sums["requests"] += 1
    return out


def ours(fig: dict[str, Any]) -> dict[str, int]:
    return {**{k: fig[OURS[k]] for k in FIGURES}, "requests": fig["requests"], "turns": fig["turns"]}


def test_sessions_write_in_their_own_worktrees_and_fleet_counts_exactly_what_the_model_reported(
    real_fleet: RealFleetFactory, operator: Client, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    alice_tree, bob_tree = tmp_path / "project.w.alice", tmp_path / "project.w.bob"
    script = Script(
        {
            "alice": [
                rule(
                    on_message(author="operator", contains="alice:"),
                    writes(
                        alice_tree / "alice.txt",
                        "alice's part\n",
                        "DONE: alice wrote alice.txt",
                        Usage(
                            input_tokens=1234,
                            output_tokens=56,
                            cache_read_input_tokens=789,
                            cache_creation_input_tokens=10,
                        ),
                    ),
                )
            ],
            "bob": [
                rule(
                    on_message(author="operator", contains="bob:"),
                    writes(
                        bob_tree / "bob.txt",
                        "bob's part\n",
                        "DONE: bob wrote bob.txt",
                        Usage(input_tokens=4321, output_tokens=65, cache_creation_input_tokens=99),
                    ),
                )
            ],
        }
    )
    real = real_fleet(channels=True, script=script)
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "."],
        ["commit", "-q", "--allow-empty", "-m", "first"],
    ):
        subprocess.run(
            ["git", "-C", str(project), "-c", "user.name=T", "-c", "user.email=t@e", *args], check=True
        )
    config = real.home / ".claude.json"  # the worktrees are trusted folders too, as the project is
    data = json.loads(config.read_text())
    for tree in (alice_tree, bob_tree):
        data["projects"][str(tree)] = {"hasTrustDialogAccepted": True}
    config.write_text(json.dumps(data))

    operator.create_wave("w", ["alice", "bob"])
    side = operator.fork(operator.resolve("w/main").id, "side", ["bob"])
    layout = real.layout(
        ["alice", "bob"], defaults={"worktree": "participant", "permission_mode": "acceptEdits"}
    )
    report = real.spawn("w/main", layout)
    assert {p["participant"]: p["worktree"] for p in report["panes"]} == {
        "alice": str(alice_tree),
        "bob": str(bob_tree),
    }

    def usage() -> dict[str, Any]:
        done = real.fleet("usage", "w", "--json")
        assert done.returncode == 0, done.stderr
        return {p["participant"]: p for p in json.loads(done.stdout)["participants"]}

    operator.post(operator.resolve("w/main").id, "alice: write your part, then say DONE.")
    # bob hears alice's DONE in w/main too (a turn that ends at once); then bob is asked in w/side
    real.wait(lambda: any(b.text.startswith("DONE: alice") for b in real.blips("w/main")), "alice's DONE")
    real.wait(lambda: len(real.transcript("bob").delivered()) >= 2, "alice's DONE in bob's context")
    early = usage()  # read before bob's transcript grows on: the next readings resume from here
    operator.post(side.id, "bob: write your part, then say DONE.")
    seen: list[dict[str, Any]] = []
    last: list[Any] = []

    def settled() -> bool:  # fleet usage read again and again while the sessions write
        got = usage()
        seen.append(got)
        want = {who: expected(real.requests(who)) for who in ("alice", "bob")}
        have = {who: {k: ours(f) for k, f in got[who]["wavelets"].items()} for who in got}
        last[:] = [have, want]
        return any(b.text.startswith("DONE: bob") for b in real.blips("w/side")) and have == want

    try:
        real.wait(settled, "fleet's usage equal to the model's own figures")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nfleet counted {last[0]}\nthe model reported {last[1]}") from None
    final = usage()
    # how many requests bob made depends on how Claude Code folded the wakes; that fleet counted
    # exactly the model's figures is asserted above, and the later readings resumed from the early one
    assert 1 <= early["bob"]["total"]["requests"] < final["bob"]["total"]["requests"]
    alice_model = expected(real.requests("alice"))
    assert set(alice_model) == {"w/main"} and alice_model["w/main"]["input_tokens"] >= 1234 + 700
    assert set(expected(real.requests("bob"))) == {"w/main", "w/side"}
    for who in ("alice", "bob"):
        total = final[who]["total"]
        model = expected(real.requests(who))
        kinds = [*FIGURES, "requests", "turns"]
        assert ours(total) == {k: sum(w[k] for w in model.values()) for k in kinds}
        assert final[who]["problem"] == ""
    # a turn in each wavelet at least (the operator's blip and alice's DONE may fold into one in w/main)
    assert final["bob"]["total"]["turns"] >= 2
    # the sessions wrote in their own worktrees; the checkout is untouched
    assert (alice_tree / "alice.txt").read_text() == "alice's part\n"
    assert (bob_tree / "bob.txt").read_text() == "bob's part\n"
    assert not (alice_tree / "bob.txt").exists() and not (bob_tree / "alice.txt").exists()
    assert sorted(p.name for p in project.iterdir()) == [".git"]
    st = json.loads(real.fleet("status", "w", "--json").stdout)
    rows = {(r["wavelet"], r["participant"]): r for r in st["rows"]}
    assert (rows["w/main", "alice"]["branch"], rows["w/main", "alice"]["dirty"]) == ("fleet/w/alice", True)
    assert (
        rows["w/side", "bob"]["usage"]["input_tokens"] == final["bob"]["wavelets"]["w/side"]["input_tokens"]
    )
