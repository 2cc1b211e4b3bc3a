"""What the scripted model says: events read from a request, rules that match them, answers.

A request's **newest user content** is everything after its last assistant message (``role:
"system"`` entries skipped, except channel notifications absorbed mid-turn). :func:`events` turns
it into :class:`Event` s, in order:

* ``channel``: one per ``<channel source=… …>…</channel>`` block, with its attributes (``author``,
  ``wavelet``, ``blip_id``, ``kind`` …) and text. ``via`` says how it came: ``notification`` (a
  ``notifications/claude/channel`` push: a user message when it woke the session, a ``role:
  "system"`` message "A message arrived from fleet while you were working" when it arrived during a
  turn) or ``hook`` (inside an ``asyncRewake`` hook's feedback, where ``fleet watch --hook`` writes
  the same blocks).
* ``hook``: one per piece of hook feedback (``<task-notification>…``, or ``Stop hook feedback``),
  whole text; the channel blocks inside it follow as ``channel`` events.
* ``tool_result``: one per ``tool_result`` block, with the tool's name (from the ``tool_use`` it
  answers), its text and ``is_error``.
* ``prompt``: text typed into the terminal (a user text block that is neither of the above nor a
  ``<system-reminder>``).

A :class:`Script` holds, per participant, a list of :class:`Rule` s: a :class:`When` (what to match)
and the answers it gives on its 1st, 2nd, … firing (the last repeats; ``times`` caps firings). An
answer is :class:`Say` (text, ends the turn), :class:`Call` (one or more tool calls, optionally
followed by further steps once their results come back: a multi-step turn), :class:`Fail` (an API
error response) or :class:`Slow` (any answer, after a delay). Strings in answers may use
``{author}``, ``{wavelet}``, ``{wavelet_id}``, ``{blip_id}``, ``{kind}``, ``{text}`` and
``{participant}``: they are filled from the event that fired the rule.

How a turn is answered (:meth:`Player.answer`), deterministically:

1. A ``tool_result`` of a call that has further steps gets the next step.
2. Otherwise the new events join the participant's backlog, and the oldest backlog event that some
   rule matches (first matching rule in script order) is answered; events no rule matches are
   dropped. So two blips that arrive in one wake are answered one after the other: in one turn
   when the first answer is a tool call (its result brings the next request), else at the next
   request. Events that arrive beside a step's tool result wait in the backlog until the steps end.
3. Otherwise the turn ends with a short text (:data:`END_TEXT`): the model never hangs a test.
"""

from __future__ import annotations

import html
import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

EventKind = Literal["channel", "hook", "tool_result", "prompt"]
END_TEXT = "Nothing for me to do here."
"""The answer when no rule matches: a short text that ends the turn."""

FLEET = "mcp__fleet__"
"""The prefix of fleet's tools as Claude Code names them (``mcp__<server>__<tool>``)."""

CHANNEL_RE = re.compile(r"<channel((?:\s+[A-Za-z_][A-Za-z0-9_]*=\"[^\"]*\")*)\s*>\n?(.*?)\n?</channel>", re.S)
ATTR_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=\"([^\"]*)\"")
MID_TURN = "A message arrived from"
"""How Claude Code 2.1.332 opens a ``role: "system"`` message carrying a channel notification that
arrived while a turn was running ("A message arrived from fleet while you were working: <channel …>")."""
HOOK_MARKERS = ("<task-notification>", "Stop hook feedback", "hook blocking error")
"""Hook feedback as Claude Code 2.1.332 frames it (``<task-notification><summary>…``), and as it
names it when a hook has no ``rewakeSummary``."""


# ---------------------------------------------------------------- events


@dataclass(frozen=True)
class ChannelBlock:
    """One ``<channel …>`` block as the model reads it: its attributes and its text."""

    attrs: Mapping[str, str]
    text: str

    @property
    def author(self) -> str:
        return self.attrs.get("author", "")

    @property
    def kind(self) -> str:
        return self.attrs.get("kind", "")

    @property
    def blip_id(self) -> str:
        return self.attrs.get("blip_id", "")

    @property
    def wavelet(self) -> str:
        return self.attrs.get("wavelet", "")

    @property
    def blip_ids(self) -> list[str]:
        """A digest's blips (its ``blip_ids`` attribute), else this block's one blip (if any)."""
        if "blip_ids" in self.attrs:
            return [b for b in self.attrs["blip_ids"].split(",") if b]
        return [self.blip_id] if self.blip_id else []


