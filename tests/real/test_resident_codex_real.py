"""A Codex mind: ``mind: codex`` in GOAL.md seats the real Codex CLI (0.169.0) as the wave's resident,
over the scripted model's Responses dialect.

Each test makes a git repository (the wave's origin), runs ``fleet resident …`` as a user would (a
subprocess, in the repository) with the pinned ``codex`` on PATH and nothing else said of it (the
word ``codex`` and the default layout), and asserts from the session's own record — its rollout —,
the store and the scripted model's request log.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from realclaude import RealFleet
from realcodex import rollout_lines, seed_codex, user_texts
from scripted_model import Fail, Script, Slow, call, on_message, on_prompt, post, rule, say, steps
from test_resident_real import RealFleetFactory, Supervise, fleet_in, git_repo, status, system_blips

from fleet.client import Client
from fleet.delivery.rollout import read_thread


def codex_world(real: RealFleet, codex: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pinned ``codex`` on the PATH of the test's fleet commands and of the tmux server's panes,
    its config at ``~/.codex`` pointing at the scripted model, the key it reads in the panes."""
    seed_codex(real.home / ".codex", real.model.url)
    path = f"{Path(codex).parent}:{real.env['PATH']}"
    monkeypatch.setenv("PATH", path)
    for name, value in (("PATH", path), ("SCRIPTED_KEY", "scripted-model"), ("TERM", "xterm-256color")):
        real.srv.cmd("set-environment", "-g", name, value)


def goal(repo: Path, front: str) -> None:
    folder = repo / "wave" / "w"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "GOAL.md").write_text(f"---\nmind: codex\n{front}---\nKeep the parser honest.\n")


def resident_start(real: RealFleet, repo: Path, *extra: str) -> dict[str, Any]:
    done = fleet_in(real, repo, "resident", "start", "w", "--wait", "120", "--json", *extra)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def rollout(real: RealFleet) -> list[dict[str, Any]]:
    return rollout_lines(real, "resident")


