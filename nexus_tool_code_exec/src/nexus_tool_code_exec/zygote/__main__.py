"""`python -I -m nexus_tool_code_exec.zygote CTRL_FD ALLOWED POLICY SCRATCH_ROOT SPARES`, as
launchers/zygote.py starts it."""

import json
import sys

from .main import zygote_main

zygote_main(int(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
