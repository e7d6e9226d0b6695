"""`python -m nexus_core`: the `nexus` command line."""

from nexus_core.cli import run

run()
