"""The machine's sandbox pool server, as a module one can start by itself:
`python -m nexus_tool_code_exec.poolserver [--folder F] [--idle S] [--foreground]` (see
launchers/machine.py). A process with `pool: machine` starts it on first use."""
