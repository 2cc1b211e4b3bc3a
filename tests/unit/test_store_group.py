"""A group of writes (fleet.store.schema.Connections.group, what the daemon's loop runs in one turn):
the writes share one transaction, a failed one is undone alone, the group's own reads see what it
wrote and nobody else's do before the commit, and a transaction that did not commit is told to
every step that touched it, with nothing of it stored. Real SQLite files throughout."""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fleet import errors
from fleet.records.budgets import SetBudget
from fleet.store import OPERATOR_PRINCIPAL as OP
from fleet.store import Store
from fleet.store.schema import Group


@pytest.fixture
def store(sqlite_store: Store) -> Store:
    return sqlite_store


def texts(store: Store, wavelet: str) -> list[str]:
    """What a reader on another thread finds committed in ``wavelet`` (messages, in order)."""
    got: list[list[str]] = []

    def read() -> None:
        try:
            got.append([b.text for b in store.read_resolved(OP, wavelet) if b.kind == "message"])
        finally:
            store.release_reader()

    t = threading.Thread(target=read)
    t.start()
    t.join(10)
    return got[0]


def lose_the_transaction(store: Store) -> None:
    """What SQLite does on a full disk or an I/O error mid-statement: the whole transaction rolled
    back under the writer, and the write that met it fails."""
    with store._db.write() as conn:
        conn.execute("ROLLBACK")
        raise OSError(errno.ENOSPC, "No space left on device")


def fail_the_commit(store: Store) -> None:
    """A write whose wrong only the COMMIT finds (a deferred foreign key): the COMMIT fails."""
    with store._db.write() as conn:
        conn.execute("PRAGMA defer_foreign_keys = ON")
        conn.execute(
            "INSERT INTO wavelets(id, wave_id, name, created_by, created_at)"
            " VALUES ('x', 'no wave', 'x', 'op', '')"
        )


def test_a_group_commits_once_and_a_write_that_fails_is_undone_alone(store: Store) -> None:
    wave = store.create_wave(OP, "w", ["alice"])
    first = store.post(OP, wave.root_id, "first")
    store.replace(OP, first.id, "first, again")
    before = store._db.generation
    with store.group() as g:
        mark = g.mark()
        store.post(OP, wave.root_id, "a")
        with pytest.raises(errors.Conflict):  # replacing a replaced version: refused inside its write
            store.replace(OP, first.id, "stale")
        store.post(OP, wave.root_id, "b")
        assert texts(store, wave.root_id) == ["first, again"]  # nothing of the group committed yet
    assert store._db.generation == before + 1  # one transaction
    assert g.span(mark) == range(1, 2) and g.fault(g.span(mark)) is None
    assert texts(store, wave.root_id) == ["first, again", "a", "b"]


def test_inside_a_group_reads_see_what_it_wrote(store: Store) -> None:
    wave = store.create_wave(OP, "w", ["alice", "bob"])
    store.mint_token(OP, "w", "alice", "alice-secret")
    alice = store.authenticate("alice-secret")
    assert alice is not None
    with store.group():
        store.leave(OP, wave.root_id, "alice")
        # her removal is not committed, but a request after it in the same group must meet it
        with pytest.raises(errors.Forbidden):
            store.post(alice, wave.root_id, "after my removal")
        assert [b.text for b in store.read_resolved(OP, wave.root_id) if b.kind == "message"] == []
        store.post(OP, wave.root_id, "seen by the group")
        assert "seen by the group" in [b.text for b in store.read_resolved(OP, wave.root_id)]
        assert "seen by the group" not in texts(store, wave.root_id)


def test_what_one_generation_shared_is_not_taken_inside_a_group_that_changed_it(store: Store) -> None:
    store.create_wave(OP, "w", ["alice"])
    assert store.budgets(OP, "w") == []  # "no budgets" is shared with the feeds of this generation
    with store.group():
        store.set_budget(OP, "w", SetBudget(participant="alice", tokens=1000))
        assert [b.participant for b in store.budgets(OP, "w")] == ["alice"]
    assert [b.participant for b in store.budgets(OP, "w")] == ["alice"]


def test_a_token_revoked_in_a_group_lets_nobody_in_from_the_cache_meanwhile(store: Store) -> None:
    store.create_wave(OP, "w", ["alice"])
    store.mint_token(OP, "w", "alice", "alice-secret")
    assert store.authenticate("alice-secret") is not None  # remembered now
    with store.group():
        store.revoke_tokens(OP, wave="w", participant="alice")
        assert store.authenticate("alice-secret") is None
    assert store.authenticate("alice-secret") is None


def test_a_lost_transaction_is_told_to_every_step_that_touched_it_and_nothing_of_it_is_stored(
    store: Store,
) -> None:
    wave = store.create_wave(OP, "w", ["alice"])
    with store.group() as g:
        m1 = g.mark()
        store.post(OP, wave.root_id, "lost 1")
        s1 = g.span(m1)
        m2 = g.mark()
        with pytest.raises(errors.StorageFault):
            lose_the_transaction(store)
        s2 = g.span(m2)
        m3 = g.mark()
        assert [b.text for b in store.read_resolved(OP, wave.root_id)][-1:] != ["lost 1"]
        s3 = g.span(m3)  # read with no transaction open: only what was committed
        m4 = g.mark()
        store.post(OP, wave.root_id, "lost at the commit")
        fail_the_commit(store)
        s4 = g.span(m4)
    assert g.fault(s1) is not None and g.fault(s2) is not None
    assert isinstance(g.fault(s1), errors.StorageFault) and g.fault(s1) is g.fault(s2)
    assert not s3 and g.fault(s3) is None
    assert "FOREIGN KEY" in g.fault(s4).message  # type: ignore[union-attr]
    assert texts(store, wave.root_id) == []
    # the store writes on afterwards, in a group or not
    with store.group() as g:
        m = g.mark()
        store.post(OP, wave.root_id, "after")
    assert g.fault(g.span(m)) is None
    store.post(OP, wave.root_id, "alone")
    assert texts(store, wave.root_id) == ["after", "alone"]


