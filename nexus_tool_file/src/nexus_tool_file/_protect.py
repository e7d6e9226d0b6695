"""Files that configure programs run on the host: the file tools do not create, change, move or
delete them unless a person allows it (`allow_protected`).

A write to `.git/config` adding `core.fsmonitor = <payload>` runs the payload on the host at the
person's next `git status`; a file in `.git/hooks/` runs at the next commit, `.envrc` at the next
`cd` (direnv), `.vscode/tasks.json` when the folder is opened, `nexus.yaml` at the next `nexus`
command run in that folder. None of that is workspace data: each is a program's configuration,
and it names programs to run. So every tool that changes a file (write, edit, apply_patch) asks
`Protection.check` about every name the file goes by, before anything is made or replaced:

- the path as requested, `./` and `..` resolved by name: what git reads when `.git` itself is a
  symlink (`Workspace.locate`);
- the path as opened, symlinks followed: what the kernel would write (`link/config` with
  `link -> .git`);
- each folder a write would create, before it is made.

A rule names a file or a folder, and a folder's rule covers everything in it (`**/.git` covers
`.git/config`, a worktree's `.git` file, and `sub/.git/hooks/x`). Names are compared the way
case-insensitive filesystems compare them (`fold`), on every system: `.GIT/config` is refused
even on Linux, where it is another file, because a refused odd name costs nothing and a missed
one is code run on the host (macOS and Windows volumes, and Linux's casefold folders and vfat
mounts, treat it as `.git/config`).

Besides the built-in rules and `protected_paths`, two come from the workspace itself, read again
whenever the files they come from change: the loaded config's own file, when it lies inside the
workspace, and what the repository's config redirects git to (`core.hooksPath`, a `.git` file or
symlink naming a repository folder elsewhere in the workspace). Hard links need no rule: every
write replaces the file's directory entry with a new file (a rename), so another name of the old
file keeps the old content.
"""

from __future__ import annotations

import os
import re
import threading
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._paths import FileToolError
from ._patterns import PatternError, compile_glob, compile_literal, subject

#: the config key a person uses to let the file tools change a protected path
ALLOW_KEY = "plugins.nexus.tool.file.allow_protected"
PROTECTED_KEY = "plugins.nexus.tool.file.protected_paths"

#: the file names the `nexus` command line loads from the folder it runs in (nexus_core's cli:
#: `./nexus.yaml` when it exists)
NEXUS_CONFIG_NAMES = ("nexus.yaml",)

#: (rule, what runs it): files and folders that programs a person runs from a workspace read as
#: configuration naming other programs to run, without the person asking to run anything of the
#: project's (`git status`, `cd`, opening the folder in an editor, `nexus tools`). Build files
#: (Makefile, package.json, pyproject.toml, conftest.py) are left out on purpose: running them is
#: running the project, which is what the workspace is for; `protected_paths` adds them.
BUILTIN_RULES: tuple[tuple[str, str], ...] = (
    ("**/.git", "git runs the programs its config and hooks name"),
    ("**/.hg", "Mercurial runs the hooks its hgrc names"),
    ("**/.jj", "Jujutsu runs the programs its repository config names"),
    ("**/.pre-commit-config.yaml", "pre-commit runs the commands it lists at each git commit"),
    ("**/.husky", "husky's git hooks run at each git commit"),
    ("**/.envrc", "direnv runs it when a shell enters the folder"),
    ("**/.direnv", "direnv puts the programs its layouts keep here on PATH"),
    ("**/.vscode", "VS Code runs the tasks and programs it names, some when the folder is opened"),
    ("**/.idea", "JetBrains IDEs run the tools and run configurations it holds"),
    ("**/.devcontainer", "a dev container's initializeCommand runs on the host"),
    ("**/.devcontainer.json", "a dev container's initializeCommand runs on the host"),
    *((f"**/{name}", ("the nexus command line loads it from the folder it runs in: the MCP servers it "
                      "starts, the gates it sets")) for name in NEXUS_CONFIG_NAMES),
)

#: code points HFS+ ignores in names (git's is_hfs_dotgit drops the same, CVE-2014-9390):
#: `.g\u200cit` is `.git` there
_IGNORED_BY_HFS = re.compile("[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]")

