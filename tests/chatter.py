"""A scripted chatter scenario for the attention layer: five agents and the operator in one wave.

Shared by ``tests/component/test_attention.py`` and ``bench/attention.py``. Deterministic for a seed. The wave
``chat`` has ``main`` (alice, bob, carol, dave, erin), a public fork ``review`` (alice, bob, erin) and
a fork ``side`` (carol, dave; not bob) whose conclusions are surfaced into ``main``. Blips are
labelled with what targeted attention must do for the focus participant (``bob`` by default):
``full`` (they name bob in one of several spellings, come from the operator, or are surfaces) or
not. Chatter sometimes contains near-misses (``bobby``, ``bob-2``, ``bob_x``, ``kabob``) that must
not count as mentions. Text lengths are those of agents' prose: a few hundred to 1,500 characters.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from fleet.client import Client

WAVE = "chat"
AGENTS = ("alice", "bob", "carol", "dave", "erin")
FOCUS = "bob"

_TOPICS = (
    "parser schema migration cursor wavelet roster daemon channel test fixture latency budget "
    "retry backoff lock state file commit branch review patch benchmark regression flaky timeout "
    "deadline notification digest excerpt token presence fork surface replay cap operator tmux pane "
    "layout profile attention rule mention index query transaction rollback checkpoint snapshot"
)
_WORDS = tuple(_TOPICS.split())
_NEAR_MISSES = ("bobby", "bob-2", "bob_x", "kabob", "bobcat")
_MENTIONS = (
    "{f}: can you take this one? {body}",
    "{F}, {body}",
    "@{f} {body}",
    "{body} [[{f}]] should decide.",
    "{body} Let's ask {f}.",
    "{BIG} — {body}",
)


def prose(rng: random.Random, low: int = 200, high: int = 1500) -> str:
    """Agent-like prose of ``low``..``high`` characters (sentences of plain words)."""
    target = rng.randint(low, high)
    sentences: list[str] = []
    size = 0
    while size < target:
        words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 16))]
        if rng.random() < 0.08:
            words.insert(rng.randrange(len(words)), rng.choice(_NEAR_MISSES))
        sentence = " ".join(words).capitalize() + "."
        sentences.append(sentence)
        size += len(sentence) + 1
    return " ".join(sentences)


@dataclass
class Posted:
    id: str
    wavelet: str
    """``main``, ``review`` or ``side``."""
    author: str
    kind: str
    text: str
    full: bool
    """What targeted attention must do for the focus participant: True = the blip in full."""


@dataclass
class Chatter:
    """The run's outcome: every blip the scenario wrote (system blips are read back separately)."""

    wavelets: dict[str, str] = field(default_factory=dict)
    """name -> wavelet id."""
    posted: list[Posted] = field(default_factory=list)


def setup(op: Client) -> Chatter:
    """Create the wave and its forks (no chatter yet)."""
    op.create_wave(WAVE, with_=list(AGENTS))
    main = op.resolve(f"{WAVE}/main").id
    review = op.fork(main, "review", with_=["alice", "bob", "erin"], as_="alice").id
    side = op.fork(main, "side", with_=["carol", "dave"], as_="carol").id
    return Chatter(wavelets={"main": main, "review": review, "side": side})


def run(
    op: Client,
    chatter: Chatter,
    blips: int = 300,
    seed: int = 4,
    addressed: float = 0.10,
    focus: str = FOCUS,
    after: Callable[[], None] | None = None,
) -> Chatter:
    """Post ``blips`` blips through the operator client (``as_`` each author); returns ``chatter``.

    ``after`` is called after each post (a benchmark paces the run with it).

    About ``addressed`` of them name ``focus``, 4 % are the operator's, 3 % surfaces from ``side``,
    5 % are ``focus``'s own, 8 % are ``side`` chatter ``focus`` never sees; the rest is chatter in
    ``main`` and ``review``.
    """
    rng = random.Random(seed)
    others = [a for a in AGENTS if a != focus]
    ids = chatter.wavelets
    for _ in range(blips):
        roll = rng.random()
        if roll < addressed:
            where = rng.choice(["main", "main", "review"])
            author = rng.choice([a for a in others if where == "main" or a in ("alice", "erin")])
            form = rng.choice(_MENTIONS)
            text = form.format(f=focus, F=focus.capitalize(), BIG=focus.upper(), body=prose(rng, 150, 900))
            blip = op.post(ids[where], text, as_=author)
            chatter.posted.append(Posted(blip.id, where, author, "message", text, True))
        elif roll < addressed + 0.04:
            where = rng.choice(["main", "review"])
            text = "Operator here: " + prose(rng, 80, 400)
            blip = op.post(ids[where], text)
            chatter.posted.append(Posted(blip.id, where, "operator", "message", text, True))
        elif roll < addressed + 0.07:
            author = rng.choice(["carol", "dave"])
            text = "Conclusion from side: " + prose(rng, 100, 500)
            blip = op.surface(ids["side"], text, as_=author)
            chatter.posted.append(Posted(blip.id, "main", author, "surface", text, True))
        elif roll < addressed + 0.12:
            where = rng.choice(["main", "review"])
            text = prose(rng)
            blip = op.post(ids[where], text, as_=focus)
            chatter.posted.append(Posted(blip.id, where, focus, "message", text, False))
        elif roll < addressed + 0.20:
            author = rng.choice(["carol", "dave"])
            text = prose(rng)
            blip = op.post(ids["side"], text, as_=author)
            chatter.posted.append(Posted(blip.id, "side", author, "message", text, False))
        else:
            where = rng.choice(["main", "main", "review"])
            author = rng.choice([a for a in others if where == "main" or a in ("alice", "erin")])
            text = prose(rng)
            blip = op.post(ids[where], text, as_=author)
            chatter.posted.append(Posted(blip.id, where, author, "message", text, False))
        if after is not None:
            after()
    return chatter
