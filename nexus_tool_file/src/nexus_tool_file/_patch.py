"""apply_patch: the `*** Begin Patch` format (as OpenAI's Codex uses it), applied all or nothing.

    *** Begin Patch
    *** Add File: docs/hello.txt
    +Hello
    *** Update File: src/app.py
    *** Move to: src/main.py
    @@ def greet():
    -    print("Hi")
    +    print("Hello")
    *** Delete File: old.txt
    *** End Patch

Three steps, so that a patch either changes every file or none:
1. parse the text into file operations (a syntax error names its patch line);
2. plan: resolve every path inside the workspace, read every file and work out each new
   content in memory (a hunk that does not apply names its file and hunk);
3. commit: stage every new content in a temporary file beside its target, then rename them into
   place and delete what goes. Should the disk fail midway, what was done is undone from the
   contents read in step 2.

Every step opens its folders beneath the workspace again (`Workspace.locate`, `in_folder`): a
folder swapped for a symlink between the plan and the commit makes the commit fail and undo,
never reach outside.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from nexus_core import ToolResult

from ._fileio import (atomic_write, check_regular, commit_staged, decode_text, discard, encoded, read_bytes, stage,
                      too_large)
from ._paths import FileToolError, Location, Workspace
from ._protect import ProtectedPath
from ._settings import Settings

BEGIN, END = "*** Begin Patch", "*** End Patch"
ADD, UPDATE, DELETE, MOVE = "*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: "
END_OF_FILE = "*** End of File"


class PatchError(FileToolError):
    """A patch that cannot be parsed or applied; nothing was changed."""


@dataclass
class Hunk:
    """One `@@` section of an Update File, found after the `anchor` line when one is given.

    `body` holds its lines as (mark, text), mark being " " (context), "-" or "+".
    """

    anchor: str | None
    body: list[tuple[str, str]] = field(default_factory=list)
    at_end_of_file: bool = False

    @property
    def old(self) -> list[str]:
        """The lines the hunk expects in the file: context and removed lines."""
        return [text for mark, text in self.body if mark != "+"]

    def replacement(self, found: Sequence[str]) -> list[str]:
        """The lines that take the place of `found` (the file's lines that matched `old`).
        Context lines are kept as the file has them, so a match that forgave whitespace does
        not rewrite the whitespace."""
        kept = iter(found)
        out = []
        for mark, text in self.body:
            if mark == "+":
                out.append(text)
            else:
                line = next(kept)
                if mark == " ":
                    out.append(line)
        return out


@dataclass
class FileOp:
    kind: Literal["add", "update", "delete"]
    path: str
    line: int  # where it starts in the patch, for messages
    move_to: str | None = None
    content: list[str] = field(default_factory=list)  # for add
    hunks: list[Hunk] = field(default_factory=list)  # for update


# -- 1. parse -------------------------------------------------------------------------------


def parse(text: str) -> list[FileOp]:
    """The file operations of a patch, or PatchError naming the line that is wrong.

    Lenient where models are known to slip and the meaning is still clear (as Codex is): spaces
    around the markers, blank lines between hunks, a first hunk without its `@@` line, and an
    empty line inside a hunk taken as an empty context line.
    """
    lines = text.strip().splitlines()
    if not lines or lines[0].strip() != BEGIN:
        raise PatchError(f"a patch must start with the line {BEGIN!r}")
    if lines[-1].strip() != END:
        raise PatchError(f"a patch must end with the line {END!r}")
    ops: list[FileOp] = []
    i, end = 1, len(lines) - 1
    while i < end:
        header = lines[i].strip()
        number = i + 1
        if not header:
            i += 1
        elif header.startswith(ADD):
            op = FileOp("add", header[len(ADD):].strip(), number)
            i += 1
            while i < end and lines[i].startswith("+"):
                op.content.append(lines[i][1:])
                i += 1
            ops.append(op)
        elif header.startswith(DELETE):
            ops.append(FileOp("delete", header[len(DELETE):].strip(), number))
            i += 1
        elif header.startswith(UPDATE):
            op = FileOp("update", header[len(UPDATE):].strip(), number)
            i += 1
            if i < end and lines[i].strip().startswith(MOVE):
                op.move_to = lines[i].strip()[len(MOVE):].strip()
                i += 1
            i = _parse_hunks(lines, i, end, op)
            ops.append(op)
        else:
            raise PatchError(f"patch line {number}: expected '*** Add File: ', '*** Update File: ' or "
                             f"'*** Delete File: ' followed by a path, got {lines[i]!r}")
    for op in ops:
        if not op.path or (op.move_to is not None and not op.move_to):
            raise PatchError(f"patch line {op.line}: a file section needs a path")
    return ops


def _parse_hunks(lines: list[str], i: int, end: int, op: FileOp) -> int:
    """Read the hunks of an Update File section from line index `i`; returns where they stop."""
    while i < end:
        line = lines[i]
        if line.startswith("***"):
            break  # the next file section
        if not line.strip():
            i += 1  # a blank line between hunks
            continue
        hunk_line = i + 1
        if line.startswith("@@"):
            hunk = Hunk(anchor=line[2:].strip() or None)
            i += 1
        elif not op.hunks:
            hunk = Hunk(anchor=None)  # the first hunk may start straight with its lines
        else:
            raise PatchError(f"patch line {i + 1}: expected a hunk starting with '@@', got {line!r}")
        start = i
        while i < end:
            line = lines[i]
            if line.strip() == END_OF_FILE:
                hunk.at_end_of_file = True
                i += 1
                break
            if line == "":
                hunk.body.append((" ", ""))
            elif line[0] in " -+":
                hunk.body.append((line[0], line[1:]))
            else:
                break
            i += 1
        if i == start or not hunk.body:
            raise PatchError(f"patch line {hunk_line}: hunk {len(op.hunks) + 1} of {op.path} has no lines; "
                             "each line of a hunk starts with ' ' (context), '-' (remove) or '+' (add)")
        op.hunks.append(hunk)
    if not op.hunks:
        raise PatchError(f"patch line {op.line}: Update File {op.path} has no hunks")
    return i


# -- 2. plan --------------------------------------------------------------------------------


#: line comparisons one patch may make to place its hunks (a few seconds of Python): a hunk of
#: thousands of lines against a file of as many alike lines would otherwise cost hours
MAX_COMPARISONS = 10_000_000


class _Budget:
    def __init__(self, shown: str) -> None:
        self.shown = shown
        self.left = MAX_COMPARISONS

    def spend(self, count: int, hunk: int) -> None:
        self.left -= count
        if self.left < 0:
            raise PatchError(f"{self.shown}: placing hunk {hunk} takes more than {MAX_COMPARISONS} line "
                             "comparisons (the comparison limit of one patch); give an @@ line near the change, "
                             "or smaller hunks with lines that occur less often")


def _seek(lines: Sequence[str], pattern: Sequence[str], start: int, at_end: bool,
          budget: _Budget, hunk: int) -> int | None:
    """Where `pattern` occurs in `lines` at or after `start`. Tries an exact match first, then
    ignoring trailing whitespace, then ignoring surrounding whitespace: models often get
    indentation of blank lines or trailing spaces wrong, rarely the text itself. Each line
    compared is counted against `budget`."""
    last = len(lines) - len(pattern)
    if last < start:
        return None
    candidates = list(range(start, last + 1))
    if at_end:  # `*** End of File`: the end of the file is the place to look first
        candidates.insert(0, last)
    normalizers: list[Callable[[str], str]] = [lambda s: s, str.rstrip, str.strip]
    size = len(pattern)
    for norm in normalizers:
        wanted = [norm(p) for p in pattern]
        first = wanted[0]
        compared = 0
        for at in candidates:
            compared += 1
            if norm(lines[at]) != first:
                continue
            k = 1
            while k < size and norm(lines[at + k]) == wanted[k]:
                k += 1
            compared += k
            if k == size:
                budget.spend(compared, hunk)
                return at
            if compared > 100_000:
                budget.spend(compared, hunk)
                compared = 0
        budget.spend(compared, hunk)
    return None


def apply_hunks(text: str, hunks: Sequence[Hunk], shown: str, limit: int | None = None) -> str:
    """`text` with every hunk applied in order, or PatchError naming the hunk that does not fit.
    Line ends (`\\n` or `\\r\\n`) and whether the file ends with one are kept as they were.
    With `limit`, a result of more characters is refused before it is joined into one string."""
    eol = "\r\n" if "\r\n" in text else "\n"
    lines = text.split(eol)
    ends_with_eol = text == "" or text.endswith(eol)
    if ends_with_eol:
        lines.pop()
    edits: list[tuple[int, int, list[str]]] = []  # (at, how many old lines, new lines)
    position = 0
    budget = _Budget(shown)
    for number, hunk in enumerate(hunks, 1):
        if hunk.anchor is not None:
            found = _seek(lines, [hunk.anchor], position, False, budget, number)
            if found is None:
                raise PatchError(f"{shown}: hunk {number} does not apply: its @@ line {hunk.anchor!r} "
                                 f"was not found{f' after line {position}' if position else ''}")
            position = found + 1
        if not hunk.old:  # only additions: after the anchor, or at the end of the file
            edits.append((position if hunk.anchor is not None else len(lines), 0, hunk.replacement([])))
            continue
        found = _seek(lines, hunk.old, position, hunk.at_end_of_file, budget, number)
        if found is None and hunk.body[-1] == (" ", "") and len(hunk.old) > 1:
            # A trailing empty context line is often the patch's own final newline.
            hunk = Hunk(hunk.anchor, hunk.body[:-1], hunk.at_end_of_file)
            found = _seek(lines, hunk.old, position, hunk.at_end_of_file, budget, number)
        if found is None:
            expected = "\n".join(f"  {line}" for line in hunk.old)
            raise PatchError(f"{shown}: hunk {number} does not apply: these lines were not found"
                             f"{f' after line {position}' if position else ''}:\n{expected}\n"
                             "Read the file again and make the context and '-' lines match it exactly.")
        count = len(hunk.old)
        edits.append((found, count, hunk.replacement(lines[found:found + count])))
        position = found + count
    for at, count, new in reversed(edits):
        lines[at:at + count] = new
    if limit is not None:
        chars = sum(map(len, lines)) + len(eol) * len(lines)
        if chars > limit:  # each character is at least a byte
            raise too_large(shown, chars, limit, would="the patch", at_least=True)
    return eol.join(lines) + (eol if ends_with_eol and lines else "")


@dataclass
class Plan:
    """What the patch does, worked out in full before anything is touched. Files are named by
    their real path relative to the workspace root."""

    writes: dict[str, tuple[bytes, int | None]] = field(default_factory=dict)  # rel -> (data, mode)
    deletes: list[str] = field(default_factory=list)
    originals: dict[str, bytes | None] = field(default_factory=dict)  # None: did not exist
    changes: list[dict[str, Any]] = field(default_factory=list)  # for the result


@dataclass
class _Claimed:
    rel: str
    shown: str
    mode: int | None  # permission bits of the file as found; None when it does not exist


def _read_original(location: Location, shown: str, limit: int) -> bytes | None:
    if location.stat is None:
        return None
    if stat.S_ISDIR(location.stat.st_mode):
        raise PatchError(f"{shown} is a folder, not a file")
    fd = location.open_read()
    try:
        check_regular(fd, shown)
        return read_bytes(fd, limit, shown)
    finally:
        os.close(fd)


#: the config key of the limit on what one patch holds
MAX_PATCH_KEY = "plugins.nexus.tool.file.max_patch_bytes"


def plan(ws: Workspace, ops: Sequence[FileOp], max_file_bytes: int, max_patch_bytes: int) -> Plan:
    """Every path claimed (inside the workspace, not protected), every file read and every new
    content worked out, each file within `max_file_bytes` and all of them together within
    `max_patch_bytes`; nothing is written."""
    result = Plan()
    touched: set[str] = set()
    held = 0

    def hold(size: int) -> None:
        nonlocal held
        held += size
        if held > max_patch_bytes:
            raise PatchError(f"the patch would hold more than max_patch_bytes={max_patch_bytes} ({MAX_PATCH_KEY}) "
                             "of files read and written, the most one apply_patch holds; nothing was changed. "
                             "Split it into smaller patches")

    def claim(requested: str) -> _Claimed:
        try:
            location = ws.locate(requested)
        except (FileNotFoundError, NotADirectoryError):
            # its folder does not exist (yet): a new file, made with its folders at commit
            rel = ws.relative(requested)
            ws.guard(rel, requested)
            ws.protect(ws.real_of_new(rel), rel)  # `link/new/x`, link -> .git: refused now, not at commit
            original, mode = None, None
        else:
            try:
                rel = location.rel
                original = _read_original(location, ws.show(rel), max_file_bytes)
                mode = stat.S_IMODE(location.stat.st_mode) if location.stat is not None else None
            finally:
                location.close()
        shown = ws.show(rel)
        if rel in touched:
            raise PatchError(f"{shown} appears twice in the patch; put all its changes in one section")
        touched.add(rel)
        result.originals[rel] = original
        hold(len(original or b""))
        return _Claimed(rel, shown, mode)

    for op in ops:
        claimed = claim(op.path)
        rel, shown = claimed.rel, claimed.shown
        exists = result.originals[rel] is not None
        if op.kind == "add":
            if exists:
                raise PatchError(f"Add File {shown}: it already exists; use Update File to change it")
            added = "".join(line + "\n" for line in op.content)  # no larger than the patch's own text
            result.writes[rel] = (encoded(added, shown, max_file_bytes, would="Add File"), None)
            hold(len(result.writes[rel][0]))
            result.changes.append({"action": "add", "path": shown, "moved_to": None})
        elif op.kind == "delete":
            if not exists:
                raise PatchError(f"Delete File {shown}: no such file")
            result.deletes.append(rel)
            result.changes.append({"action": "delete", "path": shown, "moved_to": None})
        else:
            original = result.originals[rel]
            if original is None:
                raise PatchError(f"Update File {shown}: no such file (use Add File to create it)")
            new_text = apply_hunks(decode_text(original, shown), op.hunks, shown, max_file_bytes)
            data = encoded(new_text, shown, max_file_bytes, would="the patch")
            hold(len(data))
            if op.move_to is None:
                result.writes[rel] = (data, None)
                result.changes.append({"action": "update", "path": shown, "moved_to": None})
                continue
            target = claim(op.move_to)
            if result.originals[target.rel] is not None:
                raise PatchError(f"Move to {target.shown}: it already exists")
            result.writes[target.rel] = (data, claimed.mode)
            result.deletes.append(rel)
            result.changes.append({"action": "update", "path": shown, "moved_to": target.shown})
    return result


# -- 3. commit ------------------------------------------------------------------------------


def _in_place(ws: Workspace, rel: str, dir_fd: int) -> Location:
    """A Location for `rel` in its folder's fd, as it is now (not following a symlink)."""
    name = rel.rpartition("/")[2]
    try:
        found: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        found = None
    return Location(dir_fd, name, rel, found)


def _restore(ws: Workspace, rel: str, original: bytes | None) -> None:
    with ws.in_folder(rel.rpartition("/")[0]) as dir_fd:
        if original is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(rel.rpartition("/")[2], dir_fd=dir_fd)
        else:
            atomic_write(_in_place(ws, rel, dir_fd), original)


def _undo(ws: Workspace, staged: dict[str, str], created: list[str]) -> None:
    """Remove staged temporary files and the folders made for them (deepest first)."""
    for rel, tmp in staged.items():
        with contextlib.suppress(OSError, FileToolError), ws.in_folder(rel.rpartition("/")[0]) as dir_fd:
            discard(_in_place(ws, rel, dir_fd), tmp)
    for folder in sorted(created, key=lambda p: p.count("/"), reverse=True):
        parent, _, name = folder.rpartition("/")
        with contextlib.suppress(OSError, FileToolError), ws.in_folder(parent) as dir_fd:
            os.rmdir(name, dir_fd=dir_fd)


def commit(ws: Workspace, done_plan: Plan) -> None:
    """Make the plan true on disk, or leave the disk as it was and raise PatchError.

    Each file's folder is opened beneath the workspace when it is staged and again when it is
    renamed into place, so no fd is held per file (a patch of thousands of files is fine)."""
    staged: dict[str, str] = {}  # real rel of the target -> name of its staged file, beside it
    created: list[str] = []
    try:
        for rel, (data, mode) in done_plan.writes.items():
            location = ws.locate(rel, create_parents=True)
            try:
                created.extend(location.created)
                if location.rel != rel:  # a symlink appeared at the target since the plan
                    raise FileToolError(f"{ws.show(rel)} changed while the patch was applied")
                staged[rel] = stage(location, data, mode)
            finally:
                location.close()
    except ProtectedPath:  # a symlink put in since the plan leads to a protected path
        _undo(ws, staged, created)
        raise
    except (OSError, FileToolError) as exc:
        _undo(ws, staged, created)
        why = f"cannot write {exc.filename}: {exc.strerror}" if isinstance(exc, OSError) else str(exc)
        raise PatchError(f"{why}; nothing was changed") from None

    finished: list[str] = []
    try:
        for rel, tmp in list(staged.items()):
            with ws.in_folder(rel.rpartition("/")[0]) as dir_fd:
                commit_staged(_in_place(ws, rel, dir_fd), tmp)
            del staged[rel]
            finished.append(rel)
        for rel in done_plan.deletes:
            with ws.in_folder(rel.rpartition("/")[0]) as dir_fd:
                os.unlink(rel.rpartition("/")[2], dir_fd=dir_fd)
            finished.append(rel)
    except (OSError, FileToolError) as exc:
        for rel in reversed(finished):
            with contextlib.suppress(OSError, FileToolError):
                _restore(ws, rel, done_plan.originals[rel])
        _undo(ws, staged, created)
        where = exc.filename if isinstance(exc, OSError) else None
        why = f"cannot change {where}: {exc.strerror}" if isinstance(exc, OSError) else str(exc)
        raise PatchError(f"{why}; every change was undone") from None


# -- the tool -------------------------------------------------------------------------------

PATCH_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "patch": {"type": "string", "minLength": 1,
                  "description": "The whole patch, from '*** Begin Patch' to '*** End Patch'."},
    },
    "required": ["patch"],
    "additionalProperties": False,
}

