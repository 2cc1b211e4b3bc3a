"""The delivery engine with a fake feed and a list sink: every rule, no daemon, no threads, milliseconds.

The fake feed answers like the daemon's ``/feed``: for each wavelet the participant is on, the blips
with an id above the cursor it was given (or the member's ``since``), oldest first.
"""

from __future__ import annotations

import html
from pathlib import Path

import pytest

from fleet import wire
from fleet.delivery.attention import Attendant, RouteEntry, RoutingLog, parse_entry
from fleet.delivery.engine import Backoff, Engine, ListSink
from fleet.delivery.frames import Frame, channel_tag, hook_report, notification
from fleet.delivery.rules import Attention, Delivery
from fleet.delivery.state import DeliveryState
from fleet.ids import IdMinter
from fleet.models import Blip, BlipKind, Feed, FeedWavelet


class FakeFeed:
    """Wavelets the participant is on, and every blip posted, like the daemon holds them."""

    def __init__(self) -> None:
        self.ids = IdMinter()
        self.wavelets: dict[str, str] = {}
        self.blips: list[Blip] = []
        self.requests: list[dict[str, str]] = []

    def join(self, name: str) -> str:
        wid = f"wl-{name}"
        self.wavelets[wid] = name
        return wid

    def leave(self, wid: str) -> None:
        del self.wavelets[wid]

    def post(self, wid: str, author: str, text: str = "", kind: BlipKind = "message", **extra: str) -> Blip:
        blip = Blip(
            id=self.ids.mint(),
            wavelet_id=wid,
            wave_id="wave",
            author=author,
            kind=kind,
            text=text or f"{author} says something",
            created_at="2026-12-01T00:00:00.000Z",
            **extra,
        )
        self.blips.append(blip)
        return blip

    def feed(
        self, wave: str, participant: str, cursors: dict[str, str], wait: float = 0, limit: int = 200
    ) -> Feed:
        self.requests.append(dict(cursors))
        out = [
            b for b in self.blips if b.wavelet_id in self.wavelets and b.id > cursors.get(b.wavelet_id, "")
        ]
        return Feed(
            wavelets=[
                FeedWavelet(id=w, name=n, wave="w", private=False, since="") for w, n in self.wavelets.items()
            ],
            blips=sorted(out, key=lambda b: b.id)[:limit],
        )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def engine(
    feed: FakeFeed,
    sink: ListSink | None = None,
    *,
    cap: int = 0,
    attention: Attention = "full",
    hold: float = 0.0,
    clock: Clock | None = None,
    routing: RoutingLog | None = None,
    attendant: Attendant | None = None,
    who: str = "alice",
) -> Engine:
    core = Delivery(
        who, DeliveryState(daemon="d", wave="w", participant=who), cap=cap, attention=attention, hold=hold
    )
    return Engine(
        core, feed, sink or ListSink(), wave="w", routing=routing, attendant=attendant, clock=clock or Clock()
    )


def texts(frames: list[Frame]) -> list[str]:
    return [f.text for f in frames]


def test_a_cursor_per_wavelet_keeps_a_quiet_wavelets_old_blip() -> None:
    feed = FakeFeed()
    busy, quiet = feed.join("busy"), feed.join("quiet")
    old = feed.post(quiet, "bob", "the quiet one")
    e = engine(feed)
    sink = e.sink
    assert isinstance(sink, ListSink)
    for i in range(5):
        feed.post(busy, "bob", f"busy {i}")
    e.step(0)
    frames = sink.take()
    assert sorted(f.id for f in frames) == sorted(b.id for b in feed.blips)
    assert e.core.cursors == {busy: feed.blips[-1].id, quiet: old.id}
    assert e.step(0).pushed == 0 and not sink.take()  # nothing twice


def test_echo_suppression_steps_over_own_blips_and_own_provenance() -> None:
    feed = FakeFeed()
    wl = feed.join("main")
    mine = feed.post(wl, "alice", "mine")
    feed.post(wl, "system", "alice forked x", kind="system", actor="alice")
    theirs = feed.post(wl, "bob", "theirs")
    e = engine(feed)
    e.step(0)
    assert [f.id for f in e.sink.take()] == [theirs.id]  # type: ignore[attr-defined]
    assert e.core.cursors[wl] == theirs.id and mine.id < theirs.id


