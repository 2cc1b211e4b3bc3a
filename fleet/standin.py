"""The scripted stand-in agent: fleet exercised without a language model.

It takes the same command line as ``claude`` (``--mcp-config=JSON`` (repeatable),
``--dangerously-load-development-channels=server:fleet``, ``--session-id``/``--resume``, ``--name``,
``--model``, ``--permission-mode``, ``--settings``, …), starts the ``fleet`` MCP server exactly as
its ``--mcp-config`` says, completes the MCP handshake as a real client, and then acts on channel
notifications by a script instead of by judgement:

- ``--opening TEXT``: post TEXT into ``--opening-wavelet`` (default: ``$FLEET_WAVELET``, the
  wavelet spawn launched it for) once, when a fresh session starts (not on ``--resume``).
- ``--reply TEXT``: when a ``message`` blip from someone else names this participant, answer it in
  the same wavelet. TEXT may use ``{author}``, ``{name}``, ``{n}`` (the reply number).
- ``--write PATH=TEXT`` (repeatable): write TEXT to PATH (relative to the pane's cwd; ``{name}``
  expanded in both) once the handshake is done, as an agent editing its checkout would.
- ``--turns N``: after N replies, post one ``DONE: …`` blip (``--done TEXT``) and go silent.
- ``--run CMD`` (repeatable): run CMD with ``/bin/sh`` in the pane's cwd once the handshake (and
  ``--write``) is done, as an agent's Bash tool would (``CLAUDE_CODE_SESSION_ID`` set to its
  session); its output goes to the terminal. With ``--exit-after-run`` the stand-in then exits (with
  1 if a command failed): a session that ends, which a campaign loop settles by its pane's exit
  (``fleet demo campaign``).
- ``--mind LAYOUT``: play a wave's resident by a script (``fleet demo resident``). An ``operator``
  message naming it in the wave's main wavelet is a job: it forks ``job-N`` with ``--workers``
  (default ``worker``) and ``spawn`` LAYOUT, and tells the operator. A worker's ``DONE: …`` is
  reported to the operator in main (once a job). Lines typed into its terminal that start with
  ``[fleet]`` (the resident keeper's heartbeat and cron lines) are read from stdin: a heartbeat asks
  the workers of every job not done how it goes (naming them); a cron due is acknowledged to the
  operator.

It never answers ``system``, ``surface`` or ``cap`` blips (the prompt contract). Everything it does
goes to its terminal (the tmux pane) and, one JSON line per event, to
``<fleet state dir>/standin/<name>.jsonl`` (its exact argv first), which tests and ``fleet demo``
read. Run it as ``fleet-standin`` in a layout or ``--agent`` (spawn resolves that to this module).
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import logging
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fleet.paths import get_paths

log = logging.getLogger(__name__)

PROTOCOL = "2025-11-25"


class StandinError(Exception):
    pass


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fleet-standin", add_help=True, allow_abbrev=False)
    # claude's flags (the ones fleet passes; anything else is accepted and ignored)
    p.add_argument("--mcp-config", action="append", default=[])
    p.add_argument("--dangerously-load-development-channels", action="append", default=[])
    p.add_argument("--session-id")
    p.add_argument("--resume", "-r")
    p.add_argument("--fork-session", action="store_true")
    p.add_argument("--name", "-n")
    p.add_argument("--model")
    p.add_argument("--permission-mode")
    p.add_argument("--settings")
    p.add_argument("--strict-mcp-config", action="store_true")
    # the script
    p.add_argument("--opening")
    p.add_argument("--opening-wavelet")
    p.add_argument("--reply")
    p.add_argument("--turns", type=int, default=1)
    p.add_argument("--done", default="DONE: {name} is finished.")
    p.add_argument("--exit-after-done", action="store_true", help="exit 0 once DONE is posted")
    p.add_argument("--log-dir")
    p.add_argument("--run", action="append", default=[], metavar="CMD",
                   help="run CMD with /bin/sh at start (after --write)")  # fmt: skip
    p.add_argument("--exit-after-run", action="store_true", help="exit once the --run commands are done")
    p.add_argument("--mind", metavar="LAYOUT", help="play a wave's resident, dispatching with LAYOUT")
    p.add_argument("--workers", default="worker", help="--mind: the participants of each job (comma list)")
    p.add_argument("--write", action="append", default=[], metavar="PATH=TEXT",
                   help="write TEXT ({name} expanded) to PATH (relative to the cwd) at start")  # fmt: skip
    args, unknown = p.parse_known_args(argv)
    args.unknown = unknown
    return args


class Recorder:
    """One JSON line per event in the stand-in's log, and a readable line on its terminal."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()

    def __call__(self, event: str, show: str | None = None, **data: Any) -> None:
        line = json.dumps({"t": time.time(), "event": event, **data}, default=str)
        with self._lock, self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
        if show:
            print(show, flush=True)


