"""Permission prompts answered from anywhere (docs/permissions.md): the store, the routes, the CLI.

A real daemon on 127.0.0.1:0; participants hold their own minted tokens, as a spawned hook does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import libtmux
import pytest
from conftest import retry_until
from httphelp import host_port
from relay import Relay
from test_permissions_rules import line

from fleet import errors
from fleet.client import Client
from fleet.daemon import Daemon
from fleet.records.permissions import (
    PermissionAnswer,
    PermissionAsk,
    PermissionRequest,
    PermissionSettled,
    pending_note,
)
from fleet.store import connect, dump_tables, replay

SID = "0b6f3a52-3c1e-4d53-9a57-5d2b3f1c9e01"


def agent(operator: Client, wave: str, name: str) -> Client:
    return Client(operator.base_url, operator.mint_token(wave, name).token)


def ask(c: Client, name: str = "alice", tool: str = "Bash", text: str = "ls -la", wait: float = 60) -> str:
    return c.ask_permission(
        "w", PermissionAsk(participant=name, session_id=SID, tool=tool, preview=text, wait=wait)
    ).id


def fleet(operator: Client, *args: str) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, "FLEET_DAEMON": operator.base_url, "FLEET_TOKEN": operator.token}
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_a_request_waits_until_the_operator_answers_and_the_answer_is_recorded_once(operator: Client) -> None:
    operator.create_wave("w", ["alice", "bob"])
    alice = agent(operator, "w", "alice")
    rid = ask(alice)
    (waiting,) = operator.permissions("w", pending=True)
    assert (waiting.id, waiting.participant, waiting.tool, waiting.preview, waiting.state) == (
        rid,
        "alice",
        "Bash",
        "ls -la",
        "pending",
    )
    assert pending_note(waiting) == "waiting for permission: Bash (ls -la)"
    # the hook's long-poll wakes on the answer, not at its deadline
    got: list[str] = []
    waiter = threading.Thread(target=lambda: got.append(alice.permission("w", rid, wait=30).state))
    started = time.monotonic()
    waiter.start()
    retry_until(lambda: operator.health().parked >= 1, what="the hook's long-poll parked")
    answered = operator.answer_permission("w", PermissionAnswer(participant="alice", behavior="allow"))
    waiter.join(10)
    assert got == ["allowed"] and time.monotonic() - started < 10
    assert (answered.state, answered.answered_by, answered.via) == ("allowed", "operator", "cli")
    # a second answer is refused, and changes nothing
    with pytest.raises(errors.Conflict, match="already allowed by operator"):
        operator.answer_permission(
            "w", PermissionAnswer(participant="alice", request_id=rid, behavior="deny")
        )
    with pytest.raises(errors.NotFound, match=r"waits on no permission request.*allowed by operator"):
        operator.answer_permission("w", PermissionAnswer(participant="alice", behavior="deny"))
    assert alice.permission("w", rid).state == "allowed"
    # a participant reads only its own, and cannot answer, nor ask for another
    bob = agent(operator, "w", "bob")
    assert bob.permissions("w") == []
    with pytest.raises(errors.NotFound):
        bob.permission("w", rid)
    with pytest.raises(errors.Forbidden):
        bob.answer_permission("w", PermissionAnswer(participant="bob", behavior="allow"))
    with pytest.raises(errors.Forbidden):
        ask(bob, "alice")


def test_bad_input_is_refused_and_changes_nothing(daemon: Daemon, operator: Client) -> None:
    operator.create_wave("w", ["alice"])
    alice = agent(operator, "w", "alice")
    before = dump_tables(connect(daemon.paths.db))
    with pytest.raises(errors.NotFound, match="waits on no permission request: `fleet permissions w`"):
        operator.answer_permission("w", PermissionAnswer(participant="alice", behavior="allow"))
    with pytest.raises(errors.UsageError, match="not a UUID"):
        alice.ask_permission("w", PermissionAsk(participant="alice", session_id="nope", tool="Bash"))
    with pytest.raises(errors.UsageError, match="wait must be"):
        alice.ask_permission("w", PermissionAsk(participant="alice", session_id=SID, tool="Bash", wait=0))
    with pytest.raises(errors.NotFound, match="not a participant"):
        ask(operator, "zed")
    with pytest.raises(errors.UsageError, match="via"):
        operator.answer_permission("w", PermissionAnswer(participant="alice", behavior="allow", via="pane"))
    assert dump_tables(connect(daemon.paths.db)) == before
    # an expired request (its hook's wait is over) cannot be answered: the pane decides
    rid = ask(alice, wait=0.3)
    time.sleep(0.4)  # the request's own clock: no state to poll for
    assert alice.permission("w", rid).state == "expired"
    assert operator.permissions("w", pending=True) == []
    with pytest.raises(errors.Conflict, match=r"expired.*answer it there"):
        operator.answer_permission(
            "w", PermissionAnswer(participant="alice", request_id=rid, behavior="allow")
        )
    with pytest.raises(errors.NotFound, match=r"waits on no permission request.*is expired"):
        operator.answer_permission("w", PermissionAnswer(participant="alice", behavior="allow"))
    # the hook may still record that it let go of it
    assert alice.settle_permission("w", rid, PermissionSettled(outcome="expired")).via == "hook"


def test_the_pane_answering_first_is_recorded_and_the_operator_is_then_refused(operator: Client) -> None:
    operator.create_wave("w", ["alice"])
    alice = agent(operator, "w", "alice")
    rid = ask(alice)
    done = alice.settle_permission("w", rid, PermissionSettled(outcome="denied", via="pane"))
    assert (done.state, done.answered_by, done.via) == ("denied", "pane", "pane")
    with pytest.raises(errors.Conflict, match="already denied by pane"):
        operator.answer_permission(
            "w", PermissionAnswer(participant="alice", request_id=rid, behavior="allow")
        )
    with pytest.raises(errors.UsageError):
        alice.settle_permission("w", ask(alice), PermissionSettled(outcome="allowed", via="hook"))


def test_a_repeated_request_key_answers_the_first_answer(operator: Client) -> None:
    operator.create_wave("w", ["alice"])
    alice = agent(operator, "w", "alice")
    body = PermissionAsk(participant="alice", session_id=SID, tool="Bash", preview="make")
    first = alice._call(
        "POST", "/v1/waves/w/permissions", type(alice.ask_permission("w", body)), body, key="k1"
    )
    again = alice._call("POST", "/v1/waves/w/permissions", type(first), body, key="k1")
    assert again.id == first.id
    assert len(operator.permissions("w")) == 2  # the call above without a key made one more
    ans = PermissionAnswer(participant="alice", request_id=first.id, behavior="deny")
    one = operator._call("POST", "/v1/waves/w/permissions/answer", type(first), ans, key="k2")
    two = operator._call("POST", "/v1/waves/w/permissions/answer", type(first), ans, key="k2")
    assert one == two and one.state == "denied"


def test_the_events_replay_and_import_with_their_wave(
    daemon: Daemon, operator: Client, tmp_path: Path
) -> None:
    from test_artifact import fleet as fleet_at
    from test_artifact import ok, paths_in, refused, tables_of

    operator.create_wave("w", ["alice"])
    alice = agent(operator, "w", "alice")
    operator.answer_permission(
        "w", PermissionAnswer(participant="alice", request_id=ask(alice), behavior="allow")
    )
    ask(alice, text="rm -rf build")
    replay(daemon.paths.db, tmp_path / "rebuilt")
    assert dump_tables(connect(tmp_path / "rebuilt")) == dump_tables(connect(daemon.paths.db))
    home = daemon.paths.data.parent
    export = tmp_path / "w.jsonl"
    with export.open("w") as f:
        ok(fleet_at("export", "w", home=home, stdout=f))
    lines = export.read_text().splitlines()
    assert sum('"permission.' in x for x in lines) == 3
    fresh = tmp_path / "fresh"
    ok(fleet_at("import", str(export), home=fresh))
    assert tables_of(paths_in(fresh).db)["permissions"] == tables_of(daemon.paths.db)["permissions"]
    # a request naming someone the wave never had is refused, and nothing is imported
    import hashlib

    head, *rows, _end = lines
    bad = [
        r.replace('"participant":"alice"', '"participant":"zed"') if '"permission.asked"' in r else r
        for r in rows
    ]
    body = "\n".join([head, *bad]) + "\n"
    digest = hashlib.sha256(body.encode()).hexdigest()
    forged = tmp_path / "forged.jsonl"
    forged.write_text(body + json.dumps({"end": "fleet-events", "events": len(bad), "sha256": digest}) + "\n")
    refused(fleet_at("import", str(forged), home=tmp_path / "other"), 2, "roster never had it")


def test_the_cli_approves_denies_and_lists(operator: Client) -> None:
    operator.create_wave("w", ["alice"])
    alice = agent(operator, "w", "alice")
    r = fleet(operator, "approve", "w/main", "alice")
    assert r.returncode == 4 and "waits on no permission request" in r.stderr and "Traceback" not in r.stderr
    ask(alice)
    listed = fleet(operator, "permissions", "w")
    assert listed.returncode == 0 and "waiting for permission: Bash (ls -la)" in listed.stdout
    assert fleet(operator, "approve", "w/main", "alice").returncode == 0
    again = fleet(operator, "deny", "w", "alice")
    assert again.returncode == 4 and "allowed by operator" in again.stderr
    ask(alice, text="curl example.com")
    denied = fleet(operator, "deny", "w", "alice", "--message", "no network", "--json")
    got = json.loads(denied.stdout)
    assert (got["state"], got["via"], got["message"]) == ("denied", "cli", "no network")
    rows = json.loads(fleet(operator, "permissions", "w", "--json").stdout)["requests"]
    assert [x["state"] for x in rows] == ["denied", "allowed"]


def test_status_lists_a_waiting_agent_first_with_what_it_waits_for(operator: Client, tmp_path: Path) -> None:

    from fleet import supervise
    from fleet.paths import get_paths
    from fleet.tmux import Tmux

    operator.create_wave("w", ["alice", "bob", "zoe"])
    zoe = agent(operator, "w", "zoe")
    srv = libtmux.Server(socket_name=f"perm-{tmp_path.name}"[:40])
    st = supervise.status(operator, Tmux(srv), get_paths(), "w")
    assert [r.participant for r in st.rows] == ["alice", "bob", "zoe"] and st.permissions == []
    rid = ask(zoe, "zoe", text="git push")
    st = supervise.status(operator, Tmux(srv), get_paths(), "w")
    assert [r.participant for r in st.rows] == ["zoe", "alice", "bob"]
    assert st.rows[0].state_text.startswith("waiting for permission: Bash (git push)")
    assert st.rows[0].state.kind == "permission" and st.rows[0].state.tool == "Bash"
    assert [p.request_id for p in st.permissions] == [rid]
    assert json.loads(st.model_dump_json())["permissions"][0]["tool"] == "Bash"


def test_the_operators_channel_answers_a_prompt_and_no_agent_channel_can(
    operator: Client, tmp_path: Path
) -> None:
    from mcphelp import RawMcp, channel_argv, minted_token_file

    operator.create_wave("w", ["alice"])
    alice = agent(operator, "w", "alice")
    op_token = tmp_path / "operator.token"
    op_token.write_text(operator.token + "\n")
    quiet = ("--no-deliver", "--receipts", "none")
    argv = channel_argv("operator", "w", operator.base_url, op_token, *quiet)
    alice_token = minted_token_file(operator, "w", "alice", tmp_path)
    agent_argv = channel_argv("alice", "w", operator.base_url, alice_token, *quiet)
    with RawMcp(agent_argv) as mine:
        mine.handshake()
        names = {t["name"] for t in mine.request("tools/list")["result"]["tools"]}
        assert "wavelet_post" in names and "wavelet_permission" not in names
    with RawMcp(argv) as op:
        op.handshake()
        assert "wavelet_permission" in {t["name"] for t in op.request("tools/list")["result"]["tools"]}
        none = op.call("wavelet_permission", {})
        assert "no agent waits" in none["content"][0]["text"]
        ask(alice, text="make deploy")
        listed = op.call("wavelet_permission", {})
        assert "alice: waiting for permission: Bash (make deploy)" in listed["content"][0]["text"]
        done = op.call(
            "wavelet_permission", {"participant": "alice", "behavior": "deny", "message": "not today"}
        )
        assert not done.get("isError") and done["structuredContent"]["requests"][0]["state"] == "denied"
        again = op.call("wavelet_permission", {"participant": "alice", "behavior": "allow"})
        assert again.get("isError") and "waits on no permission request" in again["content"][0]["text"]
    (req,) = operator.permissions("w")
    assert (req.state, req.via, req.message) == ("denied", "channel", "not today")


# ---------------------------------------------------------------- the hook process


def hook_proc(operator: Client, tmp_path: Path, transcript: Path, *extra: str) -> subprocess.Popen[bytes]:
    """``python -m fleet.permissions`` as Claude Code runs it: the prompt's JSON on stdin."""
    token = tmp_path / "alice.token"
    token.write_text(operator.mint_token("w", "alice").token + "\n")
    argv = [sys.executable, "-m", "fleet.permissions", "--participant", "alice", "--wave", "w",
            "--daemon", operator.base_url, "--token-file", str(token), *extra]  # fmt: skip
    given = {"session_id": SID, "transcript_path": str(transcript), "hook_event_name": "PermissionRequest",
             "prompt_id": "p-1", "tool_name": "Bash", "tool_input": {"command": "make deploy"}}  # fmt: skip
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(given).encode())
    proc.stdin.close()
    return proc


