"""The loop's decisions, as pure functions of the state (the seed's spawn table, guards, settle).

:func:`decide` is ``spawnPerState``: what to spawn now, or why nothing. :func:`settle` is the settle
handler's branch on what the settled session left in STATE.md. Neither touches a file, a pane or git:
:mod:`fleet.campaign.loop` does what they say, so every transition is tested without sessions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fleet.campaign.state import RETRY_CAP, VERIFY_CAP, State

Spawn = Literal["executor", "verifier"]


@dataclass(frozen=True)
class Decision:
    spawn: Spawn | None
    why: str
    escalate: bool = False
    """The verifier cap was reached: set awaiting_user instead of spawning."""


def decide(s: State) -> Decision:
    """What the loop spawns for ``s`` (the three guards first, then the table)."""
    if s.active_session_id:
        return Decision(None, f"a {s.active_session_kind or 'session'} is active ({s.active_session_id})")
    if s.failure_kind == "cancelled":
        return Decision(None, "the wave was cancelled: `fleet campaign clear` to try it again")
    status = s.wave_status
    if status in ("awaiting_user", "all_complete", "running", "complete"):
        return Decision(None, f"wave_status is {status}")
    want: Spawn
    if status == "pending" and s.verify_count == 0 and s.current_wave == 0:
        want, why = "verifier", "initial sanity check"
    elif status == "pending":
        want, why = "executor", f"wave {s.current_wave}"
    elif status == "failed" and s.retry_count < RETRY_CAP:
        want, why = "executor", f"wave {s.current_wave} retry {s.retry_count}"
    elif status == "failed":
        want, why = "verifier", f"wave {s.current_wave} failed {s.retry_count} times"
    else:  # plan_undoable
        want, why = "verifier", f"wave {s.current_wave} reported the plan undoable"
    if want == "verifier" and s.verify_count >= VERIFY_CAP:
        return Decision(None, f"the verifier ran {s.verify_count} times (cap {VERIFY_CAP})", escalate=True)
    return Decision(want, why)


def escalate(s: State) -> None:
    """The verifier cap: ask the user instead of spawning another verifier."""
    s.wave_status = "awaiting_user"
    s.user_question = (
        f"wave {s.current_wave}: the verifier already ran {s.verify_count} times and the wave is still"
        f" {'failing' if s.failure_kind != 'undoable' else 'undoable'}: fix the plan by hand, then"
        " `fleet campaign dismiss` and `fleet campaign clear`"
    )


Outcome = Literal[
    "complete",
    "all_complete",
    "failed",
    "undoable",
    "paused",
    "crashed",
    "verified",
    "verifier_crashed",
    "other",
]


def normalize(s: State) -> None:
    """A wave left ``complete`` advances: ``current_wave`` + 1, pending (or all_complete)."""
    if s.wave_status == "complete":
        s.current_wave += 1
        s.retry_count = 0
        s.failure_kind = ""
        s.wave_status = "all_complete" if s.current_wave >= s.total_waves else "pending"
    if s.wave_status == "pending" and s.total_waves and s.current_wave >= s.total_waves:
        s.wave_status = "all_complete"


def outcome(kind: str, before: State, after: State, *, pane_exited: bool) -> Outcome:
    """What a settled session did, from the state it was spawned on and the state it left."""
    if after.wave_status == "awaiting_user":
        return "paused"
    if kind == "executor":
        if after.wave_status == "running":
            return "crashed"
        if after.wave_status == "all_complete":
            return "all_complete"
        if after.current_wave > before.current_wave or after.wave_status == "complete":
            return "complete"
        if after.wave_status == "failed":
            return "failed"
        if after.wave_status == "plan_undoable":
            return "undoable"
        return "other"
    # verifier
    if after.wave_status in ("failed", "plan_undoable", "running"):
        return "verifier_crashed"
    if pane_exited and after.verify_count <= before.verify_count and after.wave_status == before.wave_status:
        return "verifier_crashed"
    return "verified"


def apply_crash(s: State) -> None:
    """Executor crash: failed, failure_kind crash, retry_count + 1."""
    s.wave_status = "failed"
    s.failure_kind = "crash"
    s.retry_count += 1


def apply_verifier_crash(s: State, before: State) -> None:
    """Verifier crash: awaiting_user with a system question; verify_count capped so retries by the
    user do not loop the verifier into another crash."""
    s.wave_status = "awaiting_user"
    s.verify_count = max(s.verify_count, before.verify_count + 1, VERIFY_CAP)
    s.user_question = (
        f"wave {s.current_wave}: the verifier session ended without updating STATE.md (the plan is"
        " unchanged): fix the plan by hand or decide, then `fleet campaign dismiss` and"
        " `fleet campaign clear`"
    )
