"""The attention layer end to end: a real daemon, real ``fleet channel`` processes, a scripted chatter.

Everything is observed where Claude Code would see it (the channels' stdout) and where the corpus
goes (the routing log). The rules' edge cases are unit-tested in ``test_delivery_rules.py``.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import chatter
import pytest
from conftest import retry_until
from mcphelp import RawMcp, channel_argv
from worlds import World

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.delivery import StateFile
from fleet.delivery.attention import (
    AttendantEntry,
    MissEntry,
)
from fleet.paths import Paths

Note = dict[str, Any]


@dataclass
class Env(World):
    """The chatter scenario's world (:mod:`chatter`): its wavelets, and what each participant is owed."""

    chat: chatter.Chatter = field(default_factory=chatter.Chatter)

    def blips_of_others(self, who: str) -> list[Any]:
        """Every blip ``who`` must be handed: others' blips in the wavelets ``who`` is on (not its own,
        nor the provenance of its own acts)."""
        out = []
        for wid in self.chat.wavelets.values():
            wl = self.op.get_wavelet(wid)
            if who in [m.name for m in wl.roster]:
                out += [
                    b
                    for b in self.op.read(wid, limit=5000).blips
                    if b.author != who and not (b.kind == "system" and b.actor == who)
                ]
        return out

    def settle(self, proc: RawMcp, who: str, only: str | None = None) -> None:
        """Wait until ``proc`` has read every blip there is, handled or held (then all its frames are
        on stdout: the ping's response is written after them); ``only``: in that wavelet (by name).
        Provenance alone is held (it wakes nobody), so a wavelet with nothing else stays held."""
        want = {
            wid: self.op.read(wid, limit=5000).cursor
            for name, wid in self.chat.wavelets.items()
            if who in [m.name for m in self.op.get_wavelet(wid).roster] and only in (None, name)
        }

        def done() -> bool:
            rows = proc.call("wavelet_ping")["structuredContent"]["delivery"]["wavelets"]
            return {r["wavelet_id"]: r["seen"] for r in rows if r["wavelet_id"] in want} == want

        retry_until(done, timeout=60, what=f"{who}'s channel to handle every blip")


@pytest.fixture
def env(daemon: Daemon, operator: Client, fleet_env: Paths, tmp_path: Path) -> Iterator[Env]:
    chat = chatter.setup(operator)
    e = Env(daemon, operator, fleet_env, tmp_path, chatter.WAVE, chat.wavelets["main"], chat=chat)
    try:
        yield e
    finally:
        e.close()


def frames(proc: RawMcp) -> tuple[list[Note], list[Note], list[Note]]:
    """(full frames, digest frames, anything else) of a channel so far."""
    notes = proc.channel_notes()
    digests = [n for n in notes if n["meta"]["kind"] == "digest"]
    full = [n for n in notes if n["meta"]["kind"] in ("message", "surface", "system")]
    rest = [n for n in notes if n not in digests and n not in full]
    return full, digests, rest


def digest_ids(note: Note) -> list[str]:
    """The blip ids a digest frame lists, checked against its lines (one line per id, same order)."""
    ids = note["meta"]["blip_ids"].split(",")
    lines = note["content"].split("\n")
    assert len(lines) == len(ids), note
    for line, blip_id in zip(lines, ids, strict=True):
        assert line.endswith(f" [{blip_id}]"), (line, blip_id)
        assert ": " in line and len(line) < 200, line  # author, a short excerpt, the id
    return list(ids)


def meta_is_wire_safe(note: Note) -> bool:
    return all(isinstance(v, str) and k.isidentifier() and k.isascii() for k, v in note["meta"].items())


# ---------------------------------------------------------------- the scenario