def finish(proc: subprocess.Popen[bytes]) -> bytes:
    """The hook's stdout once it exited (its stdin is closed already)."""
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.wait(30)
    return out


def test_the_hook_prints_the_operators_answer(operator: Client, tmp_path: Path) -> None:
    operator.create_wave("w", ["alice"])
    proc = hook_proc(operator, tmp_path, tmp_path / "none.jsonl")
    (req,) = retry_until(lambda: operator.permissions("w", pending=True), what="the hook's request")
    assert (req.tool, req.preview, req.prompt_id) == ("Bash", "make deploy", "p-1")
    operator.answer_permission("w", PermissionAnswer(participant="alice", behavior="deny", message="frozen"))
    out = finish(proc)
    assert proc.returncode == 0
    decision = json.loads(out)["hookSpecificOutput"]
    assert decision["hookEventName"] == "PermissionRequest"
    assert decision["decision"] == {
        "behavior": "deny",
        "message": "Denied by operator via fleet (cli): frozen",
    }


@pytest.mark.parametrize(("result", "outcome"), [("ok", "allowed"), ("rejected", "denied")])
def test_the_hook_lets_go_when_the_pane_answered_and_records_it(
    operator: Client, tmp_path: Path, result: str, outcome: str
) -> None:
    operator.create_wave("w", ["alice"])
    transcript = tmp_path / "t.jsonl"
    # an earlier, answered call of the same command is not this prompt's
    old = {"type": "tool_use", "id": "old", "name": "Bash", "input": {"command": "make deploy"}}
    transcript.write_text(
        line("assistant", old) + line("user", {"type": "tool_result", "tool_use_id": "old"})
    )
    proc = hook_proc(operator, tmp_path, transcript)
    retry_until(lambda: operator.permissions("w", pending=True), what="the hook's request")
    time.sleep(0.5)  # several looks at the transcript that find nothing new: it must keep waiting
    assert proc.poll() is None
    with transcript.open("a") as f:
        f.write(line("assistant", {**old, "id": "new"}))
        text = "The user doesn't want to proceed with this tool use." if result == "rejected" else "deployed"
        f.write(line("user", {"type": "tool_result", "tool_use_id": "new", "content": text,
                              "is_error": result == "rejected"}))  # fmt: skip
    out = finish(proc)
    assert proc.returncode == 0 and out == b""  # the dialog decided: nothing to pass on
    (req,) = operator.permissions("w")
    assert (req.state, req.answered_by, req.via) == (outcome, "pane", "pane")