def test_a_failed_push_keeps_the_cursor_and_the_rest_comes_next_time() -> None:
    feed = FakeFeed()
    wl = feed.join("main")
    blips = [feed.post(wl, "bob", f"b{i}") for i in range(4)]
    failing = ListSink(fail_after=1)
    e = engine(feed, failing)
    step = e.step(0)
    assert (step.pushed, step.complete) == (1, False)
    assert e.core.cursors[wl] == blips[0].id
    e.sink = ok = ListSink()
    e.step(0)
    assert [f.id for f in [*failing.frames, *ok.frames]] == [b.id for b in blips]  # each once, in order


@pytest.mark.parametrize("attention", ["full", "targeted"])
def test_a_step_whose_frames_cannot_be_written_together_commits_none_of_them(attention: Attention) -> None:
    """The channel's sink keeps a step's frames and writes them in one write at the step's flush.
    If that write fails, the state is as it was before the step's first push (cursors, counts,
    nothing saved as delivered), and the next step hands the same blips out again, each once."""
    feed = FakeFeed()
    wl = feed.join("main")
    feed.post(wl, "bob", "alice: first")
    e = engine(feed, attention=attention, cap=5)
    e.step(0)
    e.core.mark_saved()
    before = wire.dump(e.core.state)
    blips = [feed.post(wl, "bob", f"alice: b{i}") for i in range(3)]
    e.sink = failing = ListSink(fail_flush=True)
    step = e.step(0)
    assert (step.pushed, step.complete) == (0, False)
    assert len(failing.frames) == 3  # pushed, then the flush failed
    assert wire.dump(e.core.state) == before and e.core.dirty  # (dirty: the file is saved again)
    e.sink = ok = ListSink()
    e.step(0)
    assert [f.id for f in ok.frames] == [b.id for b in blips]
    assert e.core.state.delivered[wl] == 4


def test_an_error_between_two_pushes_still_ends_the_steps_pushes() -> None:
    """A push that raises: what the step pushed before it is flushed (the channel writes it, it is
    committed) and the error raised; the next step starts afresh."""

    class Raising(ListSink):
        flushes = 0

        def push(self, frame: Frame) -> bool:
            if self.frames:
                raise RuntimeError("a broken frame")
            return super().push(frame)

        def flush(self) -> bool:
            self.flushes += 1
            return True

    feed = FakeFeed()
    wl = feed.join("main")
    first, second = feed.post(wl, "bob", "one"), feed.post(wl, "bob", "two")
    e = engine(feed, sink := Raising())
    with pytest.raises(RuntimeError):
        e.step(0)
    assert sink.flushes == 1 and e.core.cursors[wl] == first.id
    e.sink = ok = ListSink(fail_flush=True)
    assert e.step(0).complete is False and e.core.cursors[wl] == first.id  # its own restore point
    e.sink = ok = ListSink()
    e.step(0)
    assert [f.id for f in ok.frames] == [second.id]