def channel_blocks(text: str) -> list[ChannelBlock]:
    """Every ``<channel …>`` block in ``text``, in order (attribute values unescaped)."""
    out = []
    for m in CHANNEL_RE.finditer(text):
        attrs = {k: html.unescape(v) for k, v in ATTR_RE.findall(m[1])}
        out.append(ChannelBlock(attrs, m[2].replace("<\\/channel", "</channel")))
    return out


@dataclass(frozen=True)
class Event:
    """One piece of a request's newest user content (see the module docstring)."""

    kind: EventKind
    text: str
    attrs: Mapping[str, str] = field(default_factory=dict)
    """A channel block's attributes."""
    via: Literal["notification", "hook", ""] = ""
    """For ``channel`` events: a channel push, or inside hook feedback."""
    tool: str = ""
    """For ``tool_result``: the tool's name (``mcp__fleet__wavelet_post``, ``Bash`` …)."""
    tool_use_id: str = ""
    is_error: bool = False

    @property
    def author(self) -> str:
        return self.attrs.get("author", "")

    @property
    def wavelet(self) -> str:
        return self.attrs.get("wavelet", "")

    @property
    def blip_kind(self) -> str:
        return self.attrs.get("kind", "")

    @property
    def blip_id(self) -> str:
        return self.attrs.get("blip_id", "")

    def fields(self, participant: str) -> dict[str, str]:
        """What ``{name}`` placeholders in an answer are filled with."""
        return {
            "author": self.author,
            "wavelet": self.wavelet,
            "wavelet_id": self.attrs.get("wavelet_id", ""),
            "blip_id": self.blip_id,
            "kind": self.blip_kind,
            "text": self.text,
            "participant": participant,
        }


def newest_user_content(body: Mapping[str, Any]) -> list[Any]:
    """The content blocks after the request's last assistant message (system entries skipped)."""
    messages = list(body.get("messages") or [])
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    blocks: list[Any] = []
    for m in messages[last + 1 :]:
        content = m.get("content")
        content = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        if m.get("role") == "user":
            blocks += content
        elif m.get("role") == "system":  # only what arrived mid-turn; the rest is Claude Code's own
            blocks += [b for b in content if str(b.get("text", "")).startswith(MID_TURN)]
    return blocks


def _tool_names(body: Mapping[str, Any]) -> dict[str, str]:
    names = {}
    for m in body.get("messages") or []:
        if m.get("role") == "assistant" and isinstance(m.get("content"), list):
            for b in m["content"]:
                if b.get("type") == "tool_use":
                    names[b.get("id", "")] = b.get("name", "")
    return names


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


def _strip_reminders(text: str) -> str:
    return re.sub(r"<system-reminder>.*?</system-reminder>", "", text, flags=re.S).strip()


def events(body: Mapping[str, Any]) -> list[Event]:
    """The events of a request's newest user content, in order."""
    names = _tool_names(body)
    out: list[Event] = []
    for block in newest_user_content(body):
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_result":
            tid = block.get("tool_use_id", "")
            out.append(
                Event(
                    "tool_result",
                    _result_text(block.get("content")),
                    tool=names.get(tid, ""),
                    tool_use_id=tid,
                    is_error=bool(block.get("is_error")),
                )
            )
            continue
        if block.get("type") != "text":
            continue
        text = block.get("text", "")
        hook = any(marker in text for marker in HOOK_MARKERS)
        if hook:
            out.append(Event("hook", text))
        for cb in channel_blocks(text):
            out.append(
                Event("channel", cb.text, attrs=dict(cb.attrs), via="hook" if hook else "notification")
            )
        if not hook and not channel_blocks(text) and (typed := _strip_reminders(text)):
            out.append(Event("prompt", typed))
    return out


# ---------------------------------------------------------------- matching


