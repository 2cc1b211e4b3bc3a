"""What the standard chatter costs in model traffic, through real Claude Code sessions: full vs targeted.

The scenario is ``bench/attention.py``'s (``tests/chatter.py``: wave ``chat``, five agents and the
operator, forks ``review`` and ``side``, about 10 % of blips naming bob, 4 % the operator's, 3 %
surfaces). Here each of the five agents is a real Claude Code session (the pinned binary, spawned by
``fleet spawn`` into a scratch tmux server, channels registered offline) whose model is the scripted
server of ``tests/scripted_model``; the agents only listen (every turn ends with a short text), so
every request is a wake caused by the chatter. The layout sets ``cap = 0`` (the cap is not what is
measured) and ``attention`` to ``full``, then, in a second fleet of the same run, ``targeted``.

Counted from the scripted server's request log, per participant: wakes (turn requests), total
request bytes, and the new bytes of each wake beyond the previous request (the part a prompt cache
cannot serve: the request laid out in the API's cache order, tools, system, then messages, with
``cache_control`` markers ignored, minus its longest common prefix with the previous request, in
whole blocks). Two arrivals: ``burst`` (posted as fast as the daemon takes them: Claude Code folds
what arrives during a turn into the next, so few wakes) and ``paced`` (``--rate`` posts a second).
Also the first request of an idle fleet session (woken by the operator's first word), where its bytes
are, and how many requests carried the MCP server instructions. It asserts nothing.

    python bench/tokens.py [--blips 300] [--addressed 0.10] [--seed 4] [--rate 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

import chatter  # noqa: E402  (tests/chatter.py: the scenario)
from realclaude import RealFleet  # noqa: E402  (tests/realclaude.py: the real-session world)
from realworld import real_world  # noqa: E402  (bench/realworld.py)
from scripted_model import Request  # noqa: E402

from fleet.client import Client  # noqa: E402

MODES = ("full", "targeted")
ARRIVALS = ("burst", "paced")
TMUX_CONF = "set -g default-shell /bin/sh\nset -g history-limit 5000\n"


def blocks(req: Request) -> list[str]:
    """The request in the API's cache order (tools, system, messages), one string per block."""

    def plain(node: Any) -> Any:  # cache_control markers move between requests; they are not content
        if isinstance(node, dict):
            return {k: plain(v) for k, v in node.items() if k != "cache_control"}
        if isinstance(node, list):
            return [plain(v) for v in node]
        return node

    body = req.body or {}
    out = [json.dumps(plain(t), separators=(",", ":")) for t in body.get("tools") or []]
    system = body.get("system")
    out += [json.dumps(plain(system), separators=(",", ":"))]
    for m in body.get("messages") or []:
        content = m.get("content")
        items = content if isinstance(content, list) else [content]
        out += [json.dumps([m.get("role"), plain(c)], separators=(",", ":")) for c in items]
    return out


def new_bytes(prev: list[str] | None, cur: list[str]) -> int:
    """Bytes of ``cur``'s blocks after its longest common block prefix with ``prev``."""
    if prev is None:
        return sum(len(b.encode()) for b in cur)
    same = 0
    for a, b in zip(prev, cur, strict=False):
        if a != b:
            break
        same += 1
    return sum(len(b.encode()) for b in cur[same:])


@dataclass
class Stats:
    wakes: int = 0
    total: int = 0
    new: list[int] = field(default_factory=list)
    first: Request | None = None


def stats(reqs: list[Request]) -> Stats:
    s = Stats()
    prev = None
    for r in reqs:
        cur = blocks(r)
        s.wakes += 1
        s.total += r.size
        s.new.append(new_bytes(prev, cur))
        prev = cur
        s.first = s.first or r
    return s


ROSTERS = {"main": chatter.AGENTS, "review": ("alice", "bob", "erin"), "side": ("carol", "dave")}


def woken(real: RealFleet, blip: str) -> bool:
    """Every agent's session took ``blip`` and the model answered it."""
    for who in chatter.AGENTS:
        t = real.transcript(who, wave=chatter.WAVE)
        if blip not in {i for c in t.enqueued() for i in c.blip_ids} or not t.settled():
            return False
    return True


def caught_up(real: RealFleet, op: Client, chat: chatter.Chatter) -> bool:
    """Every blip of others on each agent's wavelets is in a notification Claude Code queued, all of
    them entered its conversation, and the model answered the last wake."""
    blips = {name: op.read(wid, limit=2000).blips for name, wid in chat.wavelets.items()}
    for who in chatter.AGENTS:
        want = {  # everything but its own blips and the provenance of its own acts (echo suppression)
            b.id
            for name, bs in blips.items()
            if who in ROSTERS[name]
            for b in bs
            if b.author != who and not (b.kind == "system" and b.actor == who)
        }
        t = real.transcript(who, wave=chatter.WAVE)
        if not want <= {i for c in t.enqueued() for i in c.blip_ids} or not t.settled():
            return False
    return True