class McpClient:
    """A minimal MCP client over a child's stdio: requests, responses, and notification callbacks."""

    def __init__(self, argv: list[str], env: dict[str, str], on_notification: Any) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
            encoding="utf-8",
            bufsize=1,
        )
        self._next = 0
        self._pending: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._on_notification = on_notification
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(msg, dict):
                continue
            if "id" in msg and "method" not in msg:
                q = self._pending.pop(msg["id"], None)
                if q is not None:
                    q.put(msg)
            elif "method" in msg and "id" in msg:  # a request from the server (ping)
                self._send({"jsonrpc": "2.0", "id": msg["id"], "result": {}})
            elif "method" in msg:
                self._on_notification(msg["method"], msg.get("params") or {})
        for q in list(self._pending.values()):
            q.put({"error": {"code": -1, "message": "the MCP server closed its stdout"}})

    def _send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        with self._lock:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        with self._lock:
            rid = self._next
            self._next += 1
            q: queue.Queue[dict[str, Any]] = queue.Queue()
            self._pending[rid] = q
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        try:
            reply = q.get(timeout=timeout)
        except queue.Empty:
            raise StandinError(f"{method}: no answer from the MCP server in {timeout}s") from None
        if "error" in reply:
            raise StandinError(f"{method}: {reply['error'].get('message')}")
        result: dict[str, Any] = reply["result"]
        return result

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        self._send({"jsonrpc": "2.0", "method": method, **({"params": params} if params else {})})

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def fleet_server(configs: list[str]) -> dict[str, Any]:
    """The ``fleet`` entry of the inline ``--mcp-config`` values (as Claude Code reads them)."""
    for raw in configs:
        try:
            data = json.loads(raw.strip())
        except json.JSONDecodeError:
            data = json.loads(Path(raw).read_text(encoding="utf-8"))
        servers = data.get("mcpServers", {}) if isinstance(data, dict) else {}
        if "fleet" in servers:
            entry: dict[str, Any] = servers["fleet"]
            return entry
    raise StandinError("no `fleet` server in --mcp-config")


def hook_commands(settings: str | None) -> list[str]:
    """The asyncRewake command hooks of ``--settings`` (SessionStart first, then Stop)."""
    if not settings:
        return []
    data = json.loads(settings)
    out = []
    for event in ("SessionStart", "Stop"):
        for matcher in data.get("hooks", {}).get(event, []):
            for h in matcher.get("hooks", []):
                if h.get("type") == "command" and h.get("asyncRewake"):
                    out.append(h["command"])
    return out