def test_the_hook_lets_go_at_its_bound_and_when_the_daemon_is_gone(operator: Client, tmp_path: Path) -> None:
    operator.create_wave("w", ["alice"])
    proc = hook_proc(operator, tmp_path, tmp_path / "none.jsonl", "--wait", "1")
    out = finish(proc)
    assert proc.returncode == 0 and out == b""
    (req,) = operator.permissions("w")
    assert (req.state, req.via, req.message) == ("expired", "hook", "its hook's wait ended unanswered")
    # no daemon at the address: nothing printed, exit 0, the dialog decides
    token = tmp_path / "t"
    token.write_text("x\n")
    argv = [sys.executable, "-m", "fleet.permissions", "--participant", "alice", "--wave", "w",
            "--daemon", "http://127.0.0.1:9", "--token-file", str(token)]  # fmt: skip
    stdin = json.dumps({"hook_event_name": "PermissionRequest", "session_id": SID, "tool_name": "Bash"})
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "" and "could not be recorded" in done.stderr


def test_the_hook_lets_go_when_its_session_ends(operator: Client, tmp_path: Path) -> None:
    import os
    import shlex
    import signal

    operator.create_wave("w", ["alice"])
    token = tmp_path / "alice.token"
    token.write_text(operator.mint_token("w", "alice").token + "\n")
    stdin = tmp_path / "prompt.json"
    stdin.write_text(
        json.dumps({"hook_event_name": "PermissionRequest", "session_id": SID, "tool_name": "Bash"})
    )
    hook = shlex.join([sys.executable, "-m", "fleet.permissions", "--participant", "alice", "--wave", "w",
                       "--daemon", operator.base_url, "--token-file", str(token)])  # fmt: skip
    # the shell stands for the session: the hook is its child (``; :`` keeps it from exec'ing the hook)
    session = subprocess.Popen(["/bin/sh", "-c", f"{hook} < {shlex.quote(str(stdin))}; :"])
    retry_until(lambda: operator.permissions("w", pending=True), what="the hook's request")
    os.kill(session.pid, signal.SIGKILL)
    session.wait()
    retry_until(lambda: operator.permissions("w")[0].state == "expired", what="the hook letting go")
    assert operator.permissions("w")[0].message == "the session ended"


