"""Rolling summaries as a real Claude Code session meets them: the pinned ``claude`` over the scripted
model, real tmux, the real daemon and channel. What is asserted is read from the session's own
transcript (the tool results that entered its context), checked against the store."""

from __future__ import annotations

import json
from collections.abc import Callable

from realclaude import RealFleet
from scripted_model import Script, ToolResult, call, on_message, rule, say, steps

from fleet.client import Client

RealFleetFactory = Callable[..., RealFleet]

FILLER = 30
"""Blips each ancestor holds under its summary (their text must not reach the session)."""


def filler(where: str, i: int) -> str:
    return f"{where} chatter number {i:02d}: the long discussion that a summary stands in for, at length."


def summarize_upto_now(op: Client, wavelet_id: str) -> None:
    """The operator rolls ``wavelet_id``'s summary with fleet's extractive default (as ``fleet
    summary write`` does), so it covers every blip so far."""
    from fleet.summaries import extractive

    proposal = extractive(op.summary_pending(wavelet_id))
    assert proposal is not None
    verdict = op.summarize(wavelet_id, proposal)
    assert verdict.accepted, verdict


def results(real: RealFleet, tool: str) -> list[ToolResult]:
    """The tool results of ``tool`` in alice's transcript, in order."""
    t = real.transcript("alice")
    ids = {u.id for u in t.tool_uses(f"mcp__fleet__{tool}")}
    return [r for r in t.tool_results() if r.tool_use_id in ids]


def test_a_session_in_a_deep_fork_reads_summaries_writes_one_that_is_checked_and_pins(
    real_fleet: RealFleetFactory, operator: Client
) -> None:
    """w/main > w/a > w/b > w/deep, main and a summarized below their fork points: alice's
    ``wavelet_read`` of w/deep carries the summaries, the blips after them, its live tail and the
    bytes saved, never the covered chatter. Then ``wavelet_summarize`` on w/notes: without text it
    lists what to cite; a summary missing a load-bearing id is rejected naming it; a good one is
    accepted; ``wavelet_pin`` pins a blip the summary did not cite."""
    op = operator
    op.create_wave("w", ["alice", "bob"])
    main = op.resolve("w/main").id
    for i in range(FILLER):
        op.post(main, filler("main", i), as_="bob")
    done = op.post(main, "DONE: the daemon listens on port 8086.", as_="bob")
    summarize_upto_now(op, main)
    after_main = op.post(main, "main after its summary: the port stays 8086.", as_="bob")
    a = op.fork(main, "a", with_=["alice", "bob"], as_="bob").id
    for i in range(FILLER):
        op.post(a, filler("a", i), as_="bob")
    summarize_upto_now(op, a)
    b = op.fork(a, "b", with_=["alice", "bob"], as_="bob").id
    unsummarized = op.post(b, "b has no summary: this stays in full.", as_="bob")
    deep = op.fork(b, "deep", with_=["alice", "bob"], as_="bob").id
    tail = [op.post(deep, f"deep live tail {i}: still being discussed.", as_="bob") for i in range(3)]

    notes = op.fork(main, "notes", with_=["alice", "bob"], as_="bob").id
    op.post(notes, "notes: a plain remark nobody needs later.", as_="bob")
    notes_done = op.post(notes, "DONE: the cache is warm.", as_="bob")
    plain = op.post(notes, "another plain remark worth keeping.", as_="bob")
    named = op.post(notes, "bob: check the cache eviction too.", as_="alice")
    must = op.summary_pending(notes).load_bearing
    assert sorted(must) == sorted([notes_done.id, named.id])
    bad = "The cache is warm."
    good = "The cache is warm; bob was asked to check eviction."
    script = Script(
        {
            "alice": [
                rule(
                    on_message(author="operator", contains="alice: go"),
                    steps(
                        call("wavelet_read", wavelet="w/deep"),
                        call("wavelet_summarize", wavelet="w/notes"),
                        call("wavelet_summarize", wavelet="w/notes", text=bad, cites=[notes_done.id]),
                        call("wavelet_summarize", wavelet="w/notes", text=good, cites=must),
                        call("wavelet_pin", blip_id=plain.id),
                        say("Summarized."),
                    ),
                )
            ]
        }
    )
    real = real_fleet(channels=True, script=script)
    real.spawn("w/deep", real.layout(["alice"]))
    op.post(deep, "alice: go")
    real.wait(lambda: len(results(real, "wavelet_pin")) == 1, "alice's pin result in her transcript")

    # what wavelet_read put into alice's context (Claude Code hands the model a tool's
    # structuredContent when it has an output schema: the ReadOut record, as JSON)
    (read,) = results(real, "wavelet_read")
    assert not read.is_error, read.text
    got = json.loads(read.text)
    ctx = op.context(deep)
    assert ctx.saved_bytes > 0 and (got["bytes"], got["saved_bytes"]) == (ctx.bytes, ctx.saved_bytes)
    assert got["path"] == ["w/main", "w/a", "w/b", "w/deep"]
    want = [(s.wavelet_id, s.upto, s.text) for s in (op.summaries(main)[-1], op.summaries(a)[-1])]
    assert [(x["wavelet"], x["upto"], x["text"]) for x in got["summaries"]] == [
        ("w/main", want[0][1], want[0][2]), ("w/a", want[1][1], want[1][2])
    ]  # fmt: skip
    assert f"[{done.id}] bob: DONE: the daemon listens on port 8086." in got["summaries"][0]["text"]
    assert done.id in got["summaries"][0]["cites"]
    shown = [b["text"] for b in got["blips"]]
    for kept in (after_main, unsummarized, *tail):
        assert kept.text in shown, kept.text
    for where in ("main", "a"):
        for i in range(FILLER):
            assert filler(where, i) not in read.text, f"covered blip {where} {i} reached the session"
    assert len(read.text.encode()) < ctx.full_bytes  # the whole result weighs less than the full walk

    # wavelet_summarize: learn what to cite, be rejected for a missing id, then accepted
    listed, rejected, accepted = results(real, "wavelet_summarize")
    assert not listed.is_error, listed.text
    offer = json.loads(listed.text)
    assert (offer["accepted"], offer["must_cite"]) == (False, must)
    assert {named.text, plain.text, notes_done.text} <= {b["text"] for b in offer["blips"]}
    assert rejected.is_error and "rejected" in rejected.text, rejected.text
    assert rejected.text.split("Missing: ")[1].startswith(f"{named.id}. "), rejected.text
    assert not accepted.is_error, accepted.text
    assert json.loads(accepted.text)["accepted"] is True
    (recorded,) = op.summaries(notes)
    assert (recorded.text, recorded.author, recorded.author_kind) == (good, "alice", "participant")
    assert sorted(recorded.cites) == sorted(must)

    # wavelet_pin: the pinned blip is load-bearing now, and the summary written before does not cite it
    (pinned,) = results(real, "wavelet_pin")
    assert not pinned.is_error and json.loads(pinned.text)["blip"]["id"] == plain.id, pinned.text
    assert op.summary_check(notes).missing == [plain.id]
