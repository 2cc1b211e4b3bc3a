"""Targeted vs full attention: what reaches one participant of a chatty wave, in bytes and frames.

Runs a real daemon (``fleet daemon run``) and, for the participant ``bob``, three real ``fleet
channel`` processes side by side on different state dirs (so all deliver): ``--attention full``,
``--attention targeted`` (with the default digest hold) and ``--attention targeted --digest-hold 0``,
all ``--cap 0`` (the cap is not what is measured). The wave gets the scripted chatter of
``tests/chatter.py``: five agents and the operator; about 10 % of blips name bob, 4 % are the
operator's, 3 % are surfaces; agent prose of 200 to 1,500 characters. Counted for each channel:
notification frames, wire bytes (the JSON-RPC lines on stdout) and model bytes (the ``<channel …>``
text Claude Code puts in the context, claude-code.md §2), and the ratios against full. The target
(issue 4): targeted <= 25 % of full bytes. It asserts nothing.

Three ways the blips arrive, since digests batch per feed: ``burst`` (everything posted before the
channels start: a few large batches), ``live`` (posted at --rate per second while they run) and
``paced`` (one blip at a time, each read by every channel before the next; without the hold, a
digest frame per digested blip: the worst case). A run ends when every channel has delivered
everything, so a held digest's last wait (up to 30 s) is part of it.

    python bench/attention.py [--blips 300] [--addressed 0.10] [--rate 20] [--seed 4]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

import chatter  # noqa: E402  (tests/chatter.py: the scenario the tests run)
from delivery import start_daemon  # noqa: E402  (bench/delivery.py)
from mcphelp import RawMcp, channel_argv  # noqa: E402

from fleet.client import Client  # noqa: E402

WHO = chatter.FOCUS
MODES = {
    "full": ["--attention", "full"],
    "targeted": ["--attention", "targeted"],  # the default digest hold
    "hold 0": ["--attention", "targeted", "--digest-hold", "0"],
}


def model_text(params: dict[str, Any]) -> str:
    """A notification as the model reads it (Claude Code's wrapChannelMessage)."""
    esc = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;"}
    attrs = "".join(f' {k}="{"".join(esc.get(c, c) for c in v)}"' for k, v in params.get("meta", {}).items())
    body = params["content"].replace("</channel", "<\\/channel")
    return f'<channel source="fleet"{attrs}>\n{body}\n</channel>'


def measure(proc: RawMcp) -> tuple[int, int, int]:
    """(frames, wire bytes, model bytes) of a channel's notifications so far."""
    frames = wire = model = 0
    for msg in list(proc.messages):
        if msg.get("method") != "notifications/claude/channel":
            continue
        frames += 1
        wire += len(json.dumps(msg, ensure_ascii=True, separators=(",", ":"))) + 1
        model += len(model_text(msg["params"]).encode())
    return frames, wire, model


def wait(pred: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting for the channels to catch up")
        time.sleep(0.01)


class Run:
    """A fresh daemon and wave, and bob's two channels (full and targeted)."""

    def __init__(self, root: Path, name: str) -> None:
        self.home = root / name
        self.home.mkdir()
        self.daemon, url, token = start_daemon(self.home)
        self.url = url
        self.op = Client(url, token)
        self.chat = chatter.setup(self.op)
        tf = self.home / f"{WHO}.token"
        tf.write_text(self.op.mint_token(chatter.WAVE, WHO).token)
        tf.chmod(0o600)
        self.token_file = tf
        self.procs: dict[str, RawMcp] = {}

    def start_channels(self) -> None:
        env = dict(os.environ, FLEET_HOME=str(self.home))
        for mode, extra in MODES.items():
            slug = mode.replace(" ", "-")
            argv = channel_argv(WHO, chatter.WAVE, self.url, self.token_file, "--cap", "0", *extra)
            argv += ["--state-dir", str(self.home / f"state-{slug}")]
            proc = RawMcp(argv, env=env, stderr=self.home / f"{slug}.stderr")
            proc.handshake()
            self.procs[mode] = proc

    def caught_up(self, field: str = "cursor") -> bool:
        """Every channel has handled (``cursor``), or at least read (``seen``: blips held for a
        digest included), every blip of bob's wavelets."""
        want = {
            wid: self.op.read(wid, limit=5000).cursor for n, wid in self.chat.wavelets.items() if n != "side"
        }
        for proc in self.procs.values():
            rows = proc.call("wavelet_ping")["structuredContent"]["delivery"]["wavelets"]
            if {r["wavelet_id"]: r[field] for r in rows if r["wavelet_id"] in want} != want:
                return False
        return True

    def close(self) -> None:
        for proc in self.procs.values():
            proc.close()
        self.daemon.terminate()
        self.daemon.wait(10)


def scenario_stats(run: Run) -> str:
    others = [
        b
        for n, wid in run.chat.wavelets.items()
        if n != "side"
        for b in run.op.read(wid, limit=5000).blips
        if b.author != WHO
    ]
    posted = {p.id: p for p in run.chat.posted}
    addressed = sum(
        1
        for b in others
        if b.id in posted and posted[b.id].full and b.kind == "message" and b.author != "operator"
    )
    op = sum(1 for b in others if b.author == "operator")
    surf = sum(1 for b in others if b.kind == "surface")
    system = sum(1 for b in others if b.kind == "system")
    return (
        f"{len(run.chat.posted)} blips posted; {WHO} is handed {len(others)} blips of others: "
        f"{addressed} name {WHO} ({addressed / len(others):.0%}), {op} from the operator, {surf} surfaces, "
        f"{system} system; full delivery for {(addressed + op + surf) / len(others):.0%}"
    )


def one(how: str, root: Path, args: argparse.Namespace) -> tuple[dict[str, tuple[int, int, int]], str]:
    """Run the scenario one way; returns each mode's (frames, wire bytes, model bytes) and its stats."""
    run = Run(root, how)
    try:

        def post(after: Callable[[], None] | None) -> None:
            chatter.run(run.op, run.chat, args.blips, seed=args.seed, addressed=args.addressed, after=after)

        if how == "burst":
            post(None)
            run.start_channels()
        else:
            run.start_channels()
            wait(run.caught_up)
            t0 = time.monotonic()
            n = 0

            def pace() -> None:
                nonlocal n
                n += 1
                if (pause := t0 + n / args.rate - time.monotonic()) > 0:
                    time.sleep(pause)

            post(pace if how == "live" else lambda: wait(lambda: run.caught_up("seen")))
        wait(run.caught_up)
        return {mode: measure(proc) for mode, proc in run.procs.items()}, scenario_stats(run)
    finally:
        run.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blips", type=int, default=300)
    ap.add_argument("--addressed", type=float, default=0.10, help="share of blips that name bob")
    ap.add_argument("--rate", type=float, default=20.0, help="posts per second in the live run")
    ap.add_argument("--seed", type=int, default=4)
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="fleet-bench-attention-"))
    results = [(how, *one(how, root, args)) for how in ("burst", "live", "paced")]
    print(f"attention bench: {results[0][2]}")
    print("modes: full; targeted (digest hold 30 s, the default); hold 0 (targeted, digests at once)")
    print(f"{'arrival':<8} {'mode':<9} {'frames':>7} {'wire bytes':>11} {'model bytes':>12}   vs full")
    for how, by_mode, _ in results:
        f = by_mode["full"]
        for mode in MODES:
            t = by_mode[mode]
            ratio = "" if mode == "full" else f"   {t[0] / f[0]:.1%} frames, {t[2] / f[2]:.1%} model bytes"
            print(f"{how:<8} {mode:<9} {t[0]:>7} {t[1]:>11,} {t[2]:>12,}{ratio}")
    print("target (issue 4): targeted <= 25% of full bytes")


if __name__ == "__main__":
    main()
