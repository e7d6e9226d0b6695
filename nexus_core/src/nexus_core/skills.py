"""Skills: folders with a SKILL.md (YAML front matter, then Markdown instructions) that a model
loads on demand through the `skill` tool.

Discovery walks the folders of `nexus.config.skills` for files named SKILL.md. The front matter
sits between two `---` lines: `name` is required, `description` optional, any other key is kept
in `SkillContent.metadata`. A file that cannot be used is reported as a `SkillProblem` (with its
path and, where YAML gives one, the line) and skipped; the others still load.

A skill may come from anywhere (a download, a shared folder), so its file is read with bounds:
at most MAX_SKILL_BYTES, front matter at most MAX_FRONT_MATTER_BYTES, its YAML with the same
alias and nesting bounds as the config (`load_yaml`).

The configured folders are where skills may come from, and symbolic links do not widen that: a
symlinked folder is followed only where it leads to a folder inside one of them (one that leads
elsewhere is reported, with the way to allow it: add its target to `skills`); a SKILL.md that is
a link to a file outside its own folder is refused; a resource that is a link out of its skill's
folder is not listed. What a skill hands out (its instructions, the files a model is told of,
the helpers run_code gives every script) is then what its folder holds.

State is per Nexus (`skill_set(nexus)`): which skills exist, which are active. Activation fires `nexus_skill_loaded(skill=...)`, deactivation
`nexus_skill_deactivate(name=...)`, so a plugin such as run_code can stage a skill's helper files
and drop them again. `active_skills(nx)` tells such a plugin which skills are active and where
their folders are (`SkillContent.path`).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ._models import SkillContent

if TYPE_CHECKING:
    import yaml

    from ._nexus import Nexus

log = logging.getLogger("nexus_core")

SKILL_FILE = "SKILL.md"
#: a skill name: what a tool name may hold, so it is safe in paths, arguments and module names
SKILL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
# folders never searched for skills nor listed as resources
_SKIP_DIRS = frozenset({"__pycache__", "node_modules"})
#: the largest SKILL.md read, in bytes: instructions a model reads, not a data file
MAX_SKILL_BYTES = 1 << 20
#: the largest front matter (the YAML between the `---` lines), in bytes: a name, a description
#: and a few keys
MAX_FRONT_MATTER_BYTES = 64 << 10


@attrs.frozen
class SkillProblem:
    """A SKILL.md that could not be loaded: where, and what is wrong with it."""

    path: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.message}"


class SkillError(ValueError):
    """A SKILL.md that cannot be loaded; `problem` says where and why."""

    def __init__(self, problem: SkillProblem) -> None:
        self.problem = problem
        super().__init__(str(problem))


class UnknownSkillError(LookupError):
    """No skill of that name was found; the message lists the ones that were."""


# -- reading one SKILL.md -------------------------------------------------------------------


def _key_lines(node: yaml.Node | None, offset: int) -> dict[str, int]:
    """The file line of each top-level key of the front matter (for precise problem lines)."""
    import yaml

    if not isinstance(node, yaml.MappingNode):
        return {}
    return {str(k.value): k.start_mark.line + 1 + offset for k, _ in node.value}


def _visible(name: str) -> bool:
    return not name.startswith(".") and name not in _SKIP_DIRS


def _beneath(path: str, folder: str) -> bool:
    """Whether the real path `path` is `folder` (a real path) or inside it."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def skill_resources(folder: Path) -> tuple[str, ...]:
    """The files of a skill folder besides its SKILL.md, as sorted relative POSIX paths.

    Hidden files and folders are left out, and so is any subfolder that is a skill of its own,
    and any file that is a symbolic link leading out of the folder (symlinked subfolders are not
    entered at all).
    """
    found: list[str] = []
    real = os.path.realpath(folder)
    for root, dirs, files in os.walk(folder, followlinks=False):
        root_path = Path(root)
        dirs[:] = sorted(d for d in dirs if _visible(d) and not (root_path / d / SKILL_FILE).is_file())
        for name in files:
            if not _visible(name) or (root_path == folder and name == SKILL_FILE):
                continue
            path = root_path / name
            if path.is_symlink() and not _beneath(os.path.realpath(path), real):
                continue
            found.append(path.relative_to(folder).as_posix())
    return tuple(sorted(found))


