"""Usage: what each session spent — tokens, turns and an estimated cost — from its own transcript.

Claude Code writes each model response into the session's transcript as ``assistant`` lines carrying
``message.usage`` (``input_tokens``, ``output_tokens``, ``cache_read_input_tokens``,
``cache_creation_input_tokens``) and ``message.model``; one response may span several lines (one per
content block) under one ``message.id``, the last one carrying its final figures. :class:`Counter`
takes the lines one by one (it is the ``observer`` of :class:`fleet.delivery.receipts.Transcript`,
the one transcript reader) and keeps, per (wavelet, model): the four token counts, the responses
(``requests``) and the ``turns``.

What a caller may rely on:

- **Each response counts once.** Lines of one ``message.id`` replace each other's figures (the last
  wins); a line not complete yet is not read (the reader keeps it for the next call), so a transcript
  growing while it is read is counted once. Claude Code's own ``<synthetic>`` messages (no model
  call) count nothing.
- **A turn belongs to the wavelet whose blip woke it**: the wavelet named by the first fleet
  ``<channel>`` block of the first ``user`` line that started it (a channel push, or the hook's
  feedback; blips of several wavelets that wake one turn together: the first one's).
  A turn started any other way (a prompt typed into the pane) belongs to no wavelet (``""``). A push
  absorbed into a running turn does not move that turn.
- **Incremental.** :func:`read_session` resumes from the byte offset and the counts saved for the
  session in ``<state>/usage/<session-id>.json`` (0600): each call costs what was appended since.
- **Cost** is an estimate from a price table (USD per million tokens, per model):
  ``fleet/prices.toml``, overridden entry by entry by ``<config>/prices.toml``. A model in neither
  has an **unknown** cost, never $0: every sum it enters (:attr:`Figures.cost_usd`) is None and
  names it (:attr:`Figures.unpriced`), so a cost is a number only when every model counted in it is
  priced (the token figures are exact either way). :func:`no_price_text` says so and where to add a
  price: the user's own ``<config>/prices.toml``.
"""

from __future__ import annotations

import fnmatch
import importlib.resources
import json
import logging
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from fleet import errors, seams
from fleet.delivery.receipts import Transcript, transcript_of
from fleet.delivery.rollout import Rollout, read_thread, rollout_of
from fleet.paths import Paths, read_utf8, write_private
from fleet.records.budgets import Budget, applies, passed, shared_cost
from fleet.records.usage import Figures

if TYPE_CHECKING:
    from fleet.models import Wavelet

log = logging.getLogger(__name__)

_BLOCK = re.compile(r'<channel source="fleet"((?: [a-z_]+="[^"]*")*)>')
_ATTR = re.compile(r' ([a-z_]+)="([^"]*)"')
SYNTHETIC = "<synthetic>"
TOKEN_KINDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
STATE_VERSION = 1


# ---------------------------------------------------------------- counting