PATCH_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "changes": {"type": "array", "items": {
            "type": "object",
            "properties": {
                "action": {"enum": ["add", "update", "delete"]},
                "path": {"type": "string", "description": "relative to the workspace root"},
                "moved_to": {"type": ["string", "null"], "description": "new path, for a moved file"},
            },
            "required": ["action", "path", "moved_to"],
            "additionalProperties": False,
        }},
    },
    "required": ["changes"],
    "additionalProperties": False,
}

PATCH_DESCRIPTION = """\
Add, change, move and delete files in the workspace with one patch. Either every file changes or none does.

*** Begin Patch
*** Add File: path/new.txt
+each line of the new file, prefixed with +
*** Update File: path/old.py
*** Move to: path/renamed.py   (optional)
@@ def greet():   (optional: a line above the change, to find the right place)
 a context line, prefixed with a space
-a line to remove
+a line to add
*** Delete File: path/gone.txt
*** End Patch

Give about 3 lines of unchanged context around each change, copied exactly from the file. Several
@@ hunks per file are applied in order, top to bottom. Paths are relative to the workspace root."""


def apply_patch(ws: Workspace, settings: Settings, arguments: dict[str, Any]) -> ToolResult:
    ops = parse(arguments["patch"])
    if not ops:
        raise PatchError("the patch has no file sections: nothing to do")
    the_plan = plan(ws, ops, settings.max_file_bytes, settings.max_patch_bytes)
    commit(ws, the_plan)
    marks = {"add": "A", "update": "M", "delete": "D"}
    lines = [f"{marks[c['action']]} {c['path']}" + (f" -> {c['moved_to']}" if c["moved_to"] else "")
             for c in the_plan.changes]
    count = len(the_plan.changes)
    summary = f"applied the patch: {count} file{'s' if count != 1 else ''} changed\n" + "\n".join(lines)
    return ToolResult(id="", name="", output=summary, output_structured={"changes": the_plan.changes})
