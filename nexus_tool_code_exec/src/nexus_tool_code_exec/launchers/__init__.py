"""Launchers (run in the host): how a script's process is made.

    base.py     `Launcher`, the interface every launcher implements in full, and `Child`
    spawn.py    a fresh interpreter per script
    zygote.py   the host's side of the warm zygote (zygote/ is the zygote process itself)
    pool.py     the sandbox pool of a process: the zygotes every Nexus of it shares
    spares.py   the children a zygote forks ahead, which the host holds
    cleanup.py  removing what a run leaves on disk (scratch folders, whatever a script made
                there), off the run's thread; the host's session folders use it too

A launcher depends only on protocol.py, sandbox/ and the modules here, never on host/: the engine
and the runner reach it through `Launcher` and `Child` alone, so that another launcher (a pool
shared by many sessions, a process on another machine) fits behind the same seam.
tests/code_exec/test_layout.py checks the imports.
"""
