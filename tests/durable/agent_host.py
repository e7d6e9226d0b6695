"""An agent host for the durable agent tests (`python agent_host.py CONFIG.json run|resume [ID]`):
`run` starts a session, prints its id as a JSON line, and sends it one task; `resume ID` goes on
with session ID's interrupted task (`AgentPlugin.resume`). Each prints the task's result as a
JSON line. `recover` is a long-lived embedder: it calls `Nexus.recover()`, prints
{"recovering": true} and stays until its stdin closes, then closes the Nexus. The tools and the gate are durable_host's: `append` (a line a call), a gate asking
about each text that starts with "ask"; no approver: an approval waits for another process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from durable_host import AskAboutSome, append

from nexus_core import Nexus


def main() -> None:
    config, mode, *rest = sys.argv[1:]
    with Nexus(json.loads(Path(config).read_text()), plugins=[AskAboutSome()], tools=[append]) as nx:
        agent = nx.plugin("nexus.agent")
        if mode == "recover":
            nx.recover()
            print(json.dumps({"recovering": True}), flush=True)
            sys.stdin.read()
            return
        if mode == "run":
            with agent.session() as session:
                print(json.dumps({"session": session.id}), flush=True)
                result = session.send("append first, then ask-agent")
        else:
            result = agent.resume(rest[0])
        print(json.dumps({"text": result.text, "stop_reason": result.stop_reason, "turns": result.turns,
                          "error": result.error}), flush=True)


if __name__ == "__main__":
    main()
