"""The zygote: a helper process that imports the runtime once and forks one child per script.
`main.py` is all of it; its host side is launchers/zygote.py."""
