"""Permission prompts answered from anywhere: the records, the preview, and the hook (docs/permissions.md).

A Claude Code session launched with a permission mode that asks (``permission_mode = "default"``)
shows a dialog before a tool it has no grant for. fleet injects a ``PermissionRequest`` hook
(:func:`hook_entry`, merged into the ``--settings`` JSON spawn passes) whose process:

1. reads what Claude Code asks (tool, input, prompt id) from its stdin and records it in the daemon
   (``POST /v1/waves/{wave}/permissions``) with the participant's own token (named by its file);
2. waits, at most :data:`HOOK_WAIT` seconds, for the operator's answer from the daemon (a long-poll
   on the request) while it watches the session's transcript for the dialog being answered in the
   pane (a ``tool_result`` for that very tool call);
3. the operator's answer first: prints Claude Code's decision JSON (allow or deny) and exits 0;
   the pane first: records who answered there (``via = "pane"``) and what (the tool ran, or was
   rejected), prints nothing (the dialog already decided) and exits 0; neither within the bound,
   or the session gone: records the request expired and prints nothing, leaving the dialog to
   decide. It never exits 2 and never blocks the dialog: a hook that prints nothing leaves the
   decision to the dialog (claude-code.md §8).

What a caller may rely on:

- :func:`preview` is what is kept of a tool's input: at most :data:`PREVIEW_MAX` characters, one
  line, control characters shown as ``?``; a Bash call's command, a file tool's path, otherwise the
  input's compact JSON. It is stored and shown as text only: never run through a shell or tmux.
- The hook's wait bound :data:`HOOK_WAIT` is below the ``timeout`` of its settings entry
  (:data:`HOOK_TIMEOUT`), so Claude Code never kills it mid-answer.
- :func:`pending_note` is the one line the channel's tool and ``fleet permissions`` show for a waiting
  participant (``fleet status`` shows the participant's state: ``permission``, from the same record).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from fleet import seams
from fleet.agentstate import json_lines
from fleet.records.permissions import (
    HOOK_WAIT,
    TOOL_MAX,
    Outcome,
    PermissionAsk,
    PermissionRequest,
    PermissionSettled,
    bounded,
    pending_note,
    preview,
)

if TYPE_CHECKING:
    from fleet.client import Client

log = logging.getLogger(__name__)

HOOK_TIMEOUT = int(HOOK_WAIT) + 120
"""The ``timeout`` of the hook's settings entry: past the wait bound plus the time to record the
outcome, so Claude Code never kills the hook in the middle of an answer."""
POLL = 0.2
"""Seconds between two looks at the transcript while the hook waits (a stat, then only new bytes)."""


class _Row(Protocol):
    participant: str
    note: str


R = TypeVar("R", bound=_Row)


# ---------------------------------------------------------------- the settings entry


def hook_command(
    participant: str, wave: str, daemon: str, token_file: Path, *, python: str | None = None,
    notify: bool = False,
) -> str:  # fmt: skip
    """The hook's shell command: every word quoted, the token named by its file only (no secret on
    a command line). ``exec``: the hook is the session's direct child (it notices the session end)."""
    words = [python or sys.executable, "-m", "fleet.permissions",
             "--participant", participant, "--wave", wave, "--daemon", daemon,
             "--token-file", str(token_file)]  # fmt: skip
    if notify:
        words.append("--notify")
    return "exec " + shlex.join(words)


def hook_entry(
    participant: str, wave: str, daemon: str, token_file: Path, *, python: str | None = None,
    notify: bool = False,
) -> dict[str, list[dict[str, Any]]]:  # fmt: skip
    """The ``hooks`` entries (event name -> matchers) that install the permission hook: every tool
    (no matcher), a synchronous command hook with :data:`HOOK_TIMEOUT`."""
    handler = {
        "type": "command",
        "command": hook_command(participant, wave, daemon, token_file, python=python, notify=notify),
        "timeout": HOOK_TIMEOUT,
    }
    return {"PermissionRequest": [{"hooks": [handler]}]}


# ---------------------------------------------------------------- the hook


