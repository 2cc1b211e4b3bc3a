"""A campaign on disk under the repository's ``.wave/`` (docs/campaigns.md, the seed's layout)::

.wave/
  active                      the active campaign id (one line)
  campaigns/<id>/
    STATE.md                  the cursor and the wave table (fleet.campaign.state)
    .gitignore                artifacts/ and .loop/ stay out of git
    artifacts/                the waves' screenshots, logs (git-ignored)
    .loop/                    the loop's own records (git-ignored): its lock, what it owns,
                              the settles the Stop hook reported, its log
    plan/AGENT_INSTRUCTIONS.md
    plan/OVERVIEW.md
    plan/waves/wave_N/WAVE.md, NOTES.md (append-only attempts)
"""

from __future__ import annotations

import datetime
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from fleet import errors
from fleet.campaign import state as st

WAVE_DIR = ".wave"


def today() -> str:
    return datetime.date.today().isoformat()


def slug(title: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    return s[:50].rstrip("-") or "campaign"


def git(root: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise errors.FleetError(f"git {' '.join(args)} failed in {root}: {done.stderr.strip()}")
    return done.stdout


def repo_root(start: Path | None = None) -> Path:
    """The git work tree containing ``start`` (the current directory); UsageError outside one."""
    where = (start or Path.cwd()).resolve()
    done = subprocess.run(
        ["git", "-C", str(where), "rev-parse", "--show-toplevel"], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise errors.UsageError(
            f"{where} is not in a git repository: campaigns commit every outcome, so run this inside"
            " one (`git init` first)"
        )
    return Path(done.stdout.strip())


def dirty(root: Path, *, ignore: tuple[str, ...] = (WAVE_DIR + "/",)) -> list[str]:
    """Changed or untracked paths of the work tree outside ``ignore`` (prefixes)."""
    out = git(root, "status", "--porcelain", "--untracked-files=all")
    paths = [ln[3:].split(" -> ")[-1].strip('"') for ln in out.splitlines() if ln.strip()]
    return [p for p in paths if not p.startswith(ignore)]


def head(root: Path) -> str:
    return git(root, "rev-parse", "--verify", "-q", "HEAD", check=False).strip()


def fingerprint(root: Path, paths: list[str]) -> dict[str, str]:
    """Each path's content as git hashes it ('' for one that does not exist)."""
    present = [p for p in paths if (root / p).is_file()]
    hashes = git(root, "hash-object", "--", *present).split() if present else []
    out = dict.fromkeys(paths, "")
    out.update(zip(present, hashes, strict=True))
    return out


def commit_all(root: Path, message: str, *, leave: list[str] | None = None) -> str:
    """Stage everything (``.gitignore`` respected) but ``leave`` and commit; the new short sha ('' if
    nothing). What ``leave`` names is left as it is in the work tree, uncommitted."""
    git(root, "add", "-A")
    if leave:
        git(root, "reset", "-q", "--", *leave)
    if not git(root, "diff", "--cached", "--name-only").strip():
        return ""
    git(root, "commit", "-q", "--no-verify", "-m", message)
    return git(root, "rev-parse", "--short", "HEAD").strip()


def commit_paths(root: Path, paths: list[Path], message: str) -> str:
    """Commit ``paths`` alone (whatever else is changed or staged stays as it is); the new short sha
    ('' if they hold nothing new)."""
    names = [str(p) for p in paths]
    git(root, "add", "--", *names)
    if not git(root, "diff", "--cached", "--name-only", "--", *names).strip():
        return ""
    git(root, "commit", "-q", "--no-verify", "-m", message, "--", *names)
    return git(root, "rev-parse", "--short", "HEAD").strip()


def subject(root: Path, rev: str = "HEAD") -> str:
    return git(root, "log", "-1", "--format=%s", rev, check=False).strip()


def short(root: Path, sha: str) -> str:
    return git(root, "rev-parse", "--short", sha, check=False).strip() if sha else ""


@dataclass(frozen=True)
class Campaign:
    """Where one campaign's files are."""

    root: Path
    id: str

    @property
    def dir(self) -> Path:
        return self.root / WAVE_DIR / "campaigns" / self.id

    @property
    def state_file(self) -> Path:
        return self.dir / "STATE.md"

    @property
    def plan(self) -> Path:
        return self.dir / "plan"

    @property
    def loop_dir(self) -> Path:
        return self.dir / ".loop"

    @property
    def artifacts(self) -> Path:
        return self.dir / "artifacts"

    def wave_dir(self, n: int) -> Path:
        return self.plan / "waves" / f"wave_{n}"

    def notes(self, n: int) -> Path:
        return self.wave_dir(n) / "NOTES.md"

    def rel(self, path: Path) -> str:
        return str(path.relative_to(self.root))

    def read(self) -> st.State:
        try:
            text = st.decode(self.state_file.read_bytes())
        except FileNotFoundError:
            raise errors.NotFound(
                f"campaign {self.id!r} has no STATE.md ({self.state_file}): plan it first"
                " (`fleet campaign plan PLAN.md`)"
            ) from None
        state = st.parse(text)
        for n in range(state.total_waves):
            if not self.wave_dir(n).joinpath("WAVE.md").is_file():
                raise st.StateError(
                    f"STATE.md line {state.lines.get('total_waves', 1)}: total_waves: {state.total_waves}"
                    f" but {self.rel(self.wave_dir(n) / 'WAVE.md')} does not exist: every wave needs its"
                    " WAVE.md (or lower total_waves)"
                )
        return state

    def write(self, state: st.State) -> None:
        state.last_updated = today()
        tmp = self.state_file.with_name(f".STATE.md.{os.getpid()}.tmp")
        tmp.write_text(st.render(state), encoding="utf-8")
        os.replace(tmp, self.state_file)

    def wave_title(self, n: int) -> str:
        try:
            first = self.wave_dir(n).joinpath("WAVE.md").read_text(encoding="utf-8").splitlines()[0]
        except (FileNotFoundError, IndexError, UnicodeDecodeError):  # (a title: shown, never needed)
            return f"wave {n}"
        return re.sub(r"^#+\s*(Wave\s+\d+\s*[:—-]\s*)?", "", first).strip() or f"wave {n}"

    def check_wave(self, n: int, state: st.State) -> None:
        if not 0 <= n < state.total_waves:
            last = state.total_waves - 1
            raise errors.NotFound(
                f"campaign {self.id} has no wave {n}: its waves are 0-{last}"
                if last >= 0
                else f"campaign {self.id} has no waves"
            )


def active(root: Path) -> str | None:
    f = root / WAVE_DIR / "active"
    try:
        return f.read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def find(root: Path, campaign: str | None) -> Campaign:
    """The campaign named, or the active one; NotFound saying what exists."""
    cid = campaign or active(root)
    if not cid:
        raise errors.NotFound(
            f"no active campaign in {root}: plan one (`fleet campaign plan PLAN.md`)"
            " or name it with --campaign"
        )
    c = Campaign(root, cid)
    if not c.state_file.exists():
        have = sorted(p.name for p in (root / WAVE_DIR / "campaigns").glob("*") if p.is_dir())
        raise errors.NotFound(
            f"no campaign {cid!r} in {root / WAVE_DIR}: "
            + (f"there are {', '.join(have)}" if have else "plan one with `fleet campaign plan PLAN.md`")
        )
    return c


# ---------------------------------------------------------------- planning by headings


@dataclass(frozen=True)
class PlanDoc:
    title: str
    overview: str
    sections: list[tuple[str, str]]


def read_plan(path: Path) -> PlanDoc:
    """A plan's H1, the text before its first ``##`` and its ``##`` sections (code fences respected)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise errors.NotFound(f"no plan at {path}: give the path of a markdown plan") from None
    except (UnicodeDecodeError, IsADirectoryError) as exc:
        raise errors.UsageError(f"{path} is not a markdown text file ({exc})") from None
    title = ""
    overview: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    fence = False
    for ln in text.splitlines():
        if ln.lstrip().startswith(("```", "~~~")):
            fence = not fence
        if not fence and re.match(r"^#\s+\S", ln) and not title:
            title = ln[1:].strip()
            continue
        if not fence and re.match(r"^##\s+\S", ln):
            sections.append((ln[2:].strip(), []))
            continue
        (sections[-1][1] if sections else overview).append(ln)
    if not title:
        raise errors.UsageError(
            f"{path} has no H1 (`# Title` line): the campaign id is made from it; add one at the top"
        )
    return PlanDoc(title, "\n".join(overview).strip(), [(h, "\n".join(b).strip()) for h, b in sections])


def new_campaign(root: Path, plan_path: Path, title: str, *, executor: str, model: str) -> Campaign:
    cid = f"{slug(title)}-{today()}"
    c = Campaign(root, cid)
    if c.dir.exists():
        raise errors.Conflict(
            f"campaign {cid} already exists ({c.dir}): nothing was overwritten; remove it or retitle the plan"
        )
    return c


def write_skeleton(
    c: Campaign,
    plan_rel: str,
    *,
    executor: str,
    model: str,
    waves: list[tuple[str, str]],
    overview: str,
    activate: bool = True,
) -> st.State:
    from fleet.campaign import prompts

    c.plan.mkdir(parents=True)
    (c.dir / ".gitignore").write_text("artifacts/\n.loop/\n", encoding="utf-8")
    c.artifacts.mkdir()
    (c.plan / "AGENT_INSTRUCTIONS.md").write_text(prompts.agent_instructions(c.id), encoding="utf-8")
    (c.plan / "OVERVIEW.md").write_text(overview.rstrip() + "\n", encoding="utf-8")
    for n, (heading, body) in enumerate(waves):
        d = c.wave_dir(n)
        d.mkdir(parents=True)
        (d / "WAVE.md").write_text(f"# Wave {n}: {heading}\n\n{body}\n", encoding="utf-8")
    state = st.State(
        campaign_id=c.id, plan_source=plan_rel, executor_agent=executor, executor_model=model,
        total_waves=len(waves), created=today(), last_updated=today(),
    )  # fmt: skip
    for n, (heading, _) in enumerate(waves):
        r = state.row(n)
        r.set("Title", heading)
        r.set("Status", "pending")
    state.before_table = [
        "",
        f"# Campaign {c.id}",
        "",
        "One row per wave; the cursor above is the truth.",
        "",
    ]
    c.write(state)
    if activate:
        (c.root / WAVE_DIR / "active").write_text(c.id + "\n", encoding="utf-8")
    return state


def plan_by_headings(root: Path, plan_path: Path, *, executor: str, model: str) -> tuple[Campaign, st.State]:
    doc = read_plan(plan_path)
    if not doc.sections:
        raise errors.UsageError(
            f"{plan_path} has no `## ` sections: --by-headings makes one wave per `##` section;"
            " write the plan as waves, or plan it with a planner session (drop --by-headings)"
        )
    c = new_campaign(root, plan_path, doc.title, executor=executor, model=model)
    overview = f"# {doc.title}\n\n{doc.overview}\n"
    rel = os.path.relpath(plan_path.resolve(), root)
    state = write_skeleton(c, rel, executor=executor, model=model, waves=doc.sections, overview=overview)
    commit_plan(c)
    return c, state


def commit_plan(c: Campaign) -> None:
    """Commit the campaign's files alone (``wave plan: <id>``), whatever else is staged."""
    git(c.root, "add", "--", str(c.dir), str(c.root / WAVE_DIR / "active"))
    git(c.root, "commit", "-q", "--no-verify", "-m", f"wave plan: {c.id}", "--",
        str(c.dir), str(c.root / WAVE_DIR / "active"))  # fmt: skip
