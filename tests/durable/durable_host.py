"""A host process for the durable tests (run with `python durable_host.py CONFIG MODE ...`).

    call TEXT...  call `append` once per TEXT (a gate asks about each text that starts with
                  "ask"; the others run at once), print each result as one JSON line, exit
    stay          the same without calling `Nexus.recover()` (config `recover: start` takes over)
    serve         start the Nexus as a long-lived host (`Nexus.recover()`: it takes over what
                  a killed host left), print "ready",
                  and stay until stdin closes

`append(path, text)` appends the text as a line of the file `path` and returns the file's line
count: each side effect is one line, so a test counts them. When the environment names a file
in NEXUS_TEST_HOLD, it then waits for ever (a call in flight when its host is killed), after
writing its idempotency key to that file.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from nexus_core import Ask, CallContext, Nexus, hookimpl, native_tool


class AskAboutSome:
    @hookimpl
    def nexus_before_tool_invoke(self, call, tool):  # type: ignore[no-untyped-def]
        if call.name == "append" and str(call.arguments.get("text", "")).startswith("ask"):
            return Ask(f"append {call.arguments['text']!r}?")
        return None


def _append(arguments: dict, ctx: CallContext) -> str:  # type: ignore[type-arg]
    path = Path(arguments["path"])
    with path.open("a", encoding="utf-8") as f:
        f.write(arguments["text"] + "\n")
    hold = os.environ.get("NEXUS_TEST_HOLD")
    if hold:
        Path(hold).write_text(ctx.idempotency_key, encoding="utf-8")
        while True:
            time.sleep(1)
    return str(len(path.read_text(encoding="utf-8").splitlines()))


append = native_tool("append", "Append a line to a file.", {
    "type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
    "required": ["path", "text"]}, _append, ctx=True)


def main() -> None:
    config, mode, *rest = sys.argv[1:]
    with Nexus.from_config(config, plugins=[AskAboutSome()], tools=[append]) as nx:
        if mode == "call":
            out = Path(os.environ["NEXUS_TEST_OUT"])
            for text in rest:
                result = nx.invoke("append", {"path": str(out), "text": text})
                print(json.dumps({"text": text, "output": result.output, "error": result.error,
                                  "metadata": result.metadata}), flush=True)
        elif mode in ("serve", "stay"):
            if mode == "serve":
                nx.recover()  # a long-lived host: it takes over what killed hosts left
            print("ready", flush=True)
            sys.stdin.read()
        else:
            raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