REJECTED = ("doesn't want to proceed", "tool use was rejected", "was denied")
"""What Claude Code's tool_result says when the dialog's answer was no (2.1.332)."""
TAIL = 1 << 20
"""Bytes of the transcript read back at the hook's start, for the tool call it asks about."""


class TranscriptWatch:
    """Tells when the tool call a prompt is about got its result in the session's transcript: the
    dialog was answered in the pane (allowed: the tool ran; denied: Claude Code's rejection)."""

    def __init__(self, path: str, tool: str, tool_input: object) -> None:
        self.path = Path(path) if path else None
        self.tool, self.input = tool, tool_input
        self._calls: set[str] = set()
        """Ids of tool calls that match the prompt's tool and input."""
        self._answered: set[str] = set()
        """Ids of calls that had their result before the prompt: not this prompt's."""
        self.offset = 0
        self._partial = b""
        if self.path is None:
            return
        try:
            size = self.path.stat().st_size
        except OSError:
            return
        self.offset = max(0, size - TAIL)
        for line in self._read():
            self._calls_in(line)
            self._answered |= {i for i, _o in self._results_in(line)}

    def _read(self) -> list[dict[str, Any]]:
        if self.path is None:
            return []
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        self.offset += len(data)
        out, self._partial = json_lines(self._partial + data)
        return out

    @staticmethod
    def _blocks(line: dict[str, Any], kind: str) -> list[dict[str, Any]]:
        message = line.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            return []
        return [b for b in content if isinstance(b, dict) and b.get("type") == kind]

    def _calls_in(self, line: dict[str, Any]) -> None:
        for b in self._blocks(line, "tool_use"):
            if b.get("name") == self.tool and b.get("input") == self.input and isinstance(b.get("id"), str):
                self._calls.add(b["id"])

    def _results_in(self, line: dict[str, Any]) -> list[tuple[str, Outcome]]:
        out: list[tuple[str, Outcome]] = []
        for b in self._blocks(line, "tool_result"):
            text = json.dumps(b.get("content"), ensure_ascii=False)
            rejected = bool(b.get("is_error")) and any(r in text for r in REJECTED)
            out.append((str(b.get("tool_use_id")), "denied" if rejected else "allowed"))
        return out

    def outcome(self) -> Outcome | None:
        """``allowed`` or ``denied`` once the pane answered this prompt; None while it has not."""
        for line in self._read():
            self._calls_in(line)
            for call, outcome in self._results_in(line):
                if call in self._calls and call not in self._answered:
                    return outcome
        return None


WAITING_OPTION = "@fleet_waiting"
"""The tmux window option set while an agent in the window waits at a prompt (``permission: TOOL``):
``#{?@fleet_waiting,!,}`` in ``window-status-format`` shows it (docs/permissions.md)."""
PANE_OPTION = "@fleet_waiting_pane"
"""The same, on the waiting pane (a pane option of its own name: a pane's format would otherwise
see the window's value), so the window's flag stays while another of its panes still waits."""
_SAFE = re.compile(r"[^A-Za-z0-9_.:-]")
FLAG_PREFIX = "permission: "
"""What this waiter's flag value starts with (a dialog's is ``dialog: ``, fleet/tmux.py
``flag_window``): each waiter clears only a flag it set."""


