"""Layouts: how a wavelet's roster is laid out in tmux and how each participant's agent is launched.

A layout is a TOML file (read with the stdlib, validated here):

.. code-block:: toml

    description = "a large lead pane, targeted specialists beside it"
    budget = { cost = 10.0 }             # what the members spend together on the wavelet spawned
    arrangement = "main-vertical"        # any tmux layout: tiled, main-vertical, even-horizontal, ...
    main = "lead"                        # whose pane is the big one (else the first roster member)
    main_size = "60%"
    summarizer = { command = "my-summarizer", every = 50, bytes = 65536, timeout = 30 }

    [defaults]                           # every participant's agent profile ...
    agent = "claude"                     # the command (shell words); claude flags are appended
    model = "sonnet"
    permission_mode = "acceptEdits"
    attention = "targeted"               # full | targeted | resident (docs/design.md §4)
    cwd = "~/src/project"
    args = ["--verbose"]
    cap = 40                             # deliveries per wavelet before the cap notice (0: none)
    budget = { tokens = 200000 }         # each participant's spend in the wave (or { cost = 2.5 }, USD)
    env = { ANTHROPIC_BASE_URL = "http://127.0.0.1:8080" }
    worktree = "participant"             # participant | wave | none (docs/worktrees.md)
    base = "main"                        # what a new worktree starts from (default: the checkout's HEAD)
    setup = "npm ci"                     # run once in each new worktree before its agent starts
    notify = true                        # a desktop notification when it waits at a permission prompt

    [participants.lead]                  # ... overridden per name
    attention = "full"
    env = { CLAUDE_CODE_MAX_OUTPUT_TOKENS = "8000" }

``env`` is set in the agent's pane (``tmux respawn-pane -e``), on top of the tmux server's
environment; a participant's ``env`` adds to the defaults' (a name in both takes the participant's
value), and fleet's own ``FLEET_WAVE``/``FLEET_WAVELET`` win over both. The values reach the pane
only: they are never put on the command line, in a spawn report or in a log. ``cap`` is passed to
the participant's channel (``fleet channel --cap``) or, with ``--transport hook``, to its hook
(``fleet watch --cap``); unset, the channel's default applies (DESIGN §3). ``worktree``, ``base`` and
``setup`` give a participant its own git worktree (or the wave's shared one): :mod:`fleet.worktrees`
and docs/worktrees.md. ``budget`` (exactly one of ``tokens``, a whole number above 0, or ``cost``,
USD above 0) is recorded in the store at spawn: :mod:`fleet.budgets` and docs/budgets.md.
``summarizer`` is the wave's rolling-summary writer, run by ``fleet supervise`` (which finds it
through the layouts recorded with the wave's sessions): after ``every`` new blips or ``bytes`` new
bytes since a wavelet's last summary it runs ``command`` (no ``command``: fleet's extractive
default), fallback-open (:mod:`fleet.summaries`, docs/design.md §1a).

Shipped layouts live in the repository's top-level ``layouts/`` folder (installed as the package
data ``fleet.shipped_layouts``); a user's own in ``fleet paths``'s ``layouts`` folder take
precedence by name. ``fleet spawn --list-layouts`` lists them all. A path ending in ``.toml`` is
loaded as is. A bad file is reported with its path and the offending field.
"""

from __future__ import annotations

import importlib.resources
import re
import shlex
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from fleet import errors
from fleet.delivery.rules import check_attention
from fleet.models import PARTICIPANT_RE
from fleet.paths import Paths, read_utf8

WorktreeMode = Literal["participant", "wave", "none"]

Arrangement = Literal["tiled", "main-vertical", "main-horizontal", "even-horizontal", "even-vertical"]


def _attention(name: str) -> str:
    try:
        return check_attention(name)
    except errors.UsageError as exc:
        raise ValueError(exc.message) from None


Attention = Annotated[str, AfterValidator(_attention)]
"""full | targeted | a delivery policy's name (resident: :mod:`fleet.delivery.rules`)."""
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
PermissionMode = Literal["acceptEdits", "auto", "bypassPermissions", "manual", "default", "dontAsk", "plan"]

DEFAULT_LAYOUT = "trio"


