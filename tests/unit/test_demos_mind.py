"""The resident demo's scripted mind (fleet.demos.resident): it dispatches only the operator's jobs and
reports only its jobs done."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.standin import Agent, Recorder, parse_args


class ScriptedMind(Agent):
    """The stand-in's ``--mind`` with its two effects (a tool call, a post) kept instead of sent."""

    def __init__(self, log_dir: Path) -> None:
        args = parse_args(["--name", "resident", "--mind", "worker.toml", "--workers", "worker,helper"])
        super().__init__(args, Recorder(log_dir / "resident.jsonl"))
        self.calls: list[dict[str, Any]] = []
        self.posts: list[tuple[str, str]] = []

    def call(self, tool: str, arguments: dict[str, Any]) -> str:
        self.calls.append({"tool": tool, **arguments})
        return f"forked {arguments['name']}"

    def post(self, wavelet: str, text: str) -> None:
        self.posts.append((wavelet, text))


AUTHORS = st.sampled_from(["operator", "resident", "worker", "helper", "system"])


WAVELETS = st.sampled_from(["w/main", "w/job-1", "w/job-2", "w/other"])


TEXTS = st.sampled_from(["resident: do it", "DONE: finished", "hello", "worker: status?", "DONE: resident"])


KINDS = st.sampled_from(["message", "message", "system", "surface", "digest"])


TYPED = st.sampled_from(["[fleet] heartbeat: 1 in flight", "[fleet] cron due: standup — dispatch it"])


EVENTS = st.lists(
    st.one_of(st.tuples(AUTHORS, WAVELETS, KINDS, TEXTS), st.tuples(st.just("typed"), TYPED)), max_size=40
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=EVENTS)
def test_the_scripted_mind_dispatches_only_operator_jobs_and_reports_only_its_jobs_done(
    events: list[tuple[str, ...]], tmp_path: Path
) -> None:
    """Whatever reaches it: one fork per operator message naming it in main (never for its own, a
    worker's or a system blip), a DONE: reported once per job it forked (later ones are not), and a
    heartbeat pinging exactly the jobs not done, naming every worker."""
    mind = ScriptedMind(tmp_path)
    jobs: dict[str, bool] = {}
    want_posts = 0
    for event in events:
        if event[0] == "typed":
            before = len(mind.posts)
            mind.act(event[1], {"kind": "typed"})
            pinged = [w for w, text in mind.posts[before:] if "how is it going" in text]
            if "heartbeat" in event[1]:
                assert sorted(pinged) == sorted(j for j, done in jobs.items() if not done)
                assert all(t.startswith("worker, helper:") for _w, t in mind.posts[before:])
            elif jobs:  # a cron due: acknowledged to the operator in main
                assert mind.posts[before:] == [("w/main", mind.posts[-1][1])]
            want_posts += len(mind.posts) - before
            continue
        author, wavelet, kind, text = event
        mind.act(text, {"author": author, "wavelet": wavelet, "kind": kind})
        if kind != "message" or author == "resident":
            continue
        if text.startswith("DONE:") and wavelet in jobs:
            want_posts += not jobs[wavelet]
            jobs[wavelet] = True
        elif wavelet == "w/main" and author == "operator" and "resident" in text:
            jobs[f"w/job-{len(jobs) + 1}"] = False
            want_posts += 1
    assert [c["name"] for c in mind.calls] == [j.split("/")[1] for j in jobs]
    assert all(c["tool"] == "wavelet_fork" and c["spawn"] == "worker.toml" for c in mind.calls)
    assert all(c["with"] == ["worker", "helper"] and c["wavelet"] == "w/main" for c in mind.calls)
    assert mind.jobs == jobs and len(mind.posts) == want_posts
