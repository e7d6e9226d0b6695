"""The host side of run_code: everything here runs in the process that owns the Nexus.

    engine.py     `CodeExec`: the tool, its settings, and a run top to bottom
    settings.py   `CodeExecSettings`: the plugin's config section (its schema derived from it)
    check.py      the AST check a script passes before anything runs
    bindings.py   the `tools` module, generated as source from the registry
    runner.py     serving one run: the protocol, the tool calls, the end of the child
    streaming.py  the run's output (streamed and capped) and its calls (calls.jsonl)
    journal.py    each inner call's result as it completes (journal.jsonl), for a run resumed
                  after a suspension or its host's death, and replay
    session.py    session folders: a run persisted
    watchdog.py   the wall-clock limit
    fastpath.py   the latency tricks: the run's child (`Seat`), placement, polling, reader threads
    plugin.py     `CodeExecPlugin`, the plugin object
    hookspecs.py  run_code's own hooks (the `nexus.hookspecs` entry point names this module)
    events.py     their payloads: CodeExecRequest, CodeExecChunk, CodeExecResult
"""