@dataclass
class Tally:
    """One (wavelet, model)'s figures."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    requests: int = 0
    turns: int = 0

    def add(self, usage: Mapping[str, int], sign: int = 1) -> None:
        for kind in TOKEN_KINDS:
            setattr(self, kind, getattr(self, kind) + sign * usage.get(kind, 0))


def _usage_of(raw: Any) -> dict[str, int]:
    if not isinstance(raw, dict):
        return {}
    return {
        k: v for k in TOKEN_KINDS if isinstance(v := raw.get(k), int) and not isinstance(v, bool) and v >= 0
    }


_WAKE_ORIGINS = ("channel", "task-notification")


def _wake_wavelet(line: dict[str, Any]) -> tuple[str, str, bool] | None:
    """(wavelet id, WAVE/WAVELET, whether the block is fleet's provenance) of the fleet block that
    woke a turn, ``("", "", False)`` for a turn started otherwise (a typed prompt), None when the line
    starts no turn (a tool result, Claude Code's own meta lines, not a user line)."""
    if line.get("type") != "user" or not isinstance(line.get("message"), dict):
        return None
    origin = line.get("origin")
    pushed = isinstance(origin, dict) and origin.get("kind") in _WAKE_ORIGINS
    if line.get("isMeta") and not pushed:  # Claude Code marks pushes meta too; other meta lines are its own
        return None
    content = line["message"].get("content")
    blocks = content if isinstance(content, list) else []
    if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks):
        return None
    texts = [content] if isinstance(content, str) else [
        str(b.get("text", "")) for b in content or [] if isinstance(b, dict) and b.get("type") == "text"
    ]  # fmt: skip
    found: tuple[str, str, bool] | None = None
    for text in texts:
        for block in _BLOCK.finditer(text):
            attrs = dict(_ATTR.findall(block[1]))
            if attrs.get("wavelet_id"):
                wid = attrs["wavelet_id"]
                here = (wid, attrs.get("wavelet") or wid, attrs.get("kind") == "system")
                if not here[2]:
                    return here
                found = found or here
    return found or ("", "", False)


@dataclass
class Counter:
    """Usage counted from transcript lines (see the module docstring). Serialisable (:meth:`dump`)."""

    tallies: dict[tuple[str, str], Tally] = field(default_factory=dict)
    """(wavelet id, model) -> figures."""
    labels: dict[str, str] = field(default_factory=dict)
    """wavelet id -> WAVE/WAVELET."""
    wavelet: str = ""
    """The wavelet of the turn running now."""
    fresh_turn: bool = True
    """A turn was started and no response of it is counted yet."""
    waking: bool = False
    """Wake lines were read and no response after them yet."""
    by_provenance: bool = False
    """The running turn's wavelet was taken from a ``system`` (provenance) block."""
    last_id: str = ""
    last_key: tuple[str, str] = ("", "")
    last_usage: dict[str, int] = field(default_factory=dict)

    def take(self, line: dict[str, Any]) -> None:
        woke = _wake_wavelet(line)
        if woke is not None:
            # blips that wake one turn together: the turn is the first one's (fleet's provenance,
            # delivered just before the blip that wakes, gives way to that blip)
            if not self.waking or (self.by_provenance and not woke[2] and woke[0]):
                self.wavelet, label, self.by_provenance = woke
                if woke[0]:
                    self.labels[woke[0]] = label
            self.fresh_turn = self.waking = True
            return
        if line.get("type") != "assistant" or not isinstance(line.get("message"), dict):
            return
        msg = line["message"]
        model = str(msg.get("model") or "")
        usage = _usage_of(msg.get("usage"))
        if model == SYNTHETIC or not model or not usage:
            return
        mid = str(msg.get("id") or line.get("requestId") or line.get("uuid") or "")
        if mid and mid == self.last_id:  # another line of the same response: its figures replace
            tally = self.tallies[self.last_key]
            tally.add(self.last_usage, -1)
            tally.add(usage)
            self.last_usage = usage
            return
        key = (self.wavelet, model)
        tally = self.tallies.setdefault(key, Tally())
        tally.add(usage)
        tally.requests += 1
        self.waking = False
        if self.fresh_turn:
            tally.turns += 1
            self.fresh_turn = False
        self.last_id, self.last_key, self.last_usage = mid, key, usage

    def dump(self) -> dict[str, Any]:
        return {
            "tallies": [[w, m, vars(t)] for (w, m), t in self.tallies.items()],
            "labels": self.labels,
            "wavelet": self.wavelet,
            "fresh_turn": self.fresh_turn,
            "waking": self.waking,
            "by_provenance": self.by_provenance,
            "last": [self.last_id, list(self.last_key), self.last_usage],
        }

    @classmethod
    def load(cls, data: dict[str, Any]) -> Counter:
        c = cls(
            labels=dict(data["labels"]),
            wavelet=str(data["wavelet"]),
            fresh_turn=bool(data["fresh_turn"]),
            waking=bool(data.get("waking")),
            by_provenance=bool(data.get("by_provenance")),
        )
        for w, m, t in data["tallies"]:
            c.tallies[(str(w), str(m))] = Tally(**{k: int(v) for k, v in t.items()})
        c.last_id, key, c.last_usage = data["last"]
        c.last_key = (str(key[0]), str(key[1]))
        return c


# ---------------------------------------------------------------- prices


class Price(BaseModel):
    """USD per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float = Field(ge=0)
    cache_creation: float = Field(ge=0)


class PriceTable(BaseModel):
    entries: list[tuple[str, Price]] = Field(default_factory=list)
    """(fnmatch pattern over the model id, price); the first match wins."""
    sources: list[str] = Field(default_factory=list)

    def price(self, model: str) -> Price | None:
        return next((p for pattern, p in self.entries if fnmatch.fnmatchcase(model, pattern)), None)


def user_prices(paths: Paths) -> Path:
    return paths.config / "prices.toml"


def _parse_prices(text: str, source: str) -> list[tuple[str, Price]]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise errors.UsageError(f"price table {source}: invalid TOML: {exc}") from None
    out = []
    for i, entry in enumerate(data.get("model") or []):
        if not isinstance(entry, dict) or not isinstance(entry.get("match"), str):
            raise errors.UsageError(f'price table {source}: [[model]] #{i + 1} needs match = "PATTERN"')
        try:
            out.append(
                (entry["match"], Price.model_validate({k: v for k, v in entry.items() if k != "match"}))
            )
        except ValueError as exc:
            raise errors.UsageError(
                f"price table {source}: [[model]] {entry['match']!r}: {str(exc).splitlines()[0]};"
                " it needs input, output, cache_read and cache_creation (USD per million tokens)"
            ) from None
    return out


def prices(paths: Paths) -> PriceTable:
    """The user's price table (``<config>/prices.toml``) in front of the shipped one."""
    table = PriceTable()
    own = user_prices(paths)
    if own.is_file():
        try:
            text = read_utf8(own)
        except OSError as exc:
            raise errors.UsageError(f"price table {own}: cannot be read ({exc.strerror or exc})") from None
        table.entries += _parse_prices(text, str(own))
        table.sources.append(str(own))
    shipped = importlib.resources.files("fleet").joinpath("prices.toml")
    table.entries += _parse_prices(shipped.read_text(encoding="utf-8"), "fleet/prices.toml")
    table.sources.append("fleet/prices.toml (shipped)")
    return table


# ---------------------------------------------------------------- figures


def figures(tally: Tally, price: Price | None, model: str = "") -> Figures:
    """The figures of one (wavelet, model) tally; ``price`` None: cost unknown (``model`` named in
    :attr:`Figures.unpriced`)."""
    cost = None
    if price is not None:
        cost = (
            tally.input_tokens * price.input
            + tally.output_tokens * price.output
            + tally.cache_read_input_tokens * price.cache_read
            + tally.cache_creation_input_tokens * price.cache_creation
        ) / 1e6
    return Figures(
        input_tokens=tally.input_tokens,
        output_tokens=tally.output_tokens,
        cache_read_tokens=tally.cache_read_input_tokens,
        cache_creation_tokens=tally.cache_creation_input_tokens,
        turns=tally.turns,
        requests=tally.requests,
        cost_usd=cost,
        unpriced=[model] if price is None and model else [],
    )


class ParticipantUsage(BaseModel):
    participant: str
    session_id: str
    total: Figures = Field(default_factory=Figures)
    wavelets: dict[str, Figures] = Field(default_factory=dict)
    """WAVE/WAVELET (``""``: turns no blip woke) -> figures."""
    models: list[str] = Field(default_factory=list)
    problem: str = ""
    """Why the transcript cannot be read ('' when it can)."""


class BudgetSpent(BaseModel):
    """What one participant spent in a budget's scope."""

    participant: str
    tokens: int = 0
    cost_usd: float | None = 0.0
    """None when a model counted in the scope has no price (named in :attr:`unpriced`)."""
    unpriced: list[str] = Field(default_factory=list)
    passed: bool = False
    """The spend is at or over the budget now."""
    reached: bool = False
    """Its channel reported the budget passed since it was set: deliveries in the scope are held."""


class BudgetStatus(BaseModel):
    """One budget of the wave (:mod:`fleet.budgets`) and what each participant it applies to spent."""

    wavelet: str = ""
    """WAVE/WAVELET, or ``""`` for the whole wave."""
    participant: str = ""
    """``""``: every participant, each on its own spend."""
    tokens: int | None = None
    cost: float | None = None
    source: str = "operator"
    set_at: str = ""
    spent: list[BudgetSpent] = Field(default_factory=list)
    together: BudgetSpent | None = None
    """A wavelet budget (``participant`` ``""``): the members' sum as their channels last reported
    it (``participant`` ``""``), which the budget is judged on; None for the other scopes."""


class WaveUsage(BaseModel):
    """``fleet usage WAVE --json``."""

    wave: str
    total: Figures = Field(default_factory=Figures)
    participants: list[ParticipantUsage] = Field(default_factory=list)
    wavelets: dict[str, Figures] = Field(default_factory=dict)
    unpriced: list[str] = Field(default_factory=list)
    """Models counted that the price table does not name (their cost is unknown)."""
    price_tables: list[str] = Field(default_factory=list)
    prices_file: str = ""
    """The user's own price table (``<config>/prices.toml``, which may not exist yet): where a
    price is added."""
    budgets: list[BudgetStatus] = Field(default_factory=list)

    @property
    def unpriced_message(self) -> str:
        return no_price_text(self.unpriced, self.prices_file) if self.unpriced else ""


def add_price_text(models: Iterable[str], prices_file: Path | str) -> str:
    """How to price ``models``: the entry to add to the user's own table."""
    named = sorted(set(models))
    return (
        f'add a [[model]] entry (match = "{named[0] if named else "MODEL"}*", input, output, cache_read,'
        f" cache_creation in USD per million tokens) to {prices_file}"
    )


def no_price_text(models: Iterable[str], prices_file: Path | str) -> str:
    """Why a cost is unknown and what to do: the models with no price, and the user's own table."""
    named = sorted(set(models))
    return (
        f"no price for model {', '.join(named)}: its cost is unknown (shown as ?), never counted as $0;"
        f" {add_price_text(named, prices_file)}"
    )


# ---------------------------------------------------------------- reading sessions


@dataclass
class SessionUsage:
    counter: Counter
    problem: str = ""


def _state_path(paths: Paths, session_id: str) -> Path:
    return paths.state / "usage" / f"{session_id}.json"


def read_session(paths: Paths, session_id: str, env: Mapping[str, str] | None = None) -> SessionUsage:
    """The session's usage so far, reading only what its transcript gained since the last call."""
    saved = _state_path(paths, session_id)
    counter, offset, where = Counter(), 0, None
    try:
        data = json.loads(saved.read_text())
        if data.get("v") == STATE_VERSION:
            counter, offset, where = Counter.load(data["counter"]), int(data["offset"]), Path(data["path"])
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("usage state %s unreadable (%s): counting again from the start", saved, exc)
    # a Codex session's record is its thread's rollout (the channel keeps the thread id beside the
    # session), read through the same counter (fleet.delivery.rollout translates its lines)
    thread = read_thread(paths.channels, session_id)
    if where is not None and where.exists():
        path: Path | None = where
    elif thread is not None:
        path = rollout_of(thread, env)
    else:
        path = transcript_of(session_id, env)
    if path is None:
        if thread is not None:
            return SessionUsage(counter, "no rollout yet (Codex writes it with the thread's first turn)")
        return SessionUsage(counter, "no transcript yet (Claude Code writes it with the first message)")
    if path != where:
        counter, offset = Counter(), 0
    try:
        if path.stat().st_size < offset:  # rewritten or truncated: count it again from the start
            counter, offset = Counter(), 0
    except OSError:
        pass  # the reader says why
    reader: Transcript = (
        Rollout(thread, offset=offset, path=path, observer=counter.take)
        if thread is not None
        else Transcript(session_id, offset=offset, path=path, observer=counter.take)
    )
    reader.read()
    if reader.consumed != offset or where != path:
        state = {"v": STATE_VERSION, "path": str(path), "offset": reader.consumed, "counter": counter.dump()}
        write_private(saved, json.dumps(state, separators=(",", ":")))
    return SessionUsage(counter, reader.problem)


def participant_usage(
    participant: str, session_id: str, got: SessionUsage, table: PriceTable, unpriced: set[str]
) -> ParticipantUsage:
    out = ParticipantUsage(participant=participant, session_id=session_id, problem=got.problem)
    models: set[str] = set()
    for (wid, model), tally in sorted(got.counter.tallies.items()):
        price = table.price(model)
        if price is None:
            unpriced.add(model)
        fig = figures(tally, price, model)
        label = got.counter.labels.get(wid, wid)
        out.wavelets.setdefault(label, Figures()).add(fig)
        out.total.add(fig)
        models.add(model)
    out.models = sorted(models)
    return out


def session_env(layout_ref: str, participant: str, paths: Paths) -> dict[str, str]:
    """The environment the participant's pane had (its layout's ``env`` over this process's): where
    its Claude Code keeps transcripts (``HOME``, ``CLAUDE_CONFIG_DIR``)."""
    from fleet.layouts import load

    try:
        env = load(layout_ref, paths).profile(participant).env if layout_ref else {}
    except errors.FleetError:
        env = {}
    return {**os.environ, **env}


def wave_usage(client: Any, paths: Paths, wave_ref: str) -> WaveUsage:
    """Every recorded session of the wave, summed per participant, per wavelet and for the wave."""
    wave = client.get_wave(wave_ref)
    table = prices(paths)
    unpriced: set[str] = set()
    out = WaveUsage(wave=wave.name, price_tables=table.sources, prices_file=str(user_prices(paths)))
    counters: dict[str, Counter] = {}
    for rec in sorted(client.sessions(wave.id), key=lambda r: r.participant):
        got = read_session(paths, rec.session_id, session_env(rec.layout, rec.participant, paths))
        counters[rec.participant] = got.counter
        p = participant_usage(rec.participant, rec.session_id, got, table, unpriced)
        out.participants.append(p)
        out.total.add(p.total)
        for label, fig in p.wavelets.items():
            out.wavelets.setdefault(label, Figures()).add(fig)
    out.unpriced = sorted(unpriced)
    out.budgets = budget_statuses(client.budgets(wave.id), counters, table)
    return out


def spent_of(b: Budget, counter: Counter, table: PriceTable) -> tuple[int, float | None, list[str]]:
    """(tokens, USD, unpriced models) the counted session spent in ``b``'s scope. USD is None when a
    model counted there has no price (those models are the third item): never a partial sum."""
    tokens, cost, unpriced = 0, 0.0, set()
    for (wid, model), tally in counter.tallies.items():
        if b.wavelet_id and wid != b.wavelet_id:
            continue
        price = table.price(model)
        fig = figures(tally, price, model)
        tokens += fig.tokens
        if fig.cost_usd is None:
            unpriced.add(model)
        else:
            cost += fig.cost_usd
    return tokens, None if unpriced else cost, sorted(unpriced)


def budget_statuses(
    budgets: list[Budget], counters: Mapping[str, Counter], table: PriceTable
) -> list[BudgetStatus]:
    """Each budget with the spend of every participant it applies to (those with a session)."""
    out = []
    for b in budgets:
        sum_over = b.shared and passed(b, b.spent_tokens or 0, shared_cost(b))
        st = BudgetStatus(
            wavelet=b.wavelet, participant=b.participant, tokens=b.tokens, cost=b.cost, source=b.source,
            set_at=b.set_at,
        )  # fmt: skip
        for name, counter in sorted(counters.items()):
            if applies(b, name):
                tokens, cost, unpriced = spent_of(b, counter, table)
                over = sum_over or passed(b, tokens, cost)
                st.spent.append(
                    BudgetSpent(
                        participant=name, tokens=tokens, cost_usd=cost, unpriced=unpriced, passed=over,
                        reached=name in (b.reached or []),
                    )
                )  # fmt: skip
        if b.shared:
            st.together = BudgetSpent(
                participant="", tokens=b.spent_tokens or 0, cost_usd=shared_cost(b),
                unpriced=b.spent_unpriced or [], passed=sum_over,
            )  # fmt: skip
        out.append(st)
    return out


# ---------------------------------------------------------------- on the core's seams


class StatusColumns:
    """``fleet status``'s usage column (:data:`fleet.seams.status_columns`): what each recorded
    session spent in the row's wavelet, if its transcript is on this machine; and, for the wave,
    the models with no price and the user's price table."""

    def __init__(self, read: seams.StatusRead) -> None:
        self.paths, self.records = read.paths, read.records
        self.table = prices(read.paths)
        self._spent: dict[str, ParticipantUsage | None] = {}

    def _of(self, name: str) -> ParticipantUsage | None:
        if name not in self._spent:
            record = self.records.get(name)
            self._spent[name] = None
            if record is not None:
                env = session_env(record.layout, record.participant, self.paths)
                got = read_session(self.paths, record.session_id, env)
                if not (got.problem and not got.counter.tallies):
                    self._spent[name] = participant_usage(
                        record.participant, record.session_id, got, self.table, set()
                    )
        return self._spent[name]

    def row(self, wavelet: Wavelet, participant: str) -> dict[str, object]:
        mine = self._of(participant)
        return {"usage": mine.wavelets.get(wavelet.path, Figures()) if mine else None}

    def wave(self) -> dict[str, object]:
        unpriced = {m for got in self._spent.values() if got is not None for m in got.total.unpriced}
        return {"unpriced": sorted(unpriced), "prices_file": str(user_prices(self.paths))}


seams.status_columns.add(__name__, StatusColumns)