def test_a_session_killed_while_its_request_is_being_recorded_is_seen_gone(
    operator: Client, tmp_path: Path
) -> None:
    """The session dies after the hook started but before the daemon answered the request: the hook
    still knows its session (read at its start) and lets go at once."""
    import os
    import shlex
    import signal

    operator.create_wave("w", ["alice"])
    token = tmp_path / "alice.token"
    token.write_text(operator.mint_token("w", "alice").token + "\n")
    stdin = tmp_path / "prompt.json"
    stdin.write_text(
        json.dumps({"hook_event_name": "PermissionRequest", "session_id": SID, "tool_name": "Bash"})
    )
    held = Relay(host_port(operator.base_url), hold=True)
    try:
        hook = shlex.join([sys.executable, "-m", "fleet.permissions", "--participant", "alice", "--wave", "w",
                           "--daemon", held.url, "--token-file", str(token), "--wait", "120"])  # fmt: skip
        session = subprocess.Popen(["/bin/sh", "-c", f"{hook} < {shlex.quote(str(stdin))}; :"])
        assert held.heard.wait(30), "the hook never asked"
        os.kill(session.pid, signal.SIGKILL)
        session.wait()
        held.release()
        retry_until(lambda: operator.permissions("w") and operator.permissions("w")[0].state == "expired",
                    what="the hook letting go")  # fmt: skip
        assert operator.permissions("w")[0].message == "the session ended"
    finally:
        held.close()


