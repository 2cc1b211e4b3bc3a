"""Receipts and the ledger against synthetic transcripts in Claude Code 2.1.332's format.

The line shapes are the ones real sessions wrote in tests/real/test_delivery_real.py (see
tests/scripted_model/transcript.py): an enqueue line when Claude Code takes a push, a user line with
``origin.kind == "channel"`` when it enters, an ``attachment`` ``queued_command`` when it is absorbed
into a running turn, and hook feedback as a ``task-notification`` user line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from fleet.delivery.frames import Frame, channel_tag
from fleet.delivery.ledger import PING_GAP, PINGS, Ledger
from fleet.delivery.receipts import Receipt, Transcript, blip_ids_in
from fleet.delivery.state import DeliveryState

SID = "0bcb7c75-e925-499a-98a2-a9791b3e739e"


def frame(i: str, wavelet: str = "wl", kind: str = "message", blip_ids: list[str] | None = None) -> Frame:
    return Frame(id=i, wavelet="w/main", wavelet_id=wavelet, author="bob", kind=kind, text=f"text {i}",
                 created_at="t", blip_ids=blip_ids)  # fmt: skip


def ts(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def enqueue(f: Frame, t: float) -> dict[str, object]:
    return {"type": "queue-operation", "operation": "enqueue", "timestamp": ts(t), "content": channel_tag(f)}


def entered(f: Frame, t: float, via: str = "channel") -> dict[str, object]:
    origin = (
        {"kind": via, "server": "fleet"} if via == "channel" else {"kind": via, "producer": "session-task"}
    )
    text = channel_tag(f)
    if via == "task-notification":
        text = (
            "<task-notification><summary>fleet: new blips</summary></task-notification>"
            f"<system-reminder>{text}</system-reminder>"
        )
    return {
        "type": "user",
        "timestamp": ts(t),
        "origin": origin,
        "message": {"role": "user", "content": text},
    }


def absorbed(f: Frame, t: float) -> dict[str, object]:
    queued = {"type": "queued_command", "prompt": channel_tag(f), "origin": {"kind": "channel"}}
    return {"type": "attachment", "timestamp": ts(t), "attachment": queued}


class Session:
    """A transcript file being written."""

    def __init__(self, home: Path) -> None:
        self.path = home / ".claude" / "projects" / "-tmp-project" / f"{SID}.jsonl"
        self.path.parent.mkdir(parents=True)

    def write(self, *lines: dict[str, object], partial: str = "") -> None:
        with self.path.open("a") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
            f.write(partial)


@pytest.fixture
def session(fleet_env: object) -> Session:
    return Session(Path.home())


def test_channel_blocks_name_their_blips() -> None:
    text = channel_tag(frame("a")) + "\n\n" + channel_tag(frame("d", blip_ids=["b", "c", "d"]))
    assert blip_ids_in(text) == ["a", "b", "c", "d"]
    assert blip_ids_in('<channel source="elsewhere" blip_id="x">') == []


def test_the_transcript_is_found_by_session_id_and_read_incrementally(session: Session) -> None:
    t = Transcript(SID)
    assert t.read() == [] and "no transcript yet" in t.problem
    half = json.dumps(entered(frame("z"), 100.7))
    session.write(enqueue(frame("a"), 100.0), entered(frame("a"), 100.5), partial=half[:20])
    got = t.read()
    assert [(r.blip_ids, r.how, r.via) for r in got] == [
        (["a"], "queued", "channel"),
        (["a"], "entered", "channel"),
    ]
    assert got[1].at == pytest.approx(100.5) and t.problem == ""
    assert t.read() == []  # nothing new, and the half-written line is no receipt yet
    resumed = Transcript(SID, offset=t.consumed)  # a restarted reader rescans nothing
    session.write(partial=half[20:] + "\n")
    session.write(absorbed(frame("b"), 101.0))
    assert [(r.blip_ids, r.how) for r in resumed.read()] == [(["z"], "entered"), (["b"], "entered")]
    assert [r.blip_ids for r in t.read()] == [["z"], ["b"]]


def test_hook_feedback_and_absorbed_pushes_are_receipts_and_other_lines_are_not(session: Session) -> None:
    digest = frame("d", kind="digest", blip_ids=["b", "c", "d"])
    session.write(
        {"type": "custom-title", "customTitle": "alice"},
        {"type": "user", "origin": {"kind": "human"}, "message": {"content": channel_tag(frame("x"))}},
        entered(digest, 5.0, via="task-notification"),
        {"type": "assistant", "timestamp": ts(6.0), "message": {"content": [{"type": "text", "text": "ok"}]}},
    )
    t = Transcript(SID)
    assert [(r.blip_ids, r.how, r.via) for r in t.read()] == [(["b", "c", "d"], "entered", "hook")]
    assert t.last_at == pytest.approx(6.0)


@pytest.mark.parametrize(
    ("content", "problem"),
    [(b"not json at all\n", "format"), (b"", "")],
)
def test_a_transcript_in_another_format_is_never_a_receipt(
    session: Session, content: bytes, problem: str
) -> None:
    session.path.write_bytes(content + b'{"half": ')
    t = Transcript(SID)
    assert t.read() == []
    assert (problem in t.problem) if problem else (t.problem == "")


def test_an_unreadable_or_shrunk_transcript(session: Session) -> None:
    session.write(*[entered(frame(f"a{i}"), 1.0) for i in range(5)])
    t = Transcript(SID)
    assert len(t.read()) == 5
    session.path.write_text("")  # rewritten shorter: start over, nothing stale
    session.write(entered(frame("b"), 2.0))
    assert [r.blip_ids for r in t.read()] == [["b"]]
    session.path.chmod(0)
    try:
        if session.path.open("rb").readable():  # root reads anything: nothing to see
            return
    except PermissionError:
        pass
    assert t.read() == [] and "cannot read" in t.problem


# ---------------------------------------------------------------- the ledger


def ledger(hook: bool = True) -> Ledger:
    return Ledger(
        DeliveryState(daemon="d", wave="w", participant="alice"), "run1", hook=hook, bound=3, grace=3
    )


def test_a_push_is_confirmed_when_it_enters_and_queued_is_recorded() -> None:
    lg = ledger()
    lg.hand(frame("a"), "channel", 10.0)
    lg.apply([Receipt(blip_ids=["a"], how="queued", via="channel", at=10.01)])
    assert lg.state.pending[0].queued_at == pytest.approx(10.01) and lg.state.route == "channel"
    assert lg.lost_pushes(100.0) == []  # taken: it will enter at the turn's end
    done = lg.apply([Receipt(blip_ids=["a"], how="entered", via="channel", at=20.0)])
    assert [p.frame.id for p in done] == ["a"] and lg.state.pending == []
    assert lg.state.confirmed == {"wl": "a"} and lg.state.confirmed_count == 1


def answered(lg: Ledger, at: float, n: int = PINGS, gap: float = 0.0) -> float:
    """The session answers ``n`` pings, the first written at ``at``, each answered ``gap`` seconds
    after it was written and the next written :data:`PING_GAP` after that; the transcript is read
    after the last. Returns when."""
    for _ in range(n):
        lg.pongs.append((at, at + gap))
        at += gap + PING_GAP
    lg.apply([], read_at=at)
    return at


def test_an_untaken_push_is_lost_after_the_bound_and_the_pings_and_turns_the_route_to_the_hook() -> None:
    lg = ledger()
    lg.hand(frame("a"), "channel", 10.0)
    assert lg.lost_pushes(12.9) == [] and not lg.ping_due(12.9)
    assert lg.ping_due(13.0) and lg.lost_pushes(13.0) == []  # the bound: now ask the session
    lg.pongs.append((13.0, 13.01))
    assert not lg.ping_due(13.01 + PING_GAP - 0.01) and lg.ping_due(13.01 + PING_GAP)  # after the gap
    at = answered(lg, 13.01 + PING_GAP, n=PINGS - 1)
    assert not lg.ping_due(at)
    lost = lg.lost_pushes(at)
    assert [p.frame.id for p in lost] == ["a"] and lg.state.route == "hook"
    assert "channels unavailable here" in lg.state.route_why
    lg.owe_hook(lost[0], 13.0)
    assert [p.frame.id for p in lg.waiting()] == ["a"]
    lg.hand(frame("a"), "hook", 14.0)
    assert lg.state.pending[0].path == "hook" and lg.state.pending[0].attempts == 2
    without_hook = ledger(hook=False)
    without_hook.hand(frame("a"), "channel", 10.0)
    answered(without_hook, 13.0)
    without_hook.lost_pushes(20.0)
    assert without_hook.state.route == "unconfirmed"


def test_before_any_push_was_taken_a_session_that_does_not_answer_is_waited_for() -> None:
    """Starved of CPU (or stopped), Claude Code answers no ping: its first push is not handed to the
    hook on the clock, where it would reach the model twice once the session runs again — until the
    patience; nor on pings written before the push, or answered before the transcript was read."""
    lg = ledger()
    lg.hand(frame("a"), "channel", 10.0)
    lg.pongs.append((9.0, 9.1))  # written before the push: says nothing of it
    assert lg.lost_pushes(25.0) == [] and lg.ping_due(25.0)
    for k in range(PINGS):
        lg.pongs.append((26.0 + k * (PING_GAP + 0.02), 26.0 + k * (PING_GAP + 0.02) + 0.01))
    assert lg.lost_pushes(31.0) == []  # answered, but the transcript was not read since
    lg.apply([], read_at=30.0)
    assert [p.frame.id for p in lg.lost_pushes(31.0)] == ["a"]
    frozen = ledger()
    frozen.hand(frame("a"), "channel", 10.0)
    assert frozen.lost_pushes(39.9) == []
    assert [p.frame.id for p in frozen.lost_pushes(40.0)] == ["a"]  # the patience


def taken_then(pushed: str = "b") -> Ledger:
    """A ledger whose session took push ``a`` (at 10) and was then handed ``pushed`` (at 11)."""
    lg = ledger()
    lg.hand(frame("a"), "channel", 10.0)
    lg.apply([Receipt(blip_ids=["a"], how="queued", via="channel", at=10.0)])
    lg.hand(frame(pushed), "channel", 11.0)
    return lg


def test_once_a_push_was_taken_silence_alone_loses_none() -> None:
    """Claude Code writes its queue line behind the session (seconds late under load): a push it has
    not shown yet is not lost by the clock alone, so the hook never brings it a second time."""
    lg = taken_then()
    assert lg.lost_pushes(15.0) == [] and lg.lost_pushes(40.9) == []
    assert [p.frame.id for p in lg.lost_pushes(41.0)] == ["b"]  # the patience: an idle session dropped it
    assert lg.state.route == "channel"


def test_once_a_push_was_taken_a_dropped_one_is_lost_on_evidence() -> None:
    carried_on = taken_then()  # the session ran after b reached it, and ran on past the bound
    carried_on.apply([], last_at=11.5)
    carried_on.apply([], last_at=14.4)  # (a line of the run that read b may precede b's own)
    assert carried_on.lost_pushes(14.5) == []
    carried_on.apply([], last_at=14.6)
    assert [p.frame.id for p in carried_on.lost_pushes(14.6)] == ["b"]
    overtaken = taken_then()  # a push handed after b entered: Claude Code takes pushes in order
    overtaken.hand(frame("c"), "channel", 12.0)
    overtaken.apply([Receipt(blip_ids=["c"], how="queued", via="channel", at=12.0)])
    assert overtaken.lost_pushes(12.0) == []  # queued is no evidence: b's queue line may be behind
    overtaken.apply([Receipt(blip_ids=["c"], how="entered", via="channel", at=12.1)])
    assert [p.frame.id for p in overtaken.lost_pushes(12.1)] == ["b"]
    together = taken_then()  # pushed in one write with b (same hand-out time): no evidence about b
    together.hand(frame("c"), "channel", 11.0)
    together.apply([Receipt(blip_ids=["c"], how="queued", via="channel", at=11.5)])
    assert together.lost_pushes(12.0) == []


def test_a_push_owed_to_the_hook_that_claude_code_then_takes_is_not_handed_again() -> None:
    """Before any push was taken the bound decides; a push it lost on the clock that shows up in the
    queue after all stays the channel's, and the hook's next arm does not bring it."""
    lg = ledger()
    lg.hand(frame("a"), "channel", 10.0)
    answered(lg, 13.0)
    (lost,) = lg.lost_pushes(13.5)
    lg.owe_hook(lost, 13.5)
    assert (lg.state.route, [p.frame.id for p in lg.waiting()]) == ("hook", ["a"])
    lg.apply([Receipt(blip_ids=["a"], how="queued", via="channel", at=10.2)])
    assert (lg.waiting(), lg.state.route, lg.state.pending[0].path) == ([], "channel", "channel")
    lg.apply([Receipt(blip_ids=["a"], how="entered", via="channel", at=14.0)])
    assert lg.state.pending == []


def test_a_restart_makes_untaken_and_unentered_pushes_lost() -> None:
    lg = ledger()
    lg.hand(frame("a"), "channel", 10.0)
    lg.apply([Receipt(blip_ids=["a"], how="queued", via="channel", at=10.0)])
    after = Ledger(lg.state, "run2", hook=True)
    assert [p.frame.id for p in after.lost_pushes(10.5)] == ["a"]  # queued in a queue that died


def test_a_hook_delivery_is_lost_only_with_evidence() -> None:
    lg = ledger()
    lg.hand(frame("h"), "hook", 10.0)
    lg.hooks_running(False, 10.0)  # the hook exited at once
    assert lg.lost_hooks(100.0) == []  # no transcript news: never delivered twice on a guess
    lg.apply([], last_at=12.0)
    assert lg.lost_hooks(100.0) == []  # within the grace: it may still be entering
    lg.apply([], last_at=14.0)
    assert [p.frame.id for p in lg.lost_hooks(100.0)] == ["h"]
    lg.apply([Receipt(blip_ids=["h"], how="entered", via="hook", at=15.0)])
    assert lg.state.pending == [] and lg.lost_hooks(200.0) == []


def test_a_hook_still_running_has_nothing_judged_and_counts_from_its_exit() -> None:
    lg = ledger()
    lg.hand(frame("h"), "hook", 10.0)
    lg.hooks_running(True, 10.1)
    lg.apply([], last_at=20.0)  # the session ran on (woken by a push) while the hook was starved
    assert lg.lost_hooks(20.0) == []
    lg.hooks_running(False, 21.0)  # gone at 21: Claude Code takes its feedback now
    assert lg.lost_hooks(21.5) == []
    lg.apply([], last_at=24.5)
    assert [p.frame.id for p in lg.lost_hooks(24.5)] == ["h"]  # the session carried on past it


def test_a_digest_is_confirmed_whole() -> None:
    lg = ledger()
    lg.hand(frame("c", kind="digest", blip_ids=["a", "b", "c"]), "channel", 1.0)
    lg.apply([Receipt(blip_ids=["a", "b"], how="entered", via="channel", at=2.0)])
    assert len(lg.state.pending) == 1
    lg.apply([Receipt(blip_ids=["a", "b", "c"], how="entered", via="channel", at=3.0)])
    assert lg.state.pending == [] and lg.state.confirmed == {"wl": "c"}


# ---------------------------------------------------------------- the ledger against a session


class SlowSession(RuleBasedStateMachine):
    """A Claude Code session that took a push, then is handed more, over and over: it reads its
    pushes in order whenever it runs (at least every :data:`RUNS_EVERY` seconds: starved by a loaded
    machine in between), takes or drops each, and enters the ones it took in order. It writes two
    streams, as Claude Code 2.1.332 does: its conversation (entered pushes, its own lines) in order,
    and its queue lines apart, which may reach the disk ahead of conversation written before them and
    in any order among themselves (at a session's first turn a later push's queue line was on disk
    before the first pushes', held with the turn's conversation), but never behind conversation
    written after them; each line visible within :data:`WRITES_WITHIN` seconds.
    The channel's ledger looks at what is visible whenever it likes (the conversation's dates are
    its ``last_at``). A push the session took is never handed to the hook; every one it dropped is,
    in the end."""

    RUNS_EVERY = 9.0
    WRITES_WITHIN = 9.0

    def __init__(self) -> None:
        super().__init__()
        self.now = 100.0
        self.lg = ledger()
        self.n = 0
        self.unread: list[str] = []
        self.taken: set[str] = set()
        self.dropped: set[str] = set()
        self.queued: list[str] = []
        self.talk: list[tuple[float, Receipt | None]] = []
        """The conversation as written (date, an entered receipt or a line that is none), in order."""
        self.talk_visible = 0
        self.talk_read = 0
        self.queue: list[tuple[float, Receipt, int]] = []
        """The queue lines as written (date, receipt, how many conversation lines were written
        before it): each becomes visible on its own, at the latest with the conversation after it."""
        self.queue_visible: set[int] = set()
        self.queue_read: set[int] = set()
        self.hooked: list[str] = []
        first = frame("p0")
        self.lg.hand(first, "channel", self.now)
        self.lg.apply([Receipt(blip_ids=["p0"], how="queued", via="channel", at=self.now)], self.now)
        assert self.lg.state.route == "channel"

    @rule(count=st.integers(1, 3))
    def push(self, count: int) -> None:
        """One write of the channel (a step's pushes go out together, stamped alike)."""
        for _ in range(count):
            self.n += 1
            i = f"p{self.n}"
            self.lg.hand(frame(i), "channel", self.now)
            self.unread.append(i)

    @rule(dt=st.floats(0.0, RUNS_EVERY), drops=st.lists(st.booleans(), max_size=8), active=st.booleans())
    def run(self, dt: float, drops: list[bool], active: bool) -> None:
        """Time passes, then the session runs: earlier queued pushes enter, unread ones are read."""
        self.now += dt
        for i in self.queued:
            self.talk.append((self.now, Receipt(blip_ids=[i], how="entered", via="channel", at=self.now)))
        self.queued = []
        for k, i in enumerate(self.unread):
            if k < len(drops) and drops[k]:
                self.dropped.add(i)
            else:
                self.taken.add(i)
                self.queued.append(i)
                queued = Receipt(blip_ids=[i], how="queued", via="channel", at=self.now)
                self.queue.append((self.now, queued, len(self.talk)))
        self.unread = []
        if active:
            self.talk.append((self.now, None))
        due = self.now - self.WRITES_WITHIN  # nothing stays unwritten longer than that
        while self.talk_visible < len(self.talk) and self.talk[self.talk_visible][0] < due:
            self.talk_visible += 1
        self.queue_visible |= {k for k, (at, _, _) in enumerate(self.queue) if at < due}
        self._queue_lines_before_the_talk()

    def _queue_lines_before_the_talk(self) -> None:
        """A queue line is on disk once conversation written after it is."""
        self.queue_visible |= {k for k, (_, _, n) in enumerate(self.queue) if n < self.talk_visible}

    @rule(k=st.integers(0, 5))
    def write(self, k: int) -> None:
        """The conversation's writer catches up by ``k`` lines."""
        self.talk_visible = min(len(self.talk), self.talk_visible + k)
        self._queue_lines_before_the_talk()

    @rule(pick=st.integers(0, 1 << 16))
    def write_queue_line(self, pick: int) -> None:
        """One queue line reaches the disk, whichever (not necessarily the oldest)."""
        waiting = [k for k in range(len(self.queue)) if k not in self.queue_visible]
        if waiting:
            self.queue_visible.add(waiting[pick % len(waiting)])

    @rule()
    def look(self) -> None:
        """The ledger reads what is visible and hands the hook what it lost."""
        talk = self.talk[self.talk_read : self.talk_visible]
        self.talk_read = self.talk_visible
        queue = [self.queue[k][1] for k in sorted(self.queue_visible - self.queue_read, reverse=True)]
        self.queue_read |= self.queue_visible
        got = [*queue, *(r for _, r in talk if r is not None)]
        self.lg.apply(got, max((at for at, _ in talk), default=0.0))
        for p in self.lg.lost_pushes(self.now):
            self.lg.owe_hook(p, self.now)
        for p in self.lg.waiting():
            self.hooked.append(p.frame.id)
            self.lg.hand(p.frame, "hook", self.now)

    @invariant()
    def nothing_taken_goes_to_the_hook(self) -> None:
        assert not self.taken & set(self.hooked), (self.taken & set(self.hooked), self.lg.state.pending)
        assert len(self.hooked) == len(set(self.hooked))

    def teardown(self) -> None:
        self.run(self.RUNS_EVERY, [], False)  # the session reads what is left, takes all of it
        self.now += self.lg.patience + self.WRITES_WITHIN
        self.talk_visible = len(self.talk)
        self.queue_visible = set(range(len(self.queue)))
        self.look()
        self.nothing_taken_goes_to_the_hook()
        assert self.dropped <= set(self.hooked), self.dropped - set(self.hooked)


TestSlowSession = SlowSession.TestCase
TestSlowSession.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)