def load_skill(path: str | os.PathLike[str]) -> SkillContent:
    """Read one SKILL.md (or the folder holding it) as a `SkillContent` whose `path` is the
    skill's folder. Raises `SkillError` with the path and line of what is wrong."""
    file = Path(path)
    if file.is_dir():
        file = file / SKILL_FILE
    file = file.absolute()
    where = str(file)

    def problem(message: str, line: int | None = None) -> SkillError:
        return SkillError(SkillProblem(where, message, line))

    if file.is_symlink():
        target, folder = os.path.realpath(file), os.path.realpath(file.parent)
        if not _beneath(target, folder):
            raise problem(f"a symbolic link to {target}, outside the skill's folder: a SKILL.md must be in "
                          "its folder (copy it there)")
    try:
        with open(file, "rb") as f:
            raw = f.read(MAX_SKILL_BYTES + 1)
    except OSError as exc:
        raise problem(f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_SKILL_BYTES:
        raise problem(f"the file is larger than {MAX_SKILL_BYTES} bytes ({MAX_SKILL_BYTES >> 20} MiB), the most "
                      "a SKILL.md may be; move long material to resource files beside it")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise problem(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    lines = text.splitlines()
    if not lines or lines[0].rstrip() != "---":
        raise problem("no front matter: SKILL.md must start with a '---' line, then YAML with a name", 1)
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == "---"), None)
    if end is None:
        raise problem("the front matter is not closed: no second '---' line", 1)
    front = "\n".join(lines[1:end])
    if len(front.encode("utf-8")) > MAX_FRONT_MATTER_BYTES:
        raise problem(f"the front matter is larger than {MAX_FRONT_MATTER_BYTES} bytes "
                      f"({MAX_FRONT_MATTER_BYTES >> 10} KiB), the most a SKILL.md may hold there", 1)
    import yaml  # here, not at import: the CLI's start-up does not pay for PyYAML

    from ._yaml import YAMLLimitError, load_yaml

    try:
        node, data = load_yaml(front)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        kind = "the front matter's YAML" if isinstance(exc, YAMLLimitError) else "invalid YAML in the front matter"
        # the YAML starts on the file's second line
        raise problem(f"{kind}: {what}", mark.line + 2 if mark else 2) from None
    if data is None:
        raise problem("the front matter is empty: 'name' is required", 1)
    if not isinstance(data, dict):
        raise problem(f"the front matter must be a mapping of keys, got {type(data).__name__}", 2)
    key_line = _key_lines(node, offset=1)
    name = data.get("name")
    if name is None:
        raise problem("missing required key 'name'", 1)
    if not isinstance(name, str):
        raise problem(f"'name' must be a string, got {type(name).__name__}", key_line.get("name"))
    if not SKILL_NAME.match(name):
        raise problem(f"'name' {name!r} is not valid: use 1-64 of a-z A-Z 0-9 _ -", key_line.get("name"))
    description = data.get("description")
    if description is None:
        description = ""
    if not isinstance(description, str):
        raise problem(f"'description' must be a string, got {type(description).__name__}",
                      key_line.get("description"))
    body = "\n".join(lines[end + 1:]).strip()
    metadata = {str(k): v for k, v in data.items() if k not in ("name", "description")}
    return SkillContent(
        name=name,
        description=description.strip(),
        body=body,
        path=str(file.parent),
        resources=skill_resources(file.parent),
        metadata=metadata,
    )


# -- discovery ------------------------------------------------------------------------------


@attrs.frozen
class SkillScan:
    """What `discover_skills` found: the skills that load (first of a name wins) and the files
    that do not."""

    skills: tuple[SkillContent, ...] = ()
    problems: tuple[SkillProblem, ...] = ()