def test_chatter_targeted_gets_mentions_operator_and_surfaces_in_full_and_the_rest_digested(
    env: Env,
) -> None:
    bob = env.channel("bob", "--attention", "targeted", "--digest-hold", "0", "--cap", "0")
    erin = env.channel("erin", "--attention", "targeted", "--digest-hold", "0", "--cap", "0")
    alice = env.channel("alice", "--cap", "0")  # full attention: today's delivery
    chatter.run(env.op, env.chat, blips=300)
    for proc, who in ((bob, "bob"), (erin, "erin"), (alice, "alice")):
        env.settle(proc, who)

    # bob: full text exactly for his mentions, the operator's blips and surfaces
    posted = {p.id: p for p in env.chat.posted}
    expected_full = {p.id for p in env.chat.posted if p.full}
    others = {b.id: b for b in env.blips_of_others("bob")}
    full, digests, rest = frames(bob)
    assert rest == []
    got_full = Counter(n["meta"]["blip_id"] for n in full)
    assert set(got_full) == expected_full and max(got_full.values()) == 1
    for n in full:
        assert n["content"] == others[n["meta"]["blip_id"]].text
        assert meta_is_wire_safe(n)
    # ... and every other blip id in exactly one digest line
    digested = Counter(i for n in digests for i in digest_ids(n))
    assert set(digested) == set(others) - expected_full and max(digested.values()) == 1
    assert all(meta_is_wire_safe(n) and n["meta"]["author"] == "fleet" for n in digests)
    assert {others[i].kind for i in digested} == {"message", "system"}  # provenance is digested
    assert not any(posted[i].full for i in digested if i in posted)
    assert len(digests) < len(digested) / 3  # batched: one frame per wavelet batch, not per blip

    # the routing log: one decision per blip of others, with the rule that fired
    routes = env.routes("bob")
    assert Counter(r.blip_id for r in routes) == Counter(list(others))
    by_rule = Counter(r.rule.value for r in routes)
    assert by_rule["mention"] == sum(
        1 for p in env.chat.posted if p.full and p.kind == "message" and p.author != "operator"
    )
    assert by_rule["operator"] == sum(1 for p in env.chat.posted if p.author == "operator")
    assert by_rule["surface"] == sum(1 for p in env.chat.posted if p.kind == "surface")
    assert {r.blip_id for r in routes if r.route == "full"} == expected_full
    assert all(r.outcome == "delivered" and r.participant == "bob" for r in routes)
    assert {r.wavelet for r in routes} == {"chat/main", "chat/review"}

    # erin (targeted, on main and review, never mentioned): only operator blips and surfaces in full
    full_e, digests_e, _ = frames(erin)
    others_e = {b.id for b in env.blips_of_others("erin")}
    want_e = {p.id for p in env.chat.posted if p.author == "operator" or p.kind == "surface"}
    assert {n["meta"]["blip_id"] for n in full_e} == want_e
    assert {i for n in digests_e for i in digest_ids(n)} == others_e - want_e

    # alice (full attention): every blip of others as itself, no digest, no routing log
    full_a, digests_a, rest_a = frames(alice)
    assert digests_a == [] and rest_a == []
    assert Counter(n["meta"]["blip_id"] for n in full_a) == Counter(
        b.id for b in env.blips_of_others("alice")
    )
    assert env.log("alice") == []

    # read-after-digest misses: reading a digested blip by id logs one miss, once
    digested_ids = list(digested)
    target = next(i for i in digested_ids if others[i].kind == "message")
    read = bob.call(
        "wavelet_read",
        {
            "wavelet": "main" if others[target].wavelet_id == env.chat.wavelets["main"] else "review",
            "blip_id": target,
        },
    )
    assert read["isError"] is False and read["structuredContent"]["blips"][0]["text"] == others[target].text
    misses = [e for e in env.log("bob") if isinstance(e, MissEntry)]
    assert [(m.blip_id, m.via, m.rule.value) for m in misses] == [(target, "blip", "unaddressed")]
    bob.call("wavelet_read", {"wavelet": "main", "blip_id": target})
    full_one = next(iter(expected_full))
    bob.call("wavelet_read", {"wavelet": "main", "blip_id": full_one})
    assert len([e for e in env.log("bob") if isinstance(e, MissEntry)]) == 1
    # a wider read logs the digested blips it returned (via "read"), each at most once
    page = bob.call("wavelet_read", {"wavelet": "review", "limit": 5})["structuredContent"]["blips"]
    shown_digested = {b["id"] for b in page if b["id"] in digested and b["id"] != target}
    misses = [e for e in env.log("bob") if isinstance(e, MissEntry)]
    assert {m.blip_id for m in misses if m.via == "read"} == shown_digested and shown_digested
    assert all(m.wavelet == "chat/review" for m in misses if m.via == "read")
    # alice's reads log nothing (full attention keeps no log)
    alice.call("wavelet_read", {"wavelet": "main", "blip_id": target})
    assert env.log("alice") == []