@dataclass
class Run:
    per: dict[str, Stats]
    seconds: float
    posted: int
    instructed: int
    """Turn requests that carried the MCP server instructions (``# MCP Server Instructions``)."""
    turns: int
    identified: int = 0
    """Turn requests whose system prompt names their participant (``--append-system-prompt``)."""


def one(root: Path, attention: str, arrival: str, args: argparse.Namespace) -> Run:
    """One fleet of five real sessions with ``attention``, the chatter posted ``arrival``-wise."""
    with real_world(root / f"{arrival}-{attention}", channels=True) as real:
        op = real.op
        chat = chatter.setup(op)
        layout = real.layout(chatter.AGENTS, defaults={"cap": 0, "attention": attention})
        real.spawn(f"{chatter.WAVE}/main", layout)
        # a system blip alone wakes nobody: the operator's word to main wakes each session once
        hello = op.post(chat.wavelets["main"], "everyone: the chatter starts now; listen only.").id
        real.wait(lambda: woken(real, hello), "the idle fleet's first wakes", timeout=300)
        t0 = time.monotonic()
        n = 0

        def pace() -> None:  # paced: --rate posts per second
            nonlocal n
            n += 1
            if (pause := t0 + n / args.rate - time.monotonic()) > 0:
                time.sleep(pause)

        after = pace if arrival == "paced" else None
        chatter.run(op, chat, args.blips, seed=args.seed, addressed=args.addressed, after=after)
        real.wait(lambda: caught_up(real, op, chat), "every session caught up", timeout=1800)
        turns = real.model.requests()
        return Run(
            per={who: stats(real.model.requests(who)) for who in chatter.AGENTS},
            seconds=time.monotonic() - t0,
            posted=len(chat.posted),
            instructed=sum(r.contains("# MCP Server Instructions") for r in turns),
            turns=len(turns),
            identified=sum(r.contains(f"You are {r.participant}") for r in turns),
        )


def table(arrival: str, full: Run, targeted: Run) -> None:
    print(
        f"\n{arrival}: caught up {full.seconds:.0f} s after the first post (full), {targeted.seconds:.0f} s"
        " (targeted; a digest with nothing in full beside it is held up to 30 s)"
    )
    head = f"{'wakes':>7}{'request bytes':>15}{'new bytes':>13}{'new/wake':>10}"
    print(f"{'':<7}{'--- full':<45}{'--- targeted'}")
    print(f"{'who':<7}{head}   {head}   targeted/full new bytes")
    for who in chatter.AGENTS:
        cells = []
        for s in (full.per[who], targeted.per[who]):
            wake_new = s.new[1:]  # the first request is the idle session's first wake
            mean = statistics.mean(wake_new) if wake_new else 0
            cells.append(f"{s.wakes:>7}{s.total:>15,}{sum(wake_new):>13,}{mean:>10,.0f}")
        f_new, t_new = sum(full.per[who].new[1:]), sum(targeted.per[who].new[1:])
        ratio = f"{t_new / f_new:.1%}" if f_new else "-"
        print(f"{who:<7}{cells[0]}   {cells[1]}   {ratio}")
    for name, run in (("full", full), ("targeted", targeted)):
        print(
            f"  {name}: {run.instructed} of {run.turns} requests carried the MCP server instructions,"
            f" {run.identified} named their participant"
        )


def breakdown(req: Request) -> str:
    body = req.body or {}
    tools = len(json.dumps(body.get("tools") or []).encode())
    system = len(json.dumps(body.get("system") or []).encode())
    messages = body.get("messages") or []
    msg = len(json.dumps(messages).encode())
    sys_msgs = len(json.dumps([m for m in messages if m.get("role") == "system"]).encode())
    return (
        f"{req.size:,} bytes: tools {tools:,} ({len(body.get('tools') or [])} tools), system {system:,}, "
        f"messages {msg:,} (of which role=system {sys_msgs:,}); "
        f"MCP instructions {'present' if req.contains('# MCP Server Instructions') else 'absent'}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blips", type=int, default=300)
    ap.add_argument("--addressed", type=float, default=0.10, help="share of blips that name bob")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--rate", type=float, default=5.0, help="posts per second in the paced run")
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="fleet-bench-tokens-"))
    runs = {(arrival, mode): one(root, mode, arrival, args) for arrival in ARRIVALS for mode in MODES}
    posted = runs["burst", "full"].posted
    print(f"tokens bench: {posted} chatter blips through five real Claude Code {CLAUDE} sessions per mode")
    print(f"burst: posted as fast as the daemon takes them; paced: {args.rate:g} posts/s")
    for arrival in ARRIVALS:
        table(arrival, runs[arrival, "full"], runs[arrival, "targeted"])
    first = runs["burst", "full"].per["alice"].first
    if first is not None:
        print("\nfirst request of an idle fleet session (alice, woken by the operator's first blip):")
        print(f"  {breakdown(first)}")
    print("new bytes exclude each participant's first request; bytes are the raw request bodies")


CLAUDE = "2.1.332"

if __name__ == "__main__":
    main()