def _skill_files(folder: Path, allowed: Sequence[str], problems: list[SkillProblem]) -> list[Path]:
    """Every SKILL.md under `folder`, in sorted order. Symlinked folders are followed once, and
    only where they lead into one of the `allowed` real paths (the configured folders); a link
    that leads elsewhere to a folder with a SKILL.md is a problem."""
    found: list[Path] = []
    visited: set[str] = set()
    for root, dirs, files in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in visited:  # a symlink loop, or the same folder reached twice
            dirs[:] = []
            continue
        visited.add(real)
        kept = []
        for d in sorted(d for d in dirs if _visible(d)):
            path = os.path.join(root, d)
            target = os.path.realpath(path)
            if os.path.islink(path) and not any(_beneath(target, a) for a in allowed):
                if os.path.isfile(os.path.join(target, SKILL_FILE)):
                    problems.append(SkillProblem(
                        str(Path(path).absolute()),
                        f"a symbolic link to {target}, outside the configured skill folders: not followed "
                        "(add that folder to `skills` to use the skills in it)"))
                continue
            kept.append(d)
        dirs[:] = kept
        if SKILL_FILE in files:
            found.append(Path(root) / SKILL_FILE)
    return found


def discover_skills(folders: Iterable[str | os.PathLike[str]]) -> SkillScan:
    """Load every SKILL.md under `folders` (searched in order; a folder that does not exist is
    skipped). A broken file, or a second skill with a name already taken, is a problem."""
    skills: dict[str, SkillContent] = {}
    problems: list[SkillProblem] = []
    roots = [Path(folder) for folder in folders]
    allowed = [os.path.realpath(root) for root in roots if root.is_dir()]
    for root in roots:
        if not root.is_dir():
            continue
        for file in _skill_files(root, allowed, problems):
            try:
                skill = load_skill(file)
            except SkillError as exc:
                problems.append(exc.problem)
                continue
            if skill.name in skills:
                first = Path(skills[skill.name].path) / SKILL_FILE
                problems.append(SkillProblem(str(file.absolute()),
                                             f"skill name {skill.name!r} is already used by {first}; this one is skipped"))
                continue
            skills[skill.name] = skill
    return SkillScan(tuple(skills.values()), tuple(problems))


# -- per-Nexus state ------------------------------------------------------------------------