@dataclass(frozen=True)
class When:
    """What an event must be for a rule to fire; every field given must hold (None: any)."""

    kind: EventKind | None = "channel"
    author: str | None = None
    wavelet: str | None = None
    """``WAVE/WAVELET``, or just the wavelet's name."""
    blip_kind: str | None = None
    """A channel block's ``kind``: ``message``, ``system``, ``surface``, ``cap``, ``digest``."""
    contains: str | None = None
    regex: str | None = None
    tool: str | None = None
    """For ``tool_result``: the tool's name (a bare fleet tool name gets ``mcp__fleet__``)."""
    via: Literal["notification", "hook"] | None = None
    error: bool | None = None
    not_author: str | None = None

    def matches(self, ev: Event) -> bool:
        if self.kind is not None and ev.kind != self.kind:
            return False
        if self.author is not None and ev.author != self.author:
            return False
        if self.not_author is not None and ev.author == self.not_author:
            return False
        if self.wavelet is not None and self.wavelet not in (ev.wavelet, ev.wavelet.split("/", 1)[-1]):
            return False
        if self.blip_kind is not None and ev.blip_kind != self.blip_kind:
            return False
        if self.contains is not None and self.contains not in ev.text:
            return False
        if self.regex is not None and not re.search(self.regex, ev.text):
            return False
        if self.tool is not None and ev.tool not in (self.tool, FLEET + self.tool):
            return False
        if self.via is not None and ev.via != self.via:
            return False
        return self.error is None or ev.is_error == self.error


def on_channel(**kw: Any) -> When:
    """A channel block (pushed or in hook feedback); e.g. ``on_channel(author="bob", contains="?")``."""
    return When(kind="channel", **kw)


def on_message(**kw: Any) -> When:
    """A channel block of kind ``message`` (never ``system``, ``surface``, ``cap`` or ``digest``)."""
    return When(kind="channel", blip_kind="message", **kw)


def on_prompt(**kw: Any) -> When:
    return When(kind="prompt", **kw)


def on_tool_result(tool: str | None = None, **kw: Any) -> When:
    return When(kind="tool_result", tool=tool, **kw)


def on_hook(**kw: Any) -> When:
    return When(kind="hook", **kw)


# ---------------------------------------------------------------- answers


@dataclass(frozen=True)
class Usage:
    """The ``usage`` an answer reports (what Claude Code then counts as the session's token use).

    ``input_tokens=None``: a quarter of the request's bytes (deterministic for the same request).
    """

    input_tokens: int | None = None
    output_tokens: int = 8
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def wire(self, request_bytes: int) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens if self.input_tokens is not None else request_bytes // 4,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        }


class Answer:
    """Base of every answer."""

    usage: Usage | None = None


@dataclass(frozen=True)
class Say(Answer):
    """Answer with text; the turn ends."""

    text: str
    usage: Usage | None = None


@dataclass(frozen=True)
class ToolCall:
    name: str
    """The tool as Claude Code names it: ``mcp__fleet__wavelet_post``, ``Bash``, ``Write`` …"""
    input: Mapping[str, Any]


@dataclass(frozen=True)
class Call(Answer):
    """Answer with one or more tool calls (one assistant message); ``then`` are the turn's next
    steps, each answered when the previous step's tool results come back."""

    calls: tuple[ToolCall, ...]
    then: tuple[Answer, ...] = ()
    text: str = ""
    """Optional text before the tool calls."""
    usage: Usage | None = None


@dataclass(frozen=True)
class Fail(Answer):
    """Answer with an API error (HTTP ``status`` and an Anthropic error body)."""

    status: int = 529
    type: str = "overloaded_error"
    message: str = "Overloaded (scripted)"


@dataclass(frozen=True)
class Slow(Answer):
    """``answer``, after ``seconds`` (a busy or thinking model)."""

    seconds: float
    answer: Answer


@dataclass(frozen=True)
class Held(Answer):
    """``answer``, once the test sets ``gate``: a turn that lasts exactly until the test has seen
    what it needs to see mid-turn (a fixed :class:`Slow` delay races a loaded machine). The server
    gives up waiting after ``limit`` seconds, so a test that fails before it opens the gate does
    not leave Claude Code hanging."""

    gate: threading.Event
    answer: Answer
    limit: float = 120.0