#: the most of a git config file read for its redirections (git's own are a few KiB)
_GIT_CONFIG_BYTES = 1 << 20


def fold(path: str) -> str:
    """`path` as case-insensitive filesystems compare names: case folded (Unicode's full folding,
    so the Kelvin sign is `k` and `ſ` is `s`), composed (NFC: APFS and HFS+ do not tell
    composed from decomposed), without the code points HFS+ ignores."""
    return unicodedata.normalize("NFC", _IGNORED_BY_HFS.sub("", path).casefold())


def _ancestry(rel: str) -> list[str]:
    """`a`, `a/b`, `a/b/c` for `a/b/c`: the path and every folder above it, inside the root."""
    parts = rel.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)] if rel else []


class ProtectedPath(FileToolError):
    """A change to a protected path, refused before anything was made or replaced."""


@dataclass(frozen=True)
class Rule:
    """One protected file or folder: `pattern` as people write it, `why` what runs it, `origin`
    where the rule comes from (for the message and `nexus doctor`)."""

    pattern: str
    why: str
    origin: str
    regex: Any

    def protects(self, ancestry: Sequence[bytes]) -> bool:
        return any(self.regex.match(name) for name in ancestry)


def compile_rule(pattern: str, why: str, origin: str) -> Rule:
    """A rule from a glob over paths relative to the workspace (the glob tool's syntax), or
    PatternError saying what is wrong with it."""
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise PatternError(f"{pattern!r}: patterns are matched against paths relative to the workspace, so "
                           "one cannot start with / or contain '..'; write 'name' for the workspace's own, "
                           "'**/name' for one at any depth")
    return Rule(pattern, why, origin, compile_glob(fold(pattern.rstrip("/"))))


def exact_rule(rel: str, why: str, origin: str) -> Rule:
    """A rule for exactly the file or folder `rel` (and what it holds)."""
    return Rule(rel, why, origin, compile_literal(fold(rel)))


class Protection:
    """The rules of one Nexus's file tools, and the paths a person allowed.

    `check` is asked about each name of a file about to be changed. The rules read from the
    workspace (the repository's redirections) are worked out again when the files they come from
    change (their size, inode or modification time), so a repository made or reconfigured
    after the tools started is followed.
    """

    def __init__(self, root: Path, rules: Iterable[Rule], allowed: Iterable[Rule] = ()) -> None:
        self.root = root
        self.rules = tuple(rules)
        self.allowed = tuple(allowed)
        self._lock = threading.Lock()
        self._git_seen: tuple[Any, ...] | None = None
        self._git_rules: tuple[Rule, ...] = ()

    def git_rules(self) -> tuple[Rule, ...]:
        """The rules the repository the workspace is in adds (see `git_redirections`)."""
        found = _find_git(self.root)
        seen = _signature(found)
        with self._lock:
            if seen != self._git_seen:
                # a redirection to what a rule already covers (`.git` itself) adds nothing
                self._git_rules = tuple(rule for rule in git_redirections(self.root, found)
                                        if not self._covered(rule.pattern))
                self._git_seen = seen
            return self._git_rules

    def _covered(self, rel: str) -> bool:
        ancestry = [subject(name) for name in _ancestry(fold(rel))]
        return any(rule.protects(ancestry) for rule in self.rules)

    def protecting(self, rel: str) -> Rule | None:
        """The rule that protects `rel` (relative to the root), unless a person allowed it."""
        ancestry = [subject(name) for name in _ancestry(fold(rel))]
        if not ancestry or any(allow.protects(ancestry) for allow in self.allowed):
            return None
        for rule in (*self.rules, *self.git_rules()):
            if rule.protects(ancestry):
                return rule
        return None

    def check(self, rel: str, named: str, *, folder: bool = False) -> None:
        """Raise ProtectedPath when the file or folder `rel` is protected. `named` is the path as
        the call named it (`..` resolved): shown, with `rel` too when a symlink made them differ.
        `folder`: `rel` is a folder that would be made for `named`."""
        rule = self.protecting(rel)
        if rule is None:
            return
        if folder:
            shown = f"{named} is protected: the folder {rel} would be made for it"
        elif named != rel:
            shown = f"{named} (which is {rel}) is protected"
        else:
            shown = f"{named} is protected"
        raise ProtectedPath(f'{shown} ({rule.why}: rule "{rule.pattern}", {rule.origin}); nothing was changed. '
                            f"A person can allow it with {ALLOW_KEY}")

    def summary(self) -> str:
        """For `nexus doctor`: how many rules, from where, and how many allowances."""
        builtin = sum(rule.origin == "built in" for rule in self.rules)
        listed = sum(rule.origin.startswith(PROTECTED_KEY) for rule in self.rules)
        others = [rule for rule in (*self.rules, *self.git_rules())
                  if rule.origin != "built in" and not rule.origin.startswith(PROTECTED_KEY)]
        total = len(self.rules) + len(self.git_rules())
        parts = [f"{builtin} built in", f"{listed} from protected_paths"]
        parts += [f"{rule.pattern} ({rule.origin})" for rule in others]
        allowed = f"{len(self.allowed)} allowed by allow_protected ({', '.join(a.pattern for a in self.allowed)})" \
            if self.allowed else "none allowed by allow_protected"
        return (f"protected paths: on, {total} rules ({'; '.join(parts)}); write, edit and apply_patch refuse to "
                f"change them; {allowed}")