class SkillSet:
    """The skills of one Nexus: what exists (scanned on first use), what is active, and the
    prompt that lists them. Get it with `skill_set(nx)`; thread-safe."""

    def __init__(self, nexus: Nexus, folders: Sequence[str | os.PathLike[str]]) -> None:
        self._nexus = nexus
        self.folders = [Path(f) for f in folders]
        self._lock = threading.RLock()
        self._scan: SkillScan | None = None
        self._active: dict[str, SkillContent] = {}

    def _scanned(self) -> SkillScan:
        with self._lock:
            if self._scan is None:
                self._scan = discover_skills(self.folders)
            return self._scan

    def refresh(self) -> SkillScan:
        """Search the folders again (skills added, changed or removed on disk). Active skills
        stay active."""
        with self._lock:
            self._scan = None
            return self._scanned()

    def all(self) -> list[SkillContent]:
        """Every skill found, sorted by name."""
        return sorted(self._scanned().skills, key=lambda s: s.name)

    @property
    def problems(self) -> list[SkillProblem]:
        """The SKILL.md files that could not be loaded."""
        return list(self._scanned().problems)

    def get(self, name: str) -> SkillContent | None:
        return next((s for s in self._scanned().skills if s.name == name), None)

    def activate(self, name: str) -> SkillContent:
        """Load a skill for use: its SKILL.md is read again (so edits show), it joins the active
        skills, and `nexus_skill_loaded(skill=...)` fires. Activating an active skill returns it
        without firing again. Raises `UnknownSkillError`, or `SkillError` if the file broke."""
        with self._lock:
            if name in self._active:
                return self._active[name]
            found = self.get(name)
            if found is None:
                known = ", ".join(s.name for s in self.all()) or "(none)"
                raise UnknownSkillError(f"unknown skill {name!r}; available skills: {known}")
            skill = load_skill(Path(found.path) / SKILL_FILE)
            if skill.name != name:
                raise SkillError(SkillProblem(str(Path(found.path) / SKILL_FILE),
                                              f"the skill's name changed on disk to {skill.name!r}"))
            self._active[name] = skill
        self._fire("nexus_skill_loaded", skill=skill)
        return skill

    def deactivate(self, name: str) -> bool:
        """Stop using a skill; `nexus_skill_deactivate(name=...)` fires. Returns whether it was
        active (deactivating an inactive skill does nothing)."""
        with self._lock:
            if self._active.pop(name, None) is None:
                return False
        self._fire("nexus_skill_deactivate", name=name)
        return True

    def active(self) -> list[SkillContent]:
        """The active skills, in the order they were activated; `path` is each one's folder."""
        with self._lock:
            return list(self._active.values())

    def is_active(self, name: str) -> bool:
        with self._lock:
            return name in self._active

    def prompt(self) -> str:
        """Text for the system prompt listing each skill's name and description ("" when there
        are none), so the model knows what it can load with the `skill` tool."""
        skills = self.all()
        if not skills:
            return ""
        lines = [("Skills: call the `skill` tool with a skill's name to load its instructions "
                  "when a task matches its description.")]
        lines += [f"- {s.name}: {s.description}" if s.description else f"- {s.name}" for s in skills]
        return "\n".join(lines)

    def _fire(self, hook: str, **kwargs: Any) -> None:
        # observers: one that raises is logged and does not undo the (de)activation
        self._nexus.notify(hook, **kwargs)


def skill_set(nexus: Nexus) -> SkillSet:
    """The `SkillSet` of `nexus`, created (from `nexus.config.skills`) on first use."""
    skills: SkillSet = nexus._skill_set(lambda: SkillSet(nexus, nexus.config.skills))
    return skills


def list_skills(nexus: Nexus) -> list[SkillContent]:
    """Every skill found under the configured folders, sorted by name."""
    return skill_set(nexus).all()


def skill_problems(nexus: Nexus) -> list[SkillProblem]:
    """The SKILL.md files under the configured folders that could not be loaded."""
    return skill_set(nexus).problems


def activate_skill(nexus: Nexus, name: str) -> SkillContent:
    """Activate a skill by name (fires `nexus_skill_loaded`); see `SkillSet.activate`."""
    return skill_set(nexus).activate(name)


def deactivate_skill(nexus: Nexus, name: str) -> bool:
    """Deactivate a skill (fires `nexus_skill_deactivate`); returns whether it was active."""
    return skill_set(nexus).deactivate(name)


def active_skills(nexus: Nexus) -> list[SkillContent]:
    """The active skills, in activation order; each `path` is the skill's folder (where
    run_code finds helper .py files to stage)."""
    return skill_set(nexus).active()


def skills_prompt(nexus: Nexus) -> str:
    """The system-prompt text listing the skills' names and descriptions ("" when none)."""
    return skill_set(nexus).prompt()


def format_skill(skill: SkillContent) -> str:
    """What the `skill` tool returns to the model: the instructions, then the files it may read."""
    parts = [f"# Skill: {skill.name}", f"Folder: {skill.path}", "", skill.body]
    if skill.resources:
        parts += ["", "Resources (files in the skill folder, paths relative to it):"]
        parts += [f"- {r}" for r in skill.resources]
    return "\n".join(parts).rstrip() + "\n"


__all__ = [
    "SKILL_FILE",
    "SkillError",
    "SkillProblem",
    "SkillScan",
    "SkillSet",
    "UnknownSkillError",
    "activate_skill",
    "active_skills",
    "deactivate_skill",
    "discover_skills",
    "format_skill",
    "list_skills",
    "load_skill",
    "skill_problems",
    "skill_resources",
    "skill_set",
    "skills_prompt",
]