def events(lines: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [
        ln for ln in lines if ln.get("type") == "event_msg" and (ln.get("payload") or {}).get("type") == kind
    ]


PLAN = "operator: parse first"


def test_a_codex_mind_is_seated_answers_is_interrupted_and_resumes_with_its_record_read(
    real_fleet: RealFleetFactory, operator: Client, codex: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``mind: codex``: the resident is a Codex session (status says so, and what it cannot do); an
    operator blip is answered; its turns are its rollout's; an interrupt's Escape ends a long turn
    (the rollout's ``turn_aborted``) and its text enters as the next turn through ``codex queue``;
    stop and start resume the same thread (``codex resume``)."""
    script = Script(
        {
            "resident": [
                rule(on_message(author="operator", contains="plan"), post("{wavelet}", PLAN)),
                rule(on_message(author="operator", contains="ponder"), Slow(120, say("pondered")), times=1),
                rule(on_prompt(contains="summarise instead"), say("summary: nothing yet")),
            ]
        }
    )
    real = real_fleet(channels=True, script=script)
    codex_world(real, codex, monkeypatch)
    repo = git_repo(real)
    goal(repo, "heartbeat: off\n")
    report = resident_start(real, repo)
    assert (report["layout"], report["pane"]["kind"]) == ("codex", "codex"), report
    assert report["kind"] == "codex" and any("no steering" in x for x in report["limits"]), report

    st = real.wait(lambda: (s := status(real, repo))["state"] == "idle" and s, "the mind idle")
    assert st["kind"] == "codex" and st["session_id"] == report["session_id"], st
    assert any("no steering" in x for x in st["limits"]) and "a codex mind: " in st["note"], st
    assert any("fleet approve" in x for x in st["limits"]), "the kind's own limits, as spawn says them"
    # its turns are its rollout's: the first prompt's turn, completed
    assert st["turns"] == len(events(rollout(real), "task_complete")) == 1, st
    text = fleet_in(real, repo, "resident", "status", "w").stdout
    assert "codex" in text and "no steering" in text and "last steer" in text, text

    blip = operator.post(operator.resolve("w/main").id, "resident: what is the plan?")
    real.wait(lambda: any(b.text == PLAN for b in real.blips("w/main")), "the answer")
    assert len([t for t in user_texts(rollout(real)) if blip.id in t]) == 1
    real.wait(
        lambda: status(real, repo)["turns"] == len(events(rollout(real), "task_complete")) == 2, "2 turns"
    )

    operator.post(operator.resolve("w/main").id, "resident: ponder the universe")
    real.wait(lambda: status(real, repo)["state"] == "turning", "the long turn running")
    done = fleet_in(real, repo, "resident", "interrupt", "w", "summarise instead", "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert (got["interrupted"], got["ended_by"]) == (True, "cooperative"), got
    aborted = events(rollout(real), "turn_aborted")
    assert len(aborted) == 1 and aborted[0]["payload"]["reason"] == "interrupted", aborted
    real.wait(
        lambda: any(r.reply and r.reply.text == "summary: nothing yet" for r in real.requests("resident")),
        "the text as the next turn",
    )
    assert [t for t in user_texts(rollout(real)) if "summarise instead" in t] == ["summarise instead"]
    assert "pondered" not in json.dumps(rollout(real)), "the long turn's answer reached the thread"
    real.wait(lambda: status(real, repo)["state"] == "idle", "the next turn ended")

    thread = read_thread(real.paths.channels, report["session_id"])
    stopped = fleet_in(real, repo, "resident", "stop", "w", "--json")
    assert stopped.returncode == 0 and json.loads(stopped.stdout)["stopped"], stopped.stderr
    again = resident_start(real, repo)
    assert (again["session_id"], again["resumed"]) == (report["session_id"], True), again
    assert again["pane"]["argv"][1] == "resume" and again["pane"]["argv"][-1] == thread, again
    operator.post(operator.resolve("w/main").id, "resident: the plan again?")
    real.wait(
        lambda: sum(b.text == PLAN for b in real.blips("w/main")) == 2,
        "the resumed answer",
    )
    asked = next(r for r in real.requests("resident") if r.contains("the plan again?"))
    assert asked.contains("ponder the universe"), "the resumed thread lost its conversation"


def test_a_codex_minds_heartbeat_enters_through_codex_queue(
    real_fleet: RealFleetFactory, operator: Client, codex: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keeper opens a Codex mind's turn with ``codex queue`` (its kind's way in): the heartbeat's
    system blip, then its line in the mind's rollout and in the model's request; one, by the budget."""
    script = Script({"resident": [rule(on_prompt(contains="heartbeat"), say("nothing to do"))]})
    real = real_fleet(channels=True, script=script)
    codex_world(real, codex, monkeypatch)
    repo = git_repo(real)
    goal(repo, "heartbeat: always\nheartbeat_every: 3s\nheartbeat_budget: 1\n")
    resident_start(real, repo)
    real.wait(lambda: status(real, repo)["state"] == "idle", "the mind idle")
    sup = Supervise(real, repo)
    try:
        real.wait(
            lambda: system_blips(real, "resident: heartbeat budget spent"), "the budget spent", timeout=120
        )
        (beat,) = system_blips(real, "resident: heartbeat:")
        entered = real.wait(
            lambda: [t for t in user_texts(rollout(real)) if t.startswith("[fleet] heartbeat:")], "it entered"
        )
        assert entered == ["[fleet] " + beat.removeprefix("resident: ")], (entered, beat)
        asked = real.wait(
            lambda: [r for r in real.requests("resident") if r.contains("[fleet] heartbeat:")], "its request"
        )
        assert len(asked) == 1 and asked[0].reply is not None and asked[0].reply.text == "nothing to do"
    finally:
        sup.stop()


def test_a_codex_mind_dispatches_a_worker_into_its_own_tmux_server_and_hears_its_done(
    real_fleet: RealFleetFactory, operator: Client, codex: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Codex mind forks a wavelet with ``spawn``: its channel (Codex's child) is the seated
    session's (``FLEET_SESSION_ID``), and spawns the worker — a stand-in — in the tmux server the
    mind's pane is in (the pane's ``TMUX``, passed through); the worker's ``DONE:`` wakes the mind."""
    real = real_fleet(channels=True)
    workers = real.tmp / "workers.toml"
    workers.write_text(
        f"[defaults]\ncwd = {json.dumps(str(real.project))}\n"
        "agent = \"fleet-standin --reply 'on it' --turns 1 --done 'DONE: widget built'\"\n"
    )
    fork = {"wavelet": "w/main", "name": "job", "with": ["worker"], "spawn": str(workers)}
    real.script.add(
        "resident",
        rule(
            on_message(author="operator", contains="build"),
            steps(call("wavelet_fork", fork), post("w/job", "worker: build the widget")),
        ),
        rule(on_message(author="worker", contains="DONE"), post("w/main", "operator: the widget is built")),
    )
    codex_world(real, codex, monkeypatch)
    repo = git_repo(real)
    goal(repo, "heartbeat: off\n")
    resident_start(real, repo)
    real.wait(lambda: status(real, repo)["state"] == "idle", "the mind idle")
    operator.post(operator.resolve("w/main").id, "resident: build the widget, please")
    real.wait(
        lambda: any(b.text == "operator: the widget is built" for b in real.blips("w/main")),
        "the mind's report",
        timeout=180,
    )
    job = [(b.author, b.text) for b in real.blips("w/job") if b.kind != "system"]
    assert ("resident", "worker: build the widget") in job and ("worker", "on it") in job, job
    here = real.srv.cmd("list-panes", "-a", "-F", "#{@fleet_participant}").stdout
    assert "worker" in here, f"the worker is not in the mind's tmux server (its panes: {here})"
    st = status(real, repo)
    assert st["workers"] and st["workers"][0]["status"] == "done", st


def test_a_codex_mind_whose_turns_fail_is_ended_and_revived_resuming_its_thread(
    real_fleet: RealFleetFactory, operator: Client, codex: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three turns the model fails (Codex's ``task_complete`` with an ``error``, read from its
    rollout) → the keeper ends the mind's process, status says why → revived on a short ladder with
    ``codex resume``: the same thread, which answers with its history."""
    real = real_fleet(channels=True)
    real.script.add(  # (times: a failed turn leaves no answer, so later requests carry its ask again)
        "resident",
        rule(on_message(author="operator", contains="there?"), post("w/main", "operator: here, same mind.")),
        rule(
            on_message(author="operator", contains="fail"),
            Fail(400, "invalid_request_error", "scripted"),
            times=3,
        ),
    )
    codex_world(real, codex, monkeypatch)
    with (real.home / ".codex" / "config.toml").open("a") as f:
        f.write(
            "request_max_retries = 0\nstream_max_retries = 0\n"
        )  # (the provider's table: each fails once)
    repo = git_repo(real)
    goal(repo, "heartbeat: off\n")
    first = resident_start(real, repo)
    real.wait(lambda: status(real, repo)["state"] == "idle", "the mind idle")
    sup = Supervise(real, repo, "--ladder", "3s,1h")
    try:
        main = operator.resolve("w/main").id
        for n in (1, 2, 3):
            operator.post(main, f"resident: fail, please ({n})")
            real.wait(
                partial(lambda n: (status(real, repo)["failed_turns"] or 0) >= n, n), f"failed turn {n}"
            )
        (said,) = real.wait(lambda: system_blips(real, "resident: failed:"), "the keeper's failure blip")
        assert "API Error: " in said and "scripted" in said, said
        real.wait(lambda: system_blips(real, "supervise: respawned resident"), "revived on the ladder")
        revived = real.wait(
            lambda: (s := status(real, repo))["state"] == "idle" and s, "the revived mind idle"
        )
        assert revived["session_id"] == first["session_id"] and revived["pid"] != first["pid"], revived
        operator.post(main, "resident: are you there?")
        real.wait(
            lambda: any(b.text == "operator: here, same mind." for b in real.blips("w/main")), "its answer"
        )
        asked = next(r for r in real.requests("resident") if r.contains("are you there?"))
        assert asked.contains("fail, please (1)"), "the revived mind lacks its history: not the same thread"
    finally:
        sup.stop()