def say(text: str, usage: Usage | None = None) -> Say:
    return Say(text, usage)


def call(name: str, input: Mapping[str, Any] | None = None, **kw: Any) -> Call:
    """One tool call; ``name`` may be a bare fleet tool (``wavelet_post``) or any tool (``Bash``)."""
    full = name if name.startswith("mcp__") or name[:1].isupper() else FLEET + name
    return Call((ToolCall(full, {**(input or {}), **kw}),))


def post(wavelet: str, text: str) -> Call:
    return call("wavelet_post", wavelet=wavelet, text=text)


def reply(text: str) -> Call:
    """Post ``text`` into the wavelet of the blip being answered."""
    return post("{wavelet}", text)


def fork(wavelet: str, name: str, with_: Sequence[str], private: bool = False) -> Call:
    return call("wavelet_fork", {"wavelet": wavelet, "name": name, "with": list(with_), "private": private})


def surface(wavelet: str, text: str) -> Call:
    return call("wavelet_surface", wavelet=wavelet, text=text)


def calls(*answers: Call) -> Call:
    """Several tool calls in one assistant message (parallel tool use)."""
    return Call(tuple(c for a in answers for c in a.calls))


def steps(first: Answer, *rest: Answer) -> Answer:
    """A multi-step turn: ``first`` now, each of ``rest`` once the previous step's results are back.
    Only tool-call steps can be followed; a text step ends the turn."""
    if not rest:
        return first
    if not isinstance(first, Call):
        raise ValueError("only a tool-call step can be followed by another step")
    return replace(first, then=(*first.then, *rest))


@dataclass
class Rule:
    """``when`` matches an event → the answer for this firing (``answers[n]``, the last repeating)."""

    when: When | Sequence[When]
    answers: Answer | Sequence[Answer]
    times: int | None = None
    """At most this many firings (None: unlimited)."""
    fired: int = 0

    def matches(self, ev: Event) -> bool:
        if self.times is not None and self.fired >= self.times:
            return False
        whens = [self.when] if isinstance(self.when, When) else list(self.when)
        return any(w.matches(ev) for w in whens)

    def fire(self) -> Answer:
        answers = [self.answers] if isinstance(self.answers, Answer) else list(self.answers)
        answer = answers[min(self.fired, len(answers) - 1)]
        self.fired += 1
        return answer


def rule(when: When | Sequence[When], *answers: Answer, times: int | None = None) -> Rule:
    """``rule(on_message(author="bob"), reply("bob: yes"))``; several answers: 1st firing, 2nd, …"""
    return Rule(when, answers, times)