def test_another_threads_write_waits_for_the_group_and_is_not_part_of_it(store: Store) -> None:
    wave = store.create_wave(OP, "w", ["alice"])
    done = threading.Event()
    with store.group() as g:
        store.post(OP, wave.root_id, "group")

        def other() -> None:
            store.post(OP, wave.root_id, "other thread")
            done.set()

        t = threading.Thread(target=other)
        t.start()
        assert not done.wait(0.2)  # it waits for the writer lock the group holds
        mark = g.mark()
        store.post(OP, wave.root_id, "group 2")
        span = g.span(mark)
    t.join(10)
    assert done.is_set() and g.fault(span) is None
    assert texts(store, wave.root_id) == ["group", "group 2", "other thread"]


class GroupsMachine(RuleBasedStateMachine):
    """Groups of posts, refused writes, lost transactions and failed commits, in any order: what is
    stored is exactly what the model says committed, and each step is told a fault exactly when a
    transaction it touched did not commit."""

    @initialize()
    def open(self) -> None:
        import tempfile

        self.dir = tempfile.TemporaryDirectory()
        self.store = Store(Path(self.dir.name) / "fleet.sqlite3")
        wave = self.store.create_wave(OP, "w", ["alice"])
        self.wl = wave.root_id
        first = self.store.post(OP, self.wl, "seed")
        self.store.replace(OP, first.id, "seed")
        self.replaced = first.id
        self.committed: list[str] = ["seed"]
        self.n = 0
        self.group: Group | None = None
        self.cm: Any = None
        self.pending: list[str] = []
        """Posts of the group's open transaction (stored if it commits)."""
        self.steps: list[list[object]] = []
        """[span, lost?] of each step of the group: lost is settled when its transaction ends."""
        self.open_steps: list[int] = []
        """Indexes into steps of those touching the open transaction."""
        self.txn_open = False

    def teardown(self) -> None:
        if self.group is not None:
            self.cm.__exit__(None, None, None)
        self.store.close()
        self.dir.cleanup()

    def _step(self, begins: bool) -> list[object]:
        """A step about to run: it touches the open transaction, or the one it begins."""
        assert self.group is not None
        step: list[object] = [self.group.mark(), False]
        self.steps.append(step)
        if self.txn_open or begins:
            self.open_steps.append(len(self.steps) - 1)
            self.txn_open = True
        return step

    def _ran(self, step: list[object]) -> None:
        assert self.group is not None
        step[0] = self.group.span(step[0])  # type: ignore[arg-type]

    def _lost(self) -> None:
        for i in self.open_steps:
            self.steps[i][1] = True
        self.open_steps = []
        self.pending = []
        self.txn_open = False

    @precondition(lambda self: self.group is None)
    @rule()
    def begin(self) -> None:
        self.cm = self.store.group()
        self.group = self.cm.__enter__()
        self.steps, self.open_steps, self.pending, self.txn_open = [], [], [], False

    @rule()
    def post(self) -> None:
        self.n += 1
        text = f"post {self.n}"
        if self.group is None:
            self.store.post(OP, self.wl, text)
            self.committed.append(text)
            return
        step = self._step(begins=True)
        self.store.post(OP, self.wl, text)
        self._ran(step)
        self.pending.append(text)

    @precondition(lambda self: self.group is not None)
    @rule()
    def refused(self) -> None:
        step = self._step(begins=True)  # (its write begins, and is undone alone)
        with pytest.raises(errors.Conflict):
            self.store.replace(OP, self.replaced, "stale")
        self._ran(step)

    @precondition(lambda self: self.group is not None)
    @rule()
    def read(self) -> None:
        step = self._step(begins=False)
        shown = [b.text for b in self.store.read_resolved(OP, self.wl) if b.kind == "message"]
        self._ran(step)
        assert shown == self.committed + self.pending

    @precondition(lambda self: self.group is not None)
    @rule()
    def lose(self) -> None:
        step = self._step(begins=True)
        with pytest.raises(errors.StorageFault):
            lose_the_transaction(self.store)
        self._ran(step)
        self._lost()

    @precondition(lambda self: self.group is not None)
    @rule(commit_fails=st.booleans())
    def end(self, commit_fails: bool) -> None:
        assert self.group is not None
        if commit_fails:
            step = self._step(begins=True)
            fail_the_commit(self.store)
            self._ran(step)
        self.cm.__exit__(None, None, None)
        if commit_fails:
            self._lost()
        else:
            self.committed += self.pending
        g, self.group = self.group, None
        for span, lost in self.steps:
            assert (g.fault(span) is not None) == lost, (span, lost, g.faults)  # type: ignore[arg-type]

    @invariant()
    def stored(self) -> None:
        if self.group is None:
            assert texts(self.store, self.wl) == self.committed


TestGroups = GroupsMachine.TestCase
TestGroups.settings = settings(
    max_examples=40, stateful_step_count=20, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
