"""The channel's sink (fleet/channel/server.py ``_Sink``): when a step's pushes count as handed out.

A step's pushes are kept and written together at its flush (one write: Claude Code takes them into
one turn). The ledger's bound — how long Claude Code may take to queue a push before it is owed to
the hook — must count from that write: counted from each push's composing, a step that took a while
between its first push and its flush (a descheduled channel; ``FLEET_FAULT_PUSH_GAP`` in tests) left
its first frames less than the bound, and a loaded Claude Code that queued them a second late had
them delivered a second time by the hook (seen in tests/real/test_receipts_real.py at load ~8: the
wave's provenance in the model's context twice).
"""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.channel.server import _Sink
from fleet.delivery.frames import Frame
from fleet.delivery.ledger import Ledger
from fleet.delivery.receipts import Receipt
from fleet.delivery.state import DeliveryState

BOUND = 0.5


class Pipe:
    """The protocol server's output side as the sink uses it: held notifications, written at release."""

    def __init__(self) -> None:
        self.held: list[str] = []
        self.writes: list[tuple[float, list[str]]] = []
        """Each write: when, and the notifications it carried."""

    def hold(self) -> None:
        self.held = []

    def notify(self, method: str, params: object = None) -> bool:
        self.held.append(str(params))
        return True

    def release(self) -> bool:
        self.writes.append((time.time(), self.held))
        self.held = []
        return True


class Host:
    """What the sink reads of its channel: the stop flag, the ledger, the route, the server."""

    def __init__(self, ledger: Ledger) -> None:
        self._stop = threading.Event()
        self.ledger: Ledger | None = ledger
        self.hook_route = False
        self.server = Pipe()
        self.codex: object | None = None
        """A Codex session's waker (None: Claude Code, pushed through the pipe)."""
        self.wakes: list[tuple[list[str], list[str]]] = []

    def wake_codex(self, frames: list[Frame], swallowed: list[Frame]) -> bool:
        self.wakes.append(([f.id for f in frames], [f.id for f in swallowed]))
        return True


def frame(i: str) -> Frame:
    return Frame(id=i, wavelet="w/main", wavelet_id="wl", author="bob", kind="message", text=i, created_at="")


def ledger() -> Ledger:
    return Ledger(DeliveryState(daemon="d", wave="w", participant="bob"), "run1", hook=True, bound=BOUND)


def test_the_bound_counts_from_the_write_not_from_each_push(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_FAULT_PUSH_GAP", "0.3")  # the channel stalls after each push
    lg = ledger()
    host = Host(lg)
    sink = _Sink(host)  # type: ignore[arg-type]
    assert sink.push(frame("a")) and sink.push(frame("b")) and sink.flush()
    ((written, notes),) = host.server.writes
    assert len(notes) == 2  # one write for the step
    assert [p.frame.id for p in lg.state.pending] == ["a", "b"]
    assert all(p.handed_at >= written for p in lg.state.pending), (written, lg.state.pending)
    # Claude Code queues both a little before the bound is up after the write: neither is lost
    assert lg.lost_pushes(written + BOUND - 0.01) == []
    lg.apply([Receipt(blip_ids=["a"], how="queued", via="channel", at=written + 0.4)])
    lg.apply([Receipt(blip_ids=["b"], how="queued", via="channel", at=written + 0.4)])
    assert lg.lost_pushes(written + 10) == [] and lg.state.route == "channel"


def test_a_step_whose_write_failed_hands_out_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLEET_FAULT_PUSH_GAP", raising=False)
    lg = ledger()
    host = Host(lg)
    host.server.release = lambda: False  # type: ignore[method-assign]  # the output closed
    sink = _Sink(host)  # type: ignore[arg-type]
    assert sink.push(frame("a")) and not sink.flush()
    assert lg.state.pending == []  # the engine takes the step back: nothing is out to be lost


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=6))
def test_every_frame_pushed_is_handed_once_no_earlier_than_its_steps_write(steps: list[int]) -> None:
    lg = ledger()
    host = Host(lg)
    sink = _Sink(host)  # type: ignore[arg-type]
    step_of: dict[str, int] = {}
    for k, size in enumerate(steps):
        for _ in range(size):
            name = f"f{len(step_of):03d}"
            step_of[name] = k
            assert sink.push(frame(name))
        assert sink.flush()
    assert [len(notes) for _at, notes in host.server.writes] == steps  # one write per step
    assert [p.frame.id for p in lg.state.pending] == list(step_of)
    for p in lg.state.pending:
        assert p.attempts == 1 and p.path == "channel"
        assert p.handed_at >= host.server.writes[step_of[p.frame.id]][0]


def test_a_codex_steps_frames_go_out_in_one_wake_and_none_through_the_pipe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Codex takes no push: the step's frames are one ``codex queue`` message at the flush, the fault
    injection's swallowed ones among them (handed, never sent) — nothing is written to the MCP pipe."""
    monkeypatch.setenv("FLEET_FAULT_DROP_PUSH", "2")
    host = Host(ledger())
    host.codex = object()
    sink = _Sink(host)  # type: ignore[arg-type]
    assert all(sink.push(frame(i)) for i in ("a", "b", "c"))
    assert host.wakes == [] and sink.flush()
    assert host.wakes == [(["a", "b", "c"], ["b"])]
    assert host.server.writes == [] and host.server.held == [] and sink.flush()  # nothing held: nothing more
