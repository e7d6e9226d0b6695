"""The demo `scripts/demo` runs: a Nexus on the built-in defaults, doing real work."""

from __future__ import annotations

import tempfile

from nexus_core import Nexus

with tempfile.TemporaryDirectory() as ws, Nexus.from_config({"workspace": ws}) as nx:
    print("plugins:", ", ".join(p.name for p in nx.plugins() if p.status == "active"))
    print("tools:", ", ".join(t.name for t in nx.tools()) or "(none yet)")