class BudgetSpec(BaseModel):
    """``budget = { tokens = N }`` or ``budget = { cost = USD }`` (:mod:`fleet.budgets`)."""

    model_config = ConfigDict(extra="forbid")

    tokens: StrictInt | None = Field(default=None, gt=0)
    cost: StrictFloat | StrictInt | None = Field(default=None, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one(self) -> BudgetSpec:
        if (self.tokens is None) == (self.cost is None):
            raise ValueError(
                "give exactly one of tokens = N (whole tokens) or cost = USD, for example { tokens = 200000 }"
            )
        if self.cost is not None:
            self.cost = float(self.cost)
        return self


class SummarizerSpec(BaseModel):
    """``summarizer = { command = "...", every = N, bytes = M, timeout = S }`` (:mod:`fleet.summaries`)."""

    model_config = ConfigDict(extra="forbid")

    command: str | None = None
    """The summarizer's command line (split like a shell would, run without one); None: extractive."""
    every: StrictInt = Field(default=50, ge=1)
    bytes: StrictInt = Field(default=64 * 1024, ge=1)
    timeout: StrictFloat | StrictInt = Field(default=30.0, gt=0, allow_inf_nan=False)

    @field_validator("command")
    @classmethod
    def _command_words(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            words = shlex.split(v)
        except ValueError as exc:
            raise ValueError(f"cannot be split into words: {exc}") from None
        if not words:
            raise ValueError("must be a command, not blank (leave it out for fleet's extractive default)")
        return v


class Profile(BaseModel):
    """One participant's agent profile; unset fields fall back to the layout's defaults."""

    model_config = ConfigDict(extra="forbid")

    agent: str | None = None
    model: str | None = None
    permission_mode: PermissionMode | None = None
    attention: Attention | None = None
    cwd: str | None = None
    args: list[str] | None = None
    cap: int | None = Field(default=None, ge=0)
    env: dict[str, str] | None = Field(default=None, repr=False)
    worktree: WorktreeMode | None = None
    base: str | None = Field(default=None, min_length=1)
    setup: str | None = None
    budget: BudgetSpec | None = None
    notify: bool | None = None

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        for name in v or {}:
            if not re.match(ENV_NAME, name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return v

    @field_validator("agent")
    @classmethod
    def _agent_not_blank(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("agent must be a command, not blank")
        return v


class ResolvedProfile(BaseModel):
    """A participant's profile with every default applied: what the spawner launches."""

    agent: str = "claude"
    model: str | None = None
    permission_mode: PermissionMode | None = None
    attention: Attention = "full"
    cwd: str | None = None
    args: list[str] = Field(default_factory=list)
    cap: int | None = None
    """None: the channel's default cap."""
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    """Set in the pane; never logged or reported (kept out of the repr too)."""
    worktree: WorktreeMode = "none"
    """Where the pane works: its own git worktree, the wave's shared one, or ``cwd`` itself."""
    base: str | None = None
    setup: str | None = None
    budget: BudgetSpec | None = None
    """The participant's budget in the wave (recorded at spawn); None: none from the layout."""
    notify: bool = False
    """A desktop notification (``notify-send``, where installed) when the agent waits at a
    permission prompt (docs/permissions.md); the tmux window is flagged either way."""


class Layout(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str = ""
    arrangement: Arrangement = "tiled"
    main: str | None = None
    main_size: str | None = Field(default=None, pattern=r"^\d{1,3}%?$")
    defaults: Profile = Field(default_factory=Profile)
    participants: dict[str, Profile] = Field(default_factory=dict)
    budget: BudgetSpec | None = None
    """The spawned wavelet's budget: what its members spend on its turns, summed."""
    summarizer: SummarizerSpec | None = None
    """The wave's rolling-summary writer, run by ``fleet supervise``; None: summaries only on demand."""

    name: str = Field(default="", exclude=True)
    source: str = Field(default="", exclude=True)
    ref: str = Field(default="", exclude=True)
    """What :func:`load` loads this layout again by: its name, or (loaded from a file) the file's
    absolute path. Spawn records it with each session, so a respawn runs the same profile."""

    @field_validator("participants")
    @classmethod
    def _names(cls, v: dict[str, Profile]) -> dict[str, Profile]:
        for name in v:
            if not PARTICIPANT_RE.match(name):
                raise ValueError(f"{name!r} is not a valid participant name")
        return v

    def profile(self, participant: str) -> ResolvedProfile:
        """The profile ``participant`` runs with: its overrides, else the defaults, else built-ins."""
        merged = self.defaults.model_dump(exclude_none=True)
        own = self.participants.get(participant, Profile()).model_dump(exclude_none=True)
        env = {**merged.get("env", {}), **own.pop("env", {})}
        merged.update(own, env=env)
        return ResolvedProfile(**merged)

    def main_pane(self, roster: list[str]) -> str | None:
        """Who gets the large pane in a main-* arrangement: ``main`` if on the roster, else the first."""
        if not roster:
            return None
        return self.main if self.main in roster else roster[0]


def _shipped() -> dict[str, Path]:
    folder = importlib.resources.files("fleet.shipped_layouts")
    return {
        Path(entry.name).stem: Path(str(entry)) for entry in folder.iterdir() if entry.name.endswith(".toml")
    }


def available(paths: Paths) -> dict[str, Path]:
    """Every layout by name, the user's overriding shipped ones of the same name."""
    found = _shipped()
    if paths.layouts.is_dir():
        found.update({p.stem: p for p in sorted(paths.layouts.glob("*.toml"))})
    return dict(sorted(found.items()))


def parse(text: str, source: str, name: str) -> Layout:
    """Validate layout TOML ``text``; errors name ``source`` and the field."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise errors.UsageError(f"layout {source}: invalid TOML: {exc}") from None
    try:
        layout = Layout.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(top level)"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise errors.UsageError(f"layout {source}: field {field}: {first['msg']}{more}") from None
    layout.name, layout.source = name, source
    return layout


def load(name: str, paths: Paths) -> Layout:
    """The layout called ``name`` (user's first, then shipped), or the file at ``name`` if it ends .toml."""
    if name.endswith(".toml"):
        path = Path(name).expanduser()
        if not path.is_file():
            raise errors.NotFound(f"no layout file {path}")
        layout = parse(_text(path), str(path), path.stem)
        layout.ref = str(path.resolve())
        return layout
    found = available(paths)
    if name not in found:
        raise errors.NotFound(
            f"no layout {name!r}: choose one of {', '.join(found)} or put {name}.toml in {paths.layouts}"
        )
    path = found[name]
    layout = parse(_text(path), str(path), name)
    layout.ref = name
    return layout


def _text(path: Path) -> str:
    """A layout file's text; UsageError naming it when it cannot be read or is not UTF-8."""
    try:
        return read_utf8(path)
    except OSError as exc:
        raise errors.UsageError(f"layout {path}: cannot be read ({exc.strerror or exc})") from None
