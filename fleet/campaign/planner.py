"""``fleet campaign plan PLAN.md``: a fresh planner session decomposes the plan (docs/campaigns.md).

fleet prepares the campaign directory (``.gitignore``, ``artifacts/``, ``AGENT_INSTRUCTIONS.md``, a
STATE.md cursor with no waves), holds the campaign's loop lock, and spawns the planner through the
loop's :class:`~fleet.campaign.loop.Launcher` (a fleet participant in the campaign's wave, with the
settle hook). The planner runs with ``dontAsk`` and rules allowing writes under ``.wave/`` only.
fleet waits for its settle (the Stop hook's poke on the campaign's control socket, or its pane's
exit), ends it, then refuses if the work tree changed outside ``.wave/`` (naming the files; nothing
is restored), validates what the planner wrote (every problem with its file and line) and commits
``wave plan: <id>``.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from fleet import errors
from fleet.campaign import disk
from fleet.campaign import loop as lp
from fleet.campaign import state as st
from fleet.campaign.disk import Campaign
from fleet.paths import read_utf8


def check(root: Path, plan_path: Path, *, executor: str, model: str) -> Campaign:
    """The plan's own problems (unreadable, no H1, a campaign of that id already, a dirty tree),
    before anything is started or written: the CLI asks this before it reaches the daemon."""
    doc = disk.read_plan(plan_path)
    dirty = disk.dirty(root)
    c = disk.new_campaign(root, plan_path, doc.title, executor=executor, model=model)
    if dirty:
        raise errors.UsageError(lp.dirty_message(c, dirty))
    return c


def prepare(root: Path, plan_path: Path, *, executor: str, model: str) -> tuple[Campaign, st.State]:
    c = check(root, plan_path, executor=executor, model=model)
    rel = os.path.relpath(plan_path.resolve(), root)
    state = disk.write_skeleton(c, rel, executor=executor, model=model, waves=[], overview="", activate=False)
    (c.plan / "OVERVIEW.md").unlink()  # the planner writes it
    return c, state


def kickoff_text(c: Campaign, name: str, plan_rel: str) -> str:
    from fleet.campaign import prompts

    return (
        f"{name}: you are the planner of campaign {c.id}. Decompose the plan {plan_rel} into the"
        f" campaign directory {c.rel(c.dir)}/ following your protocol in {prompts.path('planner')}."
        f" You may write only under {disk.WAVE_DIR}/. End your turn with `PLAN WRITTEN: <waves>`."
    )


def run_planner(c: Campaign, state: st.State, launcher: lp.Launcher, layout: str, *, timeout: float) -> str:
    """Spawn the planner, wait for its settle, end it; its last line (set phrase)."""
    lock = lp.LoopLock(c)
    lock.acquire()
    sock = _listen(c)
    try:
        state.session_count = 1
        try:
            name = f"planner-s{state.session_count}"  # the name Launcher.launch gives it
            text = kickoff_text(c, name, state.plan_source)
            started = launcher.launch(c, state, "planner", layout, kickoff=text)
        except BaseException:
            shutil.rmtree(c.dir)  # fleet's own skeleton: nothing of the planner's to keep
            raise
        try:
            transcript = _wait_settle(c, sock, launcher, started, timeout)
        finally:
            launcher.end(lp.Owned(pane_id=started.pane_id))
        return launcher.last_phrase(transcript, lp.Owned()) if transcript else ""
    finally:
        sock.close()
        lock.release()


def _listen(c: Campaign) -> socket.socket:
    """The loop's control socket, while the planner runs (its session's Stop hook pokes it; what a
    poke carries is not read, so who pokes changes nothing but when the planner looks again)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(lp.socket_address(c))
    s.listen(4)
    return s


def _wait_settle(
    c: Campaign, sock: socket.socket, launcher: lp.Launcher, started: lp.Started, timeout: float
) -> str | None:
    """Sleep until the planner's Stop hook reports its session (or its pane exits); its transcript."""
    pid = launcher.pane_pid(started.pane_id)
    pidfd = os.pidfd_open(pid) if pid else -1
    deadline = time.monotonic() + timeout
    try:
        while True:
            for rec in lp.read_settles(c):
                if rec.get("session_id") == started.session_id:
                    return str(rec.get("transcript_path") or "") or None
            left = deadline - time.monotonic()
            if pidfd < 0 or left <= 0:
                if pidfd >= 0:
                    raise errors.FleetError(
                        f"the planner {started.participant} did not finish within {timeout:.0f} s:"
                        f" it was ended; its files are left in {c.rel(c.dir)}/ (remove that directory"
                        " to plan again)"
                    )
                return None  # the pane is gone: settled by exit
            fds: list[Any] = [sock, pidfd]
            ready, _, _ = select.select(fds, [], [], left)
            if sock in ready:
                conn, _ = sock.accept()
                with conn:
                    conn.settimeout(2.0)
                    with contextlib.suppress(OSError):
                        conn.recv(65536)
                        conn.sendall(b'{"ok": true}\n')
            if pidfd in ready:
                os.close(pidfd)
                pidfd = -1
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def check_tree(c: Campaign) -> None:
    """Refuse when the planner changed anything outside ``.wave/`` (nothing is restored)."""
    outside = disk.dirty(c.root)
    if outside:
        more = f" and {len(outside) - 10} more" if len(outside) > 10 else ""
        raise errors.UsageError(
            f"the planner changed files outside {disk.WAVE_DIR}/: {', '.join(outside[:10])}{more}."
            " Nothing was committed and nothing was restored: look at them (`git status`, `git diff`),"
            f" undo what you do not want, and remove {c.rel(c.dir)}/ to plan again"
        )