def test_frames_not_blips_count_toward_the_cap(env: Env) -> None:
    main = env.chat.wavelets["main"]
    burst = [env.op.post(main, f"chatter {i}", as_="alice").id for i in range(25)]
    bob = env.channel("bob", "--attention", "targeted", "--digest-hold", "0", "--cap", "3")
    env.settle(bob, "bob")
    # the setup's provenance and 25 blips of chatter: one batch, one frame
    (first,) = [n for n in bob.channel_notes() if n["meta"]["wavelet"] == "chat/main"]
    assert first["meta"]["kind"] == "digest" and digest_ids(first)[-25:] == burst
    # two more frames, then one notice in place of the third, then silence
    more = []
    for i in range(5):
        more.append(env.op.post(main, f"bob: more {i}" if i % 2 else f"more {i}", as_="carol").id)
        env.settle(bob, "bob")
    notes = [n for n in bob.channel_notes() if n["meta"]["wavelet"] == "chat/main"]
    assert [n["meta"]["kind"] for n in notes] == ["digest", "digest", "message", "cap"]
    assert notes[3]["meta"]["blip_id"] == more[2] and "wavelet_read" in notes[3]["content"]
    # still one routing decision per blip, with what the cap made of it (review's fork provenance
    # waits for company: provenance alone wakes nobody, so it is not decided yet)
    routes = {r.blip_id: r for r in env.routes("bob")}
    owed = env.blips_of_others("bob")
    assert set(routes) == {b.id for b in owed if b.wavelet_id == main}
    assert all(b.kind == "system" for b in owed if b.wavelet_id != main)
    assert [routes[i].outcome for i in more] == ["delivered", "delivered", "notice", "capped", "capped"]
    assert [routes[i].rule.value for i in more] == ["unaddressed", "mention"] * 2 + ["unaddressed"]


# ---------------------------------------------------------------- the attendant

ATTENDANT = """\
import json, os, sys, time
mode = sys.argv[1]
req = json.load(sys.stdin)
with open(sys.argv[2], "a") as f:
    f.write(json.dumps({"pid": os.getpid(), "n": len(req["blips"]), "wavelet": req["wavelet"]}) + "\\n")
ids = [b["id"] for b in req["blips"]]
if mode == "broken":
    sys.stderr.write("attendant crashed\\n")
    sys.exit(3)
if mode == "slow":
    time.sleep(60)
if mode == "garbage":
    print("promote everything please")
if mode == "liar":
    print(json.dumps({"promote": ["not-a-blip", "0000"] + sys.argv[3].split(",")}))
if mode == "flood":
    print(json.dumps({"promote": ["y" * (2 << 20)]}))  # well-formed, but megabytes
if mode == "wrongtype":
    print(json.dumps({"promote": "all"}))
if mode == "rescue":
    print(json.dumps({"promote": [b["id"] for b in req["blips"] if "rescue me" in b["text"]]}))
"""


def _attendant(env: Env, mode: str, extra: str = "") -> str:
    script = env.tmp / "attendant.py"
    script.write_text(ATTENDANT)
    return f"{sys.executable} {script} {mode} {env.tmp / 'attendant.calls'} {extra}".strip()


