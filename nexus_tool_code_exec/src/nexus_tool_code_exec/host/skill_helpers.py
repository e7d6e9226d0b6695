"""The helpers of the active skills, read for scripts to import as `skills.<name>` (runs in the
host).

A skill's helpers are the `.py` files at the top of its folder (not `test_*.py`). The host reads
them, as whatever user it runs as, and hands their text to every script: so a helper is opened
only as a regular file inside the skill's folder, never through a symbolic link (the folder
itself is the one nexus_core found in the configured skill folders; the `read` tool refuses such
a link the same way), and only so much is read: MAX_HELPER_BYTES a file, MAX_HELPER_FILES a skill,
MAX_HELPERS_BYTES for all the active skills together. A skill that breaks a rule is still
importable, as a module that raises ImportError saying which rule and which file: a script that
does not import it is not affected, one that does learns why.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from nexus_core import SkillContent

log = logging.getLogger("nexus_tool_code_exec")

#: the largest helper file, in bytes
MAX_HELPER_BYTES = 256 * 1024
#: the most helper files one skill may have
MAX_HELPER_FILES = 32
#: the most bytes of helpers all the active skills may have together (they go into every START)
MAX_HELPERS_BYTES = 1024 * 1024

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

Helpers = dict[str, list[tuple[str, str]]]


class HelperRefused(Exception):
    """A skill's helpers broke a rule; the message names it and the file."""


def _refused(module: str, reason: str) -> list[tuple[str, str]]:
    """A module that raises ImportError with `reason` when a script imports it."""
    return [("__refused__.py", f"raise ImportError({f'skills.{module}: {reason}'!r})\n")]


def _read_one(folder: int, name: str) -> str:
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=folder)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symbolic link
            raise HelperRefused(f"helper {name!r} is a symbolic link; helpers must be files in the skill's "
                                "folder") from None
        raise HelperRefused(f"helper {name!r} cannot be read: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise HelperRefused(f"helper {name!r} is not a regular file")
        if st.st_size > MAX_HELPER_BYTES:
            raise HelperRefused(f"helper {name!r} is {st.st_size} bytes, more than the {MAX_HELPER_BYTES} a helper "
                                "may be")
        data = os.read(fd, MAX_HELPER_BYTES + 1)
        if len(data) > MAX_HELPER_BYTES:
            raise HelperRefused(f"helper {name!r} is more than the {MAX_HELPER_BYTES} bytes a helper may be")
    finally:
        os.close(fd)
    return data.decode("utf-8", errors="replace")


def _names(folder: int) -> list[str]:
    with os.scandir(folder) as entries:
        return sorted(e.name for e in entries
                      if e.name.endswith(".py") and not e.name.startswith(("test_", ".")))


def read_helpers(skills: Iterable[SkillContent], module_name: dict[str, str]) -> Helpers:
    """`{module: [(file name, source), ...]}` for the active skills with helpers; `module_name`
    maps a skill's name to its module's."""
    helpers: Helpers = {}
    total = 0
    for skill in skills:
        module = module_name[skill.name]
        where = Path(skill.path)
        if where.is_file():
            where = where.parent
        try:
            folder = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            log.warning("run_code: the folder of skill %s cannot be opened: %s", skill.name, exc.strerror)
            continue
        try:
            names = _names(folder)
            if not names:
                continue
            if len(names) > MAX_HELPER_FILES:
                raise HelperRefused(f"{len(names)} helper files, more than the {MAX_HELPER_FILES} a skill may have")
            files = []
            for name in names:
                source = _read_one(folder, name)
                total += len(source.encode("utf-8", "replace"))
                if total > MAX_HELPERS_BYTES:
                    raise HelperRefused(f"the active skills' helpers are more than the {MAX_HELPERS_BYTES} bytes "
                                        f"they may be together (reached at {name!r})")
                files.append((name, source))
            helpers[module] = files
        except HelperRefused as exc:
            log.warning("run_code: the helpers of skill %s are refused: %s", skill.name, exc)
            helpers[module] = _refused(module, str(exc))
        except OSError as exc:
            log.warning("run_code: the helpers of skill %s cannot be read: %s", skill.name, exc.strerror)
            helpers[module] = _refused(module, f"its folder cannot be read: {exc.strerror}")
        finally:
            os.close(folder)
    return helpers
