"""The resident's attention as rules, through the engine with a fake feed: it wakes only for what concerns
it and drops nothing; the resident profile's default."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.delivery.rules import HOLD_MAX_LINES, Action, Delivery, Rule, route
from fleet.delivery.state import DeliveryState
from fleet.layouts import parse
from fleet.models import Blip


def test_the_resident_profile_is_resident_attention_unless_the_layout_names_one() -> None:
    from fleet.resident.seat import resident_profile

    plain = parse('[defaults]\nagent = "claude"\n', "plain.toml", "plain")
    assert resident_profile(plain).attention == "resident"
    full = parse('[participants.resident]\nattention = "full"\n', "full.toml", "full")
    assert resident_profile(full).attention == "full"
    every = parse('[defaults]\nattention = "targeted"\n', "t.toml", "t")
    assert resident_profile(every).attention == "targeted"


def test_the_resident_policy_sends_the_root_and_done_reports_in_full() -> None:
    from fleet.resident.attention import policy

    def rule(author: str, text: str, root: bool = False, kind: str = "message") -> Rule:
        b = Blip(id="1", wavelet_id="x", wave_id="w", author=author, kind=kind, text=text, created_at="")  # type: ignore[arg-type]
        return policy.route(b, "bob", root, route(b, "bob"))

    assert rule("carol", "chatter", root=True) is Rule.ROOT
    assert rule("carol", "DONE: built") is Rule.DONE
    assert rule("carol", "  DONE: built") is Rule.DONE
    assert rule("carol", "chatter") is Rule.UNADDRESSED
    assert rule("carol", "bob: look") is Rule.MENTION
    assert rule("operator", "DONE: stop") is Rule.OPERATOR  # (first match wins, as before the seam)
    assert rule("carol", "DONE: x", kind="surface") is Rule.SURFACE
    assert rule("system", "x", root=True, kind="system") is Rule.SYSTEM
    assert policy.holds(root=False) and not policy.holds(root=True)


ROOT, JOB = "wl-root", "wl-job"


texts = st.sampled_from(["progress", "resident: a question", "DONE: finished", "more progress"])


blip_specs = st.lists(
    st.tuples(
        st.sampled_from([ROOT, JOB]),
        st.sampled_from(["worker", "carol", "operator", "resident"]),
        st.sampled_from(["message", "message", "surface", "system"]),
        texts,
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(specs=blip_specs, chunks=st.integers(min_value=1, max_value=7))
def test_resident_attention_wakes_only_for_what_concerns_it_and_drops_nothing(
    specs: list[tuple[str, str, str, str]], chunks: int
) -> None:
    """Any blips, fed in any batching: every frame pushed in the job wavelet carries a full blip
    (chatter never wakes the mind alone, below :data:`HOLD_MAX_LINES`); every root blip of others
    that is not provenance is full; every blip of others is in at most one pushed frame, and each
    one not still held is in exactly one."""
    core = Delivery(
        "resident",
        DeliveryState(daemon="d", wave="w", participant="resident"),
        cap=0,
        attention="resident",
        hold=30.0,
    )
    core.roots = frozenset({ROOT})
    blips = [
        Blip(id=f"{i:06d}", wavelet_id=wl, wave_id="w", author=who, kind=kind, text=text,  # type: ignore[arg-type]
             created_at="", actor=who if kind == "system" else None)
        for i, (wl, who, kind, text) in enumerate(specs)
    ]  # fmt: skip
    calls: list[list[Any]] = []

    def push(decision: Any) -> bool:
        calls[-1].append(decision)
        return True

    size = max(1, len(blips) // chunks)
    for n in [*range(0, len(blips), size), len(blips)]:  # the last: long after, only deadline-less holds stay
        calls.append([])
        core.deliver(core.gather(blips[n : n + size], now=float(n) if n < len(blips) else 1e9), push)
    frames = [f for call in calls for f in call]
    seen = [b.id for f in frames if f.action is Action.DELIVER for b in f.blips]
    assert len(seen) == len(set(seen))
    others = [b for b in blips if not core.own(b)]
    held = {b.id for part in core._held.values() for b in part}
    assert {b.id for b in others} - held == set(seen)
    for call in calls:
        for f in call:
            if f.digest and f.blip.wavelet_id == JOB and len(f.digest) < HOLD_MAX_LINES:
                assert any(g.blip.wavelet_id == JOB and not g.digest for g in call), "chatter woke it alone"
    for f in frames:
        b = f.blip
        if not f.digest:
            assert (
                b.wavelet_id == ROOT
                or b.author == "operator"
                or b.kind == "surface"
                or (b.text.startswith("DONE:") or "resident" in b.text)
            ), f"pushed in full: {b}"
        if b.wavelet_id == ROOT and b.kind != "system":
            assert not f.digest, "a root blip was digested"