def flag_window(waiting: str | None, *, env: dict[str, str] | None = None, notify: str = "") -> None:
    """Flag (``waiting``: the tool's name) or clear (None) the tmux window of the pane this process
    runs in, and ring the pane's bell when flagging (tmux's ``monitor-bell`` marks the window). With
    ``notify`` (a line to show) and ``notify-send`` installed, a desktop notification too.

    The tmux command line itself, not libtmux: a hook is a process per prompt, and importing libtmux
    costs it about 80 ms of CPU. Nothing given is format-expanded: the value is the tool's name with
    anything but ``[A-Za-z0-9_.:-]`` removed. Outside tmux (no ``TMUX_PANE``) only the notification
    is sent. Failures are logged, never raised: the prompt is what matters."""
    import shutil
    import subprocess

    env = dict(os.environ if env is None else env)
    pane, socket = env.get("TMUX_PANE", ""), env.get("TMUX", "").split(",", 1)[0]
    tmux = shutil.which("tmux")

    def run(*args: str) -> str:
        assert tmux is not None
        done = subprocess.run([tmux, "-S", socket, *args], capture_output=True, text=True, timeout=5, env=env)
        return done.stdout.strip()

    try:
        if pane and socket and tmux:
            if waiting is None:
                run("set-option", "-p", "-u", "-t", pane, PANE_OPTION)
                others = run("list-panes", "-t", pane, "-F", "#{" + PANE_OPTION + "}").split()
                mine = run("show-options", "-w", "-q", "-v", "-t", pane, WAITING_OPTION).startswith(
                    FLAG_PREFIX
                )
                if mine and not others:  # another pane may still wait; a dialog's flag is not ours
                    run("set-option", "-w", "-u", "-t", pane, WAITING_OPTION)
            else:
                value = FLAG_PREFIX + (_SAFE.sub("", waiting)[:64] or "?")
                run("set-option", "-p", "-t", pane, PANE_OPTION, value)
                run("set-option", "-w", "-t", pane, WAITING_OPTION, value)
                tty = run("display-message", "-p", "-t", pane, "#{pane_tty}")
                if tty.startswith("/dev/"):
                    with open(tty, "w") as f:  # the pane's own terminal: tmux sees its bell
                        f.write("\a")
        sender = shutil.which("notify-send") if notify and waiting is not None else None
        if sender:
            title = "fleet: permission wanted"
            subprocess.run([sender, "--app-name=fleet", title, notify], timeout=5, env=env)
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("flagging the prompt failed: %s", exc)