class SlowHooks(RuleBasedStateMachine):
    """A session whose pushes are taken, some lost and owed to the hook. Each arm is handed what is
    owed, and its process runs up to :data:`HOOK_RUNS` seconds before it exits (starved by a loaded
    machine) while the session may run on, woken by other pushes; at its exit Claude Code queues its
    feedback, which enters later. The transcript is written in order, each line visible within
    :data:`WRITES_WITHIN` seconds. The channel's ledger looks when it likes, told whether a hook it
    handed frames still runs (the gate's connection). No frame is handed to the hook twice."""

    HOOK_RUNS = 9.0
    WRITES_WITHIN = 9.0

    def __init__(self) -> None:
        super().__init__()
        self.now = 100.0
        self.lg = ledger()
        self.lg.hand(frame("p0"), "channel", self.now)
        self.lg.apply([Receipt(blip_ids=["p0"], how="entered", via="channel", at=self.now)], self.now)
        self.n = 0
        self.hooks: list[tuple[float, list[str]]] = []
        """Hook processes running: (when they exit, the frames they carry)."""
        self.to_enter: list[str] = []
        self.lines: list[tuple[float, Receipt | None]] = []
        self.visible = 0
        self.applied = 0
        self.hooked: list[str] = []

    @rule(count=st.integers(1, 3))
    def lose(self, count: int) -> None:
        """Pushes the session dropped, owed to the hook."""
        for _ in range(count):
            self.n += 1
            self.lg.hand(frame(f"p{self.n}"), "channel", self.now)
            (p,) = [p for p in self.lg.state.pending if p.frame.id == f"p{self.n}"]
            self.lg.owe_hook(p, self.now)

    @rule(runs=st.floats(0.0, HOOK_RUNS))
    def arm(self, runs: float) -> None:
        """A hook arms (a turn ended) and is handed what is owed."""
        owed = [p.frame for p in self.lg.waiting()]
        if owed:
            for f in owed:
                self.lg.hand(f, "hook", self.now)
            self.hooked += [f.id for f in owed]
            self.hooks.append((self.now + runs, [f.id for f in owed]))

    @rule(dt=st.floats(0.0, 5.0), active=st.booleans())
    def tick(self, dt: float, active: bool) -> None:
        """Time passes: hooks due exit (their feedback queued then, entering at the next tick);
        the session may write a line of its own (it runs on)."""
        self.now += dt
        for i in self.to_enter:
            self.lines.append((self.now, Receipt(blip_ids=[i], how="entered", via="hook", at=self.now)))
        self.to_enter = []
        for exits, ids in sorted(h for h in self.hooks if h[0] <= self.now):
            for i in ids:
                self.lines.append((exits, Receipt(blip_ids=[i], how="queued", via="hook", at=exits)))
            self.to_enter += ids
        self.hooks = [h for h in self.hooks if h[0] > self.now]
        if active:
            self.lines.append((self.now, None))
        while self.visible < len(self.lines) and self.lines[self.visible][0] < self.now - self.WRITES_WITHIN:
            self.visible += 1

    @rule(k=st.integers(0, 5))
    def write(self, k: int) -> None:
        self.visible = min(len(self.lines), self.visible + k)

    @rule()
    def look(self) -> None:
        new = self.lines[self.applied : self.visible]
        self.applied = self.visible
        self.lg.apply([r for _, r in new if r is not None], max((at for at, _ in new), default=0.0))
        self.lg.hooks_running(bool(self.hooks), self.now)
        for p in self.lg.lost_hooks(self.now):
            self.lg.owe_hook(p, self.now)

    @invariant()
    def no_frame_is_handed_to_the_hook_twice(self) -> None:
        assert len(self.hooked) == len(set(self.hooked)), (self.hooked, self.lg.state.pending)

    def teardown(self) -> None:
        """The session goes idle: what is owed is handed at the next arm, and all of it enters."""
        self.arm(0.0)
        self.tick(self.HOOK_RUNS, False)
        self.tick(self.WRITES_WITHIN + 1, False)
        self.visible = len(self.lines)
        self.look()
        self.no_frame_is_handed_to_the_hook_twice()
        assert not self.lg.state.pending, self.lg.state.pending


