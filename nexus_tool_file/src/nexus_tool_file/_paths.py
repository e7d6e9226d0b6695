"""Confinement: every path a file tool touches resolves inside the workspace.

One rule covers `..`, absolute paths, symlinked folders and a symlink as the last component:
resolve the path with `os.path.realpath` (every symlink followed, for the parts that exist) and
check that the result lies inside the workspace's own real path. Walking (glob, grep) never
descends into symlinked folders and skips symlinks that lead out.

The check is made when a call starts. It guards against a model naming paths outside; it is not
a defence against another process swapping folders for symlinks while the call runs.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path


class FileToolError(Exception):
    """An expected failure: the message is what the model reads, so it says what and where."""


class OutsideWorkspace(FileToolError):
    """A path that resolves outside the workspace."""


@dataclass(frozen=True)
class Workspace:
    """The folder the file tools may touch, held as its real path."""

    root: Path

    @classmethod
    def at(cls, folder: str | os.PathLike[str]) -> Workspace:
        return cls(Path(os.path.realpath(folder)))

    def contains(self, real: Path) -> bool:
        return real.is_relative_to(self.root)

    def resolve(self, path: str) -> Path:
        """The real path that `path` (relative to the root, or absolute) names, or OutsideWorkspace.

        The path need not exist: realpath resolves what exists and appends the rest, which a
        write then creates as plain folders inside.
        """
        if "\0" in path:
            raise FileToolError(f"{path!r}: a path cannot contain a NUL character")
        lexical = Path(os.path.normpath(self.root / path))
        real = Path(os.path.realpath(lexical))
        if self.contains(real):
            return real
        if not self.contains(lexical):
            raise OutsideWorkspace(f"{path}: outside the workspace ({self.root}); use a path inside it")
        raise OutsideWorkspace(f"{path}: leads outside the workspace ({self.root}) through a symlink, "
                               f"to {real}")

    def show(self, real: Path) -> str:
        """How results name a path: relative to the root, with `/`, `.` for the root itself."""
        return real.relative_to(self.root).as_posix() if real != self.root else "."

    def inside(self, path: Path) -> bool:
        """Whether `path` (which may be a symlink) resolves inside the workspace."""
        return self.contains(Path(os.path.realpath(path)))

    def walk_files(self, start: Path, exclude: Collection[str] = (), max_depth: int | None = None) -> Iterator[Path]:
        """Files under `start` (itself resolved inside), in sorted order, as paths under `start`.

        Symlinked folders are not entered (they could lead out, or loop); symlinked files are
        yielded only when they resolve inside. Folders named in `exclude` are skipped.
        `max_depth` 1 means the files directly in `start`.
        """
        base_depth = len(start.parts)
        for folder, dirnames, filenames in os.walk(start):  # os.walk does not follow symlinks
            here = Path(folder)
            depth = len(here.parts) - base_depth + 1
            dirnames[:] = sorted(d for d in dirnames if d not in exclude
                                 and not os.path.islink(here / d)
                                 and (max_depth is None or depth < max_depth))
            for name in sorted(filenames):
                path = here / name
                if not os.path.islink(path) or (self.inside(path) and path.is_file()):
                    yield path