@pytest.mark.parametrize(
    ("mode", "outcome"),
    [
        ("broken", "exit"),
        ("slow", "timeout"),
        ("garbage", "invalid"),
        ("wrongtype", "invalid"),
        ("flood", "invalid"),
        ("liar", "unknown_ids"),
        ("missing", "error"),
    ],
)
def test_a_broken_slow_or_lying_attendant_never_suppresses_anything(
    env: Env, mode: str, outcome: str
) -> None:
    chatter.run(env.op, env.chat, blips=40, seed=11)
    expected_full = {p.id for p in env.chat.posted if p.full}
    # the liar names every full blip (a "demotion" it cannot make) and ids that do not exist
    cmd = _attendant(env, mode, ",".join(sorted(expected_full)))
    if mode == "missing":
        cmd = str(env.tmp / "no-such-attendant")
    bob = env.channel(
        "bob",
        "--attention",
        "targeted",
        "--digest-hold",
        "0",
        "--cap",
        "0",
        "--attendant",
        cmd,
        "--attendant-timeout",
        "0.5",
    )
    env.settle(bob, "bob")
    others = {b.id for b in env.blips_of_others("bob")}
    full, digests, rest = frames(bob)
    assert rest == []
    assert {n["meta"]["blip_id"] for n in full} == expected_full
    assert {i for n in digests for i in digest_ids(n)} == others - expected_full
    # each fallback is logged with its reason; the decisions are the rules'
    runs = [e for e in env.log("bob") if isinstance(e, AttendantEntry)]
    assert runs and {r.outcome for r in runs} == {outcome} and all(r.promoted == [] for r in runs)
    assert all(r.detail for r in runs)
    if mode == "liar":
        assert all(set(r.unknown) >= {"not-a-blip", "0000"} for r in runs)
    assert {r.blip_id for r in env.routes("bob") if r.rule.value == "attendant"} == set()
    if mode == "slow":  # killed at its timeout, not left running
        pids = [json.loads(line)["pid"] for line in (env.tmp / "attendant.calls").read_text().splitlines()]
        retry_until(lambda: not any(Path(f"/proc/{p}").exists() for p in pids), what="attendants killed")


def test_an_attendant_can_rescue_a_digested_blip(env: Env) -> None:
    main = env.chat.wavelets["main"]
    env.op.post(main, "plain chatter", as_="alice")
    rescued = env.op.post(main, "rescue me: the schema is wrong", as_="carol").id
    addressed = env.op.post(main, "bob: and this one is yours", as_="dave").id
    bob = env.channel(
        "bob", "--attention", "targeted", "--digest-hold", "0", "--attendant", _attendant(env, "rescue")
    )
    env.settle(bob, "bob")
    full, digests, _ = frames(bob)
    assert [n["meta"]["blip_id"] for n in full if n["meta"]["wavelet"] == "chat/main"] == [rescued, addressed]
    assert rescued not in {i for n in digests for i in digest_ids(n)}
    rules = {r.blip_id: r.rule.value for r in env.routes("bob")}
    assert rules[rescued] == "attendant" and rules[addressed] == "mention"
    runs = [e for e in env.log("bob") if isinstance(e, AttendantEntry) and e.wavelet == "chat/main"]
    assert [(r.outcome, r.promoted) for r in runs] == [("promoted", [rescued])]


def test_attendant_needs_targeted_attention(env: Env) -> None:
    argv = channel_argv("bob", chatter.WAVE, env.daemon.url, env.token_file("bob"), "--attendant", "true")
    res = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "--attention targeted" in res.stderr and res.stdout == ""


# ---------------------------------------------------------------- the runaway guard


def test_a_runaway_pair_stays_under_twice_the_cap(env: Env) -> None:
    """alice and bob answer every frame they get, forever; frames stay bounded at about 2 x cap."""
    cap = 4
    pair = {
        "alice": env.channel("alice", "--attention", "targeted", "--digest-hold", "0", "--cap", str(cap)),
        "bob": env.channel("bob", "--attention", "targeted", "--digest-hold", "0", "--cap", str(cap)),
    }
    for who, proc in pair.items():
        env.settle(proc, who)
    start = {who: len(proc.channel_notes()) for who, proc in pair.items()}
    answered = dict(start)
    main = env.chat.wavelets["main"]
    env.op.post(main, "alice, bob: discuss the schema until you agree")  # resets both caps

    def answer_all() -> bool:
        for who, proc in pair.items():
            other = "bob" if who == "alice" else "alice"
            notes = proc.channel_notes()
            while answered[who] < len(notes):
                answered[who] += 1
                # alternate: naming the other (a full frame) and not (a digest frame)
                text = f"{other}: I disagree" if answered[who] % 2 else "I still disagree"
                assert proc.call("wavelet_post", {"wavelet": "main", "text": text})["isError"] is False
        last = env.op.read(main, limit=5000).cursor
        settled = all(
            r["cursor"] == last
            for proc in pair.values()
            for r in proc.call("wavelet_ping")["structuredContent"]["delivery"]["wavelets"]
            if r["wavelet_id"] == main
        )
        return settled and all(answered[w] == len(p.channel_notes()) for w, p in pair.items())

    retry_until(answer_all, timeout=60, what="the pair to run into the cap and fall silent")
    got = {who: [n["meta"]["kind"] for n in proc.channel_notes()[start[who] :]] for who, proc in pair.items()}
    # it ran into the cap (one notice each at most), with both kinds of frame, and stopped in time
    assert 1 <= sum(kinds.count("cap") for kinds in got.values()) <= 2
    assert all(kinds.count("cap") <= 1 and len(kinds) <= cap + 1 for kinds in got.values())
    assert {"digest", "message"} <= {k for kinds in got.values() for k in kinds}
    assert sum(len(kinds) for kinds in got.values()) <= 2 * (cap + 1)