def build(root: Path, protected: Sequence[str], allowed: Sequence[str], config_source: str | None,
          problem: Callable[[str, int, str], None]) -> Protection:
    """The Protection of a workspace from the plugin's settings and the config file the Nexus
    loaded. A pattern that does not compile is reported through `problem(key, index, message)`
    (a config error naming the key) and left out."""
    rules = [compile_rule(pattern, why, "built in") for pattern, why in BUILTIN_RULES]
    for i, pattern in enumerate(protected):
        try:
            rules.append(compile_rule(pattern, "listed in the config", f"{PROTECTED_KEY}[{i}]"))
        except PatternError as exc:
            problem("protected_paths", i, str(exc))
    exceptions = []
    for i, pattern in enumerate(allowed):
        try:
            exceptions.append(compile_rule(pattern, "allowed by a person", f"{ALLOW_KEY}[{i}]"))
        except PatternError as exc:
            problem("allow_protected", i, str(exc))
    rules += config_rules(root, config_source)
    return Protection(root, rules, exceptions)


def _inside(root: Path, path: str | os.PathLike[str]) -> str | None:
    """`path` (absolute) relative to `root`, or None when it is not below it."""
    candidate = Path(path)
    if candidate == root or not candidate.is_relative_to(root):
        return None
    return candidate.relative_to(root).as_posix()


def config_rules(root: Path, source: str | None) -> list[Rule]:
    """The loaded config's own file, when it lies inside the workspace: by the name it was loaded
    by and by its real path (a symlink to it is the same file)."""
    if not source:
        return []
    named = os.path.abspath(source)
    found = {_inside(root, named), _inside(root, os.path.realpath(named))} - {None}
    return [exact_rule(rel, "the config this Nexus loaded; the nexus command line loads it again", "the loaded config")
            for rel in sorted(r for r in found if r is not None)]


# -- the repository's redirections ------------------------------------------------------------


@dataclass(frozen=True)
class _GitFound:
    worktree: Path  # the folder holding `.git`
    gitdir: Path  # the repository folder `.git` is or names (real path)
    configs: tuple[Path, ...]  # the config files git reads there, in the order it reads them


def _find_git(root: Path) -> _GitFound | None:
    """The repository the workspace is in, found as git finds it: the nearest `.git` at or above
    the root, a folder, a symlink to one, or a file saying `gitdir: <path>`."""
    for folder in (root, *root.parents):
        dotgit = folder / ".git"
        gitdir: Path | None
        try:
            if dotgit.is_dir():
                gitdir = Path(os.path.realpath(dotgit))
            elif dotgit.is_file():
                gitdir = _gitfile_target(dotgit)
            else:
                continue
        except OSError:
            return None
        if gitdir is None:
            return None
        configs = [gitdir / "config", gitdir / "config.worktree"]
        common = _read_small(gitdir / "commondir")
        if common is not None and common.strip():
            configs.insert(0, Path(os.path.realpath(gitdir / common.strip())) / "config")
        return _GitFound(folder, gitdir, tuple(configs))
    return None


