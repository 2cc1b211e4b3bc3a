"""Permission prompts benchmark: fleet's PermissionRequest hook against a real daemon (docs/permissions.md).

Prints, over ``--rounds`` prompts (p50 / p99 / max):

- **prompt -> status says waiting**: from starting the hook process, as Claude Code does when it shows
  its dialog (``python -m fleet.permissions`` with the PermissionRequest JSON on its stdin), until
  the request is in the pending list ``fleet status`` reads (target p99 <= 1 s);
- **approve -> the hook's answer**: from starting ``fleet approve`` until the hook has printed the
  decision Claude Code acts on (the tool runs as Claude Code reads it: the real-Claude test
  ``tests/real/test_permissions_real.py`` shows that part);
- **the hook's CPU per prompt** (user + system of the hook process, start-up included), beside the
  CPU of a bare ``python -c pass`` and of ``python -m fleet --version`` in the same run (baselines).

With ``--claude N``, also N prompts of a real Claude Code session (the pinned binary over the
scripted model of ``tests/``, ``permission_mode = "default"``): **prompt -> status says waiting**
from the scripted model receiving the request it answers with the tool call (so the answer's
streaming, Claude Code's permission check and its dialog come first) to the request being pending,
and **fleet approve -> the tool runs** from starting ``fleet approve`` until the tool's result is in
the session's transcript.

With ``--codex N``, N prompts of a real Codex session (the pinned codex-cli 0.169.0 over the same
scripted model's Responses dialect, its folder trusted): each a command the model asks to run
outside Codex's sandbox, which Codex hands to fleet's hook before any dialog. **prompt -> status
says waiting** from the scripted model receiving the request it answers with that call, and
**fleet approve -> the command runs** from starting ``fleet approve`` until the command's file exists.

Run: ``python bench/permissions.py [--rounds N] [--claude N] [--codex N]``. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path

from fleet.client import Client
from fleet.daemon import Daemon
from fleet.paths import get_paths


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def child_cpu(argv: list[str], stdin: bytes = b"", env: dict[str, str] | None = None) -> float:
    """CPU seconds (user + system) of one process run to its end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, input=stdin, env=env, capture_output=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def prompt(session: str, i: int) -> bytes:
    return json.dumps(
        {
            "session_id": session, "transcript_path": "", "cwd": "/tmp", "prompt_id": str(uuid.uuid4()),
            "permission_mode": "default", "hook_event_name": "PermissionRequest", "tool_name": "Bash",
            "tool_input": {"command": f"touch marker-{i}", "description": "bench"},
        }
    ).encode()  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--claude", type=int, default=0, metavar="N", help="Also N prompts of real Claude Code.")
    ap.add_argument("--codex", type=int, default=0, metavar="N", help="Also N prompts of the real Codex CLI.")
    args = ap.parse_args()
    if args.claude:
        with tempfile.TemporaryDirectory() as tmp:
            real_claude(Path(tmp), args.claude)
    if args.codex:
        with tempfile.TemporaryDirectory() as tmp:
            real_codex(Path(tmp), args.codex)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["FLEET_HOME"] = tmp
        daemon = Daemon(get_paths(), listen="127.0.0.1:0")
        daemon.start()
        try:
            run(daemon, Path(tmp), args.rounds)
        finally:
            daemon.stop()