# ---------------------------------------------------------------- the digest hold


def _row(proc: RawMcp, wavelet_id: str) -> dict[str, Any]:
    rows = proc.call("wavelet_ping")["structuredContent"]["delivery"]["wavelets"]
    return next((r for r in rows if r["wavelet_id"] == wavelet_id), {})


def test_digest_hold_gathers_chatter_until_a_full_blip_takes_it_along(env: Env) -> None:
    main = env.chat.wavelets["main"]
    bob = env.channel("bob", "--attention", "targeted", "--digest-hold", "600")
    x = env.op.post(main, "chatter x", as_="alice").id
    retry_until(lambda: _row(bob, main).get("seen") == x, what="bob's channel to read x")
    y = env.op.post(main, "chatter y", as_="carol").id
    retry_until(lambda: _row(bob, main).get("seen") == y, what="bob's channel to read y")
    row = _row(bob, main)
    assert row["held"] >= 2 and row["cursor"] < x  # read, held, not committed
    assert [n for n in bob.channel_notes() if n["meta"]["wavelet"] == "chat/main"] == []
    z = env.op.post(main, "bob: over to you", as_="dave").id
    env.settle(bob, "bob", only="main")
    notes = [n for n in bob.channel_notes() if n["meta"]["wavelet"] == "chat/main"]
    assert [n["meta"]["kind"] for n in notes] == ["message", "digest"]
    assert notes[0]["meta"]["blip_id"] == z and digest_ids(notes[1])[-2:] == [x, y]
    assert {r.blip_id for r in env.routes("bob")} >= {x, y, z}
    # the feed asked past the held blips meanwhile, instead of being handed them again and again
    assert "behind the cursors" not in bob.stderr_text()


def test_digest_hold_expires_without_more_blips(env: Env) -> None:
    main = env.chat.wavelets["main"]
    bob = env.channel("bob", "--attention", "targeted", "--digest-hold", "0.3")
    x = env.op.post(main, "lonely chatter", as_="alice").id
    note = bob.wait_notes(
        lambda notes: next((n for n in notes if x in n["meta"].get("blip_ids", "")), None),
        what="the held digest to go out at its deadline",
    )
    assert note["meta"]["kind"] == "digest"


def test_held_blips_are_not_lost_when_the_channel_stops(env: Env) -> None:
    main = env.chat.wavelets["main"]
    bob = env.channel("bob", "--attention", "targeted", "--digest-hold", "600")
    x = env.op.post(main, "held then stopped", as_="alice").id
    retry_until(lambda: _row(bob, main).get("seen") == x, what="bob's channel to hold x")
    assert bob.close() == 0
    again = env.channel("bob", "--attention", "targeted", "--digest-hold", "0")
    env.settle(again, "bob")
    assert any(x in digest_ids(n) for n in again.channel_notes() if n["meta"]["kind"] == "digest")


# ---------------------------------------------------------------- the hook transport

TAG = re.compile(r'<channel source="fleet"((?: \w+="[^"]*")*)>\n(.*?)\n</channel>', re.DOTALL)


def hook_frames(stderr: str) -> list[Note]:
    """The ``<channel>`` blocks a waking hook wrote, as notification params (meta unescaped)."""
    return [
        {"content": text, "meta": {k: html.unescape(v) for k, v in re.findall(r' (\w+)="([^"]*)"', attrs)}}
        for attrs, text in TAG.findall(stderr)
    ]


