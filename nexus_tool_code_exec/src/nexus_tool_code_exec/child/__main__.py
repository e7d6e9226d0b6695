"""`python -I -m nexus_tool_code_exec.child POLICY_JSON`: a spawned child (launchers/spawn.py)."""

from .runtime import main

main()
