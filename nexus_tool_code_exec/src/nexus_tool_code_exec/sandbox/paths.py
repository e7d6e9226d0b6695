"""The read-only paths the child's Python runtime needs, for Landlock's rules (the ``fs`` layer)."""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import sysconfig
from collections.abc import Iterable

#: packages the child imports lazily from disk, besides the standard library: its runtime
#: (attrs and cattrs for `tools`, this package), and nexus_core, which this package's
#: __init__ imports
RUNTIME_PACKAGES: tuple[str, ...] = ("attrs", "attr", "cattrs", "cattr", "nexus_core", "nexus_tool_code_exec")


@functools.cache
def _runtime_read_paths_cached(extra: tuple[str, ...]) -> tuple[str, ...]:
    paths: list[str] = []

    def add(p: str | None) -> None:
        if p:
            p = os.path.abspath(p)
            if os.path.exists(p) and p not in paths:
                paths.append(p)

    # The stdlib (lib-dynload lives inside it on CPython builds) and the platform stdlib.
    cfg = sysconfig.get_paths()
    add(cfg.get("stdlib"))
    add(cfg.get("platstdlib"))
    # sys.path entries inside the interpreter's prefixes: site-packages, lib-dynload, pythonXY.zip.
    prefixes = {os.path.abspath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                             sys.base_exec_prefix)}
    for entry in sys.path:
        if entry and any(os.path.abspath(entry).startswith(pre + os.sep) for pre in prefixes):
            add(entry)
    # The sys.path entry that holds each runtime package (an editable install's src/ folder, or
    # site-packages). Found without importing anything.
    for name in RUNTIME_PACKAGES + extra:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            continue
        if spec.submodule_search_locations:
            for loc in spec.submodule_search_locations:
                add(os.path.dirname(loc))
        elif spec.origin and os.path.isabs(spec.origin):
            add(os.path.dirname(spec.origin))
    # What the dynamic loader opens when an extension module (say _lzma, _ctypes) is first
    # imported and pulls in a shared library not loaded yet: its cache and the system lib dirs.
    add("/etc/ld.so.cache")
    multiarch = getattr(sys.implementation, "_multiarch", None)
    for d in ("/lib", "/usr/lib"):
        if multiarch:
            add(f"{d}/{multiarch}")
    for d in ("/lib64", "/usr/lib64"):
        add(d)
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        add(d)
    # The shared libraries already mapped (libpython, libc...) need no rule: the loader finds
    # them by soname without opening them again.
    add("/dev/null")
    add("/dev/urandom")
    return tuple(paths)


def runtime_read_paths(extra_modules: Iterable[str] = ()) -> tuple[str, ...]:
    """The read-only paths the child's Python runtime needs: stdlib, lib-dynload, site-packages
    and the folders holding attrs/cattrs/nexus_core/nexus_tool_code_exec (plus `extra_modules`),
    the loader's cache and system library folders, /dev/null and /dev/urandom. Only existing
    paths; computed once per process."""
    return _runtime_read_paths_cached(tuple(extra_modules))