def test_the_hook_transport_applies_the_same_rules_and_logs_to_the_same_log(env: Env) -> None:
    chatter.run(env.op, env.chat, blips=60, seed=7)
    expected_full = {p.id for p in env.chat.posted if p.full}
    others = {b.id: b for b in env.blips_of_others("bob")}
    argv = [sys.executable, "-m", "fleet", "watch", "--hook", "--participant", "bob", "--wave", chatter.WAVE,
            "--daemon", env.daemon.url, "--token-file", str(env.token_file("bob")),
            "--state-dir", str(env.paths.channels), "--attention", "targeted"]  # fmt: skip
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    notes = hook_frames(res.stderr)
    full = [n for n in notes if n["meta"]["kind"] != "digest"]
    digests = [n for n in notes if n["meta"]["kind"] == "digest"]
    assert {n["meta"]["blip_id"] for n in full} == expected_full
    assert all(n["content"] == others[n["meta"]["blip_id"]].text for n in full)
    assert Counter(i for n in digests for i in digest_ids(n)) == Counter(set(others) - expected_full)
    # every blip was handled in that one wake (the cursor is the channel's own state file) ...
    state = StateFile(env.paths.channels, env.daemon.url, chatter.WAVE, "bob").load()
    for name in ("main", "review"):
        assert (
            state.cursors[env.chat.wavelets[name]] == env.op.read(env.chat.wavelets[name], limit=5000).cursor
        )
    # ... and decided once each in the routing log the channel uses
    assert Counter(r.blip_id for r in env.routes("bob")) == Counter(list(others))
    # the tools-only channel beside the hook notices a read-after-digest miss
    tools = env.channel("bob", "--no-deliver", "--attention", "targeted")
    target = next(i for n in digests for i in digest_ids(n) if others[i].kind == "message")
    assert tools.call("wavelet_read", {"wavelet": "main", "blip_id": target})["isError"] is False
    assert [(m.blip_id, m.via) for m in env.log("bob") if isinstance(m, MissEntry)] == [(target, "blip")]


def test_the_hook_holds_a_lone_digest_for_company_and_runs_the_attendant(env: Env) -> None:
    """Hook mode has the channel's digest hold and attendant: unaddressed chatter waits in the arm
    for more, and the attendant's rescue comes out in full."""
    env.op.post(env.chat.wavelets["main"], "warm-up", as_="alice")  # past the wave's history first
    argv = [sys.executable, "-m", "fleet", "watch", "--hook", "--participant", "bob", "--wave", chatter.WAVE,
            "--daemon", env.daemon.url, "--token-file", str(env.token_file("bob")),
            "--attention", "targeted"]  # fmt: skip
    assert subprocess.run([*argv, "--digest-hold", "0"], capture_output=True, timeout=60).returncode == 2
    attendant = _attendant(env, "rescue")
    arm = subprocess.Popen(
        [*argv, "--digest-hold", "3", "--attendant", attendant],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    main = env.chat.wavelets["main"]
    retry_until(lambda: env.lock_held("bob"), what="the arm waiting")
    first = env.op.post(main, "the weather again", as_="carol").id
    with pytest.raises(subprocess.TimeoutExpired):  # held for company: no wake for one lone digest line
        arm.wait(1.0)
    urgent = env.op.post(main, "rescue me: the build is red", as_="dave").id
    later = env.op.post(main, "and lunch", as_="carol").id
    _, err = arm.communicate(timeout=60)
    assert arm.returncode == 2, err
    notes = hook_frames(err)
    assert [(n["meta"]["kind"], n["meta"].get("blip_id")) for n in notes] == [
        ("message", urgent),
        ("digest", None),
    ]
    assert digest_ids(notes[1]) == [first, later]  # one wake for the three, not three


def test_an_attendant_still_running_is_killed_when_the_channel_stops(env: Env) -> None:
    env.op.post(env.chat.wavelets["main"], "chatter for the attendant", as_="alice")
    cmd = _attendant(env, "slow")
    bob = env.channel(
        "bob",
        "--attention",
        "targeted",
        "--digest-hold",
        "0",
        "--attendant",
        cmd,
        "--attendant-timeout",
        "300",
    )
    calls = env.tmp / "attendant.calls"
    retry_until(lambda: calls.exists() and calls.read_text(), what="the attendant to start")
    pid = json.loads(calls.read_text().splitlines()[0])["pid"]
    assert bob.close() == 0
    retry_until(lambda: not Path(f"/proc/{pid}").exists(), what="the attendant to be killed")