def _gitfile_target(dotgit: Path) -> Path | None:
    text = _read_small(dotgit)
    if text is None or not text.startswith("gitdir:"):
        return None
    target = text[len("gitdir:"):].strip()
    return Path(os.path.realpath(dotgit.parent / os.path.expanduser(target)))


def _read_small(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(_GIT_CONFIG_BYTES).decode("utf-8", "replace")
    except OSError:
        return None


def _signature(found: _GitFound | None) -> tuple[Any, ...]:
    """What the redirections depend on: which repository, and the state of its config files."""
    if found is None:
        return ()
    states: list[Any] = [str(found.worktree), str(found.gitdir)]
    for path in found.configs:
        try:
            st = os.stat(path)
            states.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            states.append(None)
    return tuple(states)


def git_redirections(root: Path, found: _GitFound | None) -> list[Rule]:
    """Rules for what the repository's own files send git to inside the workspace: the folder
    `core.hooksPath` names (husky and teams' `.githooks` folders work that way), and a repository
    folder that a `.git` file or symlink names. Included config files (`[include]`) and the
    person's global config are not read: name such a folder in protected_paths."""
    if found is None:
        return []
    rules = []
    gitdir_rel = _inside(root, found.gitdir)
    if gitdir_rel is not None:
        rules.append(exact_rule(gitdir_rel, "the repository folder .git names: git runs the programs its config "
                                            "and hooks name", "where .git points"))
    hooks_path = None
    for config in found.configs:
        text = _read_small(config)
        if text is not None:
            hooks_path = git_config_value(text, "core", "hookspath") or hooks_path
    if hooks_path:
        hooks = Path(os.path.expanduser(hooks_path))
        hooks = hooks if hooks.is_absolute() else found.worktree / hooks  # relative: to the worktree
        named = {_inside(root, os.path.normpath(hooks)), _inside(root, os.path.realpath(hooks))} - {None}
        rules += [exact_rule(rel, "git runs the hooks in the folder core.hooksPath names", "core.hooksPath")
                  for rel in sorted(r for r in named if r is not None)]
    return rules


_SECTION = re.compile(r'\s*\[\s*([A-Za-z0-9.-]+)\s*("(?:[^"\\]|\\.)*")?\s*\](.*)', re.DOTALL)
_ENTRY = re.compile(r"\s*([A-Za-z][A-Za-z0-9-]*)\s*(?:=(.*))?", re.DOTALL)


def git_config_value(text: str, section: str, key: str) -> str | None:
    """The last value of `section.key` in the text of a git config file (names compared without
    case, as git does), or None. Quotes, escapes, comments and continued lines are read as git
    reads them; a subsection (`[core "x"]`) is another section."""
    value = None
    current = None
    lines = iter(text.splitlines())
    for line in lines:
        match = _SECTION.match(line)
        if match:
            current = match.group(1).lower() if match.group(2) is None else None
            line = match.group(3)
        entry = _ENTRY.match(line)
        if not entry or not line.strip() or line.lstrip()[:1] in "#;":
            continue
        raw = entry.group(2)
        while raw is not None and _continues(raw):
            raw = raw[:-1] + next(lines, "")
        if current == section and entry.group(1).lower() == key:
            value = "true" if raw is None else _config_value(raw)
    return value


def _continues(raw: str) -> bool:
    """A value line that ends in an unescaped backslash goes on on the next line."""
    return (len(raw) - len(raw.rstrip("\\"))) % 2 == 1


def _config_value(raw: str) -> str:
    out: list[str] = []
    quoted = False
    pending_space = ""
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == '"':
            quoted = not quoted
        elif ch == "\\" and i + 1 < len(raw):
            i += 1
            out.append(pending_space + {"n": "\n", "t": "\t", "b": "\b"}.get(raw[i], raw[i]))
            pending_space = ""
        elif ch in "#;" and not quoted:
            break
        elif ch.isspace() and not quoted:
            pending_space += ch if out else ""  # inner spaces kept, leading and trailing dropped
        else:
            out.append(pending_space + ch)
            pending_space = ""
        i += 1
    return "".join(out)