def run(daemon: Daemon, tmp: Path, rounds: int) -> None:
    op = Client(daemon.url, daemon.operator_token)
    op.create_wave("bench", ["alice"])
    token = tmp / "alice.token"
    token.write_text(op.mint_token("bench", "alice").token + "\n")
    env = {**os.environ, "FLEET_DAEMON": daemon.url, "FLEET_TOKEN": daemon.operator_token}
    hook = [sys.executable, "-m", "fleet.permissions", "--participant", "alice", "--wave", "bench",
            "--daemon", daemon.url, "--token-file", str(token)]  # fmt: skip
    session = str(uuid.uuid4())
    shown, answered, cpu = [], [], []
    for i in range(rounds):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.Popen(hook, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(prompt(session, i))
        proc.stdin.close()
        while not op.permissions("bench", "alice", pending=True):
            time.sleep(0.002)
        shown.append(time.perf_counter() - t0)
        t1 = time.perf_counter()
        approve = subprocess.run([sys.executable, "-m", "fleet", "approve", "bench", "alice"], env=env,
                                 capture_output=True, check=False)  # fmt: skip
        out = proc.stdout.read()
        proc.wait()
        answered.append(time.perf_counter() - t1)
        assert approve.returncode == 0 and b'"allow"' in out, (approve.stderr, out)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        both = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        cpu.append(both)  # the hook's and the approve's: the approve's is taken out below
    # a refused approve (nothing waits): the same start-up and one request, to take out of each round
    approve_cpu = [child_cpu([sys.executable, "-m", "fleet", "approve", "bench", "alice"], env=env)
                   for _ in range(5)]  # fmt: skip
    hook_cpu = [c - pct(approve_cpu, 50) for c in cpu]
    # a hook left waiting: what each second of the wait costs (the transcript looked at 5 times a second)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(hook, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdin is not None
    proc.stdin.write(prompt(session, rounds))
    proc.stdin.close()
    waited = 10.0
    time.sleep(waited)  # the wait itself is what is measured
    subprocess.run([sys.executable, "-m", "fleet", "approve", "bench", "alice"], env=env, capture_output=True)
    proc.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    long_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    per_second = max(0.0, long_cpu - pct(cpu, 50)) / waited
    bare = [child_cpu([sys.executable, "-c", "pass"]) for _ in range(10)]
    cli = [child_cpu([sys.executable, "-m", "fleet", "--version"]) for _ in range(10)]

    def line(name: str, xs: list[float], unit: float = 1000.0, suffix: str = "ms") -> None:
        print(f"{name:<44} p50 {pct(xs, 50) * unit:7.1f} {suffix}  p99 {pct(xs, 99) * unit:7.1f} {suffix}"
              f"  max {max(xs) * unit:7.1f} {suffix}")  # fmt: skip

    print(f"permission prompts, {rounds} rounds (one agent, a real daemon on {daemon.url})")
    line("prompt -> status says waiting", shown)
    line("fleet approve -> the hook's answer", answered)
    line("hook CPU per prompt (user+sys)", hook_cpu)
    print(f"{'hook CPU per second of waiting':<44} {per_second * 1000:7.2f} ms/s")
    line("  baseline: python -c pass", bare)
    line("  baseline: python -m fleet --version", cli)


def real_claude(tmp: Path, rounds: int) -> None:
    """The same figures through a real Claude Code session (see the module docstring)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import libtmux
    from conftest import TMUX_CONF
    from realclaude import RealFleet
    from scripted_model import Script, call, on_message, rule, say, steps

    home = tmp / "home"
    home.mkdir()
    os.environ.update(FLEET_HOME=str(tmp / "fleet"), HOME=str(home), SHELL="/bin/sh")
    for var in ("FLEET_DAEMON", "FLEET_TOKEN", "FLEET_WAVE", "TMUX", "TMUX_PANE"):
        os.environ.pop(var, None)
    words = [f"w{i}" for i in range(rounds)]
    script = Script({"alice": [rule(on_message(author="operator", contains=f"alice: {w}."),
                                    steps(call("Bash", {"command": f"touch {w}", "description": w}), say(w)))
                               for w in words]})  # fmt: skip
    daemon = Daemon(get_paths(), listen="127.0.0.1:0")
    daemon.start()
    conf = tmp / "tmux.conf"
    conf.write_text(TMUX_CONF)
    srv = libtmux.Server(socket_name=f"fleet-bench-{uuid.uuid4().hex[:8]}", config_file=str(conf))
    op = Client(daemon.url, daemon.operator_token)
    real = RealFleet(tmp, get_paths(), op, srv, channels=True, script=script)
    shown, ran = [], []
    try:
        op.create_wave("w", ["alice"])
        real.spawn("w/main", real.layout(["alice"], defaults={"permission_mode": "default"}))
        main = op.resolve("w/main").id

        def requests_past(n: int) -> bool:
            return len(real.requests("alice")) > n

        for w in words:
            asked = len(real.requests("alice"))
            op.post(main, f"alice: {w}.")
            real.wait(partial(requests_past, asked), "the model's tool call")
            t0 = time.perf_counter()
            real.wait(lambda: op.permissions("w", pending=True), "the pending request", timeout=10)
            shown.append(time.perf_counter() - t0)
            t1 = time.perf_counter()
            done = real.fleet("approve", "w", "alice")
            assert done.returncode == 0, done.stderr

            def result(word: str = w) -> bool:
                t = real.transcript("alice")
                ids = {u.id for u in t.tool_uses("Bash") if u.input.get("command") == f"touch {word}"}
                return any(r.tool_use_id in ids for r in t.tool_results())

            real.wait(result, "the tool's result in the transcript")
            ran.append(time.perf_counter() - t1)
            real.wait(partial(requests_past, asked + 1), "the turn's end")
    finally:
        real.close()
        daemon.stop()
    print(f"real Claude Code {real.claude}, {rounds} prompts (channels registered)")
    for name, xs in (("prompt -> status says waiting", shown), ("fleet approve -> the tool runs", ran)):
        print(f"{name:<44} p50 {pct(xs, 50) * 1000:7.1f} ms  p99 {pct(xs, 99) * 1000:7.1f} ms"
              f"  max {max(xs) * 1000:7.1f} ms")  # fmt: skip
    print()


def real_codex(tmp: Path, rounds: int) -> None:
    """The same figures through a real Codex session (see the module docstring)."""
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parent / "tests")]
    from realcodex import mixed_layout, pinned_codex
    from realworld import real_world
    from scripted_model import Call, Script, ToolCall, on_message, rule

    codex = pinned_codex()
    escalated = Call((ToolCall("exec_command", {
        "cmd": "touch {text}", "sandbox_permissions": "require_escalated", "justification": "bench",
    }),))  # fmt: skip
    script = Script({"bob": [rule(on_message(author="operator"), escalated)]})
    shown, ran = [], []
    with real_world(tmp, channels=True, script=script) as real:
        real.op.create_wave("w", ["bob"])
        real.spawn("w/main", mixed_layout(real, codex, {"bob": "codex"}), "--trust")
        main = real.op.resolve("w/main").id

        def idle() -> bool:
            rows = {p.participant: p for p in real.op.presence("w")}
            return (
                rows.get("bob") is not None
                and rows["bob"].agent is not None
                and rows["bob"].agent.kind == "idle"
            )

        def asked_for(marker: Path) -> bool:  # the request the model answers with the call
            return any(r.contains(str(marker)) for r in real.requests("bob"))

        real.wait(idle, "bob idle after its first turn", timeout=90)
        for i in range(rounds):
            marker = tmp / f"escalated-{i}"  # outside the workspace: the sandbox would not let it write
            real.op.post(main, str(marker))
            real.wait(partial(asked_for, marker), "the model's call", timeout=60)
            t0 = time.perf_counter()
            real.wait(lambda: real.op.permissions("w", pending=True), "the pending request", timeout=30)
            shown.append(time.perf_counter() - t0)
            t1 = time.perf_counter()
            done = real.fleet("approve", "w", "bob")
            assert done.returncode == 0, done.stderr
            real.wait(marker.exists, "the command ran", timeout=30)
            ran.append(time.perf_counter() - t1)
            real.wait(idle, "the turn's end", timeout=60)
    print(f"real Codex {codex}, {rounds} prompts (its PermissionRequest hook, trusted inline)")
    for name, xs in (("prompt -> status says waiting", shown), ("fleet approve -> the command runs", ran)):
        print(f"{name:<44} p50 {pct(xs, 50) * 1000:7.1f} ms  p99 {pct(xs, 99) * 1000:7.1f} ms"
              f"  max {max(xs) * 1000:7.1f} ms")  # fmt: skip
    print()


if __name__ == "__main__":
    main()
