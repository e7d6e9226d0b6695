"""Launchers (run in the host): how a script's process is made.

    base.py    `Launcher`, the interface every launcher implements in full, and `Child`
    spawn.py   a fresh interpreter per script
    zygote.py  the host's side of the warm zygote (zygote/ is the zygote process itself)
"""