def validate(c: Campaign) -> st.State:
    """What the planner wrote, checked; UsageError listing every problem with its file and line."""
    problems: list[str] = []
    state_rel = c.rel(c.state_file)
    try:
        data = c.state_file.read_bytes()
    except FileNotFoundError:
        raise errors.UsageError(f"the planner left no {state_rel}: {_leftover(c)}") from None
    try:
        text = st.decode(data)
        state = st.parse(text, checked=False)  # every problem is listed below, not only the first
    except st.StateError as exc:
        raise errors.UsageError(f"{c.rel(c.dir)}/{exc.message}: {_leftover(c)}") from None
    lines = text.splitlines()

    def line_of(pattern: str, default: int = 1) -> int:
        rx = re.compile(pattern)
        return next((i + 1 for i, ln in enumerate(lines) if rx.search(ln)), default)

    if state.campaign_id != c.id:
        problems.append(
            f"{state_rel} line {line_of(r'^campaign_id:')}: campaign_id is {state.campaign_id!r},"
            f" not {c.id!r}"
        )
    for key, want in (("current_wave", 0), ("wave_status", "pending"), ("retry_count", 0),
                      ("verify_count", 0)):  # fmt: skip
        if getattr(state, key) != want:
            problems.append(
                f"{state_rel} line {line_of(rf'^{key}:')}: {key} is {getattr(state, key)!r}; a new"
                f" campaign starts with {want!r}"
            )
    waves_dir = c.plan / "waves"
    found = sorted(
        int(m.group(1))
        for p in (waves_dir.iterdir() if waves_dir.is_dir() else [])
        if p.is_dir() and (m := re.fullmatch(r"wave_(\d+)", p.name))
    )
    if not found:
        problems.append(f"{c.rel(waves_dir)}/: no wave_N directories (waves start at wave_0)")
    elif found != list(range(len(found))):
        gaps = sorted(set(range(max(found) + 1)) - set(found))
        problems.append(
            f"{c.rel(waves_dir)}/: waves must be contiguous from wave_0; missing"
            f" {', '.join(f'wave_{n}' for n in gaps)}"
        )

    def unwritten(f: Path, empty: str) -> str | None:
        """What is wrong with a file the plan needs (None: it has text)."""
        if not f.exists():
            return f"{c.rel(f)}: missing"
        try:
            text = read_utf8(f)
        except OSError as exc:
            return f"{c.rel(f)}: {exc.strerror or exc}"
        return None if text.strip() else f"{c.rel(f)}{empty}: empty"

    for f, empty in [
        *((c.wave_dir(n) / "WAVE.md", " line 1") for n in found),
        *((c.plan / name, "") for name in ("OVERVIEW.md", "AGENT_INSTRUCTIONS.md")),
    ]:
        if (problem := unwritten(f, empty)) is not None:
            problems.append(problem)
    total = len(found)
    if state.total_waves != total:
        problems.append(
            f"{state_rel} line {line_of(r'^total_waves:')}: total_waves is {state.total_waves}, but"
            f" there are {total} wave directories"
        )
    table = line_of(r"^\s*\|\s*#\s*\|", 0)
    numbers = [r.get("#").strip() for r in state.rows]
    if numbers != [str(n) for n in range(total)]:
        where = f"line {table}" if table else f"line {len(lines)} (no wave table)"
        problems.append(
            f"{state_rel} {where}: the wave table's rows are {', '.join(numbers) or 'none'};"
            f" expected one per wave, 0-{total - 1}"
            if total
            else f"{state_rel} {where}: no waves"
        )
    for r in state.rows:
        if r.get("Status") and r.get("Status") != "pending":
            num = r.get("#").strip()
            at = line_of(r"^\s*\|\s*" + re.escape(num) + r"\s*\|", table)
            problems.append(
                f"{state_rel} line {at}: wave {num}'s"
                f" status is {r.get('Status')!r}; a new campaign's waves are pending"
            )
    if not problems:  # what a new campaign's own checks above do not cover (a session id alone, …)
        try:
            st.check(state)
        except st.StateError as exc:
            problems.append(f"{c.rel(c.dir)}/{exc.message}")
    if problems:
        raise errors.UsageError(
            "the planner's campaign is not valid:\n  " + "\n  ".join(problems) + f"\n{_leftover(c)}"
        )
    return state


def _leftover(c: Campaign) -> str:
    return (
        f"nothing was committed; the planner's files are left in {c.rel(c.dir)}/ to read (fix them and"
        f" commit, or remove that directory and plan again)"
    )


def finish(c: Campaign, state: st.State, *, plan_rel: str, executor: str, model: str) -> st.State:
    """fleet's fields over the planner's (loop-owned ones idle), the table's titles filled, committed."""
    state.plan_source = plan_rel
    state.executor_agent = executor
    state.executor_model = model
    state.loop_state = "idle"
    state.active_session_id = None
    state.active_session_kind = ""
    state.failure_kind = ""
    state.user_question = ""
    state.session_count = 1
    for n in range(state.total_waves):
        r = state.row(n)
        if not r.get("Title"):
            r.set("Title", c.wave_title(n))
        r.set("Status", "pending")
    c.write(state)
    (c.root / disk.WAVE_DIR / "active").write_text(c.id + "\n", encoding="utf-8")
    disk.commit_plan(c)
    return state