class Agent:
    def __init__(self, args: argparse.Namespace, record: Recorder) -> None:
        self.args = args
        self.name: str = args.name or "agent"
        self.record = record
        self.replies = 0
        self.done = False
        self.inbox: queue.Queue[tuple[str, dict[str, str]]] = queue.Queue()
        self.mention = re.compile(
            rf"(?<![\w-]){re.escape(self.name)}(?![\w-])|\[\[{re.escape(self.name)}\]\]", re.I
        )
        self.client: McpClient | None = None
        self.hooks: set[subprocess.Popen[str]] = set()
        """The hook commands running now (ended with the agent)."""
        self.jobs: dict[str, bool] = {}
        """``--mind``: the wavelets it forked for jobs (WAVE/job-N) and whether each reported DONE."""

    def on_notification(self, method: str, params: dict[str, Any]) -> None:
        if method != "notifications/claude/channel":
            return
        content = _undefuse(str(params.get("content", "")))
        meta = {str(k): str(v) for k, v in (params.get("meta") or {}).items()}
        self.record(
            "notification",
            f"← fleet [{meta.get('author', '?')}]: {content[:200]}",
            content=content,
            meta=meta,
        )
        self.inbox.put((content, meta))

    def post(self, wavelet: str, text: str) -> None:
        assert self.client is not None
        res = self.client.request(
            "tools/call", {"name": "wavelet_post", "arguments": {"wavelet": wavelet, "text": text}}
        )
        ok = not res.get("isError")
        self.record(
            "post",
            f"→ {wavelet}: {text}" if ok else f"✗ post failed: {res}",
            wavelet=wavelet,
            text=text,
            ok=ok,
        )

    def call(self, tool: str, arguments: dict[str, Any]) -> str:
        """A fleet tool's text answer; StandinError when it says isError."""
        assert self.client is not None
        res = self.client.request("tools/call", {"name": tool, "arguments": arguments}, timeout=120.0)
        text = " ".join(str(c.get("text", "")) for c in res.get("content", []) if isinstance(c, dict))
        if res.get("isError"):
            raise StandinError(f"{tool}: {text}")
        return text

    def act_as_mind(self, content: str, meta: dict[str, str]) -> None:
        """``--mind``: a job from the operator, a worker's DONE, both in the module docstring."""
        wavelet = meta.get("wavelet", "")
        wave, _, name = wavelet.partition("/")
        main = f"{wave}/main"
        if meta.get("kind") != "message" or meta.get("author") == self.name:
            return
        if content.startswith("DONE:") and wavelet in self.jobs:
            if self.jobs[wavelet]:
                return  # reported already: the operator hears of each job once
            self.jobs[wavelet] = True
            self.post(main, f"operator: {wavelet} is done. {meta.get('author')} reports: {content}")
            return
        if name == "main" and meta.get("author") == "operator" and self.mention.search(content):
            job = f"job-{len(self.jobs) + 1}"
            workers = [w.strip() for w in self.args.workers.split(",") if w.strip()]
            said = self.call(
                "wavelet_fork",
                {"wavelet": main, "name": job, "with": workers, "spawn": self.args.mind},
            )
            self.record("dispatched", f"dispatched {wave}/{job}: {said.splitlines()[-1]}", job=job)
            self.jobs[f"{wave}/{job}"] = False
            self.post(
                main, f"operator: on it. I forked {wave}/{job} and dispatched it to {', '.join(workers)}."
            )

    def typed(self, line: str) -> None:
        """``--mind``: a line typed into its terminal by fleet's scheduler."""
        text = line.removeprefix("[fleet]").strip()
        self.record("typed", f"⌨ {line}", text=text)
        if not self.jobs and text.startswith("heartbeat"):
            return
        wave = next(iter(self.jobs), "/").split("/")[0] or os.environ.get("FLEET_WAVE", "")
        if text.startswith("heartbeat"):
            workers = ", ".join(w.strip() for w in self.args.workers.split(",") if w.strip())
            for job, done in self.jobs.items():
                if not done:
                    self.post(job, f"{workers}: heartbeat from the resident: how is it going?")
        elif text.startswith("cron due:") and wave:
            self.post(f"{wave}/main", f"operator: {text.split(';')[0]} (noted by the stand-in mind)")

    def read_terminal(self) -> None:
        """``--mind``: the ``[fleet]`` lines typed into the pane, each acted on like a blip."""
        for line in sys.stdin:
            if line.strip().startswith("[fleet]"):
                self.inbox.put((line.strip(), {"kind": "typed"}))

    def run_commands(self) -> bool:
        """``--run``: each command in turn; whether they all exited 0."""
        ok = True
        for cmd in self.args.run:
            print(f"$ {cmd}", flush=True)
            env = {**os.environ, "CLAUDE_CODE_SESSION_ID": self.args.session_id or self.args.resume or ""}
            proc = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, env=env)
            out = (proc.stdout + proc.stderr).strip()
            if out:
                print(out, flush=True)
            self.record("ran", f"exit {proc.returncode}", command=cmd, rc=proc.returncode, output=out[-2000:])
            ok = ok and proc.returncode == 0
        return ok

    def act(self, content: str, meta: dict[str, str]) -> None:
        if meta.get("kind") == "typed":
            self.typed(content)
            return
        if self.args.mind:
            self.act_as_mind(content, meta)
            return
        if self.done or meta.get("kind") != "message" or meta.get("author") == self.name:
            return
        if not self.args.reply or not self.mention.search(content):
            return
        wavelet = meta.get("wavelet") or meta.get("wavelet_id", "")
        self.replies += 1
        self.post(
            wavelet, self.args.reply.format(author=meta.get("author", ""), name=self.name, n=self.replies)
        )
        if self.replies >= self.args.turns:
            self.post(wavelet, self.args.done.format(name=self.name, author=meta.get("author", "")))
            self.done = True
            self.record("done", f"{self.name}: DONE")

    def run_hooks(self, commands: list[str]) -> None:
        """Emulate asyncRewake: arm the hook; exit 2 = a wake (its stderr is the turn's input); when
        that turn is over, the Stop hook arms again. Any other exit ends the arming, as in Claude Code."""

        def loop(cmd: str) -> None:
            while True:
                proc = self.hook(cmd)
                self.record("hook", None, command=cmd, rc=proc.returncode, stderr=proc.stderr[-2000:])
                if proc.returncode != 2:
                    self.record("unarmed", f"hook exited {proc.returncode}: not armed until the next turn")
                    return
                self.record("wake", f"● Stop hook feedback: {proc.stderr.strip()[:300]}", text=proc.stderr)
                for block in _hook_blips(proc.stderr):
                    self.inbox.put(block)
                self.inbox.join()  # the turn: every woken blip acted on; then Stop re-arms

        for cmd in commands[:1]:  # one arm at a time, like a session re-arming its Stop hook
            threading.Thread(target=loop, args=(cmd,), daemon=True).start()

    def hook(self, cmd: str) -> subprocess.CompletedProcess[str]:
        """Run one hook command to its end (given ``{}`` on stdin), as one the agent ends with it."""
        with subprocess.Popen(
            ["/bin/sh", "-c", cmd],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as proc:
            self.hooks.add(proc)
            try:
                out, err = proc.communicate("{}")
            finally:
                self.hooks.discard(proc)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def close(self) -> None:
        """End what the agent started: its hooks, and its MCP server (stdin closed, as Claude Code
        does at exit), waiting for it."""
        self.abandon()
        if self.client is not None:
            self.client.close()

    def abandon(self) -> None:
        """Tell what the agent started to end, without waiting: its hooks are terminated, its MCP
        server's stdin closed (it ends on its own)."""
        for proc in list(self.hooks):
            with contextlib.suppress(OSError):
                proc.terminate()
        if self.client is not None and self.client.proc.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                self.client.proc.stdin.close()

    def run(self) -> int:
        try:
            return self._run()
        finally:
            self.close()

    def _run(self) -> int:
        args = self.args
        entry = fleet_server(args.mcp_config)
        env = {**os.environ, **{str(k): str(v) for k, v in (entry.get("env") or {}).items()}}
        session = args.session_id or args.resume or ""
        env["CLAUDE_CODE_SESSION_ID"] = session
        argv = [entry["command"], *entry.get("args", [])]
        self.record("spawn-server", None, argv=argv)
        self.client = McpClient(argv, env, self.on_notification)
        self.record("server", None, pid=self.client.proc.pid)
        init = self.client.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL,
                "capabilities": {},
                "clientInfo": {"name": "fleet-standin", "version": "1"},
            },
        )
        hooks = hook_commands(args.settings)
        self.client.notify("notifications/initialized")
        tools = [t["name"] for t in self.client.request("tools/list", {})["tools"]]
        self.record(
            "ready",
            f"fleet stand-in {self.name} ready (session {session}, protocol {init.get('protocolVersion')},"
            f" {len(tools)} tools{', hook transport' if hooks else ''})",
            protocol=init.get("protocolVersion"),
            tools=tools,
            instructions=init.get("instructions", ""),
        )
        if hooks:
            self.run_hooks(hooks)
        for spec in args.write:
            rel, _, text = spec.partition("=")
            target = Path(rel.format(name=self.name)).resolve()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text.format(name=self.name) + "\n")
            self.record("wrote", f"wrote {target}", path=str(target))
        if args.opening and not args.resume:
            where = args.opening_wavelet or os.environ.get("FLEET_WAVELET") or "main"
            self.post(where, args.opening.format(name=self.name))
        if args.run and not args.resume:
            ok = self.run_commands()
            if args.exit_after_run:
                return 0 if ok else 1
        if args.mind:
            threading.Thread(target=self.read_terminal, daemon=True).start()
        while True:
            content, meta = self.inbox.get()
            try:
                self.act(content, meta)
            except StandinError as exc:
                self.record("error", f"✗ {exc}", error=str(exc))
            finally:
                self.inbox.task_done()
            if self.done and args.exit_after_done:
                return 0