def fill(value: Any, fields: Mapping[str, str]) -> Any:
    """``value`` with ``{name}`` placeholders in its strings replaced (dicts and lists walked)."""
    if isinstance(value, str):
        for k, v in fields.items():
            value = value.replace("{" + k + "}", v)
        return value
    if isinstance(value, Mapping):
        return {k: fill(v, fields) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [fill(v, fields) for v in value]
    return value


# ---------------------------------------------------------------- playing a script


@dataclass(frozen=True)
class Reply:
    """What the server sends for one request (already filled in)."""

    content: tuple[dict[str, Any], ...] = ()
    stop_reason: str = "end_turn"
    usage: Usage = Usage()
    delay: float = 0.0
    error: Fail | None = None
    rule: str = ""
    """Which rule produced it (``participant#index``), ``step``, ``end`` or a side request's name."""
    trigger: Event | None = None
    """The event that fired the rule (for a later step: the event that started the turn's steps)."""
    gate: Held | None = None
    """Sent once its gate is set (or its limit passes), after ``delay``."""

    @property
    def tool_uses(self) -> list[dict[str, Any]]:
        return [b for b in self.content if b.get("type") == "tool_use"]

    @property
    def text(self) -> str:
        return "".join(b.get("text", "") for b in self.content if b.get("type") == "text")


@dataclass
class _Pending:
    rest: tuple[Answer, ...]
    fields: dict[str, str]
    trigger: Event | None


class Player:
    """One participant's side of the script: its rules' firing counts, backlog and unfinished steps."""

    def __init__(self, participant: str, rules: Sequence[Rule]) -> None:
        self.participant = participant
        self.rules = list(rules)
        self.backlog: list[Event] = []
        self.pending: dict[str, _Pending] = {}
        self._ids = 0

    def _id(self) -> str:
        self._ids += 1
        return f"toolu_{self.participant}_{self._ids:04d}"

    def answer(self, evs: Iterable[Event]) -> Reply:
        evs = list(evs)
        for ev in evs:
            pending = self.pending.pop(ev.tool_use_id, None) if ev.kind == "tool_result" else None
            if pending is not None:
                self._queue(e for e in evs if e.kind != "tool_result")
                return self._render(
                    pending.rest[0], pending.rest[1:], pending.fields, "step", pending.trigger
                )
        self._queue(evs)
        while self.backlog:
            ev = self.backlog.pop(0)
            for i, r in enumerate(self.rules):
                if r.matches(ev):
                    name = f"{self.participant}#{i}"
                    return self._render(r.fire(), (), ev.fields(self.participant), name, ev)
        return Reply(({"type": "text", "text": END_TEXT},), rule="end")

    def _queue(self, evs: Iterable[Event]) -> None:
        """Add to the backlog what is not in it already (a retried request repeats its content)."""
        for ev in evs:
            if ev not in self.backlog:
                self.backlog.append(ev)

    def _render(
        self,
        answer: Answer,
        rest: tuple[Answer, ...],
        fields: dict[str, str],
        name: str,
        trigger: Event | None,
    ) -> Reply:
        delay = 0.0
        gate: Held | None = None
        while isinstance(answer, Slow | Held):
            if isinstance(answer, Slow):
                delay += answer.seconds
            else:
                gate = answer
            answer = answer.answer
        if isinstance(answer, Fail):
            return Reply(delay=delay, error=answer, rule=name, trigger=trigger, gate=gate)
        if isinstance(answer, Say):
            text = fill(answer.text, fields)
            return Reply(
                ({"type": "text", "text": text},),
                "end_turn",
                answer.usage or Usage(),
                delay,
                None,
                name,
                trigger,
                gate,
            )
        if not isinstance(answer, Call):
            raise TypeError(f"not an answer: {answer!r}")
        blocks: list[dict[str, Any]] = []
        if answer.text:
            blocks.append({"type": "text", "text": fill(answer.text, fields)})
        last = ""
        for c in answer.calls:
            last = self._id()
            blocks.append(
                {"type": "tool_use", "id": last, "name": c.name, "input": fill(dict(c.input), fields)}
            )
        follow = (*answer.then, *rest)
        if follow:
            self.pending[last] = _Pending(follow, fields, trigger)
        return Reply(tuple(blocks), "tool_use", answer.usage or Usage(), delay, None, name, trigger, gate)


class Script:
    """Rules per participant. ``Script({"alice": [rule(...), ...], "bob": [...]})``.

    A participant without rules (or an unknown session) always gets :data:`END_TEXT`. A script is
    played once: :meth:`player` keeps each participant's state for the server's lifetime.
    """

    def __init__(self, rules: Mapping[str, Sequence[Rule]] | None = None) -> None:
        self.rules: dict[str, list[Rule]] = {k: list(v) for k, v in (rules or {}).items()}
        self._players: dict[str, Player] = {}

    def add(self, participant: str, *rules: Rule) -> Script:
        """Add rules for ``participant`` (before its first request, or they join its player too)."""
        self.rules.setdefault(participant, []).extend(rules)
        if participant in self._players:
            self._players[participant].rules.extend(rules)
        return self

    def player(self, participant: str) -> Player:
        if participant not in self._players:
            self._players[participant] = Player(participant, self.rules.get(participant, []))
        return self._players[participant]


def describe(reply: Reply) -> str:
    """A one-line summary of a reply, for logs and failure messages."""
    if reply.error is not None:
        return f"error {reply.error.status} {reply.error.type}"
    parts = [f"text {reply.text[:60]!r}"] if reply.text else []
    parts += [f"{t['name']}({json.dumps(t['input'])[:80]})" for t in reply.tool_uses]
    return ", ".join(parts) or "(empty)"