def test_targeted_frames_full_for_mentions_operator_surfaces_and_one_digest(tmp_path: Path) -> None:
    feed = FakeFeed()
    wl = feed.join("main")
    chatter = feed.post(wl, "bob", "weather is nice")
    named = feed.post(wl, "bob", "alice: look at this")
    op = feed.post(wl, "operator", "status?")
    more = feed.post(wl, "carol", "lunch")
    surfaced = feed.post(wl, "dave", "decided: X", kind="surface")
    routing = RoutingLog(tmp_path / "r.jsonl", "alice", "w")
    e = engine(feed, attention="targeted", routing=routing)
    e.step(0)
    frames = e.sink.take()  # type: ignore[attr-defined]
    assert [(f.kind, f.id) for f in frames] == [
        ("message", named.id),
        ("message", op.id),
        ("surface", surfaced.id),
        ("digest", more.id),
    ]
    assert frames[3].blip_ids == [chatter.id, more.id] and f"[{chatter.id}]" in frames[3].text
    logged = [parse_entry(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert all(isinstance(x, RouteEntry) for x in logged)
    assert {x.blip_id: x.route for x in logged if isinstance(x, RouteEntry)} == {
        chatter.id: "digest",
        named.id: "full",
        op.id: "full",
        more.id: "digest",
        surfaced.id: "full",
    }


@pytest.mark.parametrize(
    ("attention", "says"),
    [
        ("full", "Delivery cap reached in w/main: 2 blips"),
        ("targeted", "2 notifications (blips and digests) were pushed"),
    ],
)
def test_the_caps_notice_is_one_frame_from_fleet_saying_what_was_counted(
    attention: Attention, says: str
) -> None:
    """The engine's part of the cap: the rules' notice (tests/unit/test_delivery_rules.py: one notice,
    then silence until the operator posts; frames, not blips, in targeted mode) becomes one frame."""
    feed = FakeFeed()
    wl = feed.join("main")
    for i in range(3):
        feed.post(wl, "bob", f"alice: {i}")
    e = engine(feed, attention=attention, cap=2)
    e.step(0)
    frames = e.sink.take()  # type: ignore[attr-defined]
    assert [f.kind for f in frames] == ["message", "message", "cap"]
    assert frames[2].author == "fleet" and says in frames[2].text


def test_the_digest_hold_waits_for_company_and_a_full_blip_takes_it_along() -> None:
    feed = FakeFeed()
    wl = feed.join("main")
    clock = Clock()
    e = engine(feed, attention="targeted", hold=30.0, clock=clock)
    first = feed.post(wl, "bob", "chatter one")
    e.step(20.0)
    assert e.sink.take() == []  # type: ignore[attr-defined]
    assert e.core.cursors == {} and e.feed_cursors == {wl: first.id}  # held, not committed, not re-fetched
    assert e.poll_wait(20.0) == 20.0
    clock.now += 25.0
    assert e.poll_wait(20.0) == 5.0  # the poll ends when the held digest is due
    second = feed.post(wl, "carol", "chatter two")
    e.step(0)
    assert e.sink.take() == []  # type: ignore[attr-defined]
    named = feed.post(wl, "dave", "alice: now")
    e.step(0)
    frames = e.sink.take()  # type: ignore[attr-defined]
    assert [(f.kind, f.id) for f in frames] == [("message", named.id), ("digest", second.id)]
    assert frames[1].blip_ids == [first.id, second.id]
    assert e.core.cursors == {wl: named.id}


def test_the_digest_hold_deadline_releases_a_lone_digest() -> None:
    feed = FakeFeed()
    wl = feed.join("main")
    clock = Clock()
    e = engine(feed, attention="targeted", hold=30.0, clock=clock)
    only = feed.post(wl, "bob", "chatter")
    e.step(0)
    clock.now += 30.0
    e.step(0)
    assert [(f.kind, f.blip_ids) for f in e.sink.take()] == [("digest", [only.id])]  # type: ignore[attr-defined]


def test_a_targeted_batch_commits_whole_per_wavelet() -> None:
    feed = FakeFeed()
    a, b = feed.join("a"), feed.join("b")
    feed.post(a, "bob", "alice: in a")
    in_b = [feed.post(b, "bob", "alice: one in b"), feed.post(b, "bob", "alice: two in b")]
    e = engine(feed, ListSink(fail_after=2), attention="targeted")
    step = e.step(0)
    assert not step.complete and step.pushed == 1  # a committed; b's first frame went out, b did not commit
    assert a in e.core.cursors and b not in e.core.cursors
    e.sink = ListSink()
    e.step(0)
    assert [f.id for f in e.sink.take()] == [x.id for x in in_b]


def test_a_wavelet_left_is_forgotten_and_only_filters_without_moving_cursors() -> None:
    feed = FakeFeed()
    a, b = feed.join("a"), feed.join("b")
    feed.post(a, "bob")
    in_b = feed.post(b, "bob")
    e = engine(feed)
    e.only = frozenset({a})
    e.step(0)
    assert [f.wavelet_id for f in e.sink.take()] == [a]  # type: ignore[attr-defined]
    assert b not in e.core.cursors and e.feed_cursors[b] == in_b.id  # skipped for the poll only
    feed.leave(a)
    e.step(0)
    assert a not in e.core.cursors


def test_a_feed_behind_the_cursors_is_reported_stuck() -> None:
    feed = FakeFeed()
    wl = feed.join("main")
    blip = feed.post(wl, "bob")
    e = engine(feed)
    e.step(0)
    stale = Feed(wavelets=[FeedWavelet(id=wl, name="main", wave="w", private=False, since="")], blips=[blip])
    assert e.handle(stale).stuck


def test_backoff_doubles_to_its_limit_and_resets() -> None:
    b = Backoff(first=1.0, limit=4.0, jitter=0.0)
    assert [b.delay() for _ in range(4)] == [1.0, 2.0, 4.0, 4.0]
    b.reset()
    assert b.delay() == 1.0 and b.delay(limit=1.5) == 1.5


# ---------------------------------------------------------------- one rendering for both transports


def claude_code_renders(params: dict[str, object]) -> str:
    """How Claude Code 2.1.332 shows a ``notifications/claude/channel`` to the model
    (``wrapChannelMessage``, claude-code.md §2): meta as escaped attributes, ``</channel`` defused."""
    meta = params["meta"]
    assert isinstance(meta, dict)
    attrs = "".join(
        f' {k}="{html.escape(v, quote=True).replace("&#x27;", "&apos;")}"' for k, v in meta.items()
    )
    content = str(params["content"]).replace("</channel", "<\\/channel")
    return f'<channel source="fleet"{attrs}>\n{content}\n</channel>'


@pytest.mark.parametrize("attention", ["full", "targeted"])
def test_the_channel_and_the_hook_render_the_same_frames_byte_for_byte(attention: Attention) -> None:
    feed = FakeFeed()
    wl = feed.join("main")
    feed.post(wl, "bob", "alice: quotes \" ' & <tags> and </channel> inside")
    old = feed.post(wl, "operator", "first version")
    feed.post(wl, "operator", "second version", replaces=old.id)
    feed.post(wl, "carol", "chatter")
    for i in range(3):
        feed.post(wl, "bob", f"alice: {i}")
    e = engine(feed, cap=4, attention=attention)
    e.step(0)
    frames = e.sink.take()  # type: ignore[attr-defined]
    assert {f.kind for f in frames} >= {"message", "cap"} and any(f.replaces for f in frames)
    pushed = [claude_code_renders(notification(f)) for f in frames]
    assert pushed == [channel_tag(f) for f in frames]
    report = hook_report(frames, "alice", "w")
    assert report.endswith("\n\n".join(pushed) + "\n")


def test_frames_are_the_wire_shape_of_watch_json() -> None:
    frame = Frame(
        id="1", wavelet="w/main", wavelet_id="x", author="a", kind="message", text="t", created_at="c"
    )
    assert wire.dump(frame) == {
        "id": "1",
        "wavelet": "w/main",
        "wavelet_id": "x",
        "author": "a",
        "kind": "message",
        "text": "t",
        "created_at": "c",
        "replaces": None,
        "blip_ids": None,
    }


@pytest.mark.parametrize("attention", ["full", "targeted"])
def test_provenance_alone_never_wakes_and_rides_with_the_next_blip(attention: Attention) -> None:
    feed = FakeFeed()
    wl = feed.join("main")
    joined = feed.post(wl, "system", "bob invited alice", kind="system", actor="bob")
    e = engine(feed, attention=attention)
    e.step(0)
    assert e.sink.take() == []  # type: ignore[attr-defined]
    assert e.core.cursors == {} and e.feed_cursors == {wl: joined.id} and e.poll_wait(20.0) == 20.0
    mine = feed.post(wl, "alice", "my own post moves nothing while provenance waits")
    e.step(0)
    assert e.sink.take() == [] and e.feed_cursors == {wl: mine.id}  # type: ignore[attr-defined]
    hello = feed.post(wl, "bob", "alice: hello")
    e.step(0)
    frames = e.sink.take()  # type: ignore[attr-defined]
    if attention == "full":
        assert [(f.kind, f.id) for f in frames] == [("system", joined.id), ("message", hello.id)]
    else:  # provenance is digested; the named blip goes in full
        assert [(f.kind, f.id) for f in frames] == [("message", hello.id), ("digest", joined.id)]
    assert e.core.cursors == {wl: hello.id}