_CHANNEL_TAG = re.compile(r'<channel source="fleet"((?: [a-z_]+="[^"]*")*)>\n(.*?)\n</channel>', re.S)
_ATTR = re.compile(r' ([a-z_]+)="([^"]*)"')


_DEFUSED = re.compile(r"<\\(\s*/?\s*channel)", re.IGNORECASE)


def _undefuse(text: str) -> str:
    """A blip's text as written: :func:`fleet.delivery.frames.defuse` undone."""
    return _DEFUSED.sub(r"<\1", text)


def _hook_blips(text: str) -> list[tuple[str, dict[str, str]]]:
    """Blips from ``fleet watch --hook``'s stderr: its ``<channel source="fleet" …>`` blocks, read back
    the way the model reads them (attributes unescaped, ``<\\/channel`` restored) as (content, meta)."""
    out = []
    for m in _CHANNEL_TAG.finditer(text):
        meta = {k: html.unescape(v) for k, v in _ATTR.findall(m[1])}
        out.append((_undefuse(m[2]), meta))
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    name = args.name or "agent"
    log_dir = Path(args.log_dir) if args.log_dir else get_paths().state / "standin"
    record = Recorder(log_dir / f"{name}.jsonl")
    record(
        "start",
        f"fleet stand-in agent {name}: {shlex.join(sys.argv[1:])[:300]}",
        argv=sys.argv[1:],
        pid=os.getpid(),
    )
    agent = Agent(args, record)

    def ended(signum: int, _frame: object) -> None:
        agent.abandon()
        os._exit(128 + signum)

    # its terminal gone (SIGHUP) or told to stop: it ends, as Claude Code does — even started with
    # hang-ups ignored (nohup), so nothing runs on without a terminal — and at once, as the default
    # action did: what it started is told to end, not waited for (tmux 3.3a may hold a respawned
    # pane's exit status until its next child ends, and this process is one)
    for sig in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, ended)
    try:
        return agent.run()
    except (StandinError, OSError, KeyError, json.JSONDecodeError) as exc:
        record("fatal", f"fleet-standin: {exc}", error=str(exc))
        print(f"fleet-standin: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