def test_a_permission_write_whose_answer_was_lost_is_rebuilt_and_applied_once(fleet_env: Any) -> None:
    from test_request_keys import _lose_answers

    d = Daemon(fleet_env, listen="127.0.0.1:0")
    d.start()
    op = Client(d.url, d.operator_token)
    op.create_wave("w", ["alice"])
    body = PermissionAsk(participant="alice", session_id=SID, tool="Bash", preview="make")
    asked = op._call("POST", "/v1/waves/w/permissions", PermissionRequest, body, key="ask-1")
    answer = PermissionAnswer(participant="alice", request_id=asked.id, behavior="allow")
    answered = op._call("POST", "/v1/waves/w/permissions/answer", PermissionRequest, answer, key="answer-1")
    op.close()
    d.stop()
    assert _lose_answers(fleet_env.db) == 3  # the wave's, the ask's and the answer's
    d = Daemon(fleet_env, listen="127.0.0.1:0")
    d.start()
    try:
        op = Client(d.url, d.operator_token)
        again = op._call("POST", "/v1/waves/w/permissions", PermissionRequest, body, key="ask-1")
        assert again.id == asked.id and again.state == "allowed"  # the request as it is now
        twice = op._call("POST", "/v1/waves/w/permissions/answer", PermissionRequest, answer, key="answer-1")
        assert twice == answered
        assert len(op.permissions("w")) == 1
    finally:
        d.stop()
