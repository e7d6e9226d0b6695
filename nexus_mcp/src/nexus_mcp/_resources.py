"""What `nexus mcp serve` offers as MCP resources, and what a client may read through them.

- **Skills' files**: `skill://<skill>/SKILL.md` and `skill://<skill>/<path>` for each file the
  skill lists (`SkillContent.resources`: what its folder holds, hidden files and links out of
  the folder left out, as the core lists them for a model).
- **Runs' records**, for the run_code calls *this client* made through this server:
  `nexus-run://<call id>/script.py`, `stdout.txt`, `result.json`, `error.txt`, `calls.jsonl`,
  from the run's session folder. A run some other client made, or one made before this
  connection, is not listed and cannot be read; nor can a call id the server never gave.

A URI is never a path: it is looked up in what the server lists right now (the skill by name,
the file by its listed name; the run by the call id it remembers), and the file opened is the
one that lookup gives: a run's file in its folder without following a symbolic link at any
step (a link put in a run's record, or in place of its folder, since is refused), a skill's
file where it leads only when that is inside the skill's folder; read up to `MAX_READ_BYTES`. So no URI reaches a file outside
what is listed, whatever `..`, `%2F` or links it holds.
"""

from __future__ import annotations

import base64
import mimetypes
import os
import stat
import threading
import weakref
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import mcp_types as types
from mcp.shared.exceptions import MCPError

from nexus_core import Nexus

#: the largest file a resource read returns, in bytes
MAX_READ_BYTES = 4 << 20
#: the files of a run's record, in the order listed, with their MIME types
RUN_FILES = {"script.py": "text/x-python", "stdout.txt": "text/plain", "result.json": "application/json",
             "error.txt": "text/plain", "calls.jsonl": "application/jsonl"}
#: runs remembered per connection (the oldest forgotten first)
MAX_RUNS = 200
#: the JSON-RPC error of a resource that does not exist (the MCP spec's code)
RESOURCE_NOT_FOUND = -32002


def _not_found(uri: str, why: str) -> MCPError:
    return MCPError(RESOURCE_NOT_FOUND, f"resource not found: {uri} ({why})")


class RunRecords:
    """The run_code runs each connection made: connection key -> {call id: record folder}."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, Any] = {}  # call id -> connection key, while the call runs
        self._runs: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()

    def expect(self, call_id: str, connection: Any) -> None:
        with self._lock:
            self._pending[call_id] = connection

    def done(self, call_id: str) -> None:
        with self._lock:
            self._pending.pop(call_id, None)

    def started(self, call_id: str, folder: str | None) -> None:
        """run_code announced a run (`nexus_code_exec_request`): keep its folder if one of ours."""
        if folder is None:
            return
        with self._lock:
            connection = self._pending.get(call_id)
            if connection is None:
                return
            runs = self._runs.setdefault(connection, {})
            runs[call_id] = folder
            while len(runs) > MAX_RUNS:
                del runs[next(iter(runs))]

    def forget(self, connection: Any) -> None:
        with self._lock:
            self._runs.pop(connection, None)

    def of(self, connection: Any) -> dict[str, str]:
        with self._lock:
            return dict(self._runs.get(connection, {}))


def list_resources(nexus: Nexus, runs: dict[str, str]) -> list[types.Resource]:
    out: list[types.Resource] = []
    for skill in _skills(nexus):
        out.append(types.Resource(uri=_skill_uri(skill.name, "SKILL.md"), name=f"{skill.name}/SKILL.md",
                                  description=skill.description or None, mime_type="text/markdown"))
        for relative in skill.resources:
            out.append(types.Resource(uri=_skill_uri(skill.name, relative), name=f"{skill.name}/{relative}",
                                      mime_type=_mime(relative)))
    for call_id, folder in runs.items():
        for name, mime in RUN_FILES.items():
            if os.path.isfile(os.path.join(folder, name)):
                out.append(types.Resource(uri=f"nexus-run://{quote(call_id, safe='')}/{name}",
                                          name=f"run {call_id} {name}", mime_type=mime))
    return out


def read_resource(nexus: Nexus, runs: dict[str, str], uri: str) -> types.ReadResourceResult:
    scheme, sep, rest = uri.partition("://")
    if not sep or "/" not in rest:
        raise _not_found(uri, "this server's resources are skill://<skill>/<file> and nexus-run://<call id>/<file>")
    key, _, name = rest.partition("/")
    key, name = unquote(key), unquote(name)
    if scheme == "skill":
        skill = next((s for s in _skills(nexus) if s.name == key), None)
        if skill is None:
            raise _not_found(uri, f"no skill {key!r}")
        folder = Path(skill.path)  # the skill's folder
        if name != "SKILL.md" and name not in skill.resources:
            raise _not_found(uri, f"skill {key!r} lists no file {name!r}")
        return _read(uri, folder, name, "text/markdown" if name == "SKILL.md" else _mime(name), links_inside=True)
    if scheme == "nexus-run":
        folder_text = runs.get(key)
        if folder_text is None:
            raise _not_found(uri, "no run_code run of that call id was made by this client through this server")
        if name not in RUN_FILES:
            raise _not_found(uri, f"a run's record holds {', '.join(RUN_FILES)}")
        return _read(uri, Path(folder_text), name, RUN_FILES[name])
    raise _not_found(uri, f"unknown scheme {scheme!r}")


def _read(uri: str, folder: Path, relative: str, mime: str, *, links_inside: bool = False) -> types.ReadResourceResult:
    """The file `relative` of `folder`, not through a symbolic link: a run's record is opened in
    its folder (itself not a link) without following one at any step; a skill's file, which may
    be a link to another file of its folder, is opened where the link leads only when that is
    inside the folder (`links_inside`)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0)
    try:
        if links_inside:
            real, inside = os.path.realpath(folder / relative), os.path.realpath(folder)
            if not real.startswith(inside.rstrip(os.sep) + os.sep):
                raise _not_found(uri, "it leads out of its folder")
            fd = os.open(real, flags)
        else:
            where = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                fd = os.open(relative, flags, dir_fd=where)
            finally:
                os.close(where)
    except OSError as exc:
        raise _not_found(uri, exc.strerror or str(exc)) from None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _not_found(uri, "not a file")
        data = file.read(MAX_READ_BYTES + 1)
    if len(data) > MAX_READ_BYTES:
        raise MCPError(types.INVALID_PARAMS, f"{uri} is larger than {MAX_READ_BYTES} bytes, the most a read returns")
    if mime.startswith("text/") or mime in ("application/json", "application/jsonl"):
        try:
            return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type=mime,
                                                                                 text=data.decode("utf-8"))])
        except UnicodeDecodeError:
            pass
    return types.ReadResourceResult(contents=[types.BlobResourceContents(
        uri=uri, mime_type=mime if not mime.startswith("text/") else "application/octet-stream",
        blob=base64.b64encode(data).decode("ascii"))])


def _skills(nexus: Nexus) -> list[Any]:
    if nexus.tool("skill") is None:
        return []
    from nexus_core.skills import list_skills

    return list_skills(nexus)


def _skill_uri(skill: str, relative: str) -> str:
    return f"skill://{quote(skill, safe='')}/{quote(relative, safe='/')}"


def _mime(name: str) -> str:
    if name.endswith(".md"):
        return "text/markdown"
    guessed, _ = mimetypes.guess_type(name, strict=False)
    return guessed or "application/octet-stream"