TestSlowHooks = SlowHooks.TestCase
TestSlowHooks.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)


class FirstPushes(RuleBasedStateMachine):
    """A session that took no push yet, with channels or without, run like Claude Code 2.1.332: at
    each run (at least every :data:`RUNS_EVERY` seconds: starved in between) its timers fire first —
    a queued line made 100 ms or more before reaches the disk — then it reads its pipe in order:
    each push taken (channels) or dropped (none), each ping answered. The channel hands out pushes,
    writes the pings the ledger asks for, reads what is on disk. With channels no push goes to the
    hook; without, every one does, in the end."""

    RUNS_EVERY = 6.0

    def __init__(self) -> None:
        super().__init__()
        self.now = 100.0
        self.lg = ledger()
        self.n = 0
        self.pipe: list[tuple[str, str | float]] = []
        """What the channel wrote and the session has not read: ("push", id) or ("ping", sent)."""
        self.unwritten: list[tuple[float, Receipt]] = []
        self.disk: list[Receipt] = []
        self.applied = 0
        self.in_flight = False
        self.taken: set[str] = set()
        self.hooked: list[str] = []
        self.channels = True

    @initialize(channels=st.booleans())
    def choose(self, channels: bool) -> None:
        self.channels = channels

    @rule(count=st.integers(1, 3))
    def push(self, count: int) -> None:
        if self.lg.state.route == "hook":
            return  # the channel stops pushing once it knows there are no channels
        for _ in range(count):
            self.n += 1
            i = f"p{self.n}"
            self.lg.hand(frame(i), "channel", self.now)
            self.pipe.append(("push", i))

    @rule(dt=st.floats(0.0, RUNS_EVERY))
    def run(self, dt: float) -> None:
        self.now += dt
        while self.unwritten and self.unwritten[0][0] <= self.now - 0.1:
            self.disk.append(self.unwritten.pop(0)[1])
        for kind, what in self.pipe:
            if kind == "ping":
                self.lg.pongs.append((float(what), self.now))
                self.in_flight = False
            elif self.channels:
                self.taken.add(str(what))
                receipt = Receipt(blip_ids=[str(what)], how="queued", via="channel", at=self.now)
                self.unwritten.append((self.now, receipt))
        self.pipe = []

    @rule(dt=st.floats(0.0, 2.0))
    def look(self, dt: float) -> None:
        """The channel's receipts step: read the disk, hand the hook what is lost, ping if asked."""
        self.now += dt
        new, self.applied = self.disk[self.applied :], len(self.disk)
        self.lg.apply(new, max((r.at for r in new), default=0.0), read_at=self.now)
        for p in self.lg.lost_pushes(self.now):
            self.lg.owe_hook(p, self.now)
        for p in self.lg.waiting():
            self.hooked.append(p.frame.id)
            self.lg.hand(p.frame, "hook", self.now)
        if self.lg.ping_due(self.now) and not self.in_flight:
            self.pipe.append(("ping", self.now))
            self.in_flight = True

    @invariant()
    def nothing_taken_goes_to_the_hook(self) -> None:
        assert not self.taken & set(self.hooked), (self.taken & set(self.hooked), self.lg.pongs)

    def teardown(self) -> None:
        for _ in range(40):  # the session runs on, the channel keeps looking: it settles
            self.run(self.RUNS_EVERY / 2)
            self.look(0.5)
        self.nothing_taken_goes_to_the_hook()
        if not self.channels:
            assert {f"p{i}" for i in range(1, self.n + 1)} <= set(self.hooked)
        else:
            assert self.hooked == [] and (self.n == 0 or self.lg.state.route == "channel")


TestFirstPushes = FirstPushes.TestCase
TestFirstPushes.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