def decision(req: PermissionRequest) -> str:
    """Claude Code's PermissionRequest output for the operator's answer (claude-code.md §8)."""
    if req.state == "allowed":
        chosen: dict[str, Any] = {"behavior": "allow"}
    else:
        why = f"Denied by {req.answered_by} via fleet ({req.via})" + (
            f": {req.message}" if req.message else ""
        )
        chosen = {"behavior": "deny", "message": why}
    return json.dumps({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": chosen}})


def run_hook(
    client: Client, wave: str, participant: str, given: dict[str, Any], *, wait: float = HOOK_WAIT,
    notify: bool = False, parent: int | None = None,
) -> str:  # fmt: skip
    """The hook's work (see the module docstring): what to print (the decision JSON, or '' to leave
    the decision to the dialog). Never raises a :mod:`fleet.errors` error: a hook that cannot reach
    the daemon leaves the dialog to decide, as if fleet were not there.

    ``parent`` is the session's pid, read when the hook started (:func:`main`): read later, after the
    daemon recorded the request, a session killed in between is already gone and the hook would
    take its new parent (init) for the session and wait out its whole bound."""
    from fleet import errors

    parent = os.getppid() if parent is None else parent

    tool = str(given.get("tool_name") or "")
    tool_input = given.get("tool_input")
    session = str(given.get("session_id") or "")
    ask = PermissionAsk(
        participant=participant, session_id=session, tool=bounded(tool, TOOL_MAX) or "?",
        preview=preview(tool, tool_input), prompt_id=str(given.get("prompt_id") or "")[:128], wait=wait,
    )  # fmt: skip
    try:
        req = client.ask_permission(wave, ask)
    except errors.FleetError as exc:
        log.warning("the permission request could not be recorded: %s", exc.message)
        return ""
    flag_window(req.tool, notify=f"{participant} in {wave}: {pending_note(req)}" if notify else "")
    try:
        return _await(client, wave, req, given, wait, parent)
    finally:
        flag_window(None)


def _await(
    client: Client, wave: str, req: PermissionRequest, given: dict[str, Any], wait: float, parent: int
) -> str:
    """Wait for the answer to ``req`` (the operator's, the pane's, or none, or the session ``parent``
    gone): what to print."""
    from fleet import errors

    tool, tool_input = str(given.get("tool_name") or ""), given.get("tool_input")
    watch = TranscriptWatch(str(given.get("transcript_path") or ""), tool, tool_input)
    deadline = time.monotonic() + wait
    answered: list[PermissionRequest] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                got = client.permission(wave, req.id, wait=min(50.0, left))
            except errors.FleetError as exc:
                if not exc.transient:
                    log.warning("waiting for the answer failed: %s", exc.message)
                    done.set()
                    return
                time.sleep(1.0)
                continue
            if got.state in ("allowed", "denied"):
                answered.append(got)
            if got.state != "pending":  # answered, or past its bound: the main loop records the expiry
                done.set()
                return

    threading.Thread(target=poll, name="fleet-permission-wait", daemon=True).start()
    why, outcome = "its hook's wait ended unanswered", None
    while not done.wait(POLL):
        outcome = watch.outcome()
        if outcome is not None:
            break
        if parent > 1 and os.getppid() != parent:
            why = "the session ended"
            break
        if time.monotonic() >= deadline:
            break
    if answered:
        return decision(answered[0])
    done.set()
    settled = (
        PermissionSettled(outcome=outcome, via="pane", message="answered in the pane")
        if outcome is not None
        else PermissionSettled(outcome="expired", via="hook", message=why)
    )
    try:
        client.settle_permission(wave, req.id, settled)
    except errors.Conflict:
        # the operator's answer came in the same moment: the store keeps it, the dialog had decided
        log.info("request %s was answered by the operator as the pane answered", req.id)
    except errors.FleetError as exc:
        log.warning("recording how the request ended failed: %s", exc.message)
    return ""


WAIT_ENV = "FLEET_PERMISSION_WAIT"
"""Seconds the hook waits for an operator's answer, set in the agent's environment (a layout's
``env``): shorter than :data:`HOOK_WAIT` hands the prompt back to the pane sooner (a Codex pane shows
its own dialog only once the hook lets go). Above :data:`HOOK_WAIT`, or not a positive number, it
is :data:`HOOK_WAIT` (the hook's entry would time out first)."""


def wait_bound(env: Mapping[str, str]) -> float:
    """The hook's wait: :data:`WAIT_ENV` in ``env`` if it is a positive number up to :data:`HOOK_WAIT`,
    else :data:`HOOK_WAIT`."""
    raw = env.get(WAIT_ENV, "")
    try:
        got = float(raw) if raw else HOOK_WAIT
    except ValueError:
        got = -1.0
    if not 0 < got <= HOOK_WAIT:
        log.warning(
            "%s=%r is not a number of seconds in (0, %g]: waiting %gs", WAIT_ENV, raw, HOOK_WAIT, HOOK_WAIT
        )
        return HOOK_WAIT
    return got


def main(argv: list[str] | None = None) -> int:
    """``python -m fleet.permissions``: the PermissionRequest hook spawn installs (always exit 0)."""
    parent = os.getppid()  # first: the session may be killed while the daemon records the request
    import argparse

    from fleet.client import Client

    p = argparse.ArgumentParser(prog="fleet.permissions", description="fleet's PermissionRequest hook")
    p.add_argument("--participant", required=True)
    p.add_argument("--wave", required=True)
    p.add_argument("--daemon", required=True)
    p.add_argument("--token-file", required=True, type=Path)
    p.add_argument("--wait", type=float, default=None, help="[default: $FLEET_PERMISSION_WAIT, else 1800]")
    p.add_argument("--notify", action="store_true", help="Also a desktop notification (notify-send).")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="fleet permission hook: %(message)s")
    try:
        given = json.loads(sys.stdin.read() or "{}")
        token = args.token_file.read_text(encoding="utf-8").strip()
    except (OSError, ValueError) as exc:
        log.warning("nothing to ask: %s", exc)
        return 0
    if not isinstance(given, dict) or given.get("hook_event_name") != "PermissionRequest" or not token:
        return 0
    wait = args.wait if args.wait is not None else wait_bound(os.environ)
    with Client(args.daemon, token, timeout=10) as client:
        out = run_hook(client, args.wave, args.participant, given, wait=wait, notify=args.notify,
                       parent=parent)  # fmt: skip
    if out:
        sys.stdout.write(out + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())


# ---------------------------------------------------------------- on the core's seams


def settings(launch: seams.Launch) -> dict[str, list[dict[str, Any]]]:
    """Every Claude session spawned gets the hook: its prompts can be answered from anywhere."""
    return hook_entry(
        launch.participant, launch.wave.name, launch.base_url, launch.token_file, notify=launch.notify
    )


seams.launch_settings.add(__name__, settings)
